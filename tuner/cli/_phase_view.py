"""Live view of a phase (sweep-lr, round-1, round-2...): one overall bar, one row per worker.

On a terminal a rich panel redraws in place every tick: the phase's bar with trials done /
running / failed / diverged and an ETA from measured trial durations, then one row per local
worker: its trial, the trial's parameters (short), step / total with a bar, the latest objective
value and the trial's elapsed time. Elsewhere (logs, CI) plain lines: one per finished trial, and
a progress line after each and now and then while trials run. Everything fits 80 columns.

Trials are named by their slot, the number of their run folder (``trial 3`` is ``trial-0003``),
and a retry by its attempt (``trial 3 (retry 1)``): Optuna's own trial numbers count retries
too, so they would not match the folders.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tuner._format import duration
from tuner.cli._console import warning_line
from tuner.orchestrate.budget import FAILURE_WARNING_RATE
from tuner.orchestrate.progress import (
    PhaseProgress,
    PhaseSnapshot,
    WorkerProgress,
    phase_progress,
    worker_progress,
)


def _int_attr(trial: Any, key: str, default: int) -> int:
    try:
        return int(trial.user_attrs.get(key, default))
    except (TypeError, ValueError):
        return default


def slot_and_attempt(trial: Any) -> tuple[int, int]:
    """(slot, attempt) of a FrozenTrial: its folder's number and 0 for a first attempt."""
    return _int_attr(trial, "slot", trial.number), _int_attr(trial, "attempt", 0)


def trial_name(trial: Any, width: int = 0) -> str:
    """``3``, or ``3 (retry 1)`` for the first retry of slot 3."""
    slot, attempt = slot_and_attempt(trial)
    return f"{slot:>{width}}" + (f" (retry {attempt})" if attempt else "")


def trial_label(trial: Any, width: int = 0) -> str:
    """``trial 3``, or ``trial 3 (retry 1)`` for the first retry of slot 3."""
    return f"trial {trial_name(trial, width)}"


def headline(snapshot: PhaseSnapshot, phase: str, metric: str) -> str:
    counts, settings = snapshot.counts, snapshot.settings
    best_trial = snapshot.best
    best = (
        f"best {metric} {counts.best_value:.6g} ({trial_label(best_trial)})"
        if counts.best_value is not None and best_trial is not None
        else "no finished trial yet"
    )
    why = f": {counts.failure_summary()}" if counts.failed else ""
    return (
        f"{phase}: {counts.finished}/{settings.max_trials} done · {counts.running} running · "
        f"{counts.failed} failed{why} (limit {settings.max_failed}) · "
        + (f"{counts.diverged} diverged · " if counts.diverged else "")
        + best
    )


def stale_line(since: float) -> str:
    return (
        f"storage unreachable since {time.strftime('%H:%M:%S', time.localtime(since))}, showing the last view"
    )


def trial_line(trial: Any, metric: str) -> str:
    attrs = trial.user_attrs
    label = trial_label(trial, width=4)
    if trial.state.name == "COMPLETE":
        return f"{label}  complete  {metric} {trial.value:.6g} at step {attrs.get('best_step')}"
    if trial.state.name == "FAIL":
        _, attempt = slot_and_attempt(trial)
        reason = attrs.get("failure_reason", "failed")
        retry = ""
        if attrs.get("retried"):  # an interruption or a full disk is continued, spending no retry
            from tuner.orchestrate.failures import FREE_RETRY

            free = reason in FREE_RETRY
            retry = "  (continues from its checkpoint)" if free else f"  (retry {attempt + 1} queued)"
        error = str(attrs.get("error", "")).strip()
        said = f"{reason}: {error}" if error and error != reason else reason
        return f"{label}  {said}{retry}"
    if trial.state.name == "PRUNED" and attrs.get("pruned_at") is not None:
        return (
            f"{label}  stopped at step {attrs.get('final_step')}: pruned (behind the others at "
            f"step {attrs['pruned_at']})"
        )
    if trial.state.name == "PRUNED" and attrs.get("outpaced_at") is not None:
        return (
            f"{label}  stopped at step {attrs.get('final_step')}: cannot win "
            f"(another trial reached the goal by step {attrs['outpaced_at']})"
        )
    return f"{label}  {trial.state.name.lower()}"


# -- the live panel ------------------------------------------------------------------------------
PROGRESS_EVERY_S = 60.0  # in a log, a progress line this often while trials run and none finishes
STEP_BAR = 8  # characters of a worker's step bar
SHORT_NAMES = {  # parameter names as a row shows them (the last part of a dotted key otherwise)
    "learning_rate": "lr",
    "weight_decay": "wd",
    "batch_size": "bs",
    "label_smoothing": "ls",
    "grad_clip_norm": "clip",
    "warmup_steps": "warmup",
    "warmup_fraction": "warmup",
}


