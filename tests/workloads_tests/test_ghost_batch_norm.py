"""GhostBatchNorm against hand computations: outputs, running statistics, eval, gradients.

The reference below writes batch norm out as its formula (mean, biased variance, eps, affine)
per virtual batch, in float64, and the running-statistics update as the sequence of BatchNorm
updates it is documented to be; two literal examples pin the numbers down without any code.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from tuner.workloads import GhostBatchNorm, convert_sync_batch_norm
from tuner.workloads.ghost_batch_norm import virtual_batch_sizes

EPS = 1e-5
MOMENTUM = 0.1


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [0, *range(2, x.dim())]  # every dim but the channels


def _channel_view(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return t.view(1, -1, *([1] * (x.dim() - 2)))


def hand_forward(
    x: torch.Tensor, sizes: list[int], weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Per virtual batch: ``(x - mean) / sqrt(biased var + eps) * weight + bias``.

    Returns the output and, per virtual batch, the mean and the UNBIASED variance (what a
    BatchNorm feeds its running variance).
    """
    outputs, means, unbiased = [], [], []
    start = 0
    for size in sizes:
        chunk = x[start : start + size]
        start += size
        dims = _reduce_dims(chunk)
        count = chunk.numel() // chunk.shape[1]
        mean = chunk.sum(dims) / count
        squares = ((chunk - _channel_view(mean, chunk)) ** 2).sum(dims)
        normalised = (chunk - _channel_view(mean, chunk)) / torch.sqrt(
            _channel_view(squares / count + EPS, chunk)
        )
        outputs.append(normalised * _channel_view(weight, chunk) + _channel_view(bias, chunk))
        means.append(mean)
        unbiased.append(squares / (count - 1))
    return torch.cat(outputs), means, unbiased


def hand_running(start: torch.Tensor, stats: list[torch.Tensor], momentum: float = MOMENTUM) -> torch.Tensor:
    running = start.clone()
    for stat in stats:
        running = (1 - momentum) * running + momentum * stat
    return running


def _layer(channels: int, virtual: int, seed: int = 0) -> GhostBatchNorm:
    """A layer with non-trivial affine parameters (the defaults 1 and 0 would hide a mix-up)."""
    layer = GhostBatchNorm(channels, virtual_batch_size=virtual)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.weight.copy_(torch.rand(channels, generator=generator) + 0.5)
        layer.bias.copy_(torch.randn(channels, generator=generator))
    return layer


def _input(*shape: int, seed: int = 1) -> torch.Tensor:
    # A different scale and offset per channel, so per-channel statistics matter.
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator)
    scale = torch.arange(1, shape[1] + 1, dtype=torch.float32)
    return x * _channel_view(scale, x) + _channel_view(scale * 3, x)


# --- how a batch is cut --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "virtual", "sizes"),
    [(8, 4, [4, 4]), (10, 4, [4, 4, 2]), (3, 4, [3]), (4, 4, [4]), (9, 2, [2, 2, 2, 2, 1])],
)
def test_virtual_batch_sizes(batch: int, virtual: int, sizes: list[int]) -> None:
    assert virtual_batch_sizes(batch, virtual) == sizes


# --- literal numbers, worked out by hand ---------------------------------------------------------

# x = 0, 1, ..., N-1 in one channel, virtual batches of 4.
# [0..3] and [4..7]: mean 1.5 and 5.5, biased variance 1.25, unbiased 5/3.
# [8, 9] (N=10 only): mean 8.5, biased variance 0.25, unbiased 0.5.
# running mean from 0, momentum 0.1: 0.15, then 0.9*0.15 + 0.55 = 0.685, then 0.9*0.685 + 0.85 = 1.4665
# running var from 1: 0.9 + 1/6 = 1.0666..., then 0.96 + 1/6 = 1.12666..., then 1.014 + 0.05 = 1.064
LITERAL = {
    8: ([1.5] * 4 + [5.5] * 4, [1.25] * 8, 0.685, 0.96 + 1 / 6, 2),
    10: ([1.5] * 4 + [5.5] * 4 + [8.5] * 2, [1.25] * 8 + [0.25] * 2, 1.4665, 1.064, 3),
}


