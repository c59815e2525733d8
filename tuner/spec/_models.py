"""The study file as typed models.

Strict on purpose: unknown keys are errors (typos must not pass silently) and strings are
never coerced into numbers. Cross-field rules that need a file position (search-space keys,
entry points) live in ``_checks.py``; these models only know their own fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

# A study name becomes a folder name: no separators, no "..", nothing that escapes the output dir.
STUDY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


class WorkloadSpec(_Model):
    """A built-in workload name, or a user entry point ``pkg.mod:fn`` / ``path/to/file.py:fn``."""

    name: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)


class ObjectiveSpec(_Model):
    metric: str = Field(default="val/error_rate", pattern=r"^(val|train)/[A-Za-z0-9_]+$")
    direction: Literal["minimize", "maximize"] = "minimize"


class OptimizerSpec(_Model):
    """The optimizer and its fixed hyperparameters (``lr`` is the base LR the schedule scales)."""

    name: Literal["sgd", "momentum", "nesterov", "adam", "adamw"] = "adamw"
    lr: PositiveFloat = 1e-3
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    eps: PositiveFloat = 1e-8


class ScheduleSegment(_Model):
    """One piece of the LR schedule, as multipliers of ``optimizer.lr``.

    Length is ``steps`` or ``fraction`` (of ``max_train_steps``); one segment may give neither
    and takes whatever is left, which is how round 2 stretches a schedule.
    """

    shape: Literal["constant", "linear", "cosine"]
    steps: PositiveInt | None = None
    fraction: Fraction | None = None
    start: Annotated[float, Field(ge=0)] = 1.0
    end: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one_length(self) -> ScheduleSegment:
        if self.steps is not None and self.fraction is not None:
            raise ValueError("give either steps or fraction, not both")
        return self


class TrainingSpec(_Model):
    batch_size: PositiveInt = 64
    eval_batch_size: PositiveInt | None = None  # default: 4 x batch_size
    max_train_steps: PositiveInt | None = None  # may be left to `tuner sweep-lr`
    eval_every: PositiveInt = 100
    log_every: PositiveInt = 10
    keep_best_checkpoints: NonNegativeInt = 3
    fsync_checkpoints: bool = False  # checkpoints and run-folder files also survive power loss
    prediction_samples: NonNegativeInt = 16
    train_eval_examples: PositiveInt | None = None  # cap on the train-split eval; None = all
    grad_clip_norm: PositiveFloat | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    tensorboard: bool = True
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    schedule: list[ScheduleSegment] = Field(
        default_factory=lambda: [ScheduleSegment(shape="constant")], min_length=1
    )

    @field_validator("schedule")
    @classmethod
    def _at_most_one_open_segment(cls, segments: list[ScheduleSegment]) -> list[ScheduleSegment]:
        open_segments = [s for s in segments if s.steps is None and s.fraction is None]
        if len(open_segments) > 1:
            raise ValueError("at most one segment may leave out steps/fraction (it takes the rest)")
        return segments

    @property
    def resolved_eval_batch_size(self) -> int:
        return self.eval_batch_size or 4 * self.batch_size


class FloatParam(_Model):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    role: Literal["scientific", "nuisance", "fixed"] = "nuisance"

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        return self


class IntParam(_Model):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: PositiveInt = 1
    role: Literal["scientific", "nuisance", "fixed"] = "nuisance"

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        return self


class CategoricalParam(_Model):
    type: Literal["categorical"]
    choices: list[Any] = Field(min_length=1)
    role: Literal["scientific", "nuisance", "fixed"] = "nuisance"


def _check_range(low: float, high: float, log: bool) -> None:
    if low >= high:
        raise ValueError(f"expected low < high, got low={low}, high={high}")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, got low={low}")


# the password runs to the LAST "@": a password may hold "/", "?", "#" or an unencoded "@", and
# masking a little too much (an "@" later in the URL) is the safe way to be wrong
_URL_PASSWORD = re.compile(r"(?P<head>://[^/?#@:]*:).*@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)[^&#]*", re.IGNORECASE)


def redact_storage_url(url: str) -> str:
    """``postgresql://me:secret@db/x`` -> ``postgresql://me:***@db/x`` (also ``?password=``).

    Plain text rules rather than SQLAlchemy's URL parser: the spec layer stays light, and a URL
    SQLAlchemy cannot parse must still lose its password.
    """
    url = _URL_PASSWORD.sub(r"\g<head>***@", url)
    return _QUERY_PASSWORD.sub(r"\g<head>***", url)


SearchParam = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class SweepLrSpec(_Model):
    grid: list[PositiveFloat] | None = None  # default: half-decades around optimizer.lr
    max_steps: PositiveInt | None = None
    fit_metric: str = Field(default="train/accuracy", pattern=r"^(val|train)/[A-Za-z0-9_]+$")
    fit_threshold: float = 1.0


class RoundSpec(_Model):
    trials: PositiveInt = 20
    steps: PositiveInt | None = None
    length_fraction: Fraction | None = None
    sampler: Literal["quasi-random", "random", "tpe"] = "quasi-random"
    parallel: PositiveInt | None = None
    max_failed: PositiveInt | None = None  # default: a third of `trials`
    max_retries: NonNegativeInt = 1  # retries of a crashed / killed / timed-out trial
    trial_timeout_s: PositiveFloat | None = None
    top_k: PositiveInt = 3
    seeds: PositiveInt = 1


class RoundsSpec(_Model):
    round1: RoundSpec = Field(default_factory=lambda: RoundSpec(trials=20, length_fraction=0.2))
    round2: RoundSpec = Field(default_factory=lambda: RoundSpec(trials=3, sampler="random"))


class StudySpec(_Model):
    name: str = Field(pattern=STUDY_NAME_PATTERN)
    description: str = ""
    seed: NonNegativeInt = 0
    workload: WorkloadSpec
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    search_space: dict[str, SearchParam] = Field(default_factory=dict)
    sweep_lr: SweepLrSpec = Field(default_factory=SweepLrSpec)
    rounds: RoundsSpec = Field(default_factory=RoundsSpec)
    storage: str | None = None

    def model_dump_for_files(self) -> dict[str, Any]:
        """The study as saved in run folders (``config.yaml``) and hashed for resuming.

        The storage URL's password is masked: it must never reach a file, and a rotated password
        must not make a run look like a different configuration. A URL without a password is
        kept as is (so existing run folders keep their hash).
        """
        data = self.model_dump(mode="json")
        if self.storage is not None:
            data["storage"] = redact_storage_url(self.storage)
        return data

    @field_validator("search_space")
    @classmethod
    def _keys_are_dotted_names(cls, space: dict[str, Any]) -> dict[str, Any]:
        for key in space:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
                raise ValueError(f"search-space key {key!r} is not a dotted name like optimizer.lr")
        return space
