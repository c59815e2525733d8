"""The outcome benchmark: its data keep the test split apart, --quick runs every contender end to
end, and its tables can say that tuner lost."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from benchmarks import outcome_data as data
from benchmarks import outcome_workloads as workloads
from benchmarks.outcome_contenders import Delivered, baseline_contenders, delivered_metric
from benchmarks.outcome_runs import STUDIES, WORKLOADS, RunRecord, budget_of
from benchmarks.outcome_stats import detectable
from benchmarks.outcome_tables import ablations_table, table, targets
from tests.spec_tests._support import invoke
from tuner.workloads import WorkloadContext

REPO = Path(__file__).resolve().parents[2]
CONTENDERS = ["tuner", *(c.name for c in baseline_contenders())]


@pytest.fixture(autouse=True)
def _data_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The generated arrays in one folder for the whole session. MNIST-1D, whose generator takes
    ~15 CPU s for the benchmark's 105,000 signals, is made with a test split of 5,000 here: the
    tests of a workload read its splits and options, not its size (the large test split is
    tested on the other workloads, and the benchmark makes MNIST-1D in full)."""
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path_factory.getbasetemp() / "bench-data"))
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("name") == "mnist1d":
        # the study's workload file imports the data module by its own name (as a trial does):
        # the module it imported already, else this one
        monkeypatch.setitem(sys.modules, "outcome_data", sys.modules.get("outcome_data", data))
        for module in {data, sys.modules["outcome_data"]}:
            monkeypatch.setattr(module, "TEST_SIZE", 5_000)


#: validation's size where it is not 1,000 (what a user has): the small-data workload's
VAL_SIZES = {"small": data.SMALL_VAL_SIZE}


@pytest.mark.parametrize(
    "splits, sizes",
    [
        (data.teacher_splits, (4_000, 1_000, 100_000)),
        (data.imbalanced_splits, (4_000, 1_000, 100_000)),
        (data.regression_splits, (4_000, 1_000, 100_000)),
        (data.small_splits, (350, 100, 100_000)),
    ],
    ids=["teacher", "imbalanced", "regression", "small"],
)
def test_the_test_split_is_large_and_never_in_train_or_validation(
    splits: Callable[[], data.Splits], sizes: tuple[int, int, int]
) -> None:
    parts = splits()
    assert (len(parts.y_train), len(parts.y_val), len(parts.y_test)) == sizes
    test_rows = {row.tobytes() for row in parts.x_test}  # continuous features: equal rows, one example
    assert not test_rows & {row.tobytes() for row in np.concatenate([parts.x_train, parts.x_val])}


def test_the_regression_targets_are_the_function_plus_noise_and_the_test_ones_noise_free() -> None:
    """Every split standardised by the training targets; the test targets are the function itself,
    the training and validation ones carry noise of a tenth of its variance."""
    parts = data.regression_splits()
    assert parts.y_train.dtype == np.float32
    assert (float(parts.y_train.mean()), float(parts.y_train.std())) == pytest.approx((0.0, 1.0), abs=1e-5)
    scale, shift = np.polyfit(data.regression_function(parts.x_test), parts.y_test, 1)
    assert np.abs(scale * data.regression_function(parts.x_test) + shift - parts.y_test).max() < 1e-5
    for x, y in ((parts.x_train, parts.y_train), (parts.x_val, parts.y_val)):
        clean = scale * data.regression_function(x) + shift
        assert (y - clean).var() / clean.var() == pytest.approx(data.REGRESSION_NOISE, rel=0.15)
    without_test = data.regression_splits(with_test=False)  # what a trial builds
    assert (without_test.y_train == parts.y_train).all() and len(without_test.y_test) == 0


def test_the_small_data_splits_hold_every_class_at_its_share() -> None:
    parts = data.small_splits()
    for y in (parts.y_train, parts.y_val):
        assert set(y.tolist()) == set(range(data.SMALL_CLASSES))
    shares = np.bincount(parts.y_test, minlength=data.SMALL_CLASSES) / len(parts.y_test)
    assert shares == pytest.approx(data.SMALL_PRIOR, abs=0.01)
    without_test = data.small_splits(with_test=False)
    assert (without_test.x_val == parts.x_val).all() and len(without_test.y_test) == 0


