"""Verdicts on a paper's claim from runs on several seeds, by rules fixed before the runs.

The project's rule for a claim about a paper (README, "A claim about a paper needs fitted runs
and seeds"): a run that did not fit its training distribution says nothing about
generalization, so it is left out; arms are compared by their means over the same seeds, never
a best-of-n against one run; every verdict states n and how many runs passed. The recipes'
reports and the results folders' scripts judge claims with these functions, so a verdict means
the same everywhere:

* :func:`compare_means`: "arm B's score is above (or below) arm A's" over the seeds where both
  arms passed (paired; n >= 2 needed): *reproduced* when the mean differs in the paper's
  direction by more than the larger of the two arms' sample standard deviations over those
  seeds, *direction only* when it differs in that direction by less, *not reproduced*
  otherwise (a tie included), *untested* with fewer than two such seeds;
* :func:`compare_groups`: the same rule over all passing runs of each arm (unpaired: each arm's
  passing seeds, from the same set of seeds run on both; n >= 2 per arm);
* :func:`compare_pass_counts`: "A makes the model learn, B (A without it) does not", over the
  seeds both arms ran (n >= 2 needed): *reproduced* when A passes on >= 2 of them and B on
  none, *direction only* when A passes on more of them than B, *not reproduced* when B passes
  on as many or more and some run passes, *untested* when no run passes.

The verdicts are plain strings (:data:`VERDICTS`), each result a dict ready for a csv row.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

REPRODUCED, DIRECTION, NOT_REPRODUCED, UNTESTED = ("reproduced", "direction only",
                                                   "not reproduced", "untested")
VERDICTS = (REPRODUCED, DIRECTION, NOT_REPRODUCED, UNTESTED)


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def std(values) -> float:
    """Sample standard deviation (n - 1); nan for fewer than two values."""
    values = list(values)
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(sum((x - m) ** 2 for x in values) / (len(values) - 1))


def _check_sign(sign) -> int:
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 (the paper: B above A) or -1 (B below A), got {sign!r}")
    return sign


def _by_size(a: list, b: list, sign: int) -> dict:
    """The size rule on two lists of scores (each n >= 2)."""
    ma, mb, sa, sb = mean(a), mean(b), std(a), std(b)
    diff = mb - ma
    bar = max(sa, sb)
    effect = sign * diff
    verdict = REPRODUCED if effect > bar else DIRECTION if effect > 0 else NOT_REPRODUCED
    return dict(base_mean=ma, base_std=sa, other_mean=mb, other_std=sb, diff=diff,
                larger_std=bar, verdict=verdict)


def compare_means(base: Mapping, other: Mapping, sign: int) -> dict:
    """Paired rule (module docstring). ``base`` / ``other``: seed -> score of that arm's run on
    that seed, for the runs that passed (a seed missing from either is left out). ``sign``: +1
    when the paper says ``other`` scores above ``base``, -1 below. Returns the seeds used, n,
    both arms' mean and std over them, the difference (other - base), the bar and the
    verdict."""
    sign = _check_sign(sign)
    seeds = sorted(set(base) & set(other))
    out = dict(seeds=seeds, n=len(seeds))
    if len(seeds) < 2:
        return dict(out, verdict=UNTESTED)
    return dict(out, **_by_size([base[s] for s in seeds], [other[s] for s in seeds], sign))


def compare_groups(base: Mapping, other: Mapping, sign: int) -> dict:
    """Unpaired rule (module docstring): every passing run of each arm. ``base`` / ``other``:
    seed -> score of the passing runs; n >= 2 per arm needed."""
    sign = _check_sign(sign)
    out = dict(base_seeds=sorted(base), other_seeds=sorted(other), n_base=len(base),
               n_other=len(other))
    if len(base) < 2 or len(other) < 2:
        return dict(out, verdict=UNTESTED)
    return dict(out, **_by_size([base[s] for s in sorted(base)],
                                [other[s] for s in sorted(other)], sign))


def compare_pass_counts(base: Mapping, other: Mapping) -> dict:
    """"``base`` makes the model learn and ``other`` (base without it) does not", over the
    seeds both arms ran (module docstring). ``base`` / ``other``: seed -> whether that arm's
    run on that seed passed (every finished run, passing or not)."""
    seeds = sorted(set(base) & set(other))
    nb = sum(bool(base[s]) for s in seeds)
    no = sum(bool(other[s]) for s in seeds)
    out = dict(seeds=seeds, n=len(seeds), base_passed=nb, other_passed=no)
    if len(seeds) < 2 or nb + no == 0:
        return dict(out, verdict=UNTESTED)
    if nb >= 2 and no == 0:
        return dict(out, verdict=REPRODUCED)
    return dict(out, verdict=DIRECTION if nb > no else NOT_REPRODUCED)


__all__ = ["VERDICTS", "REPRODUCED", "DIRECTION", "NOT_REPRODUCED", "UNTESTED", "mean", "std",
           "compare_means", "compare_groups", "compare_pass_counts"]


# ---- the one rule family for every paper's claim (issue 54) ------------------------------------
#
# The functions above compare dicts of already-passing scores and are kept for the recipes'
# reports. The three rules below take every run an arm made (fitted or not, with its budget and
# seed) and apply every condition themselves, so that no caller can drop one: results/claims.yaml
# names the runs, lengen.analysis.verdict_table applies these rules and writes
# results/VERDICTS.md. Each rule has a versioned name printed beside every verdict it gives.

PAIRED_GAP = "paired-gap/v1"
PASS_COUNT = "pass-count/v1"
SINGLE_ARM = "single-arm/v1"
RULES = {
    PAIRED_GAP: (
        "Arm B above (or below) arm A. Conditions, in order; the first broken one gives "
        "*untested* with the reason: (1) every run of both arms has the same budget; (2) the "
        "seeds were not chosen by either arm's outcome; (3) only fitted runs count (the claim's "
        "fit bar) and only seeds where BOTH arms fitted (paired), n >= 2 such seeds; (4) one row "
        "per arm and seed (never a best-of-n). Then, with d_s = sign * (B_s - A_s) on each "
        "common seed: *reproduced* when every d_s > 0 AND mean d > the larger within-arm sample "
        "std over those seeds; *direction only* when mean d > 0 otherwise; *not reproduced* when "
        "mean d <= 0."),
    PASS_COUNT: (
        "A makes the model learn and B (A without it) does not. (1) equal budgets; (2) seeds not "
        "chosen by either arm's outcome; (3) the seeds both arms ran, n >= 2 (every finished run "
        "counts: passing is the outcome); (4) one row per arm and seed. *untested* when no run "
        "passes; *reproduced* when A passes and B fails on every common seed; *direction only* "
        "when A passes on more common seeds than B; *not reproduced* otherwise."),
    SINGLE_ARM: (
        "One arm's metric meets a threshold ('X reaches >= 90%', 'X fails OOD: < 50'). Runs "
        "counted: the fitted ones when the claim is about generalization (among: fitted), every "
        "run otherwise; one row per seed; n >= 2 counted runs, else *untested*. *reproduced* "
        "when every counted run meets it, *direction only* when more than half do, *not "
        "reproduced* otherwise. The range (min-max) of the counted runs is the interval given."),
}


@dataclass(frozen=True)
class Run:
    """One run of one arm: its seed, the claim's metric, whether it fitted its training
    distribution by the claim's bar (``None``: the claim has no fit bar), and its budget."""
    seed: object
    value: float
    fitted: bool | None = None
    budget: str = ""


