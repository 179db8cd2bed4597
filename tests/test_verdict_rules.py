"""lengen.analysis.verdicts' one rule family (issue 54): every condition of the three rules,
each broken once on constructed runs, gives the verdict and the reason the rule states."""
import pytest

from lengen.analysis.verdicts import (DIRECTION, NOT_REPRODUCED, PAIRED_GAP, PASS_COUNT,
                                      PASS_COUNT_V1, REPRODUCED, RULES, SINGLE_ARM, UNTESTED,
                                      Budget, Run, judge_pair, judge_pass, judge_single)


def runs(values, fitted=None, budget="8000 x 128"):
    """seed -> value; ``fitted``: the seeds that fitted (default: all)."""
    return [Run(s, v, True if fitted is None else s in fitted, budget) for s, v in values.items()]


BASE = {0: 10.0, 1: 20.0, 2: 15.0}          # std 5


def test_every_rule_is_described():
    assert set(RULES) == {PAIRED_GAP, PASS_COUNT, PASS_COUNT_V1, SINGLE_ARM}
    assert PASS_COUNT == "pass-count/v2" and "Superseded" in RULES[PASS_COUNT_V1]


@pytest.mark.parametrize("other, sign, verdict, reason", [
    ({0: 30.0, 1: 40.0, 2: 35.0}, 1, REPRODUCED, "every seed in that direction"),
    ({0: 12.0, 1: 22.0, 2: 17.0}, 1, DIRECTION, "gap not above the larger std"),
    # mean gap +13.3 > std, but seed 1 goes the other way: direction on every seed is required
    ({0: 40.0, 1: 19.0, 2: 26.0}, 1, DIRECTION, "seed(s) [1] the other way"),
    ({0: 10.0, 1: 20.0, 2: 15.0}, 1, NOT_REPRODUCED, "not in the paper's direction"),
    ({0: 0.0, 1: 5.0, 2: 2.0}, -1, REPRODUCED, "below"),
])
def test_pair_gap_against_spread(other, sign, verdict, reason):
    v = judge_pair(runs(BASE), runs(other), sign)
    assert v.verdict == verdict and reason in v.reason and v.rule == PAIRED_GAP
    assert v.seeds == [0, 1, 2] and len(v.diffs) == 3


def test_pair_unequal_budgets_is_untested_whatever_the_gap():
    # the example: coupling at 12,000 steps against FIRE at 8,000
    v = judge_pair(runs(BASE, budget="8000 steps"), runs({0: 90.0, 1: 90.0, 2: 90.0},
                   budget="12000 steps"), 1, names=("FIRE", "coupling"))
    assert v.verdict == UNTESTED
    assert v.reason == "unequal budgets (FIRE: 8000 steps vs coupling: 12000 steps)"


@pytest.mark.parametrize("a, b, problem", [
    # the same budget spelled two ways is one budget (audit #5: budgets compared as text)
    ("8000 x 128", "8,000 steps x 128 (README)", None),
    ("8000 x 128, lr 3e-3", "8000 x 128, lr 0.003", None),
    ("8000 x 128, lr 3e-3", "8000 x 128, lr 1e-3", "unequal budgets"),
    ("8000 x 128", "8000 x 64", "unequal budgets"),
    ("8000 x 128", "8000 steps", "batch recorded for A only"),
    ("", "8000 x 128", "no budget (steps) recorded for A"),
])
def test_budgets_compare_as_numbers(a, b, problem):
    v = judge_pair(runs(BASE, budget=a), runs({0: 30.0, 1: 40.0, 2: 35.0}, budget=b), 1)
    if problem is None:
        assert v.verdict == REPRODUCED, v.reason
    else:
        assert v.verdict == UNTESTED and v.reason.startswith(problem), v.reason


def test_lr_per_arm_is_stated_on_the_verdict():
    a, b = runs(BASE, budget="8000 x 128, lr 1e-3"), runs({0: 30.0, 1: 40.0, 2: 35.0},
                                                          budget="8000 x 128, lr 3e-3")
    assert judge_pair(a, b, 1).verdict == UNTESTED
    v = judge_pair(a, b, 1, lr_per_arm="each PE at its searched lr")
    assert v.verdict == REPRODUCED and "lr per arm: each PE at its searched lr" in v.reason
    # never within one arm
    mixed = a[:2] + [Run(2, 15.0, True, "8000 x 128, lr 3e-3")]
    assert "mixed budgets within A" in judge_pair(mixed, b, 1, lr_per_arm="x").reason


