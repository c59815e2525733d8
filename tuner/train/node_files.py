"""What the owner of a multi-node trial and its ranks say to each other: files in one folder.

A trial spread over several machines (``training.nodes`` > 1) has its ranks started by launcher
agents (``torchrun``), possibly on other machines, so nothing the owner holds (a pipe, shared
memory, a signal) reaches them. What does reach every node is the run folder: checkpoints must be
on a file system every node sees anyway. Each attempt gets its own folder under
``RUN_DIR/.nodes/`` (mode 0700), which the owner removes when the attempt ends:

- ``job.pkl``: the run, pickled by the owner (``NodeJob``; read by every rank: the same code
  on every node);
- ``events``: what rank 0's callbacks tell the owner (``EventSender``: the trial's messages), a
  stream of pickled records the owner tails (``EventReader``);
- ``stop``: the owner asks for a clean stop; rank 0 looks for it between steps (``StopFileCheck``)
  and the ranks agree on the step (``distributed.agree_on_step``), as with a Ctrl-C;
- ``limit``: the step from which the trial no longer matters (``FileStepLimit``: the outpaced
  check of sweep-lr, a pruner), written by the owner, read by rank 0 at each evaluation;
- ``result.pkl``: rank 0's ``RunResult`` and its callbacks' state; ``failure-K.pkl``: how rank K
  failed (``launch.RankFailure``).

Pickle, as ``torch.distributed.elastic`` and ``multiprocessing`` use between their own
processes: the folder is private to the user who runs tuner, and lives only for the attempt.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner._atomic import atomic_write
from tuner.train.events import Callback, StopReason

NODES_FOLDER = ".nodes"
#: threads per rank, set by a launcher that knows how many ranks share this machine
THREADS_ENV = "TUNER_THREADS_PER_RANK"
_HEADER = struct.Struct("<I")
#: how often rank 0 looks for the owner's stop file (a stat on a network file system is a round trip)
STOP_POLL_S = 0.5


@dataclass(frozen=True)
class NodeJob:
    """``job.pkl``: what each rank runs (``target(ranks)``: ``run.run_rank`` bound to the run,
    pickled by reference, so this module needs no import of the engine) and on which device
    setting, resolved on the rank's own machine (the owner's may have no GPU at all)."""

    target: Callable[[Any], Any]
    device: str


@dataclass(frozen=True)
class NodeAttempt:
    """One attempt's folder; ``attempt_id`` is also its rendezvous id (unique per attempt, so
    agents of an earlier, failed attempt can never join this one's rendezvous)."""

    folder: Path

    @classmethod
    def create(cls, run_dir: Path) -> NodeAttempt:
        """A new attempt's folder. The caller holds the run folder's lock, so no other attempt of
        this run is alive: an earlier one's folder (its owner was killed before it could remove
        it) goes, and the ranks it may have left on other machines end (``node_rank``)."""
        nodes = Path(run_dir) / NODES_FOLDER
        if nodes.is_dir():
            for earlier in nodes.iterdir():
                shutil.rmtree(earlier, ignore_errors=True)
        folder = nodes / f"tuner-{uuid.uuid4().hex[:16]}"
        folder.mkdir(parents=True, mode=0o700)
        return cls(folder)

    @property
    def attempt_id(self) -> str:
        return self.folder.name

    @property
    def job(self) -> Path:
        return self.folder / "job.pkl"

    @property
    def events(self) -> Path:
        return self.folder / "events"

    @property
    def stop(self) -> Path:
        return self.folder / "stop"

    @property
    def training(self) -> Path:
        """Touched by rank 0 when its training loop starts (the ranks have met)."""
        return self.folder / "training"

    @property
    def limit(self) -> Path:
        return self.folder / "limit"

    @property
    def result(self) -> Path:
        return self.folder / "result.pkl"

    def failure(self, rank: int) -> Path:
        return self.folder / f"failure-{rank}.pkl"

    def write(self, path: Path, value: Any) -> None:
        atomic_write(path, lambda handle: pickle.dump(value, handle), durable=False)

    def read(self, path: Path) -> Any:
        with open(path, "rb") as handle:
            return pickle.load(handle)

    def failures(self) -> dict[int, Any]:
        found = {}
        for path in self.folder.glob("failure-*.pkl"):
            with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError, ValueError):
                found[int(path.stem.split("-", 1)[1])] = self.read(path)
        return found

    def request_stop(self) -> None:
        with contextlib.suppress(OSError):
            self.stop.touch()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.folder.parent.rmdir()  # the last attempt: no empty .nodes left in the run folder


class EventSender:
    """Rank 0's end of the events stream: ``send(message)`` as a pipe's ``Connection`` has it.

    Each record is written in one ``write`` call with its length in front, so the reader sees
    whole records or waits for the rest. Picklable (a path), so it travels in ``job.pkl``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def send(self, message: Any) -> None:
        data = pickle.dumps(message)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, _HEADER.pack(len(data)) + data)
        finally:
            os.close(fd)


class EventReader:
    """The owner's end: each call returns the whole records written since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = Path(path), 0

    def read_new(self) -> list[Any]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        messages, position = [], 0
        while position + _HEADER.size <= len(data):
            (size,) = _HEADER.unpack_from(data, position)
            end = position + _HEADER.size + size
            if end > len(data):
                break  # the rest of this record is not written yet
            messages.append(pickle.loads(data[position + _HEADER.size : end]))
            position = end
        self.offset += position
        return messages


class FileStepLimit:
    """``outpaced.StepLimit`` for a rank on another machine: the owner writes the file when its
    own limit changes, rank 0 reads it at each evaluation (``step``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def set(self, step: int | None) -> None:
        atomic_write(self.path, lambda handle: handle.write(b"" if step is None else str(step).encode()),
                     durable=False)  # fmt: skip

    @property
    def step(self) -> int | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text else None


class StopFileCheck(Callback):
    """Rank 0's callback: the owner's stop file becomes a clean stop (a checkpoint, status
    ``interrupted``), exactly what a Ctrl-C of a one-machine run does. Looked for at most every
    ``STOP_POLL_S`` seconds of training, not at every step. It also says when training starts
    (``NodeAttempt.training``): before that, the owner stops the agents directly."""

    order = 30

    def __init__(self, attempt: NodeAttempt) -> None:
        self.path, self.training, self.next_look = attempt.stop, attempt.training, 0.0

    def on_fit_start(self, loop: Any) -> None:
        self.training.touch()

    def on_train_step_end(self, loop: Any) -> None:
        now = time.monotonic()
        if now >= self.next_look:
            self.next_look = now + STOP_POLL_S
            if self.path.exists():
                loop.request_stop(StopReason.INTERRUPTED)
