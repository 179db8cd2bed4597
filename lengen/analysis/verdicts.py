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
