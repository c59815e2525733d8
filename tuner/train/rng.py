"""Saving and restoring every RNG a training run draws from, in ``weights_only``-safe types."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from tuner.spec import StudySpec


def derive_seed(base: int, *labels: int | str) -> int:
    """A seed for one purpose (``"init"``, ``"data"``, a rank...), independent of the others.

    A cryptographic hash of the whole tuple, not a sum over characters: any two different label
    lists give unrelated seeds (``"abcdef"`` and ``"fbcdea"`` too), and ``1`` differs from ``"1"``.
    """
    text = json.dumps([base, *labels], separators=(",", ":"))
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class TrialSeeds:
    """The two seeds one run of a study draws from: model init, and data order + augmentation."""

    init: int
    data: int


def trial_seeds(spec: StudySpec) -> TrialSeeds:
    """The run's seeds for ``training.seed_index`` k: k = 0 the study's own pair, k > 0 the k-th other.

    Only these two move with k (round 2 reruns a configuration on other seeds); the validation
    split, the train-eval sample and the prediction sample come from ``spec.seed`` alone, so
    every seed (and every ``search_seed``) is scored on exactly the same examples.
    """
    k = spec.training.seed_index
    extra = (k,) if k else ()  # k = 0 keeps the seeds every run had before seed_index existed
    base = spec.points_seed  # ``search_seed``, else ``seed``: a fresh search keeps the data split
    return TrialSeeds(init=derive_seed(base, "init", *extra), data=derive_seed(base, "data", *extra))


def seed_torch(seed: int) -> None:
    """``torch.manual_seed`` where an accelerator exists; else only the CPU generator.

    Without a GPU, ``torch.manual_seed`` still queues a lazy seed call for CUDA and XPU, each
    capturing a formatted stack (a few milliseconds in a fresh trial process): the CPU
    generator is all there is to seed.
    """
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    name, keys, position, has_gauss, cached = np.random.get_state()
    python_version, python_internal, python_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        # One tensor, not a tuple of 625 ints the pickler would visit one by one.
        "python": (python_version, torch.tensor(python_internal, dtype=torch.int64), python_gauss),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    saved = state["numpy"]
    np.random.set_state(
        (
            saved["name"],
            saved["keys"].numpy().astype(np.uint32),
            saved["pos"],
            saved["has_gauss"],
            saved["cached"],
        )
    )
    version, internal, gauss = state["python"]
    internal = tuple(internal.tolist()) if isinstance(internal, torch.Tensor) else tuple(internal)
    random.setstate((version, internal, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
