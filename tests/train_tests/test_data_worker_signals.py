"""Data workers and stop signals: a terminal's Ctrl-C and a scheduler's SIGTERM reach every process
of the group; the training process decides how to stop, and its workers go on serving it."""

from __future__ import annotations

import os
import signal

import torch

from tests.train_tests.test_input_pipeline import _children, _items
from tuner.train import StepBatches


def test_workers_outlive_the_signals_of_a_ctrl_c_and_end_with_close() -> None:
    """A terminal's Ctrl-C (SIGINT) and a scheduler's SIGTERM reach every process of the group:
    the training process decides how to stop, the workers must go on serving it meanwhile."""
    dataset = _items()
    expected = [StepBatches(dataset, 64, data_seed=4).get(step)[0] for step in range(8)]
    before = _children()
    batches = StepBatches(dataset, 64, data_seed=4, data_workers=2)
    try:
        assert torch.equal(batches.get(0)[0], expected[0])
        workers = _children() - before
        for pid in workers:
            os.kill(pid, signal.SIGINT)
            os.kill(pid, signal.SIGTERM)
        for step in range(1, 8):
            assert torch.equal(batches.get(step)[0], expected[step])
        assert _children() - before == workers
    finally:
        batches.close()
    assert _children() == before


_signal_in_the_gap = False


def _stop_the_just_forked_child() -> None:
    if _signal_in_the_gap:  # a Ctrl-C (and a scheduler's SIGTERM) landing before the worker's handlers
        os.kill(os.getpid(), signal.SIGTERM)  # first: without a handler it ends the worker at once
        os.kill(os.getpid(), signal.SIGINT)


os.register_at_fork(after_in_child=_stop_the_just_forked_child)


def test_a_stop_signal_in_the_instant_a_worker_starts_does_not_kill_it() -> None:
    """It used to (seen on a busy machine): a just-forked worker has the training process's
    handlers, or SIGTERM's default action, until its own are set."""
    global _signal_in_the_gap
    dataset = _items()
    expected = [StepBatches(dataset, 64, data_seed=4).get(step)[0] for step in range(4)]
    before = _children()
    batches = StepBatches(dataset, 64, data_seed=4, data_workers=2)
    _signal_in_the_gap = True
    try:
        for step in range(4):
            assert torch.equal(batches.get(step)[0], expected[step])
        assert len(_children() - before) == 2  # both workers alive
    finally:
        _signal_in_the_gap = False
        batches.close()
    assert _children() == before


def test_on_cpu_the_workers_cores_come_out_of_torch_threads_until_close() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        batches = StepBatches(_items(), 64, data_seed=4, data_workers=2)
        batches.get(0)
        assert torch.get_num_threads() == 1
        batches.close()
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
