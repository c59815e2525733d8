"""CSV and TensorBoard logs of a run.

``metrics.csv``: one row per logged step, columns fixed when the run starts (so a pandas reader
never sees a ragged file); eval metrics join the row of the step they were computed at.
On resume, rows past the checkpoint's step are dropped first: they belong to steps that will
be recomputed.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write_text
from tuner.train.events import Callback

TRAIN_COLUMNS = ("step", "lr", "train/step_loss", "elapsed_s")


def is_logged_step(step: int, log_every: int, max_train_steps: int) -> bool:
    """Train values are logged every ``log_every`` steps and at the last step (the final loss)."""
    return step % log_every == 0 or step == max_train_steps


def _truncate_after(path: Path, step: int) -> bool:
    """Keep the header and rows with ``step <= step``; False if the file is absent or empty."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return False
    kept = [rows[0]] + [row for row in rows[1:] if row and int(row[0]) <= step]
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(kept)
    atomic_write_text(path, buffer.getvalue())
    return True


class _CsvFile:
    """An append-only CSV with a fixed header, resumable at a step."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path, self.columns = Path(path), list(columns)
        self._handle: Any = None
        self._writer: Any = None

    def open(self, resume_step: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resumed = resume_step > 0 and _truncate_after(self.path, resume_step)
        # Block-buffered (a syscall per row costs ~13 us/step); flush() at evals and at the end.
        self._handle = self.path.open("a" if resumed else "w", newline="")
        self._writer = csv.DictWriter(self._handle, fieldnames=self.columns, extrasaction="ignore")
        if not resumed:
            self._writer.writeheader()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow(row)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class CsvLogger(Callback):
    """Writes ``metrics.csv``: train columns every ``log_every`` steps, eval columns at evals.

    ``elapsed_s`` is training time: a resumed run continues from the time its checkpoint
    recorded (the time between a kill and the resume is not training).
    """

    order = 20

    def __init__(self, path: Path, eval_columns: Sequence[str], log_every: int) -> None:
        self.file = _CsvFile(path, [*TRAIN_COLUMNS, *eval_columns])
        self.log_every = log_every
        self._pending: dict[str, Any] | None = None
        self._started = 0.0
        self._resumed_elapsed_s = 0.0

    def _flush(self) -> None:
        if self._pending is not None:
            self.file.write(self._pending)
            self._pending = None

    def _row(self, loop: Any) -> dict[str, Any]:
        if self._pending is None or self._pending["step"] != loop.step:
            self._flush()
            self._pending = {"step": loop.step}
        return self._pending

    def _elapsed_s(self) -> float:
        return time.perf_counter() - self._started

    def on_fit_start(self, loop: Any) -> None:
        self._started = time.perf_counter() - self._resumed_elapsed_s
        self.file.open(loop.step)

    def on_train_step_end(self, loop: Any) -> None:
        if is_logged_step(loop.step, self.log_every, loop.max_train_steps):
            self._row(loop).update(
                {"lr": loop.lr, "train/step_loss": loop.last_loss, "elapsed_s": round(self._elapsed_s(), 4)}
            )

    def on_eval_end(self, loop: Any) -> None:
        # Written now, before the checkpoint of this step: a kill -9 after it must not lose the row.
        self._row(loop).update(loop.last_eval)
        self._flush()
        self.file.flush()

    def on_fit_end(self, loop: Any) -> None:
        self._flush()
        self.file.close()

    on_exception = on_fit_end

    def state_dict(self) -> dict[str, Any]:
        return {"elapsed_s": self._elapsed_s()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resumed_elapsed_s = float(state.get("elapsed_s", 0.0))


class PredictionsLogger(Callback):
    """Appends the sampled examples' predictions to ``predictions.csv`` at every eval."""

    order = 20
    COLUMNS = ("step", "split", "example", "target", "prediction", "confidence", "loss")

    def __init__(self, path: Path) -> None:
        self.file = _CsvFile(path, self.COLUMNS)

    def on_fit_start(self, loop: Any) -> None:
        self.file.open(loop.step)

    def on_eval_end(self, loop: Any) -> None:
        for row in loop.last_predictions:
            self.file.write({"step": loop.step, **row})
        self.file.flush()  # before this step's checkpoint

    def on_fit_end(self, loop: Any) -> None:
        self.file.close()

    on_exception = on_fit_end


class TensorBoardLogger(Callback):
    """One TensorBoard folder per run; a resumed run purges events past its checkpoint."""

    order = 20

    def __init__(self, folder: Path, log_every: int) -> None:
        self.folder, self.log_every = Path(folder), log_every
        self.writer: Any = None

    def on_fit_start(self, loop: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy: only runs that log pay for it

        self.writer = SummaryWriter(str(self.folder), purge_step=loop.step + 1 if loop.step else None)

    def on_train_step_end(self, loop: Any) -> None:
        if is_logged_step(loop.step, self.log_every, loop.max_train_steps):
            self.writer.add_scalar("train/step_loss", loop.last_loss, loop.step)
            self.writer.add_scalar("lr", loop.lr, loop.step)

    def on_eval_end(self, loop: Any) -> None:
        for name, value in loop.last_eval.items():
            self.writer.add_scalar(name, value, loop.step)

    def on_fit_end(self, loop: Any) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    on_exception = on_fit_end
