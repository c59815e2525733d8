"""How long trials are: the production length (file or sweep-lr) and each round's trial length.

Below ``phases.py`` and the plan builders, which all need it (see ``phase_names.py`` for why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.errors import UsageError
from tuner.spec import LoadedStudy, RoundSpec, StudySpec


@dataclass(frozen=True)
class ProductionLength:
    """``max_train_steps`` of a full-length run, and where the value comes from."""

    steps: int | None
    source: str  # "the study file", "--set max_train_steps=N", "tuner sweep-lr"...; "" when unknown

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
    return on_eval_grid(max(1, math.ceil(production * fraction)), spec.training.eval_every, production)


def on_eval_grid(steps: int, eval_every: int, limit: int) -> int:
    """``steps`` moved to the nearest multiple of ``eval_every`` (up on a tie), never past
    ``limit`` (the production length) nor below one ``eval_every``.

    The engine evaluates every ``eval_every`` steps and once more after the last step. A round of
    190 steps with ``eval_every`` 50 was scored at step 190, an eval no other round repeats (round
    2's run of 950 steps evaluates 150 and 200): round 1's top points could look tied there, and
    its ranking did not carry to what round 2 measures. A length the user gives in ``steps`` is
    kept as given (``tuner validate`` says when a length is off the grid), and so is one shorter
    than ``eval_every`` whose next multiple is the full length: round 1 must stay short.
    """
    if eval_every <= 0 or steps % eval_every == 0 or limit < eval_every or steps >= limit:
        return steps  # the production length itself is the user's (or sweep-lr's) to set
    lower = steps // eval_every * eval_every
    upper = lower + eval_every
    if lower == 0:  # shorter than one eval_every: at one eval_every it could be the full length
        return upper if upper < limit else steps
    if upper > limit:
        return lower
    return upper if upper - steps <= steps - lower else lower


def off_eval_grid(steps: int, eval_every: int) -> bool:
    """A run of ``steps`` ends with an eval that is not on the ``eval_every`` grid."""
    return eval_every > 0 and steps % eval_every != 0


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


MAX_TRAIN_STEPS = ("training", "max_train_steps")
SWEEP_CAP_SOURCE = "tuner sweep-lr's cap: no LR fit within it"  # tune's fallback length


def production_length(
    spec: StudySpec, storage: Any, overrides: Mapping[tuple[str | int, ...], str] | None = None
) -> ProductionLength:
    """``training.max_train_steps`` from the file or a ``--set`` (``overrides``: the loaded
    study's, by field path), else sweep-lr's recommendation in the storage.

    A ``--set`` value is not the study file's: it is named as given, or, when ``tuner tune``
    added it (sweep-lr's cap, as no LR fit within it: its ``max_train_steps_fallback`` decision,
    stored with the study), as sweep-lr's cap."""
    steps = spec.training.max_train_steps
    if steps is not None:
        given = (overrides or {}).get(MAX_TRAIN_STEPS)
        if given is None:
            return ProductionLength(steps, "the study file")
        if tune_fallback(storage, spec.name) == steps:
            return ProductionLength(steps, SWEEP_CAP_SOURCE)
        return ProductionLength(steps, f"--set {given}")
    from tuner.playbook.study_results import stored_recommendation

    recommended = stored_recommendation(storage, spec.name) if storage is not None else None
    if recommended is not None:
        return ProductionLength(recommended, "tuner sweep-lr")
    return ProductionLength(None, "")


def tune_fallback(storage: Any, study: str) -> int | None:
    """The ``max_train_steps`` ``tuner tune`` gives ``study`` when its sweep fit nothing (the
    ``max_train_steps_fallback`` decision of the tune log that covers it), None if none."""
    from tuner.orchestrate import with_retries
    from tuner.playbook.decision_log import state_for

    if storage is None:
        return None
    attrs = {s.study_name: s.user_attrs for s in with_retries(storage.get_all_studies)}
    state = state_for(study, list(attrs), attrs.get)
    if state is None:
        return None
    fallback = next((d for d in state.decisions if d.kind == "max_train_steps_fallback"), None)
    steps = fallback.numbers.get("max_train_steps") if fallback is not None else None
    return int(steps) if isinstance(steps, int) else None
