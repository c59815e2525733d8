"""What a study searches and how: the search-space parameters, sweep-lr's grid, and the rounds."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tuner.spec._base import Fraction, NonNegativeInt, PositiveFloat, PositiveInt, _Model

_ROLE_DOC = "`scientific`, `nuisance` or `fixed`: the report's axis plots use it."


class FloatParam(_Model):
    """A float searched in `[low, high]`."""

    type: Literal["float"]
    """`float`."""
    low: float
    """The range's low end (> 0 with `log`)."""
    high: float
    """The range's high end."""
    log: bool = False
    """Search on a log scale (learning rates, weight decays)."""
    role: Literal["scientific", "nuisance", "fixed"] = Field("nuisance", description=_ROLE_DOC)

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


class IntParam(_Model):
    """An integer searched in `[low, high]`."""

    type: Literal["int"]
    """`int`."""
    low: int
    """The range's low end (> 0 with `log`)."""
    high: int
    """The range's high end."""
    log: bool = False
    """Search on a log scale (widths, batch sizes)."""
    step: PositiveInt = 1
    """Only values `low + k x step`."""
    role: Literal["scientific", "nuisance", "fixed"] = Field("nuisance", description=_ROLE_DOC)

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class CategoricalParam(_Model):
    """One of a list of values."""

    type: Literal["categorical"]
    """`categorical`."""
    choices: list[Any] = Field(min_length=1)
    """The values to choose from."""
    role: Literal["scientific", "nuisance", "fixed"] = Field("nuisance", description=_ROLE_DOC)


def _check_range(low: float, high: float, log: bool) -> None:
    if low >= high:
        raise ValueError(f"expected low < high, got low={low}, high={high}")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, got low={low}")


SearchParam = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class SweepLrSpec(_Model):
    """``tuner sweep-lr``: a constant-LR grid; the fewest steps to fit is the first max_train_steps."""

    grid: list[PositiveFloat] | None = None
    """The LRs to try: at least 3, positive, distinct (default: 5 points, half-decades around
    `optimizer.lr`)."""
    max_steps: PositiveInt | None = None
    """The cap on each grid trial (default: `training.max_train_steps`)."""
    max_total_steps: PositiveInt | None = None
    """The cap on all grid trials together (a share of a budget): each trial's cap is lowered up
    front to fit it."""
    fit_metric: str = Field(default="train/accuracy", pattern=r"^(val|train)/[A-Za-z0-9_]+$")
    """What "fits the training set" is measured by."""
    fit_threshold: float = 1.0
    """Fitting means `fit_metric >= fit_threshold` (`<=` for a loss, error rate, perplexity, mse or
    mae). A regression workload fits on `train/r2` (say 0.95)."""
    seeds: PositiveInt = 1
    """Trials per LR (model-init and data-order seeds)."""
    overrides: dict[str, Any] = Field(default_factory=lambda: {"optimizer.weight_decay": 0.0})
    """Dotted keys, as in `--set`, applied to every grid trial: the regularisation to switch off
    (e.g. `workload.dropout: 0`; a built-in's dropout is switched off without it)."""

    @field_validator("grid")
    @classmethod
    def _grid(cls, grid: list[float] | None) -> list[float] | None:
        if grid is not None:
            if len(grid) < 3:
                raise ValueError(
                    f"the grid has {len(grid)} point(s); give at least 3, so that an edge of the grid "
                    "can be told from its middle"
                )
            if len(set(grid)) != len(grid):
                raise ValueError("the grid has a repeated learning rate")
        return grid


DEFAULT_ROUND1_TRIALS = 20
DEFAULT_ROUND1_FRACTION = 0.2  # round 1's trial length, of max_train_steps, unless steps says


