"""The plan of ``tuner tune`` with its step totals, taken ahead without running or writing
anything: what ran (the stages stored, their trained steps read from the storage) plus what the
same decisions as the driver's would plan next, assuming round 1's report suggests no change
(then the extra round, or with ``--no-extra-round`` round 2's seeds, take the reserve), and the
extra round as an upper bound (its kind is decided on the last round's report). ``--dry-run``
prints it; ``tuner estimate`` too. It reads no report and runs nothing: a projection's context
has no advisor and no phase runner."""

from __future__ import annotations

from pathlib import Path

from tuner.playbook.budget import Budget
from tuner.playbook.decision_log import Stage, TuneState
from tuner.playbook.phase_names import SWEEP_PHASE, round_phase
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.request import TuneRequest
from tuner.playbook.tune_plan import (
    PlannedPhase,
    TunePlan,
    later_decisions,
    sweep_decision,
)
from tuner.spec import LoadedStudy


def _trials(stage: Stage) -> int | None:
    if stage.trials is not None:
        return stage.trials
    return stage.planned_steps // stage.steps_per_trial if stage.steps_per_trial else None


def _planned(stage: Stage) -> PlannedPhase:
    return PlannedPhase(
        stage.key, _trials(stage), stage.steps_per_trial, 0, stage.planned_steps, stage.upper_bound
    )


def project(context: TuneContext) -> TunePlan:
    from tuner.playbook.tune.studies import current_study, production, sets_for

    plan = TunePlan(context.budget_steps)
    committed = 0
    for stage in context.state.stages:
        ran = context.steps_of(stage)
        to_run = 0 if stage.done else max(0, stage.planned_steps - ran)
        committed += ran + to_run
        plan.phases.append(
            PlannedPhase(
                stage.key, _trials(stage), stage.steps_per_trial, ran, to_run, stage.upper_bound, stage.done
            )
        )
    left = context.budget_steps - committed
    loaded = current_study(context)
    name = loaded.spec.name
    switches = context.request.switches
    sets = sets_for(context, loaded)
    length = production(context, loaded)
    if length is None:
        if context.state.stage(name, SWEEP_PHASE) is None:
            stage, _ = sweep_decision(loaded, context.budget_steps, sets)
            plan.phases.append(_planned(stage))
        for number in loaded.spec.rounds.numbers:
            plan.phases.append(PlannedPhase(f"{name}/{round_phase(number)}", None, None, 0, None))
        return plan
    round1_trials = None
    if context.state.stage(name, round_phase(1)) is None:
        from tuner.playbook.tune.full_length import decide_round1
        from tuner.playbook.tune.own_settings import own_decisions
        from tuner.spec import load_study

        own, length = own_decisions(context, loaded, length)
        if own:  # said as notes, and taken in memory only (a projection stores nothing)
            context.state.decisions += own
            loaded = load_study(loaded.path, sets_for(context, loaded))
            plan.notes += [d.line for d in own]

        searches = 1 + sum(1 for s in context.state.stages if s.phase == round_phase(1))
        stage, decision, loaded, note = decide_round1(context, loaded, length, searches, left)
        switches, sets = context.request.switches, sets_for(context, loaded)
        if note is not None:
            plan.notes.append(note.text)
        plan.phases.append(_planned(stage))
        left -= stage.planned_steps
        round1_trials = stage.trials
        if decision.numbers.get("reserve"):
            taker = "the round after the last round takes" if switches.extra_round else "round 2's seeds take"
            plan.notes.append(
                f"round 1 keeps {decision.numbers['reserve']:,} steps for a search on its report's "
                f"suggestions; if it suggests none, {taker} them (as planned here)"
            )
    later = [n for n in loaded.spec.rounds.numbers if n >= 2]
    if later and context.state.stage(name, round_phase(later[0])) is None:
        first = context.state.stage(name, round_phase(1))
        trials = first.trials if first is not None else round1_trials
        decided = later_decisions(
            loaded,
            length,
            left,
            sets,
            fill_seeds=switches.extra_seeds and not switches.extra_round,
            round1_trials=trials,
            spread_within=context.budget_steps if switches.extra_round else None,
        )
        for stage, _ in decided:
            plan.phases.append(_planned(stage))
            left -= stage.planned_steps
    extra = f"{name}/{round_phase(loaded.spec.rounds.numbers[-1] + 1)}"
    settled = any(s.key == extra for s in context.state.stages) or any(
        d.kind == "extra_round_none" for d in context.state.decisions
    )
    if switches.extra_round and not settled and left > 0:
        plan.phases.append(PlannedPhase(extra, None, None, 0, left, upper_bound=True))
        plan.notes.append(
            f"{extra}: decided on the last round's report, with the steps left: longer runs of its "
            "chosen point if they were still improving, else its points on more seeds"
        )
    return plan


def stored_plan(
    loaded: LoadedStudy, sets: list[str], output_dir: Path, storage: str | None
) -> TunePlan | None:
    """The plan of a study ``tune`` has run on (its budget and flags as stored), for ``tuner
    estimate``; None if ``tune`` never ran on it. Reads only: nothing is created."""
    from tuner.orchestrate import resolve_storage_url
    from tuner.playbook.decision_log import load_state
    from tuner.playbook.tune_plan import Switches

    spec = loaded.spec
    url = storage or resolve_storage_url(spec.storage, output_dir, spec.name)
    probe = TuneContext(
        TuneRequest(loaded.path, Budget("0", steps=1), sets, output_dir, storage), loaded, url, TuneState()
    )
    state = load_state(probe.storage_of(loaded, create=False), spec.name)
    if state is None or state.budget is None or state.budget_steps is None:
        return None
    switches = Switches(**state.switches) if state.switches else Switches()
    request = TuneRequest(loaded.path, state.budget, sets, output_dir, storage, switches=switches)
    context = TuneContext(request, loaded, url, state, state.budget_steps, probe.storages)
    return project(context)
