"""What a ``tune`` run does before its first phase: the study and the state an earlier run of the
same command left, a larger ``--budget`` than that run's, and the budget in training steps (a
duration converted once, then stored)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.errors import UsageError
from tuner.playbook.budget import Budget
from tuner.playbook.decision_log import Decision, TuneState, load_state
from tuner.playbook.tune.context import TuneContext
from tuner.playbook.tune.messages import Emit
from tuner.playbook.tune.request import TuneRequest

if TYPE_CHECKING:
    from tuner.playbook.tune.advisor import Advisor
    from tuner.playbook.tune.phase_runner import PhaseRunner


def open_context(request: TuneRequest, *, emit: Emit, advisor: Advisor, runner: PhaseRunner) -> TuneContext:
    """The study, its storage (not created for ``--dry-run``) and the state a previous run left."""
    from tuner.orchestrate import resolve_storage_url
    from tuner.spec import load_study
    from tuner.workloads import check_study

    loaded = load_study(request.path, request.sets)
    if request.search_seed is not None:
        request.sets = fresh_search_sets(request.sets, request.search_seed, loaded.spec.name)
        loaded = load_study(request.path, request.sets)
    check_study(loaded)
    spec = loaded.spec
    url = request.storage or resolve_storage_url(spec.storage, request.output_dir, spec.name)
    state = TuneState(budget=request.budget)
    context = TuneContext(request, loaded, url, state, emit=emit, advisor=advisor, runner=runner)
    stored = load_state(context.storage_of(loaded, create=False), spec.name)
    if stored is not None:
        if stored.budget is not None and not stored.budget.same_as(request.budget):
            _check_raise(spec.name, stored, request.budget)
            context.raised_from = stored.budget
        context.state = stored
        context.spent_before = stored.spent_s
    from tuner.playbook.tune.full_length import settle_resumed

    settle_resumed(context)
    return context


def _check_raise(name: str, stored: TuneState, budget: Budget) -> None:
    """A different ``--budget`` for a study being tuned: a larger one of the same kind (steps, or
    a duration) goes on from what ran; anything else is refused in one line."""
    old = stored.budget
    assert old is not None
    same_kind = (old.steps is None) == (budget.steps is None)
    larger = same_kind and (budget.steps or budget.seconds or 0) > (old.steps or old.seconds or 0)
    if not larger:
        raise UsageError(
            f"{name} is being tuned with --budget {old.text}; run the same command to continue it, "
            f"or give a larger budget of the same kind (steps, or a duration) to go on from what ran "
            f"(a smaller or another kind of budget needs another --output-dir / --storage)"
        )


def fresh_search_sets(sets: list[str], search_seed: int, name: str) -> list[str]:
    """``--search-seed N``: the ``--set`` values of a fresh search of the study named ``name``:
    ``search_seed`` N (round 1's points, every trial's init and data order; the data split stays
    ``seed``'s) under the name ``NAME-searchN``, so that it has phases of its own beside the
    study's first search in the same output folder, and the same command continues it."""
    if any(item.partition("=")[0].strip() == "search_seed" for item in sets):
        raise UsageError(f"--search-seed {search_seed} and --set search_seed=...: give one of them")
    return [*sets, f"search_seed={search_seed}", f"name={name}-search{search_seed}"]


def raise_budget(context: TuneContext) -> None:
    """Log a larger ``--budget`` than the one the study was being tuned with: what ran counts,
    and what the rounds left undone, or more rounds of its best points, take the rest."""
    old = context.raised_from
    assert old is not None
    before = context.state.budget_steps or 0
    spent = context.committed()
    context.state.budget = context.request.budget
    context.state.budget_steps = context.budget_steps
    context.decide(
        Decision(
            "budget_raised",
            context.home.spec.name,
            f"budget raised {old.text} -> {context.request.budget.text} ({before:,} -> "
            f"{context.budget_steps:,} training steps): the {spent:,} steps spent or planned count, and "
            "the rest goes to the rounds still to run, then to more rounds of the best points, each "
            "decided on the last one's report",
            {"from_steps": before, "steps": context.budget_steps, "spent": spent},
            short=f"budget raised {before:,} -> {context.budget_steps:,} training steps: the {spent:,} "
            "spent count",
        )
    )


def budget_in_steps(context: TuneContext) -> int:
    """The budget in training steps: as given, or a duration converted once (then stored) at the
    seconds per step of a short probe here (``tuner estimate``'s: steps, evals, and a trial's
    start-up spread over round 1's length, else 100 steps), with as many trials side by side as
    workers. A rough conversion, said in the log; a budget in steps is exact."""
    budget = context.request.budget
    if budget.steps is not None:
        return budget.steps
    raised = context.raised_from
    if context.state.budget_steps is not None and raised is not None and raised.seconds:
        # a longer duration than an earlier run's: its steps, at the pace it was converted at
        return int(context.state.budget_steps * (budget.seconds or 0) / raised.seconds)
    if context.state.budget_steps is not None:
        return context.state.budget_steps
    from tuner.playbook.budget import steps_for_duration
    from tuner.playbook.estimate import plan_workers, probe_cost

    spec = context.home.spec
    request = context.request
    devices = request.devices.split(",") if request.devices else None
    workers = plan_workers(
        workers=request.workers,
        devices=devices,
        max_parallel=None,
        budget=10**6,
        processes_per_trial=spec.training.processes_per_trial,
    )
    cost = probe_cost(context.home, threads=workers.threads, device=workers.device)
    # a trial's start-up, spread over the steps of a short trial (round 1's: most trials are)
    trial = spec.rounds.round1.steps or max(spec.training.eval_every, 100)
    per_step = cost.seconds_per_step(spec.training.eval_every) + cost.startup_s / trial
    assert budget.seconds is not None
    steps = steps_for_duration(budget.seconds, per_step, len(workers.labels))
    context.say(
        f"budget {budget.text} = {steps:,} training steps at {per_step:.3g} s a step (a probe here, "
        f"start-up included) on {len(workers.labels)} workers"
    )
    return steps


def refuse_no_sweep_without_length(context: TuneContext) -> None:
    """``--no-sweep`` on a study whose ``max_train_steps`` nothing gives: refused before anything
    is written (a study that ``tune`` has started keeps the stages it decided)."""
    from tuner.playbook.tune.driver import NO_SWEEP_WITHOUT_LENGTH
    from tuner.playbook.tune.studies import base_sets, production
    from tuner.spec import load_study

    if context.request.switches.sweep:
        return
    loaded = load_study(context.home.path, base_sets(context))
    if production(context, loaded) is None and not context.state.stages:
        raise UsageError(NO_SWEEP_WITHOUT_LENGTH)
