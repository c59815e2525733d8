"""Optimizers by name, with the playbook's usual suspects."""

from __future__ import annotations

import torch

from tuner.spec import OptimizerSpec


def build_optimizer(spec: OptimizerSpec, parameters) -> torch.optim.Optimizer:
    """``momentum``/``nesterov`` are SGD with (Nesterov) momentum; ``lr`` is set each step by the schedule."""
    params = [p for p in parameters if p.requires_grad]
    if spec.name == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, weight_decay=spec.weight_decay)
    if spec.name in ("momentum", "nesterov"):
        return torch.optim.SGD(
            params,
            lr=spec.lr,
            momentum=spec.momentum,
            weight_decay=spec.weight_decay,
            nesterov=spec.name == "nesterov",
        )
    optimizer = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return optimizer(
        params, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=spec.eps, weight_decay=spec.weight_decay
    )
