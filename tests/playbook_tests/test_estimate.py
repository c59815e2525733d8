"""``tuner estimate``'s figures: the playbook's formulas, the trial lengths each phase will have,
and seconds per step measured from a real storage's finished trials."""

from __future__ import annotations

import datetime
from pathlib import Path

import optuna
import pytest

from tests.spec_tests._support import write_study
from tuner.orchestrate import PhaseSettings, default_storage_url, open_storage, start_phase
from tuner.playbook.estimate import (
    RECOMMENDED_ATTR,
    CostSource,
    LengthSource,
    PhaseEstimate,
    PhaseLength,
    StepCost,
    estimate,
    load_stored_phase,
    measured_cost,
    planned_phases,
    search_cost_hours,
    search_days,
)
from tuner.spec import load_study

STUDY = """\
name: est
workload:
  name: digits-mlp
  options: {hidden_sizes: [16]}
training:
  batch_size: 32
  max_train_steps: 600
  eval_every: 100
  optimizer: {name: adamw, lr: 1.0e-3}
search_space:
  optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
sweep_lr:
  grid: [1.0e-4, 3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2, 3.0e-2]
  seeds: 2
  max_steps: 2000
rounds:
  round1: {trials: 20, length_fraction: 0.2, parallel: 1}
  round2: {top_k: 3, seeds: 2, lr_multipliers: [0.5, 1.0, 2.0]}
  round3: {top_k: 2, seeds: 1, steps: 900}
"""


def test_search_cost_and_days_are_the_playbook_formulas() -> None:
    assert search_cost_hours(20, 0.5) == pytest.approx(10.0)
    # 20 trials on 4 devices, 12 hours each: 5 waves of half a day
    assert search_days(20, 4, 12.0) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        search_days(20, 0, 1.0)


def test_a_probe_adds_start_up_and_every_eval_to_the_steps() -> None:
    cost = StepCost(0.01, CostSource.PROBE, "probe", eval_s=2.0, startup_s=3.0)
    # 250 steps, evals at 100, 200 and the last step: 3 evals
    assert cost.trial_seconds(250, 100) == pytest.approx(3.0 + 2.5 + 6.0)
    assert cost.seconds_per_step(100) == pytest.approx(0.01 + 0.02)
    phase = PhaseEstimate(PhaseLength("round-1", 40, 250), parallel=4, cost=cost, eval_every=100)
    assert phase.hours_per_trial == pytest.approx(11.5 / 3600)
    assert phase.cost_hours == pytest.approx(40 * 11.5 / 3600)
    assert phase.days == pytest.approx(10 * 11.5 / 3600 / 24)


def test_unknown_length_has_no_figures() -> None:
    cost = StepCost(0.01, CostSource.PROBE, "probe")
    phase = PhaseEstimate(
        PhaseLength("round-2", 3, None, unknown="why"), parallel=2, cost=cost, eval_every=10
    )
    assert not phase.known
    assert (phase.hours_per_trial, phase.cost_hours, phase.days) == (None, None, None)


def test_phases_have_the_trials_and_lengths_the_study_defines(tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, STUDY)).spec
    phases = {p.phase: p for p in planned_phases(spec)}
    assert list(phases) == ["sweep-lr", "round-1", "round-2", "round-3"]
    assert (phases["sweep-lr"].trials, phases["sweep-lr"].steps) == (12, 2000)  # 6 points x 2 seeds
    assert phases["sweep-lr"].upper_bound
    # 20% of 600 is 120, moved to the eval grid (eval_every 100): 100
    assert (phases["round-1"].trials, phases["round-1"].steps, phases["round-1"].parallel_cap) == (20, 100, 1)
    assert (phases["round-2"].trials, phases["round-2"].steps) == (18, 600)  # 3 x 2 seeds x 3 multipliers
    assert (phases["round-3"].trials, phases["round-3"].steps) == (2, 900)


def test_default_grid_has_at_least_five_points(tmp_path: Path) -> None:
    text = STUDY.replace("  grid: [1.0e-4, 3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2, 3.0e-2]\n", "")
    sweep = planned_phases(load_study(write_study(tmp_path, text)).spec)[0]
    assert sweep.trials >= 5 * 2


def test_unknown_max_train_steps_leaves_dependent_phases_unknown(tmp_path: Path) -> None:
    spec = load_study(write_study(tmp_path, STUDY.replace("  max_train_steps: 600\n", ""))).spec
    phases = {p.phase: p for p in planned_phases(spec)}
    for name in ("round-1", "round-2"):
        assert phases[name].steps is None
        assert "unknown until tuner sweep-lr" in (phases[name].unknown or "")
    assert phases["sweep-lr"].steps == 2000  # its own cap
    assert phases["round-3"].steps == 900  # given in steps


def _phase(storage: object, name: str, budget: int = 1, **attrs: object) -> optuna.Study:
    """A phase created with a trial budget of ``budget`` (the study file's wins when larger)."""
    settings = PhaseSettings.build(budget)
    return start_phase(storage, "est", name, settings, direction="minimize", extra_attrs=attrs)