class RoundSpec(_Model):
    """One tuning round. Round 1 searches (``trials`` points from ``sampler``); round N >= 2 trains
    the previous round's ``top_k`` points ``seeds`` times at each of ``lr_multipliers``."""

    trials: PositiveInt | None = None
    """Round 1: how many points to search (default 20). A later round trains `top_k x seeds x
    lr_multipliers` trials (a value here may only repeat that)."""
    steps: PositiveInt | None = None
    """Each trial's length in steps (or give `length_fraction`)."""
    length_fraction: Fraction | None = None
    """Each trial's length as a fraction of `max_train_steps` (round 1's default 0.2; a later
    round's default is the production length, a round between growing geometrically)."""
    sampler: Literal["quasi-random", "random", "tpe", "gp"] = "quasi-random"
    """Round 1's sampler: `quasi-random` (scrambled Halton), `random`, `tpe`, or `gp` (5
    quasi-random points, then Optuna's `GPSampler`)."""
    parallel: PositiveInt | None = None
    """At most this many trials running at once, over all workers (default: no limit beyond the workers)."""
    max_failed: PositiveInt | None = None
    """The failure budget: the round stops after this many failed trials (default: a third of the
    trials, at least 1)."""
    max_retries: NonNegativeInt = 1
    """Retries of a crashed, killed or timed-out trial (it resumes from its checkpoint)."""
    trial_timeout_s: PositiveFloat | None = None
    """Kill a trial that runs longer than this many seconds (default: no limit)."""
    stall_multiple: Annotated[float, Field(ge=1)] | None = 20.0
    """The progress watchdog: a trial without a new step for `max(stall_multiple x its median
    step time, stall_min_s)` is killed as `stalled`; `null` turns it off."""
    stall_min_s: PositiveFloat = 300.0
    """The progress watchdog's shortest wait, in seconds."""
    timeout_h: PositiveFloat | None = None
    """Stop starting trials after this many hours of wall time."""
    stop_after_no_improvement: PositiveInt | None = None
    """Stop starting trials after N completed trials without a new best."""
    pruner: Literal["none", "median", "successive-halving"] = "none"
    """Round 1 only: stop trials early from their eval curves (Optuna's `MedianPruner` from a
    third of the length, or `SuccessiveHalvingPruner` from a ninth, keeping a third at each
    rung); `tune` spends the steps a stopped trial freed on more points."""
    top_k: PositiveInt = 3
    """Round N >= 2: how many of the previous round's best points it trains."""
    seeds: PositiveInt = 1
    """Round N >= 2: how many model-init and data-order seeds each point trains with."""
    lr_multipliers: list[PositiveFloat] = Field(default_factory=lambda: [1.0], min_length=1)
    """Round N >= 2: each point also at these multiples of its LR."""
    proxy_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.0
    """Round 1 only: > 0 validates on this seeded fraction of the training split (a proxy split)
    and keeps the validation split for the rounds that follow."""

    @property
    def trial_budget(self) -> int:
        """Round 1's number of trials (``trials``, default 20)."""
        return self.trials if self.trials is not None else DEFAULT_ROUND1_TRIALS


ROUND_KEY = re.compile(r"^round([1-9][0-9]?)$")


class RoundsSpec(_Model):
    """``round1``, ``round2`` and optionally ``round3``... (each from the previous round's best)."""

    model_config = ConfigDict(
        extra="allow", strict=True, validate_default=True, use_attribute_docstrings=True
    )
    __pydantic_extra__: dict[str, RoundSpec] = Field(init=False)  # round3, round4... validated as rounds

    round1: RoundSpec = Field(default_factory=lambda: RoundSpec(trials=DEFAULT_ROUND1_TRIALS))
    """Round 1: many short trials over the search space (explore)."""
    round2: RoundSpec = Field(default_factory=RoundSpec)
    """Round 2: round 1's best points at full length (exploit); `round3`... continue from it."""

    @model_validator(mode="after")
    def _round1_short_by_default(self) -> RoundsSpec:
        """A ``round1`` that sets only its budget (``{trials: 4}``) keeps the default length: a
        user who says how many trials has not said how long they train. (A later round without a
        length trains at the production length, so its default is "none" and stays.)"""
        if self.round1.steps is None and self.round1.length_fraction is None:
            self.round1 = self.round1.model_copy(update={"length_fraction": DEFAULT_ROUND1_FRACTION})
        return self

    @model_validator(mode="after")
    def _round_names(self) -> RoundsSpec:
        numbers = []
        for key in self.model_extra or {}:
            match = ROUND_KEY.match(key)
            if match is None or int(match.group(1)) < 3:
                raise ValueError(f"unknown key {key!r}: rounds are named round1, round2, round3...")
            numbers.append(int(match.group(1)))
        expected = list(range(3, 3 + len(numbers)))
        if sorted(numbers) != expected:
            missing = sorted(set(range(3, max(numbers) + 1)) - set(numbers))
            raise ValueError(f"round{missing[0]} is missing: rounds are numbered without gaps")
        return self

    @model_validator(mode="after")
    def _pruner_in_round1_only(self) -> RoundsSpec:
        """A later round trains chosen points on several seeds: every run of them is a result."""
        for key, value in (self.model_extra or {}).items():
            if value.pruner != "none":
                raise ValueError(f"{key}.pruner: only round 1 stops trials early (round1.pruner)")
        if self.round2.pruner != "none":
            raise ValueError("round2.pruner: only round 1 stops trials early (round1.pruner)")
        return self

    def get(self, number: int) -> RoundSpec | None:
        """Round ``number``'s spec, or None if the study does not define it (round 1 and 2 always exist)."""
        if number == 1:
            return self.round1
        if number == 2:
            return self.round2
        return (self.model_extra or {}).get(f"round{number}")

    @property
    def numbers(self) -> list[int]:
        return [1, 2, *sorted(int(ROUND_KEY.match(k).group(1)) for k in self.model_extra or {})]  # type: ignore[union-attr]