def test_the_teacher_labels_are_noisy_in_training_and_validation_and_clean_in_test() -> None:
    parts = data.teacher_splits()
    for x, y in ((parts.x_train, parts.y_train), (parts.x_val, parts.y_val)):
        assert (y != data.teacher_labels(x)).mean() == pytest.approx(data.LABEL_NOISE, abs=0.03)
    assert (parts.y_test == data.teacher_labels(parts.x_test)).all()
    without_test = data.teacher_splits(with_test=False)  # what a trial builds: the same data, no test
    assert (without_test.x_train == parts.x_train).all() and (without_test.y_val == parts.y_val).all()
    assert len(without_test.y_test) == 0


@pytest.mark.parametrize("name", WORKLOADS)
def test_split_option_picks_the_evaluation_data_and_the_seed_never_moves_the_data(name: str) -> None:
    build = getattr(workloads, name)
    tune, test = build(WorkloadContext(options={})), build(WorkloadContext(options={"split": "test"}))
    assert tune.train_data.tensors[0].equal(test.train_data.tensors[0])
    assert (len(tune.eval_data), len(test.eval_data)) == (VAL_SIZES.get(name, 1_000), data.TEST_SIZE)
    other_seed = build(WorkloadContext(options={}, seed=5))
    assert other_seed.eval_data.tensors[1].equal(tune.eval_data.tensors[1])
    with pytest.raises(ValueError, match="split must be one of"):
        build(WorkloadContext(options={"split": "validation"}))


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_study_file_validates_with_a_batch_through_its_workload(name: str) -> None:
    done = invoke("validate", str(STUDIES / f"{name}.yaml"))
    assert done.exit_code == 0, done.output
    assert f"valid\n  study        outcome-{name}\n" in done.stdout
    assert "\n  first batch  " in done.stdout


def _benchmark(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.outcome", *args],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=timeout,
    )  # fmt: skip


