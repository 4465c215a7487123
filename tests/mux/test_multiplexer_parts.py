"""The multiplexer's parts without Ray: permits, residency, admission, status, summary, trainer swaps."""

from __future__ import annotations

import asyncio

import pytest
import torch

from roll_agentic.config import AlgoConfig, Config, TrainerConfig
from roll_agentic.mux import admission
from roll_agentic.mux.job_state import JobRecord, JobState, format_status
from roll_agentic.mux.mux_config import JobSpec, MuxConfig, load_mux_config, parse_jobs
from roll_agentic.mux.residency import DeviceLayout, ResidencyError, ResidencyStore, copy_out
from roll_agentic.mux.summary import build_summary
from tests.mux.samples import one_node_board, random_samples


def test_phases_run_round_robin_in_fifo_order_and_overlap_across_pools():
    async def main() -> list[tuple[str, str]]:
        board, order = one_node_board(), []

        async def job(name: str) -> None:
            for _ in range(2):
                async with board.hold(name, "rollout", ["r"]):
                    order.append((name, "rollout"))
                    await asyncio.sleep(0.01)
                async with board.hold(name, "train", ["t"]):
                    order.append((name, "train"))
                    await asyncio.sleep(0.01)

        await asyncio.gather(job("a"), job("b"))
        return order

    order = asyncio.run(main())
    rollouts = [j for j, k in order if k == "rollout"]
    trains = [j for j, k in order if k == "train"]
    assert rollouts == ["a", "b", "a", "b"] and trains == ["a", "b", "a", "b"]
    # b's rollout runs while a trains: the pools are shared phase by phase
    assert order.index(("b", "rollout")) < order.index(("a", "train")) + 2


def test_a_cancelled_phase_releases_its_node_and_the_next_one_starts():
    async def main() -> list[str]:
        board, got = one_node_board(), []

        async def stuck() -> None:
            async with board.hold("a", "rollout", ["r"]):
                got.append("a")
                await asyncio.sleep(60)

        async def waiter() -> None:
            async with board.hold("b", "rollout", ["r"]):
                got.append("b")

        ta = asyncio.create_task(stuck())
        await asyncio.sleep(0.01)
        tb = asyncio.create_task(waiter())
        await asyncio.sleep(0.01)
        assert board.snapshot()["r"]["waiting"] == ["b:rollout"]
        ta.cancel()
        await asyncio.wait_for(tb, 5)
        return got

    assert asyncio.run(main()) == ["a", "b"]


def test_idle_held_nodes_do_not_count_as_busy():
    async def main() -> dict[str, float]:
        board = one_node_board()
        async with board.hold("a", "probe-rollout", ["r"], idle=["t"]):
            await asyncio.sleep(0.05)
        return board.busy_fraction(0.0, board.now())

    busy = asyncio.run(main())
    assert busy["rollout"] > 0.5 and busy["train"] == 0.0


def test_residency_budget_is_enforced():
    store = ResidencyStore(budget_bytes=1000)
    store.reserve("a", 600)
    with pytest.raises(ResidencyError, match="does not fit"):
        store.reserve("b", 600)
    lin = torch.nn.Linear(4, 4)
    store.put("a", copy_out(DeviceLayout.of(lin, torch.optim.AdamW(lin.parameters())), 1, None))
    assert store.get("a") is not None
    store.evict("a")
    store.reserve("b", 600)
    assert store.used_bytes == 600


def _job_cfg(*, alpha: int = 0, kl: float = 0.0) -> Config:
    cfg = Config()
    cfg.algo.alpha, cfg.algo.kl_coef = alpha, kl
    return cfg


def test_refusals_name_their_reason(tiny_model_path):
    m = MuxConfig(residency_budget_bytes=1 << 30)
    assert admission.refusal(_job_cfg(), tiny_model_path, tiny_model_path, m) == ""
    assert "algo.alpha" in admission.refusal(_job_cfg(alpha=1), tiny_model_path, tiny_model_path, m)
    tail = _job_cfg()
    tail.rollout.mode = "tail_batching"
    assert "rollout.mode must be async" in admission.refusal(tail, tiny_model_path, tiny_model_path, m)
    need = admission.estimated_state_bytes(tiny_model_path, _job_cfg())
    small = MuxConfig(residency_budget_bytes=need - 1)
    why = admission.refusal(_job_cfg(), tiny_model_path, tiny_model_path, small)
    assert "exceeds the residency budget" in why and str(need - 1) in why
    # A LoRA job keeps only its adapters resident: it fits where the full job does not.
    lora = _job_cfg()
    lora.trainer.lora_rank = 8
    assert admission.refusal(lora, tiny_model_path, tiny_model_path, small) == ""
    # a KL reference is one more copy of the weights to keep resident
    assert admission.estimated_state_bytes(tiny_model_path, _job_cfg(kl=0.1)) == need * 4 // 3


