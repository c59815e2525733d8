"""Live view of a phase: trials done / running / failed, best so far, each local worker.

On a terminal a rich panel redraws in place; elsewhere (logs, CI) one line per finished trial.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from tuner.cli._console import warning_line
from tuner.orchestrate.budget import FAILURE_WARNING_RATE
from tuner.orchestrate.progress import PhaseSnapshot


def headline(snapshot: PhaseSnapshot, phase: str, metric: str) -> str:
    counts, settings = snapshot.counts, snapshot.settings
    best = (
        f"best {metric} {counts.best_value:.6g} (trial {counts.best_number})"
        if counts.best_value is not None
        else "no finished trial yet"
    )
    why = f": {counts.failure_summary()}" if counts.failed else ""
    return (
        f"{phase}: {counts.finished}/{settings.max_trials} done · {counts.running} running · "
        f"{counts.failed} failed{why} (limit {settings.max_failed}) · {best}"
    )


def trial_line(trial: Any, metric: str) -> str:
    attrs = trial.user_attrs
    if trial.state.name == "COMPLETE":
        return (
            f"trial {trial.number:>4}  complete  {metric} {trial.value:.6g} at step {attrs.get('best_step')}"
        )
    if trial.state.name == "FAIL":
        retry = "  (retrying)" if attrs.get("retried") else ""
        reason = attrs.get("failure_reason", "failed")
        return f"trial {trial.number:>4}  {reason}: {attrs.get('error', '')}{retry}"
    return f"trial {trial.number:>4}  {trial.state.name.lower()}"


class PhaseView:
    """Call ``update(snapshot)`` as often as you like; ``close()`` at the end."""

    def __init__(self, console: Console, phase: str, metric: str, *, live: bool, since: float) -> None:
        self.console, self.phase, self.metric, self.since = console, phase, metric, since
        self._live: Live | None = Live(console=console, auto_refresh=False) if live else None
        self._warned = False
        if self._live is not None:
            self._live.start()

    def update(self, snapshot: PhaseSnapshot) -> None:
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
                    table.add_row(
                        str(worker.get("label")), str(worker.get("state")), str(worker.get("detail"))
                    )
            self._live.update(Group(headline(snapshot, self.phase, self.metric), table), refresh=True)
        elif snapshot.newly_finished and counts.running:  # with nothing running, the summary says it
            self.console.print(headline(snapshot, self.phase, self.metric))

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def now() -> float:
    return time.time()