def eta_text(progress: PhaseProgress) -> str:
    """``ETA 3m 05s``; ``ETA unknown`` until a trial has completed (nothing measured yet)."""
    if progress.eta_s is None:
        return "ETA unknown"
    return f"ETA {duration(progress.eta_s)}"


def short_value(value: Any) -> str:
    """A parameter value in 3 significant digits (``0.0031``, ``1.2e-05``), others as they are."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def short_params(params: Mapping[str, Any], width: int | None = None) -> str:
    """``lr=0.0031 wd=1.2e-05 dropout=0.03``: in the trial's order, dotted keys by their last part
    (whole when two would read the same), a few common names shorter; cut to ``width`` with an ellipsis."""
    names = {key: SHORT_NAMES.get(key.rsplit(".", 1)[-1], key.rsplit(".", 1)[-1]) for key in params}
    clashing = {name for name in names.values() if list(names.values()).count(name) > 1}
    text = " ".join(
        f"{key if names[key] in clashing else names[key]}={short_value(value)}"
        for key, value in params.items()
    )
    if width is not None and len(text) > width:
        text = text[: max(0, width - 1)] + "…"
    return text


def counts_text(snapshot: PhaseSnapshot, progress: PhaseProgress) -> str:
    """``2 done · 2 running · 1 failed: 1 oom (limit 13) · 3 diverged · 12 to start`` (no diverged
    field while none diverged)."""
    why = f": {progress.failure_summary}" if progress.failed else ""
    to_start = f" · {progress.to_start} to start" if progress.to_start else ""
    diverged = f" · {progress.diverged} diverged" if progress.diverged else ""
    return (
        f"{progress.done} done · {progress.running} running · {progress.failed} failed{why} "
        f"(limit {snapshot.settings.max_failed}){diverged}{to_start}"
    )


def best_text(snapshot: PhaseSnapshot, metric: str) -> str:
    best = snapshot.best
    if snapshot.counts.best_value is None or best is None:
        return "no finished trial yet"
    return f"best {metric} {snapshot.counts.best_value:.6g} ({trial_label(best)})"


def progress_line(snapshot: PhaseSnapshot, phase: str, metric: str, progress: PhaseProgress) -> str:
    """The plain-text view of the phase (logs, CI): finished of total, counts, best so far, ETA."""
    return (
        f"{phase}: {progress.finished}/{progress.total} · {counts_text(snapshot, progress)} · "
        f"{best_text(snapshot, metric)} · {eta_text(progress)}"
    )


class SegmentBar:
    """A bar of the whole phase: completed, diverged, failed, running, to do; as wide as given."""

    CELLS = (
        ("done", "█", "green"),
        ("diverged", "█", "yellow"),
        ("failed", "█", "red"),
        ("running", "▒", "cyan"),
    )

    def __init__(self, progress: PhaseProgress) -> None:
        self.progress = progress

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        total = max(1, self.progress.total, self.progress.finished + self.progress.running)
        text = Text(no_wrap=True, overflow="crop")
        used = 0
        cumulative = 0
        for field, char, style in self.CELLS:
            cumulative += getattr(self.progress, field)
            end = min(width, round(cumulative * width / total))
            text.append(char * (end - used), style=style)
            used = max(used, end)
        text.append("░" * (width - used), style="grey50")
        yield text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(4, options.max_width)


def count_text(count: int) -> str:
    """``950``, ``9500``, ``95k``, ``1.5M``: a step count short enough for a row."""
    if count < 10_000:
        return str(count)
    if count < 1_000_000:
        return f"{count // 1000}k"
    return f"{count / 1_000_000:.3g}M"


def step_cell(step: int | None, total: int | None) -> Text:
    """``███░░░░░ 300/1000``: a trial's last evaluated step of its total."""
    if total is None or total <= 0:
        return Text("" if step is None else f"step {step}")
    done = min(STEP_BAR, round(STEP_BAR * (step or 0) / total))
    text = Text("█" * done, style="green")
    text.append("░" * (STEP_BAR - done), style="grey50")
    text.append(f" {count_text(step or 0)}/{count_text(total)}")
    return text


def worker_cells(row: WorkerProgress) -> tuple[str, str, str, str, str, str]:
    """(worker, trial, params or what it does, step, value, elapsed) as plain text."""
    if row.trial is None:
        what = f"{row.state}: {row.detail}" if row.detail else row.state
        return row.label, "", what, "", "", ""
    value = "" if row.value is None else f"{row.value:.4g}"
    elapsed = "" if row.elapsed_s is None else duration(row.elapsed_s)
    step = step_cell(row.step, row.total).plain
    return row.label, trial_name(row.trial), short_params(row.trial.params), step, value, elapsed