def test_mux_yaml_and_job_files_parse(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("name: x\njobs:\n  - {name: a, slo: 1.2, overrides: [algo=sync]}\n")
    m = load_mux_config(p)
    assert m.jobs[0].name == "a" and m.jobs[0].slo == 1.2 and m.jobs[0].overrides == ["algo=sync"]
    assert parse_jobs({"name": "b"})[0].name == "b"
    p.write_text("name: x\nbogus: 1\n")
    with pytest.raises(ValueError, match="bogus"):
        load_mux_config(p)


def test_status_lists_every_job_with_its_state_and_reason():
    recs = [JobRecord("a", 1.5, 10, state=JobState.RUNNING, step=3, phase="train", group=0),
            JobRecord("b", 2.0, 10, state=JobState.QUEUED, reason="group 0: SLO"),
            JobRecord("c", 1.1, 10, state=JobState.REFUSED, reason="exceeds the residency budget")]
    snap = {"name": "m", "run_dir": "d", "uptime_s": 1.0, "pool_busy_fraction": {"rollout": 0.5},
            "nodes": {}, "groups": [{"group_id": 0, "nodes": ["rollout0", "train0"], "members": ["a"]}],
            "jobs": [r.to_dict() for r in recs]}
    text = format_status(snap)
    for name, state in (("a", "running"), ("b", "queued"), ("c", "refused")):
        assert any(line.strip().startswith(name) and state in line for line in text.splitlines())
    assert "residency budget" in text and "group 0" in text


def test_summary_compares_the_multiplexed_pass_with_the_solo_one():
    def job(ends, warm=None, cold=None):
        return {"slo": 1.5, "state": "done", "step_ends": ends, "profile": {"solo_iter_s": 1.0}, "run_dir": "/nonexistent",
                "warm_switch_s": warm, "cold_switch_s": cold}

    mux = {"start": 0.0, "end": 10.0, "pool_busy_fraction": {"rollout": 0.9, "train": 0.8},
           "jobs": {"a": job([0, 1, 2, 3.2, 4.4, 5.6], 0.01, 0.1)}}
    solo = {"start": 0.0, "end": 20.0, "pool_busy_fraction": {"rollout": 0.45, "train": 0.4},
            "jobs": {"a": job([0, 1, 2, 3, 4, 5])}}
    s = build_summary(mux, solo)
    assert s["job_slowdown"]["a"] == pytest.approx(1.2)
    assert s["job_slo_met"]["a"] is True
    assert s["busy_ratio"] == {"rollout": pytest.approx(2.0), "train": pytest.approx(2.0)}
    assert s["warm_vs_cold_speedup"]["a"] == pytest.approx(10.0)
    for key in ("pool_busy_fraction", "solo_pool_busy_fraction", "job_slowdown", "job_slo", "warm_switch_s",
                "cold_switch_s"):
        assert key in s
    assert s["job_slowdown_basis"]["a"] == "solo pass"
    # Without the solo pass (`--no-solo`): against the profile, as `mux status` shows it.
    alone = build_summary(mux, None)
    assert alone["job_slowdown"]["a"] == pytest.approx(1.2) and alone["job_slowdown_basis"]["a"] == "profile"
    assert alone["job_slo_met"]["a"] is True
    # A job with too few steps to measure: unknown, not missed.
    mux["jobs"]["b"] = job([0, 1])
    assert build_summary(mux, None)["job_slo_met"]["b"] is None



def test_trainer_slot_swaps_jobs_warm_from_host_and_cold_from_disk(tiny_model_path, tmp_path):
    from roll_agentic.mux.trainer_slot import TrainerSlot

    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    tcfg = TrainerConfig(lr=1e-2)
    for job in ("a", "b"):
        slot.register(job, tiny_model_path, tcfg, AlgoConfig(alpha=0), 1.0, str(tmp_path / job))
    assert slot.switch_in("a").kind == "fresh"
    slot.train("a", random_samples(0))
    slot.reserve("a", slot.state_bytes("a")[0])
    a_weights = {k: v.clone() for k, v in slot.trainer.engine_state_dict().items()}
    a_moments = {k: v["exp_avg"].clone() for k, v in slot.trainer.optimizer.state_dict()["state"].items()}

    assert slot.switch_in("b").kind == "fresh"  # a is copied out to host memory
    slot.train("b", random_samples(1))
    slot.park("b", 1, {"buffer": {}}, keep=1)  # b is not resident: on disk only

    rec = slot.switch_in("a")
    assert rec.kind == "warm" and rec.out_job == ""  # b was parked, nothing to copy out
    for k, v in slot.trainer.engine_state_dict().items():
        assert torch.equal(v, a_weights[k])
    for k, v in slot.trainer.optimizer.state_dict()["state"].items():
        assert torch.equal(v["exp_avg"], a_moments[k])
    slot.train("a", random_samples(2))  # training the device copy leaves the host copy alone
    assert torch.equal(slot.store.get("a").weights["model.norm.weight"], a_weights["model.norm.weight"])

    assert slot.switch_in("b").kind == "cold"
    assert slot.trainer.step == 1
    slot.release("a")
    assert not slot.store.is_resident("a")


def test_a_kl_job_switched_in_cold_on_another_jobs_trainer_keeps_its_reference(tiny_model_path, tmp_path):
    """Profiled on one slot, placed on a slot whose trainer another job built: the KL
    reference was dropped there and the KL term silently vanished."""
    from roll_agentic.mux.trainer_slot import TrainerSlot

    probe, shared = TrainerSlot("train0", budget_bytes=1 << 30), TrainerSlot("train1", budget_bytes=1 << 30)
    kl = AlgoConfig(alpha=0, kl_coef=0.1)
    probe.register("a", tiny_model_path, TrainerConfig(), kl, 1.0, str(tmp_path / "a"))
    assert probe.switch_in("a").kind == "fresh" and probe.trainer.ref_model is not None
    probe.train("a", random_samples(0))  # its weights now differ from the reference
    probe.park("a", 1, {"buffer": {}}, keep=1)
    shared.register("b", tiny_model_path, TrainerConfig(), AlgoConfig(alpha=0), 1.0, str(tmp_path / "b"))
    assert shared.switch_in("b").kind == "fresh" and shared.trainer.ref_model is None
    shared.register("a", tiny_model_path, TrainerConfig(), kl, 1.0, str(tmp_path / "a"))
    assert shared.switch_in("a").kind == "cold"
    assert shared.trainer.ref_model is not None and shared.trainer.algo.kl_coef == 0.1
    assert shared.train("a", random_samples(1))["train/kl"] > 0
    shared.switch_in("b")
    assert shared.trainer.ref_model is None  # b trains without one


def test_kl_jobs_of_one_base_share_one_reference_on_a_slot(tiny_model_path, tmp_path):
    """Each full fine-tune kept a KL reference of its own on the trainer's device: N jobs of
    one base held N frozen copies of the same weights there."""
    from roll_agentic.mux.trainer_slot import TrainerSlot

    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    kl = AlgoConfig(alpha=0, kl_coef=0.1)
    for job in ("a", "b"):
        slot.register(job, tiny_model_path, TrainerConfig(), kl, 1.0, str(tmp_path / job))
        slot.reserve(job, 1 << 28)  # resident: switched out to host memory
    slot.switch_in("a")
    ref = slot.trainer.ref_model
    assert ref is not None and slot.train("a", random_samples(0))["train/kl"] == 0.0  # still the base
    slot.switch_in("b")
    assert slot.trainer.ref_model is ref and list(slot.refs) == [tiny_model_path]
    assert slot.train("b", random_samples(1))["train/kl"] == 0.0  # b's first step: its own weights are the base
    slot.switch_in("a")
    assert slot.train("a", random_samples(2))["train/kl"] > 0  # a's trained weights against the base
    slot.release("a")
    assert slot.refs  # b still uses it
    slot.release("b")
    assert not slot.refs


def test_a_job_that_cannot_start_is_refused_with_its_reason_not_left_profiling(tmp_path, tiny_model_path):
    """A missing model.path raised out of submit and left the record "profiling" for good
    (mux status showed it, cancel said "not running", a fixed resubmission was refused)."""
    from roll_agentic.mux.multiplexer import Multiplexer

    mux = Multiplexer(MuxConfig(residency_budget_bytes=1 << 30), str(tmp_path), tiny_model_path)
    cfg = _job_cfg()
    cfg.model.path = str(tmp_path / "no-such-model")
    rec = asyncio.run(mux.submit(cfg, JobSpec("bad", 1.5)))
    assert rec["state"] == "refused" and "no-such-model" in rec["reason"]
    assert not mux._started  # refusals bring up no pools
    again = asyncio.run(mux.submit(_job_cfg(alpha=1), JobSpec("bad", 1.5)))  # the name is free again
    assert again["state"] == "refused" and "algo.alpha" in again["reason"]


@pytest.mark.parametrize(("text", "message"), [
    ("name: [x\n", "is not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping of mux settings"),
    ("rollout_nodes: two\n", "rollout_nodes: expected int, got 'two'"),
    ("jobs: [roll_heavy]\n", "jobs[0]: expected a job mapping"),
    ("jobs: [{name: a, slo: fast}]\n", "jobs[0].slo: expected a slowdown factor"),
    ("jobs: [{name: a, overrides: algo=sync}]\n", "jobs[0].overrides: expected a list of key=value strings"),
    ("jobs: [{name: ../a}]\n", "jobs[0].name: expected a job name"),
])
def test_a_bad_mux_yaml_is_one_clear_error(tmp_path, text, message):
    """Each was a traceback (ValueError, TypeError, a yaml error) or a baffling message."""
    from roll_agentic.config import ConfigError

    p = tmp_path / "m.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_mux_config(p)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_address_file_left_by_a_killed_multiplexer_is_reported_not_retried(monkeypatch, tmp_path):
    """ray.init retried the dead address for minutes: the file is refused before anything
    connects to the address (no probe of it, no ray.init, no actor lookup)."""
    import json

    from roll_agentic.mux import session

    tried: list[str] = []

    def never(what: str):
        def call(*_a, **_k):
            tried.append(what)
            raise AssertionError(f"connect tried {what} for a multiplexer whose process has exited")
        return call

    monkeypatch.setattr(session.socket, "create_connection", never("a connection to the address"))
    monkeypatch.setattr(session.ray, "init", never("ray.init"))
    monkeypatch.setattr(session.ray, "get_actor", never("ray.get_actor"))
    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)  # another test's Ray would skip ray.init
    path = tmp_path / "current.json"
    # A pid above Linux's largest (2**22): no such process, as after the multiplexer was killed.
    path.write_text(json.dumps({"address": "127.0.0.1:1", "namespace": "n", "actor": "a", "pid": 2**22 + 1}))
    with pytest.raises(FileNotFoundError, match=r"names one that is gone \(its process 4194305 has exited\)"):
        session.connect(path)
    assert tried == []


