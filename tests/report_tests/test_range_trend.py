"""A range edge seen from the whole trend, not only from the outer 20% of the range.

Eight round-1 trials at quasi-random positions of a log LR range [0.01, 1]: only the best of them
lies in the outer 20% (0.78 < 0.8), so the position rule alone cannot fire. The exact p-values of
the rank orders used here (8 trials): steady 0.00005, ``CLEAR`` 0.028, ``LIKELY`` 0.13, ``UNSURE``
0.39, ``NO_TREND`` 0.67; ``INSIDE`` is a clear trend (p 0.037) whose best trial sits at 53% of
the range.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.report_tests.builders import add_trial, study
from tests.report_tests.test_verdicts import LR, _lr_round, kinds, only, report_of
from tuner.cli.app import app

POSITIONS = [0.04, 0.16, 0.29, 0.41, 0.53, 0.66, 0.78, 0.92]  # of the log range
STEADY = [8, 7, 6, 5, 4, 3, 2, 1]  # the error falls as the LR rises
CLEAR = [7, 8, 3, 6, 5, 2, 4, 1]
LIKELY = [5, 8, 3, 6, 7, 2, 4, 1]
UNSURE = [4, 8, 3, 6, 5, 2, 7, 1]
INSIDE = [8, 7, 6, 5, 1, 2, 3, 4]
NO_TREND = [4, 3, 6, 8, 5, 2, 7, 1]  # p 0.67: the best at the top, no trend toward it


def _round(tmp_path: Path, ranks: list[int], *, descending: bool = False) -> object:
    """Round 1 with the error ``0.1 * rank`` at each position (mirrored: the LR falls instead)."""
    positions = [1 - u for u in POSITIONS] if descending else POSITIONS
    rows = [(0.01 * 100**u, 0.1 * rank) for u, rank in zip(positions, ranks, strict=True)]
    return _lr_round(tmp_path, rows)


@pytest.mark.parametrize(("ranks", "certainty"), [(STEADY, "clear"), (CLEAR, "clear"), (LIKELY, "likely")])
def test_a_trend_toward_the_top_of_the_range_moves_it_up(
    tmp_path: Path, ranks: list[int], certainty: str
) -> None:
    report = report_of(_round(tmp_path, ranks))  # type: ignore[arg-type]
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert (edge.param, edge.edge, edge.level, edge.certainty) == (LR, "high", "warning", certainty)
    assert edge.spearman < 0 and edge.p_value <= 0.2 and edge.trials == 8
    assert f"{certainty}" in edge.text and "Spearman" in edge.text and "over 8 trials" in edge.text
    assert edge.suggested_high > 1.0
    assert {s.key for s in report.suggestions} >= {"search_space.optimizer.lr.high"}
    if certainty == "likely":
        assert "more trials" in edge.advice
    assert "move the range up" in report.phases[0].next_steps[0]


def test_a_trend_toward_the_bottom_moves_the_range_down(tmp_path: Path) -> None:
    boundaries = report_of(_round(tmp_path, STEADY, descending=True)).phases[0].boundaries  # type: ignore[arg-type]
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert (edge.edge, edge.certainty) == ("low", "clear") and edge.spearman > 0
    assert edge.suggested_low < 0.01


def test_a_weak_trend_toward_the_edge_cannot_tell_and_asks_for_more_trials(tmp_path: Path) -> None:
    report = report_of(_round(tmp_path, UNSURE))  # type: ignore[arg-type]
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    unsure = only(boundaries.findings, "range_edge_unsure")
    assert (unsure.param, unsure.edge, unsure.level) == (LR, "high", "info")
    assert unsure.p_value > 0.2 and "cannot tell" in unsure.text
    assert "more trials" in unsure.advice and "rounds.round1.trials" in unsure.advice
    assert "range_ok" not in kinds(boundaries.findings) and report.suggestions == []


@pytest.mark.parametrize("ranks", [INSIDE, NO_TREND])
def test_a_trend_away_from_the_best_trial_or_none_at_all_is_fine(tmp_path: Path, ranks: list[int]) -> None:
    boundaries = report_of(_round(tmp_path, ranks)).phases[0].boundaries  # type: ignore[arg-type]
    assert boundaries is not None
    fine = only(boundaries.findings, "range_ok")
    assert "Spearman" in fine.text and fine.level == "ok"
    assert boundaries.suggestions == []


def test_write_next_widens_the_range_toward_the_trend(tmp_path: Path) -> None:
    built = _round(tmp_path, STEADY)
    destination = tmp_path / "next.yaml"
    result = CliRunner().invoke(
        app,
        ["report", str(built.path), "--output-dir", str(built.output_dir), "--write-next", str(destination)],  # type: ignore[attr-defined]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"wrote .*next\.yaml", " ".join(result.output.split()))
    written = yaml.safe_load(destination.read_text())
    lr = written["search_space"][LR]
    assert lr["high"] > 1.0 and lr["low"] > 0.01


@pytest.mark.parametrize(("best_at", "at_edge"), [(0.65, False), (0.70, True)])
def test_the_best_trial_must_lie_in_the_outer_third_on_the_trends_side(
    tmp_path: Path, best_at: float, at_edge: bool
) -> None:
    # a clear trend toward the top (p 0.005), the best trial just inside or just past 2/3
    positions = [0.04, 0.16, 0.29, 0.41, 0.53, best_at, 0.78, 0.92]
    ranks = [8, 7, 6, 5, 4, 1, 2, 3]
    rows = [(0.01 * 100**u, 0.1 * rank) for u, rank in zip(positions, ranks, strict=True)]
    boundaries = report_of(_lr_round(tmp_path, rows)).phases[0].boundaries
    assert boundaries is not None
    assert kinds(boundaries.findings) == (["range_edge"] if at_edge else ["range_ok"])


def test_a_maximized_objective_rising_with_the_lr_moves_the_range_up(tmp_path: Path) -> None:
    built = study(tmp_path)
    document = yaml.safe_load(built.path.read_text())
    document["objective"] = {"metric": "val/accuracy", "direction": "maximize"}
    built.path.write_text(yaml.safe_dump(document, sort_keys=False))
    phase = built.start("round-1")
    for slot, (u, rank) in enumerate(zip(POSITIONS, STEADY, strict=True)):
        add_trial(phase, slot, 1.0 - 0.1 * rank, {LR: 0.01 * 100**u}, best_step=20)
    boundaries = report_of(built).phases[0].boundaries
    assert boundaries is not None
    edge = only(boundaries.findings, "range_edge")
    assert (edge.edge, edge.certainty) == ("high", "clear") and edge.spearman > 0
