"""The optimizer as users set it: a short name or any optimizer class, its arguments, its groups.

``optimizer.name`` is one of tuner's short names (``sgd``, ``momentum``, ``nesterov``, ``adam``,
``adamw``: their fields ``momentum``, ``beta1``... apply), a ``torch.optim`` class (``RMSprop``,
``torch.optim.NAdam``) or an importable class (``package.module:Class``), which takes ``lr``,
``weight_decay`` (where its signature has one) and ``options``.

Parameter groups come from the workload (``Workload.param_groups``) and from
``optimizer.no_weight_decay`` (biases and normalisation weights without decay, the usual recipe
for transformers); each group keeps an ``lr_scale`` that multiplies the scheduled LR (timm's
name), so a backbone can train at a tenth of the head's rate under the same schedule.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from tuner.errors import UsageError, WorkloadCodeError
from tuner.spec import OptimizerSpec

#: Normalisation layers whose weights ``no_weight_decay: [norm]`` exempts (and their subclasses).
NORM_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
    torch.nn.LocalResponseNorm,
    *((torch.nn.RMSNorm,) if hasattr(torch.nn, "RMSNorm") else ()),
)
_SHORT = {"sgd": "SGD", "momentum": "SGD", "nesterov": "SGD", "adam": "Adam", "adamw": "AdamW"}


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The class ``name`` names; ``UsageError`` (one line) when it names none."""
    if name in _SHORT:
        return getattr(torch.optim, _SHORT[name])
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError as error:
            raise UsageError(f"optimizer.name {name!r}: cannot import {module_name} ({error})") from None
        for part in attribute.split("."):
            found = getattr(found, part, None)
    else:
        found = getattr(torch.optim, name.removeprefix("torch.optim."), None)
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        known = sorted(
            n
            for n, c in vars(torch.optim).items()
            if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and n != "Optimizer"
        )
        raise UsageError(
            f"optimizer.name {name!r} is not an optimizer: use sgd, momentum, nesterov, adam, adamw, a "
            f"torch.optim class ({', '.join(known)}) or package.module:Class"
        )
    return found


def optimizer_arguments(spec: OptimizerSpec, cls: type[torch.optim.Optimizer]) -> dict[str, Any]:
    """The keyword arguments ``cls`` is built with: the short name's fields, or ``lr`` and
    ``weight_decay`` (where ``cls`` takes it) for a class; then ``options``, each checked against
    ``cls``'s signature (a misspelt one is named, not passed on to fail in torch)."""
    if spec.name in ("sgd",):
        arguments: dict[str, Any] = {"lr": spec.lr, "weight_decay": spec.weight_decay}
    elif spec.name in ("momentum", "nesterov"):
        arguments = {
            "lr": spec.lr,
            "momentum": spec.momentum,
            "weight_decay": spec.weight_decay,
            "nesterov": spec.name == "nesterov",
        }
    elif spec.name in ("adam", "adamw"):
        arguments = {
            "lr": spec.lr,
            "betas": (spec.beta1, spec.beta2),
            "eps": spec.eps,
            "weight_decay": spec.weight_decay,
        }
    else:
        arguments = {"lr": spec.lr}
        if _takes(cls, "weight_decay"):
            arguments["weight_decay"] = spec.weight_decay
        elif spec.weight_decay:
            raise UsageError(
                f"optimizer {spec.name} takes no weight_decay; leave optimizer.weight_decay at 0"
            )
    for key, value in spec.options.items():
        if key in arguments or key == "params":
            raise UsageError(
                f"optimizer.options.{key}: set by tuner from the optimizer's own fields (or the "
                "schedule); give it there, not in options"
            )
        if not _takes(cls, key):
            raise UsageError(
                f"optimizer.options.{key}: {cls.__name__} takes no argument {key!r} (it takes: "
                f"{', '.join(_parameters(cls))})"
            )
        arguments[key] = tuple(value) if key == "betas" and isinstance(value, list) else value
    return arguments


def _parameters(cls: type) -> list[str]:
    return [name for name in inspect.signature(cls).parameters if name not in ("self", "params")]


