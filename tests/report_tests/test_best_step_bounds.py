"""The best-step rules on both sides of every bound (all bounds inclusive).

- early: best step <= 10% of training, in at least 3 of the 5 best trials and half of all;
- late: best step > 75%, as consistently;
- worsens: best step <= 50% and the last eval >= 25% worse as an error (and outside the best's
  95% Wilson band where the eval set's size is known), in at least 3 of the 5 best trials.
The case that asked for the last rule: best steps at 100, 100 and 150 of 950 (10.5% to 16%)
while the validation error rose from 0.053 to 0.145 after them; "looks right" was the verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report_tests.builders import Built, add_trial, run_folder, study
from tests.report_tests.test_verdicts import LR, kinds, only, report_of


def _curve(best: float, best_step: int, last: float, steps: int, eval_every: int) -> dict[int, float]:
    """Falls to ``best`` at ``best_step``, then rises in a straight line to ``last`` at the end."""
    curve = {}
    for step in range(eval_every, steps + 1, eval_every):
        if step <= best_step:
            curve[step] = best + 0.2 * (best_step - step) / steps
        else:
            curve[step] = best + (last - best) * (step - best_step) / (steps - best_step)
    return curve


def _round(
    tmp_path: Path,
    trials: list[tuple[float, int, float]],  # (best value, best step, last value), best trial first
    *,
    steps: int = 400,
    eval_every: int = 10,
    examples: int | None = None,
    metric: str = "val/error_rate",
    direction: str = "minimize",
) -> Built:
    built = study(tmp_path, max_train_steps=steps, eval_every=eval_every, round1={"steps": steps})
    if metric != "val/error_rate":
        text = built.path.read_text().replace("metric: val/error_rate", f"metric: {metric}")
        built.path.write_text(text.replace("direction: minimize", f"direction: {direction}"))
    phase = built.start("round-1")
    for slot, (best, best_step, last) in enumerate(trials):
        extra = {}
        if examples is not None:
            status = {"eval_examples": {"val": examples}}
            where = tmp_path / "folders" / str(slot)
            extra["run_dir"] = run_folder(where, best_step=best_step, metrics={metric: best}, status=status)
        curve = _curve(best, best_step, last, steps, eval_every)
        add_trial(phase, slot, best, {LR: 0.05 + 0.01 * slot}, best_step=best_step, curve=curve, **extra)
    return built


def _verdicts(built: Built) -> list[str]:
    best_step = report_of(built).phases[0].best_step
    assert best_step is not None
    return kinds(best_step.findings)


def test_the_reported_case_best_just_past_ten_percent_and_error_rising_after_is_flagged(
    tmp_path: Path,
) -> None:
    trials = [(0.053, 100, 0.145), (0.056, 100, 0.15), (0.06, 150, 0.14)]
    report = report_of(_round(tmp_path, trials, steps=950, eval_every=50))
    best_step = report.phases[0].best_step
    assert best_step is not None
    worsens = only(best_step.findings, "best_step_worsens")
    assert (worsens.level, worsens.worsening_top, worsens.top) == ("warning", 3, 3)
    assert worsens.first_position == pytest.approx(100 / 950) and worsens.last_position == pytest.approx(
        150 / 950
    )
    # what decides it, in words: the position, and how much worse the last eval is
    assert "validation gets worse after an early best step in 3 of the top 3" in worsens.text
    assert "best at 11% to 16% of training" in worsens.text and "0.053 at step 100 -> 0.145" in worsens.text
    # 2 x the latest best step among them (150), on the eval grid
    assert worsens.suggested_trial_steps == 300
    assert {s.key: s.new for s in report.suggestions} == {
        "training.max_train_steps": 300,
        "rounds.round1.steps": 300,
    }
    assert "best_step_ok" not in kinds(best_step.findings)


@pytest.mark.parametrize(
    ("best_step", "flagged"),
    [(200, True), (210, False)],  # 50% of 400 is inside the bound; one eval later is not
)
def test_worsens_needs_the_best_step_in_the_first_half(tmp_path: Path, best_step: int, flagged: bool) -> None:
    trials = [(0.1 + 0.01 * i, best_step, 0.3) for i in range(3)]
    assert ("best_step_worsens" in _verdicts(_round(tmp_path, trials))) is flagged


@pytest.mark.parametrize(
    ("last", "flagged"),
    [(0.125, True), (0.124, False)],  # 25% worse than 0.1 is inside the bound; 24% is not
)
def test_worsens_needs_the_last_eval_a_quarter_worse(tmp_path: Path, last: float, flagged: bool) -> None:
    trials = [(0.1, 100, last)] * 3
    assert ("best_step_worsens" in _verdicts(_round(tmp_path, trials))) is flagged


def test_worsens_needs_three_of_the_top_trials(tmp_path: Path) -> None:
    rising, flat = (0.1, 100, 0.3), (0.1, 100, 0.1)
    assert "best_step_worsens" in _verdicts(_round(tmp_path / "three", [rising, rising, rising, flat, flat]))
    two = _verdicts(_round(tmp_path / "two", [rising, flat, rising, flat, flat]))
    assert "best_step_worsens" not in two and "best_step_ok" in two


@pytest.mark.parametrize(
    ("examples", "flagged"),
    [(100, False), (10_000, True)],  # 10 -> 13 errors of 100 is noise; 1,000 -> 1,300 of 10,000 is not
)
def test_a_rise_within_the_noise_of_the_eval_set_is_no_rise(
    tmp_path: Path, examples: int, flagged: bool
) -> None:
    trials = [(0.1, 100, 0.13)] * 3
    verdicts = _verdicts(_round(tmp_path, trials, examples=examples))
    assert ("best_step_worsens" in verdicts) is flagged


def test_a_metric_to_maximise_is_measured_as_its_error(tmp_path: Path) -> None:
    # accuracy 0.95 -> 0.93: the error goes from 0.05 to 0.07, 40% worse
    trials = [(0.95, 100, 0.93)] * 3
    built = _round(tmp_path, trials, metric="val/accuracy", direction="maximize")
    assert "best_step_worsens" in _verdicts(built)


@pytest.mark.parametrize(
    ("best_steps", "verdict"),
    [
        ([40, 40, 40, 40], "best_step_early"),  # 10% of 400: inside the early bound
        ([50, 50, 50, 50], "best_step_ok"),  # one eval later, with a flat curve after it: fine
        ([300, 300, 300, 300], "best_step_ok"),  # 75%: not in the last 25%
        ([310, 310, 310, 310], "best_step_late"),  # one eval later: late
    ],
)
def test_the_position_bounds_are_inclusive(tmp_path: Path, best_steps: list[int], verdict: str) -> None:
    trials = [(0.1 + 0.01 * slot, step, 0.1 + 0.01 * slot) for slot, step in enumerate(best_steps)]
    assert verdict in _verdicts(_round(tmp_path, trials))
