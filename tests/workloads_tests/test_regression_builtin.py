"""The built-in ``regression`` workload: seeded synthetic data, standardised targets, one output."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from tuner.workloads import BUILTINS, Workload, WorkloadContext, regression


def _build(seed: int = 0, **options: object) -> Workload:
    torch.manual_seed(0)  # what the engine does before calling an entry point
    return regression.build(WorkloadContext(options=dict(options), seed=seed))


def test_it_is_a_regression_with_one_prediction_per_example() -> None:
    workload = _build(n_examples=500, val_fraction=0.2)
    assert workload.task == "regression" and workload.metrics == BUILTINS["regression"].metrics
    (x, y), yv = workload.train_data.tensors, workload.eval_data.tensors[1]
    assert (len(y), len(yv)) == (400, 100) and x.shape[1:] == (10,) and y.dtype == torch.float32
    assert workload.model(x[:8]).shape == (8, 1)
    # standardised with the training split's own statistics: predicting 0 is predicting its mean
    assert float(y.mean()) == pytest.approx(0.0, abs=1e-5) and float(y.std(correction=0)) == pytest.approx(
        1.0
    )


def test_the_data_is_the_same_for_a_seed_and_another_for_another() -> None:
    one, again, other = _build(seed=3), _build(seed=3), _build(seed=4)
    assert torch.equal(one.eval_data.tensors[1], again.eval_data.tensors[1])
    assert not torch.equal(one.eval_data.tensors[1], other.eval_data.tensors[1])


def test_noise_sets_how_much_of_the_target_cannot_be_learned() -> None:
    quiet, loud = _build(noise=0.0), _build(noise=5.0)
    x = quiet.train_data.tensors[0]
    assert torch.equal(x, loud.train_data.tensors[0])  # the same inputs, noisier targets
    assert not torch.allclose(quiet.train_data.tensors[1], loud.train_data.tensors[1])


def test_an_unknown_option_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="not_an_option"):
        _build(not_an_option=1)
