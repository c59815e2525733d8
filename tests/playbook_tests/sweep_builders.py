"""Constructed sweep-lr trials, and the analysis over them, for tests whose answers are known by hand.

A sweep's verdicts depend only on each grid LR's outcome, fit step and values: built here as
``SweepTrial`` rows (and as the Optuna trials they are read from, ``frozen``), the analysis runs
in milliseconds with no training, so every rule can be pinned at its boundary.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tuner.playbook.sweep_lr import SweepOutcome, SweepResult, SweepTrial, analyze_sweep
from tuner.playbook.verdicts import Verdict

GRID = [0.0001, 0.000316, 0.001, 0.00316, 0.01]
FIT, NOT_FIT, DIVERGED, FAILED, RUNNING = (
    SweepOutcome.FIT,
    SweepOutcome.NOT_FIT,
    SweepOutcome.DIVERGED,
    SweepOutcome.FAILED,
    SweepOutcome.RUNNING,
)


def trial(
    lr: float, outcome: SweepOutcome, fit_step: int | None = None, seed: int = 0, **kw: Any
) -> SweepTrial:
    """One trial of the sweep; ``value``, ``loss``, ``number``, ``reason`` and ``best_step`` may be
    given (a fit trial's value is 1.0, any other's 0.9)."""
    value = kw.pop("value", 1.0 if outcome is FIT else 0.9)
    return SweepTrial(
        lr=lr,
        seed_index=seed,
        outcome=outcome,
        fit_step=fit_step,
        steps_trained=fit_step or 1000,
        final_train_loss=kw.pop("loss", 0.1),
        best_fit_value=value,
        number=kw.pop("number", None),
        failure_reason=kw.pop("reason", None),
        best_step=kw.pop("best_step", None),
    )


def analyze(trials: list[SweepTrial], grid: list[float] = GRID, **kw: Any) -> SweepResult:
    """``analyze_sweep`` of 1000 steps, evaluated every 100, fit at train/accuracy 1 (``kw`` overrides)."""
    options = dict(max_steps=1000, eval_every=100, fit_metric="train/accuracy", fit_threshold=1.0)
    options.update(kw)
    return analyze_sweep(trials, grid=grid, **options)


def only(result: SweepResult, kind: type[Any]) -> Any:
    """The one verdict of type ``kind`` (fails unless there is exactly one)."""
    found = [v for v in result.verdicts if isinstance(v, kind)]
    assert len(found) == 1, result.verdicts
    return found[0]


def kinds(result: SweepResult) -> list[type[Verdict]]:
    """The types of the result's verdicts, in order."""
    return [type(v) for v in result.verdicts]


def frozen(state: str, number: int = 0, lr: float | None = 0.001, **attrs: Any) -> SimpleNamespace:
    """What ``sweep_trial_from_optuna`` reads of an Optuna trial: state, params, user attributes."""
    return SimpleNamespace(
        number=number,
        state=SimpleNamespace(name=state),
        params={} if lr is None else {"optimizer.lr": lr},
        user_attrs=attrs,
    )
