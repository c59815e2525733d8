"""The built-in workloads and their options, importable without torch.

Each option model is strict: a typo in ``workload.options`` is an error at ``tuner validate``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


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


class CharLmOptions(_Options):
    text_file: str | None = None  # default: the small corpus shipped with tuner
    block_size: int = Field(default=64, gt=1)
    d_model: int = Field(default=64, gt=0)
    n_heads: int = Field(default=4, gt=0)
    n_layers: int = Field(default=2, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.1, gt=0, lt=1)


class ImbalancedOptions(_Options):
    n_examples: int = Field(default=4000, gt=10)
    n_features: int = Field(default=20, gt=0)
    class_weights: list[float] = Field(default_factory=lambda: [0.85, 0.1, 0.05])
    hidden_size: int = Field(default=64, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    val_fraction: float = Field(default=0.25, gt=0, lt=1)


@dataclass(frozen=True)
class BuiltinWorkload:
    entry_point: str
    options: type[_Options]
    summary: str


BUILTINS: dict[str, BuiltinWorkload] = {
    "digits-mlp": BuiltinWorkload(
        "tuner.workloads.digits:build_mlp", DigitsMlpOptions, "MLP on scikit-learn's 8x8 digits"
    ),
    "digits-cnn": BuiltinWorkload(
        "tuner.workloads.digits:build_cnn",
        DigitsCnnOptions,
        "small CNN with batch norm on scikit-learn's 8x8 digits",
    ),
    "char-lm": BuiltinWorkload(
        "tuner.workloads.char_lm:build",
        CharLmOptions,
        "tiny character-level transformer language model (perplexity)",
    ),
    "imbalanced": BuiltinWorkload(
        "tuner.workloads.imbalanced:build",
        ImbalancedOptions,
        "imbalanced synthetic classification (per-class correct counts)",
    ),
}