@pytest.mark.parametrize("batch", [8, 10], ids=["divisible", "remainder"])
def test_literal_example(batch: int) -> None:
    means, variances, running_mean, running_var, count = LITERAL[batch]
    layer = GhostBatchNorm(1, virtual_batch_size=4)
    x = torch.arange(batch, dtype=torch.float32).unsqueeze(1)  # (N, C=1)
    out = layer(x)
    expected = (x.squeeze(1) - torch.tensor(means)) / torch.sqrt(torch.tensor(variances) + EPS)
    torch.testing.assert_close(out.squeeze(1), expected)
    torch.testing.assert_close(layer.running_mean, torch.tensor([running_mean]))
    torch.testing.assert_close(layer.running_var, torch.tensor([running_var]))
    assert int(layer.num_batches_tracked) == count


# --- against the formula, any rank --------------------------------------------------------------


@pytest.mark.parametrize("batch", [8, 10], ids=["divisible", "remainder"])
@pytest.mark.parametrize("shape", [(3,), (3, 5), (3, 4, 4)], ids=["N,C", "N,C,L", "N,C,H,W"])
def test_training_forward_matches_the_hand_computation(batch: int, shape: tuple[int, ...]) -> None:
    layer = _layer(shape[0], virtual=4)
    x = _input(batch, *shape)
    sizes = virtual_batch_sizes(batch, 4)
    weight, bias = layer.weight.detach().double(), layer.bias.detach().double()

    expected, means, unbiased = hand_forward(x.double(), sizes, weight, bias)
    torch.testing.assert_close(layer(x), expected.float())
    mean_after_one = hand_running(torch.zeros(shape[0], dtype=torch.float64), means)
    var_after_one = hand_running(torch.ones(shape[0], dtype=torch.float64), unbiased)
    torch.testing.assert_close(layer.running_mean, mean_after_one.float())
    torch.testing.assert_close(layer.running_var, var_after_one.float())
    assert int(layer.num_batches_tracked) == len(sizes)

    # A second batch keeps updating from where the first left off, virtual batch by virtual batch.
    x2 = _input(batch, *shape, seed=2)
    expected2, means2, unbiased2 = hand_forward(x2.double(), sizes, weight, bias)
    torch.testing.assert_close(layer(x2), expected2.float())
    torch.testing.assert_close(layer.running_mean, hand_running(mean_after_one, means2).float())
    torch.testing.assert_close(layer.running_var, hand_running(var_after_one, unbiased2).float())
    assert int(layer.num_batches_tracked) == 2 * len(sizes)


