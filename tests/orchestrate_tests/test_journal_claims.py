"""The claim protocol on Optuna's ``JournalStorage`` (a journal file), the third kind of shared
storage beside the databases and the gRPC proxy: no SQL, no lock, no heartbeat table, so
claims run lock-free (``claim.py``) and trials beat through an attribute. What must hold there
as it does elsewhere: every slot claimed, run and counted exactly once.

Optuna's journal pops a WAITING trial by replay: the first RUNNING record wins
(``storages/journal/_storage.py``, ``set_trial_state_values`` returns whether this worker owns
the trial), and a finished trial refuses writes, as on RDB. 8 processes x 200 trials here take
about 3 s (220-240 trials created: the rest lost a race for their slot and were yielded), at
the level of ``Claimer``, with ``test_grpc_claims.py``'s processes and checks; then the
commands on a journal (``storage: journal:///PATH``). Chaos on a journal: ``test_grpc_chaos.py``.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from tests.orchestrate_tests.test_grpc_claims import (
    PROCESSES,
    TRIALS,
    _claim_until_done,
    assert_each_slot_claimed_once,
)


def test_processes_claiming_through_a_journal_file_count_each_slot_once(tmp_path: Path) -> None:
    """The proxy's 8 x 200 test (``test_grpc_claims.py``), on a journal file."""
    import optuna

    from tuner.orchestrate import open_storage
    from tuner.orchestrate.locks import has_lock
    from tuner.orchestrate.phase import PhaseSettings, start_phase

    url = f"journal:///{tmp_path / 'journal.log'}"
    storage = open_storage(url)
    assert not has_lock(storage)  # the lock-free protocol, as through the gRPC proxy
    settings = PhaseSettings.build(TRIALS, max_failed=TRIALS + 1)  # nothing here proves healthy
    start_phase(storage, "journal", "round-1", settings, direction="minimize")
    ready = tmp_path / "ready"
    ready.mkdir()
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        jobs = [(url, "journal/round-1", "tell", str(ready))] * PROCESSES
        told = pool.starmap(_claim_until_done, jobs, chunksize=1)
    assert_each_slot_claimed_once(
        optuna.load_study(study_name="journal/round-1", storage=storage).trials, TRIALS
    )
    # several took part at once: with Optuna's wait for the lock (up to 1 s) a loaded machine saw
    # one process make 198 of the 200 claims; with tuner's (journal_lock: jittered, at most
    # 0.1 s) the fewest by one of 8 was 7-16 in three runs there
    assert sum(told) >= TRIALS and sum(1 for n in told if n) >= PROCESSES // 2, told


def test_run_round_workers_report_and_list_on_a_journal_file(tmp_path: Path, output_dir: Path) -> None:
    """``storage: journal:///PATH``: the commands work on a journal file as on a database (two
    workers claim lock-free, as through the proxy), and a reader never creates one."""
    import optuna

    from tests.orchestrate_tests.conftest import run_tuner, toy_study
    from tests.orchestrate_tests.test_chaos import _assert_each_slot_done_once
    from tuner.orchestrate import open_storage

    journal = tmp_path / "shared" / "study.log"
    url = f"journal:///{journal}"  # an absolute path: journal:////tmp/...
    study = toy_study(tmp_path, round1={"trials": 6, "steps": 10})
    args = ("--storage", url, "--output-dir", str(output_dir))
    done = run_tuner("run-round", str(study), "--round", "1", "--workers", "2", "--no-progress", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"storage {url}" in done.stderr and "6/6 done" in done.stdout, done.stdout + done.stderr
    trials = optuna.load_study(study_name="toy/round-1", storage=open_storage(url)).trials
    _assert_each_slot_done_once(trials, 6)
    assert not (output_dir / "toy" / "study.db").exists()  # nothing went to the default SQLite file
    report = run_tuner("report", str(study), *args)
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"storage      {url}" in report.stdout and "6 complete" in report.stdout, report.stdout
    listed = run_tuner("list", "--storage", url)
    assert listed.returncode == 0 and "round-1  6 trials: 6 complete" in listed.stdout, listed.stdout
    # without --storage: the output folder's toy/storage.json names the journal
    found = run_tuner("list", "--output-dir", str(output_dir))
    assert found.returncode == 0, found.stdout + found.stderr
    assert url in found.stdout and "round-1  6 trials: 6 complete" in found.stdout, found.stdout
    # report without --storage: the folder's pointer names the journal
    remembered = run_tuner("report", str(study), "--output-dir", str(output_dir))
    assert remembered.returncode == 0 and "6 complete" in remembered.stdout, remembered.stderr
    # a worker on another machine (another output folder) leaves the same pointer there
    machine_b = tmp_path / "machine-b"
    worker = run_tuner(
        "worker", str(study), "--phase", "round-1", "--storage", url, "--output-dir", str(machine_b)
    )
    assert worker.returncode == 0, worker.stdout + worker.stderr
    assert json.loads((machine_b / "toy" / "storage.json").read_text())["storage"] == url
    missing = run_tuner("report", str(study), "--storage", f"journal:///{tmp_path / 'none.log'}")
    assert missing.returncode == 2 and not (tmp_path / "none.log").exists()
    said = f"error: no study storage at {tmp_path / 'none.log'}: nothing has run there (check --storage)"
    assert missing.stderr.strip() == said


def test_a_journal_url_or_file_that_is_not_one_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from tests.orchestrate_tests.conftest import toy_study
    from tests.spec_tests._support import invoke, single_error

    study = toy_study(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("not\na journal\n")  # (a last line that does not parse is a write in progress)
    cases = {
        "journal://host/study.log": "is not a journal file: give journal:///PATH",
        f"journal:///{text}": f"{text} is not an Optuna journal, or is damaged (JSONDecodeError",
    }
    for url, expected in cases.items():
        result = invoke("report", str(study), "--storage", url)
        assert expected in single_error(result), (url, result.output)
    assert text.read_text() == "not\na journal\n"  # read, never written
    proxy = invoke("storage-proxy", "--storage", f"journal:///{tmp_path / 'study.log'}")
    assert "the proxy serves a database" in single_error(proxy)


def test_tune_on_a_journal_delivers_its_model_and_the_same_command_continues(tmp_path: Path) -> None:
    """``tuner tune`` keeps its state (stages, decision log) in the study's storage: on a journal
    too, so the same command run again finds every phase done and delivers the same model."""
    import json

    from tests.cli_tests._tune_support import tune_study
    from tests.orchestrate_tests.conftest import run_tuner

    path = tune_study(tmp_path, top_k=1)
    args = (
        "tune", str(path), "--budget", "80", "--no-apply-suggestions", "--json", "--no-progress",
        "--workers", "1", "--storage", f"journal:///{tmp_path / 'study.log'}",
        "--output-dir", str(tmp_path / "runs"),
    )  # fmt: skip
    done = run_tuner(*args)
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)["delivered_model"]
    assert model["delivered"] and model["phase"] == "round-2" and Path(model["checkpoint"]).is_file()
    again = run_tuner(*args)
    assert again.returncode == 0, again.stderr
    assert "toy/round-2: done in an earlier run, not run again" in again.stderr
    assert json.loads(again.stdout)["delivered_model"]["checkpoint"] == model["checkpoint"]
