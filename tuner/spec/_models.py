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
STUDY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
STUDY_NAME_MAX = 64  # a folder name, and with its phase an Optuna study name: kept short and fixed


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
    # 0: the init and data-order seeds derived from the study seed; k > 0: the k-th other pair
    # (round 2's `seeds`). The validation split never depends on it: it comes from `seed` alone.
    seed_index: NonNegativeInt = 0
    # > 0: validate on this seeded fraction of the training split, train on the rest (round 1's
    # proxy split); the real validation set is then not looked at.
    proxy_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.0
    augment: bool = True  # the workload's augmentation (sweep-lr switches it off)
    # one trial (and `tuner train`) as N processes with DistributedDataParallel; batch_size stays
    # the global batch, split evenly across them
    processes_per_trial: PositiveInt = 1
    sync_batch_norm: bool = False  # SyncBatchNorm in the forward pass (only with processes_per_trial > 1)
    # one trial on N machines, processes_per_trial ranks on each, started by torchrun agents
    # (tuner.train.node_launchers): "local" is one machine without torchrun
    nodes: PositiveInt = 1
    launcher: Literal["local", "torchrun", "slurm", "command"] = "local"
    launch_command: str | None = None  # launcher "command": run once per node, holds {torchrun}
    rendezvous_host: str | None = None  # launcher "command": node 0's host (default: this machine)
    # DataLoader worker processes producing the step-indexed batches (0: on the training thread)
    data_workers: NonNegativeInt = 0
    prefetch_batches: PositiveInt = 2  # batches each data worker prepares ahead
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

    @model_validator(mode="after")
    def _batch_splits_across_processes(self) -> TrainingSpec:
        ranks = self.processes_per_trial * self.nodes
        if self.batch_size % ranks:
            across = f"processes_per_trial {self.processes_per_trial}" + (
                f" x nodes {self.nodes} = {ranks} ranks" if self.nodes > 1 else ""
            )
            raise ValueError(
                f"batch_size {self.batch_size} is the global batch and must split evenly across "
                f"{across} (each process trains on an equal share)"
            )
        return self

    @model_validator(mode="after")
    def _nodes_have_a_launcher(self) -> TrainingSpec:
        if self.nodes > 1 and self.launcher == "local":
            raise ValueError(
                f"nodes {self.nodes} needs a launcher that starts each node's ranks: "
                "torchrun, slurm or command"
            )
        if self.launcher == "command":
            if not self.launch_command or "{torchrun}" not in self.launch_command:
                raise ValueError(
                    "launcher command needs launch_command, run once per node, holding {torchrun} "
                    "(e.g. 'ssh node{node} {torchrun}')"
                )
            try:
                self.launch_command.format(
                    torchrun="", node=0, nodes=1, rdzv_endpoint="", rdzv_id="", attempt_dir=""
                )
            except (KeyError, IndexError, ValueError) as error:
                raise ValueError(
                    f"launch_command: unknown placeholder {error} (known: {{torchrun}}, {{node}}, {{nodes}}, "
                    "{rdzv_endpoint}, {rdzv_id}, {attempt_dir})"
                ) from None
        return self

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
    """``tuner sweep-lr``: a constant-LR grid; the fewest steps to fit is the first max_train_steps."""

    grid: list[PositiveFloat] | None = None  # default: half-decades around optimizer.lr
    max_steps: PositiveInt | None = None  # the cap on each grid trial
    # the cap on all grid trials together (a share of a budget): lowers each trial's cap up front
    max_total_steps: PositiveInt | None = None
    fit_metric: str = Field(default="train/accuracy", pattern=r"^(val|train)/[A-Za-z0-9_]+$")
    fit_threshold: float = 1.0
    seeds: PositiveInt = 1
    # what the sweep switches off, as dotted keys like --set (a workload's dropout too)
    overrides: dict[str, Any] = Field(default_factory=lambda: {"optimizer.weight_decay": 0.0})

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

    trials: PositiveInt | None = (
        None  # round 1's (default 20); a later round's is top_k x seeds x lr_multipliers (may repeat it)
    )
    steps: PositiveInt | None = None
    length_fraction: Fraction | None = None
    sampler: Literal["quasi-random", "random", "tpe", "gp"] = "quasi-random"
    parallel: PositiveInt | None = None
    max_failed: PositiveInt | None = None  # default: a third of `trials`
    max_retries: NonNegativeInt = 1  # retries of a crashed / killed / timed-out trial
    trial_timeout_s: PositiveFloat | None = None
    # the progress watchdog: a trial without a new step for max(stall_multiple x its median step
    # time, stall_min_s) is killed as ``stalled``; stall_multiple: null turns it off
    stall_multiple: Annotated[float, Field(ge=1)] | None = 20.0
    stall_min_s: PositiveFloat = 300.0
    timeout_h: PositiveFloat | None = None  # stop starting trials after this much wall time
    stop_after_no_improvement: PositiveInt | None = None  # ... or after N completed trials without a new best
    top_k: PositiveInt = 3
    seeds: PositiveInt = 1
    lr_multipliers: list[PositiveFloat] = Field(default_factory=lambda: [1.0], min_length=1)
    proxy_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.0  # round 1 only

    @property
    def trial_budget(self) -> int:
        """Round 1's number of trials (``trials``, default 20)."""
        return self.trials if self.trials is not None else DEFAULT_ROUND1_TRIALS


ROUND_KEY = re.compile(r"^round([1-9][0-9]?)$")


class RoundsSpec(_Model):
    """``round1``, ``round2`` and optionally ``round3``... (each from the previous round's best)."""

    model_config = ConfigDict(extra="allow", strict=True, validate_default=True)
    __pydantic_extra__: dict[str, RoundSpec] = Field(init=False)  # round3, round4... validated as rounds

    round1: RoundSpec = Field(default_factory=lambda: RoundSpec(trials=DEFAULT_ROUND1_TRIALS))
    round2: RoundSpec = Field(default_factory=RoundSpec)

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


class StudySpec(_Model):
    name: str = Field(pattern=STUDY_NAME_PATTERN, max_length=STUDY_NAME_MAX)
    description: str = ""
    seed: NonNegativeInt = 0  # the workload's data split (and the search's, unless search_seed)
    # the search: round 1's quasi-random points and every trial's model init and data order. None:
    # ``seed`` (runs of one study file repeat); another value is a fresh search on the same split
    search_seed: NonNegativeInt | None = None
    workload: WorkloadSpec
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    search_space: dict[str, SearchParam] = Field(default_factory=dict)
    sweep_lr: SweepLrSpec = Field(default_factory=SweepLrSpec)
    rounds: RoundsSpec = Field(default_factory=RoundsSpec)
    storage: str | None = None

    @property
    def points_seed(self) -> int:
        """The seed of the search (``search_seed``, else ``seed``): sampler points, init, data order."""
        return self.search_seed if self.search_seed is not None else self.seed

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
