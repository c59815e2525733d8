"""The outcome benchmark's data: generated, so that a test split of 100,000 examples costs nothing.

A test split that small (the old digits workloads held out about 360 examples) moves a test
error by about +-0.01 from the split alone, more than most changes to a tuning procedure move
it. Every dataset here is drawn from a known generator: training and validation at the sizes a
user has (4,000 and 1,000 examples), and a test split of :data:`TEST_SIZE` examples, which
pins a test error of 0.1 to about +-0.001 (one standard error) and, since every contender is
scored on the same examples, cancels out of their paired differences almost entirely.

- :func:`teacher_splits`: inputs from a Gaussian, labels from a fixed random teacher network;
  a quarter of the training *and validation* labels replaced by a wrong class (a user's own
  validation labels are as noisy as their training ones), the test labels clean (the test
  measures agreement with the teacher, the quantity that matters).
- :func:`imbalanced_splits`: scikit-learn's ``make_classification``, 3 classes at 90/7/3%.
- :func:`mnist1d_splits`: the MNIST-1D generator (Greydanus, 2020; the ``mnist1d`` package's
  ``make_dataset``, run offline), 10 classes of 40-sample signals, where a convolutional model
  beats an MLP by a wide margin. Generating 105,000 signals takes about 15 s, so the arrays are
  cached in :func:`data_dir` (written once, atomically; every trial then loads them), as are
  the imbalanced ones.

Every generator is seeded by :data:`DATA_SEED` alone: the benchmark's runs (study seeds 1..N)
differ in model init, data order and the points sampled, never in the data.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Fixes every dataset (generation, split, label noise); never the study seed.
DATA_SEED = 20261204
TRAIN_SIZE = 4_000
VAL_SIZE = 1_000
TEST_SIZE = 100_000
#: Share of the teacher task's training and validation labels moved to a wrong class.
LABEL_NOISE = 0.25
TEACHER_INPUTS = 24
TEACHER_CLASSES = 6
#: Where generated arrays are cached: ``$TUNER_BENCH_DATA``, else ``bench-results/data``.
DATA_ENV = "TUNER_BENCH_DATA"


@dataclass(frozen=True)
class Splits:
    """One dataset's arrays, cut once: no test example is in training or validation."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def _cut(x: np.ndarray, y: np.ndarray) -> Splits:
    """The first rows train, the next validation, the rest test (the generators shuffle)."""
    a, b = TRAIN_SIZE, TRAIN_SIZE + VAL_SIZE
    return Splits(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:])


def _teacher_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    sizes = (TEACHER_INPUTS, 48, 48, TEACHER_CLASSES)
    return [rng.normal(0.0, 1.0 / np.sqrt(a), (a, b)) for a, b in itertools.pairwise(sizes)]


def teacher_labels(x: np.ndarray) -> np.ndarray:
    """The teacher's class for each row of ``x``: a fixed tanh network, its argmax."""
    first, second, last = _teacher_weights()
    hidden = np.tanh(np.tanh(x @ first) @ second)
    return (hidden @ last).argmax(axis=1).astype(np.int64)


def _wrong_class(y: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """``share`` of ``y`` moved to another class, uniformly among the wrong ones."""
    y = y.copy()
    flipped = rng.choice(len(y), size=round(share * len(y)), replace=False)
    y[flipped] = (y[flipped] + rng.integers(1, TEACHER_CLASSES, size=len(flipped))) % TEACHER_CLASSES
    return y


def teacher_splits(with_test: bool = True) -> Splits:
    """The teacher task; ``with_test=False`` leaves the test arrays empty (a trial never needs
    them, and drawing 100,000 rows through the teacher costs a tenth of a second each time)."""
    rng = np.random.default_rng(DATA_SEED + 1)
    seen = rng.normal(size=(TRAIN_SIZE + VAL_SIZE, TEACHER_INPUTS)).astype(np.float32)
    noisy = _wrong_class(teacher_labels(seen), LABEL_NOISE, np.random.default_rng(DATA_SEED + 2))
    x_test = np.random.default_rng(DATA_SEED + 3).normal(size=(TEST_SIZE if with_test else 0, TEACHER_INPUTS))
    x_test = x_test.astype(np.float32)
    y_test = teacher_labels(x_test) if with_test else np.zeros(0, dtype=np.int64)
    return Splits(
        seen[:TRAIN_SIZE], noisy[:TRAIN_SIZE], seen[TRAIN_SIZE:], noisy[TRAIN_SIZE:], x_test, y_test
    )


def imbalanced_splits() -> Splits:
    """3 classes at 90/7/3% (``make_classification``, 1% of labels flipped at random), cached in
    :func:`data_dir` (importing scikit-learn costs a trial about a CPU second)."""
    return _cut(*_cached("imbalanced", _generate_imbalanced))


def _generate_imbalanced() -> dict[str, np.ndarray]:
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=TRAIN_SIZE + VAL_SIZE + TEST_SIZE,
        n_features=20,
        n_informative=8,
        n_redundant=4,
        n_classes=3,
        n_clusters_per_class=2,
        weights=[0.9, 0.07, 0.03],
        class_sep=0.8,
        flip_y=0.01,
        random_state=DATA_SEED,
    )
    return {"x": x.astype(np.float32), "y": y.astype(np.int64)}


def data_dir() -> Path:
    return Path(os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[1] / "bench-results" / "data")


def mnist1d_splits() -> Splits:
    """MNIST-1D signals (40 samples each, 10 classes), cached in :func:`data_dir`."""
    return _cut(*_cached("mnist1d", _generate_mnist1d))


def _cached(name: str, generate: Callable[[], dict[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of a generator, from its file in :func:`data_dir` (generated the first time)."""
    path = data_dir() / f"{name}-{DATA_SEED}-{TRAIN_SIZE}-{VAL_SIZE}-{TEST_SIZE}.npz"
    if not path.exists():
        _write_npz(path, generate())
    with np.load(path) as arrays:
        return arrays["x"], arrays["y"]


def _generate_mnist1d() -> dict[str, np.ndarray]:
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = (TRAIN_SIZE + VAL_SIZE + TEST_SIZE) // 10 * 10  # per class, then shuffled
    args.train_split = 1.0  # the cut is ours (_cut)
    args.seed = DATA_SEED
    state = np.random.get_state()  # make_dataset seeds numpy's global generator
    try:
        made = make_dataset(args)
    finally:
        np.random.set_state(state)
    return {"x": made["x"].astype(np.float32), "y": made["y"].astype(np.int64)}


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write once, atomically: two processes generating at once each rename a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(partial, path)
