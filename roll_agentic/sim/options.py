"""RollMux's options beyond the paper, as the `sim` commands take them.

One value carries them from the command line to every policy a command
builds, and into its JSON (`rollmux_options`), so a figure always says
what produced it. All off: the paper's placement on arrival, plus what
RollMux does by default (moves of lone jobs, rollout trims).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roll_agentic.mux.placement import RollMuxPolicy
    from roll_agentic.mux.profile import ClusterSpec


@dataclass(frozen=True)
class RollMuxOptions:
    rehome: bool = False  # any member may move, not only lone ones (`mux/rehome.py`)
    share_any: bool = False  # candidates sharing any subset of a group's nodes
    replan_every_h: float = 0.0  # re-place the least-saving groups' jobs this often (0: never)
    bank_slack: bool = False  # hold running jobs to their whole run's SLO (`mux/slack.py`)
    replan_budget: int = 0  # placements a re-plan's search may try (0: one plan, dearest first)
    scale_train: int = 0  # training nodes a joining job may take beyond its own

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RollMuxOptions:
        """The options a parsed `sim` command line sets (a command without `--replan` has none).

        ValueError on a flag that would do nothing: `--replan-budget` without `--replan`.
        """
        if getattr(args, "replan_budget", 0) and not getattr(args, "replan", 0.0):
            raise ValueError("--replan-budget sets what each re-plan searches: give --replan HOURS too")
        return cls(
            rehome=args.rehome,
            share_any=args.share_any,
            replan_every_h=getattr(args, "replan", 0.0),
            bank_slack=args.bank_slack,
            replan_budget=getattr(args, "replan_budget", 0),
            scale_train=getattr(args, "scale_train", 0),
        )

    def policy(self, spec: ClusterSpec, **settings: object) -> RollMuxPolicy:
        """RollMux with these options (and any other `settings` of the policy)."""
        from roll_agentic.mux.placement import RollMuxPolicy  # the CLI starts without it

        return RollMuxPolicy(spec, **asdict(self), **settings)  # type: ignore[arg-type]

    def as_doc(self) -> dict:
        return asdict(self)

    @staticmethod
    def flags(doc: dict) -> list[str]:
        """The command-line flags that set the options in `doc` (`as_doc`)."""
        flags = [
            flag
            for flag, key in (
                ("--rehome", "rehome"),
                ("--share-any", "share_any"),
                ("--bank-slack", "bank_slack"),
            )
            if doc.get(key)
        ]
        if doc.get("scale_train"):
            flags.append(f"--scale-train {doc['scale_train']}")
        if doc.get("replan_every_h"):
            flags.append(f"--replan {doc['replan_every_h']:g}")
            if doc.get("replan_budget"):
                flags.append(f"--replan-budget {doc['replan_budget']}")
        return flags


DEFAULT_OPTIONS = RollMuxOptions()  # none beyond what RollMux does by default
