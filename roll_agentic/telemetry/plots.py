"""PNG plots of a run, written at the end (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _lines(rows: list[dict], series: dict[str, str], ylabel: str, title: str, out: Path,
           ylim: tuple[float, float] | None = None, **style) -> Path:
    """One line per metrics key (label -> key) over training steps."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, key in series.items():
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, label=label, **style)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at 1.25
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_lines():  # no data: no legend (matplotlib warned "No artists with labels")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def reward_curve(rows: list[dict], tasks: list[str], out: Path) -> Path:
    """Training reward per task, and the held-out evaluation's where the run evaluated (eval.every)."""
    series = {t: f"reward/{t}/mean" for t in tasks}
    series.update({f"{t} (eval)": f"eval/{t}/mean" for t in tasks})
    return _lines(rows, series, "mean reward", "Reward per task", out, marker="o", markersize=3)


def pool_busy(rows: list[dict], pools: list[str], out: Path) -> Path:
    return _lines(rows, {p: f"pool/{p}/busy_fraction" for p in pools}, "busy fraction",
                  "Engine pool busy fraction", out, ylim=(0, 1.05))