@dataclass
class Verdict:
    verdict: str
    reason: str
    rule: str
    n: dict = field(default_factory=dict)          # arm -> runs
    fitted: dict = field(default_factory=dict)     # arm -> fitted runs
    seeds: list = field(default_factory=list)      # the seeds the verdict stands on
    means: dict = field(default_factory=dict)      # arm -> mean over those seeds
    stds: dict = field(default_factory=dict)       # arm -> sample std over those seeds
    diffs: list = field(default_factory=list)      # per common seed: sign * (B - A)


def _fmt(x) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def _budget_problem(arms: dict[str, list[Run]]) -> str | None:
    per_arm = {name: sorted({r.budget for r in runs}) for name, runs in arms.items()}
    for name, budgets in per_arm.items():
        if len(budgets) > 1:
            return f"mixed budgets within {name} ({' / '.join(budgets)})"
    values = {b[0] for b in per_arm.values() if b}
    if len(values) > 1:
        return "unequal budgets (" + " vs ".join(f"{n}: {b[0]}" for n, b in per_arm.items()) + ")"
    return None


def _duplicate_seeds(arms: dict[str, list[Run]]) -> str | None:
    for name, runs in arms.items():
        seeds = [r.seed for r in runs]
        dup = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
        if dup:
            return f"{name} has several runs on seed(s) {dup}: one row per arm and seed"
    return None


