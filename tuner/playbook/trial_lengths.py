"""How long trials are: the production length (file or sweep-lr) and each round's trial length.

Below ``phases.py`` and the plan builders, which all need it (see ``phase_names.py`` for why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.spec import LoadedStudy, RoundSpec, StudySpec


@dataclass(frozen=True)
class ProductionLength:
    """``max_train_steps`` of a full-length run, and where the value comes from."""

    steps: int | None
    source: str  # "the study file", "tuner sweep-lr", or "" when unknown

    def describe(self) -> str:
        return f"{self.steps} (from {self.source})" if self.steps is not None else "not set"


def round_steps(
    spec: StudySpec, round_spec: RoundSpec, round_number: int, production: int | None = None
) -> int:
    """A round's trial length: ``steps``, else ``length_fraction`` of the production length.

    ``production`` defaults to ``training.max_train_steps``; later rounds without either run at
    the production length.
    """
    if round_spec.steps is not None:
        return round_spec.steps
    production = production if production is not None else spec.training.max_train_steps
    if production is None:
        raise UsageError(
            f"rounds.round{round_number}: set steps, or set training.max_train_steps "
            "(tuner sweep-lr finds it) so the trial length can be a fraction of it"
        )
    fraction = round_spec.length_fraction if round_spec.length_fraction is not None else 1.0
    return max(1, math.ceil(production * fraction))


def check_schedule_fits(loaded: LoadedStudy) -> None:
    """The schedule fits ``max_train_steps`` and round 1's trials, where their lengths are known.

    For ``tuner validate``: ``train`` and ``run-round`` would refuse the same at their start.
    """
    import contextlib

    from tuner.train.schedules import build_schedule

    spec = loaded.spec
    lengths: list[tuple[int, str]] = []
    if spec.training.max_train_steps is not None:
        lengths.append((spec.training.max_train_steps, "training.max_train_steps"))
    if spec.search_space:
        with contextlib.suppress(UsageError):  # no length to check against yet
            lengths.append((round_steps(spec, spec.rounds.round1, 1), "round 1's trials"))
    for total, what in lengths:
        try:
            build_schedule(spec.training.schedule, total)
        except ValueError as error:
            raise loaded.error(
                ("training", "schedule"), f"does not fit {what} of {total} steps: {error}"
            ) from None


def production_length(spec: StudySpec, storage: Any) -> ProductionLength:
    """``training.max_train_steps`` from the file, else sweep-lr's recommendation in the storage."""
    if spec.training.max_train_steps is not None:
        return ProductionLength(spec.training.max_train_steps, "the study file")
    from tuner.playbook.study_results import stored_recommendation

    recommended = stored_recommendation(storage, spec.name) if storage is not None else None
    if recommended is not None:
        return ProductionLength(recommended, "tuner sweep-lr")
    return ProductionLength(None, "")
