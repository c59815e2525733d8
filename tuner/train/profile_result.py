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
#: The training thread waiting for a CPU core (runnable, not running) above this share of the
#: measured time: the machine is busy, and the profile says so.
BUSY_SHARE = 0.25


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

    These are wall times. ``core_wait`` is how long the training thread, ready to run, waited for
    a CPU core that other processes held (Linux's run-queue delay, ``/proc/thread-self/schedstat``)
    and ``data_core_wait`` the part of it inside ``data``: on a busy machine they stretch whatever
    part they land in, so the verdict leaves them out (``ProfileResult``).
    """

    step: float
    data: float
    augment: float
    forward: float
    backward: float
    optimizer: float
    sync: float
    core_wait: float = 0.0
    data_core_wait: float = 0.0

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
    takes more than ``threshold`` of the mean step time.

    The shares and the verdict count the step's own time: its wall time less the time the training
    thread waited for a CPU core (``StepTimes.core_wait``). Another process on the same cores
    stretches the data part and the compute part alike, now one, now the other; on a few steps of a
    small model that flipped the verdict with the machine's load. Without the wait, the verdict is
    the machine's own. Where that wait cannot be measured (no ``schedstat``), a load average
    above the core count makes the profile say its verdict is unreliable.
    """

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
    #: whether ``times.core_wait`` was measured (Linux); else the load average speaks for the load
    core_wait_measured: bool = False
    load_average: float | None = None  # over the last minute, when the profile ended
    cores: int = 1  # the cores this process may run on

    @property
    def own_step(self) -> float:
        """The mean step without the wait for a CPU core: what it takes on a machine of its own."""
        return max(0.0, self.times.step - self.times.core_wait)

    @property
    def own_data(self) -> float:
        return max(0.0, self.times.data - self.times.data_core_wait)

    @property
    def own_compute(self) -> float:
        return max(0.0, self.own_step - self.own_data - self.times.sync)

    def share(self, seconds: float) -> float:
        """A share of the step's own time (``seconds`` without the wait for a core)."""
        return seconds / self.own_step if self.own_step > 0 else 0.0

    def wall_share(self, seconds: float) -> float:
        """A share of the mean wall step, for wall times (an operator's, augmentation's)."""
        return seconds / self.times.step if self.times.step > 0 else 0.0

    @property
    def own_fraction(self) -> float:
        """The computing parts' wall times times this: their share of the wait left out, spread
        in proportion (the wait is measured for the step and its data part, not each part)."""
        return self.own_compute / self.times.compute if self.times.compute > 0 else 1.0

    @property
    def data_share(self) -> float:
        return self.share(self.own_data)

    @property
    def compute_share(self) -> float:
        return self.share(self.own_compute)

    @property
    def core_wait_share(self) -> float:
        """The share of the measured wall time the training thread waited for a CPU core."""
        return self.times.core_wait / self.times.step if self.times.step > 0 else 0.0

    @property
    def busy(self) -> bool:
        """Another process held the cores: measured, or (unmeasurable) a load above the cores."""
        if self.core_wait_measured:
            return self.core_wait_share > BUSY_SHARE
        return self.load_average is not None and self.load_average > self.cores

    @property
    def verdict_reliable(self) -> bool:
        """A busy machine's verdict holds when the wait for a core was measured and left out."""
        return self.core_wait_measured or not self.busy

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
        data["core_wait_share"] = self.core_wait_share
        data["busy"] = self.busy
        data["verdict_reliable"] = self.verdict_reliable
        data["notes"] = list(self.notes)
        data["top_operators"] = [asdict(op) for op in self.top_operators]
        return data
