"""A range moves only when the objective still improves toward its edge next to that edge.

Twelve round-1 trials at quasi-random positions of a log LR range [0.01, 1] (six in its top
half). The exact one-sided p-values of the top half's rank orders used here: ``STEADY`` 0.0014
(a move), ``UNSURE`` 0.12 (cannot tell); ``INSIDE`` is the known false alarm of a whole-range
trend: an optimum at 72% of the range with the lower values bad (whole-range Spearman -0.85,
p 0.0005), whose top half turns back (Spearman +0.26): no move.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.report_tests.builders import add_trial, study
from tests.report_tests.test_verdicts import LR, _lr_round, kinds, only, report_of
from tuner.cli.app import app

POSITIONS = [0.04, 0.12, 0.20, 0.29, 0.37, 0.45, 0.53, 0.62, 0.70, 0.78, 0.86, 0.95]  # of the log range
STEADY = [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]  # the error falls as the LR rises
UNSURE = [12, 11, 10, 9, 8, 7, 5, 3, 6, 2, 4, 1]  # clear over the whole range, not in the top half
INSIDE = [round(100 * (u - 0.72) ** 2, 3) + 0.1 for u in POSITIONS]
NO_TREND = [5, 3, 6, 8, 10, 2, 7, 12, 9, 11, 4, 1]  # the best at the top, no trend toward it


def _round(tmp_path: Path, ranks: list[float], *, descending: bool = False, **kwargs: object) -> object:
    """Round 1 with the error ``0.01 * rank`` at each position (mirrored: the LR falls instead)."""
    positions = [1 - u for u in POSITIONS] if descending else POSITIONS
    rows = [(0.01 * 100**u, 0.01 * rank) for u, rank in zip(positions, ranks, strict=True)]
    return _lr_round(tmp_path, rows, **kwargs)  # type: ignore[arg-type]


def test_a_steady_fall_toward_the_top_moves_the_range_up_one_decade(tmp_path: Path) -> None:
    report = report_of(_round(tmp_path, STEADY))  # type: ignore[arg-type]
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert (edge.param, edge.edge, edge.level, edge.trials) == (LR, "high", "warning", 6)
    assert edge.spearman == -1.0 and edge.p_value == pytest.approx(1 / 720)
    assert "in its top half Spearman -1.00 over 6 trials" in edge.text or "top half" in edge.text
    assert edge.suggested_high == pytest.approx(10.0)  # one decade past 1 (the toy trains with SGD)
    best = math.log(edge.best_value / edge.suggested_low) / math.log(edge.suggested_high / edge.suggested_low)
    assert 0.2 <= best <= 0.8  # the best trial well inside the new range
    assert {s.key for s in report.suggestions} >= {"search_space.optimizer.lr.high"}
    assert "move the range up" in report.phases[0].next_steps[0]


def test_a_steady_fall_toward_the_bottom_moves_the_range_down(tmp_path: Path) -> None:
    boundaries = report_of(_round(tmp_path, STEADY, descending=True)).phases[0].boundaries  # type: ignore[arg-type]
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert edge.edge == "low" and edge.spearman == 1.0
    assert edge.suggested_low == pytest.approx(0.001)


@pytest.mark.parametrize("ranks", [UNSURE, INSIDE])
def test_a_whole_range_trend_that_turns_back_near_the_edge_moves_nothing(
    tmp_path: Path, ranks: list[float]
) -> None:
    report = report_of(_round(tmp_path, ranks))  # type: ignore[arg-type]
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    unsure = only(boundaries.findings, "range_edge_unsure")
    assert (unsure.param, unsure.edge, unsure.level, unsure.trials) == (LR, "high", "info", 6)
    assert unsure.p_value > 0.025 and "cannot tell" in unsure.text and "top half" in unsure.text
    assert "more trials" in unsure.advice and "rounds.round1.trials 24" in unsure.advice
    assert report.suggestions == []


def test_no_trend_toward_the_best_trial_is_fine(tmp_path: Path) -> None:
    boundaries = report_of(_round(tmp_path, NO_TREND)).phases[0].boundaries  # type: ignore[arg-type]
    assert boundaries is not None
    fine = only(boundaries.findings, "range_ok")
    assert "Spearman" in fine.text and fine.level == "ok"
    assert boundaries.suggestions == []


def test_too_few_trials_in_the_edges_half_cannot_tell(tmp_path: Path) -> None:
    # 8 trials, 4 in the top half in perfect order: one-sided p 1/24 = 0.042, not enough to move
    rows = [
        (0.01 * 100**u, 0.1 * (8 - i)) for i, u in enumerate([0.04, 0.16, 0.29, 0.41, 0.53, 0.66, 0.78, 0.92])
    ]
    report = report_of(_lr_round(tmp_path, rows))
    assert report.phases[0].boundaries is not None
    unsure = only(report.phases[0].boundaries.findings, "range_edge_unsure")
    assert unsure.trials == 4 and unsure.p_value == pytest.approx(1 / 24)
    assert report.suggestions == []


def test_write_next_moves_the_range_toward_the_trend(tmp_path: Path) -> None:
    built = _round(tmp_path, STEADY)
    destination = tmp_path / "next.yaml"
    result = CliRunner().invoke(
        app,
        ["report", str(built.path), "--output-dir", str(built.output_dir), "--write-next", str(destination)],  # type: ignore[attr-defined]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"wrote .*next\.yaml", " ".join(result.output.split()))
    lr = yaml.safe_load(destination.read_text())["search_space"][LR]
    assert lr["high"] == 10.0 and lr["low"] > 0.01


@pytest.mark.parametrize(("best_at", "at_edge"), [(0.62, False), (0.70, True)])
def test_the_best_trial_must_lie_in_the_outer_third_on_the_trends_side(
    tmp_path: Path, best_at: float, at_edge: bool
) -> None:
    # the top half improves steadily toward the top, the best trial just inside or just past 2/3
    positions = [*POSITIONS[:7], best_at, 0.74, 0.80, 0.86, 0.95]
    ranks = [12, 11, 10, 9, 8, 7, 6, 1, 2, 3, 4, 5] if not at_edge else STEADY
    rows = [(0.01 * 100**u, 0.01 * rank) for u, rank in zip(positions, ranks, strict=True)]
    boundaries = report_of(_lr_round(tmp_path, rows)).phases[0].boundaries
    assert boundaries is not None
    assert (
        "range_edge" in kinds(boundaries.findings)
        if at_edge
        else "range_edge" not in kinds(boundaries.findings)
    )


def test_a_maximized_objective_rising_with_the_lr_moves_the_range_up(tmp_path: Path) -> None:
    built = study(tmp_path)
    document = yaml.safe_load(built.path.read_text())
    document["objective"] = {"metric": "val/accuracy", "direction": "maximize"}
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    phase = built.start("round-1")
    for slot, (u, rank) in enumerate(zip(POSITIONS, STEADY, strict=True)):
        add_trial(phase, slot, 1.0 - 0.01 * rank, {LR: 0.01 * 100**u}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert edge.edge == "high" and edge.spearman == 1.0


def test_a_four_decade_range_moves_one_decade_not_two(tmp_path: Path) -> None:
    # 1e-5 .. 1e-1: half its width would be two decades (an LR of 10 with an optimizer that trains at 1)
    rows = [(1e-5 * 1e4**u, 0.01 * rank) for u, rank in zip(POSITIONS, STEADY, strict=True)]
    space = {LR: {"type": "float", "low": 1e-5, "high": 0.1, "log": True}}
    boundaries = report_of(_lr_round(tmp_path, rows, search_space=space)).phases[0].boundaries
    assert boundaries is not None
    assert only(boundaries.findings, "range_edge").suggested_high == pytest.approx(1.0)


def test_adam_s_learning_rate_range_stops_below_one(tmp_path: Path) -> None:
    space = {LR: {"type": "float", "low": 1e-3, "high": 0.3, "log": True}}
    rows = [(1e-3 * 300**u, 0.01 * rank) for u, rank in zip(POSITIONS, STEADY, strict=True)]
    built = _lr_round(tmp_path, rows, search_space=space, optimizer={"name": "adam", "lr": 0.01})
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    assert 0.3 < only(boundaries.findings, "range_edge").suggested_high < 1.0
