"""What a kill, a second process or a stopping callback must not break (regressions)."""

from __future__ import annotations

import csv
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests._processes import run as run_process
from tuner.errors import UsageError
from tuner.train import Callback, StopTraining, load_checkpoint, read_status, run_training
from tuner.train.checkpoints import LATEST, CheckpointCallback, best_name
from tuner.train.objective import ObjectiveTracker
from tuner.train.run_folder import choose_run_dir, locked_run_dir, prepare_run_dir


def rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_a_run_folder_held_by_a_live_process_is_neither_resumed_nor_shared(
    make_study, tmp_path: Path
) -> None:
    loaded = make_study()
    first = choose_run_dir(tmp_path, loaded.spec)
    prepare_run_dir(first, loaded.spec, None)  # status "running", as a live run leaves it
    with locked_run_dir(first):
        assert choose_run_dir(tmp_path, loaded.spec).name == "run-002"
        with pytest.raises(UsageError, match="in use by another process"):
            run_training(loaded.spec, first, base_dir=loaded.base_dir, progress=False)
    assert choose_run_dir(tmp_path, loaded.spec) == first  # released (as by a dead process): resumable


# Killed at step 25, once the step-20 checkpoint is on disk (it is written in the background:
# on a loaded machine the kill could otherwise land before the write, and the run would rightly
# resume from step 10; what is tested is that nothing checkpointed or logged is lost).
KILL_SCRIPT = """
import os, signal, sys, time
from tuner.spec import load_study
from tuner.train import Callback, CheckpointCallback, run_training

class KillAt(Callback):
    order = 100
    def on_train_step_end(self, loop):
        if loop.step == 25:
            writer = next(c for c in loop.callbacks if isinstance(c, CheckpointCallback))
            while writer.saved_step != 20:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)

loaded = load_study(sys.argv[1])
run_training(loaded.spec, sys.argv[2], base_dir=loaded.base_dir, extra_callbacks=[KillAt()], progress=False)
"""


def test_kill_9_loses_no_logged_eval(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=50, eval_every=10, log_every=10)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    run = tmp_path / "run"
    killed = run_process([sys.executable, str(script), str(loaded.path), str(run)])
    assert killed.returncode == -9
    result = run_training(loaded.spec, run, base_dir=loaded.base_dir, progress=False)
    assert (result.resumed_from_step, result.status) == (20, "completed")
    logged = rows(run)
    assert [int(r["step"]) for r in logged] == [10, 20, 30, 40, 50]
    assert all(r["val/error_rate"] for r in logged)


class PruneAt(Callback):
    """A pruner's shape: decides at an eval, stops by raising."""

    def on_eval_end(self, loop) -> None:
        if loop.step == 20:
            raise StopTraining("stopped", "pruned at step 20")


def test_stopping_at_an_eval_still_records_and_checkpoints_that_eval(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=60, eval_every=10, keep_best_checkpoints=5)
    result = run_training(
        loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, extra_callbacks=[PruneAt()], progress=False
    )
    assert (result.status, result.step, result.message) == ("stopped", 20, "pruned at step 20")
    assert rows(tmp_path / "run")[-1]["val/error_rate"]  # the logger saw the eval of step 20
    index = json.loads((tmp_path / "run" / "checkpoints" / "index.json").read_text())
    assert index["latest"]["step"] == 20 and 20 in [entry["step"] for entry in index["best"]]


class FakeLoop:
    def __init__(self, step: int, value: float, callback: CheckpointCallback) -> None:
        self.step, self.last_eval_step, self.last_eval, self.callback = (
            step,
            step,
            {"val/loss": value},
            callback,
        )

    def state_dict(self) -> dict:
        return {"step": self.step, "callbacks": {"CheckpointCallback": self.callback.state_dict()}}


