"""Live progress: a rich bar on a terminal, one plain line per eval elsewhere (logs, CI)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from tuner.train.events import Callback

# A plain line is printed as it is: no markup, no emoji codes, no highlighting (a log file shows
# no colours, and a name or metric is never markup). It also spares a process that never printed
# one before rich's first regexes and emoji table (5 ms in a bare forked process; a worker's trials
# showed no difference in the orchestration benchmark: measured side by side, docs/benchmarks.md).
_PLAIN: dict[str, Any] = {"markup": False, "emoji": False, "highlight": False}


def format_metrics(metrics: dict[str, float], names: list[str] | None = None) -> str:
    keys = names if names is not None else list(metrics)
    return "  ".join(f"{k} {metrics[k]:.4g}" for k in keys if k in metrics)


class ProgressCallback(Callback):
    """Updates every ``refresh_every`` steps (a rich update costs tens of microseconds)."""

    order = 30

    def __init__(
        self,
        console: Console,
        *,
        refresh_every: int = 10,
        headline: list[str] | None = None,
        label: str = "train",
    ) -> None:
        self.console, self.refresh_every, self.headline, self.label = console, refresh_every, headline, label
        self._progress: Any = None
        self._task: Any = None

    def on_fit_start(self, loop: Any) -> None:
        if not self.console.is_terminal:
            self.console.print(f"{self.label}: step {loop.step}/{loop.max_train_steps}", **_PLAIN)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            self.label, total=loop.max_train_steps, completed=loop.step, metrics=""
        )

    def _metrics_text(self, loop: Any) -> str:
        text = f"loss {loop.last_loss:.4g}"
        evals = format_metrics(loop.last_eval, self.headline)
        return f"{text}  {evals}" if evals else text

    def on_train_step_end(self, loop: Any) -> None:
        if self._progress is not None and loop.step % self.refresh_every == 0:
            self._progress.update(self._task, completed=loop.step, metrics=self._metrics_text(loop))

    def on_eval_end(self, loop: Any) -> None:
        if self._progress is None:
            self.console.print(
                f"{self.label}: step {loop.step}/{loop.max_train_steps}  {self._metrics_text(loop)}", **_PLAIN
            )
        else:
            self._progress.update(self._task, completed=loop.step, metrics=self._metrics_text(loop))

    def on_fit_end(self, loop: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    on_exception = on_fit_end
