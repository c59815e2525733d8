"""The parts ``run_training`` assembles a run from: the device, the default loss, the evaluator,
the stop signals, the DDP wrapper, the class counts and chance scores of ``status.json``.

Apart from ``run.py`` so that the run's own story (resume, launch, record the result) reads in
one file; a benchmark or a test builds the same evaluator and loss from here.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tuner.errors import UsageError
from tuner.spec import StudySpec
from tuner.train.distributed import SINGLE, Ranks
from tuner.train.evaluation import Evaluator, LossFn, class_counts, fixed_sample
from tuner.train.events import StopReason
from tuner.train.loop import Trainer
from tuner.train.precision import FULL, Precision
from tuner.train.regression_metrics import constant_scores, squared_error_per_item
from tuner.train.rng import derive_seed
from tuner.train.scoring import Scorer
from tuner.train.workload_errors import real_targets
from tuner.workloads import IGNORE_INDEX, Workload


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("training.device is 'cuda' but no CUDA device is visible")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def cross_entropy_per_item(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Default loss: one cross-entropy per target item; padding (``IGNORE_INDEX``) gives 0."""
    if logits.dim() == 2:  # no reshape views: each costs a forward and a backward node per step
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="none")
    losses = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return losses.reshape(targets.shape)


def default_loss(workload: Workload) -> LossFn:
    """The workload's own loss, else its task's: cross-entropy, or the squared error."""
    if workload.loss_fn is not None:
        return workload.loss_fn
    return squared_error_per_item if workload.regression else cross_entropy_per_item


def build_scorer(workload: Workload, *, num_classes: int | None, may_pad: bool = True) -> Scorer:
    """How a batch of ``workload`` is scored (``tuner.train.scoring``): its ``step``, else its model
    with its ``loss_fn`` or the task's (or, with no ``loss_fn``, a model's own loss)."""
    return Scorer(
        default_loss(workload),
        model_loss=workload.loss_fn is None,
        regression=workload.regression,
        num_classes=num_classes,
        may_pad=may_pad,
        shift_labels=workload.shift_labels,
        step=workload.step,
    )


def build_evaluator(
    workload: Workload,
    spec: StudySpec,
    device: torch.device,
    ranks: Ranks = SINGLE,
    precision: Precision = FULL,
) -> Evaluator:
    training = spec.training
    splits = {"val": workload.eval_data, "train": workload.train_data}
    subsets = {}
    train_size = len(workload.train_data)  # type: ignore[arg-type]
    if training.train_eval_examples is not None and training.train_eval_examples < train_size:
        subsets["train"] = fixed_sample(
            train_size, training.train_eval_examples, derive_seed(spec.seed, "train-eval")
        )
    samples = fixed_sample(
        len(workload.eval_data),
        training.prediction_samples,  # type: ignore[arg-type]
        derive_seed(spec.seed, "predictions"),
    )
    return Evaluator(
        splits,
        metrics=workload.builtin_metrics,
        num_classes=workload.num_classes,
        batch_size=training.resolved_eval_batch_size,
        device=device,
        subsets=subsets,
        prediction_indices=samples,
        ranks=ranks,
        regression=workload.regression,
        scorer=build_scorer(workload, num_classes=workload.num_classes),
        own_metrics=workload.own_metrics,
        precision=precision,
        collate=workload.collate,
    )


@contextlib.contextmanager
def stop_on_signals(
    trainer: Trainer, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
) -> Iterator[None]:
    """Ctrl-C / SIGTERM (preemption) stop at the next step boundary with a checkpoint.

    A second one (Ctrl-C or SIGTERM) raises ``KeyboardInterrupt`` at once, for a user who really
    wants out: the run stays resumable from its last checkpoint (every file is written atomically).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1:
            raise KeyboardInterrupt
        trainer.request_stop(StopReason.INTERRUPTED)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def ddp_model(model: torch.nn.Module, device: torch.device, sync_batch_norm: bool) -> torch.nn.Module:
    """The ``DistributedDataParallel`` wrapper the training forward goes through.

    ``forward_sync_buffers=False``: DDP would otherwise copy rank 0's batch-norm statistics over
    every rank's at each forward, and the other ranks' data would never count; the engine
    averages them before every eval and checkpoint instead (``average_batch_norm_stats``).
    The wrapper shares the model's parameters (it is built after the initial weights, which are
    the same on every rank, and it broadcasts rank 0's once more to be sure).
    """
    from torch.nn.parallel import DistributedDataParallel

    if sync_batch_norm:
        # batch norms become SyncBatchNorm (same parameters and buffers), ghost ones stay per device
        from tuner.workloads import convert_sync_batch_norm

        model = convert_sync_batch_norm(model)
    return DistributedDataParallel(
        model, device_ids=[device.index or 0] if device.type == "cuda" else None, forward_sync_buffers=False
    )


def compiled(model: torch.nn.Module, backend: bool | str) -> torch.nn.Module:
    """``torch.compile(model)`` (``training.compile``: ``True`` for torch's default backend, or a
    backend's name): an ``OptimizedModule`` that shares the model's parameters, so the optimizer,
    the checkpoints and ``load_model`` see the plain module."""
    if isinstance(backend, str):
        known = torch._dynamo.list_backends(exclude_tags=())
        if backend not in known:
            raise UsageError(
                f"training.compile: no torch.compile backend {backend!r}; known: {', '.join(known)}"
            )
        return torch.compile(model, backend=backend)  # type: ignore[return-value]
    return torch.compile(model)  # type: ignore[return-value]


def split_class_counts(workload: Workload, evaluator: Evaluator) -> dict[str, list[int]]:
    """Examples per class of each evaluated split, for imbalanced data (``status.json``'s
    ``class_counts``): ``val`` (what validation used), ``train`` (the whole training split) and,
    when the train split is scored on a sample (``train_eval_examples``), ``train_eval_sample``."""
    counts: dict[str, list[int]] = {}
    for name, dataset, indices in (
        ("val", workload.eval_data, None),
        ("train", workload.train_data, None),
        ("train_eval_sample", workload.train_data, evaluator.subsets.get("train")),
    ):
        if name == "train_eval_sample" and indices is None:
            continue
        found = class_counts(dataset, workload.num_classes, indices)
        if found is not None:
            counts[name] = found
    return counts


def chance_scores(workload: Workload) -> dict[str, dict[str, float]]:
    """What always predicting the training targets' mean (median for ``mae``) scores on each split
    (``status.json``'s ``chance``): the report's "nothing learned" line for a regression. Empty
    unless both splits are ``TensorDataset`` s (any other would mean loading every item to read
    the targets)."""
    train, val = real_targets(workload.train_data), real_targets(workload.eval_data)
    if train is None or val is None or not train.numel() or not val.numel():
        return {}
    default = workload.loss_fn is None
    return {
        split: constant_scores(workload.builtin_metrics, targets, train, default)
        for split, targets in (("val", val), ("train", train))
    }
