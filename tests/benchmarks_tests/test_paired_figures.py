"""The benchmarks' paired figures: the median of the per-pair figure and its distribution-free
95% interval (order statistics), on constructed samples whose answer is known."""

from __future__ import annotations

from benchmarks._common import paired_difference, paired_difference_interval, paired_ratio


def test_a_paired_difference_has_the_median_and_the_order_statistics_interval() -> None:
    # differences 1..8, shuffled: with 8 pairs the interval drops one value at each end
    ours = [4.0, 9.0, 3.0, 6.0, 2.0, 8.0, 5.0, 7.0]
    plain = [1.0] * 8
    difference = paired_difference_interval(ours, plain)
    assert (difference.median, difference.low, difference.high, difference.pairs) == (4.5, 2.0, 7.0, 8)
    assert str(difference) == "+4.50 s (95% CI +2.00..+7.00, 8 pairs)"
    assert paired_difference(ours, plain) == 4.5  # the median alone, as checkpoint_cost reads it


def test_a_few_pairs_give_an_interval_as_wide_as_the_sample() -> None:
    difference = paired_difference_interval([0.4, 0.9, 0.5], [0.0, 0.0, 0.0])
    assert (difference.low, difference.median, difference.high) == (0.4, 0.5, 0.9)


def test_a_paired_ratio_divides_pair_by_pair() -> None:
    ratio = paired_ratio([2.0, 6.0, 3.0], [1.0, 2.0, 3.0])
    assert (ratio.low, ratio.median, ratio.high) == (1.0, 2.0, 3.0)
