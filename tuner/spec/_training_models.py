"""How one run trains: the optimizer, the LR schedule's segments, and every training field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tuner.spec._base import Fraction, NonNegativeInt, PositiveFloat, PositiveInt, _Model


class OptimizerSpec(_Model):
    """The optimizer and its fixed hyperparameters (``lr`` is the base LR the schedule scales)."""

    name: Literal["sgd", "momentum", "nesterov", "adam", "adamw"] = "adamw"
    """`sgd`, `momentum` or `nesterov` (SGD with (Nesterov) momentum), `adam`, `adamw`."""
    lr: PositiveFloat = 1e-3
    """The base learning rate; the schedule's segments multiply it."""
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    """Weight decay (decoupled for `adamw`, L2 added to the gradient otherwise)."""
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    """Momentum of `momentum` and `nesterov`."""
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    """Adam's first-moment decay (`adam`, `adamw`)."""
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    """Adam's second-moment decay (`adam`, `adamw`)."""
    eps: PositiveFloat = 1e-8
    """Adam's epsilon (`adam`, `adamw`)."""


class ScheduleSegment(_Model):
    """One piece of the LR schedule, as multipliers of ``optimizer.lr``.

    Length is ``steps`` or ``fraction`` (of ``max_train_steps``); one segment may give neither
    and takes whatever is left, which is how round 2 stretches a schedule.
    """

    shape: Literal["constant", "linear", "cosine"]
    """How the multiplier goes from `start` to `end`: `constant`, `linear` or `cosine`."""
    steps: PositiveInt | None = None
    """The segment's length in steps (or give `fraction`, or neither: it takes the rest)."""
    fraction: Fraction | None = None
    """The segment's length as a fraction of `max_train_steps`; fractions end on cumulative
    boundaries, so fractions adding up to 1 fill the run exactly."""
    start: Annotated[float, Field(ge=0)] = 1.0
    """The multiplier of `optimizer.lr` at the segment's first step."""
    end: Annotated[float, Field(ge=0)] | None = None
    """The multiplier at its last step (default: `start` for `constant`, 0 otherwise)."""

    @model_validator(mode="after")
    def _one_length(self) -> ScheduleSegment:
        if self.steps is not None and self.fraction is not None:
            raise ValueError("give either steps or fraction, not both")
        return self


