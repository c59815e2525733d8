"""What each process of a round imports: a trial process never trains as an orphan, the worker
never imports the user's workload (code that touches CUDA at import must run only in trials)
unless ``TUNER_PRELOAD_WORKLOAD`` asks it to, and an idle worker never imports torch."""

from __future__ import annotations

import re
from pathlib import Path


def test_a_trial_process_whose_worker_is_already_gone_does_not_train_as_an_orphan() -> None:
    """The parent-death signal only covers a death after it is requested: checked after."""
    import subprocess
    import sys

    script = (
        "import signal; from tuner.orchestrate.trial_process import die_with_parent; "
        "die_with_parent(signal.SIGKILL, parent_pid=-1); print('still training')"
    )  # -1: a parent that is not ours any more (it died, we were re-parented)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == -9 and "still training" not in done.stdout


def test_the_worker_never_imports_the_users_workload(tmp_path: Path, output_dir: Path) -> None:
    """Code that touches CUDA at import time must only run in the trial processes."""
    from tests.orchestrate_tests.conftest import run_tuner, toy_study, tuner_env

    log = tmp_path / "imports.log"
    study = toy_study(tmp_path, round1={"trials": 2, "steps": 10})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir),
        env=tuner_env(TOY_IMPORT_LOG=str(log)),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    imports = [line.split() for line in log.read_text().splitlines()]
    assert len(imports) == 2  # one per trial
    assert len({parent for _, parent in imports}) == 1  # the trial processes: children of one worker
    assert not {pid for pid, _ in imports} & {parent for _, parent in imports}  # the worker: never
    # a worker with nothing left to claim never imports torch either (seconds of CPU, ~300 MB):
    # its imports, as Python lists them (PYTHONPROFILEIMPORTTIME), hold no torch module
    late = run_tuner(
        "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir),
        env=tuner_env(PYTHONPROFILEIMPORTTIME="1"), cold=True,
    )  # fmt: skip
    assert late.returncode == 0 and "worker: 0 trials run; done" in late.stdout, late.stdout + late.stderr
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", late.stderr, flags=re.MULTILINE)
    assert "optuna" in imported and not [m for m in imported if m.split(".")[0] == "torch"], imported


def test_tuner_preload_workload_imports_the_users_module_once_per_worker(
    tmp_path: Path, output_dir: Path
) -> None:
    """``TUNER_PRELOAD_WORKLOAD=1``: the worker imports the module before its trials fork, and no
    trial imports it again (each would pay its imports: scikit-learn's is a CPU second)."""
    from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study, tuner_env
    from tuner.workloads import PRELOAD_ENV

    log = tmp_path / "imports.log"
    study = toy_study(tmp_path, round1={"trials": 3, "steps": 10})
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir),
        env=tuner_env(TOY_IMPORT_LOG=str(log), **{PRELOAD_ENV: "1"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(log.read_text().splitlines()) == 1  # the worker's import, inherited by 3 trials
    assert {t.state.name for t in load_phase(sqlite_url(output_dir), "toy").trials} == {"COMPLETE"}


def test_a_preloaded_module_that_fails_to_import_fails_its_trials_with_the_users_line(
    tmp_path: Path, output_dir: Path
) -> None:
    """The worker swallows the failed import: the trial imports the module again and reports the
    error as it always does (naming the user's line), and the worker itself does not crash; as
    the workload fails before its first step, the round stops there (exit 2), retrying nothing."""
    from tests.orchestrate_tests.conftest import load_phase, run_tuner, sqlite_url, toy_study, tuner_env
    from tuner.workloads import PRELOAD_ENV

    study = toy_study(tmp_path, round1={"trials": 2, "steps": 10, "max_failed": 2, "max_retries": 0})
    (tmp_path / "toy_workload.py").write_text(
        "import torch\n\nraise RuntimeError('broken at import')\n\n\ndef build(ctx):\n    pass\n"
    )
    done = run_tuner(
        "run-round", str(study), "--round", "1", "--workers", "1", "--output-dir", str(output_dir),
        env=tuner_env(**{PRELOAD_ENV: "1"}),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert [t.state.name for t in trials] == ["FAIL"]
    errors = [t.user_attrs["error"] for t in trials]
    assert all("broken at import at " in e and "toy_workload.py:3 in <module>" in e for e in errors), errors
    assert "error: worker" not in done.stderr and "Traceback" not in done.stderr  # the worker did not crash