def _trial(seconds: float, **attrs: object) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(value=0.1, user_attrs={"train_s": seconds, **attrs})


def test_measured_durations_and_sweep_lr_recommendation_from_the_storage(tmp_path: Path) -> None:
    """Every phase has run: no probe, each phase's figure from its own trials."""
    path = write_study(tmp_path, STUDY.replace("  max_train_steps: 600\n", ""))
    url = default_storage_url(tmp_path / "runs", "est")
    storage = open_storage(url)
    sweep = _phase(storage, "sweep-lr", **{RECOMMENDED_ATTR: 400})
    # sweep-lr trials stop when they fit: 50 and 150 steps, 0.1 s a step either way
    sweep.add_trial(_trial(5.0, final_step=50, max_train_steps=2000))
    sweep.add_trial(_trial(15.0, final_step=150, max_train_steps=2000))
    round1 = _phase(storage, "round-1", **{"tuner:trial_steps": 80})
    for seconds in (12.0, 10.0, 8.0):  # 80 steps each (the phase's length): 0.125 s a step
        round1.add_trial(_trial(seconds))
    round1.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))  # not counted
    round2 = _phase(storage, "round-2")
    start = datetime.datetime(2024, 1, 1, 12, 0, 0)
    round2.add_trial(  # no train_s: the trial's own start and end times
        optuna.trial.FrozenTrial(
            number=0,
            state=optuna.trial.TrialState.COMPLETE,
            value=0.2,
            datetime_start=start,
            datetime_complete=start + datetime.timedelta(seconds=80),
            params={},
            distributions={},
            user_attrs={"max_train_steps": 400},
            system_attrs={},
            intermediate_values={},
            trial_id=0,
        )
    )
    round3 = _phase(storage, "round-3")
    round3.add_trial(_trial(90.0, max_train_steps=900))

    assert measured_cost(load_stored_phase(storage, "est", "round-1")).step_s == pytest.approx(0.125)  # type: ignore[union-attr]
    result = estimate(load_study(path), storage_url=url, workers=2)
    assert (result.max_train_steps, result.max_train_steps_source) == (400, LengthSource.SWEEP_LR)
    by_name = {p.phase: p for p in result.phases}
    expected = {  # phase: (trials, ran, steps, steps trained, seconds per step, measured trials)
        "sweep-lr": (12, 2, 2000, 200, 0.1, 2),  # 50 and 150 steps trained, not the 2000 cap
        "round-1": (20, 4, 80, 240, 0.125, 3),  # 0.2 x 400; the failed trial trained nothing
        "round-2": (18, 1, 400, 400, 0.2, 1),
        "round-3": (2, 1, 900, 900, 0.1, 1),
    }
    for name, (trials, ran, steps, trained, per_step, count) in expected.items():
        phase = by_name[name]
        assert phase.cost is not None and phase.cost.source == CostSource.MEASURED, name
        assert phase.cost.detail == f"measured over {count} trial{'s' if count > 1 else ''}"
        assert (phase.trials_total, phase.ran.trials, phase.length.steps) == (trials, ran, steps), name
        assert (phase.ran.steps, phase.steps_to_run) == (trained, (trials - ran) * steps), name
        assert phase.hours_per_trial == pytest.approx(steps * per_step / 3600), name
        # what ran at its own seconds, plus the planned trials at the measured rate
        assert phase.cost_hours == pytest.approx(
            phase.ran.measured_s / 3600 + (trials - ran) * steps * per_step / 3600
        ), name
    assert by_name["round-1"].ran.measured_s == pytest.approx(30.0)
    assert by_name["round-1"].parallel == 1  # rounds.round1.parallel caps the 2 workers
    assert by_name["round-2"].parallel == 2
    # days: the phase's own span so far (round 1's trials were made just now), plus the waves to go
    round1_span = by_name["round-1"].ran.wall_s
    assert round1_span < 60
    assert by_name["round-1"].days == pytest.approx(round1_span / 86400 + 16 * 10.0 / 3600 / 24)
    assert by_name["round-2"].days == pytest.approx((80.0 + 17 / 2 * 80.0) / 3600 / 24)
    assert result.complete
    assert result.total_cost_hours == pytest.approx(sum(p.cost_hours or 0 for p in result.phases))
    assert result.total_steps == result.total_steps_ran + result.total_steps_to_run


def test_the_study_file_beats_the_sweep_lr_recommendation(tmp_path: Path) -> None:
    path = write_study(tmp_path, STUDY)
    url = default_storage_url(tmp_path / "runs", "est")
    storage = open_storage(url)
    _phase(storage, "sweep-lr", **{RECOMMENDED_ATTR: 400}).add_trial(_trial(1.0, final_step=10))
    for name in ("round-1", "round-2", "round-3"):
        _phase(storage, name).add_trial(_trial(1.0, max_train_steps=10))
    result = estimate(load_study(path), storage_url=url, workers=1)
    assert (result.max_train_steps, result.max_train_steps_source) == (600, LengthSource.STUDY_FILE)
    assert [p.length.steps for p in result.phases] == [2000, 100, 600, 900]  # round 1 on the eval grid
