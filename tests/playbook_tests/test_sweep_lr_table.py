"""sweep-lr's result as JSON (stable keys, strict JSON) and as a table (100 columns at most)."""

from __future__ import annotations

import json

from tests.playbook_tests.sweep_builders import DIVERGED, FIT, NOT_FIT, analyze, only, trial
from tuner.playbook.sweep_lr import Diverged, render_lines


def test_to_json_keys_are_stable_and_strict_json():
    trials = [trial(0.0001, DIVERGED, loss=float("nan"), value=None, reason="diverged")]
    trials += [
        trial(0.000316, FIT, 800),
        trial(0.001, FIT, 480),
        trial(0.00316, FIT, 600),
        trial(0.01, NOT_FIT),
    ]
    data = analyze(trials).to_json()
    json.dumps(data, allow_nan=False)
    assert set(data) == {"rows", "recommended_max_train_steps", "fastest_lr", "provisional", "verdicts"}
    assert set(data["rows"][0]) == {
        "lr",
        "seeds",
        "seed_outcomes",
        "fit_steps",
        "median_fit_step",
        "spread",
        "slowest_fit_step",
        "outcome",
        "outcome_text",
        "final_train_loss",
        "best_fit_value",
        "median_best_step",
        "stopped_at_step",
    }
    assert data["rows"][0]["outcome"] == "diverged" and data["rows"][0]["final_train_loss"] is None
    assert data["recommended_max_train_steps"] == 500 and data["fastest_lr"] == 0.001
    by_kind = {v["kind"]: v for v in data["verdicts"]}
    assert set(by_kind) == {"recommendation", "diverged"}
    assert by_kind["recommendation"] == {
        "kind": "recommendation",
        "steps": 500,
        "lr": 0.001,
        "fit_step": 480,
        "eval_every": 100,
        "text": by_kind["recommendation"]["text"],
        "advice": None,
    }
    assert by_kind["diverged"]["threshold_lr"] is None and by_kind["diverged"]["lrs"] == [0.0001]


def test_render_fits_100_columns_with_long_names():
    grid = [1e-5, 3.16e-5, 0.0001, 0.000316, 0.001, 0.00316]
    trials = [trial(lr, NOT_FIT, seed=s, value=0.123456) for lr in grid[:3] for s in (0, 1)]
    trials += [trial(grid[3], FIT, 99900, seed=0), trial(grid[3], DIVERGED, seed=1, reason="diverged")]
    trials += [trial(lr, FIT, 88800 + s * 100, seed=s) for lr in grid[4:] for s in (0, 1)]
    result = analyze(trials, grid=grid, seeds=2, max_steps=100000, fit_metric="train/top5_accuracy_long_name")
    lines = render_lines(result, "train/top5_accuracy_long_name", 1.0, 100000)
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    assert "best value" in lines[0]  # the long metric name is in the verdicts, not the header
    assert any("not within 100000 steps" in line for line in lines)
    outcome_column = lines[0].index("outcome")
    outcomes = " ".join(line[outcome_column:] for line in lines[2 : lines.index("")])
    assert "not fit fit 1 of 2 seeds, 1 diverged fit fit" in outcomes  # wrapped, not cut
    diverged = only(result, Diverged)
    assert diverged.partial_lrs == [0.000316]
    assert diverged.text == "lr 0.000316 (1 of 2 seeds) diverged (1 of 6 grid points)"
