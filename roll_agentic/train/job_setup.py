"""The parts a training job is built from, shared by `roll-agentic train`
(train/job.py) and the multiplexer's jobs (mux/job_runner.py): the model,
the trainer, the run folder, the reward service, the trajectory buffer and
the rollout workers.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import ray

from roll_agentic.config import Config
from roll_agentic.engine.placement import placement
from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.worker import RolloutWorker
from roll_agentic.train.checkpoint import latest_checkpoint
from roll_agentic.train.resource_check import trainer_in_process
from roll_agentic.train.run_lock import LOCK_NAME, fresh_run_name
from roll_agentic.train.trainer import PolicyTrainer


def resolve_model_path(cfg: Config) -> str:
    if cfg.model.path:
        p = Path(cfg.model.path)
        why = not_a_model(p)
        if why:
            hint = "point it at a local model directory"
            if (p / "weights.safetensors").is_file() or (p / "checkpoints").is_dir():  # a run or its checkpoint
                hint = f"a run's checkpoint is one once exported: roll-agentic model export {p} DIR, then model.path=DIR"
            raise FileNotFoundError(f"model.path={cfg.model.path!r} is not a Hugging Face checkpoint ({why}); {hint}")
        return str(p.resolve())
    from roll_agentic.model.tiny import ensure_tiny_model

    return str(ensure_tiny_model(cfg.model.tiny_dir).resolve())


def not_a_model(path: Path) -> str:
    """Why `path` is no Hugging Face model directory; "" if it may be one. (A run directory has a
    config.json too, the run's: transformers then failed deep in the engines with a traceback.)"""
    import json

    try:
        config = json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        return "no config.json"
    except (OSError, ValueError) as err:
        return f"its config.json cannot be read: {err}"
    if not isinstance(config, dict) or "model_type" not in config:
        return "its config.json names no model_type"
    return ""


def check_before_start(cfg: Config, model_path: str = "") -> None:
    """What can be found wrong before Ray starts, each said in one line (RuntimeError, ValueError)."""
    import torch

    from roll_agentic.engine.factory import resolve_backend
    from roll_agentic.rollout.task_check import check_tasks
    from roll_agentic.train.resource_check import in_process_device_error

    resolve_backend(cfg.engine.backend)  # engine=vllm where vLLM is not installed
    problem = in_process_device_error(cfg, torch.cuda.is_available())
    if problem:
        raise RuntimeError(problem)
    # a typo in env_id or reward, or an env call past the run's limit: one line now, not a failing run
    check_tasks(cfg.tasks, cfg.reward.mode, cfg.rollout.env_step_timeout_s)
    if model_path:
        problem = context_problem(cfg.engine.max_model_len, Path(model_path))
        if problem:
            raise ValueError(problem)


def context_problem(max_model_len: int, model_path: Path) -> str:
    """Is engine.max_model_len longer than the model's positions? vLLM refused it inside each
    engine's start, with Ray and the reward emulator up, as a pydantic error."""
    import json

    try:
        positions = json.loads((model_path / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(positions, int | float) and positions > 0 and max_model_len > positions:
        return (f"engine.max_model_len={max_model_len} is longer than the model's max_position_embeddings "
                f"({int(positions)}, in {model_path / 'config.json'}): set engine.max_model_len <= {int(positions)}")
    return ""


def start_ray(cfg: Config) -> bool:
    """Starts or joins Ray; True if this call started it. A local Ray that lacks what the
    config asks for fails here; a cluster, which an autoscaler may grow, gets a warning."""
    from roll_agentic.cluster import init_ray
    from roll_agentic.train.resource_check import cluster_shortfall_warning, shortfall_error

    started = init_ray(cfg.ray)
    if not cfg.ray.address:  # a local Ray has all its nodes now; a cluster may still grow
        problem = shortfall_error(cfg, ray.cluster_resources())
        if problem:
            if started:
                ray.shutdown()
            raise RuntimeError(problem)
    else:
        if warning := cluster_shortfall_warning(cfg, ray.cluster_resources()):
            print(warning, flush=True)
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        problem = emulator_reach_problem(cfg, nodes)
        if problem and nodes > 1:
            if started:
                ray.shutdown()
            raise RuntimeError(problem)
        if problem:  # one node now: the emulator reaches it; an autoscaler may add others
            print(f"warning: {problem}", flush=True)
    return started


def emulator_reach_problem(cfg: Config, nodes: int) -> str:
    """Why rollout workers on a joined cluster of `nodes` nodes may not reach the run's own
    reward emulator, or "". It listens on the driver's 127.0.0.1 only (nothing this
    project starts listens elsewhere), and a worker on another node calls its own."""
    if not cfg.ray.address or cfg.reward.mode != "serverless" or cfg.reward.endpoint_url:
        return ""
    return (f"reward.mode=serverless starts the reward emulator on this machine's 127.0.0.1, which rollout "
            f"workers on the cluster's other nodes cannot reach ({nodes} node(s) now): set "
            "reward.endpoint_url to a Lambda service every node reaches (AWS Lambda: "
            "reward.endpoint_url=https://lambda.<region>.amazonaws.com), or compute rewards in the "
            "rollout workers with reward=local")


def spawn_engines(cfg: Config, model_path: str, base_seed: int, engines: list | None = None,
                  pools: list[str] | None = None) -> tuple[list, list[str]]:
    """Every pool's engine actors, up and answering: (engines, the pool of each).

    Appended to `engines` and `pools` as each starts, so that a caller whose start-up is
    interrupted still holds, and stops, the ones already started."""
    from roll_agentic.config import effective_pools
    from roll_agentic.engine.factory import resolve_backend
    from roll_agentic.engine.host import engine_actor_class

    engines = [] if engines is None else engines
    pools = [] if pools is None else pools
    backend = resolve_backend(cfg.engine.backend)
    for pool in effective_pools(cfg):
        place = placement(pool.resources)  # "GPU"/"CPU" become num_gpus/num_cpus
        actor = engine_actor_class(place.num_cpus, place.resources).options(num_gpus=place.num_gpus)
        for _ in range(pool.num_engines):
            engines.append(actor.remote(backend, model_path, cfg.engine, base_seed + len(engines), pool.name,
                                        pool.hardware))
            pools.append(pool.name)
    pings = [e.ping.remote() for e in engines]
    for ping, pool in zip(pings, pools, strict=True):
        try:
            ray.get(ping)
        except ray.exceptions.RayActorError as err:  # Ray's whole traceback, as a RuntimeError the CLI says
            raise RuntimeError(f"an engine of pool {pool!r} failed to start ({cfg.engine.backend} backend): "
                               f"{raised_in_actor(err)}") from None
    return engines, pools


def raised_in_actor(err: Exception) -> str:
    """The exception an actor's constructor raised, in one line, out of Ray's report of its death
    (its traceback: after the last frame, its indented source and caret lines, the exception)."""
    lines = str(err).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if frames:
        lines = lines[frames[-1] + 1:]
        while lines and lines[0].startswith(" "):
            lines = lines[1:]
    return " ".join(" ".join(lines).split()) or type(err).__name__


def make_trainer(model_path: str, cfg: Config):
    """In process for one CPU worker; Ray workers with torch.distributed otherwise."""
    if trainer_in_process(cfg):
        return PolicyTrainer(model_path, cfg.trainer, cfg.algo, cfg.engine.temperature, cfg.engine.top_p)
    from roll_agentic.train.parallel import DataParallelTrainer

    return DataParallelTrainer(model_path, cfg.trainer, cfg.algo, cfg.engine.temperature,
                               collective_timeout_s=cfg.trainer.collective_timeout_s, top_p=cfg.engine.top_p)


def resolve_run_dir(cfg: Config) -> Path:
    root = Path(cfg.output_dir)
    if cfg.trainer.resume and not cfg.run_name:
        runs = sorted((p for p in root.glob("*") if latest_checkpoint(p / "checkpoints")),
                      key=lambda p: p.stat().st_mtime)
        if not runs:
            raise FileNotFoundError(f"trainer.resume=true but no run under {root}/ has a checkpoint; "
                                    "pass run_name=<run> or start without resume")
        return runs[-1]
    name = cfg.run_name or fresh_run_name(root)
    run_dir = root / name
    if cfg.trainer.resume and latest_checkpoint(run_dir / "checkpoints") is None:
        # Said only once Ray, the engines and the trainer had started (minutes with vLLM),
        # for a run_name with a typo as for a run stopped before its first checkpoint.
        raise FileNotFoundError(f"trainer.resume=true but {run_dir}/checkpoints has no complete checkpoint; "
                                "check run_name, or start without resume")
    if not cfg.trainer.resume and latest_checkpoint(run_dir / "checkpoints") is not None:
        # A fresh run there would prune its own new checkpoints in favour of the old
        # run's higher steps, and a later resume would load the old run.
        raise RuntimeError(f"{run_dir} already holds a run's checkpoints: pass trainer.resume=true to "
                           "continue it, or another run_name (none: a new timestamped one)")
    return run_dir


def start_rewards(cfg: Config, run_dir: Path) -> tuple[object | None, str]:
    """(local emulator or None, endpoint) for serverless rewards; (None, "") for local ones."""
    r = cfg.reward
    if r.mode != "serverless":
        return None, ""
    from roll_agentic.reward.service import LocalServerless, deploy_rewards

    service = None
    if r.endpoint_url:
        endpoint = r.endpoint_url
    else:
        service = LocalServerless()
        endpoint = service.start(run_dir / "serverless")
    try:
        deploy_rewards(endpoint, sorted({t.reward for t in cfg.tasks}), r)
    except BaseException:
        if service is not None:  # not handed to the caller yet: nobody else would stop it
            service.stop()
        raise
    return service, endpoint


def task_shares(cfg: Config, run_dir: Path) -> list[TaskShare]:
    """The buffer's view of the tasks: shares, and what a run stopped by failures says to check."""
    from roll_agentic.reward.reward_ref import function_stem

    serverless = cfg.reward.mode == "serverless"
    # The run's own emulator keeps its functions' logs there (start_rewards); another service, its own place.
    state_dir = str(run_dir / "serverless") if serverless and not cfg.reward.endpoint_url else ""
    return [TaskShare(t.name, t.weight, t.group_size, t.env_id, dict(t.env_kwargs), t.reward,
                      cfg.reward.function_prefix + function_stem(t.reward) if serverless else "", state_dir)
            for t in cfg.tasks]


def spawn_rollout_workers(cfg: Config, model_path: str, engines: list, router, buffer,
                          reward_endpoint: str) -> list:
    """The job's RolloutWorker actors over `engines` (also used by the multiplexer's jobs)."""
    env_place = placement(cfg.envs.resources, cfg.envs.num_cpus, cfg.envs.num_cpus)
    worker_cls = ray.remote(**env_place.options())(RolloutWorker)
    return [worker_cls.remote(i, cfg.tasks, model_path, engines, router, buffer, cfg.algo.alpha,
                              cfg.engine.temperature, cfg.engine.top_p, cfg.engine.max_model_len, cfg.reward,
                              reward_endpoint, cfg.rollout.groups_in_flight, cfg.rollout.env_step_timeout_s,
                              cfg.rollout.generate_timeout_s)
            for i in range(cfg.rollout.num_workers)]


def new_buffer(cfg: Config, run_dir: Path, multiplexed: bool = False):
    """The job's trajectory buffer actor. A multiplexed job rolls out only inside its rollout
    phases, so it takes neither tail batching nor tickets issued ahead of the next step."""
    shares = task_shares(cfg, run_dir)
    if cfg.rollout.mode == "tail_batching" and not multiplexed:
        from roll_agentic.rollout.tail_batching import TailBatchingBuffer

        return ray.remote(num_cpus=0)(TailBatchingBuffer).remote(
            shares, cfg.algo.groups_per_step, cfg.trainer.seed, cfg.rollout.eta, cfg.rollout.eta_responses,
            cfg.rollout.fill_long_rounds, max_failing_s=cfg.rollout.max_failing_s)
    return ray.remote(num_cpus=0)(TrajectoryBuffer).remote(
        shares, cfg.algo.groups_per_step, cfg.algo.alpha, cfg.trainer.seed,
        prepare_ahead=cfg.rollout.prepare_next_step and not multiplexed,
        drop_no_signal=cfg.rollout.drop_no_signal_groups, max_failing_s=cfg.rollout.max_failing_s)


def remove_unstarted_dir(run_dir: Path, what: str) -> None:
    """A run (or eval) that did not start leaves no folder: one that is empty, or holds only
    its reward emulator's state (a resumed run's folder holds its checkpoints: kept)."""
    try:
        entries = {p.name for p in run_dir.iterdir()}
    except OSError:
        return
    if entries <= {"serverless", LOCK_NAME}:
        with contextlib.suppress(OSError):
            shutil.rmtree(run_dir)
            print(f"{what} dir {run_dir} removed: the {what} did not start", flush=True)
