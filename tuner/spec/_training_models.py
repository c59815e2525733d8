"""How one run trains: the optimizer, the LR schedule's segments, and every training field."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from tuner.spec._base import Fraction, NonNegativeInt, PositiveFloat, PositiveInt, _Model

#: The optimizers known by a short name; ``momentum`` and ``nesterov`` are SGD with (Nesterov) momentum.
SHORT_OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw")
#: Which parameters ``no_weight_decay`` can exempt: biases, and the weights of normalisation layers.
DECAY_EXEMPT = ("bias", "norm")
#: Accelerate's ``mixed_precision`` words and bare numbers, read as Lightning's ``precision`` words.
PRECISION_ALIASES: dict[Any, str] = {
    "no": "32-true", "fp32": "32-true", "32": "32-true", 32: "32-true",
    "bf16": "bf16-mixed", "fp16": "16-mixed", "16": "16-mixed", 16: "16-mixed",
}  # fmt: skip


def _divisor_below(total: int, limit: int) -> int:
    """The largest divisor of ``total`` not above ``limit`` (a micro-batch size that fits)."""
    return max(d for d in range(1, min(total, limit) + 1) if total % d == 0)


# fields that only the short names read (their meaning is fixed there)
_SHORT_NAME_FIELDS = {
    "momentum": ("momentum", "nesterov"),
    "beta1": ("adam", "adamw"),
    "beta2": ("adam", "adamw"),
    "eps": ("adam", "adamw"),
}


class OptimizerSpec(_Model):
    """The optimizer and its fixed hyperparameters (``lr`` is the base LR the schedule scales)."""

    name: str = Field(default="adamw", pattern=r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_.]*)?$")
    """A short name (`sgd`, `momentum` and `nesterov`: SGD with (Nesterov) momentum, `adam`,
    `adamw`), any `torch.optim` class (`RMSprop`, `NAdam`, `torch.optim.Adagrad`) or an importable
    class `package.module:Class`; a class takes `lr`, `weight_decay` and `options`."""
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
    options: dict[str, Any] = Field(default_factory=dict)
    """More keyword arguments of the optimizer's class (e.g. `{alpha: 0.9, centered: true}` for
    `RMSprop`, `{amsgrad: true}` for `adamw`); searchable as `optimizer.options.<name>`."""
    no_weight_decay: list[Literal["bias", "norm"]] = Field(default_factory=list)
    """Parameters trained without weight decay: `bias` (every bias) and `norm` (the weights of
    normalisation layers: batch, layer, group, instance and RMS norms), the usual recipe for
    transformers; the rest decay by `weight_decay`."""

    @field_validator("name")
    @classmethod
    def _short_name_or_class(cls, name: str) -> str:
        """A lower-case name is one of the short names (``adamm`` is a typo, not a class); a class
        is named as Python spells it (``RMSprop``), checked when the optimizer is built."""
        if name in SHORT_OPTIMIZERS or not name[:1].islower() or "." in name or ":" in name:
            return name
        import difflib

        close = difflib.get_close_matches(name, SHORT_OPTIMIZERS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"expected sgd, momentum, nesterov, adam, adamw, a torch.optim class (RMSprop, NAdam...) "
            f"or package.module:Class, got {name!r}{hint}"
        )

    @model_validator(mode="after")
    def _fields_fit_the_optimizer(self) -> OptimizerSpec:
        if self.name in SHORT_OPTIMIZERS:
            return self
        for field, names in _SHORT_NAME_FIELDS.items():
            if field in self.model_fields_set:
                raise ValueError(
                    f"{field} applies to {' and '.join(names)} only; for the class {self.name} give "
                    f"it in options, by the class's own argument name"
                )
        return self

    @model_serializer(mode="wrap")
    def _only_fields_it_reads(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A class's dump leaves out the short names' fields (their defaults, unread): a saved
        study (a run's ``config.yaml``, a round's stored plan) is validated again when read, and
        would otherwise hold ``momentum`` for ``RMSprop``, which the check above refuses."""
        data = handler(self)
        if not self.short_name:
            for field in _SHORT_NAME_FIELDS:
                data.pop(field, None)
        return data

    @property
    def short_name(self) -> bool:
        """Whether ``name`` is one of tuner's short names (whose fields it reads), not a class."""
        return self.name in SHORT_OPTIMIZERS


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
    best, and a tie on the objective goes to the lower validation loss, then the earlier step."""
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
    precision: Literal["32-true", "bf16-mixed", "16-mixed"] = "32-true"
    """Lightning's words: `32-true` (float32), `bf16-mixed` (the forward pass and the loss under
    bfloat16 autocast) or `16-mixed` (float16 autocast, with a gradient scaler whose state the
    checkpoints keep); Accelerate's `no`, `bf16` and `fp16` are taken too."""
    micro_batch_size: PositiveInt | None = None
    """Train each process's share of a batch in micro-batches of this many examples, adding up
    their gradients (one optimizer step per batch, the same update as one pass over the batch):
    the memory of a micro-batch, the batch of `batch_size`. It must divide the share."""
    compile: bool | Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")] = False
    """Train and evaluate through `torch.compile(model)`: `true` (its default backend, inductor)
    or a backend's name (`aot_eager`...). The checkpoints keep the plain module's weights, so they
    load without it."""
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

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_words(cls, value: Any) -> Any:
        """Accelerate's and the bare numbers' words for Lightning's: ``bf16`` is ``bf16-mixed``."""
        return PRECISION_ALIASES.get(value, value) if isinstance(value, str | int) else value

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
        share = self.batch_size // ranks
        if self.micro_batch_size is not None and share % self.micro_batch_size:
            of = (
                f"batch_size {share}"
                if ranks == 1
                else f"each process's share ({share} of batch_size {self.batch_size})"
            )
            fits = _divisor_below(share, self.micro_batch_size)
            raise ValueError(
                f"micro_batch_size {self.micro_batch_size} does not divide {of}: micro-batches must "
                f"split every batch evenly (e.g. micro_batch_size {fits})"
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
