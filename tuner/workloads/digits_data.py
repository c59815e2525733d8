"""scikit-learn's 8x8 digits, read without importing scikit-learn.

Why: importing scikit-learn costs about a CPU second (measured here: 1.3 s for ``import
sklearn``), paid by every process that builds a digits workload (``tuner train``, each sweep-lr
or round command's warm-start process, every rank of a multi-process trial) only to read one
CSV file and split it (``tuner.workloads.stratified_split``). The data still ships in
scikit-learn's wheel: we read its file where the package is installed (found without importing
it) with numpy.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np

from tuner.errors import WorkloadError


def _digits_file() -> Path:
    spec = importlib.util.find_spec("sklearn")  # finds the package without running its __init__
    if spec is None or spec.origin is None:
        raise WorkloadError(
            "the digits workloads read their data from scikit-learn: pip install scikit-learn"
        )
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise WorkloadError(f"scikit-learn's digits data is missing from its install: {path}")
    return path


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    data = np.loadtxt(_digits_file(), delimiter=",")  # numpy reads .gz itself
    data.setflags(write=False)  # cached: shared by every caller in this process
    return data[:, :-1], data[:, -1].astype(int)


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(pixels, labels)``: 1797 rows of 64 pixels (float64, 0..16) and their digit, as
    ``sklearn.datasets.load_digits(return_X_y=True)`` gives them."""
    pixels, labels = _digits()
    return pixels.copy(), labels.copy()
