"""A timm model (``timm.create_model``, no pretrained weights) on generated 32x32 images of coloured
blobs (a disk or a square of random size and place on a grey background, with noise), classed by
the blob's colour; trained under bfloat16 autocast with random flips and crops.

The augmentation is written with torch operations on the batch, on its device, drawing from the
generator the engine passes (a stream of its own per step and process: a resumed run augments
its batches as a straight run did).
"""

from __future__ import annotations

import timm
import torch
from torch.nn import functional
from torch.utils.data import TensorDataset

from tuner.workloads import Workload, WorkloadContext

#: The classes: each blob's colour is its class's, give or take ``JITTER`` per channel.
COLOURS = {
    "red": (0.9, 0.2, 0.2),
    "green": (0.2, 0.8, 0.2),
    "blue": (0.2, 0.3, 0.9),
    "yellow": (0.9, 0.8, 0.2),
}
JITTER = 0.15
SIZE = 32
PAD = 4  # a random crop moves the image by up to this many pixels


def blob_masks(
    square: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor, radius: torch.Tensor
) -> torch.Tensor:
    """``(n, 1, SIZE, SIZE)`` masks: a square where ``square[i]``, else a disk, at ``(cy, cx)``."""
    grid = torch.arange(SIZE, dtype=torch.float32)
    dy = grid[None, :, None] - cy[:, None, None]
    dx = grid[None, None, :] - cx[:, None, None]
    r = radius[:, None, None]
    disk = dy.square() + dx.square() <= r.square()
    box = (dy.abs() <= 0.85 * r) & (dx.abs() <= 0.85 * r)
    return torch.where(square[:, None, None], box, disk)[:, None].float()


def make_images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 3, SIZE, SIZE)`` in [0, 1] and their blob's colour's index."""
    g = torch.Generator().manual_seed(seed)
    label = torch.randint(len(COLOURS), (n,), generator=g)
    radius = 3 + 6 * torch.rand(n, generator=g)
    cy = radius + (SIZE - 2 * radius) * torch.rand(n, generator=g)
    cx = radius + (SIZE - 2 * radius) * torch.rand(n, generator=g)
    mask = blob_masks(torch.rand(n, generator=g) < 0.5, cy, cx, radius)
    colour = torch.tensor(list(COLOURS.values()))[label] + JITTER * (2 * torch.rand(n, 3, generator=g) - 1)
    background = 0.2 + 0.5 * torch.rand(n, 1, 1, 1, generator=g)
    images = background * (1 - mask) + colour[:, :, None, None] * mask
    images = images + 0.1 * torch.randn(n, 3, SIZE, SIZE, generator=g)
    return images.clamp(0, 1), label


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flips and random crops (reflect-padded by ``PAD``), one per image."""
    n, device = images.shape[0], images.device
    flip = torch.rand(n, generator=generator, device=device) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    padded = functional.pad(images, (PAD, PAD, PAD, PAD), mode="reflect")
    top = torch.randint(2 * PAD + 1, (n,), generator=generator, device=device)
    left = torch.randint(2 * PAD + 1, (n,), generator=generator, device=device)
    span = torch.arange(SIZE, device=device)
    rows = (top[:, None] + span)[:, None, :, None]  # (n, 1, SIZE, 1)
    cols = (left[:, None] + span)[:, None, None, :]  # (n, 1, 1, SIZE)
    batch = torch.arange(n, device=device)[:, None, None, None]
    channels = torch.arange(images.shape[1], device=device)[None, :, None, None]
    return padded[batch, channels, rows, cols]


def build(ctx: WorkloadContext) -> Workload:
    n_train, n_val = ctx.options.get("n_train", 2000), ctx.options.get("n_val", 300)
    images, labels = make_images(n_train + n_val, ctx.seed)  # the study's seed: one split
    model = timm.create_model(
        ctx.options.get("model", "resnet10t"),
        pretrained=False,
        num_classes=len(COLOURS),
        in_chans=3,
        drop_rate=ctx.options.get("dropout", 0.0),
        **ctx.options.get("model_args", {}),
    )
    return Workload(
        model=model,
        train_data=TensorDataset(images[:n_train], labels[:n_train]),
        eval_data=TensorDataset(images[n_train:], labels[n_train:]),
        num_classes=len(COLOURS),
        augment=augment,
        metrics=("loss", "accuracy", "error_rate"),
    )
