"""The bench's statistics over per-seed runs (numpy only; every function seeded, so a card is
reproducible to the last digit).

Conventions followed (our own code; the formulas are the cited ones):

* **Fit rate** ``k/n`` (Long Range Arena's FAIL marks; Delétang et al. 2023): a run whose model
  did not fit its training distribution is an outcome, not a zero; its OOD number is left out.
* **Percentile bootstrap interval** of a mean (Efron & Tibshirani 1993, ch. 13): resample the n
  values with replacement ``n_boot`` times, take the statistic of each resample, report the
  2.5th and 97.5th percentiles. Fewer than two values give no interval (nan), never a
  zero-width one.
* **Interquartile mean** (Agarwal et al. 2021, "Deep RL at the edge of the statistical
  precipice", Sec. 4): the mean of the middle 50% of the values, cutting ``floor(n / 4)`` from
  each end (as ``scipy.stats.trim_mean(x, 0.25)``, which their rliable library calls).
* **Stratified bootstrap** (Agarwal et al. 2021, Sec. 4): resample runs *within* each cell
  (stratum) independently, then compute the aggregate over every cell's resample.
* **Probability of improvement** (Agarwal et al. 2021, Sec. 4, eq. in "Probability of
  improvement"): ``P(X > Y) = (1 / nm) sum_i sum_j S(x_i, y_j)`` with ``S = 1`` when
  ``x_i > y_j``, ``1/2`` on a tie, 0 otherwise (the Mann-Whitney U statistic over ``nm``);
  across cells, the mean of the per-cell values; its interval by the stratified bootstrap.
* **Effective length** (RULER, Hsieh et al. 2024, Sec. 4): the longest tested length up to
  which the accuracy stays at or above a stated threshold.

The rule that may write "X beats Y" is :func:`separation`.
"""
from __future__ import annotations

import math

import numpy as np

LEVEL = 0.95          # every interval on the card is a 95% interval
N_BOOT = 2000         # bootstrap resamples
BOOT_SEED = 0         # every bootstrap starts from this seed: the card is reproducible
MIN_N = 2             # fewer fitted seeds than this per arm: no interval, no verdict

BEATS, NOT_SEPARABLE, UNTESTED = "beats", "not separable", "untested"


def _arr(values) -> np.ndarray:
    a = np.asarray([float(v) for v in values], dtype=np.float64)
    if np.isnan(a).any():
        raise ValueError(f"statistics need numbers, got a nan among {list(values)!r}; leave "
                         f"unfitted or failed runs out before calling")
    return a


def fit_rate(fitted) -> tuple[int, int]:
    """``(k, n)``: how many of the ``n`` runs fitted their training distribution."""
    flags = [bool(f) for f in fitted]
    return sum(flags), len(flags)


def fit_summary(fitted, ood) -> tuple[int, int, float, float, float]:
    """``(k, n, mean, lo, hi)``: the fit rate over the finished runs (``fitted``, one flag per
    run) and the mean of ``ood``, the fitted runs' OOD scores (an unfitted run's OOD number is
    left out, never a zero), with its bootstrap interval. The numbers of a card row
    (:func:`lengen.bench.scorecard.summarize`) and of a seed sweep's arm
    (:func:`lengen.bench.seeds.summarize`)."""
    k, n = fit_rate(fitted)
    return (k, n, *bootstrap_mean(ood))


def _percentiles(boot: np.ndarray, level: float) -> tuple[float, float]:
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_mean(values, *, n_boot: int = N_BOOT, level: float = LEVEL,
                   seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of ``values`` and its percentile bootstrap interval.
    One value: ``(value, nan, nan)``; none: all nan."""
    a = _arr(values)
    if a.size == 0:
        return math.nan, math.nan, math.nan
    if a.size < MIN_N:
        return float(a.mean()), math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n_boot, a.size))          # [n_boot, n]
    lo, hi = _percentiles(a[idx].mean(axis=1), level)
    return float(a.mean()), lo, hi


def iqm(values, axis: int = -1):
    """Interquartile mean: the mean after cutting ``floor(n / 4)`` values from each end of the
    sorted values along ``axis`` (n < 4: the plain mean)."""
    a = np.sort(np.asarray(values, dtype=np.float64), axis=axis)
    n = a.shape[axis]
    if n == 0:
        return math.nan
    cut = n // 4
    return np.take(a, range(cut, n - cut), axis=axis).mean(axis=axis)


def stratified_bootstrap(strata, stat, *, n_boot: int = N_BOOT, level: float = LEVEL,
                         seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """``(stat(strata), lo, hi)``: ``stat`` maps a list of arrays ``[n_boot, n_c]`` (one per
    stratum, each resampled with replacement within itself) to ``[n_boot]``; the point value
    is ``stat`` of the original strata (each as ``[1, n_c]``). No interval when a stratum has
    fewer than two values."""
    arrs = [_arr(s) for s in strata]
    if not arrs or any(a.size == 0 for a in arrs):
        return math.nan, math.nan, math.nan
    point = float(np.asarray(stat([a[None, :] for a in arrs]))[0])
    if any(a.size < MIN_N for a in arrs):
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boots = [a[rng.integers(0, a.size, size=(n_boot, a.size))] for a in arrs]
    lo, hi = _percentiles(np.asarray(stat(boots)), level)
    return point, lo, hi


def aggregate_iqm(scores_by_cell: dict, **kw) -> tuple[float, float, float]:
    """IQM over every run's score of every cell (the runs pooled, as rliable's aggregate IQM
    over a runs x tasks matrix), with a stratified bootstrap interval (cells = strata)."""
    cells = sorted(scores_by_cell)
    return stratified_bootstrap([scores_by_cell[c] for c in cells],
                                lambda bs: iqm(np.concatenate(bs, axis=1), axis=1), **kw)


def prob_improvement(x, y) -> float:
    """``P(X > Y)`` over every pair of a value of ``x`` and one of ``y`` (ties count 1/2)."""
    a, b = _arr(x), _arr(y)
    if a.size == 0 or b.size == 0:
        return math.nan
    return float(_poi(a[None, :], b[None, :])[0])


def _poi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[B, n], [B, m] -> [B]: the probability of improvement of each row pair."""
    d = a[:, :, None] - b[:, None, :]                              # [B, n, m]
    return ((d > 0) + 0.5 * (d == 0)).mean(axis=(1, 2))