def worker_table(rows: list[WorkerProgress], metric: str) -> Table:
    """One row per worker; only the parameters column gives way (an ellipsis) so the table fits."""
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("worker", no_wrap=True, max_width=12, overflow="ellipsis")
    table.add_column("trial", no_wrap=True, max_width=14, overflow="ellipsis")
    table.add_column("params", min_width=8, overflow="ellipsis")  # the one column that may shrink
    table.add_column("step", no_wrap=True)
    table.add_column(metric.rsplit("/", 1)[-1], no_wrap=True, justify="right", max_width=10, overflow="crop")
    table.add_column("time", no_wrap=True, justify="right")
    for row in rows:
        label, trial, what, _, value, elapsed = worker_cells(row)
        step = step_cell(row.step, row.total) if row.trial is not None else Text("")
        style = "" if row.trial is not None else "dim"
        cell = Text(what, style=style, no_wrap=True, overflow="ellipsis")
        table.add_row(Text(label), trial, cell, step, value, elapsed)
    return table


def render(
    snapshot: PhaseSnapshot,
    phase: str,
    metric: str,
    *,
    since: float = 0.0,
    now: float | None = None,
    stale: float | None = None,
) -> Group:
    """The live panel: the phase's bar, its counts and best, then a row per worker seen since
    ``since`` (this command's start: older status files are another run's)."""
    now = time.time() if now is None else now
    workers = [w for w in snapshot.workers if w.get("updated_at", 0) >= since]
    serving = sum(1 for w in workers if w.get("state") in ("training", "waiting"))
    progress = phase_progress(snapshot, now, workers=serving)
    top = Table.grid(padding=(0, 1), expand=True)
    top.add_column(no_wrap=True)
    top.add_column(ratio=1)
    top.add_column(no_wrap=True)
    top.add_column(no_wrap=True)
    top.add_row(
        Text(phase, style="bold"),
        SegmentBar(progress),
        f"{progress.finished}/{progress.total}",
        eta_text(progress),
    )
    lines: list[Any] = [top, Text(counts_text(snapshot, progress)), Text(best_text(snapshot, metric))]
    if stale is not None:
        lines.append(Text(stale_line(stale), style="yellow"))
    rows = [worker_progress(w, snapshot, now) for w in workers]
    if rows:
        lines.append(worker_table(rows, metric))
    return Group(*lines)


class PhaseView:
    """Call ``update(snapshot)`` as often as you like (None: nothing readable yet); ``close()``."""

    def __init__(self, console: Console, phase: str, metric: str, *, live: bool, since: float) -> None:
        self.console, self.phase, self.metric, self.since = console, phase, metric, since
        self._live: Live | None = Live(console=console, auto_refresh=False) if live else None
        self._warned = False
        self._stale_said: float | None = None  # the outage already announced (non-live mode)
        self._said_at = time.monotonic()  # when the log last got a progress line
        if self._live is not None:
            self._live.start()

    def update(self, snapshot: PhaseSnapshot | None, unreachable_since: float | None = None) -> None:
        stale = snapshot.stale_since if snapshot is not None else unreachable_since
        if self._live is None:
            self._say_staleness(stale)
        if snapshot is None:
            if self._live is not None and stale is not None:
                self._live.update(stale_line(stale), refresh=True)
            return
        for trial in snapshot.newly_finished:
            self.console.print(escape(trial_line(trial, self.metric)))
        counts = snapshot.counts
        if not self._warned and counts.finished >= 5 and counts.failure_rate > FAILURE_WARNING_RATE:
            self._warned = True
            warning_line(
                f"{counts.failure_rate:.0%} of finished trials failed ({counts.failed} of {counts.finished}: "
                f"{counts.failure_summary()}); read their error.log before spending more budget"
            )
        if self._live is not None:
            self._live.update(
                render(snapshot, self.phase, self.metric, since=self.since, stale=stale), refresh=True
            )
            return
        # with nothing running, the summary says it; while trials run, a line after each finished
        # trial and one every PROGRESS_EVERY_S, so a log shows the phase is alive and its ETA
        due = time.monotonic() - self._said_at >= PROGRESS_EVERY_S
        if counts.running and stale is None and (snapshot.newly_finished or due):
            workers = [w for w in snapshot.workers if w.get("updated_at", 0) >= self.since]
            serving = sum(1 for w in workers if w.get("state") in ("training", "waiting"))
            progress = phase_progress(snapshot, workers=serving)
            self.console.print(escape(progress_line(snapshot, self.phase, self.metric, progress)))
            self._said_at = time.monotonic()

    def _say_staleness(self, stale: float | None) -> None:
        """Without a live panel: one line when the storage goes away, one when it is back."""
        if stale is not None and self._stale_said != stale:
            self._stale_said = stale
            warning_line(f"{stale_line(stale)}; the workers go on")
        elif stale is None and self._stale_said is not None:
            self._stale_said = None
            self.console.print("storage reachable again")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def now() -> float:
    return time.time()