def test_an_address_nothing_answers_at_is_probed_once_not_handed_to_ray(monkeypatch, tmp_path):
    """Not known dead by its pid (another host's): one bounded probe of the address, no ray.init."""
    import json

    from roll_agentic.mux import session

    probes: list[tuple] = []

    def refused(address, timeout):
        probes.append((address, timeout))
        raise ConnectionRefusedError("refused")

    def never(*_a, **_k):
        raise AssertionError("connect handed a dead address to ray.init")

    monkeypatch.setattr(session.socket, "create_connection", refused)
    monkeypatch.setattr(session.ray, "init", never)
    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)
    path = tmp_path / "current.json"
    path.write_text(json.dumps({"address": "10.0.0.9:6379", "namespace": "n", "actor": "a"}))
    with pytest.raises(FileNotFoundError, match=r"nothing answers at 10.0.0.9:6379: refused"):
        session.connect(path)
    assert probes == [(("10.0.0.9", 6379), 3)]


def test_a_mux_run_that_fails_early_leaves_the_running_ones_address_file(monkeypatch, tmp_path):
    """A second `mux run` on the same output_dir deleted the first one's `current.json` on
    its way out, so `mux status` no longer found the multiplexer that was still running."""
    import json as json_mod
    import os

    import roll_agentic.cluster
    from roll_agentic.mux import session

    m = MuxConfig(name="t", output_dir=str(tmp_path))
    theirs = {"address": "127.0.0.1:6379", "namespace": "n", "actor": "a", "run_dir": "r", "pid": os.getpid() + 1}
    session.address_file(m).write_text(json_mod.dumps(theirs))

    def fails(*_a, **_k):
        raise RuntimeError("no pools today")

    monkeypatch.setattr(roll_agentic.cluster, "init_ray", lambda cfg: False)
    monkeypatch.setattr(session, "start_multiplexer", fails)
    with pytest.raises(RuntimeError, match="no pools today"):
        session.run_session(m, [], solo_baseline=False)
    assert json_mod.loads(session.address_file(m).read_text()) == theirs
    session.address_file(m).write_text(json_mod.dumps({**theirs, "pid": os.getpid()}))  # its own: removed
    with pytest.raises(RuntimeError, match="no pools today"):
        session.run_session(m, [], solo_baseline=False)
    assert not session.address_file(m).exists()


