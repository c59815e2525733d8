"""Bad input to ``run-round`` and ``worker``: one line, exit code 2, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.orchestrate_tests.conftest import toy_study
from tests.spec_tests._support import invoke, single_error
from tuner.playbook import start_round
from tuner.spec import load_study


def _run_round(study: Path, output_dir: Path, *extra: str):
    return invoke("run-round", str(study), "--round", "1", "--output-dir", str(output_dir), *extra)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--round", "3"), "unknown phase 'round-3'"),
        (("--round", "2"), "round 2 starts from round-1's results, but round-1 has not run"),
        (("--round", "0"), "rounds are numbered from 1"),
        (("--devices", "zero"), "--devices expects GPU ids like 0,1"),
        (("--workers", "0"), "--workers must be at least 1"),
        (("--workers", "1", "--devices", "0"), "give --workers (CPU) or --devices (GPUs), not both"),
        (("--trials", "0"), "the trial budget must be at least 1"),
        (("--max-failed", "0"), "the failure budget must be at least 1"),
        (("--trial-timeout", "-1"), "the trial timeout must be positive"),
    ],
)
def test_bad_options_of_run_round(
    tmp_path: Path, output_dir: Path, extra: tuple[str, ...], message: str
) -> None:
    study = toy_study(tmp_path)
    assert message in single_error(_run_round(study, output_dir, *extra))


def test_a_round_needs_a_search_space_and_a_schedule_that_fits(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path)
    document = yaml.safe_load(study.read_text())
    document["search_space"] = {}
    study.write_text(yaml.safe_dump(document))
    assert "search_space is empty" in single_error(_run_round(study, output_dir))

    study = toy_study(
        tmp_path, schedule=[{"shape": "linear", "steps": 50, "start": 0.0, "end": 1.0}, {"shape": "cosine"}]
    )
    assert "does not fit round-1's trials of 40 steps (rounds.round1.steps)" in single_error(
        _run_round(study, output_dir)
    )


def test_a_storage_password_is_never_shown(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path)
    url = "postgresql://tuner:s3cret-pw@127.0.0.1:1/nowhere"  # nothing listens on port 1
    result = invoke(
        "run-round", str(study), "--round", "1", "--output-dir", str(output_dir), "--storage", url,
        env={"TUNER_STORAGE_OUTAGE_S": "1"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    warning, error = result.stderr.strip().splitlines()  # waited for, as a restart is, then said
    assert warning.startswith("warning: storage unreachable since")
    assert error.startswith("error: storage postgresql+psycopg://tuner:***@127.0.0.1:1/nowhere unreachable")
    assert "s3cret" not in result.output


def test_a_worker_needs_a_known_and_started_phase(tmp_path: Path, output_dir: Path) -> None:
    """Refused, each in one line; and run in-process (as from Python), a refused worker leaves
    the process's signal handlers as it found them (it counts Ctrl-Cs from its start)."""
    import signal

    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    study = toy_study(tmp_path)
    common = ("--output-dir", str(output_dir))
    assert "unknown phase 'round-9'" in single_error(
        invoke("worker", str(study), "--phase", "round-9", *common)
    )
    line = single_error(invoke("worker", str(study), "--phase", "round-1", *common))
    assert line == (
        f"no study storage at {output_dir / 'toy' / 'study.db'}: start the phase first (tuner run-round), "
        "or give the --output-dir or --storage it was started with"
    )
    assert not output_dir.exists()  # a refused worker creates no storage (nor its folder)
    # a storage that exists but holds no such phase
    start_round(load_study(toy_study(tmp_path / "other", name="other")), "round-1", output_dir)
    line = single_error(
        invoke(
            "worker", str(study), "--phase", "round-1", "--storage", f"sqlite:///{output_dir}/other/study.db"
        )
    )
    assert "phase toy/round-1 does not exist in this storage; start it first" in line
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers


def test_a_worker_with_a_study_file_of_another_name_creates_no_storage(
    tmp_path: Path, output_dir: Path
) -> None:
    start_round(load_study(toy_study(tmp_path)), "round-1", output_dir)
    renamed = toy_study(tmp_path / "renamed", name="renamed")
    line = single_error(invoke("worker", str(renamed), "--phase", "round-1", "--output-dir", str(output_dir)))
    assert line.startswith(f"no study storage at {output_dir / 'renamed' / 'study.db'}: ")
    assert sorted(p.name for p in output_dir.iterdir()) == ["toy"]