def test_virtual_batches_are_normalised_independently() -> None:
    """Shifting one virtual batch by a constant changes nothing in any output (its own mean
    absorbs it); with a plain BatchNorm every example's output would move."""
    layer = _layer(3, virtual=4)
    x = _input(10, 3, 4, 4)
    shifted = x.clone()
    shifted[4:8] += 100.0
    torch.testing.assert_close(layer(shifted), layer(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("batch", [3, 4], ids=["smaller", "equal"])
def test_a_batch_no_larger_than_the_virtual_batch_is_plain_batch_norm(batch: int) -> None:
    ghost, plain = _layer(3, virtual=4), nn.BatchNorm2d(3)
    plain.load_state_dict(ghost.state_dict())
    x = _input(batch, 3, 4, 4)
    assert torch.equal(ghost(x), plain(x))
    for name, buffer in plain.named_buffers():
        assert torch.equal(ghost.get_buffer(name), buffer), name
    weight, bias = ghost.weight.detach().double(), ghost.bias.detach().double()
    torch.testing.assert_close(ghost(x), hand_forward(x.double(), [batch], weight, bias)[0].float())


def test_momentum_none_is_the_cumulative_average_over_virtual_batches() -> None:
    layer = GhostBatchNorm(3, virtual_batch_size=4, momentum=None)
    x = _input(10, 3, 5)
    _, means, unbiased = hand_forward(x.double(), [4, 4, 2], torch.ones(3).double(), torch.zeros(3).double())
    layer(x)
    torch.testing.assert_close(layer.running_mean, (sum(means) / 3).float())
    torch.testing.assert_close(layer.running_var, (sum(unbiased) / 3).float())


# --- eval ----------------------------------------------------------------------------------------


def test_eval_uses_the_running_statistics() -> None:
    layer = _layer(3, virtual=4)
    layer(_input(10, 3, 4, 4))
    layer.eval()
    x = _input(10, 3, 4, 4, seed=5)
    mean, var = layer.running_mean, layer.running_var
    expected = (x - _channel_view(mean, x)) / torch.sqrt(_channel_view(var + EPS, x))
    expected = expected * _channel_view(layer.weight, x) + _channel_view(layer.bias, x)
    torch.testing.assert_close(layer(x), expected)
    # no batch statistics in eval: one example alone gets the same output, and nothing is updated
    torch.testing.assert_close(layer(x[7:8]), expected[7:8])
    assert int(layer.num_batches_tracked) == 3


# --- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [8, 10], ids=["divisible", "remainder"])
def test_gradients_match_the_hand_computation(batch: int) -> None:
    layer = _layer(3, virtual=4)
    x = _input(batch, 3, 4, 4).requires_grad_()
    upstream = torch.randn(batch, 3, 4, 4, generator=torch.Generator().manual_seed(9))
    (layer(x) * upstream).sum().backward()

    x64 = x.detach().double().requires_grad_()
    weight = layer.weight.detach().double().requires_grad_()
    bias = layer.bias.detach().double().requires_grad_()
    out, _, _ = hand_forward(x64, virtual_batch_sizes(batch, 4), weight, bias)
    (out * upstream.double()).sum().backward()

    assert x.grad is not None and layer.weight.grad is not None and layer.bias.grad is not None
    assert x.grad.abs().sum() > 0 and layer.weight.grad.abs().sum() > 0
    torch.testing.assert_close(x.grad, x64.grad.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(layer.weight.grad, weight.grad.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(layer.bias.grad, bias.grad.float(), atol=1e-4, rtol=1e-4)


# --- compatibility with BatchNorm ----------------------------------------------------------------


def test_checkpoints_are_interchangeable_with_batch_norm() -> None:
    ghost = _layer(3, virtual=4)
    ghost(_input(10, 3, 4, 4))
    assert isinstance(ghost, _BatchNorm)  # what batch-norm syncing across ranks looks for
    plain = nn.BatchNorm2d(3)
    assert list(ghost.state_dict()) == list(plain.state_dict())
    plain.load_state_dict(ghost.state_dict())
    ghost.eval(), plain.eval()
    x = _input(6, 3, 4, 4, seed=3)
    assert torch.equal(ghost(x), plain(x))


def test_sync_conversion_keeps_the_ghost_layers() -> None:
    def model() -> nn.Module:
        return nn.Sequential(nn.BatchNorm2d(3), GhostBatchNorm(3, 4), nn.Sequential(nn.BatchNorm1d(2)))

    # torch's own converter would turn the ghost layer into a plain SyncBatchNorm ...
    assert isinstance(nn.SyncBatchNorm.convert_sync_batchnorm(model())[1], nn.SyncBatchNorm)
    # ... ours converts the plain batch norms only.
    converted = convert_sync_batch_norm(model())
    assert isinstance(converted[0], nn.SyncBatchNorm) and isinstance(converted[2][0], nn.SyncBatchNorm)
    assert type(converted[1]) is GhostBatchNorm and converted[1].virtual_batch_size == 4


# --- bad use -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-4, ValueError), ("4", TypeError), (True, TypeError)]
)
def test_virtual_batch_size_must_be_a_positive_int(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="virtual_batch_size"):
        GhostBatchNorm(3, virtual_batch_size=value)  # type: ignore[arg-type]


def test_a_one_value_virtual_batch_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match=r"virtual batches of \[4, 1\].*1 value per channel"):
        GhostBatchNorm(3, virtual_batch_size=4)(torch.randn(5, 3))
    GhostBatchNorm(3, virtual_batch_size=4)(torch.randn(5, 3, 2))  # 2 values per channel: fine
