"""What a resume leaves on record: copies of the settings it replaced, and how it moved the rate.

A resume runs with its own command line's settings (README: quick start). It
keeps the run's earlier settings beside the new ones, never over an earlier
copy, and says in one line when a new `trainer.total_steps` moves the learning
rate of the step it resumes at (the schedule is stretched over the new total).
"""

from __future__ import annotations

import math
from pathlib import Path


def schedule_change_line(before: dict, now, step: int) -> str | None:
    """One line when trainer.total_steps changed and with it the rate of step `step` (0-based,
    the next one a resume takes), from the run's saved trainer settings `before` to `now`'s."""
    from roll_agentic.train.lr_schedule import lr_at

    try:
        old_total, old_lr = int(before["total_steps"]), float(before.get("lr", now.lr))
        was = lr_at(step, old_lr, old_total, before.get("lr_schedule", now.lr_schedule),
                    float(before.get("lr_min_ratio", now.lr_min_ratio)),
                    int(before.get("lr_warmup_steps", now.lr_warmup_steps)))
    except (KeyError, TypeError, ValueError):
        return None
    if old_total == now.total_steps:
        return None
    # The schedule's own part, at the run's lr: a new trainer.lr moves the rate too, but it
    # is listed with the other settings, and it was named here as the schedule's doing.
    stretched = lr_at(step, old_lr, now.total_steps, now.lr_schedule, now.lr_min_ratio, now.lr_warmup_steps)
    if math.isclose(was, stretched, rel_tol=1e-9, abs_tol=0.0):
        return None  # a constant schedule, or a step at its floor either way: total_steps moves nothing
    rate = lr_at(step, now.lr, now.total_steps, now.lr_schedule, now.lr_min_ratio, now.lr_warmup_steps)
    old_schedule = before.get("lr_schedule", now.lr_schedule)
    if old_schedule != now.lr_schedule:
        why = (f"the schedule is now {now.lr_schedule} over {now.total_steps} steps "
               f"(was {old_schedule} over {old_total})")
    else:
        why = (f"the {now.lr_schedule} schedule now runs over {now.total_steps} steps "
               f"(trainer.total_steps was {old_total})")
    if not math.isclose(stretched, rate, rel_tol=1e-9, abs_tol=0.0):
        why += f", and trainer.lr is now {now.lr:g} (was {old_lr:g})"
    return f"learning rate at step {step + 1}: {was:.3g} -> {rate:.3g}, because {why}"


def keep_copy(run_dir: Path, stem: str, text: str) -> Path:
    """Writes `text` to <stem>.json, or <stem>.2.json, .3, ... : never over an existing copy.

    Two resumes in a row at the same step, each with overrides of its own, wrote the
    second's "before" (the first resume's settings) over the first's (the run's own),
    and the run's original settings were gone. A copy the same as the newest is not
    written again (a resume repeated with the same overrides).
    """
    path, n, newest = run_dir / f"{stem}.json", 1, None
    while path.exists():
        newest = path
        n += 1
        path = run_dir / f"{stem}.{n}.json"
    if newest is not None and newest.read_text() == text:
        return newest
    path.write_text(text)
    return path


def flat_config(tree: dict, prefix: str = "") -> dict:
    """A nested config as dotted keys (lists are compared whole)."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def flat_settings(cfg) -> dict:
    """A config's settings as dotted keys, as its config.json would hold them (`saved_flat_config`)."""
    import json
    from dataclasses import asdict

    return flat_config(json.loads(config_json(asdict(cfg))))


def config_json(obj) -> str:
    """A run's config as written to its config.json (what a resume compares with)."""
    import json

    return json.dumps(obj, indent=2, default=str)


LORA_KEYS = ("trainer.lora_rank", "trainer.lora_alpha", "trainer.lora_targets", "trainer.lora_full_modules")


def lora_mismatch(before: dict, now: dict) -> str | None:
    """One line when a resume's LoRA settings are not the run's (flat configs, `flat_config`).

    The checkpoint holds adapters of one shape (or none): another rank, alpha or
    target list cannot go on from it, and the trainer would refuse only once the
    engines had started. Said before anything starts, with the overrides to pass.
    """
    if not before.get("trainer.lora_rank"):
        if now.get("trainer.lora_rank"):
            return ("this run trained every weight: resume it without trainer.lora_rank (or start a LoRA "
                    "run from its exported model: roll-agentic model export)")
        return None
    differ = [k for k in LORA_KEYS if k in before and before.get(k) != now.get(k)]
    if not differ:
        return None

    def override(k: str) -> str:
        v = before[k]
        return f"'{k}=[{','.join(v)}]'" if isinstance(v, list) else f"{k}={v}"

    return f"this run trained LoRA adapters with other settings: resume it with {' '.join(map(override, differ))}"


def task_names(flat: dict) -> list[str]:
    """The names of a flat config's tasks, in order."""
    tasks = flat.get("tasks")
    return [str(t.get("name")) for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []


def task_mismatch(before: dict, now: dict) -> str | None:
    """One line when a resume's tasks are not the run's (by name; flat configs).

    A run started from `--config my.yaml` and resumed with the README's bare
    `trainer.resume=true` went on with the default tasks: it listed the change
    among the others and trained steps of tasks the run never had. Said before
    anything starts, with what to pass.
    """
    was, is_now = task_names(before), task_names(now)
    if not was or sorted(was) == sorted(is_now):  # the same tasks in another order go on
        return None
    return (f"this run trained tasks {', '.join(was)}; this command line has {', '.join(is_now) or 'none'}: "
            "resume it with the --config FILE and overrides it was started with (its config.json has them), "
            "or pass trainer.resume_other_tasks=true to go on with these tasks (the model and optimizer "
            "carry over)")


def saved_flat_config(run_dir: Path) -> dict | None:
    """The run's own settings (its config.json) as dotted keys; None if it has none readable."""
    import json

    try:
        return flat_config(json.loads((run_dir / "config.json").read_text()))
    except (OSError, ValueError):
        return None