def test_quick_mode_runs_every_contender_on_a_workload(tmp_path: Path) -> None:
    """tuner and each baseline at its three lengths, within the budget; results.json says which
    commit and machine ran them; each delivered checkpoint scored on validation gives what its
    training recorded (the same scoring on test is then the model's)."""
    done = _benchmark("--quick", "--workloads", "teacher", "--output-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "results.json").read_text())
    assert set(written["machine"]) == {"host", "cpu", "cpu_flags", "torch"}
    assert len(written["commit"]) >= 12
    runs = written["runs"]
    assert sorted(r["contender"] for r in runs) == sorted(CONTENDERS)
    pruned = next(r for r in runs if r["contender"] == "tpe-hyperband@guess")
    assert "pruned" in pruned["notes"], pruned
    for run in runs:
        assert 0 < run["steps"] <= run["budget"] == budget_of("teacher", quick=True), run
        assert math.isfinite(run["test_metric"]), run
        checkpoint = Path(run["checkpoint"])
        status = json.loads((checkpoint.parents[1] / "status.json").read_text())
        last = run["contender"].startswith("tpe-last")
        recorded = status["last_eval"][status["objective"]] if last else status["best_value"]
        assert run["val_metric"] == pytest.approx(recorded, abs=1e-9), run
        delivered = Delivered(checkpoint, checkpoint.parents[1], 0, 0)
        assert delivered_metric(delivered, split="test") == pytest.approx(run["test_metric"], abs=1e-9)
    table_text = done.stdout[done.stdout.index("**teacher**") :]
    for contender in CONTENDERS:
        assert f"| {contender} |" in table_text

    # the same command again: every run is in results.json, nothing runs again
    again = _benchmark("--quick", "--workloads", "teacher", "--output-dir", str(tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "seed 1 tuner: test" not in again.stdout and "| tuner |" in again.stdout
    assert json.loads((tmp_path / "results.json").read_text())["runs"] == runs

    # a run interrupted before its result was recorded left its folder: a re-run starts it again
    written["runs"] = [r for r in runs if r["contender"] != "random@guess"]
    (tmp_path / "results.json").write_text(json.dumps(written))
    assert (tmp_path / "teacher" / "seed-1" / "random@guess").is_dir()
    resumed = _benchmark("--quick", "--workloads", "teacher", "--output-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "seed 1 random@guess: test" in resumed.stdout and "FAILED" not in resumed.stdout


def test_quick_mode_scores_the_regression_and_the_small_data_workload(tmp_path: Path) -> None:
    """A regression's delivered model is scored by the squared error and the regression metrics
    (on validation it gives what its training recorded), and both workloads reach the tables."""
    contenders = "tuner,tpe-hyperband@guess"
    chosen = ("--workloads", "regression,small", "--contenders", contenders)
    # one run at a time: a second pool process would import torch again for two short runs
    done = _benchmark("--quick", *chosen, "--jobs", "1", "--output-dir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert sorted((r["workload"], r["contender"]) for r in runs) == sorted(
        (w, c) for w in ("regression", "small") for c in contenders.split(",")
    )
    for run in runs:
        status = json.loads((Path(run["checkpoint"]).parents[1] / "status.json").read_text())
        assert status["objective"] == ("val/mse" if run["workload"] == "regression" else "val/error_rate")
        assert run["val_metric"] == pytest.approx(status["best_value"], abs=1e-9), run
        assert 0 < run["test_metric"] < 2, run
    assert "**regression**: test/mse (lower is better)" in done.stdout
    assert "**small**: test/error_rate (lower is better)" in done.stdout


def test_an_output_folder_of_another_commit_is_not_continued(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"commit": "0123456789ab", "machine": {}, "runs": []}))
    done = _benchmark("--quick", "--workloads", "teacher", "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "was written by commit 0123456789ab on an unrecorded machine" in line
    assert line.endswith("use another --output-dir")


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ("--contenders", "tuner,grid@guess"),
            "unknown contender 'grid@guess'; known: tuner, tpe-last@short",
        ),
        (
            ("--workloads", "digits"),
            "unknown workload(s) ['digits']; known: teacher, imbalanced, mnist1d, regression, small",
        ),
        (("--tune-args=--no-extra-round",), "--tune-args needs --label"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = _benchmark("--quick", *args, "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def _record(workload: str, contender: str, seed: int, metric: float) -> RunRecord:
    return RunRecord(workload, contender, seed, 22_500, metric, metric, 22_500, 15, 10.0, 5.0, "x.pt", "")


def _constructed(workload: str, tuner_offset: float, minimize: bool) -> list[RunRecord]:
    """Ten seeds: every baseline at 0.20 + a seed effect (the same in every contender: pairing
    removes it), random@guess better by 0.01, tuner at random@guess plus ``tuner_offset`` (in the
    "better" direction when negative for a metric to minimise) plus a little noise."""
    sign = 1.0 if minimize else -1.0
    records = []
    for seed in range(1, 11):
        base = 0.20 + 0.02 * math.sin(seed)
        for contender in CONTENDERS[1:]:
            better = sign * -0.01 if contender == "random@guess" else 0.0
            records.append(_record(workload, contender, seed, base + better))
        jitter = 0.001 * (-1) ** seed
        records.append(_record(workload, "tuner", seed, base + sign * -0.01 + tuner_offset + jitter))
    return records


@pytest.mark.parametrize("workload, minimize", [("teacher", True), ("imbalanced", False)])
def test_the_tables_say_when_tuner_lost_for_a_minimised_and_a_maximised_metric(
    workload: str, minimize: bool
) -> None:
    """A baseline ahead of tuner by 0.005 on every seed: the table prints the loss beyond the
    noise, and the target fails; tuner ahead by as much: the verdict turns."""
    worse = 0.005 if minimize else -0.005
    lost = _constructed(workload, worse, minimize)
    text = table(workload, lost)
    assert "Best baseline at the guessed length: random@guess" in text
    row = next(
        line for line in text.splitlines() if line.startswith("| random@guess | ") and "behind" in line
    )
    assert f"| {worse:+.4f} [" in row and row.endswith("| 10 | tuner behind beyond the noise |")
    found = {r.figure: r for r in targets(lost, [workload])}
    assert found[f"{workload}: tuner - random@guess (best at the guess)"].passed is False
    assert found["mean relative gain over the best at the guess"].passed is False
    assert found["mean relative gain over the best at the guess"].value == pytest.approx(-2.5, abs=0.3)

    won = _constructed(workload, -worse, minimize)
    text = table(workload, won)
    assert "| tuner ahead beyond the noise |" in text
    found = {r.figure: r for r in targets(won, [workload])}
    assert all(r.passed for r in found.values())


def test_the_ablations_table_compares_each_ablation_with_the_default_on_every_workload() -> None:
    """tuner:a better than tuner by 0.01 error on teacher and 0.01 MCC on imbalanced on every
    seed (beyond the noise), tuner:b the same as tuner: each row says so, signed per metric."""
    records = []
    for seed in range(1, 11):
        base = 0.20 + 0.02 * math.sin(seed)
        jitter = 0.001 * (-1) ** seed
        for workload, sign in (("teacher", -1.0), ("imbalanced", 1.0)):
            records.append(_record(workload, "tuner", seed, base))
            records.append(_record(workload, "tuner:a", seed, base + sign * 0.01 + jitter))
            records.append(_record(workload, "tuner:b", seed, base + jitter))
    text = ablations_table(records, ["teacher", "imbalanced"])
    row_a = next(line for line in text.splitlines() if line.startswith("| tuner:a |"))
    row_b = next(line for line in text.splitlines() if line.startswith("| tuner:b |"))
    assert "| -0.0100 [" in row_a and "| +0.0100 [" in row_a and row_a.count("(beyond the noise)") == 2
    assert "beyond the noise" not in row_b
    assert float(row_a.split("|")[-2].split("%")[0]) == pytest.approx(5.0, abs=0.3)  # 0.01 / 0.2
    assert ablations_table([r for r in records if r.contender != "tuner"], ["teacher"]) == ""


def test_the_smallest_detectable_difference_follows_the_paired_spread() -> None:
    """sd 0.01 over 10 pairs: (t(.975, 9) + t(.80, 9)) * 0.01 / sqrt(10) = 3.1456 * 0.0031623."""
    differences = [0.01 * (-1) ** i * math.sqrt(9 / 10) for i in range(10)]  # sd exactly 0.01, mean 0
    assert detectable(differences) == pytest.approx(0.009947, abs=1e-5)
    assert math.isnan(detectable([0.1]))


HERE = {"host": "vm boot 1234abcd", "cpu": "AMD EPYC", "cpu_flags": "6a93d771884c", "torch": "2.13.0+cpu"}
OTHER = {**HERE, "cpu_flags": "0123456789ab"}


def _results_file(path: Path, records: list[RunRecord], machine: dict[str, str] | None, commit: str) -> Path:
    from dataclasses import asdict

    document = {
        "commit": commit,
        "runs": [asdict(r) for r in records],
        **({"machine": machine} if machine else {}),
    }
    path.write_text(json.dumps(document))
    return path


def test_from_results_merges_an_ablation_with_the_baselines_run_of_one_machine(tmp_path: Path) -> None:
    """The baselines' run, then a tuner-only ablation at another commit: the tables hold both,
    compare the ablation with tuner, and say which commit ran which contender."""
    baselines = _constructed("teacher", 0.0, True)
    ablation = [_record("teacher", "tuner:no-extra-round", s, 0.15) for s in range(1, 11)]
    first = _results_file(tmp_path / "a.json", baselines, HERE, "aaaaaaaaaaaa")
    second = _results_file(tmp_path / "b.json", ablation, HERE, "bbbbbbbbbbbb")
    done = _benchmark("--from-results", str(first), str(second))
    assert done.returncode == 0, done.stderr
    [commits] = [line for line in done.stdout.splitlines() if line.startswith("commits: ")]
    assert "aaaaaaaaaaaa ran tpe-last@short," in commits and ", tuner;" in commits
    assert commits.endswith("; bbbbbbbbbbbb ran tuner:no-extra-round")
    assert "| tuner:no-extra-round | sweep-lr's | 0.1500" in done.stdout
    assert "tuner:no-extra-round minus each baseline" in done.stdout
    assert "more than one machine" not in done.stdout


@pytest.mark.parametrize("later_machine", [OTHER, None], ids=["another-machine", "unsaid"])
def test_results_of_two_machines_merge_only_when_asked(
    tmp_path: Path, later_machine: dict[str, str] | None
) -> None:
    first = _results_file(tmp_path / "a.json", _constructed("teacher", 0.0, True), HERE, "aaaaaaaaaaaa")
    second = _results_file(
        tmp_path / "b.json", [_record("teacher", "tuner", 1, 0.1)], later_machine, "aaaaaaaaaaaa"
    )
    refused = _benchmark("--from-results", str(first), str(second))
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    if later_machine:
        assert (
            f"{first} ran on AMD EPYC (flags 6a93d771884c," in line
            and f"{second} on AMD EPYC (flags 0123" in line
        )
    else:
        assert f"{second} does not say which machine ran it" in line
    assert line.endswith("run them on one machine, or pass --across-machines")
    merged = _benchmark("--from-results", str(first), str(second), "--across-machines")
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.startswith("(runs of more than one machine merged")


def test_from_results_of_a_file_that_is_not_results_says_so(tmp_path: Path) -> None:
    broken = tmp_path / "results.json"
    broken.write_text("{not json")
    done = _benchmark("--from-results", str(broken))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("python -m benchmarks.outcome: error: cannot read results:")