def test_resume_repairs_a_kill_between_checkpoint_save_and_link(tmp_path: Path) -> None:
    tracker = ObjectiveTracker("val/loss", "minimize")
    callback = CheckpointCallback(tmp_path, tracker, keep_best=2)
    for step, value in [(10, 0.9), (20, 0.8), (30, 0.7)]:
        loop = FakeLoop(step, value, callback)
        tracker.on_eval_end(loop)
        callback.on_checkpoint(loop)
    callback.flush()  # the files are written in the background
    # Simulate the kill: step 30's best copy never linked, evicted step 10 never deleted.
    (tmp_path / best_name(30)).unlink()
    (tmp_path / best_name(10)).write_bytes((tmp_path / LATEST).read_bytes())

    resumed = CheckpointCallback(tmp_path, ObjectiveTracker("val/loss", "minimize"), keep_best=2)
    resumed.load_state_dict(load_checkpoint(tmp_path / LATEST)["callbacks"]["CheckpointCallback"])
    assert resumed.best == {best_name(20): 0.8, best_name(30): 0.7}
    assert sorted(p.name for p in tmp_path.glob("best-*")) == [best_name(20), best_name(30)]
    assert load_checkpoint(tmp_path / best_name(30))["step"] == 30


def test_checkpoints_are_written_in_the_background_and_a_failed_write_is_not_hidden(tmp_path: Path) -> None:
    tracker = ObjectiveTracker("val/loss", "minimize")
    callback = CheckpointCallback(tmp_path, tracker, keep_best=2)
    loop = FakeLoop(10, 0.5, callback)
    tracker.on_eval_end(loop)
    callback.on_checkpoint(loop)
    callback.flush()
    assert callback.saved_step == 10 and load_checkpoint(tmp_path / LATEST)["step"] == 10
    (tmp_path / LATEST).unlink()
    (tmp_path / LATEST).mkdir()  # the next write cannot land
    loop = FakeLoop(20, 0.4, callback)
    tracker.on_eval_end(loop)
    callback.on_checkpoint(loop)
    with pytest.raises(IsADirectoryError):
        callback.flush()
    assert callback.saved_step == 10  # what a supervisor may call resumable did not move


def test_a_failing_workload_file_fails_the_same_way_twice_and_can_import_its_neighbours(
    tmp_path: Path,
) -> None:
    from tuner.workloads._entry_points import import_entry_point, parse_entry_point

    (tmp_path / "broken.py").write_text("raise RuntimeError('boom while importing')\ndef build(ctx): ...\n")
    entry = parse_entry_point("broken.py:build", tmp_path)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="boom while importing"):
            import_entry_point(entry)

    (tmp_path / "helpers_for_wl.py").write_text("HIDDEN = 7\n")
    (tmp_path / "wl.py").write_text(
        textwrap.dedent("""
        from helpers_for_wl import HIDDEN
        def build(ctx):
            return HIDDEN
    """)
    )
    assert import_entry_point(parse_entry_point("wl.py:build", tmp_path))(None) == 7


def test_status_records_a_crash_with_its_traceback(tmp_path: Path) -> None:
    from tests.train_tests.conftest import write_study
    from tuner.errors import WorkloadCodeError
    from tuner.spec import load_study

    (tmp_path / "crash.py").write_text("def build(ctx):\n    raise ValueError('no data here')\n")
    study = write_study(tmp_path)
    text = study.read_text().replace("name: digits-mlp", "name: crash.py:build")
    text = text.replace("hidden_sizes:\n    - 32\n    dropout: 0.1\n", "{}\n")
    study.write_text(text)
    loaded = load_study(study)
    with pytest.raises(
        WorkloadCodeError, match=r"raised ValueError: no data here at .*crash\.py:2 in build"
    ) as raised:
        run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert isinstance(raised.value.__cause__, ValueError)  # the user's own exception, kept
    assert raised.value.log_path is not None and raised.value.log_path.endswith("error.log")
    status = read_status(tmp_path / "run")
    assert status["status"] == "failed" and "no data here" in status["message"]
    assert "ValueError: no data here" in (tmp_path / "run" / "error.log").read_text()
    assert os.path.exists(tmp_path / "run" / "config.yaml")
