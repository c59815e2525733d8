"""The outcome benchmark: its workloads keep the test split apart, and --quick runs end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import outcome_workloads as workloads
from benchmarks.outcome import CONTENDERS, delivered_metric
from benchmarks.outcome_contenders import Delivered
from tuner.workloads import WorkloadContext

REPO = Path(__file__).resolve().parents[2]
NAMES = ("noisy_digits", "imbalanced", "char_lm", "longer_cnn")


def test_test_examples_are_never_in_train_or_validation() -> None:
    train, val, test = workloads.split_indices(workloads.load_digits()[1])
    assert not set(test) & (set(train) | set(val))
    assert not set(train) & set(val)
    assert len(train) + len(val) + len(test) == 1797
    parts = workloads.imbalanced_splits()  # continuous features: equal rows would be the same example
    test_rows = {row.tobytes() for row in parts.x_test}
    assert not test_rows & {row.tobytes() for row in np.concatenate([parts.x_train, parts.x_val])}
    ids, _ = workloads.corpus_ids()
    train_ids, val_ids, test_ids = workloads.text_parts(ids)
    assert len(train_ids) + len(val_ids) + len(test_ids) == len(ids)
    assert bool((test_ids == ids[len(ids) - len(test_ids) :]).all())  # the tail, after validation


def test_label_noise_is_in_training_labels_only() -> None:
    clean, noisy = workloads.digits_splits(), workloads.digits_splits(workloads.LABEL_NOISE)
    assert (noisy.y_train != clean.y_train).mean() == pytest.approx(0.3, abs=0.001)
    assert (noisy.y_val == clean.y_val).all() and (noisy.y_test == clean.y_test).all()


@pytest.mark.parametrize("name", NAMES)
def test_split_option_picks_the_evaluation_data_and_nothing_else(name: str) -> None:
    build = getattr(workloads, name)
    tune, test = build(WorkloadContext(options={})), build(WorkloadContext(options={"split": "test"}))
    assert tune.train_data.tensors[0].equal(test.train_data.tensors[0])
    assert not tune.eval_data.tensors[0].equal(test.eval_data.tensors[0])
    other_seed = build(WorkloadContext(options={}, seed=5))  # the study seed never moves the data
    assert other_seed.eval_data.tensors[1].equal(tune.eval_data.tensors[1])


# One workload in the suite: every workload takes the same code path, and each costs about a CPU
# minute here (tuner starts a process per trial); `python -m benchmarks.outcome --quick` runs all four.
QUICK_WORKLOADS = ("noisy_digits",)


def test_quick_mode_runs_every_contender_on_a_workload(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.outcome", "--quick", "--workloads", ",".join(QUICK_WORKLOADS),
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "results.json").read_text())
    assert set(written["machine"]) == {"host", "cpu", "cpu_flags", "torch"}
    runs = written["runs"]
    expected = {(w, c) for w in QUICK_WORKLOADS for c in CONTENDERS}
    assert {(r["workload"], r["contender"]) for r in runs} == expected
    for run in runs:
        assert 0 < run["steps"] <= run["budget"], run
        assert math.isfinite(run["test_metric"]), run
        # the same scoring on the validation split gives what training recorded for that checkpoint
        checkpoint = Path(run["checkpoint"])
        status = json.loads((checkpoint.parents[1] / "status.json").read_text())
        recorded = (
            status["last_eval"][status["objective"]]
            if run["contender"] == "tpe-last"
            else status["best_value"]
        )
        delivered = Delivered(checkpoint, checkpoint.parents[1], 0, 0, 0.0, 0.0)
        assert delivered_metric(delivered, split="tune") == pytest.approx(recorded, abs=1e-9), run
    for name in QUICK_WORKLOADS:  # the markdown table has a row for every contender
        table = done.stdout[done.stdout.index(f"**{name}**") :]
        for contender in CONTENDERS:
            assert f"| {contender} |" in table


def test_an_unknown_contender_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.outcome", "--quick", "--contenders", "tuner,grid",
         "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unknown contender(s) ['grid']; known: tuner, tpe-last" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def _run(contender: str, seed: int, metric: float) -> dict[str, object]:
    return {
        "workload": "noisy_digits", "contender": contender, "seed": seed, "budget": 16000,
        "test_metric": metric, "steps": 16000, "trials": 16, "cpu_s": 10.0, "wall_s": 5.0,
        "checkpoint": "x.pt", "notes": "",
    }  # fmt: skip


HERE = {"host": "vm boot 1234abcd", "cpu": "AMD EPYC", "cpu_flags": "6a93d771884c", "torch": "2.13.0+cpu"}


def _from_results(*paths: Path, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.outcome", "--from-results", *map(str, paths), *flags],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=120,
    )  # fmt: skip


def _tuner_after_baselines(tmp_path: Path, later_machine: dict[str, str] | None) -> tuple[Path, Path]:
    """The baselines' run (every contender), then a tuner-only run after a change."""
    baselines = [_run(c, s, 0.10 + 0.01 * s) for c in ("tpe-last", "tpe-best", "random") for s in (1, 2)]
    earlier, later = tmp_path / "a.json", tmp_path / "b.json"
    runs = [*baselines, _run("tuner", 1, 0.5), _run("tuner", 2, 0.5)]
    earlier.write_text(json.dumps({"machine": HERE, "runs": runs}))
    tuner_runs = [_run("tuner", 1, 0.09), _run("tuner", 2, 0.10)]
    said = {"machine": later_machine} if later_machine else {}
    later.write_text(json.dumps({"runs": tuner_runs, **said}))
    return earlier, later


