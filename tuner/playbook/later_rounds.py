"""Round 2 (and 3, 4...): the previous round's best points, trained longer, with several seeds.

The playbook's step from exploration to exploitation: the ``top_k`` best points of round N-1
(ranked by their mean over seeds, ``ranked_points.py``; never a diverged run: those are
failures) are trained ``seeds`` times each at round N's length, optionally at a few multiples
of their learning rate (``lr_multipliers``: the schedule is what transfers least well between
lengths). Each point keeps everything it trained with (its slot's ``sets``, its own schedule,
extended the playbook's way: ``schedule_extension.py``). Each slot records where it came from,
so the report can measure how well round N-1's ranking transferred.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.playbook.plan import SlotPlan, StoredPlan, explicit_schedule, load_plan
from tuner.playbook.ranked_points import RankedPoint, slot_of, top_points

if TYPE_CHECKING:
    from tuner.playbook.schedule_extension import ExtendedSchedule
    from tuner.playbook.trial_lengths import ProductionLength
    from tuner.spec import LoadedStudy, RoundSpec, StudySpec

LR_PATH = ("training", "optimizer", "lr")


def round_length(spec: StudySpec, number: int, previous_steps: int, production: ProductionLength) -> int:
    """Round ``number``'s trial length: ``steps`` / ``length_fraction`` if given; else the last
    round whose length is open runs at the production length and the open ones before it grow
    geometrically towards it (the playbook's "more rounds with exponentially increasing lengths")."""
    from tuner.playbook.trial_lengths import on_eval_grid, round_steps

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
    grown = min(production.steps, max(previous_steps + 1, math.ceil(previous_steps * ratio)))
    snapped = on_eval_grid(grown, spec.training.eval_every, production.steps)
    return snapped if snapped > previous_steps else grown  # a round never shorter than the last


def _seed_range(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


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


@dataclass(frozen=True)
class _Source:
    """A point of round N-1 as it really trained, and what round N carries over from it.

    Round N must train what round N-1 trained, longer: the point's searched values (``trial.params``)
    AND its slot's other keys (an LR multiplier of a round whose LR is not searched lives only in
    ``sets``), and its own schedule (searched schedule keys applied) extended.
    """

    point: RankedPoint  # its seed runs (params, slot and best step from the first)
    sets: dict[str, Any]  # the slot's keys besides its params, seed index dropped (round N sets its own)
    lr: float  # the LR it trained at
    schedule: ExtendedSchedule


def _source(previous_plan: StoredPlan, point: RankedPoint, steps: int) -> _Source:
    from tuner.playbook.schedule_extension import extend_schedule
    from tuner.train.schedules import build_schedule

    trial = point.trial
    slot = slot_of(trial)
    trained = previous_plan.trial_spec(slot, trial.params).training
    planned = previous_plan.slot(slot)
    sets = {k: v for k, v in (planned.sets if planned else {}).items() if k != "seed_index"}
    schedule = extend_schedule(build_schedule(trained.schedule, previous_plan.trial_steps), steps)
    return _Source(point, sets, trained.optimizer.lr, schedule)


def first_seed_index(spec: StudySpec, number: int) -> int:
    """Round ``number``'s first ``training.seed_index``: one no earlier round trained with.

    Round 1 trains every point on seed index 0. Round 2 used to train its first seed on 0 too:
    with ``seeds: 1`` it replayed round 1's run step for step (the same weights at the same step,
    only the schedule's tail differing), so its "the ranking held" proved nothing. Round N's
    seeds follow those of rounds 2 .. N-1: round 2 with 2 seeds trains indices 1 and 2, a round
    3 after it starts at 3.
    """
    earlier = [spec.rounds.get(n) for n in spec.rounds.numbers if 2 <= n < number]
    return 1 + sum(r.seeds for r in earlier if r is not None)


def _slots(
    sources: list[_Source], round_spec: RoundSpec, lr_key: str | None, source_phase: str, first_seed: int
) -> list[SlotPlan]:
    slots = []
    for rank, source in enumerate(sources, start=1):
        trial = source.point.trial
        for multiplier in round_spec.lr_multipliers:
            for seed_index in range(first_seed, first_seed + round_spec.seeds):
                values = dict(trial.params)
                sets: dict[str, Any] = {**source.sets, "seed_index": seed_index}
                if multiplier != 1.0:
                    if lr_key is not None and lr_key in values:
                        values[lr_key] = values[lr_key] * multiplier
                    else:  # of the LR the point trained at, not of the file's
                        sets["optimizer.lr"] = source.lr * multiplier
                slots.append(
                    SlotPlan(
                        values=values,
                        sets=sets,
                        schedule=explicit_schedule(source.schedule.segments),
                        attrs={
                            "source_phase": source_phase,
                            "source_trial": slot_of(trial),
                            "source_rank": rank,
                            "source_value": source.point.value,  # the mean over its seeds
                            "source_values": source.point.values,  # one per seed
                            "source_best_step": trial.user_attrs.get("best_step"),
                            "source_steps": trial.user_attrs.get("max_train_steps"),
                            "seed_index": seed_index,
                            "lr_multiplier": multiplier,
                        },
                    )
                )
    return slots


def _schedule_notes(sources: list[_Source]) -> list[str]:
    """The extension's notes once when every point's schedule is the same, else per point."""
    first = sources[0].schedule.notes
    if all(s.schedule.notes == first for s in sources):
        return [f"schedule: {note}" for note in first]
    return [f"schedule of trial {slot_of(s.point.trial)}: {'; '.join(s.schedule.notes)}" for s in sources]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def later_round_plan(
    loaded: LoadedStudy, number: int, storage: Any, production: ProductionLength
) -> StoredPlan:
    """Round ``number`` (>= 2) from the stored results and plan of round ``number - 1``."""
    import optuna

    from tuner.orchestrate import optuna_study_name, with_retries
    from tuner.playbook.config_check import refuse_changed_study
    from tuner.playbook.phase_names import round_phase
    from tuner.spec import key_to_path

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
    ranked, unfinished_note = top_points(trials, previous_plan, direction, round_spec.top_k, number, source)

    steps = round_length(spec, number, previous_plan.trial_steps, production)
    points = [_source(previous_plan, point, steps) for point in ranked]
    lr_keys = [key for key in previous_plan.space if key_to_path(key) == LR_PATH]
    first_seed = first_seed_index(spec, number)
    slots = _slots(points, round_spec, lr_keys[0] if lr_keys else None, source, first_seed)
    space = dict(previous_plan.space)
    for slot in slots:
        space = _widen(space, slot.values)
    seeded = any(len(point.runs) > 1 for point in ranked)
    by = f"{spec.objective.metric} (mean over seeds, with their range)" if seeded else spec.objective.metric
    multipliers = round_spec.lr_multipliers
    notes = [
        f"{source}'s top {round_spec.top_k} by {by}: {', '.join(p.describe() for p in ranked)}",
        f"{_count(len(slots), 'trial')} = {_count(round_spec.top_k, 'point')}"
        + (f" x {round_spec.seeds} seeds" if round_spec.seeds > 1 else "")
        + (f" x {len(multipliers)} LR multipliers {multipliers}" if multipliers != [1.0] else ""),
        f"seeds: training.seed_index {_seed_range(first_seed, round_spec.seeds)}, new to this round "
        "(round 1 trained on 0): a ranking that holds is not a replay",
        f"length {previous_plan.trial_steps} -> {steps} steps"
        + (
            f" (max_train_steps from {production.source})"
            if production.steps == steps and production.source
            else ""
        ),
        *_schedule_notes(points),
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
        schedule=explicit_schedule(points[0].schedule.segments),  # each slot carries its own (_slots)
        schedule_from_file=False,
        sampler="fixed",
        space=space,
        seed=spec.points_seed,
        slots=slots,
        notes=notes,
        source_phase=source,
    )
