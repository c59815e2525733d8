"""The outcome benchmark's four workloads, written as a user writes workloads (README "Writing a
workload"), each with a held-out test split that no tuning procedure sees.

Every workload takes ``split``: ``"tune"`` (the default: ``eval_data`` is the validation split,
what every procedure tunes on) or ``"test"`` (``eval_data`` is the test split: only the benchmark
asks for it, to score the model a procedure delivers). The train/validation/test split is fixed
by :data:`SPLIT_SEED`, not by the study seed, so the benchmark's five runs (study seeds 1..5)
differ only in model init, data order and the sampled points, never in the data.

- ``noisy_digits``: digits MLP, 30% of the *training* labels replaced by a wrong class
  (validation and test labels clean): the best step comes early, then the net memorises noise.
- ``imbalanced``: 3 classes at 90/7/3%, scored by MCC (accuracy flatters ignoring the rare ones).
- ``char_lm``: a small character transformer on the corpus shipped with tuner.
- ``longer_cnn``: a digits CNN with random-shift augmentation: longer training keeps helping.
"""

from __future__ import annotations

import importlib.resources
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext
from tuner.workloads.char_lm import CharTransformer
from tuner.workloads.digits_data import load_digits
from tuner.workloads.stratified_split import stratified_split

#: Fixes every workload's data (generation, split, label noise): never the study seed.
SPLIT_SEED = 20261125
#: Fractions of all examples held out as validation and as test.
VAL_FRACTION = 0.2
TEST_FRACTION = 0.2
#: Share of the training labels of ``noisy_digits`` replaced by a wrong class.
LABEL_NOISE = 0.3
SPLITS = ("tune", "test")


@dataclass(frozen=True)
class Splits:
    """Arrays of one dataset, cut once: the test part is never in train or validation."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def split_indices(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified ``(train, validation, test)`` example indices, seeded by :data:`SPLIT_SEED`."""
    first = stratified_split(y, TEST_FRACTION, SPLIT_SEED)
    rest, test = first.train, first.held_out
    second = stratified_split(y[rest], VAL_FRACTION / (1 - TEST_FRACTION), SPLIT_SEED + 1)
    return rest[second.train], rest[second.held_out], test


def three_way(x: np.ndarray, y: np.ndarray) -> Splits:
    """The examples cut by :func:`split_indices`."""
    train, val, test = split_indices(y)
    return Splits(x[train], y[train], x[val], y[val], x[test], y[test])


