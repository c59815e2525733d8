"""What a finished phase says: which workers did not end normally, the summary, the exit code.

Shared by ``run-round`` and ``sweep-lr`` (through ``_phase_run``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from tuner.cli._console import err, error_line, out, plural
from tuner.cli._errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE
from tuner.cli._phase_view import headline, trial_label, trial_name
from tuner.output import shown_path

if TYPE_CHECKING:
    from tuner.orchestrate.progress import PhaseSnapshot
    from tuner.playbook.plan import StoredPlan


def _last_error_line(log: Path) -> str:
    """The ``error: ...`` line a worker printed last (its one-line report of what went wrong)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.removeprefix("error: ") for line in reversed(lines) if line.startswith("error: ")), "")


def _status_detail(folder: Path, label: str) -> str:
    """What a stopped worker last wrote in its status file (``.workers/<label>.json``)."""
    try:
        status = json.loads((folder / ".workers" / f"{label}.json").read_text())
    except (OSError, ValueError):
        return ""
    return str(status.get("detail", "")) if status.get("state") == "stopped" else ""


def environment_errors(codes: dict[str, int], folder: Path) -> list[str]:
    """What the workers that stopped on a fault of the machine (exit 2: a full disk, a read-only
    folder) said, each once. A full disk may have kept a worker from writing its log: its status
    file (written after it freed its reserve) or the free space left tells then."""
    from tuner.orchestrate.disk_full import RESERVE_BYTES

    said, silent = [], []
    for label, code in sorted(codes.items()):
        if code == EXIT_USAGE:
            line = _last_error_line(folder / ".workers" / f"{label}.log") or _status_detail(folder, label)
            (said if line else silent).append(line or label)
    if silent and not any(line.startswith("disk full:") for line in said):
        full = False
        with contextlib.suppress(OSError):
            full = shutil.disk_usage(folder).free <= RESERVE_BYTES
        said += (
            [f"disk full: {shown_path(folder)}"]
            if full
            else [f"worker {label} stopped on a fault of its environment (exit 2)" for label in silent]
        )
    return list(dict.fromkeys(said))


def report_workers(codes: dict[str, int], folder: Path) -> bool:
    """Say which local workers did not end normally (0, 1: failure budget, 2: a fault of the
    machine, which ``environment_errors`` names, 130: interrupted).

    Returns whether any did: a worker that crashes is a bug, never a normal end of the phase.
    """
    crashed = False
    for label, code in sorted(codes.items()):
        if code in (0, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED):
            continue
        crashed = True
        log = shown_path(folder / ".workers" / f"{label}.log")
        if code < 0:
            try:
                what = f"died of {signal.Signals(-code).name}"
            except ValueError:
                what = f"died of signal {-code}"
        else:
            what = f"crashed: {_last_error_line(folder / '.workers' / f'{label}.log') or f'exit code {code}'}"
        error_line(escape(f"worker {label} {what}; its log: {log}"))
    return crashed


# the reasons whose trials have an error.log
LOGGED_REASONS = ("crashed", "oom", "timeout", "stalled", "killed")
SHOWN_LOGS = 3


def broken_line(snapshot: PhaseSnapshot) -> str:
    """One line for a phase the workload's own error stopped before any trial trained a step."""
    from tuner.orchestrate.budget import BROKEN_ATTR, final_failure, superseded

    replaced = superseded(snapshot.trials)
    broken = sorted(
        (t for t in snapshot.trials if final_failure(t, replaced) and t.user_attrs.get(BROKEN_ATTR)),
        key=lambda t: t.number,
    )
    error = str(broken[0].user_attrs.get("error", "")) if broken else ""
    return (
        f"{error}; it failed before the first training step, as every trial would, so no trial "
        "was retried: fix it, then run the same command again"
    )


def failure_advice(snapshot: PhaseSnapshot) -> list[str]:
    """What to read or change for the phase's final failures (diverged trials are not failures)."""
    from tuner.orchestrate.budget import final_failure, superseded

    replaced = superseded(snapshot.trials)
    final = [t for t in snapshot.trials if final_failure(t, replaced)]
    logged = [t for t in final if t.user_attrs.get("failure_reason", "crashed") in LOGGED_REASONS]
    if not logged:
        return []
    paths = []
    for trial in sorted(logged, key=lambda t: t.number):
        run_dir = trial.user_attrs.get("run_dir")
        log = Path(run_dir) / "error.log" if run_dir else None
        paths.append(shown_path(log) if log is not None and log.exists() else trial_label(trial))
    more = f" and {len(paths) - SHOWN_LOGS} more" if len(paths) > SHOWN_LOGS else ""
    return [f"read their error.log: {', '.join(paths[:SHOWN_LOGS])}{more}"]


