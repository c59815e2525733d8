"""The extra round: one more round after the study file's last, decided on that round's report.

The playbook's rule for the length (seeds/002, "Deciding how long to train"): best checkpoints
consistently in the last 25% of training mean the runs were still improving: train longer and
retune the decay. sweep-lr measures the length without regularisation (no augmentation, no
weight decay, no dropout), and the playbook warns that the ideal length changes when they are
added: on the outcome benchmark's augmented CNN the sweep's 100-175 steps left round 2 still
improving, where 600 steps gave half the test error. That is only known once the last round has
run at full length, so ``tune`` keeps a share of the budget for one round decided on its report
(``budget.py``), and spends every step left on it:

- **longer** (``ExtraKind.LONGER``), when the report's best-step verdict says the last round's
  runs were still improving, or when ``tune`` set the length by sweep-lr, which trains with the
  searched regularisation off, the sweep's validation best did not come early (noisy labels:
  longer runs memorise there), and the round's validation error was still falling between 50%
  and 75% of training beyond its noise wherever the best steps fell
  (``tuner/playbook/tune/extra.py``, ``unregularised_length``: the playbook's warning that
  regularisation slows training, which a position verdict under a decaying schedule does not
  show): the chosen point (the round's best mean over seeds: the point the delivered-model rule
  would pick) on ``SPREAD_SEEDS`` new seeds, at the longest length the steps left hold, at most
  ``LONGER_AT_MOST`` (4x) the round's, on the eval grid, its schedule extended the playbook's way
  (``schedule_extension.py``). Shorter than ``LATE_GROWTH`` (the report's own 1.5x) it is not
  worth a round: the steps go to seeds instead.
  Whether the longer run is better is not assumed: the delivered-model rule compares its mean
  over seeds with the shorter round's points (``tuner.report.delivered``).
- **seeds** (``ExtraKind.SEEDS``), otherwise: the last round's points again, on as many new seeds
  as the steps hold, at the same length; the delivered-model rule pools a point's runs across the
  two rounds, so a weak or noisy transfer is decided on more runs per point.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from tuner.playbook.budget import SPREAD_SEEDS, LaterRound

LONGER_AT_MOST = 4  # x the last round's length
LATE_GROWTH = 1.5  # the report's "train longer" suggestion; a longer round shorter than this is not run


class ExtraKind(enum.Enum):
    LONGER = "longer"
    SEEDS = "seeds"


@dataclass(frozen=True)
class ExtraRound:
    """Round ``number``: ``top_k`` points of the round before x ``seeds`` new seeds, ``steps`` each."""

    kind: ExtraKind
    number: int
    top_k: int
    seeds: int
    steps: int

    @property
    def cost(self) -> int:
        return self.top_k * self.seeds * self.steps

    def sets(self) -> list[str]:
        """The ``--set`` values that add the round to the study (its file is never rewritten)."""
        key = f"rounds.round{self.number}"
        return [f"{key}.top_k={self.top_k}", f"{key}.seeds={self.seeds}", f"{key}.steps={self.steps}"]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "round": self.number,
            "top_k": self.top_k,
            "seeds": self.seeds,
            "steps_per_trial": self.steps,
            "trials": self.top_k * self.seeds,
            "steps": self.cost,
        }


def shape_extra_round(
    left: int, last: LaterRound, eval_every: int, *, still_improving: bool, seeds_allowed: bool = True
) -> ExtraRound | None:
    """The extra round after ``last`` (as it ran) within ``left`` steps; None when not one run fits
    (or only seeds would, and ``seeds_allowed`` is off: ``--no-extra-seeds``)."""
    number = last.number + 1
    if last.top_k * last.multipliers < 1 or last.steps < 1:  # no completed point to train again
        return None
    if still_improving:
        longest = min(LONGER_AT_MOST * last.steps, left // SPREAD_SEEDS)
        steps = longest // eval_every * eval_every if eval_every > 0 and longest >= eval_every else longest
        if steps >= math.ceil(LATE_GROWTH * last.steps):
            return ExtraRound(ExtraKind.LONGER, number, 1, SPREAD_SEEDS, steps)
    if not seeds_allowed:
        return None
    points = last.top_k * last.multipliers  # each LR multiplier of a point is a point of its own
    seeds = left // (points * last.steps) if last.steps else 0
    if seeds >= 1:
        return ExtraRound(ExtraKind.SEEDS, number, points, seeds, last.steps)
    top_k = left // last.steps if last.steps else 0
    if top_k >= 1:
        return ExtraRound(ExtraKind.SEEDS, number, min(top_k, points), 1, last.steps)
    return None