def test_from_results_prints_the_merged_tables_and_runs_nothing(tmp_path: Path) -> None:
    """A tuner-only run after a change, beside the baselines' run of the same machine: the later
    file's tuner runs replace the earlier ones of the same seed, and tuner is compared with the
    best baseline."""
    files = _tuner_after_baselines(tmp_path, HERE)
    done = _from_results(*files)
    assert done.returncode == 0, done.stderr
    asked = _from_results(*files, flags=("--across-machines",))  # one machine: nothing to say
    assert asked.returncode == 0 and asked.stdout == done.stdout
    assert "| tuner | 0.0950 [" in done.stdout  # (0.09 + 0.10) / 2: the later file's runs
    assert "| tpe-last | 0.1150 [" in done.stdout
    # tuner minus tpe-last (the first of the equal best baselines), paired by seed: -0.02 each
    assert "tuner minus best baseline (tpe-last), paired by seed: -0.0200" in done.stdout
    assert "more than one machine" not in done.stdout
    assert "Traceback" not in done.stderr


OTHER = {**HERE, "cpu_flags": "0123456789ab"}


@pytest.mark.parametrize("later_machine", [OTHER, None], ids=["another-machine", "unsaid"])
def test_results_of_two_machines_merge_only_when_asked(
    tmp_path: Path, later_machine: dict[str, str] | None
) -> None:
    """A contender repeats on one machine only (its floating-point path changes with the CPU), so
    pairing tuner's runs of one machine with the baselines' of another compares machines; a file
    that does not say which machine ran it cannot be checked."""
    earlier, later = _tuner_after_baselines(tmp_path, later_machine)
    refused = _from_results(earlier, later)
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    if later_machine:
        assert f"{earlier} ran on AMD EPYC (flags 6a93d771884c," in line
        assert f"{later} on AMD EPYC (flags 0123456789ab," in line
    else:
        assert f"{later} does not say which machine ran it" in line
    assert line.endswith("run them on one machine, or pass --across-machines")
    merged = _from_results(earlier, later, flags=("--across-machines",))
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.startswith("(runs of more than one machine merged")
    assert "| tuner | 0.0950 [" in merged.stdout
    alone = _from_results(later)  # one file is its own machine, whatever it says
    assert alone.returncode == 0 and "more than one machine" not in alone.stdout


def test_from_results_of_a_file_that_is_not_results_says_so(tmp_path: Path) -> None:
    broken = tmp_path / "results.json"
    broken.write_text("{not json")
    done = _from_results(broken)
    assert done.returncode == 2
    assert done.stderr.startswith("python -m benchmarks.outcome: error: cannot read results:")
    assert "Traceback" not in done.stderr
