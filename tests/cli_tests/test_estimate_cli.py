"""``tuner estimate`` end to end: a real probe on the digits MLP, the JSON keys, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.spec_tests._support import REPO, invoke, plain, single_error

DIGITS = str(REPO / "studies" / "digits-mlp.yaml")
PHASE_KEYS = {
    "phase",
    "trials",
    "trials_ran",
    "trials_to_run",
    "steps_per_trial",
    "steps_upper_bound",
    "steps",
    "steps_ran",
    "steps_to_run",
    "seconds_per_step",
    "startup_s",
    "cost_source",
    "cost_detail",
    "hours_per_trial",
    "parallel_trials",
    "hours_ran",
    "cost_hours",
    "days",
    "unknown",
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNER_STORAGE", raising=False)


def test_probe_on_the_digits_mlp_prints_every_phase_and_creates_no_storage(tmp_path: Path) -> None:
    result = invoke("estimate", DIGITS, "--output-dir", "runs", "--workers", "2", "--probe-steps", "10")
    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    # trials, of them ran, length, steps in all, of them trained
    assert rows["sweep-lr"][1:6] == ["6", "0", "<=2000", "<=12,000", "0"]  # 6 grid points, 2000-step cap
    assert rows["round-1"][1:6] == ["20", "0", "120", "2,400", "0"]  # 0.2 x max_train_steps 600
    assert rows["round-2"][1:6] == ["3", "0", "600", "1,800", "0"]
    # s/step, a trial's duration ("1.8 s"), 2 trials at once, CPU-hours, wall time, source
    assert re.search(
        r"^round-1 +20 +0 +120 +2,400 +0 +[0-9.]+ +[0-9.]+ (s|min) +2 +[0-9.]+ .* probe$", text, re.M
    ), text
    assert rows["total"][1:5] == ["29", "0", "16,200", "0"]
    assert "steps: 0 trained + 16,200 to run = 16,200" in text
    assert "max_train_steps 600 (study file)" in text
    assert "probe of 10 steps (1 thread)" in text
    assert "2 CPU workers sharing" in text
    assert not (tmp_path / "runs").exists()  # an estimate reads a storage, never creates one


def test_json_has_the_documented_keys_and_consistent_figures() -> None:
    result = invoke("estimate", DIGITS, "--json", "--workers", "1", "--probe-steps", "5")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {
        "study",
        "max_train_steps",
        "max_train_steps_source",
        "workers",
        "phases",
        "total",
        "assumptions",
    }
    assert set(data["workers"]) == {"count", "labels", "device", "threads_per_worker", "cores"}
    assert data["workers"]["count"] == 1 and data["workers"]["device"] == "cpu"
    assert set(data["total"]) == {
        "trials",
        "trials_ran",
        "steps",
        "steps_ran",
        "steps_to_run",
        "cost_hours",
        "days",
        "complete",
    }
    assert [p["phase"] for p in data["phases"]] == ["sweep-lr", "round-1", "round-2"]
    for phase in data["phases"]:
        assert set(phase) == PHASE_KEYS
        assert phase["cost_source"] == "probe" and phase["parallel_trials"] == 1
        assert phase["steps"] == phase["steps_to_run"] == phase["trials"] * phase["steps_per_trial"]
        assert phase["cost_hours"] == pytest.approx(phase["trials"] * phase["hours_per_trial"])
        assert phase["days"] == pytest.approx(phase["trials"] * phase["hours_per_trial"] / 24)
    assert data["total"]["complete"] is True
    assert data["total"]["cost_hours"] == pytest.approx(sum(p["cost_hours"] for p in data["phases"]))


def test_unknown_max_train_steps_is_said_not_an_error() -> None:
    result = invoke("estimate", DIGITS, "--json", "--set", "max_train_steps=null", "--probe-steps", "5")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["max_train_steps"] is None and data["total"]["complete"] is False
    phases = {p["phase"]: p for p in data["phases"]}
    assert phases["sweep-lr"]["hours_per_trial"] is not None  # its own cap: sweep_lr.max_steps
    for name in ("round-1", "round-2"):
        assert phases[name]["steps_per_trial"] is None and phases[name]["cost_hours"] is None
        assert phases[name]["unknown"].startswith("unknown until tuner sweep-lr")
    text = plain(invoke("estimate", DIGITS, "--set", "max_train_steps=null", "--probe-steps", "5").stdout)
    assert "round-2       3    0       ?         ?         0   unknown until tuner sweep-lr" in text
    assert "(known phases)" in text


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--probe-steps", "1"], "--probe-steps must be at least 3"),
        (["--devices", "x"], "--devices expects GPU ids"),
        (["--workers", "2", "--devices", "0"], "not both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    assert expected in single_error(invoke("estimate", DIGITS, *args))


def test_a_missing_study_file_is_one_line() -> None:
    assert "missing.yaml" in single_error(invoke("estimate", "missing.yaml"))
