"""The live progress display: step, reward per task, throughput, in-flight, staleness."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


class ProgressDisplay:
    def __init__(self, total_steps: int, tasks: list[str], enabled: bool = True):
        self.total, self.tasks = total_steps, tasks
        self.enabled = enabled and sys.stdout.isatty()
        self.console = Console()
        self.live: Live | None = None
        self.t0 = time.time()
        self.last_eval: dict[str, float] = {}  # eval/<task>/mean of the last evaluation (eval.every)
        self.last_eval_step = 0

    def __enter__(self) -> ProgressDisplay:
        if self.enabled:
            self.live = Live(self._table({}), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def _table(self, m: dict) -> Table:
        t = Table(title=f"roll-agentic  step {int(m.get('step', 0))}/{self.total}  "
                        f"elapsed {time.time() - self.t0:.0f}s", expand=False)
        t.add_column("metric")
        t.add_column("value", justify="right")
        for task in self.tasks:
            v = m.get(f"reward/{task}/mean")
            t.add_row(f"reward {task}", _num(v))
        for task, v in self.last_eval.items():
            t.add_row(f"eval {task} (step {self.last_eval_step})", f"{v:.3f}")
        for key, label in [("rollout/tokens_per_s", "tokens/s"), ("rollout/in_flight", "trajectories in flight"),
                           ("rollout/staleness_mean", "staleness (versions)"), ("train/loss", "loss"),
                           ("time/step_s", "step time (s)")]:
            v = m.get(key)
            t.add_row(label, "-" if v is None else f"{v:.3g}")
        for pool in pools_in(m):
            t.add_row(f"pool {pool}", pool_summary(m, pool))
        return t

    def update(self, metrics: dict) -> None:
        evaluated = {t: metrics[f"eval/{t}/mean"] for t in self.tasks if f"eval/{t}/mean" in metrics}
        if evaluated:
            self.last_eval, self.last_eval_step = evaluated, int(metrics.get("step", 0))
        if self.live is not None:
            self.live.update(self._table(metrics))
        else:
            rewards = " ".join(f"{t}={_num(metrics.get(f'reward/{t}/mean'))}" for t in self.tasks)
            if evaluated:
                rewards += "  eval " + " ".join(f"{t}={v:.3f}" for t, v in evaluated.items())
            print(f"step {int(metrics['step'])}/{self.total}  reward {rewards}  "
                  f"tok/s {metrics.get('rollout/tokens_per_s', 0):.0f}  "
                  f"in-flight {metrics.get('rollout/in_flight', 0):.0f}  "
                  f"staleness {metrics.get('rollout/staleness_mean', 0):.2f}  "
                  f"step {metrics.get('time/step_s', 0):.1f}s"
                  + "".join(f"  | {p}: {pool_summary(metrics, p)}" for p in pools_in(metrics)), flush=True)


def _num(v: float | None) -> str:
    """A step's figure, or "-" where the step has none (a task without a group in it)."""
    return "-" if v is None else f"{v:.3f}"


def pools_in(m: dict) -> list[str]:
    """The engine pools a step's metrics report on (pool/<name>/busy_fraction)."""
    return sorted(k.split("/")[1] for k in m if k.startswith("pool/") and k.endswith("/busy_fraction"))


def pool_summary(m: dict, pool: str) -> str:
    """One pool in one line: busy, queue, token rates, live engines, fallbacks, cost so far."""
    k = f"pool/{pool}"
    text = (f"busy {100 * m.get(f'{k}/busy_fraction', 0.0):.0f}%  queue {m.get(f'{k}/outstanding', 0.0):.0f}  "
            f"prefill {m.get(f'{k}/prefill_tokens_per_s', 0.0):.0f}/s  "
            f"decode {m.get(f'{k}/decode_tokens_per_s', 0.0):.0f}/s  "
            f"live {m.get(f'{k}/live_engines', 0.0):.0f}  ${m.get(f'{k}/cost_usd', 0.0):.4f}")
    if m.get(f"{k}/fallbacks"):
        text += f"  fallbacks {m[f'{k}/fallbacks']:.0f}"
    return text