def test_a_budget_is_never_free_text():
    assert Budget.parse("12000 x 64, lr 3e-4 (the recipe cpu scale)") == Budget(
        12000, 64, 3e-4, "the recipe cpu scale")
    assert Budget.parse("1500 steps") == Budget(1500)
    with pytest.raises(ValueError, match="STEPS"):
        Budget.parse("the recipe cpu scale")


def test_pair_mixed_budgets_within_an_arm():
    a = runs(BASE)[:2] + [Run(2, 15.0, True, "4000 x 128")]
    assert "mixed budgets within A" in judge_pair(a, runs(BASE), 1).reason


def test_pair_counts_fitted_runs_on_common_seeds_only():
    # the Fig. 3 example: A fitted on seeds 0, 3; B on 1, 3; one shared fitted seed
    a = runs({0: 32.4, 1: 1.0, 2: 2.0, 3: 44.6}, fitted={0, 3})
    b = runs({0: 0.0, 1: 23.2, 2: 0.0, 3: 24.3}, fitted={1, 3})
    v = judge_pair(b, a, 1)
    assert v.verdict == UNTESTED and v.seeds == [3]
    assert "1 seed(s) where both arms fitted" in v.reason and "fitted 2 of 4" in v.reason


def test_pair_an_unfitted_run_never_counts():
    # seed 2 of B has a huge value but did not fit: left out, so the gap is a tie
    b = runs({0: 10.0, 1: 20.0, 2: 99.0}, fitted={0, 1})
    assert judge_pair(runs(BASE), b, 1).verdict == NOT_REPRODUCED


def test_pair_best_of_n_is_refused():
    b = runs({0: 30.0, 1: 40.0}) + [Run(0, 50.0, True, "8000 x 128")]
    v = judge_pair(runs(BASE), b, 1)
    assert v.verdict == UNTESTED and "one row per arm and seed" in v.reason


def test_pair_seeds_chosen_by_an_outcome():
    v = judge_pair(runs(BASE), runs({0: 30.0, 1: 40.0, 2: 35.0}), 1,
                   seeds_chosen_by="FIRE's fit")
    assert v.verdict == UNTESTED and v.reason == "seeds chosen by FIRE's fit"


def test_pair_no_runs_and_bad_sign():
    assert judge_pair([], runs(BASE), 1).reason == "no runs for A"
    with pytest.raises(ValueError, match="sign"):
        judge_pair(runs(BASE), runs(BASE), 0)


@pytest.mark.parametrize("a, b, verdict, v1", [
    ({0, 1, 2}, set(), REPRODUCED, REPRODUCED),
    ({0, 1}, set(), DIRECTION, DIRECTION),          # seed 2: A does not learn either
    ({0, 1, 2}, {1}, DIRECTION, DIRECTION),
    # audit #18: one passing run of A is no direction under v2 (v1 said direction only)
    ({0}, set(), UNTESTED, DIRECTION),
    ({0}, {1}, UNTESTED, NOT_REPRODUCED),
    # counter-evidence: B passes on 2 or more seeds where A passes on fewer
    ({0}, {0, 1, 2}, NOT_REPRODUCED, NOT_REPRODUCED),
    (set(), {1, 2}, NOT_REPRODUCED, NOT_REPRODUCED),
    (set(), set(), UNTESTED, UNTESTED),
])
def test_pass_count(a, b, verdict, v1):
    seeds = {0: 0.0, 1: 0.0, 2: 0.0}
    v = judge_pass(runs(seeds, fitted=a), runs(seeds, fitted=b))
    assert v.verdict == verdict and v.rule == PASS_COUNT
    old = judge_pass(runs(seeds, fitted=a), runs(seeds, fitted=b), version=PASS_COUNT_V1)
    assert old.verdict == v1 and old.rule == PASS_COUNT_V1
    if len(a) == 1 and len(b) < 2:
        assert "neither arm passes on 2 or more seeds" in v.reason
    with pytest.raises(ValueError, match="version"):
        judge_pass(runs(seeds), runs(seeds), version="pass-count/v9")


