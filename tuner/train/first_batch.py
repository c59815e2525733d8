"""One batch through a study's workload, checked as a run checks its first step, and nothing else.

``tuner validate`` calls ``check_first_batch``: a workload that a run would stop at its first
step (a wrong class count, float targets for a classifier, a loss reduced to a scalar, an
objective the workload does not compute, an option it never reads) is said there, in the very
words the run would use, before any trial is started. It uses the engine's own parts (the
workload's build, the batches, the scorer every step goes through with its first-batch checks,
the evaluator), so the two cannot drift: what validate passes, the first step passes.

It writes no file and takes no optimizer step. The batch runs on the run's GPU where this machine
has one, else on the CPU (validate may run where the study's GPUs are not), in rank 0's share of
the batch when a trial has several processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tuner.errors import WorkloadError
from tuner.spec import StudySpec
from tuner.train.batch_structure import batch_length
from tuner.train.build import build_workload
from tuner.train.data import StepBatches
from tuner.train.distributed import Ranks
from tuner.train.evaluation import Evaluator
from tuner.train.fit import check_fit_metric
from tuner.train.loop import may_contain_padding
from tuner.train.precision import resolve_precision
from tuner.train.rng import seed_torch, trial_seeds
from tuner.train.run_parts import build_evaluator, build_scorer
from tuner.train.workload_errors import blame_workload, check_dataset_targets
from tuner.workloads import sweep_reads_fit_metric


@dataclass(frozen=True)
class FirstBatchReport:
    """What the build and the batch showed: the model, the data, one training batch's loss."""

    model: str  # the model's class name
    parameters: int
    train_examples: int
    eval_examples: int
    batch_examples: int  # rows of the batch one process trains on at step 1
    loss: float
    outputs: tuple[int, ...]  # the shape of what the metrics score for it (empty: a loss alone)


def check_objective_computed(spec: StudySpec, evaluator: Evaluator) -> None:
    """``objective.metric`` is one the workload's evaluation computes (a user workload names its
    metrics in its code, so only a build can tell); a run checks it before its first step."""
    computed = evaluator.output_names()
    if spec.objective.metric not in computed:
        raise WorkloadError(
            f"objective.metric {spec.objective.metric!r} is not computed by this workload; "
            f"it computes: {', '.join(computed)}"
        )


def check_first_batch(spec: StudySpec, base_dir: Path) -> FirstBatchReport:
    """Build ``spec``'s workload and push one training batch through it (forward and loss), then
    one evaluation batch of each split; raise the error a run would raise at or before its first
    step (``WorkloadError``, ``WorkloadCodeError`` naming the user's line) or return what it saw.

    Side effect: reseeds the global RNGs (as ``build_workload`` does).
    """
    try:
        return _first_batch(spec, base_dir)
    except Exception as error:
        blamed = blame_workload(error)
        if blamed is None:
            raise
        raise blamed from error


def _first_batch(spec: StudySpec, base_dir: Path) -> FirstBatchReport:
    training, seeds = spec.training, trial_seeds(spec)
    device = torch.device("cuda" if training.device != "cpu" and torch.cuda.is_available() else "cpu")
    precision = resolve_precision(training.precision, device)
    workload = build_workload(spec, base_dir, init_seed=seeds.init)
    for split, dataset in (("training", workload.train_data), ("evaluation", workload.eval_data)):
        check_dataset_targets(dataset, workload.num_classes, split, workload.regression)
    evaluator = build_evaluator(workload, spec, device, precision=precision)
    check_objective_computed(spec, evaluator)
    if sweep_reads_fit_metric(spec):
        check_fit_metric(spec.sweep_lr.fit_metric, evaluator.output_names())
    model = workload.model.to(device)
    model.train()
    seed_torch(seeds.data)  # dropout & co. draw as rank 0 of a run does (``run._run``)
    ranks = Ranks(0, training.processes_per_trial * training.nodes)
    batches = StepBatches(
        workload.train_data, training.batch_size, seeds.data, device, ranks=ranks, collate=workload.collate
    )
    inputs, targets = batches.get(0)
    if workload.augment is not None and training.augment:
        # the generator of the first step's augmentation on rank 0 (``Trainer.train_step``)
        generator = torch.Generator().manual_seed(seeds.data * 1_000_003 * ranks.world_size)
        inputs = workload.augment(inputs, generator)
    scorer = build_scorer(
        workload,
        num_classes=workload.num_classes,
        may_pad=not workload.regression and may_contain_padding(batches.dataset, workload.collate),
    )
    with precision.autocast():  # the first step's own checks, by the scorer every step uses
        scored = scorer(model, inputs, targets)
    _evaluate_one_batch(evaluator, model)
    return FirstBatchReport(
        model=type(model).__name__,
        parameters=sum(parameter.numel() for parameter in model.parameters()),
        train_examples=_size(workload.train_data),
        eval_examples=_size(workload.eval_data),
        batch_examples=batch_length(inputs),
        loss=float(scored.loss.detach()),
        outputs=tuple(scored.outputs.shape) if scored.outputs is not None else (),
    )


def _evaluate_one_batch(evaluator: Evaluator, model: torch.nn.Module) -> None:
    """An evaluation of each split's first eval batch and a few predictions: the eval-mode
    forward, the metrics and the prediction rows a run's first evaluation computes."""
    size = evaluator.batch_size
    evaluator.subsets = {
        split: torch.arange(min(size, _size(dataset))) for split, dataset in evaluator.splits.items()
    }
    evaluator.prediction_indices = evaluator.prediction_indices[:size]
    evaluator.run(model)


def _size(dataset: object) -> int:
    return len(dataset)  # type: ignore[arg-type]
