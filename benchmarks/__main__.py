"""``make bench``: run every benchmark, then one table of figures, targets and PASS/FAIL.

Benchmarks report, tests gate: the exit code is 0 even when a target is missed (or a benchmark
crashes, which shows as ERROR). Each benchmark also runs alone: ``python -m benchmarks.<name>``.
"""

from __future__ import annotations

import traceback

from benchmarks import (
    calibrate_lengths,
    calibrate_ranges,
    calibrate_sweep,
    calibrate_transfer,
    checkpoint_cost,
    cli_startup,
    fleet,
    fleet_faults,
    ghost_batch_norm,
    hf_step_time,
    input_pipeline,
    loop_overhead,
    multi_process,
    orchestration,
    outcome,
    procedure,
    report,
    storage_cost,
    worker_profile,
)
from benchmarks._common import Result, load, print_table, stopwatch

BENCHMARKS = (
    loop_overhead,
    hf_step_time,  # GPT-2 (transformers): tuner's step against a hand loop and HF's Trainer
    checkpoint_cost,
    input_pipeline,
    cli_startup,
    storage_cost,
    orchestration,
    worker_profile,  # where a worker's time goes (cProfile): no targets
    fleet,  # ~10 minutes: up to 32 workers, and phases of 1,000 running trials
    fleet_faults,  # ~3 minutes: 200 slots on 8 workers under every fault at once (PostgreSQL)
    report,
    calibrate_ranges,  # ~3 minutes: how often the range verdict moves a range wrongly
    calibrate_lengths,  # ~30 seconds: the same for the length verdict
    calibrate_sweep,  # seconds: the same for sweep-lr's 'validation best long before the fit'
    calibrate_transfer,  # ~1 minute: how often the transfer verdict warns, or reassures, wrongly
    procedure,
    ghost_batch_norm,
    multi_process,
    outcome,  # last: about 70 minutes
)


def main() -> int:
    elapsed = stopwatch()
    results: list[Result] = []
    errors: list[str] = []
    for module in BENCHMARKS:
        try:
            results += module.run()
        except Exception:
            traceback.print_exc()
            errors.append(module.NAME)
        print(flush=True)
    print(f"== summary (figures are ratios against a baseline measured in the same run) [{load()}]")
    print_table(results)
    for name in errors:
        print(f"{name}: ERROR (traceback above)")
    missed = [r for r in results if r.passed is False]
    print(
        f"\n{sum(r.passed is True for r in results)} PASS, {len(missed)} FAIL, {len(errors)} ERROR "
        f"in {elapsed():.0f}s" + (f"; missed: {', '.join(r.figure for r in missed)}" if missed else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
