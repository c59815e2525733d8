"""``tune``'s round 1 at full length, its default, and when round 1 keeps the study file's length.

Why full length: short trials favour what learns fast (high learning rates), and the search on
their report's suggestions spends the budget again on the same space; on the outcome benchmark
round 1 at ``max_train_steps``, its suggestions reported and not searched, delivered better models
than the short round 1, beyond the noise (docs/benchmarks.md has the figures). ``--short-round1``
keeps the study file's round 1 (the playbook's short exploration) and searches a next study on
its suggestions.

Round 1 keeps the file's length also when a round 1 of the study was planned before (an earlier
``tune --short-round1``, or ``run-round``: tune takes it as it is, since later rounds must match
its plan), and when the budget cannot hold a full-length round 1 of the trials round 2 needs
beside the later rounds (a small budget: short trials rank more points). Either way ``tune``
says so, and the mode is fixed once round 1 is decided: its stage carries the ``--set`` values.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from tuner.errors import UsageError
from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.phase_names import round_phase
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.studies import sets_for
from tuner.playbook.tune_plan import FULL_LENGTH_ROUND1, round1_decision
from tuner.spec import LoadedStudy


def settle_resumed(context: TuneContext) -> None:
    """On a run that continues: round 1 at full length again if its stage was planned so; the
    file's length if a round 1 was planned otherwise (by tune or another command)."""
    from tuner.playbook.estimate import load_stored_phase
    from tuner.spec import load_study

    if not context.request.switches.full_length_round1:
        return
    name = context.home.spec.name
    stage = context.state.stage(name, round_phase(1))
    if stage is not None and set(FULL_LENGTH_ROUND1) <= set(stage.sets):
        context.request.sets = [*FULL_LENGTH_ROUND1, *context.request.sets]
        context.home = load_study(context.request.path, context.request.sets)
        return
    storage = context.storage_of(context.home, create=False)
    if stage is not None or load_stored_phase(storage, name, round_phase(1)) is not None:
        _keep_file_length(context)
        context.say(
            f"{name}: round 1 was planned at the file's length earlier: taken as it is (--short-round1)"
        )


def decide_round1(
    context: TuneContext, loaded: LoadedStudy, length: int, searches: int, left: int
) -> tuple[Stage, Decision, LoadedStudy, Decision | None]:
    """Round 1's stage and decision, the study as it runs (with the full-length ``--set`` values
    when round 1 trains at full length), and the decision that says round 1 keeps the file's
    length because the budget cannot hold it at full length (None otherwise). Raises what the
    budget rule raises when not even the file's length fits."""
    from tuner.spec import load_study

    switches = context.request.switches
    if switches.full_length_round1 and loaded.spec.name == context.home.spec.name:
        sets = [*FULL_LENGTH_ROUND1, *sets_for(context, loaded)]
        full = load_study(loaded.path, sets)
        try:
            stage, decision = _decide(context, full, length, sets, searches, left)
        except UsageError as error:
            _keep_file_length(context)
            why = str(error)
        else:
            context.request.sets = [*FULL_LENGTH_ROUND1, *context.request.sets]
            context.home = load_study(context.request.path, context.request.sets)
            return stage, decision, full, None
        stage, decision = _decide(context, loaded, length, sets_for(context, loaded), searches, left)
        text = (
            f"round 1 at the study file's length, not at full length: the budget "
            f"{why.removeprefix('the budget ').removesuffix('; raise --budget')} "
            "(short trials rank more points within it)"
        )
        note = Decision("round1_short", stage.key, text, {"why": why}, "round 1 at the study file's length: "
                        "the budget cannot hold it at full length")  # fmt: skip
        return stage, decision, loaded, note
    stage, decision = _decide(context, loaded, length, sets_for(context, loaded), searches, left)
    return stage, decision, loaded, None


def _decide(
    context: TuneContext, loaded: LoadedStudy, length: int, sets: list[str], searches: int, left: int
) -> tuple[Stage, Decision]:
    switches = context.request.switches
    return round1_decision(
        loaded,
        length,
        left,
        sets,
        keep_reserve=switches.may_apply and searches < switches.max_searches,
        search=searches,
        budget=context.budget_steps,
        extra_round=switches.extra_round,
    )


def _keep_file_length(context: TuneContext) -> None:
    context.request.switches = replace(context.request.switches, full_length_round1=False)
    context.state.switches = asdict(context.request.switches)
