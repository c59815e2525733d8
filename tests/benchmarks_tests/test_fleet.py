"""The fleet benchmark's arithmetic on constructed trials: turnaround is per worker, between trials."""

from __future__ import annotations

import datetime

import pytest
from optuna.trial import TrialState, create_trial

from benchmarks.fleet import _quantile, _turnarounds

T0 = datetime.datetime(2026, 1, 1)


def _trial(worker: str, start_s: float, end_s: float):  # type: ignore[no-untyped-def]
    trial = create_trial(state=TrialState.COMPLETE, value=0.0, user_attrs={"worker": worker})
    trial.datetime_start = T0 + datetime.timedelta(seconds=start_s)
    trial.datetime_complete = T0 + datetime.timedelta(seconds=end_s)
    return trial


def test_turnaround_is_each_workers_gap_from_one_trials_end_to_its_next_start() -> None:
    trials = [
        _trial("a", 0.0, 1.0),
        _trial("b", 0.2, 1.5),
        _trial("a", 1.05, 2.0),  # a: 50 ms after its first trial
        _trial("b", 1.8, 2.5),  # b: 300 ms; never measured against a's trials
        _trial("a", 2.25, 3.0),  # a: 250 ms
    ]
    assert sorted(_turnarounds(list(reversed(trials)))) == pytest.approx([0.05, 0.25, 0.3])
    assert _turnarounds([_trial("a", 0, 1)]) == []  # one trial per worker: no turnaround


def test_quantiles_of_few_values() -> None:
    values = [float(v) for v in range(1, 101)]
    assert _quantile(values, 0.5) == pytest.approx(50.5, abs=0.5)
    assert _quantile(values, 0.99) == pytest.approx(99.0, abs=0.5)
    assert _quantile([0.3], 0.99) == 0.3


def test_the_fleet_faults_benchmark_reads_the_line_the_fleet_test_prints() -> None:
    from benchmarks.fleet_faults import LINE

    line = (
        "fleet: 24 slots completed once each; 28 trials (0 killed and retried, 3 duplicates set "
        "aside); 76 connections cut; longest stall of a worker 9.1 s"
    )
    found = LINE.search(line)
    assert found is not None and found.groups() == ("24", "28", "76", "9.1")
