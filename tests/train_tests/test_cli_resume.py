"""Bit-for-bit resume through the real command: SIGTERM a running `tuner train`, run it again,
and get the very numbers and weights of a run that was never stopped.

Also: a broken pipe (``tuner train ... | head -1``) is no training failure.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests._processes import PATIENCE_S, spawn
from tests.train_tests.conftest import write_study
from tuner.train import read_status

STEPS = 300

#: digits-mlp whose forward pauses while ``pause_file`` exists: a second signal then lands
#: deterministically while the first one's clean stop is still waiting for the step to end.
PAUSABLE = """\
import os
import time

import torch
import yaml

from tuner.workloads.digits import build_mlp


class Pausable(torch.nn.Module):
    def __init__(self, inner, pause_file):
        super().__init__()
        self.inner, self.pause_file = inner, pause_file

    def forward(self, x):
        if self.training and os.path.exists(self.pause_file):
            open(self.pause_file + ".waiting", "w").close()
            while os.path.exists(self.pause_file):
                time.sleep(0.01)
        return self.inner(x)


def build(ctx):
    options = dict(ctx.options)
    pause_file = options.pop("pause_file")
    workload = build_mlp(type(ctx)(options=options, seed=ctx.seed, base_dir=ctx.base_dir))
    workload.model = Pausable(workload.model, pause_file)
    return workload
"""


def _start(study: Path, runs: Path, **kwargs) -> subprocess.Popen:
    return spawn(
        [sys.executable, "-m", "tuner", "train", str(study), "--output-dir", str(runs), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TUNER_DEBUG": ""},
        **kwargs,
    )


def _run_dir(runs: Path) -> Path:
    return runs / "engine-test" / "train" / "run-001"


def _wait_for_rows(metrics: Path, rows: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") > rows:
            return
        time.sleep(0.02)
    raise AssertionError("the run never got going")


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)["model"]


def _assert_same_run(run_dir: Path, reference: Path) -> None:
    assert read_status(run_dir)["status"] == "completed" and read_status(run_dir)["step"] == STEPS
    assert _metrics(run_dir) == _metrics(reference)
    ours, theirs = _final_weights(run_dir), _final_weights(reference)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    best = sorted(p.name for p in (run_dir / "checkpoints").glob("best-*.pt"))
    assert best == sorted(p.name for p in (reference / "checkpoints").glob("best-*.pt"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A study (dropout on, so the RNG state matters) and its uninterrupted run."""
    folder = tmp_path_factory.mktemp("reference")
    study = write_study(folder, max_train_steps=STEPS, eval_every=50, log_every=10)
    (folder / "pausable.py").write_text(PAUSABLE)
    options = {"hidden_sizes": [32], "dropout": 0.1, "pause_file": str(folder / "pause")}
    config = yaml.safe_load(study.read_text())
    config["workload"] = {"name": "pausable.py:build", "options": options}
    study.write_text(yaml.safe_dump(config))
    runs = folder / "runs"
    process = _start(study, runs)
    _, err = process.communicate(timeout=2 * PATIENCE_S)
    assert process.returncode == 0, err
    return study, _run_dir(runs)


@pytest.mark.parametrize("signals", [1, 2], ids=["one-sigterm", "two-sigterms"])
def test_sigterm_then_rerun_matches_an_uninterrupted_run(
    tmp_path: Path, reference: tuple[Path, Path], signals: int
) -> None:
    study, reference_dir = reference
    runs = tmp_path / "runs"
    process = _start(study, runs)
    _wait_for_rows(_run_dir(runs) / "metrics.csv", 8, process)
    pause = study.parent / "pause"
    if signals == 2:
        pause.touch()  # the next step waits: the clean stop cannot finish before signal 2
        waiting = Path(f"{pause}.waiting")
        deadline = time.monotonic() + PATIENCE_S
        while not waiting.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        waiting.unlink()
    process.send_signal(signal.SIGTERM)
    if signals == 2:
        time.sleep(0.5)  # two signals sent at once would merge into one
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=PATIENCE_S)
    pause.unlink(missing_ok=True)
    assert process.returncode == 130, err
    status = read_status(_run_dir(runs))
    assert status["status"] == "interrupted"
    if signals == 1:  # a clean stop: a checkpoint of the very step it stopped at
        assert "continue from the last checkpoint" in err and 0 < status["step"] < STEPS
    else:  # out at once, without the clean stop's checkpoint
        assert err.strip() == "error: interrupted; run the same command again to continue"

    rerun = _start(study, runs)
    out, err = rerun.communicate(timeout=2 * PATIENCE_S)
    assert rerun.returncode == 0, err
    assert "resuming" in err and "resumed from step" in out
    _assert_same_run(_run_dir(runs), reference_dir)


def test_a_reader_that_goes_away_does_not_fail_the_run(tmp_path: Path) -> None:
    """`tuner train study.yaml 2>&1 | head -1`: the output is dropped, the training goes on."""
    study = write_study(tmp_path, max_train_steps=200, eval_every=10, log_every=10)
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "tuner", "train", str(study), "--output-dir", str(runs)]
    train = spawn(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    head = spawn(["head", "-1"], stdin=train.stdout, stdout=subprocess.PIPE)
    assert train.stdout is not None
    train.stdout.close()  # only `head` reads the pipe now
    first, _ = head.communicate(timeout=PATIENCE_S)  # start-up: imports, the dataset
    assert first.decode().startswith("engine-test: step 0/200")
    assert train.wait(timeout=2 * PATIENCE_S) == 0
    status = read_status(_run_dir(runs))
    assert status["status"] == "completed" and status["step"] == 200
    assert "error.log" not in {p.name for p in _run_dir(runs).iterdir()}
