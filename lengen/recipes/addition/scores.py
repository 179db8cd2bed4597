"""Run scores of ``lengen reproduce addition``: one record per run from the sweep's rows (see
:mod:`.report` for what each field means), and the pure helpers over them that both the tables
(:mod:`.report`) and the figures (:mod:`.figures`) read: :func:`best` and :func:`trials` (a
setting's runs at one N), :func:`by_seed` (one field per init seed, the runs that pass a
reading), :func:`pooled` (an error-analysis metric over runs), :func:`reach`.

Below :mod:`.figures`, :mod:`.report` and :mod:`.recipe`, which import it; it imports none of them.
"""
from __future__ import annotations

import math

from lengen.eval.length_sweep import add_lengths

REACH = 90.0        # % EM the reach requires at every length up to it
#: % mean EM a run needs over its reading's digits to pass it (issue 27: "fits its training
#: lengths" = >= 95 % mean EM on 1..N)
FIT = 95.0
#: the two readings of "the run learned its training lengths" every claim is judged by
#: (results/addition-cpu-seeds/README.md, where they were stated before the runs): ``fits``,
#: mean EM over 1..N; ``learns`` (learns addition), mean EM over N//2+1..N, which leaves out the
#: short lengths where randomized positions' evaluation draw, not the model, costs EM (the dip
#: explained there by evaluating the same weights with training's draw)
READINGS = ("fits", "learns")


def reading_range(reading: str, N: int) -> tuple[int, int]:
    """The digits (first, last) whose mean EM a run must pass in ``reading``."""
    if reading == "fits":
        return 1, N
    if reading == "learns":
        return N // 2 + 1, N
    raise ValueError(f"unknown reading {reading!r}; valid: {', '.join(READINGS)}")


def _mean(v):
    return sum(v) / len(v) if v else None


def _std(v):
    if len(v) < 2:
        return math.nan
    m = _mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def is_divergence(error: str | None) -> bool:
    """A run stopped by a non-finite loss (``lengen.train.TrainingDiverged``)."""
    return bool(error) and error.startswith("TrainingDiverged")


def curves_by_run(rows) -> dict[str, dict[int, float]]:
    """run -> {length: final EM in %}."""
    out: dict[str, dict[int, float]] = {}
    for r in add_lengths(r for r in rows if r.get("metric") == "seq_acc"
                         and r.get("status", "ok") == "ok" and r.get("value") is not None):
        out.setdefault(r["run"], {})[r["n"]] = 100.0 * float(r["value"])
    return out


def reach(curve: dict[int, float], threshold: float = REACH, start: int = 1) -> int:
    """Longest K with EM >= threshold at every evaluated length from ``start`` to K (``start``
    - 1 if the first fails: 0 from 1)."""
    best = start - 1
    for n in sorted(x for x in curve if x >= start):
        if curve[n] < threshold:
            break
        best = n
    return best


def run_scores(rows, *, M) -> list[dict]:
    """One record per run (the fields of ``scores.csv``: see :mod:`.report`). ``M``: the
    longest test length, or a function of the run's training length N that gives it."""
    curves = curves_by_run(rows)
    out, seen = [], set()
    for r in rows:
        name = r.get("run")
        if name in seen or name is None:
            continue
        seen.add(name)
        rec = {k: r.get(k) for k in ("run", "setting", "label", "N", "seed", "data_seed",
                                     "group")}
        if r.get("status") == "failed":
            rec["status"] = "diverged" if is_divergence(r.get("error")) else "failed"
            rec["error"] = r.get("error")
            out.append(rec)
            continue
        c = curves.get(name, {})
        N = int(rec["N"])
        top = M(N) if callable(M) else M
        ind = [v for n, v in c.items() if n <= N]
        ood = [v for n, v in c.items() if N < n <= top]
        rec.update(status="ok", in_dist=_mean(ind), ood=_mean(ood), at_M=c.get(top),
                   reach=reach(c), ratio=reach(c) / N)
        for reading in READINGS:
            lo, hi = reading_range(reading, N)
            em = _mean([v for n, v in c.items() if lo <= n <= hi])
            rec[f"em_{reading}"] = em
            rec[reading] = em is not None and em >= FIT
            # the reach counted from the reading's first length: a run that learns addition
            # but misses the short lengths (the randomized-positions dip) still has one
            rec[f"reach_{reading}"] = reach(c, start=lo)
        rec["fitted"] = rec["fits"]
        out.append(rec)
    return out


def best(scores, setting: str, N: int, data_seed: int | None = 0) -> dict | None:
    """The best trial (highest OOD EM) of ``setting`` at training length ``N``."""
    runs = trials(scores, setting, N, data_seed=data_seed)
    return max(runs, key=lambda r: (r["ood"] or 0.0, r["in_dist"] or 0.0)) if runs else None


def trials(scores, setting: str, N: int, data_seed: int | None = 0) -> list[dict]:
    return [r for r in scores if r["setting"] == setting and int(r["N"]) == N
            and r["status"] == "ok" and (data_seed is None or r["data_seed"] == data_seed)]


def by_seed(scores, setting: str, N: int, field: str, reading: str | None = None) -> dict:
    """init seed -> ``field`` of ``setting``'s finished runs at ``N`` on data order 0, only the
    runs that pass ``reading`` when one is given."""
    return {int(r["seed"]): r[field] for r in trials(scores, setting, N)
            if reading is None or r[reading]}


def pooled(rows, runs: set, metric: str) -> tuple[float | None, int]:
    """Count-weighted mean of an error-analysis metric over ``runs`` and the error lengths."""
    num = den = 0.0
    for r in rows:
        if r.get("run") in runs and r.get("metric") == metric and r.get("value") is not None:
            w = float(r.get("count", r.get("sequences", 1)) or 0)
            num += float(r["value"]) * w
            den += w
    return (100.0 * num / den if den else None), int(den)


__all__ = ["REACH", "FIT", "READINGS", "reading_range", "is_divergence", "curves_by_run", "reach",
           "run_scores", "best", "trials", "by_seed", "pooled"]