class TrainingSpec(_Model):
    """How one run trains: its length, evals, checkpoints, devices, optimizer and LR schedule."""

    batch_size: PositiveInt = 64
    """The training batch (the global batch when a trial runs as several processes)."""
    eval_batch_size: PositiveInt | None = None
    """The evaluation batch (default: 4 x `batch_size`: no gradients to keep)."""
    max_train_steps: PositiveInt | None = None
    """The production length in steps. Left out, `tuner sweep-lr`'s recommendation (stored with
    the study) is used by `train` and the rounds; a value here always wins."""
    eval_every: PositiveInt = 100
    """Evaluate (and checkpoint) every N steps, and after the last step."""
    log_every: PositiveInt = 10
    """Log the training loss and LR every N steps."""
    keep_best_checkpoints: NonNegativeInt = 3
    """Keep the N best checkpoints by the objective (plus `latest.pt` for resuming); NaN is never
    best."""
    fsync_checkpoints: bool = False
    """Also fsync each checkpoint and the run folder's small files, so they survive a power cut
    (about 1 ms each); without it they survive any process death already (temp file + rename)."""
    prediction_samples: NonNegativeInt = 16
    """Validation examples whose predictions are saved at every eval (a fixed, seeded sample)."""
    train_eval_examples: PositiveInt | None = None
    """Cap the `train` split's evaluation to a fixed sample of N examples (default: all)."""
    grad_clip_norm: PositiveFloat | None = None
    """Clip the gradient's norm to this value (default: no clipping)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`auto` (CUDA if visible), `cpu` or `cuda`."""
    tensorboard: bool = True
    """Write a TensorBoard log in the run folder."""
    seed_index: NonNegativeInt = 0
    """0: the model-init and data-order seeds derived from the study's seed; k > 0: the k-th other
    pair (round 2's `seeds`). The validation split never changes with it."""
    proxy_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """> 0: validate on this seeded fraction of the training split and train on the rest (round
    1's proxy split sets it); the real validation split is then not looked at."""
    augment: bool = True
    """Apply the workload's augmentation (sweep-lr switches it off)."""
    processes_per_trial: PositiveInt = 1
    """Train every run and trial as N processes with `DistributedDataParallel` (gloo on CPU, nccl
    on CUDA); `batch_size` stays the global batch and must divide by N."""
    sync_batch_norm: bool = False
    """With N > 1 processes on CUDA: `SyncBatchNorm` in the training forward pass."""
    nodes: PositiveInt = 1
    """One trial over N machines, `processes_per_trial` ranks on each, started by `launcher`."""
    launcher: Literal["local", "torchrun", "slurm", "command"] = "local"
    """How a trial's ranks start: `local` (this machine, no agent), `torchrun`, `slurm` or
    `command` (one `torchrun` agent per node)."""
    launch_command: str | None = None
    """For `launcher: command`: run once per node, holding `{torchrun}` (e.g. `ssh node{node}
    {torchrun}`)."""
    rendezvous_host: str | None = None
    """For `launcher: command`: the host of node 0's agent (default: this machine)."""
    data_workers: NonNegativeInt = 0
    """DataLoader worker processes that read and collate the training batches ahead of the step
    (0: on the training thread); the batches are the same either way."""
    prefetch_batches: PositiveInt = 2
    """Batches each data worker prepares ahead (DataLoader's `prefetch_factor`)."""
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    """The optimizer and its fixed hyperparameters."""
    schedule: list[ScheduleSegment] = Field(
        default_factory=lambda: [ScheduleSegment(shape="constant")], min_length=1
    )
    """The LR schedule: segments run in order, multipliers of `optimizer.lr` (default: one
    constant segment); after the last the LR holds its final value."""

    @field_validator("schedule")
    @classmethod
    def _at_most_one_open_segment(cls, segments: list[ScheduleSegment]) -> list[ScheduleSegment]:
        open_segments = [s for s in segments if s.steps is None and s.fraction is None]
        if len(open_segments) > 1:
            raise ValueError("at most one segment may leave out steps/fraction (it takes the rest)")
        return segments

    @model_validator(mode="after")
    def _batch_splits_across_processes(self) -> TrainingSpec:
        ranks = self.processes_per_trial * self.nodes
        if self.batch_size % ranks:
            across = f"processes_per_trial {self.processes_per_trial}" + (
                f" x nodes {self.nodes} = {ranks} ranks" if self.nodes > 1 else ""
            )
            raise ValueError(
                f"batch_size {self.batch_size} is the global batch and must split evenly across "
                f"{across} (each process trains on an equal share)"
            )
        return self

    @model_validator(mode="after")
    def _nodes_have_a_launcher(self) -> TrainingSpec:
        if self.nodes > 1 and self.launcher == "local":
            raise ValueError(
                f"nodes {self.nodes} needs a launcher that starts each node's ranks: "
                "torchrun, slurm or command"
            )
        if self.launcher == "command":
            if not self.launch_command or "{torchrun}" not in self.launch_command:
                raise ValueError(
                    "launcher command needs launch_command, run once per node, holding {torchrun} "
                    "(e.g. 'ssh node{node} {torchrun}')"
                )
            try:
                self.launch_command.format(
                    torchrun="", node=0, nodes=1, rdzv_endpoint="", rdzv_id="", attempt_dir=""
                )
            except (KeyError, IndexError, ValueError) as error:
                raise ValueError(
                    f"launch_command: unknown placeholder {error} (known: {{torchrun}}, {{node}}, {{nodes}}, "
                    "{rdzv_endpoint}, {rdzv_id}, {attempt_dir})"
                ) from None
        return self

    @property
    def resolved_eval_batch_size(self) -> int:
        return self.eval_batch_size or 4 * self.batch_size
