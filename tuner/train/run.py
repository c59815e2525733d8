"""One training run from a study spec: assemble the engine, resume if possible, record the result."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import signal
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape

from tuner._atomic import atomic_write_text
from tuner._streams import PipeSafeConsole
from tuner.errors import TunerError, UsageError, WorkloadCodeError
from tuner.output import shown_path
from tuner.spec import StudySpec
from tuner.train.build import build_workload
from tuner.train.checkpoints import LATEST, CheckpointCallback, resume_point
from tuner.train.data import StepBatches
from tuner.train.distributed import SINGLE, Ranks
from tuner.train.events import Callback, StopReason
from tuner.train.first_batch import check_objective_computed
from tuner.train.launch import launch
from tuner.train.loggers import CsvLogger, PredictionsLogger, TensorBoardLogger
from tuner.train.loop import Trainer, may_contain_padding
from tuner.train.nodes import run_on_nodes
from tuner.train.objective import ObjectiveTracker
from tuner.train.optimizers import build_optimizer
from tuner.train.precision import resolve_precision
from tuner.train.progress import ProgressCallback
from tuner.train.proxy import proxy_split
from tuner.train.rng import derive_seed, seed_torch, trial_seeds
from tuner.train.run_folder import has_ended, locked_run_dir, prepare_run_dir, write_status
from tuner.train.run_parts import (
    build_evaluator,
    build_scorer,
    chance_scores,
    compiled,
    ddp_model,
    resolve_device,
    split_class_counts,
    stop_on_signals,
)
from tuner.train.schedules import build_schedule
from tuner.train.workload_errors import blame_workload, check_dataset_targets


@dataclass
class RunResult:
    run_dir: Path
    status: str  # completed | target_reached | diverged | interrupted | stopped
    message: str
    step: int
    max_train_steps: int
    resumed_from_step: int
    best_value: float | None
    best_step: int | None
    last_eval: dict[str, float] = field(default_factory=dict)
    #: what "val/..." metrics were computed on: "the workload's evaluation split" or "proxy (...)"
    validation: str = "the workload's evaluation split"


def run_training(
    spec: StudySpec,
    run_dir: Path,
    *,
    base_dir: Path,
    console: Console | None = None,
    extra_callbacks: Sequence[Callback] = (),
    data_seed: int | None = None,
    command: str | None = None,
    progress: bool = True,
    stop_signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    lock_wait_s: float = 0.0,
    start_method: str = "spawn",
) -> RunResult:
    """Train ``spec`` in ``run_dir``, resuming from its newest checkpoint that verifies (its
    ``latest.pt``, else a best one: ``checkpoints.resume_point``) if there is one.

    ``stop_signals`` stop the run cleanly (checkpoint, status ``interrupted``); ``lock_wait_s``
    is how long to wait for a dying process that still holds the run folder.
    With ``training.processes_per_trial`` N > 1 this process launches N ranks (``launch``:
    ``start_method`` "fork" only where no torch operation has run yet) and waits for them;
    ``extra_callbacks`` then run in rank 0, and their state comes back here when it ends.
    Side effects: writes the run folder (see ``run_folder``); reseeds the global RNGs.
    """
    training = spec.training
    if training.max_train_steps is None:
        raise UsageError(
            "training.max_train_steps is not set: set it in the study file (or with --set max_train_steps=N)"
        )
    try:
        schedule = build_schedule(training.schedule, training.max_train_steps)
    except ValueError as error:
        raise UsageError(f"training.schedule: {error}") from None
    run_dir = Path(run_dir)
    created = _first_missing(run_dir)
    with locked_run_dir(run_dir, wait_s=lock_wait_s):
        prepare_run_dir(run_dir, spec, command, base_dir)
        job = _RunJob(spec, run_dir, base_dir, schedule, console, list(extra_callbacks), data_seed, progress)
        try:
            if training.launcher != "local":  # torchrun agents, on one node or several
                _check_sync_batch_norm(training)
                return run_on_nodes(job, run_rank, stop_signals)
            if training.processes_per_trial == 1:
                return _run(job, stop_signals)
            return _run_ranks(job, start_method)
        except BaseException as error:
            trained = (run_dir / "checkpoints" / LATEST).exists()
            if isinstance(error, UsageError) and created is not None and not trained:
                # bad input found before any training: its one-line error says everything, and an
                # empty run folder would only be a decoy (a failure later keeps its error.log)
                _remove_created(run_dir, created)
                raise
            interrupted = isinstance(error, KeyboardInterrupt)
            blamed = None if interrupted else blame_workload(error)
            if not interrupted:
                # a multi-process run's error carries every failed rank's own traceback
                trace = getattr(error, "rank_tracebacks", None) or traceback.format_exc()
                atomic_write_text(run_dir / "error.log", trace, durable=False)
            said = blamed or error
            # tuner's own errors (a data worker's WorkloadCodeError, another rank's) say what they are
            message = str(said) if isinstance(said, TunerError) else f"{type(error).__name__}: {error}"
            # a Ctrl-C that lands after the run ended (its status written) changes nothing on disk
            if not (interrupted and has_ended(run_dir)):
                write_status(
                    run_dir,
                    durable=training.fsync_checkpoints,
                    status="interrupted" if interrupted else "failed",
                    message="" if interrupted else message,
                )
            if isinstance(error, WorkloadCodeError):
                error.log_path = shown_path(str(run_dir / "error.log"))
            if blamed is not None:
                blamed.log_path = shown_path(str(run_dir / "error.log"))
                raise blamed from error
            raise


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (inclusive) that does not exist yet; None if it exists."""
    missing = None
    while not path.exists() and path != path.parent:
        missing, path = path, path.parent
    return missing


