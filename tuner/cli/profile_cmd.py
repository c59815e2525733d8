"""``tuner profile STUDY``: where a training step's time goes, and what the step is bound by.

The numbers come from ``tuner.train.profile``; this module words them for a user, with the
playbook's usual causes of an input-bound step and the fields to try.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tuner.cli._console import err, error_line, out, plural
from tuner.cli._errors import EXIT_INTERRUPTED, caused_by_interrupt, guarded
from tuner.cli._options import output_dir_option, set_option, study_argument
from tuner.errors import UsageError
from tuner.output import phase_dir, shown_path

if TYPE_CHECKING:
    from tuner.train.profile_result import ProfileResult

DEFAULT_STEPS = 20
#: A mean step this many times the median: say the numbers are unsteady.
UNSTEADY = 2.0
#: tuner.train.profile's SKIPPED_STEPS, for the help text without importing torch (a test checks
#: they agree, and that the docstring's 20% is INPUT_BOUND_SHARE)
HELP_SKIPPED = 5


@guarded
def profile(
    path: Path = study_argument(),
    steps: int = typer.Option(
        DEFAULT_STEPS,
        "--steps",
        metavar="N",
        help=f"Steps to measure, after {HELP_SKIPPED} warm-up steps that are not measured.",
    ),
    output: Path | None = typer.Option(
        None, "--output", metavar="PATH", help="The trace file (default: DIR/<study>/profile/trace.json)."
    ),
    set_: list[str] = set_option("Override a field, e.g. --set data_workers=2."),
    output_dir: Path = output_dir_option("The default trace goes to DIR/<study>/profile/."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> None:
    """Profile a few training steps: time waiting for data, computing and synchronising.

    Writes a chrome-trace JSON file (open it in https://ui.perfetto.dev) and says whether the
    step is input-bound (waiting for data above 20% of step time) or compute-bound.
    """
    from tuner.spec import load_study
    from tuner.workloads import check_study

    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    loaded = load_study(path, set_)
    check_study(loaded)
    if output is None:
        trace_path = phase_dir(output_dir, loaded.spec.name, "profile") / "trace.json"
        try:
            trace_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            folder = shown_path(trace_path.parent)
            raise UsageError(f"cannot create {folder}: {error.strerror or error}") from None
    else:
        trace_path = output
    from tuner.train.profile import SKIPPED_STEPS, check_trace_path, profile_training  # torch

    check_trace_path(trace_path)
    err.print(f"profiling {loaded.spec.name}: {SKIPPED_STEPS} warm-up steps, then {steps} measured")
    try:
        result = profile_training(loaded.spec, loaded.base_dir, steps=steps, trace_path=trace_path)
    except (KeyboardInterrupt, Exception) as error:
        if not caused_by_interrupt(error):  # a Ctrl-C inside a lazy import arrives wrapped
            raise
        error_line("interrupted; no trace written")  # nothing to continue: a profile starts afresh
        # os._exit, not typer.Exit: a Ctrl-C landing while the profiler starts (inside torch's C++)
        # left about 1 run in 3 dying of SIGINT at interpreter exit, though the interrupt was
        # handled here; nothing is left to clean up (the finally blocks above have run)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, allow_nan=False))  # stdout holds the JSON alone
        return
    for line in describe(result, study_arg=str(path)):
        out.print(line, markup=False)


def _ms(seconds: float, unit: str = " ms") -> str:
    """Milliseconds to about three significant digits, without exponents: 0.069, 1.25, 24.5, 312."""
    ms = seconds * 1e3
    if ms == 0:
        return "0" + unit
    decimals = 0 if ms >= 100 else 1 if ms >= 10 else 2 if ms >= 1 else 3
    return f"{ms:.{decimals}f}{unit}"


def _pct(share: float) -> str:
    return f"{share * 100:5.1f}%"


def _spread(step_seconds: tuple[float, ...]) -> str:
    if len(step_seconds) < 2:
        return ""
    return f"; median {_ms(statistics.median(step_seconds))}, slowest {_ms(max(step_seconds))}"


def _busy_note(result: ProfileResult) -> list[str]:
    """Say when other processes held the cores, and what that does to the verdict."""
    if not result.busy:
        return []
    load = (
        f" (load average {result.load_average:.1f} on {plural(result.cores, 'core')})"
        if result.load_average is not None
        else ""
    )
    if not result.core_wait_measured:
        return [
            f"note         machine busy{load}, and the wait for a CPU core cannot be measured here:",
            "             verdict unreliable; re-run on a quiet machine",
        ]
    return [
        f"note         machine busy{load}: the training thread waited for a CPU core "
        f"{result.core_wait_share * 100:.0f}% of the time;",
        "             the shares, their times and the verdict leave that wait out (the step time has it)",
    ]


def describe(result: ProfileResult, study_arg: str = "STUDY") -> list[str]:
    """The human report: the numbers, what bounds the step, and what to try."""
    times = result.times
    threshold = f"{result.threshold * 100:.0f}%"
    parts = [
        ("augmentation", times.augment),
        ("forward", times.forward),
        ("loss+backward", times.backward),
        ("optimizer", times.optimizer),
        ("other", times.other),
    ]
    shown = [(name, sec) for name, sec in parts if sec or name != "augmentation"]
    own = result.own_fraction  # 1 on a quiet machine: the wait for a core left out, in proportion
    breakdown = ", ".join(f"{name} {_ms(sec * own, unit='')}" for name, sec in shown) + " ms"
    sync_detail = (
        "no accelerator: no host-device synchronisation"
        if not result.accelerator
        else "the host waiting for the device (cuda*Synchronize)"
    )
    lines = [
        f"profiled     {result.study} on {result.device} ({plural(result.threads, 'thread')}), "
        f"batch {result.batch_size}, data_workers {result.data_workers}",
        f"step time    {_ms(times.step)} per step (mean{_spread(result.step_seconds)}) over "
        f"{result.measured_steps} measured steps,",
        f"             after {result.skipped_steps} warm-up steps that are not measured",
        f"  waiting for data  {_pct(result.data_share)}  {_ms(result.own_data):>9}  tuner/data in the trace",
        f"  computing         {_pct(result.compute_share)}  {_ms(result.own_compute):>9}  {breakdown}",
        f"  host-device sync  {_pct(result.sync_share)}  {_ms(times.sync):>9}  {sync_detail}",
    ]
    if result.top_operators:
        top = ", ".join(
            f"{op.name} {_ms(op.seconds)} ({result.wall_share(op.seconds) * 100:.0f}%)"
            for op in result.top_operators[:3]
        )
        lines.append(f"top ops      {top} (self time per step)")
    lines += [f"note         {note}" for note in result.notes if not note.startswith("no accelerator")]
    if result.mean_over_median > UNSTEADY:
        spinning = not result.accelerator and result.threads > 1  # torch's threads compete for the cores
        threads = ", or compare with OMP_NUM_THREADS=1" if spinning else ""
        lines += [
            f"note         unsteady: the mean step is {result.mean_over_median:.1f}x the median, so a few "
            "stalled steps weigh on",
            "             the shares (another process on the same cores, garbage collection, a slow read);",
            f"             re-run{threads}",
        ]
    lines += _busy_note(result)
    data = f"waiting for data is {result.data_share * 100:.1f}% of step time (input-bound above {threshold})"
    if not result.verdict_reliable:
        data += "; unreliable: machine busy"
    if result.bound.value == "input-bound":
        suggested = max(2, 2 * result.data_workers)
        lines += [
            f"verdict      INPUT-BOUND: {data}",
            "             the model waits that long for each batch",
            "  usual causes  the data is not local (a network file system, slow storage);",
            "                expensive online preprocessing (the dataset's __getitem__, collation);",
            "                a synchronisation barrier (e.g. .item() on a batch) that defeats prefetching",
            f"  try           training.data_workers (now {result.data_workers}), then, if the wait is "
            "bursty,",
            f"                training.prefetch_batches (now {result.prefetch_batches}), e.g.",
            f"                tuner profile {shlex.quote(study_arg)} --set data_workers={suggested}",
        ]
    else:
        lines += [
            f"verdict      compute-bound: {data}",
            "             the step's time is the model's forward, backward and optimizer (top ops above)",
        ]
    augment_share = result.wall_share(times.augment)
    if augment_share > result.threshold:
        lines.append(
            f"note         augmentation takes {augment_share * 100:.0f}% of step time; it runs on the "
            "training thread after the batch arrives, so data workers do not hide it"
        )
    lines.append(f"trace        {shown_path(result.trace_path)}  (open it in https://ui.perfetto.dev)")
    return lines
