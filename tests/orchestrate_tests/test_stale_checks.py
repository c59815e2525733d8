"""How often workers look for stale trials: a beat apart for one worker, about once a beat for
the whole fleet however large (``heartbeat.stale_check_interval_s``)."""

from __future__ import annotations

import random

from tuner.orchestrate.heartbeat import stale_check_interval_s


def test_a_lone_worker_looks_every_beat_give_or_take_half() -> None:
    rng = random.Random(0)
    for running in (0, 1):
        intervals = [stale_check_interval_s(5, running, rng) for _ in range(1000)]
        assert min(intervals) >= 2.5 and max(intervals) <= 7.5
        assert min(intervals) < 3 and max(intervals) > 7  # jittered: workers do not look together


def test_the_fleet_as_a_whole_looks_about_once_a_beat_at_any_size() -> None:
    """W busy workers (R = W): each looks every R beats, together about once a beat. At 8,000
    GPUs, looking every beat would be 1,600 reads of 8,000 trials a second; this is 0.2."""
    rng = random.Random(1)
    for workers in (4, 100, 8000):
        intervals = [stale_check_interval_s(5, workers, rng) for _ in range(workers)]
        assert min(intervals) >= 2.5 * workers and max(intervals) <= 7.5 * workers
        looks_per_beat = 5 * sum(1 / interval for interval in intervals)
        assert 0.8 <= looks_per_beat <= 1.4, (workers, looks_per_beat)  # E[1/U(0.5,1.5)] = ln 3


def test_a_stale_trial_is_failed_only_when_a_second_look_two_beats_later_confirms_it() -> None:
    """A storage that stalled for everyone makes live trials look a grace old at the reaper's
    first look after it; their owners beat again within a beat or two, the dead do not."""
    from tuner.orchestrate.heartbeat import StaleSuspects

    now = [100.0]
    suspects = StaleSuspects(10.0, clock=lambda: now[0])
    assert suspects.confirm([]) == [] and not suspects.pending
    assert suspects.confirm([1, 2]) == [] and suspects.pending  # first look: suspected only
    now[0] = 109.9
    assert suspects.confirm([1, 2]) == []  # too soon to tell (just under two beats)
    now[0] = 110.0
    assert suspects.confirm([1]) == [1]  # 1 never beat again: dead; 2 beat again: alive
    assert not suspects.pending  # 1 is confirmed: no second look owed
    assert suspects.confirm([1, 2]) == [1]  # 2 stale again later is a new suspicion, not confirmed
    now[0] = 120.0
    assert suspects.confirm([2]) == [2]
    assert suspects.confirm([]) == [] and not suspects.pending
