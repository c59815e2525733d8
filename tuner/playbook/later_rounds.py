"""Round 2 (and 3, 4...): the previous round's best points, trained longer, with several seeds.

The playbook's step from exploration to exploitation: the ``top_k`` best completed trials of
round N-1 (never a diverged one: those are failures) are trained ``seeds`` times each at
round N's length, optionally at a few multiples of their learning rate (``lr_multipliers``:
the schedule is what transfers least well between lengths). The schedule is the previous
round's, extended the playbook's way (``schedule_extension.py``). Each slot records where it
came from, so the report can measure how well round N-1's ranking transferred.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.playbook.plan import SlotPlan, StoredPlan, explicit_schedule, load_plan

if TYPE_CHECKING:
    from tuner.playbook.trial_lengths import ProductionLength
    from tuner.spec import LoadedStudy, RoundSpec, StudySpec

LR_PATH = ("training", "optimizer", "lr")


def round_length(spec: StudySpec, number: int, previous_steps: int, production: ProductionLength) -> int:
    """Round ``number``'s trial length: ``steps`` / ``length_fraction`` if given; else the last
    round whose length is open runs at the production length and the open ones before it grow
    geometrically towards it (the playbook's "more rounds with exponentially increasing lengths")."""
    from tuner.playbook.trial_lengths import round_steps

    round_spec = spec.rounds.get(number)
    assert round_spec is not None
    if round_spec.steps is not None or round_spec.length_fraction is not None:
        return round_steps(spec, round_spec, number, production.steps)
    if production.steps is None:
        raise UsageError(
            f"round {number} trains at the production length, which is not known yet: set "
            f"training.max_train_steps, run tuner sweep-lr, or set rounds.round{number}.steps"
        )
    # this round and the later ones that leave their length open share the growth to production
    open_rounds = [
        n
        for n in spec.rounds.numbers
        if n >= number
        and (r := spec.rounds.get(n)) is not None
        and r.steps is None
        and r.length_fraction is None
    ]
    if len(open_rounds) <= 1 or previous_steps >= production.steps:
        return production.steps
    ratio = (production.steps / previous_steps) ** (1 / len(open_rounds))
    return min(production.steps, max(previous_steps + 1, math.ceil(previous_steps * ratio)))


def _top_trials(
    trials: list[Any], direction: str, top_k: int, number: int, source: str
) -> tuple[list[Any], str]:
    """The ``top_k`` best COMPLETE trials, and a note when the source round is unfinished."""
    from optuna.trial import TrialState

    from tuner.orchestrate.budget import DUPLICATE_ATTR

    live = [t for t in trials if DUPLICATE_ATTR not in t.user_attrs]
    completed = [
        t for t in live if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    if len(completed) < top_k:
        diverged = sum(1 for t in live if t.user_attrs.get("failure_reason") == "diverged")
        failed = (
            sum(1 for t in live if t.state == TrialState.FAIL and not t.user_attrs.get("retried")) - diverged
        )
        running = sum(1 for t in live if not t.state.is_finished())
        raise UsageError(
            f"round {number} trains {source}'s {top_k} best completed trials, but {source} has only "
            f"{len(completed)} completed ({failed} failed, {diverged} diverged, {running} running or "
            f"waiting); finish {source} (tuner run-round STUDY --round {number - 1}) or lower "
            f"rounds.round{number}.top_k"
        )
    sign = 1.0 if direction == "minimize" else -1.0
    ranked = sorted(completed, key=lambda t: (sign * t.value, int(t.user_attrs.get("slot", t.number))))
    unfinished = sum(1 for t in live if not t.state.is_finished())
    note = (
        f"{source} is unfinished ({unfinished} trials running or waiting): its best "
        f"{top_k} of {len(completed)} completed trials so far are used"
        if unfinished
        else ""
    )
    return ranked[:top_k], note


def slot_of(trial: Any) -> int:
    return int(trial.user_attrs.get("slot", trial.number))


def _widen(space: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The stored space, with numeric ranges widened to hold every planned value (an LR
    multiplier may leave the searched range; Optuna refuses a parameter outside its range)."""
    widened = {key: dict(param) for key, param in space.items()}
    for key, value in values.items():
        param = widened.get(key)
        if param is None or param.get("type") == "categorical" or isinstance(value, bool):
            continue
        param["low"] = min(param["low"], value)
        param["high"] = max(param["high"], value)
    return widened


def _slots(
    sources: list[Any], round_spec: RoundSpec, lr_key: str | None, base_lr: float, source_phase: str
) -> list[SlotPlan]:
    slots = []
    for rank, trial in enumerate(sources, start=1):
        for multiplier in round_spec.lr_multipliers:
            for seed_index in range(round_spec.seeds):
                values = dict(trial.params)
                sets: dict[str, Any] = {"seed_index": seed_index} if seed_index else {}
                if multiplier != 1.0:
                    if lr_key is not None and lr_key in values:
                        values[lr_key] = values[lr_key] * multiplier
                    else:
                        sets["optimizer.lr"] = base_lr * multiplier
                slots.append(
                    SlotPlan(
                        values=values,
                        sets=sets,
                        attrs={
                            "source_phase": source_phase,
                            "source_trial": int(trial.user_attrs.get("slot", trial.number)),
                            "source_rank": rank,
                            "source_value": trial.value,
                            "source_best_step": trial.user_attrs.get("best_step"),
                            "source_steps": trial.user_attrs.get("max_train_steps"),
                            "seed_index": seed_index,
                            "lr_multiplier": multiplier,
                        },
                    )
                )
    return slots


def later_round_plan(
    loaded: LoadedStudy, number: int, storage: Any, production: ProductionLength
) -> StoredPlan:
    """Round ``number`` (>= 2) from the stored results and plan of round ``number - 1``."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries
    from tuner.playbook.config_check import refuse_changed_study
    from tuner.playbook.phase_names import round_phase
    from tuner.playbook.schedule_extension import extend_schedule
    from tuner.spec import ScheduleSegment, key_to_path
    from tuner.train.schedules import build_schedule

    spec = loaded.spec
    round_spec = spec.rounds.get(number)
    assert round_spec is not None and number >= 2
    source = round_phase(number - 1)
    name = optuna_study_name(spec.name, source)
    try:
        previous = with_retries(optuna.load_study, study_name=name, storage=storage)
    except KeyError:
        raise UsageError(
            f"round {number} starts from {source}'s results, but {source} has not run in this storage: "
            f"run tuner run-round STUDY --round {number - 1} first (same --output-dir / --storage)"
        ) from None
    previous_plan = load_plan(with_retries(lambda: previous.user_attrs))
    if previous_plan is None:
        raise UsageError(f"{name} has no stored plan (created by an older tuner): re-run round {number - 1}")
    current = spec.model_dump_for_files()
    refuse_changed_study(
        {k: v for k, v in previous_plan.config.items() if k != "sweep_lr"},
        {k: v for k, v in current.items() if k != "sweep_lr"},
        what=str(loaded.path),
        where=f"{name} (round {number} builds on its results)",
        skip_rounds_from=number,
    )
    trials = with_retries(previous.get_trials, False)
    direction = with_retries(lambda: previous.direction).name.lower()
    sources, unfinished_note = _top_trials(trials, direction, round_spec.top_k, number, source)

    steps = round_length(spec, number, previous_plan.trial_steps, production)
    previous_schedule = build_schedule(
        [ScheduleSegment(**segment) for segment in previous_plan.schedule], previous_plan.trial_steps
    )
    extended = extend_schedule(previous_schedule, steps)
    lr_keys = [key for key in previous_plan.space if key_to_path(key) == LR_PATH]
    slots = _slots(sources, round_spec, lr_keys[0] if lr_keys else None, spec.training.optimizer.lr, source)
    space = dict(previous_plan.space)
    for slot in slots:
        space = _widen(space, slot.values)
    picked = ", ".join(
        f"trial {s.attrs['source_trial']} ({s.attrs['source_value']:.6g})"
        for s in slots[:: round_spec.seeds * len(round_spec.lr_multipliers)]
    )
    multipliers = round_spec.lr_multipliers
    notes = [
        f"{source}'s top {round_spec.top_k} by {spec.objective.metric}: {picked}",
        f"{len(slots)} trials = {round_spec.top_k} points"
        + (f" x {round_spec.seeds} seeds" if round_spec.seeds > 1 else "")
        + (f" x {len(multipliers)} LR multipliers {multipliers}" if multipliers != [1.0] else ""),
        f"length {previous_plan.trial_steps} -> {steps} steps"
        + (
            f" (max_train_steps from {production.source})"
            if production.steps == steps and production.source
            else ""
        ),
        *[f"schedule: {note}" for note in extended.notes],
    ]
    if unfinished_note:
        notes.append(unfinished_note)
    return StoredPlan(
        phase=round_phase(number),
        kind="round",
        config=current,
        trial_steps=steps,
        max_train_steps=production.steps,
        max_train_steps_source=production.source,
        schedule=explicit_schedule(extended.segments),
        schedule_from_file=False,
        sampler="fixed",
        space=space,
        seed=spec.seed,
        slots=slots,
        notes=notes,
        source_phase=source,
    )
