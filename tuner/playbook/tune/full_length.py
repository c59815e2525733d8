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

from dataclasses import asdict, dataclass, replace

from tuner.errors import UsageError
from tuner.playbook.decision_log import Decision, Stage
from tuner.playbook.phase_names import round_phase
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.studies import sets_for
from tuner.playbook.tune_plan import FULL_LENGTH_ROUND1, Switches, round1_decision
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


@dataclass(frozen=True)
class Round1Choice:
    """Round 1 as the rule would decide it, before anything is changed: its stage and decision,
    the study as it runs (with the full-length ``--set`` values when ``full_length``), and, when
    round 1 was to train at full length but the budget cannot hold it, the budget's reason
    (``why_short``: round 1 keeps the study file's length)."""

    stage: Stage
    decision: Decision
    loaded: LoadedStudy
    full_length: bool
    why_short: str | None = None


def choose_round1(
    context: TuneContext, loaded: LoadedStudy, length: int, searches: int, left: int
) -> Round1Choice:
    """Round 1 at production ``length`` by the rule (module docstring), changing nothing: what
    ``decide_round1`` takes, and what ``tune`` asks ahead when it weighs a length (``own_settings``).
    Raises what the budget rule raises when not even the file's length fits."""
    from tuner.spec import load_study

    switches = context.request.switches
    why = None
    if switches.full_length_round1 and loaded.spec.name == context.home.spec.name:
        sets = [*FULL_LENGTH_ROUND1, *sets_for(context, loaded)]
        full = load_study(loaded.path, sets)
        try:
            stage, decision = _decide(context, full, length, sets, searches, left, switches)
        except UsageError as error:
            why = str(error)
        else:
            return Round1Choice(stage, decision, full, True)
        switches = replace(switches, full_length_round1=False)  # as _keep_file_length will make them
    stage, decision = _decide(context, loaded, length, sets_for(context, loaded), searches, left, switches)
    return Round1Choice(stage, decision, loaded, False, why)


def decide_round1(
    context: TuneContext, loaded: LoadedStudy, length: int, searches: int, left: int
) -> tuple[Stage, Decision, LoadedStudy, Decision | None]:
    """Round 1's stage and decision, the study as it runs (with the full-length ``--set`` values
    when round 1 trains at full length), and the decision that says round 1 keeps the file's
    length because the budget cannot hold it at full length (None otherwise). Raises what the
    budget rule raises when not even the file's length fits."""
    from tuner.spec import load_study

    choice = choose_round1(context, loaded, length, searches, left)
    if choice.full_length:
        context.request.sets = [*FULL_LENGTH_ROUND1, *context.request.sets]
        context.home = load_study(context.request.path, context.request.sets)
        return choice.stage, choice.decision, choice.loaded, None
    if choice.why_short is None:
        return choice.stage, choice.decision, choice.loaded, None
    _keep_file_length(context)
    why = choice.why_short
    text = (
        f"round 1 at the study file's length, not at full length: the budget "
        f"{why.removeprefix('the budget ').removesuffix('; raise --budget')} "
        "(short trials rank more points within it)"
    )
    short = "round 1 at the study file's length: the budget cannot hold it at full length"
    note = Decision("round1_short", choice.stage.key, text, {"why": why}, short)
    return choice.stage, choice.decision, choice.loaded, note


def _decide(
    context: TuneContext,
    loaded: LoadedStudy,
    length: int,
    sets: list[str],
    searches: int,
    left: int,
    switches: Switches,
) -> tuple[Stage, Decision]:
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