def _fitted_count(runs: list[Run]) -> int:
    return sum(r.fitted is not False for r in runs)


def _common(arms, names, fitted_only: bool) -> list:
    sets = [{r.seed for r in arms[n] if not fitted_only or r.fitted is not False} for n in names]
    return sorted(set.intersection(*sets), key=str)


def judge_pair(base: list[Run], other: list[Run], sign: int, *, names=("A", "B"),
               seeds_chosen_by: str | None = None) -> Verdict:
    """Rule :data:`PAIRED_GAP` (see :data:`RULES`): ``other`` (B) against ``base`` (A); ``sign``
    +1 when the paper says B scores above A, -1 below."""
    sign = _check_sign(sign)
    a, b = names
    arms = {a: list(base), b: list(other)}
    v = Verdict(UNTESTED, "", PAIRED_GAP, n={k: len(r) for k, r in arms.items()},
                fitted={k: _fitted_count(r) for k, r in arms.items()})
    problem = (("no runs for " + " and ".join(k for k, r in arms.items() if not r))
               if not all(arms.values()) else
               _budget_problem(arms) or _duplicate_seeds(arms)
               or (f"seeds chosen by {seeds_chosen_by}" if seeds_chosen_by else None))
    if problem:
        v.reason = problem
        return v
    seeds = _common(arms, names, fitted_only=True)
    v.seeds = seeds
    if len(seeds) < 2:
        v.reason = (f"{len(seeds)} seed(s) where both arms fitted (n >= 2 needed; "
                    f"{a} fitted {v.fitted[a]} of {v.n[a]}, {b} {v.fitted[b]} of {v.n[b]})")
        return v
    va = {r.seed: r.value for r in base}
    vb = {r.seed: r.value for r in other}
    xa, xb = [va[s] for s in seeds], [vb[s] for s in seeds]
    v.means, v.stds = {a: mean(xa), b: mean(xb)}, {a: std(xa), b: std(xb)}
    v.diffs = [sign * (vb[s] - va[s]) for s in seeds]
    gap, bar = mean(v.diffs), max(v.stds[a], v.stds[b])
    against = [s for s, d in zip(seeds, v.diffs) if d <= 0]
    where = "above" if sign > 0 else "below"
    head = (f"n = {len(seeds)} paired fitted seeds; {b} {where} {a} by mean {_fmt(gap)} "
            f"(larger std {_fmt(bar)})")
    if gap > bar and not against:
        v.verdict, v.reason = REPRODUCED, head + ", every seed in that direction"
    elif gap > 0:
        why = (f"seed(s) {against} the other way" if against else "gap not above the larger std")
        v.verdict, v.reason = DIRECTION, f"{head}: {why}"
    else:
        v.verdict, v.reason = NOT_REPRODUCED, head + ": not in the paper's direction"
    return v


