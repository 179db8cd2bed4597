"""lengen.analysis.verdicts: every branch of the three rules on constructed scores, and the same
verdicts as the committed results folder whose scripts stated the rules first
(results/addition-cpu-seeds)."""
import csv
import math
import os

import pytest

from lengen.analysis.verdicts import (DIRECTION, NOT_REPRODUCED, REPRODUCED, UNTESTED,
                                      compare_groups, compare_means, compare_pass_counts, mean,
                                      std)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mean_and_sample_std():
    assert mean([1, 2, 3]) == 2 and math.isnan(mean([]))
    assert std([2, 4]) == pytest.approx(math.sqrt(2)) and math.isnan(std([5]))


@pytest.mark.parametrize("other, sign, verdict", [
    ({0: 30, 1: 40}, 1, REPRODUCED),          # +15 against a larger std of 7.07
    ({0: 16, 1: 18}, 1, DIRECTION),           # +2 against 7.07
    ({0: 10, 1: 20}, 1, NOT_REPRODUCED),      # a tie is not the paper's direction
    ({0: 0, 1: 5}, 1, NOT_REPRODUCED),        # the other way
    ({0: 0, 1: 5}, -1, REPRODUCED),           # ... which is the paper's when it says "below"
])
def test_compare_means_by_the_size_of_the_gap(other, sign, verdict):
    base = {0: 10, 1: 20}                     # mean 15, std 7.07
    v = compare_means(base, other, sign)
    assert v["verdict"] == verdict and v["n"] == 2 and v["seeds"] == [0, 1]
    assert v["diff"] == pytest.approx(mean(other.values()) - 15)
    assert v["larger_std"] == pytest.approx(max(std([10, 20]), std(other.values())))


def test_compare_means_pairs_by_seed_and_needs_two():
    # seed 2 passed on one arm only: left out; one common seed is not enough
    v = compare_means({0: 10, 2: 90}, {0: 50, 1: 50}, 1)
    assert v == {"seeds": [0], "n": 1, "verdict": UNTESTED}
    with pytest.raises(ValueError, match="sign"):
        compare_means({}, {}, 0)


def test_compare_groups_takes_every_passing_run_of_each_arm():
    v = compare_groups({0: 40, 3: 50}, {1: 20, 2: 24}, -1)
    assert v["verdict"] == REPRODUCED and (v["n_base"], v["n_other"]) == (2, 2)
    assert compare_groups({0: 40}, {1: 20, 2: 24}, -1)["verdict"] == UNTESTED


@pytest.mark.parametrize("base, other, verdict", [
    ({0: True, 1: True, 2: False}, {0: False, 1: False, 2: False}, REPRODUCED),
    ({0: True, 1: False}, {0: False, 1: False}, DIRECTION),      # 1 > 0, but not >= 2
    ({0: True, 1: True, 2: True}, {0: True, 1: False, 2: False}, DIRECTION),
    ({0: True, 1: False}, {0: False, 1: True}, NOT_REPRODUCED),
    ({0: False, 1: False}, {0: False, 1: False}, UNTESTED),
    ({0: True, 1: True}, {0: False}, UNTESTED),                  # one seed both ran
])
def test_compare_pass_counts(base, other, verdict):
    assert compare_pass_counts(base, other)["verdict"] == verdict


def _rows(path):
    with open(os.path.join(ROOT, path)) as f:
        return list(csv.DictReader(f))


def test_the_same_verdicts_as_the_committed_8k_table():
    """results/addition-cpu-seeds/verdicts-8k.csv (its own script, rules written before the
    runs) from runs-8k.csv, recomputed with this module."""
    runs = _rows("results/addition-cpu-seeds/runs-8k.csv")
    claims = {"randomized positions help FIRE (Fig. 8)": ("fire", "fire-norand", (0, 3)),
              "random spaces hurt FIRE (Fig. 7)": ("fire", "fire-spaces", (0, 3, 5))}
    checked = 0
    for row in _rows("results/addition-cpu-seeds/verdicts-8k.csv"):
        if row["claim"] not in claims:
            continue
        base, other, seeds = claims[row["claim"]]

        def arm(setting, reading=row["reading"]):
            return {int(r["seed"]): float(r["ood"]) for r in runs if r["setting"] == setting
                    and int(r["seed"]) in seeds and r[reading] == "True"}

        v = compare_means(arm(base), arm(other), -1)
        assert v["verdict"] == row["verdict"], row
        if v["verdict"] != UNTESTED:
            assert v["diff"] == pytest.approx(float(row["diff"]))
            assert v["larger_std"] == pytest.approx(float(row["larger_std"]))
        checked += 1
    assert checked == 4
