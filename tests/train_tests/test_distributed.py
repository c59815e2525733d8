"""Multi-process trials (``training.processes_per_trial: 2``, gloo on CPU): every playbook rule.

Initial weights, data shards, evaluation, batch-norm statistics, rank 0 alone writing, a rank's
crash, and an exact resume after Ctrl-C. The collective rules run in real ranks (two
processes); the runs go through the real ``tuner train`` and ``tuner run-round``.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests._processes import finish, run, wait_for
from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, start_tuner, tuner_env
from tests.train_tests.ddp_checks import eval_case, evaluator, regression_case, regression_evaluator
from tuner.errors import UsageError
from tuner.orchestrate import local_workers
from tuner.spec import load_study
from tuner.train import Ranks, StepBatches

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def ddp_study(folder: Path, options: dict[str, Any] | None = None, **training: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "ddp_workload.py", folder / "ddp_workload.py")
    study = {
        "name": "ddp",
        "seed": 0,
        "workload": {"name": "ddp_workload.py:build", "options": options or {}},
        "objective": {"metric": "val/error_rate", "direction": "minimize"},
        "training": {
            "batch_size": 16,
            "eval_batch_size": 12,
            "max_train_steps": 24,
            "eval_every": 8,
            "log_every": 1,
            "keep_best_checkpoints": 1,
            "prediction_samples": 4,
            "tensorboard": False,
            "device": "cpu",
            "processes_per_trial": 2,
            "optimizer": {"name": "momentum", "lr": 0.05},
            **training,
        },
        "search_space": {"optimizer.lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
        "rounds": {"round1": {"trials": 1, "steps": 24, "max_retries": 2}},
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    with (run_dir / "metrics.csv").open() as handle:
        return [(int(row["step"]), float(row["train/step_loss"])) for row in csv.DictReader(handle)]


# -- the rules, on known inputs -----------------------------------------------------------------
def test_the_ranks_slices_of_a_step_are_disjoint_and_together_the_one_process_batch() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(50.0), torch.zeros(50, dtype=torch.long))
    single = StepBatches(data, 8, data_seed=11)
    ranks = [StepBatches(data, 8, data_seed=11, ranks=Ranks(r, 2)) for r in range(2)]
    for step in (0, 1, 5, 6, 7, 40):  # across epoch boundaries (6 steps per epoch)
        parts = [set(r.get(step)[0].long().tolist()) for r in ranks]
        assert len(parts[0]) == len(parts[1]) == 4
        assert parts[0] & parts[1] == set()
        assert parts[0] | parts[1] == set(single.get(step)[0].long().tolist())
        # a pure function of the step: a fresh stream (a resumed run) reads the same slice
        fresh = StepBatches(data, 8, data_seed=11, ranks=Ranks(1, 2))
        assert set(fresh.get(step)[0].long().tolist()) == parts[1]


@pytest.fixture(scope="module")
def collective_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ddp") / "results.pt"
    done = run([sys.executable, "-m", "tests.train_tests.ddp_checks", str(out)], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return torch.load(out, weights_only=False)


def test_sharded_evaluation_equals_one_process_with_partial_batches_and_padding(
    collective_results: dict[str, Any],
) -> None:
    model, dataset = eval_case()
    single, _ = evaluator(dataset, Ranks()).run(model)
    assert collective_results["metrics"].keys() == single.keys()
    for name, value in single.items():
        # counts are exact; the loss is a float32 forward over other batch sizes (last bits differ)
        tolerance = 1e-6 if name == "val/loss" else 0
        assert collective_results["metrics"][name] == pytest.approx(value, rel=tolerance, abs=0), name


def test_sharded_regression_evaluation_equals_one_process(collective_results: dict[str, Any]) -> None:
    model, dataset = regression_case()
    single, _ = regression_evaluator(dataset, Ranks()).run(model)
    assert (
        collective_results["regression"].keys()
        == single.keys()
        == {"val/loss", "val/mse", "val/mae", "val/r2"}
    )
    for name, value in single.items():  # float64 sums of float32 outputs: the last bits may differ
        assert collective_results["regression"][name] == pytest.approx(value, rel=1e-6), name


def test_batch_norm_statistics_are_the_mean_of_the_ranks_after_the_sync(
    collective_results: dict[str, Any],
) -> None:
    before, after = collective_results["bn_before"], collective_results["bn_after"]
    for name in ("running_mean", "running_var"):
        mean = (before[0][name] + before[1][name]) / 2
        assert not torch.equal(before[0][name], before[1][name])
        assert torch.equal(after[0][name], after[1][name])
        assert torch.allclose(after[0][name], mean)


# -- tuner train with 2 processes -------------------------------------------------------------
@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One 2-process run, never stopped: what the other runs of the same study must match."""
    folder = tmp_path_factory.mktemp("straight")
    study = ddp_study(folder, {"init_dir": str(folder), "chatter": CHATTER})
    done = run_tuner("train", str(study), "--output-dir", str(folder / "runs"), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, done


CHATTER = 300  # lines each rank prints at once: under load, split prints interleave mid-line


def test_two_processes_start_from_the_same_weights_and_rank_0_alone_writes(
    straight_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    folder, done = straight_run
    first, second = (torch.load(folder / f"init-rank{r}.pt") for r in range(2))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    # rank 1's words reach the user, marked; rank 0's come as they are
    lines = (done.stdout + done.stderr).splitlines()
    assert sum(line.startswith("[rank 1] built the model") for line in lines) == 1
    assert sum(line.startswith("built the model") for line in lines) == 1
    # every line whole: two ranks printing at once never share one line, nor split one
    for rank, prefix in ((0, ""), (1, "[rank 1] ")):
        chatter = [line for line in lines if line.startswith(f"{prefix}chatter ")]
        assert chatter == [f"{prefix}chatter {n} from rank {rank} " + "x" * 60 for n in range(CHATTER)]
    run_dir = folder / "runs" / "ddp" / "train" / "run-001"
    steps = [step for step, _ in _losses(run_dir)]
    assert steps == list(range(1, 25))  # one row per step: a single writer
    assert "completed at step 24/24" in done.stdout


def test_each_ranks_data_workers_read_its_slice(
    tmp_path: Path, straight_run: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    """2 processes x 2 DataLoader workers (the data as a plain Dataset, with metadata) train on
    exactly the batches 2 processes indexed themselves."""
    study = ddp_study(tmp_path, {"items": True}, data_workers=2)
    done = run_tuner("train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    expected = _losses(straight_run[0] / "runs" / "ddp" / "train" / "run-001")
    assert _losses(tmp_path / "runs" / "ddp" / "train" / "run-001") == expected


def test_a_crash_of_rank_1_ends_the_run_with_its_own_error(tmp_path: Path) -> None:
    study = ddp_study(tmp_path, {"fail_rank": 1, "fail_at_step": 5, "fail": "raise"})
    done = run_tuner("train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert "rank 1: the workload raised ValueError: ddp workload fails on rank 1 at " in done.stderr
    log = (tmp_path / "runs" / "ddp" / "train" / "run-001" / "error.log").read_text()
    assert "--- rank 1 ---" in log and "ddp_workload.py" in log


def test_a_stopped_two_process_run_resumes_to_the_same_losses(
    tmp_path: Path, straight_run: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    expected = _losses(straight_run[0] / "runs" / "ddp" / "train" / "run-001")
    # 0.25 s a step: after the step-8 eval, 15 steps (~4 s of sleep, however busy the machine)
    # remain for the Ctrl-C to land mid-run
    study = ddp_study(tmp_path / "stopped", {"step_sleep_s": 0.25})
    args = ("train", str(study), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    command = start_tuner(*args)
    metrics = tmp_path / "runs" / "ddp" / "train" / "run-001" / "metrics.csv"
    # rows are flushed at evals: row 9 means the step-8 eval is done (and its checkpoint written)
    wait_for(lambda: metrics.exists() and "\n9," in metrics.read_text(), what="row 9", process=command)
    command.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = finish(command, lambda: metrics.stat().st_size, what="the interrupted run")
    assert command.returncode == 130, output
    stopped_at = _losses(metrics.parent)[-1][0]
    assert 8 < stopped_at < 24
    again = run_tuner(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from step {stopped_at}" in again.stdout
    # bit-exact on gloo with 2 ranks: a sum of two floats does not depend on their order
    assert _losses(metrics.parent) == expected


# -- trials of several processes ---------------------------------------------------------------
def killed_at_step_14_then_resumed(tmp_path: Path, fail: str, **training: Any) -> None:
    """A round-1 trial whose rank 1 does ``fail`` once at step 14 (``ddp_workload``): recorded
    killed, and its retry resumed from the step-8 checkpoint, by every rank."""
    markers = tmp_path / "markers"
    markers.mkdir()
    options = {"fail_rank": 1, "fail_at_step": 14, "fail": fail, "marker_dir": str(markers)}
    study = ddp_study(tmp_path, options, **training)
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(tmp_path / "runs")
    )
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load_phase(sqlite_url(tmp_path / "runs", "ddp"), "ddp").trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[0].user_attrs["failure_reason"] == "killed"
    assert trials[1].user_attrs["resumed_from_step"] == 8


def test_a_killed_rank_is_a_killed_trial_and_the_retry_resumes_every_rank(tmp_path: Path) -> None:
    killed_at_step_14_then_resumed(tmp_path, "kill")


def test_validate_refuses_a_batch_that_does_not_split_across_the_processes(tmp_path: Path) -> None:
    study = ddp_study(tmp_path, batch_size=15)
    done = run_tuner("validate", str(study))
    assert done.returncode == 2
    assert (
        "batch_size 15 is the global batch and must split evenly across processes_per_trial 2" in done.stderr
    )
    with pytest.raises(UsageError, match="batch_size 15"):
        load_study(study)


def test_sync_batch_norm_on_cpu_is_refused_in_one_line(tmp_path: Path) -> None:
    study = ddp_study(tmp_path, sync_batch_norm=True)
    done = run_tuner("train", str(study), "--output-dir", str(tmp_path / "runs"))
    assert done.returncode == 2
    assert "sync_batch_norm needs CUDA devices" in done.stderr and "Traceback" not in done.stderr


def test_a_worker_owns_the_devices_of_one_trial() -> None:
    chosen = local_workers(workers=None, devices=["0", "1", "2", "3"], max_parallel=None, budget=9,
                           processes_per_trial=2)  # fmt: skip
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in chosen] == ["0,1", "2,3"]
    with pytest.raises(UsageError, match="3 GPUs do not split into trials of processes_per_trial=2"):
        local_workers(
            workers=None, devices=["0", "1", "2"], max_parallel=None, budget=9, processes_per_trial=2
        )
    cpu = local_workers(workers=None, devices=None, max_parallel=None, budget=9, processes_per_trial=2)
    assert len(cpu) == max(1, (os.cpu_count() or 1) // 2)  # the phase's parallelism counts trials
    env = tuner_env()
    assert env  # (the env helper is shared with the orchestration tests)
