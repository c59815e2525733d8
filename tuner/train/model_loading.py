"""``tuner.train.load_model(checkpoint)``: a checkpoint's model in plain PyTorch, with its weights.

A checkpoint (``<run folder>/checkpoints/best-stepNNNNNNNN.pt`` or ``latest.pt``) is a dict saved
with ``torch.save`` and loaded with ``weights_only=True``: ``model`` (the model's
``state_dict``), ``optimizer``, ``step``, ``rng``, ``last_eval`` (the metrics of its last eval)
and ``callbacks``. The run folder beside it keeps ``config.yaml``: the study the run trained
(its overrides applied, the workload's entry point as an absolute path), from which the
workload's own ``build`` makes the model again; the weights are then loaded into it. So the model
comes back as the user's own module class, ready for ``model(inputs)`` (a Hugging Face model as
its own class, ready for ``save_pretrained``).

Loading runs no code that a run folder brings. The weights never can (``weights_only``); the
workload's ``build`` is code, and a run folder received from elsewhere could name any file in its
``config.yaml`` (one beside it, say). As Hugging Face's ``trust_remote_code``: the model is built
from code the user names (``workload=``), from tuner's built-in workloads, from a module this
process has already imported (code the user runs anyway), or, with ``trust_code=True``, from what
``config.yaml`` names; ``model=`` loads the weights into a module the user built, running nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tuner.errors import UsageError
from tuner.train.build import build_workload
from tuner.train.checkpoint_integrity import load_verified, recorded_digests
from tuner.train.checksums import MANIFEST
from tuner.train.rng import trial_seeds
from tuner.workloads import BUILTINS, EntryPoint, import_entry_point, parse_entry_point

#: A build function, or an entry point the caller names (``"pkg.mod:build"``, ``"file.py:build"``).
WorkloadChoice = Callable[..., Any] | str


def load_model(
    checkpoint: str | Path,
    *,
    device: str | torch.device = "cpu",
    model: torch.nn.Module | None = None,
    workload: WorkloadChoice | None = None,
    trust_code: bool = False,
) -> torch.nn.Module:
    """The model of ``checkpoint`` with its weights, in eval mode on ``device``.

    Without ``model``, the model is built as the run built it (its ``config.yaml``: options,
    seed) by ``workload`` if given, else by the workload ``config.yaml`` names, when that code is
    trusted (see the module's docstring; ``trust_code=True`` trusts it). With ``model``, the
    weights load into it and no code runs. The checkpoint is verified against ``checksums.json``
    beside it; one that file does not vouch for is refused. Every refusal is a ``UsageError``
    (one line)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    config = path.parent.parent / "config.yaml"
    if model is None and not config.is_file():
        raise UsageError(
            f"{path}: not in a run folder (no {config}): give a checkpoint under a run's "
            "checkpoints/, or model= to load its weights into"
        )
    expected, _ = recorded_digests(path.parent, path.name)
    if expected is None:
        raise UsageError(
            f"{path}: {path.parent / MANIFEST} (nor its copy in index.json) has no checksum for it, "
            "so its weights cannot be trusted as the run's; use another checkpoint of the run"
        )
    try:
        state = load_verified(path, expected)
    except ValueError as error:
        raise UsageError(f"{path}: {error}") from None
    if model is None:
        model = _build(path, config, workload, trust_code)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0]
        raise UsageError(f"{path}: its weights do not fit the model: {first}") from None
    return model.to(device).eval()


def _build(path: Path, config: Path, workload: WorkloadChoice | None, trust_code: bool) -> torch.nn.Module:
    from tuner.spec import load_study

    loaded = load_study(config)
    function = None
    if callable(workload):
        function = workload
    else:
        name = workload if workload is not None else loaded.spec.workload.name
        entry = parse_entry_point(name, loaded.base_dir)
        if workload is None and not (trust_code or _trusted(name, entry)):
            raise UsageError(
                f"{path}: its run's config.yaml names the workload {entry.text}, code that loading "
                "would run: load_model(..., trust_code=True) if you trust it (your own run), "
                "workload= your build function, or model= a module to load the weights into"
            )
        function = import_entry_point(entry)
    # the code that trained it may have read an option today's no longer does: no option check
    built = build_workload(
        loaded.spec,
        loaded.base_dir,
        init_seed=trial_seeds(loaded.spec).init,
        function=function,
        check_options=False,
    )
    return built.model


def _trusted(name: str, entry: EntryPoint) -> bool:
    """tuner's own workloads, and a workload module this process has imported already (the user
    runs that code anyway); never the standard library's (a function of it called with a workload
    context is not a workload)."""
    if name in BUILTINS:
        return True
    if entry.module is not None:
        return entry.module in sys.modules and entry.module.split(".")[0] not in sys.stdlib_module_names
    assert entry.file is not None
    wanted = entry.file.resolve()
    return any(
        getattr(module, "__file__", None) and Path(module.__file__).resolve() == wanted
        for module in list(sys.modules.values())
    )
