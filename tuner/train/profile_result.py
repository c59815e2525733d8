"""What ``tuner profile`` measured, and its verdict: input-bound or compute-bound.

Plain data, no torch: the command words it (``tuner.cli.profile_cmd``), tests build it by hand.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Waiting for data above this share of step time is "input-bound" (the device idles that long).
INPUT_BOUND_SHARE = 0.20


class Bound(str, enum.Enum):
    INPUT = "input-bound"
    COMPUTE = "compute-bound"


@dataclass(frozen=True)
class StepTimes:
    """Mean seconds per measured step, by what the training thread was doing.

    ``data`` is the wait for the batch (the data stream's ``get``); ``sync`` the host blocked on the
    device (0 without an accelerator); everything else is computing: ``augment``, ``forward``,
    ``backward`` (the loss, backward pass and gradient clipping: from the end of the forward to the
    optimizer's step), ``optimizer``, and ``other`` (the loop's bookkeeping and its callbacks).
    On an accelerator these are host times: kernels run asynchronously, and the host's wait for
    them shows up as ``sync``.
    """

    step: float
    data: float
    augment: float
    forward: float
    backward: float
    optimizer: float
    sync: float

    @property
    def compute(self) -> float:
        return max(0.0, self.step - self.data - self.sync)

    @property
    def other(self) -> float:
        return max(0.0, self.compute - self.augment - self.forward - self.backward - self.optimizer)


@dataclass(frozen=True)
class OperatorTime:
    """One operator's self time (host) per measured step, from the profiler."""

    name: str
    seconds: float
    calls: float


@dataclass(frozen=True)
class ProfileResult:
    """What a profile measured, and the verdict: ``bound`` is ``Bound.INPUT`` when waiting for data
    takes more than ``threshold`` of the mean step time."""

    study: str
    trace_path: Path
    device: str
    accelerator: bool
    skipped_steps: int
    measured_steps: int
    batch_size: int
    threads: int  # torch's intra-op threads (torch.get_num_threads())
    data_workers: int
    prefetch_batches: int
    times: StepTimes
    top_operators: tuple[OperatorTime, ...]
    #: each measured step's seconds, in order: how far the mean can be trusted (a busy machine,
    #: a garbage collection or a slow read shows up as a few outliers)
    step_seconds: tuple[float, ...] = ()
    notes: tuple[str, ...] = ()
    threshold: float = INPUT_BOUND_SHARE

    def share(self, seconds: float) -> float:
        return seconds / self.times.step if self.times.step > 0 else 0.0

    @property
    def data_share(self) -> float:
        return self.share(self.times.data)

    @property
    def compute_share(self) -> float:
        return self.share(self.times.compute)

    @property
    def sync_share(self) -> float:
        return self.share(self.times.sync)

    @property
    def mean_over_median(self) -> float:
        """How far a few slow steps pull the mean up: ~1 for steady steps; above 2, some steps
        stalled (another process on the same cores, garbage collection, a slow read), and the
        shares describe those stalls as much as the training."""
        if not self.step_seconds:
            return 1.0
        median = statistics.median(self.step_seconds)
        return self.times.step / median if median > 0 else 1.0

    @property
    def bound(self) -> Bound:
        return Bound.INPUT if self.data_share > self.threshold else Bound.COMPUTE

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json`` (seconds, shares as fractions of the mean step time)."""
        data = asdict(self)
        data["trace_path"] = str(self.trace_path)
        data["times"] = {**asdict(self.times), "compute": self.times.compute, "other": self.times.other}
        data["mean_over_median"] = self.mean_over_median
        data["shares"] = {"data": self.data_share, "compute": self.compute_share, "sync": self.sync_share}
        data["bound"] = self.bound.value
        data["notes"] = list(self.notes)
        data["top_operators"] = [asdict(op) for op in self.top_operators]
        return data
