"""PNG plots of a run, written at the end (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def reward_curve(rows: list[dict], tasks: list[str], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    for task in tasks:
        key = f"reward/{task}/mean"
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, label=task)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward")
    ax.set_title("Reward per task")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def pool_busy(rows: list[dict], pools: list[str], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    for pool in pools:
        key = f"pool/{pool}/busy_fraction"
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, label=pool)
    ax.set_xlabel("training step")
    ax.set_ylabel("busy fraction")
    ax.set_ylim(0, 1.05)
    ax.set_title("Engine pool busy fraction")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