def test_a_second_mux_session_on_a_run_folder_in_use_is_refused_before_ray(monkeypatch, tmp_path):
    """Two `mux run --resume X` at once ran every job twice on the same checkpoints and logs."""
    import roll_agentic.cluster
    from roll_agentic.mux import session
    from roll_agentic.train.run_lock import RunDirInUse, RunDirLock

    m = MuxConfig(name="t", output_dir=str(tmp_path))
    (tmp_path / "run").mkdir()
    held = RunDirLock(tmp_path / "run")
    held.acquire()
    rays: list[object] = []
    monkeypatch.setattr(roll_agentic.cluster, "init_ray", lambda cfg: rays.append(cfg) or False)

    def fails(*_a, **_k):
        raise RuntimeError("no pools today")

    monkeypatch.setattr(session, "start_multiplexer", fails)
    with pytest.raises(RunDirInUse, match="in use by another process"):
        session.run_session(m, [], solo_baseline=False, run_name="run")
    assert rays == []
    held.release()
    with pytest.raises(RuntimeError, match="no pools today"):  # free again: it starts
        session.run_session(m, [], solo_baseline=False, run_name="run")
    assert len(rays) == 1
    held.acquire()  # the failed session let go of it


def test_fresh_mux_run_names_of_one_second_differ(tmp_path):
    from roll_agentic.train.run_lock import fresh_run_name

    first = fresh_run_name(tmp_path, "job-")
    (tmp_path / first).mkdir()
    second = fresh_run_name(tmp_path, "job-")
    assert first.startswith("job-") and second.startswith("job-") and second != first


