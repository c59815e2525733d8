"""``tuner.train.load_model(checkpoint)``: a checkpoint's model in plain PyTorch, with its weights.

A checkpoint (``<run folder>/checkpoints/best-stepNNNNNNNN.pt`` or ``latest.pt``) is a dict saved
with ``torch.save`` and loaded with ``weights_only=True``: ``model`` (the model's
``state_dict``), ``optimizer``, ``step``, ``rng``, ``last_eval`` (the metrics of its last eval)
and ``callbacks``. The run folder beside it keeps ``config.yaml``: the study the run trained
(its overrides applied, the workload's entry point as an absolute path), from which the
workload's own ``build`` makes the model again; the weights are then loaded into it. So the model
comes back as the user's own module class, ready for ``model(inputs)``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tuner.errors import UsageError
from tuner.train.build import build_workload
from tuner.train.checkpoint_integrity import load_verified, recorded_digests
from tuner.train.checksums import MANIFEST
from tuner.train.rng import trial_seeds


def load_model(checkpoint: str | Path, *, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The workload's model with the weights of ``checkpoint``, in eval mode on ``device``.

    Builds the workload as the run did (its ``config.yaml``: options, seed), so the workload's
    code must be where the run found it. The checkpoint is verified against ``checksums.json``
    beside it; one that file does not vouch for is refused (``UsageError``, one line)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    run_dir = path.parent.parent
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise UsageError(
            f"{path}: not in a run folder (no {config}): give a checkpoint under a run's checkpoints/"
        )
    from tuner.spec import load_study

    loaded = load_study(config)
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
    workload = build_workload(loaded.spec, loaded.base_dir, init_seed=trial_seeds(loaded.spec).init)
    model = workload.model
    model.load_state_dict(state["model"])
    return model.to(device).eval()
