"""What a worker's trial process and rank 0 of a multi-node trial say to each other through the
attempt's folder (``tuner.train.node_files``): the trial's messages one way, the outpaced limit
the other, both surviving the pickling that takes rank 0's copy to another machine."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

from tuner.orchestrate.messages import CheckpointSaved, Evaluated, Started
from tuner.orchestrate.outpaced import OutpacedCheck, StepLimit
from tuner.orchestrate.stall import ProgressBeacon
from tuner.orchestrate.trial_reporter import PipeReporter, StepProgress
from tuner.train.node_files import EventReader, NodeAttempt

CONTEXT = multiprocessing.get_context("fork")


class _Pipe:
    """The worker's end of the trial's pipe, as the trial process sees it: ``send``."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, message: object) -> None:
        self.sent.append(message)


def test_rank_zeros_messages_reach_the_worker_and_its_progress_the_stall_watchdog(tmp_path: Path) -> None:
    pipe, beacon = _Pipe(), ProgressBeacon(CONTEXT)
    owner = PipeReporter(pipe, "val/error_rate", beacon)
    attempt = NodeAttempt.create(tmp_path)
    rank_zero = pickle.loads(pickle.dumps(owner.for_rank_zero(attempt)))  # as it travels in job.pkl
    assert rank_zero.beacon is None  # shared memory does not cross machines
    reader = EventReader(attempt.events)
    assert reader.read_new() == []  # nothing written yet: no file
    for message in (Started(0), StepProgress(7), Evaluated(8, 0.25), CheckpointSaved(8)):
        rank_zero.connection.send(message)
    with attempt.events.open("ab") as events:
        events.write(b"\x10\x00")  # the start of a record still being written: left for later
    owner.on_owner_poll(attempt, reader.read_new())
    assert pipe.sent == [Started(0), Evaluated(8, 0.25), CheckpointSaved(8)]  # progress stays here
    assert beacon.step == 7 and beacon.marks >= 3
    assert reader.read_new() == []


def test_the_outpaced_limit_reaches_rank_zero_whenever_the_worker_changes_it(tmp_path: Path) -> None:
    limit = StepLimit(CONTEXT)
    owner = OutpacedCheck(limit)
    attempt = NodeAttempt.create(tmp_path)
    limit.set(120)
    rank_zero = pickle.loads(pickle.dumps(owner.for_rank_zero(attempt)))
    assert rank_zero.limit.step == 120
    limit.set(40)  # another trial reached the goal sooner
    owner.on_owner_poll(attempt, [])
    assert rank_zero.limit.step == 40
    limit.set(None)
    owner.on_owner_poll(attempt, [])
    assert rank_zero.limit.step is None


def test_a_new_attempt_removes_the_folder_an_owner_killed_before_its_end_left(tmp_path: Path) -> None:
    """Ranks left on another machine by an owner killed with SIGKILL watch their attempt's folder;
    the next attempt of the run (its owner holds the run folder's lock) removes it, so they end."""
    killed = NodeAttempt.create(tmp_path)
    (killed.folder / "job.pkl").write_bytes(b"...")
    retry = NodeAttempt.create(tmp_path)
    assert not killed.folder.exists() and retry.folder.is_dir()
    assert retry.attempt_id != killed.attempt_id
    retry.remove()
    assert not (tmp_path / ".nodes").exists()
