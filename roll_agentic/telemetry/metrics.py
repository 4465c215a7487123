"""Per-step metrics: appended to metrics.jsonl and mirrored to TensorBoard."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self.tensorboard_dir = run_dir / "tensorboard" if tensorboard else None
        self.writer = None
        self._purge_step: int | None = None
        if tensorboard:
            self._open_writer()

    def _open_writer(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if self.writer is not None:
            self.writer.close()
        # purge_step: TensorBoard drops the events of steps a resume redoes (it showed both).
        self.writer = SummaryWriter(log_dir=str(self.tensorboard_dir), purge_step=self._purge_step)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None)
                 for k, v in metrics.items()}
        clean.pop("step", None)  # a run's metrics carry it too, as a float: the row's is the step
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": int(step), **clean}) + "\n")
        if self.writer is not None:
            for k, v in clean.items():
                if v is not None:
                    self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:  # blank, or torn by a kill mid-write: that step is redone on resume
                continue
        return rows

    def truncate_after(self, step: int) -> None:
        """On resume: forget steps after the checkpoint (they will be redone)."""
        rows = [r for r in self.read() if r["step"] <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")  # a kill meanwhile keeps the whole history
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.path)
        if self.tensorboard_dir is not None:
            self._purge_step = step + 1
            self._open_writer()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
