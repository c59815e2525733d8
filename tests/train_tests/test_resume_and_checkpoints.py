"""Checkpoints: the N best plus the latest, atomic, weights-only; resuming is bit-for-bit."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import pickle
from pathlib import Path

import pytest
import torch

from tuner.train import Callback, StopReason, load_checkpoint, run_training


def losses(run: Path) -> dict[int, str]:
    with (run / "metrics.csv").open() as handle:
        return {int(r["step"]): r["train/step_loss"] for r in csv.DictReader(handle)}


class InterruptAt(Callback):
    """What Ctrl-C / SIGTERM does: ask the loop to stop at the next step boundary."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_step_end(self, loop) -> None:
        if loop.step == self.step:
            loop.request_stop(StopReason.INTERRUPTED)


@pytest.mark.parametrize("stop_at", [40, 37])  # at an eval step, and between two evals
def test_resume_continues_bit_for_bit(make_study, tmp_path: Path, stop_at: int) -> None:
    loaded = make_study(max_train_steps=100, eval_every=20, log_every=1)  # dropout 0.1: RNG matters
    straight = run_training(loaded.spec, tmp_path / "straight", base_dir=loaded.base_dir, progress=False)

    split = tmp_path / "split"
    first = run_training(
        loaded.spec, split, base_dir=loaded.base_dir, extra_callbacks=[InterruptAt(stop_at)], progress=False
    )
    assert (first.status, first.step) == ("interrupted", stop_at)
    second = run_training(loaded.spec, split, base_dir=loaded.base_dir, progress=False)
    assert (second.status, second.resumed_from_step, second.step) == ("completed", stop_at, 100)

    assert losses(split) == losses(tmp_path / "straight")  # every step once, same loss to the last digit
    assert len(losses(split)) == 100
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "latest.pt")["model"]
    b = load_checkpoint(split / "checkpoints" / "latest.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (second.best_value, second.best_step) == (straight.best_value, straight.best_step)


def test_elapsed_time_continues_after_a_resume(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=60, eval_every=20, log_every=1)
    run = tmp_path / "run"
    stop = [InterruptAt(40)]
    run_training(loaded.spec, run, base_dir=loaded.base_dir, extra_callbacks=stop, progress=False)
    with (run / "metrics.csv").open() as handle:
        before = {int(r["step"]): float(r["elapsed_s"]) for r in csv.DictReader(handle)}
    run_training(loaded.spec, run, base_dir=loaded.base_dir, progress=False)
    with (run / "metrics.csv").open() as handle:
        elapsed = [float(r["elapsed_s"]) for r in csv.DictReader(handle)]
    assert len(elapsed) == 60
    assert elapsed == sorted(elapsed)  # training time never jumps back to 0 at the resume
    assert elapsed[40] >= before[40]  # step 41 comes after the checkpoint's time at step 40


def test_keeps_the_n_best_plus_latest(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=100, eval_every=10, keep_best_checkpoints=3)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    folder = tmp_path / "run" / "checkpoints"
    with (tmp_path / "run" / "metrics.csv").open() as handle:
        evals = [
            (float(r["val/error_rate"]), int(r["step"]))
            for r in csv.DictReader(handle)
            if r["val/error_rate"]
        ]
    index = json.loads((folder / "index.json").read_text())
    kept = [(entry["value"], entry["step"]) for entry in index["best"]]
    # The three lowest error rates; among ties the earliest checkpoints stay (a later tie is not better).
    assert [v for v, _ in kept] == sorted(v for v, _ in evals)[:3]
    checkpoints = ["latest.pt", *(f"best-step{s:08d}.pt" for _, s in kept)]
    assert sorted(p.name for p in folder.iterdir()) == sorted(["checksums.json", "index.json", *checkpoints])
    # every kept file, and only those, with the sha256 it has on disk
    recorded = json.loads((folder / "checksums.json").read_text())["files"]
    assert sorted(recorded) == sorted(checkpoints)
    for name in checkpoints:
        assert recorded[name] == [hashlib.sha256((folder / name).read_bytes()).hexdigest()]
    assert index["latest"]["step"] == 100
    for _, step in kept:  # each best file is the state at its step
        assert load_checkpoint(folder / f"best-step{step:08d}.pt")["step"] == step


def test_keep_zero_writes_only_latest(make_study, tmp_path: Path) -> None:
    loaded = make_study(keep_best_checkpoints=0)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == [
        "checksums.json",
        "index.json",
        "latest.pt",
    ]


def test_no_temp_files_are_left_behind(make_study, tmp_path: Path) -> None:
    loaded = make_study()
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    assert not [p for p in (tmp_path / "run").rglob("*") if p.name.endswith(".tmp")]


def test_checkpoints_load_weights_only(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"model": Payload()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(evil)


def test_nan_objective_is_never_best(make_study, tmp_path: Path) -> None:
    from tuner.train.checkpoints import CheckpointCallback
    from tuner.train.objective import ObjectiveTracker

    tracker = ObjectiveTracker("val/loss", "minimize")
    callback = CheckpointCallback(tmp_path, tracker, keep_best=2)

    class FakeLoop:
        def __init__(self, step: int, value: float) -> None:
            self.step, self.last_eval_step, self.last_eval = step, step, {"val/loss": value}

        def state_dict(self) -> dict:
            return {"step": self.step}

    for step, value in [(1, math.nan), (2, 0.5), (3, math.inf), (4, math.nan), (5, 0.7), (6, 0.6)]:
        loop = FakeLoop(step, value)
        tracker.on_eval_end(loop)
        callback.on_checkpoint(loop)
    callback.flush()
    assert callback.best == {"best-step00000002.pt": 0.5, "best-step00000006.pt": 0.6}
    assert (tracker.best_value, tracker.best_step) == (0.5, 2)


def test_predictions_are_the_same_sample_at_every_eval(make_study, tmp_path: Path) -> None:
    loaded = make_study(max_train_steps=60, eval_every=20, prediction_samples=5)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    with (tmp_path / "run" / "predictions.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    by_step: dict[str, list[str]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row["example"])
    assert list(by_step) == ["20", "40", "60"]
    assert by_step["20"] == by_step["40"] == by_step["60"] and len(by_step["20"]) == 5
    assert {r["split"] for r in rows} == {"val"}
    assert all(0.0 <= float(r["confidence"]) <= 1.0 for r in rows)


@pytest.mark.parametrize("fsync", [False, True])
def test_fsync_checkpoints_chooses_whether_checkpoints_survive_a_power_cut(
    make_study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    loaded = make_study(max_train_steps=40, eval_every=20, fsync_checkpoints=fsync)
    run_training(loaded.spec, tmp_path / "run", base_dir=loaded.base_dir, progress=False)
    checkpoint_syncs = [path for path in synced if ".latest.pt." in path]
    assert len(checkpoint_syncs) == (2 if fsync else 0)
    # the rename is durable only once the folder holding it is synced too
    folder_syncs = [path for path in synced if path == str(tmp_path / "run" / "checkpoints")]
    assert len(folder_syncs) == (4 if fsync else 0)  # each checkpoint's sha256 record, then the file
    checksum_syncs = [path for path in synced if ".checksums.json." in path]
    assert len(checksum_syncs) == (2 if fsync else 0)  # recorded before the checkpoint's rename
