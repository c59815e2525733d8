"""Live view of a phase: trials done / running / failed, best so far, each local worker.

On a terminal a rich panel redraws in place; elsewhere (logs, CI) one line per finished trial.
Trials are named by their slot, the number of their run folder (``trial 3`` is ``trial-0003``),
and a retry by its attempt (``trial 3 (retry 1)``): Optuna's own trial numbers count retries
too, so they would not match the folders.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from tuner.cli._console import warning_line
from tuner.orchestrate.budget import FAILURE_WARNING_RATE
from tuner.orchestrate.progress import PhaseSnapshot


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


def shown_path(path: str | Path) -> str:
    """A path as a user would type it here: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except (OSError, ValueError):
        return str(path)


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
        retry = f"  (retry {attempt + 1} queued)" if attrs.get("retried") else ""
        reason = attrs.get("failure_reason", "failed")
        return f"{label}  {reason}: {attrs.get('error', '')}{retry}"
    return f"{label}  {trial.state.name.lower()}"


def worker_row(worker: dict[str, Any], snapshot: PhaseSnapshot) -> tuple[str, str, str]:
    """(label, state, what): the trial a worker trains named as everywhere else, not by Optuna."""
    detail = str(worker.get("detail", ""))
    number = worker.get("trial")
    trial = next((t for t in snapshot.trials if t.number == number), None) if number is not None else None
    if trial is not None and worker.get("state") == "training":
        detail = trial_label(trial) + (f" · step {worker['step']}" if worker.get("step") is not None else "")
    return str(worker.get("label")), str(worker.get("state")), detail


class PhaseView:
    """Call ``update(snapshot)`` as often as you like (None: nothing readable yet); ``close()``."""

    def __init__(self, console: Console, phase: str, metric: str, *, live: bool, since: float) -> None:
        self.console, self.phase, self.metric, self.since = console, phase, metric, since
        self._live: Live | None = Live(console=console, auto_refresh=False) if live else None
        self._warned = False
        self._stale_said: float | None = None  # the outage already announced (non-live mode)
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
            table = Table.grid(padding=(0, 2))
            for worker in snapshot.workers:
                if worker.get("updated_at", 0) >= self.since:
                    table.add_row(*(escape(cell) for cell in worker_row(worker, snapshot)))
            lines: list[Any] = [escape(headline(snapshot, self.phase, self.metric))]
            if stale is not None:
                lines.append(f"[yellow]{stale_line(stale)}[/]")
            self._live.update(Group(*lines, table), refresh=True)
        elif snapshot.newly_finished and counts.running:  # with nothing running, the summary says it
            self.console.print(escape(headline(snapshot, self.phase, self.metric)))

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
