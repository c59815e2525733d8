"""The verdict calibrations judge constructed rounds whose truth is known, with the report's own
code: a few repetitions of the clearest cases give the answer the truth gives."""

from __future__ import annotations

from benchmarks import calibrate_lengths, calibrate_ranges, calibrate_sweep, calibrate_transfer


def test_the_length_verdict_calls_clear_cases_by_their_truth() -> None:
    attrs = calibrate_lengths.round_attrs()
    clear = ("early 0.05", "early"), ("improving 1.5", "late"), ("middle 0.5", "fine"), ("annealed", "fine")
    for case, expected in clear:
        curve, truth = calibrate_lengths.CASES[case]
        assert truth == expected
        for seed in range(3):
            phase, curves = calibrate_lengths.simulated_round(attrs, curve, 20, 0.003, seed)
            assert calibrate_lengths.verdict_of(phase, curves) == expected, (case, seed)


def test_the_extra_rounds_other_trigger_fires_on_runs_still_improving_only() -> None:
    """Its rule (the error still falling between 50% and 75% of training, wherever the best steps
    fell): on runs cut short, not on runs that peaked at half their length and stayed flat, nor on
    the other cases whose length is right or too long."""
    attrs = calibrate_lengths.round_attrs()
    for case, (curve, truth) in calibrate_lengths.CASES.items():
        for seed in range(3):
            phase, curves = calibrate_lengths.simulated_round(attrs, curve, 20, 0.003, seed)
            assert calibrate_lengths.readings_of(phase, curves)[1] is (truth == "late"), (case, seed)


def test_the_length_table_counts_every_repetition() -> None:
    tallies = calibrate_lengths.calibrate(2, trials=(8,), noises=(0.003,))
    assert all(t.total == 2 for t in tallies.values())
    table = calibrate_lengths.table(tallies)
    assert "| early | early 0.05 | 8 | 0.003 | 100.0% | 0.0% | 0.0% | 0.0% | 0.0% | 0.0% |" in table
    assert "| late | improving 1.5 | 8 | 0.003 | 0.0% | 100.0% | 0.0% | 0.0% | 100.0% | 100.0% |" in table
    figures = [r.figure for r in calibrate_lengths.results(tallies)]
    assert any(f.startswith("falling late where the length is not too short") for f in figures)


def test_nothing_learned_moves_the_lr_range_up_only_when_the_loss_falls_toward_the_top() -> None:
    tallies = calibrate_ranges.calibrate_unlearned(3, trials=(20,))
    assert tallies[("falls 0.3", 20)].lr_up == 3
    assert tallies[("bowl inside", 20)].lr_up + tallies[("bowl inside", 20)].lr_down == 0
    results = {r.figure: r for r in calibrate_ranges.unlearned_results(tallies)}
    assert results["nothing learned: false moves, worst case"].passed is not None


def test_the_transfer_verdict_neither_warns_on_a_held_ranking_nor_calls_a_reversed_one_good() -> None:
    tallies = calibrate_transfer.calibrate(5, top_ks=(6,), seeds=(1,), examples=(2000,))
    assert {key[0]: sum(t.values()) for key, t in tallies.items()} == {1.0: 5, 0.0: 5, -1.0: 5}
    held, reversed_ = tallies[(1.0, 6, 1, 2000)], tallies[(-1.0, 6, 1, 2000)]
    assert held["weak"] + held["reversed"] == 0 and held["good"] > 0
    assert reversed_["good"] == 0 and reversed_["reversed"] > 0
    assert "| +1 | 6 | 1 | 2,000 |" in calibrate_transfer.table(tallies)


def test_sweep_lr_says_memorised_on_noisy_labels_and_not_on_a_plateau() -> None:
    tallies = calibrate_sweep.calibrate(5, seeds=(1,), noises=(0.003,))
    assert tallies[("noisy 0.25", 1, 0.003)][True] >= 4
    assert tallies[("plateau 0.4", 1, 0.003)][True] == 0 and tallies[("improving", 1, 0.003)][True] == 0
    assert "| early | noisy 0.25 | 1 | 0.003 |" in calibrate_sweep.table(tallies)
