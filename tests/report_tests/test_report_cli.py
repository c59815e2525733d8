"""``tuner report`` from the command line: a real round end to end, the outputs, and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.orchestrate_tests.conftest import run_tuner, toy_study
from tests.report_tests.builders import add_trial, study
from tests.spec_tests._support import invoke, plain, single_error

LR = "optimizer.lr"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    monkeypatch.delenv("TUNER_OUTPUT_DIR", raising=False)


def test_a_real_round_reports_every_section_in_100_columns_json_and_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # paths are shown relative to the current folder, as a user works
    path = toy_study(tmp_path, round1={"trials": 4})
    output = tmp_path / "runs"
    ran = run_tuner("run-round", str(path), "--round", "1", "--output-dir", str(output), "--no-progress")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    shown = invoke("report", str(path), "--output-dir", str(output), "--csv", str(tmp_path / "t.csv"))
    assert shown.exit_code == 0, shown.output
    text = plain(shown.stdout)
    for label in ("trials", "best", "best step", "search space", "health", "next"):
        assert any(line.startswith(label) for line in text.splitlines()), (label, text)
    assert "round-1 · 4 trials of 40 steps" in text
    assert [line for line in text.splitlines() if len(line) > 100] == []
    assert "checkpoint  " in text and "reproduce   tuner train" in text
    with (tmp_path / "t.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["trial"]) for r in rows] == [0, 1, 2, 3] and {r["state"] for r in rows} == {"complete"}
    assert all(Path(r["run_dir"]).is_dir() and r["reproduce"].startswith("tuner train") for r in rows)

    as_json = invoke("report", str(path), "--output-dir", str(output), "--json")
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert report["schema"] == "tuner.report/1" and report["study"] == "toy"
    (phase,) = report["phases"]
    assert phase["phase"] == "round-1" and phase["counts"]["complete"] == 4
    assert {"best_step", "boundaries", "health", "transfer", "sweep_lr", "imbalance", "best_trial"} <= set(
        phase
    )
    assert (
        phase["best_trial"]["checkpoint"].endswith(".pt")
        and Path(phase["best_trial"]["checkpoint"]).is_file()
    )
    for verdict in phase["best_step"]["verdicts"] + phase["health"]["verdicts"]:
        assert {"kind", "level", "text", "advice", "rule"} <= set(verdict)


def test_a_study_name_and_a_storage_work_without_the_study_file(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    for slot in range(3):
        add_trial(
            phase,
            slot,
            0.1 * (slot + 1),
            {LR: 0.05 * (slot + 1)},
            best_step=20,
            run_dir=tmp_path / f"gone-{slot}",
        )
    built.path.unlink()  # another machine's study: only its storage is here
    shown = invoke("report", "toy", "--storage", built.storage_url, "--phase", "round-1")
    assert shown.exit_code == 0, shown.output
    text = " ".join(plain(shown.stdout).split())
    assert "best trial 0: val/error_rate = 0.1 at step 20 of 40" in text
    assert f"run folder {tmp_path / 'gone-0'} (best checkpoint not on this machine)" in text
    assert "no such folder here (a run folder of another machine?)" in text


def test_a_phase_with_no_completed_trial_is_reported_as_such(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, None, {LR: 0.1}, state="RUNNING")
    add_trial(phase, 1, None, {LR: 0.2}, state="FAIL", failure_reason="oom", error="out of memory")
    shown = invoke("report", str(built.path), "--output-dir", str(built.output_dir))
    assert shown.exit_code == 0, shown.output
    text = plain(shown.stdout)
    assert "1 failed · 1 running" in text and "failed: 1 oom" in text
    assert "no completed trial yet" in text
    assert "too few to judge" in text


def test_missing_and_damaged_run_folders_are_named_not_fatal(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "status.json").write_text("{not json")
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20, run_dir=damaged)
    add_trial(phase, 1, 0.2, {LR: 0.2}, best_step=20, run_dir=tmp_path / "elsewhere" / "trial-0001")
    shown = invoke("report", str(built.path), "--output-dir", str(built.output_dir), "--json")
    assert shown.exit_code == 0, shown.output
    (report_phase,) = json.loads(shown.stdout)["phases"]
    problems = {item["path"]: item["problem"] for item in report_phase["unreadable"]}
    assert problems[str(damaged / "status.json")] == "not valid JSON (damaged?)"
    best = report_phase["best_trial"]
    assert best["checkpoint"] == str(damaged / "checkpoints" / "best-step00000020.pt")
    assert best["checkpoint_on_this_machine"] is False and best["checkpoint_problem"].startswith(
        "not on this machine"
    )
    text = plain(invoke("report", str(built.path), "--output-dir", str(built.output_dir)).stdout)
    assert "unreadable" in text and "not valid JSON" in " ".join(text.split())


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20)
    url = built.storage_url

    message = single_error(invoke("report", "other", "--storage", url))
    assert message.startswith("storage sqlite:///") and "has no study 'other' (studies there: toy)" in message
    message = single_error(
        invoke("report", str(built.path), "--output-dir", str(built.output_dir), "--phase", "round-9")
    )
    assert "has no phase 'round-9'" in message and "its phases: round-1" in message
    message = single_error(invoke("report", str(built.path), "--output-dir", str(tmp_path / "empty")))
    assert message.startswith("no study storage at ") and "study.db" in message
    message = single_error(
        invoke("report", "toy", "--storage", url, "--write-next", str(tmp_path / "n.yaml"))
    )
    assert "--write-next needs the study file" in message
    message = single_error(invoke("report", "../escape", "--output-dir", str(built.output_dir)))
    assert "would write outside the output folder" in message
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00not a database" * 100)
    message = single_error(invoke("report", "toy", "--storage", f"sqlite:///{garbage}"))
    assert message.startswith("cannot read storage sqlite:///") and "garbage.db" in message
    message = single_error(invoke("report", str(tmp_path / "missing.yaml")))
    assert "no such study file" in message


def test_the_storage_is_never_written(tmp_path: Path) -> None:
    built = study(tmp_path)
    phase = built.start("round-1")
    add_trial(phase, 0, 0.1, {LR: 0.1}, best_step=20)
    database = built.output_dir / built.name / "study.db"
    before = database.read_bytes()
    assert invoke("report", str(built.path), "--output-dir", str(built.output_dir), "--json").exit_code == 0
    assert database.read_bytes() == before


@pytest.mark.postgres
def test_a_study_in_postgresql_is_reported_from_any_machine(
    tmp_path: Path, postgres_url: str, unique_name: str
) -> None:
    built = study(tmp_path, name=unique_name, storage=postgres_url)
    first = built.start("round-1")
    for slot, lr in enumerate([0.012, 0.05, 0.3, 0.6, 0.9]):
        add_trial(first, slot, 1.0 - lr, {LR: lr}, best_step=20)
    shown = invoke("report", unique_name, "--storage", postgres_url, "--json")
    assert shown.exit_code == 0, shown.output
    (phase,) = json.loads(shown.stdout)["phases"]
    assert phase["counts"]["complete"] == 5 and phase["best_trial"]["params"] == {LR: 0.9}
    # 3 trials in the top half of the range: too few to move it
    assert [v["kind"] for v in phase["boundaries"]["verdicts"]] == ["range_edge_unsure"]