def judge_pass(with_: list[Run], without: list[Run], *, names=("with", "without"),
               seeds_chosen_by: str | None = None) -> Verdict:
    """Rule :data:`PASS_COUNT`: ``with_`` (A) passes and ``without`` (B) does not. A run's
    ``fitted`` is its pass."""
    a, b = names
    arms = {a: list(with_), b: list(without)}
    v = Verdict(UNTESTED, "", PASS_COUNT, n={k: len(r) for k, r in arms.items()},
                fitted={k: sum(bool(x.fitted) for x in r) for k, r in arms.items()})
    problem = (("no runs for " + " and ".join(k for k, r in arms.items() if not r))
               if not all(arms.values()) else
               _budget_problem(arms) or _duplicate_seeds(arms)
               or (f"seeds chosen by {seeds_chosen_by}" if seeds_chosen_by else None))
    if problem:
        v.reason = problem
        return v
    seeds = _common(arms, names, fitted_only=False)
    v.seeds = seeds
    if len(seeds) < 2:
        v.reason = f"{len(seeds)} seed(s) both arms ran (n >= 2 needed)"
        return v
    pa = {r.seed: bool(r.fitted) for r in with_}
    pb = {r.seed: bool(r.fitted) for r in without}
    na, nb = sum(pa[s] for s in seeds), sum(pb[s] for s in seeds)
    head = f"n = {len(seeds)} common seeds; {a} passes on {na}, {b} on {nb}"
    if na + nb == 0:
        v.reason = head + ": no run passes"
    elif na == len(seeds) and nb == 0:
        v.verdict, v.reason = REPRODUCED, head + ": on every seed"
    elif na > nb:
        v.verdict, v.reason = DIRECTION, head + ": not on every seed"
    else:
        v.verdict, v.reason = NOT_REPRODUCED, head
    return v


_OPS = {">=": lambda x, t: x >= t, ">": lambda x, t: x > t, "<=": lambda x, t: x <= t,
        "<": lambda x, t: x < t}


def judge_single(runs: list[Run], op: str, threshold: float, *, among: str = "fitted",
                 name: str = "arm") -> Verdict:
    """Rule :data:`SINGLE_ARM`: every counted run's value ``op`` ``threshold``. ``among``:
    'fitted' (only fitted runs count) or 'all'."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    if among not in ("fitted", "all"):
        raise ValueError(f"among must be 'fitted' or 'all', got {among!r}")
    runs = list(runs)
    v = Verdict(UNTESTED, "", SINGLE_ARM, n={name: len(runs)}, fitted={name: _fitted_count(runs)})
    problem = _budget_problem({name: runs}) or _duplicate_seeds({name: runs})
    if problem:
        v.reason = problem
        return v
    counted = [r for r in runs if among == "all" or r.fitted is not False]
    v.seeds = [r.seed for r in counted]
    if len(counted) < 2:
        v.reason = (f"{len(counted)} counted run(s) (n >= 2 needed; {v.fitted[name]} of "
                    f"{len(runs)} fitted)")
        return v
    xs = [r.value for r in counted]
    v.means, v.stds = {name: mean(xs)}, {name: std(xs)}
    k = sum(_OPS[op](x, threshold) for x in xs)
    head = (f"{k} of {len(counted)} {'fitted ' if among == 'fitted' else ''}runs {op} "
            f"{_fmt(threshold)} (range {_fmt(min(xs))}-{_fmt(max(xs))})")
    if k == len(counted):
        v.verdict = REPRODUCED
    elif 2 * k > len(counted):
        v.verdict = DIRECTION
    else:
        v.verdict = NOT_REPRODUCED
    v.reason = head
    return v


__all__ += ["PAIRED_GAP", "PASS_COUNT", "SINGLE_ARM", "RULES", "Run", "Verdict", "judge_pair",
            "judge_pass", "judge_single"]
