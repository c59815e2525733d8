"""A later round's ``top_k`` must fit the points the round before it has, and a later round's
``trials`` is accepted when it says what its top_k, seeds and lr_multipliers already give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, single_error, write_study


def _validate(rounds: str) -> object:
    write_study(Path.cwd(), BASE_YAML + "rounds:\n" + rounds)
    return invoke("validate", "study.yaml")


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        pytest.param(
            "  round1: {trials: 4}\n  round2: {top_k: 5}\n",
            "study.yaml:19:19: rounds.round2.top_k: round 2 takes the best 5 points of round 1, which "
            "has only 4 trials; lower top_k to at most 4 or raise rounds.round1.trials",
            id="round2-over-round1",
        ),
        pytest.param(
            "  round2: {top_k: 21}\n",
            "rounds.round2.top_k: round 2 takes the best 21 points of round 1, which has only 20 trials",
            id="round2-over-the-default-20",
        ),
        pytest.param(
            "  round1: {trials: 8}\n  round2: {top_k: 3}\n  round3: {top_k: 4}\n",
            "study.yaml:20:19: rounds.round3.top_k: round 3 takes the best 4 points of round 2, which "
            "has only 3 points (its top_k); lower top_k to at most 3 or raise rounds.round2.top_k",
            id="round3-over-round2",
        ),
        pytest.param(
            "  round1: {trials: 8}\n  round2: {top_k: 2, lr_multipliers: [0.5, 1]}\n  round3: {top_k: 5}\n",
            "rounds.round3.top_k: round 3 takes the best 5 points of round 2, which has only 4 points "
            "(its top_k x its 2 lr_multipliers); lower top_k to at most 4",
            id="round3-over-round2-with-multipliers",
        ),
        pytest.param(
            "  round2: {top_k: 2, seeds: 2, trials: 3}\n",
            "rounds.round2.trials: round 2 trains round 1's best points, so its trial count is top_k x "
            "seeds x len(lr_multipliers); set those instead of trials (here 2 x 2 x 1 = 4, not 3)",
            id="round2-trials-inconsistent",
        ),
    ],
)
def test_a_later_round_that_cannot_be_filled_is_refused_at_its_line(rounds: str, expected: str) -> None:
    assert expected in single_error(_validate(rounds))


@pytest.mark.parametrize(
    "rounds",
    [
        "  round1: {trials: 4}\n  round2: {top_k: 4}\n",  # every point of round 1
        "  round2: {top_k: 20}\n",
        "  round1: {trials: 8}\n  round2: {top_k: 3}\n  round3: {top_k: 3}\n",
        "  round2: {top_k: 3, trials: 3}\n",  # trials equal to top_k
        "  round2: {top_k: 2, seeds: 2, lr_multipliers: [0.5, 1], trials: 8}\n",
        # round 2 trains its 1 point at 2 LRs: 2 points for round 3
        "  round1: {trials: 4}\n  round2: {top_k: 1, lr_multipliers: [1, 4]}\n  round3: {top_k: 2}\n",
    ],
)
def test_rounds_that_fit_are_accepted(rounds: str) -> None:
    result = _validate(rounds)
    assert result.exit_code == 0, result.output


def test_the_default_top_k_does_not_refuse_a_small_round_1() -> None:
    result = _validate("  round1: {trials: 2}\n")  # round 2's top_k is the default 3: never run
    assert result.exit_code == 0, result.output
