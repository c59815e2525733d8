"""Telling a bug in the user's workload from a bug in tuner, and saying where it is.

An exception whose traceback passes through the user's own code (not tuner, not an installed
library) is reported as the workload's, at the deepest frame of the user's code:
``the workload raised KeyError: 'hiden' at my_workload.py:7 in build``. The first training batch
is also checked against the workload's contract before any weight changes (logits
``(..., num_classes)`` for integer targets ``(...)`` in range; for a regression, predictions shaped
as the real-valued targets), because a wrong class count would
otherwise surface only at the first evaluation, ``eval_every`` steps later, as a cryptic error.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from functools import cache
from pathlib import Path

import torch

import tuner
from tuner._environment_faults import OOM_WORDS
from tuner.errors import TunerError, WorkloadCodeError
from tuner.output import shown_path
from tuner.workloads import IGNORE_INDEX


@cache
def _not_user_code() -> tuple[str, ...]:
    """Folders whose files are never the user's: tuner itself, the standard library, site-packages."""
    roots = {str(Path(tuner.__file__).resolve().parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with_prefix = sysconfig.get_paths().get(key)
        if with_prefix:
            roots.add(os.path.realpath(with_prefix))
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        roots.add(os.path.realpath(os.path.join(prefix, "lib")))
    return tuple(root.rstrip(os.sep) + os.sep for root in roots)


def is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = os.path.realpath(filename)
    parts = Path(path).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not path.startswith(_not_user_code())


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a device or host running out of memory (a trial's ``oom`` reason).

    Such errors are left as they are, never blamed on the workload's code."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error).lower()
    return any(words in text for words in OOM_WORDS)  # one list of wordings: tuner._environment_faults


def blame_workload(error: BaseException) -> WorkloadCodeError | None:
    """A ``WorkloadCodeError`` if ``error`` was raised in (or under) the user's code, else None.

    Only ordinary exceptions: a ``TunerError`` already speaks to the user, an interrupt is not a
    bug, and an out-of-memory error keeps its type for the failure reason.
    """
    if not isinstance(error, Exception) or isinstance(error, TunerError) or is_out_of_memory(error):
        return None
    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename)]
    if not frames:
        return None
    frame = frames[-1]
    what = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()
    first = what[0] if what else type(error).__name__
    where = f"{shown_path(frame.filename)}:{frame.lineno} in {frame.name}"
    return WorkloadCodeError(f"the workload raised {first} at {where}")


def blame_model(error: BaseException, model: torch.nn.Module) -> WorkloadCodeError | None:
    """``blame_workload``, or, for an error raised while the workload's model ran its forward in
    torch's own layers only (an ``nn.Sequential`` has no frame of the user's), the model's error:
    its input is the workload's too. None for what is not an ordinary error (see there)."""
    blamed = blame_workload(error)
    if blamed is not None or not isinstance(error, Exception) or isinstance(error, TunerError):
        return blamed
    if is_out_of_memory(error):
        return None
    from tuner.train.events import StopTraining

    if isinstance(error, StopTraining):
        return None
    what = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()
    first = what[0] if what else type(error).__name__
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the workload's model
    return WorkloadCodeError(f"the workload's model ({type(inner).__name__}) raised {first} in its forward")


def check_inputs(inputs: object, model: torch.nn.Module) -> None:
    """The first batch's floating-point inputs have the dtype of the model's floating-point
    parameters (float64 data into a float32 model fails in the first layer, as a cryptic
    ``mat1 and mat2 must have the same dtype``)."""
    if not isinstance(inputs, torch.Tensor) or not inputs.dtype.is_floating_point:
        return  # token ids, several tensors, a dict: the model's own business
    dtypes = {p.dtype for p in model.parameters() if p.dtype.is_floating_point}
    if len(dtypes) != 1 or inputs.dtype in dtypes:
        return  # no parameters, or mixed precision on purpose
    (wanted,) = dtypes
    got, want = str(inputs.dtype).removeprefix("torch."), str(wanted).removeprefix("torch.")
    raise WorkloadCodeError(
        f"the workload's inputs are {got} but its model's parameters are {want}: convert the data "
        f"(e.g. torch.tensor(x, dtype=torch.{want})) or the model (model.to(torch.{got}))"
    )


def _shape(shape: torch.Size | tuple[int, ...]) -> str:
    return str(tuple(shape))


def check_batch(logits: object, targets: torch.Tensor, num_classes: int, regression: bool = False) -> None:
    """Raise ``WorkloadCodeError`` if one batch breaks the workload contract; costs no extra forward.

    Called with the first training step's own logits, before the loss: the RNG stream, the
    weights and the step's loss are exactly those of a run without the check.
    """
    if regression:
        _check_regression_batch(logits, targets)
        return
    if not isinstance(logits, torch.Tensor):
        raise WorkloadCodeError(
            f"the workload's model returned {type(logits).__name__}; expected a tensor of logits "
            f"(..., {num_classes})"
        )
    if not isinstance(targets, torch.Tensor):
        raise WorkloadCodeError(f"the workload's targets are {type(targets).__name__}; expected a tensor")
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise WorkloadCodeError(
            f"the workload's targets are {str(targets.dtype).removeprefix('torch.')}; expected integer "
            "class indices (torch.long), e.g. torch.tensor(labels, dtype=torch.long); a workload "
            "that predicts numbers returns Workload(..., task='regression')"
        )
    expected = (*targets.shape, num_classes)
    if tuple(logits.shape) != expected:
        raise WorkloadCodeError(
            f"the workload's model returned logits of shape {_shape(logits.shape)} for targets "
            f"{_shape(targets.shape)}; expected {_shape(expected)}: num_classes is {num_classes}"
        )
    outside = targets[(targets != IGNORE_INDEX) & ((targets < 0) | (targets >= num_classes))]
    if outside.numel():
        raise WorkloadCodeError(
            f"the workload's targets include {int(outside[0])}, outside 0..{num_classes - 1} "
            f"(num_classes is {num_classes}; {IGNORE_INDEX} marks padding)"
        )


def _check_regression_batch(outputs: object, targets: object) -> None:
    if not isinstance(outputs, torch.Tensor):
        raise WorkloadCodeError(
            f"the workload's model returned {type(outputs).__name__}; expected a tensor of predictions"
        )
    if not isinstance(targets, torch.Tensor):
        raise WorkloadCodeError(f"the workload's targets are {type(targets).__name__}; expected a tensor")
    if targets.dtype.is_complex or targets.dtype == torch.bool:
        raise WorkloadCodeError(
            f"the workload's targets are {str(targets.dtype).removeprefix('torch.')}; a regression "
            "expects real numbers (torch.float32)"
        )
    check_prediction_shape(outputs, targets)
    if targets.dtype.is_floating_point and not bool(torch.isfinite(targets).all()):
        raise WorkloadCodeError(
            "the workload's targets include a NaN or an infinity in the first training batch; a "
            "regression needs finite targets"
        )


def check_prediction_shape(outputs: torch.Tensor, targets: torch.Tensor) -> None:
    """A regression's predictions have the targets' shape, or that shape and a trailing 1 (a
    ``Linear(h, 1)`` head). Checked on every evaluation batch too: a ``.squeeze()`` that drops
    the batch dimension shows only on a batch of one, often the last of an evaluation."""
    trailing_one = (*targets.shape, 1)
    if tuple(outputs.shape) not in (tuple(targets.shape), trailing_one):
        squeezed = (
            " (a .squeeze() drops the batch dimension of a batch of one: squeeze(-1) keeps it)"
            if outputs.dim() < targets.dim()
            else ""
        )
        raise WorkloadCodeError(
            f"the workload's model returned predictions of shape {_shape(outputs.shape)} for targets "
            f"{_shape(targets.shape)}; expected {_shape(targets.shape)} or {_shape(trailing_one)}{squeezed}"
        )


def check_item_losses(item_losses: object, targets: torch.Tensor) -> None:
    """One loss per target (the loss is averaged by the engine, weighted by real items): a loss
    reduced to a scalar, or broadcast to a matrix, would skew both training and the metrics."""
    shape = tuple(item_losses.shape) if isinstance(item_losses, torch.Tensor) else None
    if shape != tuple(targets.shape):
        got = _shape(shape) if shape is not None else type(item_losses).__name__
        raise WorkloadCodeError(
            f"the workload's loss_fn returned {got} for targets {_shape(targets.shape)}; expected one "
            f"loss per target, {_shape(targets.shape)} (e.g. reduction='none')"
        )


def integer_targets(dataset: object) -> torch.Tensor | None:
    """A ``TensorDataset``'s targets, when they are class indices (readable at once, no item
    loaded); None for any other dataset or for float/bool targets."""
    from torch.utils.data import TensorDataset

    if not isinstance(dataset, TensorDataset) or len(dataset.tensors) < 2:
        return None
    targets = dataset.tensors[1]
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        return None
    return targets


def real_targets(dataset: object) -> torch.Tensor | None:
    """A ``TensorDataset``'s targets as float64 (readable at once); None for any other dataset."""
    from torch.utils.data import TensorDataset

    if not isinstance(dataset, TensorDataset) or len(dataset.tensors) < 2:
        return None
    targets = dataset.tensors[1]
    if targets.dtype.is_complex or targets.dtype == torch.bool:
        return None
    return targets.to(torch.float64)


def check_dataset_targets(dataset: object, num_classes: int, split: str, regression: bool = False) -> None:
    """Every target of a ``TensorDataset`` at once (one vector op), so a bad label deep in the data
    is found before training rather than at whichever step first draws it; other datasets are
    checked batch by batch only in the first step (``check_batch``). A regression's targets must
    be finite: one NaN makes every loss NaN, which would read as a diverged run."""
    if regression:
        values = real_targets(dataset)
        bad = None if values is None else (~torch.isfinite(values.reshape(-1))).nonzero()
        if bad is not None and bad.numel():
            first = int(bad[0])
            raise WorkloadCodeError(
                f"the workload's {split} targets include {float(values.reshape(-1)[first])} "
                f"(value {first}); a regression needs finite targets"
            )
        return
    targets = integer_targets(dataset)
    if targets is None:
        return  # not a TensorDataset; or float targets, which check_batch words with the first batch
    outside = targets[(targets != IGNORE_INDEX) & ((targets < 0) | (targets >= num_classes))]
    if outside.numel():
        raise WorkloadCodeError(
            f"the workload's {split} targets include {int(outside[0])}, outside 0..{num_classes - 1} "
            f"(num_classes is {num_classes}; {IGNORE_INDEX} marks padding)"
        )
