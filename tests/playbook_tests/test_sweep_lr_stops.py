"""sweep-lr stops a grid LR once it can no longer be the fewest-steps winner: the rule on
constructed sweeps, then end to end on the toy workload told at which step each LR fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.orchestrate_tests.conftest import toy_study
from tests.playbook_tests.sweep_builders import DIVERGED, FIT, NOT_FIT, analyze, frozen, only
from tests.playbook_tests.test_sweep_lr_command import _sweep, _trials
from tuner.playbook.phases import ProductionLength
from tuner.playbook.sweep_lr import (
    BestLongBeforeFit,
    FastestAtEdge,
    RowOutcome,
    StoppedCannotWin,
    SweepOutcome,
    SweepTrial,
    render_lines,
    sweep_trial_from_optuna,
)
from tuner.playbook.sweep_phase import fit_step_to_beat, sweep_plan
from tuner.spec import load_study

CANNOT_WIN = SweepOutcome.CANNOT_WIN


def _trial(
    lr: float, outcome: SweepOutcome, steps: int, fit_step: int | None = None, **kw: Any
) -> SweepTrial:
    return SweepTrial(
        lr=lr,
        seed_index=kw.pop("seed", 0),
        outcome=outcome,
        fit_step=fit_step,
        steps_trained=steps,
        final_train_loss=0.1,
        best_fit_value=1.0 if outcome is FIT else 0.9,
        best_step=kw.pop("best_step", None),
    )


def test_stopped_lrs_are_their_own_state_and_change_no_other_verdict() -> None:
    # lr 1e-4 fits at 300 (best val at 100: long before the fit), at the low edge; 0.01 diverges;
    # the three in between were stopped once past 300. Had they trained on, they would have fit
    # later or not at all: the same verdicts must follow from "not fit" in their place.
    common = [
        _trial(0.0001, FIT, 300, fit_step=300, best_step=100),
        _trial(0.01, DIVERGED, 50),
    ]
    stopped = [_trial(lr, CANNOT_WIN, steps) for lr, steps in ((0.000316, 300), (0.001, 400), (0.00316, 300))]
    trained_on = [_trial(t.lr, NOT_FIT, 1000) for t in stopped]
    result, reference = analyze(common + stopped), analyze(common + trained_on)

    assert result.recommended_max_train_steps == reference.recommended_max_train_steps == 300
    assert result.fastest_lr == reference.fastest_lr == 0.0001
    others = [v for v in result.verdicts if not isinstance(v, StoppedCannotWin)]
    assert [v.to_json() for v in others] == [v.to_json() for v in reference.verdicts]
    assert only(result, FastestAtEdge).edge == "low" and only(result, BestLongBeforeFit).fit_step == 300

    verdict = only(result, StoppedCannotWin)
    assert verdict.lrs == [0.000316, 0.001, 0.00316] and verdict.stopped_at_steps == [300, 400, 300]
    assert (verdict.fit_step, verdict.steps_saved) == (300, 700 + 600 + 700)
    rows = {row.lr: row for row in result.rows}
    assert rows[0.001].outcome is RowOutcome.CANNOT_WIN and rows[0.001].stopped_at_step == 400
    assert rows[0.001].slowest_fit_step is None
    table = render_lines(result, "train/accuracy", 1.0, 1000)
    row_line = next(line for line in table if line.startswith("0.001 "))
    assert "over 400" in row_line and "stopped (cannot win)" in row_line and "not within" not in row_line
    assert result.to_json()["rows"][2]["seed_outcomes"] == ["cannot_win"]


def test_a_seed_stopped_beside_a_seed_that_fit_is_said_so() -> None:
    trials = [
        _trial(0.0001, FIT, 300, fit_step=300, seed=0),
        _trial(0.0001, FIT, 200, fit_step=200, seed=1),
        _trial(0.001, FIT, 100, fit_step=100, seed=0),
        _trial(0.001, CANNOT_WIN, 300, seed=1),
    ]
    result = analyze(trials, grid=[0.0001, 0.001, 0.01], seeds=2)
    row = result.rows[1]
    assert (row.outcome, row.outcome_text) == (
        RowOutcome.PARTLY_FIT,
        "fit 1 of 2 seeds, 1 stopped (cannot win)",
    )
    assert result.recommended_max_train_steps == 300 and result.fastest_lr == 0.0001


def test_a_pruned_trial_that_was_outpaced_reads_as_cannot_win() -> None:
    stopped = sweep_trial_from_optuna(frozen("PRUNED", outpaced_at=300, final_step=310, best_step=200))
    assert stopped is not None
    assert (stopped.outcome, stopped.steps_trained, stopped.outpaced_at) == (CANNOT_WIN, 310, 300)
    assert stopped.best_step is None  # its best is cut off at its stop: not "val best at"
    other = sweep_trial_from_optuna(frozen("PRUNED"))
    assert other is not None and other.outcome is SweepOutcome.FAILED


def test_the_step_to_beat_is_the_fastest_lr_fit_on_every_seed(tmp_path: Path) -> None:
    path = _study(tmp_path, seeds=2)
    stored = sweep_plan(load_study(path), ProductionLength(None, ""))

    def fit(lr: float, seed: int, step: int) -> Any:
        return frozen("COMPLETE", lr=lr, seed_index=seed, fit_step=step, final_step=step)

    trials = [fit(0.01, 0, 20), frozen("RUNNING", lr=0.01, seed_index=1)]
    assert fit_step_to_beat(trials, stored) is None  # one seed is not the LR
    trials[1] = fit(0.01, 1, 40)
    assert fit_step_to_beat(trials, stored) == 40  # its slowest seed
    trials += [fit(0.1, 0, 30), fit(0.1, 1, 30)]
    assert fit_step_to_beat(trials, stored) == 30
    trials += [fit(1.0, 0, 10), frozen("FAIL", lr=1.0, seed_index=1, failure_reason="diverged")]
    assert fit_step_to_beat(trials, stored) == 30  # an LR with a diverged seed cannot win


def _study(folder: Path, fit_at_steps: list[list[float]] | None = None, **sweep: Any) -> Path:
    options: dict[str, Any] = {"fit_at_steps": fit_at_steps or []}
    if "step_sleep_s" in sweep:
        options["step_sleep_s"] = sweep.pop("step_sleep_s")
    path = toy_study(folder, options=options)
    document = yaml.safe_load(path.read_text())
    document["training"].pop("max_train_steps")
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 60, "fit_threshold": 0.9, **sweep}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _steps(path: Path) -> dict[float, tuple[str, int, Any]]:
    return {
        t.params["optimizer.lr"]: (t.state.name, t.user_attrs["final_step"], t.user_attrs.get("outpaced_at"))
        for t in _trials(path)
    }


def test_an_lr_that_fit_stops_the_others_past_its_step_and_a_rerun_or_extend_respects_it(
    tmp_path: Path,
) -> None:
    # one worker runs the grid from the largest LR down: lr 1 fits at step 20; the others never would
    path = _study(tmp_path, [[1.0, 20]])
    done = _sweep(path, "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = {row["lr"]: row for row in result["rows"]}
    assert rows[1.0]["outcome"] == "fit" and result["recommended_max_train_steps"] == 20
    for lr in (0.01, 0.1):
        assert (rows[lr]["outcome"], rows[lr]["stopped_at_step"]) == ("cannot_win", 20)
    kinds = {v["kind"]: v for v in result["verdicts"]}
    assert set(kinds) == {"recommendation", "fastest_at_edge", "stopped_cannot_win"}
    assert kinds["fastest_at_edge"]["edge"] == "high" and kinds["stopped_cannot_win"]["steps_saved"] == 80
    steps = _steps(path)
    assert steps == {1.0: ("COMPLETE", 20, None), 0.1: ("PRUNED", 20, 20), 0.01: ("PRUNED", 20, 20)}
    assert "stopped at step 20: cannot win" in done.stderr  # the trial's line as it ends

    again = _sweep(path, "--workers", "1")  # a re-run trains nothing: a stop is a result
    assert again.returncode == 0, again.stderr
    assert _steps(path) == steps
    assert "stopped (cannot win)" in again.stdout and "not within" not in again.stdout

    extended = _sweep(path, "--workers", "1", "--extend", "--json")  # above the edge: 10, 100
    assert extended.returncode == 0, extended.stderr
    result = json.loads(extended.stdout)
    assert result["recommended_max_train_steps"] == 20
    assert {v["kind"] for v in result["verdicts"]} == {"recommendation", "stopped_cannot_win"}
    assert {lr: s[:2] for lr, s in _steps(path).items() if lr > 1} == {
        10.0: ("PRUNED", 20),
        100.0: ("PRUNED", 20),
    }


def test_an_lr_still_training_when_another_fits_is_stopped_at_a_later_eval(tmp_path: Path) -> None:
    # two workers: lr 1 (never fits, 100 steps of ~30 ms) and 0.1 (fits at step 10) start together
    path = _study(tmp_path, [[0.1, 10]], max_steps=100, step_sleep_s=0.03)
    done = _sweep(path, "--workers", "2")
    assert done.returncode == 0, done.stderr
    steps = _steps(path)
    state, final, outpaced = steps[1.0]
    assert (state, outpaced) == ("PRUNED", 10) and 10 <= final < 100, steps
    assert steps[0.01] == ("PRUNED", 10, 10)  # it started once the fit was known
    assert steps[0.1] == ("COMPLETE", 10, None)


def test_an_lr_that_fits_at_the_step_to_beat_ties_and_the_edge_verdict_stays(tmp_path: Path) -> None:
    # lr 1 fits at 20, then lr 0.1 fits at 20 too: a fit at the step to beat is a fit, not a stop,
    # so the tie (and with it the high-edge verdict, lr 1 being tied) is what it would be unstopped
    path = _study(tmp_path, [[1.0, 20], [0.1, 20]])
    done = _sweep(path, "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["fastest_lr"], result["recommended_max_train_steps"]) == (0.1, 20)
    edge = next(v for v in result["verdicts"] if v["kind"] == "fastest_at_edge")
    assert (edge["edge"], edge["lr"]) == ("high", 1.0) and "tied with lr 0.1" in edge["text"]
    assert _steps(path) == {
        1.0: ("COMPLETE", 20, None),
        0.1: ("COMPLETE", 20, None),
        0.01: ("PRUNED", 20, 20),
    }