def test_pass_count_needs_two_common_seeds_and_equal_budgets():
    a = runs({0: 0.0, 1: 0.0}, fitted={0, 1})
    assert judge_pass(a, runs({0: 0.0, 5: 0.0}, fitted=set())).verdict == UNTESTED
    v = judge_pass(a, runs({0: 0.0, 1: 0.0}, fitted=set(), budget="4000 x 128"))
    assert v.verdict == UNTESTED and v.reason.startswith("unequal budgets")
    v = judge_pass(a, runs({0: 0.0, 1: 0.0}, fitted=set()), seeds_chosen_by="A's outcome")
    assert v.verdict == UNTESTED


@pytest.mark.parametrize("values, fitted, op, among, verdict", [
    ({0: 95.0, 1: 97.0}, None, ">=", "all", REPRODUCED),
    ({0: 95.0, 1: 89.5, 2: 97.0}, None, ">=", "all", DIRECTION),   # one sin/cos run at 89.5
    ({0: 95.0, 1: 89.5}, None, ">=", "all", NOT_REPRODUCED),
    ({0: 95.0}, None, ">=", "all", UNTESTED),
    # 'fails OOD' among fitted runs: the unfitted seed 2 is not counted
    ({0: 10.0, 1: 20.0, 2: 99.0}, {0, 1}, "<", "fitted", REPRODUCED),
    ({0: 10.0, 1: 20.0, 2: 99.0}, {0}, "<", "fitted", UNTESTED),
])
def test_single_arm(values, fitted, op, among, verdict):
    v = judge_single(runs(values, fitted=fitted), op, 90 if op == ">=" else 50, among=among)
    assert v.verdict == verdict and v.rule == SINGLE_ARM


def test_single_arm_states_counts_and_interval():
    v = judge_single(runs({0: 95.0, 1: 89.5, 2: 97.0}), ">=", 90, among="all")
    assert v.reason == "2 of 3 runs >= 90 (range 89.5-97)"
    with pytest.raises(ValueError, match="op must be"):
        judge_single(runs(BASE), "=>", 90)
    with pytest.raises(ValueError, match="among"):
        judge_single(runs(BASE), ">=", 90, among="some")


def test_single_arm_on_seeds_chosen_by_an_outcome_is_untested():
    # audit #1: every fitted run meets the bar, but the seeds were picked where the arm fitted
    v = judge_single(runs({0: 95.0, 3: 97.0}), ">=", 90, seeds_chosen_by="FIRE's fit")
    assert v.verdict == UNTESTED and v.reason == "seeds chosen by FIRE's fit"
    assert judge_single(runs({0: 95.0, 3: 97.0}), ">=", 90).verdict == REPRODUCED


def test_an_arm_without_a_fit_bar_needs_its_reason():
    # audit #10: fitted None used to count as fitted silently
    free = [Run(s, v, None, "1200 steps") for s, v in {0: 0.96, 1: 0.97}.items()]
    with pytest.raises(ValueError, match="no_fit_bar"):
        judge_single(free, "<=", 1.05, among="all")
    v = judge_single(free, "<=", 1.05, among="all", no_fit_bar="perplexity")
    assert v.verdict == REPRODUCED and "no fit bar for arm (perplexity): every run counts" in \
        v.reason
    with pytest.raises(ValueError, match="no_fit_bar"):
        judge_pair(free, free, 1)
    assert judge_pair(free, [Run(s, 2.0, None, "1200 steps") for s in (0, 1)], 1,
                      no_fit_bar={"A": "ppl", "B": "ppl"}).verdict == REPRODUCED
    with pytest.raises(ValueError, match="pass"):
        judge_pass(free, free)


def test_a_nan_value_on_a_counted_run_raises():
    # audit #29: a NaN gave "not reproduced" (every comparison with NaN is False)
    bad = runs({0: 95.0, 1: float("nan")})
    with pytest.raises(ValueError, match="seed 1: the value is NaN"):
        judge_single(bad, ">=", 90)
    with pytest.raises(ValueError, match="NaN"):
        judge_pair(runs(BASE), runs({0: 1.0, 1: float("nan"), 2: 3.0}), 1)
    # on a run that did not fit it does not count, so it is no error
    assert judge_single(runs({0: 95.0, 1: float("nan"), 2: 96.0}, fitted={0, 2}), ">=",
                        90).verdict == REPRODUCED


def test_a_numpy_nan_on_a_counted_run_raises():
    import numpy as np
    a = runs(BASE)
    a[0] = Run(a[0].seed, np.float32("nan"), True, a[0].budget)
    with pytest.raises(ValueError, match="NaN"):
        judge_pair(a, runs(BASE), 1)
