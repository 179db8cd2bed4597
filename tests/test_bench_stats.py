"""lengen.bench.stats on hand-computed values: fit rate, percentile bootstrap of a mean, the
interquartile mean, the stratified bootstrap, probability of improvement (Mann-Whitney over
pairs), effective length, and the rule that may write "X beats Y"."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lengen.bench import stats


def test_fit_rate_counts():
    assert stats.fit_rate([True, False, True]) == (2, 3)
    assert stats.fit_rate([]) == (0, 0)


def test_bootstrap_mean_hand_values():
    # n = 2, values 0 and 1: a resample's mean is 0, 1/2 or 1 with probability 1/4, 1/2, 1/4,
    # so its 2.5th percentile is 0 and its 97.5th is 1
    assert stats.bootstrap_mean([0.0, 1.0]) == (0.5, 0.0, 1.0)
    # n = 3, values 0 0 1: P(mean = 1) = 1/27 = 3.7% > 2.5%, P(mean = 0) = 8/27 > 2.5%
    m, lo, hi = stats.bootstrap_mean([0.0, 0.0, 1.0], n_boot=20000)
    assert m == pytest.approx(1 / 3) and lo == 0.0 and hi == 1.0
    assert stats.bootstrap_mean([0.4, 0.4, 0.4]) == (pytest.approx(0.4),) * 3   # no spread
    one = stats.bootstrap_mean([0.7])
    assert one[0] == 0.7 and math.isnan(one[1]) and math.isnan(one[2])    # no interval from 1
    assert all(math.isnan(v) for v in stats.bootstrap_mean([]))
    # seeded: the same call gives the same interval; another seed may not
    a = stats.bootstrap_mean([0.1, 0.5, 0.2, 0.9])
    assert a == stats.bootstrap_mean([0.1, 0.5, 0.2, 0.9])
    with pytest.raises(ValueError, match="leave unfitted"):
        stats.bootstrap_mean([0.1, float("nan")])


def test_interquartile_mean_hand_values():
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5          # mean of 3 4 5 6
    assert stats.iqm([100, 1, 3, 2]) == 2.5                     # cut 1 each end: mean of 2 3
    assert stats.iqm([1, 2, 9]) == 4.0                          # n < 4: the plain mean
    assert stats.iqm([0, 1, 2, 3, 4, 5, 6, 7, 8, 1000]) == pytest.approx(4.5)   # cut 2: 2..7
    np.testing.assert_allclose(stats.iqm(np.array([[1, 2, 3, 100], [4, 4, 4, 4]]), axis=1),
                               [2.5, 4.0])


def test_stratified_bootstrap_resamples_within_cells():
    # two cells whose runs are each constant: every resample is the same, so the interval
    # has zero width at the pooled IQM (1, 1, 3, 3 -> cut one each end -> 2)
    assert stats.aggregate_iqm({"a": [1.0, 1.0], "b": [3.0, 3.0]}) == (2.0, 2.0, 2.0)
    # a cell with one run: a point, no interval
    p, lo, hi = stats.aggregate_iqm({"a": [1.0, 2.0], "b": [3.0]})
    assert p == 2.0 and math.isnan(lo) and math.isnan(hi)
    # stratified, not pooled: cell "a" always contributes exactly two values, so the pooled
    # sample never holds more than two of its zeros; with a pooled bootstrap it could
    p, lo, hi = stats.stratified_bootstrap([[0.0, 0.0], [1.0, 1.0]],
                                           lambda bs: np.concatenate(bs, axis=1).mean(axis=1))
    assert (p, lo, hi) == (0.5, 0.5, 0.5)


def test_probability_of_improvement_hand_values():
    # pairs (x, y): 1v2 1v2 -> 0 0; 2v2 2v2 -> 1/2 1/2; 3v2 3v2 -> 1 1: 3 / 6
    assert stats.prob_improvement([1, 2, 3], [2, 2]) == 0.5
    assert stats.prob_improvement([3, 4], [1, 2]) == 1.0
    assert stats.prob_improvement([1, 4], [2, 3]) == 0.5
    assert stats.prob_improvement([2, 5, 7], [1, 6]) == pytest.approx(4 / 6)
    # across cells: the mean of the per-cell values (1 and 0.5)
    p, lo, hi = stats.prob_improvement_ci({"a": [3, 4], "b": [1, 2, 3]}, {"a": [1, 2],
                                                                          "b": [2, 2]})
    assert p == pytest.approx((1.0 + 0.5) / 2)
    assert lo <= p <= hi
    # every resample of X above every resample of Y: the interval is the point
    assert stats.prob_improvement_ci({"a": [3, 4]}, {"a": [1, 2]}) == (1.0, 1.0, 1.0)


def test_effective_length_is_the_longest_prefix_above_the_threshold():
    curve = {1: 1.0, 2: 0.95, 3: 0.8, 4: 0.95}
    assert stats.effective_length(curve, 0.9) == 2             # 4 comes after a drop
    assert stats.effective_length(curve, 0.8) == 4             # >= counts
    assert stats.effective_length({5: 0.5, 6: 1.0}, 0.9) is None
    assert stats.effective_length({3: 1.0, 1: 1.0, 2: float("nan")}, 0.9) == 1   # sorted, nan fails


def test_separation_rule():
    # disjoint intervals
    r = stats.separation([0.9, 0.92, 0.91], [0.1, 0.12, 0.11])
    assert r["verdict"] == stats.BEATS and r["winner"] == "x" and r["poi"] == 1.0
    assert stats.sentence("A", "B", "copy", r) == "A beats B on copy (intervals disjoint)"
    r = stats.separation([0.1, 0.12, 0.11], [0.9, 0.92, 0.91])
    assert r["winner"] == "y"
    assert stats.sentence("A", "B", "copy", r).startswith("B beats A on copy")
    # overlapping spreads: not separable
    r = stats.separation([0.1, 0.9, 0.5], [0.2, 0.8, 0.45])
    assert r["verdict"] == stats.NOT_SEPARABLE and r["winner"] is None
    assert stats.sentence("A", "B", "copy", r) == "A vs B on copy: not separable"
    # one fitted seed: untested, never a verdict
    r = stats.separation([0.99], [0.1, 0.1])
    assert r["verdict"] == stats.UNTESTED and "fewer than 2" in r["reason"]
    # identical values: a tie is not a win
    assert stats.separation([0.5, 0.5], [0.5, 0.5])["verdict"] == stats.NOT_SEPARABLE
