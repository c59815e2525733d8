"""``tuner estimate`` counts what ran plus what is planned: trials beyond the file's budget, the
steps a sweep actually trained before its cap, retries that resumed, trials running now; and its
step totals are the sum of the two, per phase and for the study."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from tests.playbook_tests.test_estimate import STUDY
from tests.spec_tests._support import invoke, plain, write_study
from tuner.orchestrate import PhaseSettings, default_storage_url, open_storage, start_phase
from tuner.playbook.estimate import estimate
from tuner.spec import load_study


def _phase(url: str, name: str, budget: int, trial_steps: int) -> optuna.Study:
    settings = PhaseSettings.build(budget)
    return start_phase(
        open_storage(url),
        "est",
        name,
        settings,
        direction="minimize",
        extra_attrs={"tuner:trial_steps": trial_steps},
    )


def _done(slot: int, steps: int, seconds: float, **attrs: object) -> optuna.trial.FrozenTrial:
    return create_trial(
        value=0.1,
        user_attrs={"slot": slot, "final_step": steps, "max_train_steps": steps, "train_s": seconds, **attrs},
    )


def _setup(tmp_path: Path) -> tuple[Path, str]:
    """Round 1 of the file's 20 trials ran 25 (``--trials 25``), one of them killed at step 50
    (last checkpoint 40) and retried from that checkpoint; sweep-lr's 12 points all fit early."""
    path = write_study(tmp_path, STUDY)
    url = default_storage_url(tmp_path / "runs", "est")
    round1 = _phase(url, "round-1", 25, 120)
    for slot in range(24):
        round1.add_trial(_done(slot, 120, 6.0))
    round1.add_trial(
        create_trial(
            state=TrialState.FAIL,
            user_attrs={"slot": 24, "attempt": 0, "last_checkpoint_step": 40},
            intermediate_values={25: 0.5, 50: 0.4},
        )
    )
    round1.add_trial(_done(24, 120, 4.0, attempt=1, resumed_from_step=40, retry_of=24))
    sweep = _phase(url, "sweep-lr", 12, 2000)
    for slot in range(12):  # fit at 100, 200, ... 1200 steps: 0.01 s a step
        sweep.add_trial(_done(slot, 100 * (slot + 1), (slot + 1) * 1.0, stopped_early=True))
    return path, url


def test_round_1_counts_the_trials_that_ran_beyond_the_file_budget(tmp_path: Path) -> None:
    path, url = _setup(tmp_path)
    phases = {p.phase: p for p in estimate(load_study(path), storage_url=url, workers=1).phases}
    round1 = phases["round-1"]
    # 25 slots (26 trials: the retry is one more) instead of the file's 20; nothing left to run
    counts = (round1.trials_total, round1.ran.trials, round1.ran.slots, round1.trials_to_run)
    assert counts == (26, 26, 25, 0)
    # 24 x 120 steps, the killed trial's 50 and its retry's 80 (from step 40): 3,010 trained
    assert (round1.ran.steps, round1.steps_to_run, round1.steps_total) == (3_010, 0, 3_010)
    # measured: (24 x 6 s + 4 s) / (24 x 120 + 80 steps) = 0.05 s a step, which costs the killed 50
    assert round1.cost is not None and round1.cost.step_s == pytest.approx(0.05)
    assert round1.cost_hours == pytest.approx((24 * 6.0 + 4.0 + 50 * 0.05) / 3600)


def test_a_sweep_that_stopped_before_its_cap_is_costed_at_what_it_trained(tmp_path: Path) -> None:
    path, url = _setup(tmp_path)
    sweep = estimate(load_study(path), storage_url=url, workers=1).phases[0]
    assert sweep.phase == "sweep-lr" and sweep.length.steps == 2000  # the cap, for planned trials
    trained = sum(100 * (slot + 1) for slot in range(12))
    assert (sweep.ran.steps, sweep.steps_to_run, sweep.steps_total) == (trained, 0, trained)  # not 24,000
    assert sweep.cost_hours == pytest.approx(sum(range(1, 13)) / 3600)