def _remove_created(run_dir: Path, created: Path) -> None:
    """Remove ``run_dir`` and the empty parents this run created, up to ``created``."""
    shutil.rmtree(run_dir, ignore_errors=True)
    folder = run_dir.parent
    while created == folder or created in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


@dataclass
class _RunJob:
    """What every rank of a run needs (pickled to spawned ranks, so: data, not open things)."""

    spec: StudySpec
    run_dir: Path
    base_dir: Path
    schedule: Any
    console: Console | None
    extra_callbacks: list[Callback]
    data_seed: int | None
    progress: bool


def _run_ranks(job: _RunJob, start_method: str) -> RunResult:
    """Launch ``processes_per_trial`` ranks of ``_run``; rank 0's result, its callbacks' state here."""
    training = job.spec.training
    device = _check_sync_batch_norm(training)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl":
        start_method = "spawn"  # a CUDA context does not survive a fork
    if start_method == "spawn":
        job = dataclasses.replace(job, console=None)  # a terminal does not pickle; rank 0 opens stderr
    result, states = launch(
        functools.partial(run_rank, job),
        training.processes_per_trial,
        backend=backend,
        start_method=start_method,
        threads_per_rank=max(1, torch.get_num_threads() // training.processes_per_trial),
    )
    for callback in job.extra_callbacks:  # e.g. sweep-lr's fit criterion: what rank 0's saw
        if callback.state_key in states:
            callback.load_state_dict(states[callback.state_key])
    return result


def _check_sync_batch_norm(training: Any) -> torch.device:
    device = resolve_device(training.device)
    if training.sync_batch_norm and device.type != "cuda":
        raise UsageError(
            "training.sync_batch_norm needs CUDA devices (torch's SyncBatchNorm has no CPU version); "
            "on CPU the ranks' batch-norm statistics are averaged before every eval and checkpoint"
        )
    return device


def run_rank(job: _RunJob, ranks: Ranks) -> tuple[RunResult | None, dict[str, Any]]:
    """One rank's run; its errors are blamed on the workload here, where the traceback is."""
    try:
        result = _run(job, (signal.SIGTERM,), ranks)
    except Exception as error:
        blamed = blame_workload(error)
        if blamed is not None:
            raise blamed from error
        raise
    states = {cb.state_key: cb.state_dict() for cb in job.extra_callbacks} if ranks.is_main else {}
    return (result if ranks.is_main else None), states


def _run(job: _RunJob, stop_signals: Sequence[int], ranks: Ranks = SINGLE) -> RunResult:
    """Train one process's part of the run: the whole run with one process, rank ``ranks.rank``'s
    with several (rank 0 alone writes files and runs the extra callbacks)."""
    spec, run_dir, base_dir, schedule = job.spec, job.run_dir, job.base_dir, job.schedule
    console, extra_callbacks, data_seed = job.console, job.extra_callbacks, job.data_seed
    progress = job.progress
    training = spec.training
    device = resolve_device(training.device)
    seeds = trial_seeds(spec)
    workload = build_workload(spec, base_dir, init_seed=seeds.init)
    for split, dataset in (("training", workload.train_data), ("evaluation", workload.eval_data)):
        check_dataset_targets(dataset, workload.num_classes, split, workload.regression)
    validation = "the workload's evaluation split"
    if training.proxy_fraction > 0:
        # the same held-out part for every trial and seed_index: it depends on the study seed only
        proxy = proxy_split(workload.train_data, training.proxy_fraction, derive_seed(spec.seed, "proxy"))
        workload = dataclasses.replace(workload, train_data=proxy.train, eval_data=proxy.held_out)
        validation = proxy.describe(training.proxy_fraction)
    model = workload.model.to(device)
    precision = resolve_precision(training.precision, device)
    run_data_seed = data_seed if data_seed is not None else seeds.data
    # dropout & co. draw from the data seed, not the init seed; each rank its own draws
    seed_torch(run_data_seed if ranks.is_main else derive_seed(run_data_seed, "rank", ranks.rank))
    evaluator = build_evaluator(workload, spec, device, ranks, precision)
    check_objective_computed(spec, evaluator)
    # status.json's, so rank 0's alone
    per_class = "per_class" in workload.builtin_metrics and ranks.is_main
    split_classes = split_class_counts(workload, evaluator) if per_class else None
    tracker = ObjectiveTracker(spec.objective.metric, spec.objective.direction)
    callbacks: list[Callback] = [tracker]
    if ranks.is_main:  # one writer: the files, the progress and the caller's callbacks are rank 0's
        callbacks += [
            CheckpointCallback(
                run_dir / "checkpoints",
                tracker,
                training.keep_best_checkpoints,
                durable=training.fsync_checkpoints,
            ),
            CsvLogger(run_dir / "metrics.csv", evaluator.output_names(), training.log_every),
            PredictionsLogger(run_dir / "predictions.csv"),
            *extra_callbacks,
        ]
        if training.tensorboard:
            callbacks.append(TensorBoardLogger(run_dir / "tensorboard", training.log_every))
        if progress:
            callbacks.append(
                ProgressCallback(
                    console or PipeSafeConsole(stderr=True),
                    refresh_every=training.log_every,
                    headline=[spec.objective.metric],
                    label=spec.name,
                )
            )
    batches = StepBatches(
        workload.train_data,
        training.batch_size,
        run_data_seed,
        device,
        ranks=ranks,
        data_workers=training.data_workers,
        prefetch_batches=training.prefetch_batches,
        collate=workload.collate,
    )
    train_model = ddp_model(model, device, training.sync_batch_norm) if ranks.distributed else model
    eval_model = model
    if training.compile:  # the plain module's weights are what checkpoints keep
        eval_model = compiled(model, training.compile)
        train_model = compiled(train_model, training.compile) if ranks.distributed else eval_model
    share = training.batch_size // ranks.world_size
    trainer = Trainer(
        model=model,
        batches=batches,
        scorer=build_scorer(
            workload,
            num_classes=workload.num_classes,
            may_pad=not workload.regression and may_contain_padding(batches.dataset, workload.collate),
        ),
        precision=precision,
        micro_batches=share // training.micro_batch_size if training.micro_batch_size else 1,
        optimizer=build_optimizer(training.optimizer, model, workload.param_groups),
        schedule=schedule,
        base_lr=training.optimizer.lr,
        max_train_steps=training.max_train_steps,
        eval_every=training.eval_every,
        evaluator=evaluator,
        callbacks=callbacks,
        grad_clip_norm=training.grad_clip_norm,
        augment=workload.augment if training.augment else None,
        num_classes=workload.num_classes,
        regression=workload.regression,
        ranks=ranks,
        train_model=train_model,
        eval_model=eval_model,
    )
    # loaded to CPU: RNG states must stay CPU tensors; load_state_dict moves weights to the model's device
    resumable = resume_point(run_dir / "checkpoints")
    if ranks.is_main:
        for note in resumable.notes():  # a damaged checkpoint is skipped, and the user told which
            (console or PipeSafeConsole(stderr=True)).print(escape(note))
    if resumable.state is not None:
        trainer.load_state_dict(resumable.state)
    resumed_from = trainer.step
    # closing: the data workers end with the run, whether it completes, stops or raises
    with stop_on_signals(trainer, stop_signals), contextlib.closing(trainer.batches):
        reason = trainer.fit()
    if ranks.distributed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank's run has ended: nothing left to stop
    status = reason.value if isinstance(reason, StopReason) else str(reason)
    if not ranks.is_main:
        return RunResult(run_dir, status, trainer.stop_message, trainer.step, training.max_train_steps,
                         resumed_from, tracker.best_value, tracker.best_step)  # fmt: skip
    write_status(
        run_dir,
        durable=training.fsync_checkpoints,
        status=status,
        message=trainer.stop_message,
        step=trainer.step,
        max_train_steps=training.max_train_steps,
        best_value=tracker.best_value,
        best_step=tracker.best_step,
        objective=spec.objective.metric,
        direction=spec.objective.direction,
        # the report's chance level (tuner.report.learning): the class count, or a regression's
        # scores of predicting the training mean
        **(
            {"task": "regression", "chance": chance_scores(workload)}
            if workload.regression
            else {"num_classes": workload.num_classes}
        ),
        last_eval=trainer.last_eval,
        validation=validation,
        eval_examples=evaluator.sizes(),  # the report's noise band of an error rate needs them
        **({"class_counts": split_classes} if split_classes else {}),
    )
    return RunResult(
        run_dir,
        status,
        trainer.stop_message,
        trainer.step,
        training.max_train_steps,
        resumed_from,
        tracker.best_value,
        tracker.best_step,
        dict(trainer.last_eval),
        validation,
    )
