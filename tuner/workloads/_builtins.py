"""The built-in workloads and their options, importable without torch.

Each option model is strict: a typo in ``workload.options`` is an error at ``tuner validate``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuner.workloads._interface import REGRESSION_METRICS


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class DigitsMlpOptions(_Options):
    hidden_sizes: list[int] = Field(default_factory=lambda: [128, 64])
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.2, gt=0, lt=1)


class DigitsCnnOptions(_Options):
    channels: list[int] = Field(default_factory=lambda: [16, 32])
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.2, gt=0, lt=1)
    # None: plain BatchNorm2d. A positive int: GhostBatchNorm with virtual batches of this many
    # examples, cut from each process's batch (batch_size / processes_per_trial).
    ghost_batch_size: int | None = Field(default=None, gt=0)


class CharLmOptions(_Options):
    text_file: str | None = None  # default: the small corpus shipped with tuner
    block_size: int = Field(default=64, gt=1)
    d_model: int = Field(default=64, gt=0)
    n_heads: int = Field(default=4, gt=0)
    n_layers: int = Field(default=2, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.1, gt=0, lt=1)

    @model_validator(mode="after")
    def _heads_divide_width(self) -> CharLmOptions:
        # Attention splits d_model across the heads: found here, not at the first trial.
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        return self


class ImbalancedOptions(_Options):
    n_examples: int = Field(default=4000, gt=10)
    n_features: int = Field(default=20, gt=0)
    class_weights: list[float] = Field(default_factory=lambda: [0.85, 0.1, 0.05])
    hidden_size: int = Field(default=64, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.25, gt=0, lt=1)

    @model_validator(mode="after")
    def _weights_make_classes(self) -> ImbalancedOptions:
        if len(self.class_weights) < 2:
            raise ValueError(f"class_weights needs at least 2 classes, got {self.class_weights}")
        if any(not math.isfinite(w) or w <= 0 for w in self.class_weights):
            raise ValueError(f"class_weights must all be positive, got {self.class_weights}")
        return self


class RegressionOptions(_Options):
    n_examples: int = Field(default=2000, gt=10)
    noise: float = Field(default=1.0, ge=0)
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.2, gt=0, lt=1)


#: What each built-in scores (here, not next to the models, so `validate` knows without torch).
DIGITS_METRICS = ("loss", "accuracy", "error_rate", "top5_accuracy", "mcc")
CHAR_LM_METRICS = ("loss", "perplexity", "accuracy")
IMBALANCED_METRICS = ("loss", "accuracy", "error_rate", "mcc", "per_class")


#: Every built-in's dropout is its only regularisation option, and 0 switches it off.
_DROPOUT_OFF: Mapping[str, Any] = {"dropout": 0.0}


@dataclass(frozen=True)
class BuiltinWorkload:
    entry_point: str
    options: type[_Options]
    summary: str
    metrics: tuple[str, ...]
    #: Options that regularise, each with the value that switches it off. ``tuner sweep-lr``
    #: applies these: the playbook's LR sweep runs without regularisation, and only the workload
    #: knows which of its options are regularisation.
    regularisation_off: Mapping[str, Any] = field(default_factory=dict)


def regularisation_off(workload_name: str) -> dict[str, Any]:
    """``{"workload.dropout": 0.0}``: a built-in's regularisation options as dotted keys (``--set``
    style) with their off values; empty for a user's entry point (its options are its own)."""
    builtin = BUILTINS.get(workload_name)
    if builtin is None:
        return {}
    return {f"workload.{option}": value for option, value in builtin.regularisation_off.items()}


BUILTINS: dict[str, BuiltinWorkload] = {
    "digits-mlp": BuiltinWorkload(
        "tuner.workloads.digits:build_mlp",
        DigitsMlpOptions,
        "MLP on scikit-learn's 8x8 digits",
        DIGITS_METRICS,
        _DROPOUT_OFF,
    ),
    "digits-cnn": BuiltinWorkload(
        "tuner.workloads.digits:build_cnn",
        DigitsCnnOptions,
        "small CNN with batch norm on scikit-learn's 8x8 digits",
        DIGITS_METRICS,
        _DROPOUT_OFF,
    ),
    "char-lm": BuiltinWorkload(
        "tuner.workloads.char_lm:build",
        CharLmOptions,
        "tiny character-level transformer language model (perplexity)",
        CHAR_LM_METRICS,
        _DROPOUT_OFF,
    ),
    "imbalanced": BuiltinWorkload(
        "tuner.workloads.imbalanced:build",
        ImbalancedOptions,
        "imbalanced synthetic classification (per-class correct counts)",
        IMBALANCED_METRICS,
        _DROPOUT_OFF,
    ),
    "regression": BuiltinWorkload(
        "tuner.workloads.regression:build",
        RegressionOptions,
        "MLP regression on Friedman's synthetic benchmark (mse, mae, r2)",
        REGRESSION_METRICS,
        _DROPOUT_OFF,
    ),
}