def _takes(cls: type, name: str) -> bool:
    parameters = inspect.signature(cls).parameters
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def build_optimizer(
    spec: OptimizerSpec,
    parameters: Iterable[torch.nn.Parameter] | torch.nn.Module,
    param_groups: Callable[[torch.nn.Module], Sequence[dict[str, Any]]] | None = None,
) -> torch.optim.Optimizer:
    """The optimizer over ``parameters`` (a model: its trainable parameters, grouped by the
    workload's ``param_groups`` and by ``no_weight_decay``); ``lr`` is set each step by the
    schedule, times each group's ``lr_scale`` (default 1)."""
    cls = optimizer_class(spec.name)
    arguments = optimizer_arguments(spec, cls)
    if isinstance(parameters, torch.nn.Module):
        groups = parameter_groups(parameters, spec, param_groups)
    else:
        groups = [{"params": [p for p in parameters if p.requires_grad]}]
    for group in groups:
        group.setdefault("lr_scale", 1.0)
        group["lr"] = arguments["lr"] * group["lr_scale"]
    return cls(groups, **arguments)


def parameter_groups(
    model: torch.nn.Module,
    spec: OptimizerSpec,
    param_groups: Callable[[torch.nn.Module], Sequence[dict[str, Any]]] | None,
) -> list[dict[str, Any]]:
    """The workload's groups (or one of every trainable parameter), each split in two by
    ``no_weight_decay``: the exempt parameters go to a group of their own with ``weight_decay`` 0."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if param_groups is None:
        groups: list[dict[str, Any]] = [{"params": trainable}]
    else:
        groups = _workload_groups(model, param_groups, trainable)
    if not spec.no_weight_decay:
        return groups
    exempt = {id(p) for p in decay_exempt(model, spec.no_weight_decay)}
    split: list[dict[str, Any]] = []
    for group in groups:
        keep = [p for p in group["params"] if id(p) not in exempt]
        free = [p for p in group["params"] if id(p) in exempt]
        if keep:
            split.append({**group, "params": keep})
        if free:
            split.append({**group, "params": free, "weight_decay": 0.0})
    return split


def decay_exempt(model: torch.nn.Module, kinds: Sequence[str]) -> list[torch.nn.Parameter]:
    """The parameters ``no_weight_decay`` names: every ``bias``, the weights of normalisation layers."""
    found: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if ("bias" in kinds and name == "bias") or ("norm" in kinds and isinstance(module, NORM_LAYERS)):
                found[id(parameter)] = parameter
    return list(found.values())


def _workload_groups(
    model: torch.nn.Module,
    param_groups: Callable[[torch.nn.Module], Sequence[dict[str, Any]]],
    trainable: list[torch.nn.Parameter],
) -> list[dict[str, Any]]:
    """The workload's groups, checked: each a dict with ``params``; together every trainable
    parameter exactly once (one left out would never train, one twice torch refuses cryptically)."""
    groups = [dict(group) for group in param_groups(model)]
    seen: dict[int, int] = {}
    for index, group in enumerate(groups):
        if "params" not in group:
            raise WorkloadCodeError(f"the workload's param_groups: group {index} has no 'params'")
        group["params"] = [p for p in group["params"] if p.requires_grad]
        for parameter in group["params"]:
            if id(parameter) in seen:
                raise WorkloadCodeError(
                    f"the workload's param_groups put a parameter in groups {seen[id(parameter)]} and "
                    f"{index}; each belongs to one group"
                )
            seen[id(parameter)] = index
        scale = group.get("lr_scale", 1.0)
        if not isinstance(scale, (int, float)) or scale < 0:
            raise WorkloadCodeError(f"the workload's param_groups: group {index} has lr_scale {scale!r}")
    names = {id(p): name for name, p in model.named_parameters()}
    missing = [names.get(id(p), "?") for p in trainable if id(p) not in seen]
    if missing:
        raise WorkloadCodeError(
            f"the workload's param_groups leave out {len(missing)} trainable parameter(s) (e.g. "
            f"{', '.join(missing[:3])}): they would never train; add them to a group"
        )
    return [group for group in groups if group["params"]]