def test_status_says_the_live_slowdown_is_against_the_worst_case_profile():
    """It showed "slowdown 0.71x" for a job whose summary, against its solo pass, said 1.01x."""
    from roll_agentic.mux.job_state import format_status

    rec = JobRecord("j", 1.5, 10, state=JobState.RUNNING, profile={"solo_iter_s": 10.0},
                    step_ends=[0.0, 1.0, 2.0, 9.1, 16.2])
    snap = {"name": "m", "run_dir": "r", "uptime_s": 1.0, "jobs": [rec.to_dict()]}
    assert "slowdown 0.71x of profile / SLO 1.50x" in format_status(snap)


def test_jobs_probing_at_once_get_different_free_nodes(tmp_path):
    """Every probe took the first free node: jobs submitted together probed there one after
    the other, while the other free nodes idled."""
    from roll_agentic.mux.multiplexer import Multiplexer

    mux = Multiplexer(MuxConfig(), str(tmp_path), "unused")
    for name, pool in (("rollout0", "rollout"), ("rollout1", "rollout"), ("train0", "train"), ("train1", "train")):
        mux.board.add_node(name, pool)
        (mux.engines if pool == "rollout" else mux.slots)[name] = []
    assert mux._probe_nodes() == (["rollout0"], "train0")
    mux._probing["a"] = ["rollout0", "train0"]
    assert mux._probe_nodes() == (["rollout1"], "train1")
    mux._probing["b"] = ["rollout1", "train1"]
    mux.phys[0] = "rollout1"  # placed jobs' nodes are not free: the least probed free one then
    assert mux._probe_nodes()[0] == ["rollout0"]
