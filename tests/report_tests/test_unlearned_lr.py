"""Nothing learned, but the training loss falls toward one edge of the LR range: the range moves.

Every trial at chance (0.88-0.94 error with 10 classes) ranks nothing, so the range verdict
stays silent; the final training loss each worker records can still say where learning begins.
Constructed rounds with known answers: a loss falling as the LR rises (range too low), as it
falls (too high), a flat one, one whose high end diverged, and too few trials.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_range_trend import POSITIONS
from tests.report_tests.test_verdicts import LR, kinds, only, report_of
from tuner.cli.app import app

CHANCE_ERRORS = [0.93, 0.91, 0.94, 0.90, 0.92, 0.89, 0.93, 0.91, 0.90, 0.94, 0.92, 0.91]


def _round(
    tmp_path: Path, losses: list[float | None], positions: list[float] = POSITIONS, **study_kwargs: object
) -> Built:
    """Round 1 over lr in [0.01, 1] (log) at chance; a loss None is a diverged trial."""
    built = study(tmp_path, **study_kwargs)  # type: ignore[arg-type]
    phase = built.start("round-1")
    for slot, (u, loss) in enumerate(zip(positions, losses, strict=False)):
        lr = 0.01 * 100**u
        if loss is None:
            add_trial(phase, slot, None, {LR: lr}, state="FAIL", failure_reason="diverged", best_step=10)
            continue
        error = CHANCE_ERRORS[slot]
        folder = run_folder(
            tmp_path / f"trial-{slot}",
            best_step=20,
            metrics={"val/error_rate": error},
            status={"num_classes": 10},
        )
        add_trial(phase, slot, error, {LR: lr}, best_step=20, run_dir=folder, final_train_loss=loss)
    return built


FALLING = [round(2.30 - 0.01 * i, 3) for i in range(len(POSITIONS))]  # as the LR rises


def test_a_loss_falling_as_the_lr_rises_says_the_range_is_too_low_and_moves_it_up(tmp_path: Path) -> None:
    report = report_of(_round(tmp_path, FALLING))
    phase = report.phases[0]
    assert phase.learning is not None and not phase.learning.learned
    assert phase.boundaries is not None
    assert kinds(phase.boundaries.findings) == ["not_judged_nothing_learned", "range_edge_nothing_learned"]
    move = only(phase.boundaries.findings, "range_edge_nothing_learned")
    assert (move.param, move.edge, move.level, move.trials) == (LR, "high", "warning", 12)
    assert move.spearman == pytest.approx(-1.0) and move.p_value <= 0.025
    assert "probably too low" in move.text and "falls as optimizer.lr rises" in move.text
    # half the two-decade width is one decade: 0.01 .. 1 -> ... .. 10, the lowest losses inside
    assert move.suggested_high == pytest.approx(10.0)
    assert 0.01 < move.suggested_low <= 0.01 * 100 ** POSITIONS[-3]
    assert {(s.path[-1], s.new) for s in report.suggestions} == {
        ("low", move.suggested_low),
        ("high", move.suggested_high),
    }
    assert move.advice in phase.next_steps


def test_a_loss_falling_as_the_lr_falls_says_the_range_is_too_high(tmp_path: Path) -> None:
    move = only(report_of(_round(tmp_path, FALLING[::-1])).phases[0].boundaries.findings,  # type: ignore[union-attr]
                "range_edge_nothing_learned")  # fmt: skip
    assert move.edge == "low" and "probably too high" in move.text
    assert move.suggested_low == pytest.approx(0.001) and move.suggested_high < 1.0


@pytest.mark.parametrize(
    "losses",
    [
        [2.30, 2.29, 2.31, 2.30, 2.28, 2.31, 2.29, 2.30, 2.31, 2.28, 2.30, 2.29],  # flat: no trend
        FALLING[:5],  # 5 trials: too few to tell
        [*FALLING[:11], None],  # the top of the range diverged: where training breaks, not begins
    ],
    ids=["flat", "too-few", "diverged-above"],
)
def test_no_move_without_a_clear_loss_trend_enough_trials_or_with_divergence_above(
    tmp_path: Path, losses: list[float | None]
) -> None:
    report = report_of(_round(tmp_path, losses))
    boundaries = report.phases[0].boundaries
    assert boundaries is not None
    assert kinds(boundaries.findings) == ["not_judged_nothing_learned"]
    assert report.suggestions == []


def test_write_next_writes_the_move(tmp_path: Path) -> None:
    built = _round(tmp_path, FALLING)
    target = tmp_path / "next.yaml"
    args = ["report", str(built.path), "--output-dir", str(built.output_dir), "--write-next", str(target)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = target.read_text()
    assert "high: 10.0" in written and "training loss falls as optimizer.lr rises" in written
