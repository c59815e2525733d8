"""Metric accumulation: agreement with sklearn, and batch-size independence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, matthews_corrcoef

from tuner.train.metrics import MetricAccumulator, masked_mean_loss
from tuner.workloads._interface import IGNORE_INDEX, KNOWN_METRICS

ALL = list(KNOWN_METRICS)


def _data(n: int, c: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, c, (n,), generator=gen)
    # Logits biased towards the target so accuracy and MCC are neither 0 nor 1.
    logits = torch.randn(n, c, generator=gen) + 1.5 * torch.nn.functional.one_hot(targets, c)
    losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return logits, targets, losses


def _run(acc: MetricAccumulator, logits, targets, losses, batch_size: int) -> dict[str, float]:
    for i in range(0, len(targets), batch_size):
        acc.update(logits[i : i + batch_size], targets[i : i + batch_size], losses[i : i + batch_size])
    return acc.compute()


@pytest.mark.parametrize(("c", "seed"), [(2, 0), (5, 1), (10, 2)])
def test_accuracy_mcc_per_class_match_sklearn(c: int, seed: int) -> None:
    logits, targets, losses = _data(257, c, seed)
    out = _run(MetricAccumulator(ALL, num_classes=c), logits, targets, losses, batch_size=32)
    y, p = targets.numpy(), logits.argmax(-1).numpy()
    assert out["accuracy"] == pytest.approx(accuracy_score(y, p), abs=1e-12)
    assert out["error_rate"] == pytest.approx(1 - accuracy_score(y, p), abs=1e-12)
    assert out["mcc"] == pytest.approx(matthews_corrcoef(y, p), abs=1e-12)
    assert 0.0 < out["mcc"] < 1.0
    cm = confusion_matrix(y, p, labels=list(range(c)))
    for k in range(c):
        assert out[f"class_{k}_correct"] == cm[k, k]
        assert out[f"class_{k}_recall"] == pytest.approx(cm[k, k] / cm[k].sum())
    assert out["loss"] == pytest.approx(losses.double().mean().item(), rel=1e-9)


def test_mcc_is_zero_when_undefined_like_sklearn() -> None:
    targets = torch.tensor([0, 1, 2, 1])
    logits = torch.zeros(4, 3)
    logits[:, 1] = 1.0  # always predicts class 1
    acc = MetricAccumulator(["mcc"], num_classes=3)
    acc.update(logits, targets, torch.zeros(4))
    assert acc.compute()["mcc"] == 0.0 == matthews_corrcoef(targets.numpy(), np.ones(4, dtype=int))


def test_recall_of_an_absent_class_is_zero_not_nan() -> None:
    acc = MetricAccumulator(["per_class"], num_classes=3)
    acc.update(torch.eye(3)[[0, 1]], torch.tensor([0, 1]), torch.zeros(2))
    out = acc.compute()
    assert out["class_2_recall"] == 0.0 and out["class_2_correct"] == 0.0
    assert out["class_0_recall"] == 1.0
    assert list(out) == acc.output_names()


@pytest.mark.parametrize("c", [3, 5, 12])
def test_top5_accuracy_counts_target_among_the_k_largest(c: int) -> None:
    gen = torch.Generator().manual_seed(c)
    logits = torch.randn(200, c, generator=gen)
    targets = torch.randint(0, c, (200,), generator=gen)
    k = min(5, c)
    ranks = np.argsort(-logits.numpy(), axis=1)[:, :k]
    expected = np.mean([t in row for t, row in zip(targets.numpy(), ranks, strict=True)])
    acc = MetricAccumulator(["top5_accuracy", "accuracy"], num_classes=c)
    acc.update(logits, targets, torch.zeros(200))
    out = acc.compute()
    assert out["top5_accuracy"] == pytest.approx(expected)
    assert out["top5_accuracy"] >= out["accuracy"]
    if c <= 5:
        assert out["top5_accuracy"] == 1.0


def test_perplexity_is_exp_of_loss() -> None:
    logits, targets, losses = _data(64, 7, seed=3)
    out = _run(MetricAccumulator(["loss", "perplexity"], num_classes=7), logits, targets, losses, 10)
    assert out["perplexity"] == pytest.approx(math.exp(out["loss"]), rel=1e-12)
    assert out["perplexity"] > 1.0


def test_perplexity_of_a_diverged_model_is_inf_not_an_error() -> None:
    acc = MetricAccumulator(["perplexity"], num_classes=2)
    acc.update(torch.zeros(2, 2), torch.tensor([0, 1]), torch.full((2,), 1e4))
    assert acc.compute()["perplexity"] == math.inf


@pytest.mark.parametrize("batch_size", [16, 7, 1])
def test_partial_batches_equal_one_big_batch(batch_size: int) -> None:
    logits, targets, losses = _data(103, 6, seed=4)
    batched = _run(MetricAccumulator(ALL, num_classes=6), logits, targets, losses, batch_size)
    whole = _run(MetricAccumulator(ALL, num_classes=6), logits, targets, losses, 103)
    assert batched.keys() == whole.keys()
    for name in whole:
        if name in ("loss", "perplexity"):
            assert batched[name] == pytest.approx(whole[name], rel=1e-9, abs=0)
        else:
            assert batched[name] == whole[name], name


def test_padding_changes_nothing() -> None:
    c = 4
    logits, targets, losses = _data(30, c, seed=5)
    clean = _run(MetricAccumulator(ALL, num_classes=c), logits, targets, losses, 30)

    # Sequence-shaped batches (3, 12) with 6 padding positions scattered through them, whose
    # logits point at class 0 and whose losses are garbage: none of it may count.
    padded_targets = torch.full((36,), IGNORE_INDEX)
    pad_at = torch.tensor([2, 5, 11, 17, 30, 35])
    keep = torch.ones(36, dtype=torch.bool)
    keep[pad_at] = False
    padded_targets[keep] = targets
    padded_logits = torch.zeros(36, c)
    padded_logits[:, 0] = 10.0
    padded_logits[keep] = logits
    padded_losses = torch.full((36,), float("nan"))
    padded_losses[keep] = losses

    acc = MetricAccumulator(ALL, num_classes=c)
    acc.update(padded_logits.view(3, 12, c), padded_targets.view(3, 12), padded_losses.view(3, 12))
    padded = acc.compute()
    assert padded.keys() == clean.keys()
    for name in clean:
        assert padded[name] == pytest.approx(clean[name], rel=1e-12), name


def test_reset_forgets_everything() -> None:
    logits, targets, losses = _data(20, 3, seed=6)
    acc = MetricAccumulator(["loss", "accuracy", "mcc"], num_classes=3)
    acc.update(torch.zeros(5, 3), torch.tensor([1, 1, 2, 2, 2]), torch.full((5,), 9.0))
    acc.reset()
    acc.update(logits, targets, losses)
    fresh = MetricAccumulator(["loss", "accuracy", "mcc"], num_classes=3)
    fresh.update(logits, targets, losses)
    assert acc.compute() == fresh.compute()


def test_output_names_are_what_compute_returns_in_order() -> None:
    acc = MetricAccumulator(["accuracy", "per_class", "loss"], num_classes=2)
    expected = ["accuracy", "class_0_correct", "class_0_recall", "class_1_correct", "class_1_recall", "loss"]
    assert acc.output_names() == expected
    acc.update(torch.eye(2), torch.tensor([0, 1]), torch.zeros(2))
    assert list(acc.compute()) == expected


@pytest.mark.parametrize("names", [["accuracy", "f1"], ["Accuracy"], ["val/loss"]])
def test_unknown_metric_name_raises(names: list[str]) -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        MetricAccumulator(names, num_classes=3)


def test_update_rejects_mismatched_shapes() -> None:
    acc = MetricAccumulator(["accuracy"], num_classes=3)
    with pytest.raises(ValueError, match="classes"):
        acc.update(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), torch.zeros(4))
    with pytest.raises(ValueError, match="item_losses"):
        acc.update(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), torch.zeros(3))


def test_masked_mean_loss_ignores_padding_and_keeps_gradients() -> None:
    losses = torch.tensor([1.0, 2.0, float("nan"), 3.0], requires_grad=True)
    targets = torch.tensor([0, 1, IGNORE_INDEX, 2])
    loss = masked_mean_loss(losses, targets)
    assert loss.item() == pytest.approx(2.0)
    loss.backward()
    assert losses.grad is not None
    assert losses.grad.tolist() == pytest.approx([1 / 3, 1 / 3, 0.0, 1 / 3])


def test_masked_mean_loss_matches_cross_entropy_ignore_index() -> None:
    logits, targets, _ = _data(40, 5, seed=7)
    targets[::3] = IGNORE_INDEX
    item = torch.nn.functional.cross_entropy(logits, targets, reduction="none", ignore_index=IGNORE_INDEX)
    expected = torch.nn.functional.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    assert masked_mean_loss(item, targets).item() == pytest.approx(expected.item(), rel=1e-6)


def test_masked_mean_loss_of_pure_padding_is_zero() -> None:
    out = masked_mean_loss(torch.ones(3), torch.full((3,), IGNORE_INDEX))
    assert out.item() == 0.0