def test_a_retry_in_its_failed_attempts_folder_is_counted_once(tmp_path: Path) -> None:
    """A retry resumes in its failed attempt's run folder and rewrites its status.json: that step
    is the retry's. Slot 0 was interrupted at step 0 (it recorded ``final_step`` 0), slot 1 killed
    at step 50 (last checkpoint 40: its 10 lost steps were trained, so they count); both retries
    trained to 120 in the same folder."""
    path = write_study(tmp_path, STUDY)
    url = default_storage_url(tmp_path / "runs", "est")
    round2 = _phase(url, "round-2", 2, 120)
    for slot, failed in enumerate(
        [
            {"final_step": 0, "failure_reason": "interrupted"},
            {"last_checkpoint_step": 40, "failure_reason": "killed"},
        ]
    ):
        folder = tmp_path / "runs" / "est" / "round-2" / f"trial-{slot:04d}"
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"status": "completed", "step": 120}))
        evals = {25: 0.5, 50: 0.4} if slot else {}
        attrs = {"slot": slot, "attempt": 0, "run_dir": str(folder), "retried": True, **failed}
        round2.add_trial(create_trial(state=TrialState.FAIL, user_attrs=attrs, intermediate_values=evals))
        resumed = 40 if slot else 0
        retry = {"attempt": 1, "resumed_from_step": resumed, "retry_of": 2 * slot, "run_dir": str(folder)}
        round2.add_trial(_done(slot, 120, 6.0, **retry))
    phase = {p.phase: p for p in estimate(load_study(path), storage_url=url, workers=1).phases}["round-2"]
    # slot 0: 0 + 120; slot 1: 50 + 80. Read for the failed attempts, the folders' 120 counted 440
    assert phase.ran.steps == 120 + 50 + 80


def test_a_running_trial_still_has_the_rest_of_its_length_to_train(tmp_path: Path) -> None:
    path = write_study(tmp_path, STUDY)
    url = default_storage_url(tmp_path / "runs", "est")
    round3 = _phase(url, "round-3", 2, 900)
    round3.add_trial(_done(0, 900, 90.0))
    round3.add_trial(
        create_trial(
            state=TrialState.RUNNING,
            user_attrs={"slot": 1, "max_train_steps": 900},
            intermediate_values={100: 0.3, 300: 0.2},
        )
    )
    phase = {p.phase: p for p in estimate(load_study(path), storage_url=url, workers=1).phases}["round-3"]
    assert (phase.ran.trials, phase.trials_to_run) == (2, 0)
    assert (phase.ran.steps, phase.steps_to_run, phase.steps_total) == (1200, 600, 1800)
    assert phase.cost_hours == pytest.approx((90.0 + 300 * 0.1 + 600 * 0.1) / 3600)


def test_cli_totals_are_what_ran_plus_what_is_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNER_STORAGE", raising=False)
    path, _ = _setup(tmp_path)
    args = (
        "estimate",
        str(path),
        "--output-dir",
        str(tmp_path / "runs"),
        "--workers",
        "1",
        "--probe-steps",
        "3",
    )
    shown = invoke(*args, "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    phases = {p["phase"]: p for p in data["phases"]}
    for phase in data["phases"]:
        assert phase["steps"] == phase["steps_ran"] + phase["steps_to_run"], phase["phase"]
        assert phase["trials"] == phase["trials_ran"] + phase["trials_to_run"], phase["phase"]
    # round 2 and 3 have not run: their file's trials at their length (600 and 900 steps)
    assert (phases["round-2"]["steps_ran"], phases["round-2"]["steps_to_run"]) == (0, 18 * 600)
    assert (phases["round-3"]["steps_ran"], phases["round-3"]["steps_to_run"]) == (0, 2 * 900)
    total = data["total"]
    assert total["steps_ran"] == 3_010 + 7_800 and total["steps_to_run"] == 18 * 600 + 2 * 900
    assert total["steps"] == sum(p["steps"] for p in data["phases"]) == 10_810 + 12_600
    assert total["trials"] == 26 + 12 + 18 + 2 and total["trials_ran"] == 38
    assert total["cost_hours"] == pytest.approx(sum(p["cost_hours"] for p in data["phases"]))

    text = plain(invoke(*args).stdout)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["round-1"][1:6] == ["26", "26", "120", "3,010", "3,010"]
    assert rows["sweep-lr"][1:6] == ["12", "12", "<=2000", "7,800", "7,800"]
    assert rows["total"][1:5] == ["58", "38", "23,410", "10,810"]
    assert "steps: 10,810 trained + 12,600 to run = 23,410" in text
