# roll-agentic: the two quick-start commands and a few helpers.
# Each target does its own set-up first (idempotent: a second call skips it).
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: setup run test test-fast lint bench clean

setup:
	@bash scripts/setup.sh
	@$(PY) -m roll_agentic.cli model tiny --out .cache/tiny-model >/dev/null

run: setup  ## train the default two-task agent on this machine (CPU is fine)
	$(VENV)/bin/roll-agentic train $(ARGS)

test: setup  ## the whole test suite, slow end-to-end tests included
	$(PY) -m pytest -q --durations=25 tests $(ARGS)

test-fast: setup  ## everything but the tests marked slow
	$(PY) -m pytest -q -m "not slow" tests $(ARGS)

bench: setup  ## list the benchmarks; run one with ARGS, e.g. make bench ARGS="engine --json"
	$(VENV)/bin/roll-agentic bench $(or $(ARGS),--help)

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf outputs .pytest_cache .ruff_cache
