"""The procedures' study fields: each bad value is one located line through `tuner validate`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec_tests._support import BASE_YAML, invoke, plain, single_error, write_study


def validate_error(text: str, *args: str) -> str:
    write_study(Path.cwd(), text)
    return single_error(invoke("validate", "study.yaml", *args))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            "sweep_lr:\n  grid: [0.001, 0.01]\n",
            "study.yaml:18:9: sweep_lr.grid: the grid has 2 point(s); give at least 3, so that an edge of "
            "the grid can be told from its middle",
            id="grid-too-short",
        ),
        pytest.param(
            "sweep_lr:\n  grid: [0.001, 0.0, 0.01]\n",
            "study.yaml:18:17: sweep_lr.grid[1]: expected a number > 0.0, got 0.0",
            id="grid-not-positive",
        ),
        pytest.param(
            "rounds:\n  round2: {trials: 5}\n",
            "study.yaml:18:12: rounds.round2.trials: round 2 trains round 1's best points, so its trial "
            "count is top_k x seeds x len(lr_multipliers); set those instead of trials",
            id="round2-trials",
        ),
        pytest.param(
            "rounds:\n  round2: {proxy_fraction: 0.1}\n",
            "study.yaml:18:12: rounds.round2.proxy_fraction: only round 1 validates on a proxy split; "
            "later rounds train on all training data and validate on the real validation set",
            id="proxy-after-round1",
        ),
        pytest.param(
            "rounds:\n  round4: {top_k: 1}\n",
            "rounds: round3 is missing: rounds are numbered without gaps",
            id="round-gap",
        ),
        pytest.param(
            "rounds:\n  roundtwo: {top_k: 1}\n",
            "rounds: unknown key 'roundtwo': rounds are named round1, round2, round3...",
            id="round-name",
        ),
    ],
)
def test_bad_procedure_fields(extra: str, expected: str) -> None:
    assert expected in validate_error(BASE_YAML + extra)


def test_max_train_steps_is_not_a_hyperparameter_to_search() -> None:
    line = validate_error(BASE_YAML + "  max_train_steps: {type: int, low: 100, high: 1000}\n")
    assert line.startswith("study.yaml:17:3: search_space.max_train_steps: max_train_steps is not a hyper")
    assert "a longer trial nearly always scores better" in line


def test_validate_describes_the_procedure_and_suggests_a_proxy_split() -> None:
    write_study(Path.cwd(), BASE_YAML + "rounds:\n  round1: {trials: 200, steps: 20}\n  round3: {top_k: 1}\n")
    result = invoke("validate", "study.yaml")
    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    assert "sweep-lr     5 LRs (0.0003 .. 0.03), up to 100 steps each, constant LR" in text
    # digits-mlp declares its dropout as regularisation: sweep-lr switches it off, and says so here
    assert "off: workload.dropout=0.0, optimizer.weight_decay=0.0, augmentation" in text
    assert "round 1: 200 trials of 20 steps (quasi-random), failure budget 66, max 1 retry" in text
    # round 2 grows geometrically towards the production length (100), which round 3 reaches: 45,
    # moved to the eval grid (eval_every 10)
    assert "round 2: top 3 of round 1 = 3 trials of 50 steps" in text
    assert "round 3: top 1 of round 2 = 1 trial of 100 steps" in text
    assert "consider rounds.round1.proxy_fraction: 0.1" in text
