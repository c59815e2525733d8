"""What the live view of ``run-round`` says when it cannot read its phase: "storage unreachable"
only for an error of the storage (``test_view_faults.py`` has a real one); any other error is a
bug of the view, and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import toy_study
from tuner.orchestrate.phase import SETTINGS_ATTR
from tuner.orchestrate.pool import LocalPool, LocalWorker
from tuner.orchestrate.progress import PhaseWatcher
from tuner.playbook import start_round
from tuner.spec import load_study


def _watched_phase(tmp_path: Path) -> tuple[PhaseWatcher, object]:
    study = toy_study(tmp_path)
    started = start_round(load_study(study), "round-1", tmp_path / "runs")
    watcher = PhaseWatcher(started.study, tmp_path)
    assert watcher.refresh() is not None and watcher.unreachable_since is None
    return watcher, started.study


def test_an_error_of_the_view_itself_is_not_called_storage_unreachable(tmp_path: Path) -> None:
    """It was: every exception of the view's own code read "storage unreachable since ...", and
    a bug hid behind an outage that never happened."""
    watcher, phase = _watched_phase(tmp_path)
    phase.set_user_attr(SETTINGS_ATTR, "not the phase's settings")  # read fine, then a TypeError
    with pytest.raises(TypeError):
        watcher.refresh()
    assert watcher.unreachable_since is None

    # the pool keeps the error (the command reports "the progress view failed") and goes on
    def tick() -> None:
        watcher.refresh()

    pool = LocalPool(lambda worker: ["true"], [LocalWorker("w")], env={}, log_dir=tmp_path / "logs")
    pool.start()
    codes = pool.wait(tick=tick, tick_s=0.01)
    assert codes == {"w": 0}
    assert pool.tick_errors and all(isinstance(error, TypeError) for error in pool.tick_errors)
