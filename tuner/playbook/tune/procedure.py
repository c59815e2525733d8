"""``tune``: the whole procedure within one budget, as one resumable call.

Opened on the study and what an earlier run of the same request left, it plans (``--dry-run``:
``Projected``, nothing run) or runs every phase to the delivered model (``Finished``), saying
each decision as it is stored. It needs its caller for what sits above the playbook: an
``Advisor`` reads a round's report, a ``PhaseRunner`` runs a phase; ``tuner tune`` passes the
report's and the command line's, and renders the messages.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict

from tuner.playbook.tune.advisor import Advisor
from tuner.playbook.tune.messages import Emit, Finished, Projected, Spent
from tuner.playbook.tune.phase_runner import PhaseRunner
from tuner.playbook.tune.request import TuneRequest


def tune(request: TuneRequest, *, advisor: Advisor, runner: PhaseRunner, emit: Emit) -> None:
    """Plan or run ``request``, saying what it decides and finds to ``emit``. Raises what stops
    it: a ``UsageError`` (a budget too small, a refused flag), or whatever the runner raises to
    stop a phase (the state is stored up to there, and the same request continues it)."""
    from tuner.playbook.tune.deliver import deliver
    from tuner.playbook.tune.driver import drive
    from tuner.playbook.tune.opening import (
        budget_in_steps,
        open_context,
        raise_budget,
        refuse_no_sweep_without_length,
    )
    from tuner.playbook.tune.projection import project

    context = open_context(request, emit=emit, advisor=advisor, runner=runner)
    if request.search_seed is not None:
        spec = context.home.spec
        context.say(
            f"a fresh search: search_seed {request.search_seed} draws round 1's points and every "
            f"trial's init and data order; the data split is seed {spec.seed}'s, as in every search "
            f"of the file; studied as {spec.name}"
        )
    if request.max_failed is not None:
        context.say(
            f"failure budget: {request.max_failed} failed trials in each phase it runs (--max-failed)"
        )
    refuse_no_sweep_without_length(context)
    context.budget_steps = budget_in_steps(context)
    if request.dry_run:
        emit(Projected(context.home.spec.name, context.budget_steps, project(context)))
        return
    if context.raised_from is not None:
        raise_budget(context)
    context.state.budget_steps = context.budget_steps
    context.state.switches = asdict(request.switches)
    context.save()
    try:
        final = drive(context)
    finally:
        if request.budget.seconds is not None:  # a duration: the seconds of a run stopped by Ctrl-C count too
            with contextlib.suppress(Exception):  # never hiding why it stopped (an outage, say)
                context.save()
    plan = project(context)
    emit(Spent(context.budget_steps, plan))
    delivery = deliver(context, final)
    emit(Finished(context.state, plan, delivery.model))
