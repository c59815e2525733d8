"""The study file as typed models: the study itself here, its training fields in
``_training_models.py``, its search (space, sweep-lr, rounds) in ``_search_models.py``.

Cross-field rules that need a file position (search-space keys,
entry points) live in ``_checks.py``; these models only know their own fields.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tuner.spec._base import Fraction, NonNegativeInt, PositiveFloat, PositiveInt, _Model
from tuner.spec._metrics import known_direction
from tuner.spec._search_models import (
    DEFAULT_ROUND1_FRACTION,
    DEFAULT_ROUND1_TRIALS,
    ROUND_KEY,
    CategoricalParam,
    FloatParam,
    IntParam,
    RoundSpec,
    RoundsSpec,
    SearchParam,
    SweepLrSpec,
)
from tuner.spec._training_models import OptimizerSpec, ScheduleSegment, TrainingSpec

# re-exported: the rest of tuner imports every study-file model from here
__all__ = [
    "DEFAULT_ROUND1_FRACTION",
    "DEFAULT_ROUND1_TRIALS",
    "ROUND_KEY",
    "STUDY_NAME_MAX",
    "STUDY_NAME_PATTERN",
    "CategoricalParam",
    "FloatParam",
    "Fraction",
    "IntParam",
    "NonNegativeInt",
    "ObjectiveSpec",
    "OptimizerSpec",
    "PositiveFloat",
    "PositiveInt",
    "RoundSpec",
    "RoundsSpec",
    "ScheduleSegment",
    "SearchParam",
    "StudySpec",
    "SweepLrSpec",
    "TrainingSpec",
    "WorkloadSpec",
    "redact_storage_url",
]


# A study name becomes a folder name: no separators, no "..", nothing that escapes the output dir.
STUDY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
STUDY_NAME_MAX = 64  # a folder name, and with its phase an Optuna study name: kept short and fixed


class WorkloadSpec(_Model):
    """A built-in workload name, or a user entry point ``pkg.mod:fn`` / ``path/to/file.py:fn``."""

    name: str = Field(min_length=1)
    """A built-in (`digits-mlp`, `digits-cnn`, `char-lm`, `imbalanced`) or an entry point
    `package.module:function` / `path/to/file.py:function` (relative to the study file)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Passed to the workload's function as keyword arguments; the built-ins check theirs."""


class ObjectiveSpec(_Model):
    """What the search optimises: one metric of one split, and its direction."""

    metric: str = Field(default="val/error_rate", pattern=r"^(val|train)/[A-Za-z0-9_]+$")
    """`<split>/<metric>`, split `val` or `train` (e.g. `val/mcc`); it must be a metric the
    workload computes."""
    direction: Literal["minimize", "maximize"] = "minimize"
    """`minimize` (an error rate, a loss, perplexity, mse, mae) or `maximize` (an accuracy, MCC,
    r2, a per-class score). Left out, the metric's own: `maximize` for `val/r2`, say."""

    @model_validator(mode="before")
    @classmethod
    def _metric_direction(cls, data: Any) -> Any:
        """No direction given: the metric's, so that ``metric: val/r2`` alone maximises. A
        workload's own metric has none tuner knows: the file must say it (``tuner validate`` asks,
        ``tuner.workloads.check_study``), and ``direction`` then stays out of ``model_fields_set``."""
        if isinstance(data, dict) and "direction" not in data and isinstance(data.get("metric"), str):
            direction = known_direction(data["metric"])
            if direction is not None:
                return {**data, "direction": direction}
        return data


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


class StudySpec(_Model):
    """A study file: what to train, what to search, and how."""

    name: str = Field(pattern=STUDY_NAME_PATTERN, max_length=STUDY_NAME_MAX)
    """Letters, digits, `.`, `_`, `-`, at most 64 characters: it becomes a folder name, so it
    cannot escape the output folder."""
    description: str = ""
    """Notes, shown in summaries and the tracking table."""
    seed: NonNegativeInt = 0
    """The data split: the workload's validation (and test) split, the train-eval and prediction
    samples; also the search's seed unless `search_seed` is set."""
    search_seed: NonNegativeInt | None = None
    """The search: round 1's points and every trial's model-init and data-order seeds (default:
    `seed`, so a study file repeats its search exactly); another value is a fresh search scored
    on the same examples."""
    workload: WorkloadSpec
    """What to train: the model and its data."""
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    """The metric the search optimises."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """The fixed training hyperparameters."""
    search_space: dict[str, SearchParam] = Field(default_factory=dict)
    """Dotted key (`optimizer.lr`, `batch_size`, `workload.<option>`) -> a `float`, `int` or
    `categorical` parameter."""
    sweep_lr: SweepLrSpec = Field(default_factory=SweepLrSpec)
    """`tuner sweep-lr`'s grid, caps and what it switches off."""
    rounds: RoundsSpec = Field(default_factory=RoundsSpec)
    """The tuning rounds and their budgets."""
    storage: str | None = None
    """Where the study's records live (default: SQLite under the output folder): a
    `postgresql://user@host/db` URL, `grpc://HOST:PORT` (a storage proxy) or `journal:///PATH`;
    `$TUNER_STORAGE` overrides it. Keep the password out of it (`PGPASSWORD`, `~/.pgpass`)."""

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
