"""``tuner tune STUDY --budget N``: the whole procedure within one budget, as one resumable command.

sweep-lr when ``max_train_steps`` is unknown, round 1, the report (its suggestions applied to a
next study, searched by its own round 1), round 2 (and 3...), then the delivered model. The
budget rule is the playbook's (``tuner/playbook/budget.py``); the loop is ``tuner/cli/tune``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._errors import guarded
from tuner.cli._options import (
    devices_option,
    output_dir_option,
    progress_option,
    set_option,
    storage_option,
    study_argument,
    workers_option,
)

if TYPE_CHECKING:
    from tuner.cli.tune.context import TuneContext


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
    from tuner.cli.tune.studies import base_sets, production
    from tuner.errors import UsageError
    from tuner.spec import load_study

    if context.request.switches.sweep:
        return
    loaded = load_study(context.home.path, base_sets(context))
    if production(context, loaded) is None and not context.state.stages:
        raise UsageError(
            "training.max_train_steps is not set and --no-sweep skips tuner sweep-lr, which finds "
            "it: set it in the study file (or --set max_train_steps=N), or drop --no-sweep"
        )


@guarded
def tune(
    path: Path = study_argument(),
    budget: str = typer.Option(
        ...,
        "--budget",
        metavar="N",
        help="Training steps for everything (e.g. 5000), or a duration (2h, 30m).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and its step totals; run nothing."),
    no_sweep: bool = typer.Option(
        False, "--no-sweep", help="Never run sweep-lr (max_train_steps must be known)."
    ),
    no_apply: bool = typer.Option(
        False, "--no-apply-suggestions", help="Report round 1's suggestions, but search no next study."
    ),
    no_apply_ranges: bool = typer.Option(
        False, "--no-apply-ranges", help="Apply no change to the search space (ranges, categorical values)."
    ),
    no_apply_length: bool = typer.Option(
        False, "--no-apply-length", help="Apply no change to max_train_steps, eval_every or rounds' steps."
    ),
    no_extra_seeds: bool = typer.Option(
        False,
        "--no-extra-seeds",
        help="No runs on more seeds: the extra round only if it trains longer (with --no-extra-round, "
        "round 2 keeps the file's seeds).",
    ),
    no_extra_round: bool = typer.Option(
        False,
        "--no-extra-round",
        help="No round decided on the last round's report (longer runs, or more seeds); 20% less kept.",
    ),
    short_round1: bool = typer.Option(
        False,
        "--short-round1",
        help="Round 1 at the study file's length (a fraction of max_train_steps), searched again on its "
        "report's suggestions (default: round 1 at full length, its suggestions reported only).",
    ),
    max_searches: int = typer.Option(
        2, "--max-searches", metavar="N", help="Round-1 searches at most: the study's, then next studies'."
    ),
    search_seed: int | None = typer.Option(
        None,
        "--search-seed",
        metavar="N",
        help="A fresh search (other points, inits, data order; the same data split), as STUDY-searchN.",
    ),
    max_failed: int | None = typer.Option(
        None,
        "--max-failed",
        metavar="N",
        help="Failure budget of each phase it runs (default: each phase's own, a third of its trials).",
    ),
    set_: list[str] = set_option(),
    output_dir: Path = output_dir_option(),
    workers: int | None = workers_option(),
    devices: str | None = devices_option(),
    storage: str | None = storage_option(),
    as_json: bool = typer.Option(False, "--json", help="End with the decision log and the model as JSON."),
    progress: bool = progress_option(),
) -> None:
    """Tune a study within one budget: sweep-lr, round 1, the report's suggestions, round 2, the model."""
    from tuner.cli.tune.context import TuneRequest
    from tuner.cli.tune.driver import drive, open_context
    from tuner.cli.tune.projection import project
    from tuner.errors import UsageError
    from tuner.playbook.budget import parse_budget
    from tuner.playbook.tune_plan import Switches

    parsed = parse_budget(budget)
    if max_searches < 1:
        raise UsageError(f"--max-searches {max_searches}: at least 1 (round 1 of the study itself)")
    if search_seed is not None and search_seed < 0:
        raise UsageError(f"--search-seed {search_seed}: must be 0 or more")
    if max_failed is not None and max_failed < 1:
        raise UsageError(f"--max-failed {max_failed}: must be 1 or more")
    request = TuneRequest(
        path=path,
        budget=parsed,
        sets=list(set_),
        output_dir=output_dir,
        storage=storage,
        workers=workers,
        devices=devices,
        switches=Switches(
            sweep=not no_sweep,
            apply_suggestions=not no_apply,
            extra_seeds=not no_extra_seeds,
            extra_round=not no_extra_round,
            max_searches=max_searches,
            apply_ranges=not no_apply_ranges,
            apply_length=not no_apply_length,
            full_length_round1=not short_round1,
        ),
        dry_run=dry_run,
        as_json=as_json,
        progress=progress,
        search_seed=search_seed,
        max_failed=max_failed,
    )
    context = open_context(request)
    if search_seed is not None:
        spec = context.home.spec
        context.say(
            f"a fresh search: search_seed {search_seed} draws round 1's points and every trial's init "
            f"and data order; the data split is seed {spec.seed}'s, as in every search of the file; "
            f"studied as {spec.name}"
        )
    if max_failed is not None:
        context.say(f"failure budget: {max_failed} failed trials in each phase it runs (--max-failed)")
    refuse_no_sweep_without_length(context)
    context.budget_steps = budget_in_steps(context)
    if dry_run:
        plan = project(context)
        if as_json:
            typer.echo(json.dumps({"schema": "tuner.tune/1", "plan": plan.to_json()}, indent=2))
            return
        context.say(
            f"plan for {context.home.spec.name} within {context.budget_steps:,} training steps (nothing run)"
        )
        for line in plan.lines():
            context.console.print(line, markup=False, highlight=False)
        return
    if context.raised_from is not None:
        from tuner.cli.tune.driver import raise_budget

        raise_budget(context)
    context.state.budget_steps = context.budget_steps
    context.state.switches = asdict(request.switches)
    context.save()
    from tuner.cli._console import out
    from tuner.cli.tune.deliver import deliver

    was_quiet = out.quiet
    out.quiet = was_quiet or as_json  # stdout holds the JSON alone; the phases' summaries are in it
    from tuner.orchestrate.warm_start import SharedWarmStart

    try:
        with SharedWarmStart() as context.warm_start:
            final = drive(context)
    finally:
        out.quiet = was_quiet
        if parsed.seconds is not None:  # a duration: the seconds of a run stopped by Ctrl-C count too
            with contextlib.suppress(Exception):  # never hiding why it stopped (an outage, say)
                context.save()
    plan = project(context)
    context.say(
        f"spent {plan.steps_ran:,} of {context.budget_steps:,} training steps "
        f"({', '.join(f'{p.stage} {p.steps_ran:,}' for p in plan.phases)})"
    )
    model = deliver(context, final)
    if as_json:
        payload = {
            "schema": "tuner.tune/1",
            **context.state.to_json(),
            "plan": plan.to_json(),
            "delivered_model": model.to_json() if model is not None else None,
        }
        typer.echo(json.dumps(payload, indent=2, allow_nan=False, default=str))
