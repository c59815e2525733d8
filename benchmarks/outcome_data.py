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
- :func:`regression_splits`: float targets, a fixed nonlinear function of 10 of 20 Gaussian
  inputs (products, a square, a sine, a gate; the other 10 are distractors), with Gaussian noise
  on the training and validation targets (a tenth of the function's variance) and the test
  targets noise-free (the test measures the error against the function; the noise would only add
  its variance to every contender's test mse).
- :func:`small_splits`: a small-data classification, 3 classes of 13 features (each class two
  overlapping Gaussian clusters), :data:`SMALL_TRAIN_SIZE` training and :data:`SMALL_VAL_SIZE`
  validation examples, as small as a user's tabular dataset can be (scikit-learn's wine has
  178): validation accuracy moves in steps of 0.01, so trials tie, and the faster learning rates
  fit the training set within a few evals.

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
REGRESSION_INPUTS = 20
#: The regression's noise variance, as a share of its function's variance on the training inputs.
REGRESSION_NOISE = 0.1
SMALL_TRAIN_SIZE = 350
SMALL_VAL_SIZE = 100
SMALL_INPUTS = 13
SMALL_CLASSES = 3
#: The spread of the small-data task's cluster means (each cluster's own spread: 0.5 to 1.5 along
#: each axis): classes that overlap, so that validation errors are a few examples, not none.
SMALL_SEPARATION = 0.8
#: The small-data task's class shares (wine's are 33/40/27%).
SMALL_PRIOR = (0.33, 0.40, 0.27)
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


def regression_function(x: np.ndarray) -> np.ndarray:
    """The regression's noise-free target for each row of ``x`` (float64; inputs 10-19 unused)."""
    x = x.astype(np.float64)
    return (
        2.0 * np.sin(x[:, 0] * x[:, 1])
        + 0.5 * (x[:, 2] + x[:, 3]) ** 2
        + 2.0 * np.tanh(x[:, 4]) * x[:, 5]
        + x[:, 6] * np.abs(x[:, 7])
        + np.cos(2.0 * x[:, 8])
        + 0.5 * x[:, 9]
    )


def regression_splits(with_test: bool = True) -> Splits:
    """The regression: every target standardised by the training targets' mean and standard
    deviation (predicting that mean scores an mse of about 1); ``with_test=False`` leaves the test
    arrays empty, as :func:`teacher_splits` does."""
    rows = TRAIN_SIZE + VAL_SIZE
    x = np.random.default_rng(DATA_SEED + 10).normal(size=(rows, REGRESSION_INPUTS)).astype(np.float32)
    clean = regression_function(x)
    noise_sd = np.sqrt(REGRESSION_NOISE * clean[:TRAIN_SIZE].var())
    y = clean + np.random.default_rng(DATA_SEED + 11).normal(0.0, noise_sd, size=rows)
    mean, sd = y[:TRAIN_SIZE].mean(), y[:TRAIN_SIZE].std()
    test_rows = TEST_SIZE if with_test else 0
    x_test = (
        np.random.default_rng(DATA_SEED + 12).normal(size=(test_rows, REGRESSION_INPUTS)).astype(np.float32)
    )
    y = ((y - mean) / sd).astype(np.float32)
    y_test = ((regression_function(x_test) - mean) / sd).astype(np.float32)
    a = TRAIN_SIZE
    return Splits(x[:a], y[:a], x[a:], y[a:], x_test, y_test)


def _small_clusters() -> tuple[np.ndarray, np.ndarray]:
    """The small-data task's clusters: means ``(classes, 2, inputs)`` and linear maps ``(classes,
    2, inputs, inputs)`` (a random rotation, each axis scaled by 0.5 to 1.5)."""
    rng = np.random.default_rng(DATA_SEED + 20)
    means = rng.normal(0.0, SMALL_SEPARATION, size=(SMALL_CLASSES, 2, SMALL_INPUTS))
    maps = np.empty((SMALL_CLASSES, 2, SMALL_INPUTS, SMALL_INPUTS))
    for c, k in itertools.product(range(SMALL_CLASSES), range(2)):
        rotation = np.linalg.qr(rng.normal(size=(SMALL_INPUTS, SMALL_INPUTS)))[0]
        maps[c, k] = rotation * rng.uniform(0.5, 1.5, size=SMALL_INPUTS)
    return means, maps


def _small_draw(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    means, maps = _small_clusters()
    y = rng.choice(SMALL_CLASSES, size=n, p=SMALL_PRIOR)
    cluster = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, SMALL_INPUTS))
    for c, k in itertools.product(range(SMALL_CLASSES), range(2)):
        rows = (y == c) & (cluster == k)
        x[rows] = means[c, k] + x[rows] @ maps[c, k].T
    return x.astype(np.float32), y.astype(np.int64)


def small_splits(with_test: bool = True) -> Splits:
    """The small-data task: :data:`SMALL_TRAIN_SIZE` training and :data:`SMALL_VAL_SIZE`
    validation examples, and :data:`TEST_SIZE` test ones drawn apart (``with_test=False``: none)."""
    x, y = _small_draw(SMALL_TRAIN_SIZE + SMALL_VAL_SIZE, np.random.default_rng(DATA_SEED + 21))
    x_test, y_test = _small_draw(TEST_SIZE if with_test else 0, np.random.default_rng(DATA_SEED + 22))
    a = SMALL_TRAIN_SIZE
    return Splits(x[:a], y[:a], x[a:], y[a:], x_test, y_test)


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