def prob_improvement_ci(x_by_cell: dict, y_by_cell: dict, **kw) -> tuple[float, float, float]:
    """``(P(X > Y), lo, hi)`` averaged over the cells both hold, with a stratified bootstrap
    interval (X's and Y's runs resampled independently within each cell)."""
    cells = sorted(set(x_by_cell) & set(y_by_cell))
    if not cells:
        return math.nan, math.nan, math.nan
    k = len(cells)

    def stat(bs):
        return sum(_poi(bs[2 * i], bs[2 * i + 1]) for i in range(k)) / k

    strata = [v for c in cells for v in (x_by_cell[c], y_by_cell[c])]
    return stratified_bootstrap(strata, stat, **kw)


def effective_length(curve: dict, threshold: float):
    """The longest length of ``curve`` ({length: accuracy}) up to which every tested length's
    accuracy is ``>= threshold``; None when the shortest already falls below it."""
    best = None
    for length in sorted(curve):
        if not curve[length] >= threshold:          # nan fails too
            break
        best = length
    return best


def poi_verdict(lo: float, hi: float) -> tuple[str, str | None]:
    """The probability-of-improvement half of the card's rule, on the interval ``[lo, hi]`` of
    ``P(X > Y)``: ``(BEATS, 'x')`` when it lies wholly above 1/2, ``(BEATS, 'y')`` when wholly
    below, ``(UNTESTED, None)`` without an interval (nan), else ``(NOT_SEPARABLE, None)``. Used
    by :func:`separation` within a cell and by the card's comparison across cells."""
    if lo > 0.5:
        return BEATS, "x"
    if hi < 0.5:
        return BEATS, "y"
    if lo != lo:
        return UNTESTED, None
    return NOT_SEPARABLE, None


def separation(x, y, **kw) -> dict:
    """Whether the scores ``x`` (fitted seeds of entry X) beat ``y`` (of entry Y) by the card's
    rule: with at least ``MIN_N`` values on each side, **X beats Y** when the 95% bootstrap
    interval of X's mean lies wholly above Y's (disjoint intervals) **or** the lower end of the
    95% interval of ``P(X > Y)`` is above 1/2; **Y beats X** by the same rule with the roles
    swapped; otherwise **not separable**; **untested** with fewer values.
    -> ``{verdict, winner ('x', 'y' or None), poi, poi_lo, poi_hi, reason}``."""
    a, b = _arr(x), _arr(y)
    out = {"verdict": UNTESTED, "winner": None, "poi": prob_improvement(a, b),
           "poi_lo": math.nan, "poi_hi": math.nan, "reason": ""}
    if a.size < MIN_N or b.size < MIN_N:
        out["reason"] = f"fewer than {MIN_N} fitted seeds (n = {a.size} vs {b.size})"
        return out
    _, out["poi_lo"], out["poi_hi"] = prob_improvement_ci({0: a}, {0: b}, **kw)
    ma, la, ha = bootstrap_mean(a, **kw)
    mb, lb, hb = bootstrap_mean(b, **kw)
    _, by_poi = poi_verdict(out["poi_lo"], out["poi_hi"])
    for side, (lo_w, hi_l) in {"x": (la, hb), "y": (lb, ha)}.items():
        if lo_w > hi_l or by_poi == side:
            why = ("intervals disjoint" if lo_w > hi_l else
                   f"P(improvement) interval above 1/2")
            out.update(verdict=BEATS, winner=side, reason=why)
            return out
    out.update(verdict=NOT_SEPARABLE, reason="intervals overlap and P(improvement) interval "
                                             "holds 1/2")
    return out


def sentence(x_name: str, y_name: str, where: str, result: dict) -> str:
    """The card's sentence for a :func:`separation` result."""
    if result["verdict"] == BEATS:
        w, l = (x_name, y_name) if result["winner"] == "x" else (y_name, x_name)
        return f"{w} beats {l} on {where} ({result['reason']})"
    if result["verdict"] == UNTESTED:
        return f"{x_name} vs {y_name} on {where}: untested ({result['reason']})"
    return f"{x_name} vs {y_name} on {where}: not separable"


__all__ = ["LEVEL", "N_BOOT", "BOOT_SEED", "MIN_N", "BEATS", "NOT_SEPARABLE", "UNTESTED",
           "fit_rate", "fit_summary", "bootstrap_mean", "iqm", "stratified_bootstrap", "aggregate_iqm",
           "prob_improvement", "prob_improvement_ci", "effective_length", "poi_verdict",
           "separation", "sentence"]
