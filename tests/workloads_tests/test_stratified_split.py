"""The built-in workloads' data without importing scikit-learn: the same digits and the same
split as scikit-learn's own functions, so no study's validation set moved."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits as sklearn_load_digits
from sklearn.model_selection import train_test_split

from tuner.workloads.digits_data import load_digits
from tuner.workloads.stratified_split import stratified_split


def test_digits_are_scikit_learns() -> None:
    pixels, labels = load_digits()
    expected = sklearn_load_digits()
    assert np.array_equal(pixels, expected.data) and np.array_equal(labels, expected.target)
    pixels[0, 0] = 99.0  # a caller's copy: the next caller gets the data unchanged
    assert load_digits()[0][0, 0] == expected.data[0, 0]


LABELS = {
    "digits": load_digits()[1],
    # uneven classes whose proportional shares leave remainders, with ties broken by the seed
    "imbalanced": np.repeat(np.arange(4), [61, 23, 9, 7]),
    "shuffled, two classes": np.random.default_rng(0).permutation(np.repeat([3, 8], [50, 47])),
}


@pytest.mark.parametrize("name", LABELS)
@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.25, 0.333])
@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_the_split_is_scikit_learns_train_test_split(name: str, fraction: float, seed: int) -> None:
    labels = LABELS[name]
    rows = np.arange(len(labels))
    train, held_out = train_test_split(rows, test_size=fraction, random_state=seed, stratify=labels)
    split = stratified_split(labels, fraction, seed)
    assert np.array_equal(split.train, train) and np.array_equal(split.held_out, held_out)


TEN_BY_5 = np.repeat(np.arange(10), 5)


@pytest.mark.parametrize(
    ("labels", "fraction", "says"),
    [
        (TEN_BY_5, 0.1, "the held-out side would have 5 examples, fewer than the 10 classes"),
        (TEN_BY_5, 0.9, "the training side would have 5 examples, fewer than the 10 classes"),
        (np.array([0, 0, 0, 1]), 0.5, "classes [1] have 1 example: each needs 2 or more"),
        (np.array([0, 0, 1, 1]), 1.0, "the held-out fraction must be between 0 and 1, got 1.0"),
    ],
)
def test_a_split_that_cannot_hold_every_class_says_why(
    labels: np.ndarray, fraction: float, says: str
) -> None:
    with pytest.raises(ValueError) as raised:
        stratified_split(labels, fraction, 0)
    assert str(raised.value) == says


def test_building_a_digits_workload_does_not_import_scikit_learn() -> None:
    code = """
import sys
from tuner.workloads import WorkloadContext
from tuner.workloads.digits import build_mlp
build_mlp(WorkloadContext(options={}))
print(sorted(m for m in sys.modules if m.startswith("sklearn")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
