"""End to end on Ray: jobs share one rollout node and one training node phase by phase.

One multiplexer, four jobs: two that run to the end, one whose rollout
worker is killed mid-phase (it fails; the others go on), one whose state
does not fit the residency budget (refused, with the reason). Status lists
them all. Behaviour only: no timing is asserted. Jobs evaluate (eval.every) as
solo runs do: one metrics row per step, eval metrics on the due steps only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import ray
import torch

from roll_agentic.config import RayConfig
from roll_agentic.hydra_config import load_config
from roll_agentic.mux import admission
from roll_agentic.mux.job_state import format_status
from roll_agentic.mux.multiplexer import multiplexer_actor
from roll_agentic.mux.mux_config import JobSpec, MuxConfig

pytestmark = pytest.mark.slow

TASK = ('tasks=[{name:guess,env_id:"envs.guess_number:GuessNumber",env_kwargs:{low:1,high:8},max_turns:2,'
        'reward:guess_number,group_size:4,max_new_tokens:4}]')


def _job(name: str, steps: int, *extra: str):
    cfg = load_config(["engine=hf", "reward=local", "algo=sync", f"trainer.total_steps={steps}",
                       "trainer.save_every=2", "algo.groups_per_step=2", "rollout.num_workers=1",
                       "rollout.groups_in_flight=2", "telemetry.tensorboard=false", TASK, *extra])
    return cfg, JobSpec(name, slo=3.0)


@pytest.fixture
def ray_local():
    from roll_agentic.cluster import init_ray

    started = init_ray(RayConfig(num_cpus=8))
    yield
    if started:
        ray.shutdown()


EVAL_KEYS = ("eval/guess/mean", "eval/guess/success", "eval/guess/turns", "time/eval_s")


def _evaluated_steps(rows: list[dict]) -> list[int]:
    """The steps whose row holds an evaluation (all its metrics), each step logged once."""
    assert len({r["step"] for r in rows}) == len(rows), [r["step"] for r in rows]
    for r in rows:
        assert all(k in r for k in EVAL_KEYS) or not any(k in r for k in EVAL_KEYS), r
    return [r["step"] for r in rows if "eval/guess/mean" in r]


def _wait_for(pred, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_jobs_share_pools_a_crash_stalls_nobody_and_an_oversized_job_is_refused(
        ray_local, tiny_model_path, tmp_path):
    cfg_a, _ = _job("a", 4)
    need = admission.estimated_state_bytes(tiny_model_path, cfg_a)
    # A node lending less host memory than one job's state refuses it, with the reason, before any work.
    small = MuxConfig(name="small", residency_budget_bytes=need - 1)
    tiny_mux = multiplexer_actor().remote(small, str(tmp_path / "small"), tiny_model_path)
    rec = ray.get(tiny_mux.submit.remote(*_job("big", 2)))
    assert rec["state"] == "refused" and "exceeds the residency budget" in rec["reason"]
    assert [j["state"] for j in ray.get(tiny_mux.status.remote())["jobs"]] == ["refused"]
    ray.kill(tiny_mux)

    m = MuxConfig(name="t", residency_budget_bytes=need * 4, profile_margin=1.0, slo_headroom=0.0,
                  warm_switch_s=0.0, phase_timeout_s=120.0)
    mux = multiplexer_actor().remote(m, str(tmp_path), tiny_model_path)
    ray.get(mux.start.remote())
    ray.get(mux.submit.remote(*_job("big", 2, "algo.alpha=1")))  # refused too: not synchronous

    victim_cfg, victim = _job("victim", 50)
    ray.get(mux.submit.remote(victim_cfg, victim))
    # a evaluates after step 3 (in its step-4 rollout phase) and after the last (a phase of
    # its own); b after every step, the first in its probe's second rollout phase.
    for name, steps, seed, every in (("a", 4, 1, 3), ("b", 4, 2, 1)):
        cfg, spec = _job(name, steps, f"trainer.seed={seed}", f"eval.every={every}", "eval.episodes=2")
        ray.get(mux.submit.remote(cfg, spec))

    def victim_in_rollout() -> bool:
        jobs = {j["name"]: j for j in ray.get(mux.status.remote())["jobs"]}
        return jobs["victim"]["phase"] in ("rollout", "probe-rollout")

    _wait_for(victim_in_rollout)
    assert ray.get(mux.inject_fault.remote("victim"))

    assert ray.get(mux.wait.remote(None, 400.0)), format_status(ray.get(mux.status.remote()))
    status = ray.get(mux.status.remote())
    jobs = {j["name"]: j for j in status["jobs"]}
    assert set(jobs) == {"big", "victim", "a", "b"}
    assert jobs["big"]["state"] == "refused" and "algo.alpha" in jobs["big"]["reason"]
    text = format_status(status)
    for name in jobs:
        assert any(line.strip().startswith(name) for line in text.splitlines())

    assert jobs["victim"]["state"] == "failed" and "rollout worker" in jobs["victim"]["reason"]
    for name in ("a", "b"):
        j = jobs[name]
        assert j["state"] == "done", j
        run = Path(j["run_dir"])
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3, 4]
        # On the job's own weights of that step (checked turn by turn, or the job fails).
        assert _evaluated_steps(rows) == {"a": [3, 4], "b": [1, 2, 3, 4]}[name]
        assert all(r["eval/guess/episodes"] + r["eval/guess/failed"] == 2 for r in rows if "time/eval_s" in r)
        # Sampled on the job's own weights, never the other's: the trainer's recompute agrees.
        assert all(r["train/logprob_diff"] < 1e-3 for r in rows)
        assert (run / "checkpoints" / "latest").read_text() == "step_000004"
        assert (run / "reward_curve.png").exists()
        assert j["cold_switch_s"] is not None  # admitted from its parked checkpoint
    # a and b both ran on the shared nodes, and the victim's crash left no holder behind
    assert all(n["holder"] is None for n in status["nodes"].values())
    intervals = ray.get(mux.result.remote())["intervals"]
    assert {i["job"] for i in intervals if i["node"] == "rollout0"} >= {"a", "b"}
    # The last step's evaluation held the rollout node, as a phase of its own.
    assert {i["job"] for i in intervals if i["kind"] == "eval"} == {"a", "b"}
    assert {i["node"] for i in intervals if i["kind"] == "eval"} == {"rollout0"}
    ray.get(mux.shutdown.remote())


def test_a_wedged_trainer_is_replaced_and_its_job_rolls_back_to_its_checkpoint(ray_local, tiny_model_path, tmp_path):
    """A train step that never answers (injected: the slot's third step blocks for an hour):
    after phase_timeout_s the node's trainer is replaced and the job goes back to its last
    checkpoint (step 2, parked by its probe) on the new one, takes step 3 again and ends
    done: each step logged once, its checkpoint at its last step. It used to fail, losing
    its steps, and before that every job queued behind the wedged call. It evaluates every
    2 steps: step 2's row, held from the probe to the first admitted rollout phase, keeps
    its evaluation through the roll-back."""
    from roll_agentic import faults

    cfg, spec = _job("wedged", 4, "eval.every=2", "eval.episodes=2")
    need = admission.estimated_state_bytes(tiny_model_path, cfg)
    m = MuxConfig(name="w", residency_budget_bytes=need * 2, profile_margin=1.0, slo_headroom=0.0,
                  warm_switch_s=0.0, phase_timeout_s=20.0)
    # Child actors (the trainer slots) inherit the multiplexer's runtime env: the fault reaches them.
    # Claimed once across processes (the dir): the replacement trainer does not hang again.
    env = {faults.ENV_SPEC: "train_hang:1:1:2", faults.ENV_HANG_S: "3600", faults.ENV_DIR: str(tmp_path / "faults")}
    (tmp_path / "faults").mkdir()
    mux = multiplexer_actor().options(runtime_env={"env_vars": env}).remote(m, str(tmp_path), tiny_model_path)
    ray.get(mux.start.remote())
    ray.get(mux.submit.remote(cfg, spec))
    assert ray.get(mux.wait.remote(None, 300.0)), format_status(ray.get(mux.status.remote()))
    status = ray.get(mux.status.remote())
    job = status["jobs"][0]
    assert job["state"] == "done", job
    assert len(job["rollbacks"]) == 1 and job["rollbacks"][0].startswith("step 2 -> 2: its trainer on train0 was "
                                                                         "restarted (wedged: train phase exceeded "
                                                                         "phase_timeout_s=20.0"), job["rollbacks"]
    assert all(n["holder"] is None for n in status["nodes"].values())
    assert status["trainer_restarts"] == {"train0": 1}
    text = format_status(status)
    assert "trainer restarted 1x" in text and "rolled back 1x (last: step 2 -> 2" in text
    assert [r["kind"] for r in faults.read_injected(tmp_path / "faults")] == ["train_hang"]
    run = Path(job["run_dir"])
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert _evaluated_steps(rows) == [2, 4]
    assert all(r["train/logprob_diff"] < 1e-3 for r in rows)  # step 3 sampled on step 2's weights again
    assert (run / "checkpoints" / "latest").read_text() == "step_000004"
    ray.get(mux.shutdown.remote())


def test_jobs_whose_state_a_lost_trainer_held_roll_back_and_finish(ray_local, tiny_model_path, tmp_path):
    """Two jobs share one training node and checkpoint only when their probe parks them
    (step 2). The slot's seventh step hangs: by then both have trained there since step 2
    (in most interleavings), so the job that found it wedged rolls back at once and the
    other at its next train phase, both to step 2; both end done, every step logged once."""
    from roll_agentic import faults

    jobs = [_job(name, 5, "trainer.save_every=100", f"trainer.seed={seed}") for name, seed in (("a", 1), ("b", 2))]
    need = admission.estimated_state_bytes(tiny_model_path, jobs[0][0])
    m = MuxConfig(name="r", residency_budget_bytes=need * 3, profile_margin=1.0, slo_headroom=0.0,
                  warm_switch_s=0.0, phase_timeout_s=20.0)
    env = {faults.ENV_SPEC: "train_hang:1:1:6", faults.ENV_HANG_S: "3600", faults.ENV_DIR: str(tmp_path / "faults")}
    (tmp_path / "faults").mkdir()
    mux = multiplexer_actor().options(runtime_env={"env_vars": env}).remote(m, str(tmp_path), tiny_model_path)
    ray.get(mux.start.remote())
    for cfg, spec in jobs:
        ray.get(mux.submit.remote(cfg, spec))
    assert ray.get(mux.wait.remote(None, 400.0)), format_status(ray.get(mux.status.remote()))
    status = ray.get(mux.status.remote())
    assert status["trainer_restarts"] == {"train0": 1}
    assert [r["kind"] for r in faults.read_injected(tmp_path / "faults")] == ["train_hang"]
    rolled = []
    for job in status["jobs"]:
        assert job["state"] == "done", job
        assert all(r.split(":")[0].endswith("-> 2") for r in job["rollbacks"]), job["rollbacks"]
        rolled += job["rollbacks"]
        run = Path(job["run_dir"])
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
        assert all(r["train/logprob_diff"] < 1e-3 for r in rows)
        assert (run / "checkpoints" / "latest").read_text() == "step_000005"
    assert 1 <= len(rolled) <= 2, rolled
    ray.get(mux.shutdown.remote())


def test_a_second_session_never_kills_the_multiplexer_running_on_its_cluster(ray_local, monkeypatch, tmp_path):
    """`start_multiplexer` killed whatever multiplexer had its name on the cluster: a second
    `mux run` pointed at a cluster ended the one running there. Only the session's own
    solo-baseline one is replaced."""
    from roll_agentic.mux import session
    from roll_agentic.mux.multiplexer import ACTOR_NAME, NAMESPACE

    class Stand:  # a named actor in the multiplexer's place: the test is about names, not pools
        def __init__(self, *_args) -> None:
            pass

        def start(self) -> bool:
            return True

        def ping(self) -> bool:
            return True

    monkeypatch.setattr(session, "multiplexer_actor", lambda: ray.remote(num_cpus=0)(Stand))
    monkeypatch.setattr(session, "pool_model_path", lambda m: "unused")
    running = ray.remote(num_cpus=0)(Stand).options(name=ACTOR_NAME, namespace=NAMESPACE).remote()
    assert ray.get(running.ping.remote())
    m = MuxConfig(name="second")
    with pytest.raises(RuntimeError, match="a multiplexer already runs on this Ray cluster"):
        session.start_multiplexer(m, tmp_path / "second")
    assert ray.get(running.ping.remote())  # still serving
    new = session.start_multiplexer(m, tmp_path / "main", replacing=running)  # the session's own: replaced
    assert ray.get(new.ping.remote())
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(running.ping.remote())
    ray.kill(new)


def test_a_stopped_multiplexer_checkpoints_every_job_and_a_resumed_one_goes_on(ray_local, tiny_model_path, tmp_path):
    """`mux run` stopped (Ctrl-C, SIGTERM: `Multiplexer.stop`) mid-run, with no `save_every`
    checkpoint due: every job ends "stopped" with its newest whole step checkpointed (a
    job mid-step finishes it; the others are cancelled and saved from host memory or, if
    still queued, keep the checkpoint their probe parked). A new multiplexer on the same
    run directory, the jobs submitted with resume, takes each on from there to its last
    step: each step logged once, sampled on the job's own weights. Before, the steps since
    the last `save_every` were lost and a job could not be continued at all.

    Both train LoRA adapters, of two forms (ranks): a resident copy is its adapters only, so a
    save from host memory merges them into the job's base (read from its model path) and a
    resume loads them back; each form's trainer waits in host memory while the other trains."""
    total = 10
    cfg, _ = _job("a", total)
    m = MuxConfig(name="s", residency_budget_bytes=admission.estimated_state_bytes(tiny_model_path, cfg) * 4,
                  profile_margin=1.0, slo_headroom=0.0, warm_switch_s=0.0, phase_timeout_s=120.0)
    lora = ("trainer.lora_rank=4", "trainer.lora_full_modules=[embed_tokens]")
    lora2 = ("trainer.lora_rank=2", "trainer.lora_full_modules=[embed_tokens]")
    jobs = [_job(name, total, f"trainer.seed={seed}", "trainer.save_every=100", *extra)
            for name, seed, extra in (("a", 1, lora), ("b", 2, lora2))]
    mux = multiplexer_actor().remote(m, str(tmp_path), tiny_model_path)
    ray.get(mux.start.remote())
    for job_cfg, spec in jobs:
        ray.get(mux.submit.remote(job_cfg, spec))

    def both_profiled_and_one_past_its_probe() -> bool:
        # Both probed (2 steps each); on a busy machine their profiles may not fit one group,
        # and the second then waits, queued, for the first to end: stop before that.
        states = ray.get(mux.status.remote())["jobs"]
        return (all(j["state"] in ("running", "queued") for j in states)
                and any(j["state"] == "running" and j["step"] >= 3 for j in states))

    _wait_for(both_profiled_and_one_past_its_probe)
    stopped = ray.get(mux.stop.remote())
    assert max(j["step"] for j in stopped.values()) >= 3
    for j in stopped.values():
        assert j["state"] == "stopped" and 2 <= j["step"] < total, j
        assert f"checkpoint of step {j['step']}" in j["reason"], j
        run = Path(j["run_dir"])
        assert (run / "checkpoints" / "latest").read_text() == f"step_{j['step']:06d}"
        # The model it trained from, for `model export` (its config and tokenizer).
        run_state = json.loads((run / "checkpoints" / f"step_{j['step']:06d}" / "run.json").read_text())
        assert Path(run_state["model_path"]) == Path(tiny_model_path).resolve()
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, j["step"] + 1))
    with pytest.raises(ray.exceptions.RayTaskError, match="the multiplexer is stopping"):
        ray.get(mux.submit.remote(*jobs[0]))
    ray.get(mux.shutdown.remote())
    ray.kill(mux)

    mux = multiplexer_actor().remote(m, str(tmp_path), tiny_model_path)
    ray.get(mux.start.remote())
    for job_cfg, spec in jobs:
        ray.get(mux.submit.remote(job_cfg, spec, True))
    assert ray.get(mux.wait.remote(None, 400.0)), format_status(ray.get(mux.status.remote()))
    for j in ray.get(mux.status.remote())["jobs"]:
        assert j["state"] == "done" and j["resumed_from"] == stopped[j["name"]]["step"], j
        run = Path(j["run_dir"])
        assert run == Path(stopped[j["name"]]["run_dir"])  # its own directory, gone on with
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, total + 1))
        assert all(r["train/logprob_diff"] < 1e-3 for r in rows)  # sampled on its resumed weights
        assert (run / "checkpoints" / "latest").read_text() == f"step_{total:06d}"
        trainer_state = torch.load(run / "checkpoints" / f"step_{total:06d}" / "trainer.pt", weights_only=False)
        assert "lora" in trainer_state
    assert "resumed from step" in format_status(ray.get(mux.status.remote()))
    ray.get(mux.shutdown.remote())