def _split_option(ctx: WorkloadContext) -> str:
    split = ctx.options.get("split", "tune")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def _datasets(parts: Splits, split: str, shape: tuple[int, ...]) -> tuple[TensorDataset, TensorDataset]:
    """``(train, eval)``: eval is validation when tuning, test when the benchmark scores."""

    def tensors(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        return TensorDataset(torch.from_numpy(x).reshape(-1, *shape), torch.from_numpy(y))

    x_eval, y_eval = (parts.x_val, parts.y_val) if split == "tune" else (parts.x_test, parts.y_test)
    return tensors(parts.x_train, parts.y_train), tensors(x_eval, y_eval)


def digits_splits(label_noise: float = 0.0) -> Splits:
    """Digits pixels in [0, 1]; ``label_noise`` of the training labels moved to another class."""
    pixels, labels = load_digits()
    x = (pixels / 16.0).astype(np.float32)
    y = labels.astype(np.int64)
    parts = three_way(x, y)
    if label_noise > 0:
        rng = np.random.default_rng(SPLIT_SEED)
        y_train = parts.y_train.copy()
        flipped = rng.choice(len(y_train), size=round(label_noise * len(y_train)), replace=False)
        # a shift of 1..9 classes: always a wrong class, uniformly among the 9 wrong ones
        y_train[flipped] = (y_train[flipped] + rng.integers(1, 10, size=len(flipped))) % 10
        parts = Splits(parts.x_train, y_train, parts.x_val, parts.y_val, parts.x_test, parts.y_test)
    return parts


def _mlp(width_in: int, hidden: int, layers: int, dropout: float, classes: int) -> nn.Module:
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += [nn.Linear(width_in, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width_in = hidden
    return nn.Sequential(*modules, nn.Linear(width_in, classes))


def noisy_digits(ctx: WorkloadContext) -> Workload:
    """Digits MLP (options ``hidden``, ``dropout``) on 30%-noisy training labels."""
    train, evaluation = _datasets(digits_splits(LABEL_NOISE), _split_option(ctx), (64,))
    hidden, dropout = int(ctx.options.get("hidden", 128)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(64, hidden, 2, dropout, 10),
        train_data=train,
        eval_data=evaluation,
        num_classes=10,
        metrics=("loss", "accuracy", "error_rate"),
    )


def imbalanced_splits() -> Splits:
    from sklearn.datasets import make_classification  # here: the digits workloads need no sklearn

    x, y = make_classification(
        n_samples=4000,
        n_features=20,
        n_informative=8,
        n_redundant=4,
        n_classes=3,
        n_clusters_per_class=2,
        weights=[0.9, 0.07, 0.03],
        class_sep=0.8,
        flip_y=0.01,
        random_state=SPLIT_SEED,
    )
    return three_way(x.astype(np.float32), y.astype(np.int64))


def imbalanced(ctx: WorkloadContext) -> Workload:
    """MLP (options ``hidden``, ``dropout``) on 3 classes at 90/7/3%, scored by MCC."""
    train, evaluation = _datasets(imbalanced_splits(), _split_option(ctx), (20,))
    hidden, dropout = int(ctx.options.get("hidden", 64)), float(ctx.options.get("dropout", 0.0))
    return Workload(
        model=_mlp(20, hidden, 2, dropout, 3),
        train_data=train,
        eval_data=evaluation,
        num_classes=3,
        metrics=("loss", "accuracy", "error_rate", "mcc"),
    )


def corpus_ids() -> tuple[torch.Tensor, int]:
    """The corpus tuner ships, as character ids, and the vocabulary size."""
    text = (importlib.resources.files("tuner.workloads") / "data" / "tiny_corpus.txt").read_text("utf-8")
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    return torch.tensor([stoi[ch] for ch in text], dtype=torch.long), len(vocab)


def text_parts(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous train / validation / test stretches of the text (no window crosses a border)."""
    n_val, n_test = math.floor(len(ids) * VAL_FRACTION), math.floor(len(ids) * TEST_FRACTION)
    n_train = len(ids) - n_val - n_test
    return ids[:n_train], ids[n_train : n_train + n_val], ids[n_train + n_val :]


def windows(ids: torch.Tensor, block: int, stride: int) -> TensorDataset:
    """``(inputs, next characters)`` windows of ``block`` characters every ``stride``."""
    starts = range(0, len(ids) - block, stride)
    inputs = torch.stack([ids[s : s + block] for s in starts])
    targets = torch.stack([ids[s + 1 : s + block + 1] for s in starts])
    return TensorDataset(inputs, targets)


def char_lm(ctx: WorkloadContext) -> Workload:
    """Character transformer (options ``block_size``, ``d_model``, ``n_layers``, ``dropout``)."""
    split = _split_option(ctx)
    ids, vocab = corpus_ids()
    train_ids, val_ids, test_ids = text_parts(ids)
    block = int(ctx.options.get("block_size", 32))
    d_model = int(ctx.options.get("d_model", 64))
    model = CharTransformer(
        vocab, block, d_model, 4, int(ctx.options.get("n_layers", 2)), float(ctx.options.get("dropout", 0.0))
    )
    return Workload(
        model=model,
        train_data=windows(train_ids, block, max(1, block // 2)),
        eval_data=windows(val_ids if split == "tune" else test_ids, block, block),
        num_classes=vocab,
        metrics=("loss", "perplexity"),
    )


def random_shift(inputs: torch.Tensor, generator: torch.Generator, pad: int = 1) -> torch.Tensor:
    """Shift each 8x8 image by up to ``pad`` pixels each way (zero fill): a new view every step."""
    padded = nn.functional.pad(inputs, (pad, pad, pad, pad))
    side = inputs.shape[-1]
    offsets = torch.randint(0, 2 * pad + 1, (len(inputs), 2), generator=generator)
    return torch.stack(
        [padded[i, :, dy : dy + side, dx : dx + side] for i, (dy, dx) in enumerate(offsets.tolist())]
    )


def longer_cnn(ctx: WorkloadContext) -> Workload:
    """Digits CNN (options ``channels``, ``dropout``) trained with random shifts."""
    train, evaluation = _datasets(digits_splits(), _split_option(ctx), (1, 8, 8))
    channels, dropout = int(ctx.options.get("channels", 16)), float(ctx.options.get("dropout", 0.0))
    model = nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(2 * channels * 16, 10),
    )
    return Workload(
        model=model,
        train_data=train,
        eval_data=evaluation,
        num_classes=10,
        metrics=("loss", "accuracy", "error_rate"),
        augment=random_shift,
    )