def test_gpu_ids_this_machine_cannot_see_are_refused(tmp_path: Path, output_dir: Path) -> None:
    """On a machine without a GPU (this one), or with CUDA_VISIBLE_DEVICES hiding it."""
    study = toy_study(tmp_path)
    env = {"CUDA_VISIBLE_DEVICES": "1"}
    line = single_error(invoke("run-round", str(study), "--round", "1", "--output-dir", str(output_dir),
                               "--devices", "0,1", env=env))  # fmt: skip
    assert line == "--devices 0,1: GPU 0 is not in CUDA_VISIBLE_DEVICES=1; for CPU workers use --workers N"
    line = single_error(
        invoke(
            "worker",
            str(study),
            "--phase",
            "round-1",
            "--output-dir",
            str(output_dir),
            "--device",
            "0",
            env=env,
        )
    )
    assert line == "--device 0: GPU 0 is not in CUDA_VISIBLE_DEVICES=1; for CPU workers use --workers N"
    assert not output_dir.exists()


def test_gpu_ids_without_any_gpu_are_refused(
    tmp_path: Path, output_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.orchestrate.pool import _visible_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if _visible_gpus():
        pytest.skip("this machine has a GPU")
    study = toy_study(tmp_path)
    line = single_error(_run_round(study, output_dir, "--devices", "0"))
    assert line.startswith("--devices 0: no GPU is visible on this machine")
    assert line.endswith("; for CPU workers use --workers N")
    assert not output_dir.exists()


def test_a_worker_with_a_different_study_file_may_not_join(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path)
    start_round(load_study(study), "round-1", output_dir)
    changed = toy_study(
        tmp_path / "elsewhere", search_space={"optimizer.lr": {"type": "float", "low": 0.1, "high": 0.5}}
    )
    line = single_error(invoke("worker", str(changed), "--phase", "round-1", "--output-dir", str(output_dir)))
    fields = (
        "search_space.optimizer.lr.high (1.0 -> 0.5), search_space.optimizer.lr.log (true -> false), "
        "search_space.optimizer.lr.low (0.01 -> 0.1)"
    )
    assert f"differs from the study file that created toy/round-1: {fields}; use the same file" in line
    again = single_error(_run_round(changed, output_dir))
    assert f"differs from the study file that created toy/round-1: {fields}" in again


def test_a_worker_told_to_wait_serves_a_phase_started_after_it(tmp_path: Path, output_dir: Path) -> None:
    """A cluster submits the worker array with the job that starts the phase: whichever runs
    first, the workers serve it (``--wait-for-phase``); without the option they are refused."""
    from tests._processes import finish, wait_for
    from tests.orchestrate_tests.conftest import load_phase, sqlite_url, start_tuner

    study = toy_study(tmp_path, round1={"trials": 2, "steps": 10})
    worker = start_tuner(
        "worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir), "--wait-for-phase", "300"
    )

    # its first line says it waits (stdout and stderr merged): it is up before the phase exists
    waits = "waiting up to 300 s for phase round-1 to be started"
    wait_for(lambda: "\n" in worker.output() or worker.poll() is not None, what="the worker's first line")
    assert worker.output().splitlines()[0] == waits, worker.output()
    assert worker.poll() is None and not output_dir.exists()
    start_round(load_study(study), "round-1", output_dir)

    def trials_done() -> int:
        return sum(t.state.is_finished() for t in load_phase(sqlite_url(output_dir), "toy").trials)

    output, _ = finish(worker, trials_done, what="the worker")
    assert worker.returncode == 0, output
    trials = load_phase(sqlite_url(output_dir), "toy").trials
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE"]


def test_a_worker_waits_no_longer_than_it_was_told(tmp_path: Path, output_dir: Path) -> None:
    study = toy_study(tmp_path)
    args = ("worker", str(study), "--phase", "round-1", "--output-dir", str(output_dir))
    waited = invoke(*args, "--wait-for-phase", "0.3")
    assert waited.exit_code == 2 and "Traceback" not in waited.output
    assert waited.stderr.splitlines() == [
        "waiting up to 0.3 s for phase round-1 to be started",
        f"error: no study storage at {output_dir / 'toy' / 'study.db'}: start the phase first (tuner "
        "run-round), or give the --output-dir or --storage it was started with",
    ]
    assert invoke(*args, "--wait-for-phase", "-1").exit_code == 2