def diverged_line(snapshot: PhaseSnapshot) -> str:
    """``3 trials (NaN/inf loss; ...): trial 0, trial 2, trial 5``: information about the search
    space (its learning rates reach too high), not a failure of the phase."""
    failed = sorted((t for t in snapshot.trials if t.state.name == "FAIL"), key=lambda t: t.number)
    diverged = [t for t in failed if t.user_attrs.get("failure_reason") == "diverged"]
    names = ", ".join(trial_label(t) for t in diverged[:SHOWN_LOGS])
    more = f" and {len(diverged) - SHOWN_LOGS} more" if len(diverged) > SHOWN_LOGS else ""
    return (
        f"{plural(len(diverged), 'trial')} (NaN/inf loss; not counted against the failure budget): "
        f"{names}{more}"
    )


def best_point(snapshot: PhaseSnapshot, plan: StoredPlan | None, direction: str) -> str | None:
    """With several seeds a point, the best *run* above is one lucky seed; the study's model
    (``tuner report``'s rule, ``tuner.report.delivered``) is the best seed of the point with the
    best mean over its seeds, which may be another point: said here so the two are not confused.
    Only this round's runs are read here, and the rule pools a point's runs at one length across
    rounds (a round 3 of new seeds), so the line names this round's choice and leaves the study's
    to ``tuner report`` (it used to call this round's choice the study's model). None when every
    point ran once."""
    from tuner.playbook.ranked_points import points_of, rankable_runs, ranked, slot_of

    completed = rankable_runs(snapshot.trials)
    points = points_of(completed, plan)
    if len(points) == len(completed):
        return None
    top = ranked(points, direction)[0]
    chosen = top.best_run(direction)
    return (
        f"best point   {top.describe()}: this round's best mean over its seeds, best seed trial "
        f"{slot_of(chosen)}; the study's model, over every full-length round: tuner report"
    )


def summarize(
    snapshot: PhaseSnapshot,
    codes: dict[str, int],
    folder: Path,
    phase: str,
    metric: str,
    *,
    crashed: bool,
    environment: list[str] | None = None,
    plan: StoredPlan | None = None,
    direction: str = "minimize",
) -> None:
    """Print the outcome; exit 70 if a worker crashed, 2 if workers stopped on a fault of the
    machine (``environment``: what they said, e.g. a full disk), 1 if the failure budget is spent,
    130 if the phase is unfinished, 0 when it is done or a stopping budget (timeout_h,
    stop_after_no_improvement) ended it: the reason is the workers' own rule, computed again."""
    counts, settings = snapshot.counts, snapshot.settings
    out.print(headline(snapshot, phase, metric))
    out.print(f"run folders  {shown_path(folder)}")
    best = snapshot.best
    if best is not None:
        step = best.user_attrs.get("best_step")
        out.print(f"best trial   {trial_name(best)}: {metric} = {best.value:.6g} at step {step}")
        out.print(f"reproduce    {best.user_attrs.get('reproduce')}")
        point = best_point(snapshot, plan, direction)
        if point is not None:
            out.print(point, markup=False)
    if counts.diverged:
        out.print(f"diverged     {diverged_line(snapshot)}", markup=False)
        if best is None:
            err.print(
                f"  no trial reached a finite {metric}: lower the learning rate (or the top of its "
                "search range), add warmup, or clip gradients (grad_clip_norm)",
                markup=False,
            )
    if environment:
        for line in environment:
            error_line(escape(line))
        err.print(f"stopped at {counts.finished}/{settings.max_trials} trials", markup=False)
        raise typer.Exit(EXIT_INTERNAL if crashed else EXIT_USAGE)
    if counts.workload_broken:
        error_line(escape(broken_line(snapshot)))
        raise typer.Exit(EXIT_INTERNAL if crashed else EXIT_USAGE)
    if counts.failed >= settings.max_failed:
        err.print(
            f"[red]stopped:[/] the failure budget is spent: {plural(counts.failed, 'trial')} failed "
            f"({counts.failure_summary()}), limit {settings.max_failed}; fix the workload and run the same "
            "command again (trials that failed in code since changed run again), or raise the limit "
            "with --max-failed"
        )
        for line in failure_advice(snapshot):
            err.print(f"  {line}", markup=False)
        raise typer.Exit(EXIT_INTERNAL if crashed else EXIT_FAILED)
    decision = snapshot.decision(metric)
    interrupted = EXIT_INTERRUPTED in codes.values()  # a Ctrl-C that came first is not a budget stop
    if decision.action == "stopped" and not crashed and not interrupted:
        out.print(decision.reason, markup=False)
        return
    if counts.to_start(settings) or counts.running:
        err.print(
            f"{'unfinished' if crashed else 'interrupted'} at {counts.finished}/{settings.max_trials} "
            "trials; run the same command again to continue"
        )
        raise typer.Exit(EXIT_INTERNAL if crashed else EXIT_INTERRUPTED)
    if crashed:
        raise typer.Exit(EXIT_INTERNAL)
