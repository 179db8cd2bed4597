"""The bench card: computed only from ``runs.csv`` (one row per variant x cell x seed x learning
rate, :mod:`lengen.bench.run`) with :mod:`lengen.bench.stats`, beside the committed baselines of
the same battery version.

Per variant x cell: the fit rate ``k/n`` over the counted seeds (the runs at the chosen
learning rate), the OOD mean over the **fitted** seeds with its 95% percentile bootstrap
interval, the accuracy-vs-length curve (one plot per cell, every entry, shaded interval), the
effective length (the longest tested length up to which the mean curve stays at or above the
cell's threshold, :func:`lengen.bench.battery.effective_threshold`), and the chosen learning
rate. Across cells: the interquartile mean of every counted run's score (an unfitted run scores
0, a fitted one its OOD score clipped to [0, 1]; n/a cells left out) with a stratified bootstrap
interval. For each of the user's variants against each baseline: the probability of improvement
over the cells both ran (same scoring), and per cell a sentence "X beats Y on C" only where
:func:`lengen.bench.stats.separation` says so, else "not separable".

Where a cell is ``‡`` (no seed fitted) and the card folder (or the baselines' folder) holds
``fit_search.csv`` (``lengen bench --fit-search``, :data:`lengen.bench.battery.FIT_LADDER`)
with rows of that pair, a footnote under the OOD table says which budgets the protocol and the
search tried and whether a rung fitted, and ``scorecard.csv`` gets a ``fit_search`` column; the
card's numbers stay the protocol's. Without ``fit_search.csv`` the card is as before.

Written into the output folder: ``runs.csv`` (own runs), ``scorecard.md / .csv / .json``,
``scorecard.png`` (variants x cells, colour = OOD mean over fitted seeds, an x where no seed
fitted), ``curves/<cell>.png``. A row of another budget of its cell than this battery's is
refused (:func:`lengen.bench.battery.check_version`, per cell); v1 scorecards stay readable through
:func:`read_scorecard` for history.
"""
from __future__ import annotations

import csv
import io
import json
import os
import time

import numpy as np

from lengen.analysis.tables import markdown_table
from lengen.bench import stats
from lengen.bench.battery import (CELLS, CHOMSKY, FIT_LADDER, LR_FACTORS, VERSION,
                                  check_version, effective_threshold, train_top)
from lengen.errors import ConfigError
from lengen.fileio import save_json_atomic, savefig_atomic, write_text_atomic
from lengen.provenance import short_commit, source_commit
from lengen.recipes.randomized_pe.published import PAPER_TABLE4
from lengen.recipes.tra_flipflop.published import PAPER_TABLE1

RUN_FIELDS = ["variant", "cell", "seed", "lr", "lr_factor", "role", "counted", "selected_lr",
              "status", "fitted", "seen", "val", "ood", "curve", "steps", "seconds", "scale",
              "protocol", "bench_version", "reason"]
SUMMARY_FIELDS = ["variant", "cell", "family", "status", "fit_k", "fit_n", "failed",
                  "ood_mean", "ood_lo", "ood_hi", "effective_length", "threshold", "lr_chosen",
                  "lr_grid", "paper_ood", "baseline", "scale", "protocol", "bench_version",
                  "reason"]
#: ``fit_search.csv`` (``lengen bench --fit-search``): one row per run of the fit search; ``seen``
#: is the in-distribution figure the cell's fit rule reads (the train-length score), ``val``
#: the held-out validation score
FIT_SEARCH_CSV = "fit_search.csv"
FIT_FIELDS = ["variant", "cell", "rung", "steps", "steps_factor", "lr", "lr_factor", "seed",
              "status", "fitted", "seen", "val", "seconds", "scale", "bench_version", "commit",
              "reason"]


def published(label: str, cell: str) -> float | None:
    """The paper's OOD figure for a baseline on a cell, on the cell's own scale (0..1), where a
    paper reports one: flip-flop (TRA paper Table 1: mean of sparse and dense, four seeds) and
    the Chomsky cells (Ruoss et al. Table 4: mean over 10 seeds at the best lr, lengths 41..500).
    The papers' lengths and budgets are larger than the cpu scale's (see the battery)."""
    if cell == "flipflop":
        if label in PAPER_TABLE1["dense"]:
            return (PAPER_TABLE1["sparse"][label][0] + PAPER_TABLE1["dense"][label][0]) / 200
    if cell in CHOMSKY:
        key = {"NoPE": "none", "RoPE": "rope", "ALiBi": "alibi", "Rand. RoPE": "rand_rope"}
        if label in key:
            return PAPER_TABLE4[CHOMSKY[cell]][key[label]][0] / 100
    return None


# ---- reading ---------------------------------------------------------------------------------

def _num(v):
    if v in (None, "", "None", "nan"):
        return None
    return float(v)


def _bool(v):
    return {"True": True, "False": False, True: True, False: False}.get(v)


def _conv_run(row: dict) -> dict:
    out = dict(row)
    for k in ("lr", "lr_factor", "selected_lr", "seen", "val", "ood", "seconds"):
        if k in out:
            out[k] = _num(out[k])
    for k in ("seed", "steps", "bench_version"):
        if out.get(k) not in (None, ""):
            out[k] = int(float(out[k]))
    for k in ("fitted", "counted"):
        if k in out:
            out[k] = _bool(out[k])
    return out


def runs_path(path: str) -> str:
    """``path`` itself, or ``path/runs.csv`` when ``path`` is a card's folder."""
    return os.path.join(path, "runs.csv") if os.path.isdir(path) else path


def read_runs(path: str, drop=frozenset()) -> list[dict]:
    """Rows of a card's ``runs.csv`` (a file or the card's folder), typed; every row must be of
    this battery's budget for its cell (:func:`check_version`: a v2 row of a cell v3 changed is
    never compared with a v3 row). Rows of the ``(variant, cell)`` pairs in ``drop`` are left
    out before that check (a bench that runs those pairs again replaces them)."""
    p = runs_path(path)
    if not os.path.isfile(p):
        raise ConfigError(f"{p}: no such file; give a bench output folder (holding runs.csv) "
                          f"or a runs.csv")
    with open(p, newline="") as f:
        rows = [_conv_run(r) for r in csv.DictReader(f)
                if (r.get("variant"), r.get("cell")) not in drop]
    for r in rows:
        if "bench_version" not in r or r["bench_version"] in (None, ""):
            raise ConfigError(f"{p}: rows without a bench_version column are not bench runs")
        check_version(r["bench_version"], f"the rows of {p}", r.get("cell"))
        if "seed" not in r:
            raise ConfigError(f"{p} is a scorecard, not a runs.csv (no seed column)")
    return rows


def read_fit_search(path: str) -> list[dict]:
    """Rows of a ``fit_search.csv`` (the file, or a card folder holding one; none there: []),
    typed; every row must be of this battery's budget for its cell and name a rung of
    :data:`lengen.bench.battery.FIT_LADDER`."""
    p = os.path.join(path, FIT_SEARCH_CSV) if os.path.isdir(path) else path
    if not os.path.isfile(p):
        return []
    with open(p, newline="") as f:
        rows = [_conv_run(r) for r in csv.DictReader(f)]
    rungs = [r[0] for r in FIT_LADDER]
    for r in rows:
        missing = [k for k in ("variant", "cell", "rung", "steps", "lr", "status",
                               "bench_version") if r.get(k) in (None, "")]
        if missing:
            raise ConfigError(f"{p}: a row without {', '.join(missing)}: not a fit_search.csv "
                              f"(columns: {', '.join(FIT_FIELDS)})")
        check_version(r["bench_version"], f"the rows of {p}", r.get("cell"))
        if r["rung"] not in rungs:
            raise ConfigError(f"{p}: unknown fit-search rung {r['rung']!r}. Valid: "
                              f"{', '.join(rungs)}")
    return rows


def _rates(rows) -> str:
    """``lr 0.0005, 0.001 x 2,500 steps; lr 0.001 x 5,000 steps`` of ``rows`` (by steps)."""
    by = {}
    for r in rows:
        by.setdefault(int(r["steps"]), set()).add(float(r["lr"]))
    return "; ".join(f"lr {', '.join(f'{x:g}' for x in sorted(lrs))} x {n:,} steps"
                     for n, lrs in sorted(by.items()))


def fit_search_note(variant: str, cell: str, runs: list[dict], fits: list[dict]):
    """(summary, sentence) of the fit search of an unfitted pair: what the protocol's runs
    (``runs``) and the search's (``fits``) tried, and whether a rung fitted; None when
    ``fits`` has no row of the pair."""
    fits = [r for r in fits if r["variant"] == variant and r["cell"] == cell]
    if not fits:
        return None
    order = [r[0] for r in FIT_LADDER]
    fits = sorted(fits, key=lambda r: (order.index(r["rung"]), r["steps"], r["lr"]))
    done = [r for r in fits if r.get("status") in ("ok", "not fitted")]
    won = [r for r in done if r.get("fitted")]
    proto = [r for r in runs if r["variant"] == variant and r["cell"] == cell
             and r.get("status") in ("ok", "not fitted")]
    seeds = sorted({int(r["seed"]) for r in fits if r.get("seed") is not None})
    who = f"seed {', '.join(map(str, seeds))}"
    head = f"{variant} / {cell}: not fitted at {_rates(proto)} (the protocol)"
    if won:
        rung = won[0]["rung"]
        before = [r for r in done if order.index(r["rung"]) < order.index(rung)]
        return (f"fitted at {rung} ({_rates([won[0]])})",
                head + (f", nor at {_rates(before)}" if before else "") + f"; fitted at "
                f"{_rates(won)} (rung {rung}, {who}): the cell's budget is short for "
                f"{variant}; the numbers above stay the protocol's")
    ran = list(dict.fromkeys(r["rung"] for r in done))
    left = [n for n in order if n not in ran]
    if not left:
        return (f"not fitted at any rung ({', '.join(order)})",
                head + f", nor at {_rates(done)} (fit search, {who}): not fitted at any "
                f"budget tried")
    return (f"incomplete: not fitted so far ({', '.join(ran) or 'no rung finished'}); "
            f"not run: {', '.join(left)}",
            head + (f", nor so far at {_rates(done)} (fit search, {who})" if done else "")
            + f"; the search is incomplete (rungs not run or failed: {', '.join(left)})")


def read_scorecard(path: str) -> list[dict]:
    """A battery v1 ``scorecard.csv`` (one row per variant x cell, one seed), for history: read
    as it is; never mixed into a v2 card."""
    def conv(k, v):
        if k in ("seen", "ood", "paper_ood"):
            return float(v) if v not in ("", "None") else None
        if k == "fitted":                      # empty for n/a and failed cells
            return {"True": True, "False": False}.get(v)
        if k == "bench_version":
            return int(v)
        return v

    with open(path, newline="") as f:
        return [{k: conv(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


#: the lengen checkout this module lives in (the committed baselines are in its results/)
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def baseline_path(scale: str) -> str:
    """Where the committed baseline runs of ``scale`` for this battery version live in a lengen
    checkout (``results/bench-<scale>/v<VERSION>/runs.csv``; v1's card is the scorecard.* files
    of ``results/bench-<scale>/``)."""
    return os.path.join(_REPO, "results", f"bench-{scale}", f"v{VERSION}", "runs.csv")


# ---- statistics per variant x cell -------------------------------------------------------------

def _counted(rows):
    return [r for r in rows if r.get("counted") and r.get("status") in
            ("ok", "not fitted", "failed")]


def _curve(r) -> dict:
    c = json.loads(r.get("curve") or "{}")
    return {(int(k) if str(k).lstrip("-").isdigit() else k): float(v) for k, v in c.items()}


def mean_curve(runs) -> dict:
    """``{length: (mean, lo, hi)}`` over the fitted runs' curves (lengths every run has)."""
    curves = [_curve(r) for r in runs if r.get("fitted")]
    if not curves:
        return {}
    keys = [k for k in curves[0] if all(k in c for c in curves)]
    return {k: stats.bootstrap_mean([c[k] for c in curves]) for k in keys}


def run_score(r) -> float:
    """A counted run's score for the aggregates: its OOD score clipped to [0, 1] when it
    fitted, 0 when it did not fit (did not fit is an outcome) or failed."""
    if not r.get("fitted") or r.get("ood") is None:
        return 0.0
    return float(min(1.0, max(0.0, r["ood"])))


def summarize(rows: list[dict], *, baseline: bool = False) -> list[dict]:
    """One summary row per variant x cell of ``rows`` (runs.csv rows and n/a rows)."""
    out = []
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for v in variants:
        for cell in CELLS:
            mine = [r for r in rows if r["variant"] == v and r["cell"] == cell]
            if not mine:
                continue
            base = {"variant": v, "cell": cell, "family": CELLS[cell][0], "baseline": baseline,
                    "paper_ood": published(v, cell), "scale": mine[0].get("scale"),
                    "protocol": mine[0].get("protocol"),
                    "bench_version": mine[0].get("bench_version"), "reason": "",
                    "threshold": effective_threshold(cell)}
            if any(r.get("status") == "n/a" for r in mine):
                out.append(dict(base, status="n/a", reason=mine[0].get("reason", "")))
                continue
            counted = _counted(mine)
            finished = [r for r in counted if r["status"] != "failed"]
            k, n, m, lo, hi = stats.fit_summary((r.get("fitted") for r in finished),
                                                [r["ood"] for r in finished if r.get("fitted")])
            curve = mean_curve(finished)
            thr = effective_threshold(cell)
            eff = (stats.effective_length({x: c[0] for x, c in curve.items()}, thr)
                   if thr is not None and curve else None)
            grid = sorted({r["lr"] for r in mine if r.get("lr") is not None})
            chosen = next((r.get("selected_lr") for r in mine if r.get("selected_lr")), None)
            status = ("failed" if not finished else "ok" if k else "not fitted")
            out.append(dict(base, status=status, fit_k=k, fit_n=n,
                            failed=len(counted) - len(finished), ood_mean=m, ood_lo=lo,
                            ood_hi=hi, effective_length=eff, lr_chosen=chosen,
                            lr_grid=" ".join(f"{x:g}" for x in grid),
                            reason="" if k else ("no seed fitted its training distribution"
                                                 if finished else "every run failed")))
    return out


def _by_cell(rows, variant, fitted_only=False):
    got = {}
    for r in _counted(r for r in rows if r["variant"] == variant):
        if r["status"] == "failed" and fitted_only:
            continue
        if fitted_only:
            if r.get("fitted"):
                got.setdefault(r["cell"], []).append(float(r["ood"]))
        else:
            got.setdefault(r["cell"], []).append(run_score(r))
    return got


def aggregates(rows: list[dict]) -> list[dict]:
    """Per variant: the IQM over every counted run of its cells (:func:`run_score`) with a
    stratified bootstrap interval, and the cells it covers."""
    out = []
    for v in dict.fromkeys(r["variant"] for r in rows):
        by_cell = _by_cell(rows, v)
        if not by_cell:
            continue
        p, lo, hi = stats.aggregate_iqm(by_cell)
        out.append({"variant": v, "iqm": p, "lo": lo, "hi": hi, "cells": len(by_cell),
                    "runs": sum(len(x) for x in by_cell.values())})
    return out


def fitted_cells(summary: list[dict]) -> list[dict]:
    """Per variant of ``summary`` (:func:`summarize`'s rows): the cells it ran (n/a cells left
    out), those where at least two thirds of its counted seeds fitted (2 of 3 at the cpu
    default), and those where none did (the card's ‡ and failed cells)."""
    out = {}
    for s in summary:
        if s["status"] == "n/a":
            continue
        row = out.setdefault(s["variant"], {"variant": s["variant"], "cells": 0,
                                            "two_thirds": 0, "none": 0})
        row["cells"] += 1
        k = s.get("fit_k") or 0
        n = (s.get("fit_n") or 0) + (s.get("failed") or 0)      # a failed seed counts too
        row["two_thirds"] += bool(n) and 3 * k >= 2 * n
        row["none"] += not k
    return list(out.values())


def comparisons(rows: list[dict], users: list[str], baselines: list[str]) -> dict:
    """Each user variant against each baseline: ``poi`` rows (probability of improvement
    across the cells both ran, with its interval, and its verdict by the PoI half of a cell's
    rule, :func:`lengen.bench.stats.poi_verdict`: the interval's lower end above 1/2 = X beats
    Y, upper end below 1/2 = Y beats X) and
    ``cells`` rows (per cell, :func:`lengen.bench.stats.separation` on the fitted seeds'
    OOD scores, with the card's sentence)."""
    poi, cells = [], []
    for u in users:
        ux, uf = _by_cell(rows, u), _by_cell(rows, u, fitted_only=True)
        for b in baselines:
            bx, bf = _by_cell(rows, b), _by_cell(rows, b, fitted_only=True)
            common = sorted(set(ux) & set(bx), key=list(CELLS).index)
            if not common:
                continue
            p, lo, hi = stats.prob_improvement_ci({c: ux[c] for c in common},
                                                  {c: bx[c] for c in common})
            rule, winner = stats.poi_verdict(lo, hi)
            if winner == "x":
                verdict = f"{u} beats {b} across cells (P interval above 1/2)"
            elif winner == "y":
                verdict = f"{b} beats {u} across cells (P interval below 1/2)"
            elif rule == stats.UNTESTED:
                verdict = "untested (a cell with fewer than 2 runs)"
            else:
                verdict = "not separable"
            poi.append({"variant": u, "baseline": b, "cells": len(common), "poi": p,
                        "lo": lo, "hi": hi, "verdict": verdict})
            for c in common:
                res = stats.separation(uf.get(c, []), bf.get(c, []))
                cells.append({"variant": u, "baseline": b, "cell": c, **res,
                              "sentence": stats.sentence(u, b, c, res)})
    return {"poi": poi, "cells": cells}


# ---- writing ---------------------------------------------------------------------------------

def _pct(x, cell="") -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.2f}" if cell == "lm" else f"{100 * x:.1f}"


def _cell_text(s) -> str:
    if s is None:
        return ""
    if s["status"] in ("n/a", "failed"):
        return s["status"]
    c = s["cell"]
    frac = f"{s['fit_k']}/{s['fit_n']}"
    if not s["fit_k"]:
        return f"‡ {frac}"
    txt = _pct(s["ood_mean"], c)
    if s["ood_lo"] == s["ood_lo"] and s["ood_lo"] is not None:
        txt += f" [{_pct(s['ood_lo'], c)}, {_pct(s['ood_hi'], c)}]"
    txt += f" {frac}"
    if s.get("paper_ood") is not None:
        txt += f" ({_pct(s['paper_ood'])})"
    return txt


def _commit() -> str:
    """The lengen commit the card was written at (short hash), as every run records it
    (:func:`lengen.provenance.source_commit`)."""
    return short_commit(source_commit())


#: beside a baseline card's runs.csv while it is completed in parts: the (variant, cell) pairs
#: not run yet at this battery version, as ``variant,cell`` rows
PENDING_CSV = "pending.csv"


def pending_note(folder: str) -> str:
    """A sentence naming the pairs ``folder/pending.csv`` lists, by cell ('' without one)."""
    p = os.path.join(folder, PENDING_CSV)
    if not os.path.isfile(p):
        return ""
    by_cell: dict[str, list[str]] = {}
    with open(p, newline="") as f:
        for r in csv.DictReader(f):
            by_cell.setdefault(r["cell"], []).append(r["variant"])
    if not by_cell:
        return ""
    return (f"Not run yet at battery v{VERSION} (the baseline card is completed in parts; "
            f"{PENDING_CSV}): " + "; ".join(f"{c}: {', '.join(v)}" for c, v in by_cell.items())
            + ". Until they are, the aggregate and fitted-cell tables count those entries over "
              "their other cells only, so compare them there with care.")


def _base_path(baselines, scale: str) -> str | None:
    """The runs.csv (or card folder) ``baselines`` names: ``'default'`` is the committed one."""
    return baseline_path(scale) if baselines == "default" else baselines


def _folder(path: str) -> str:
    """The folder of the runs.csv ``path`` names (the file or its card folder)."""
    return os.path.dirname(os.path.abspath(runs_path(path)))


def load_baselines(baselines, scale: str, own: set) -> tuple[list[dict], str]:
    """(rows, note) of the baselines shown beside ``own`` variants: ``baselines`` is
    ``'default'`` (:func:`baseline_path`), a runs.csv / card folder, or None."""
    path = _base_path(baselines, scale)
    if not path:
        return [], ""
    if baselines == "default" and not os.path.isfile(path):
        return [], (f"No committed battery v{VERSION} baselines at scale {scale} yet ({path} "
                    f"is absent): this card shows only the variants run here.")
    rows = [r for r in read_runs(path) if r["variant"] not in own]
    # the committed ones are named by their place in lengen's repository, not on this disk
    where = (f"lengen's committed battery v{VERSION} baselines "
             f"({os.path.relpath(path, _REPO)} at lengen {_commit()})"
             if baselines == "default" else path)
    pending = pending_note(_folder(path))
    return rows, f"Baselines (marked *) read from {where}, not retrained." + (
        f" {pending}" if pending else "")


def baseline_fit_search(baselines, scale: str) -> list[dict]:
    """The ``fit_search.csv`` rows beside the baselines' runs.csv (``baselines`` as in
    :func:`load_baselines`); none there: []."""
    path = _base_path(baselines, scale)
    if not path or not os.path.exists(path):
        return []
    return read_fit_search(_folder(path))


def write_card(rows: list[dict], out: str, scale: str, *, baselines="default",
               base_rows: list[dict] | None = None, note: str | None = None,
               title: str | None = None, fit_rows: list[dict] | None = None,
               log=print) -> list[str]:
    """Write ``runs.csv`` (``rows``: this bench's runs and n/a rows) and the card beside the
    baselines (``baselines``: see :func:`load_baselines`; or ``base_rows`` given directly).
    ``fit_rows``: the fit-search rows of both (default: ``out``'s ``fit_search.csv`` and the
    one beside the baselines read from ``baselines``). Returns the paths written."""
    os.makedirs(out, exist_ok=True)
    log = log or (lambda *a, **k: None)
    for r in rows:
        check_version(r.get("bench_version", VERSION), "this bench's rows", r.get("cell"))
    own = list(dict.fromkeys(r["variant"] for r in rows))
    fits = (read_fit_search(os.path.join(out, FIT_SEARCH_CSV)) if fit_rows is None
            else list(fit_rows))
    same = False                              # --baselines is ``out`` itself?
    if base_rows is None:
        base_rows, note = load_baselines(baselines, scale, set(own))
        path = _base_path(baselines, scale)
        same = bool(path) and os.path.realpath(_folder(path)) == os.path.realpath(out)
        shown = {r["variant"] for r in base_rows}     # a variant of ours never takes theirs
        mine = {(r["variant"], r["cell"]) for r in fits}
        fits += [r for r in baseline_fit_search(baselines, scale)
                 if r["variant"] in shown and (r["variant"], r["cell"]) not in mine]
    own_pending = pending_note(out)          # the committed baseline card, written in place
    if own_pending and not same:          # a baselines folder's own is in their note already
        note = f"{note} {own_pending}" if note else own_pending
    base_names = list(dict.fromkeys(r["variant"] for r in base_rows))
    protocols = ({r.get("protocol") for r in rows if r.get("status") != "n/a"},
                 {r.get("protocol") for r in base_rows if r.get("status") != "n/a"})
    comparable = not base_rows or protocols[0] == protocols[1]
    if not comparable:
        note = (note or "") + (f" The baselines ran protocol {sorted(protocols[1])}, this card "
                               f"{sorted(protocols[0])}: different tuning budgets, so no "
                               f"probability of improvement and no verdict is given.")
    all_rows = rows + base_rows
    summary = summarize(rows) + summarize(base_rows, baseline=True)
    footnotes = []
    for s in summary:
        got = (fit_search_note(s["variant"], s["cell"], all_rows, fits)
               if s["status"] == "not fitted" else None)
        if got:
            s["fit_search"] = got[0]
            footnotes.append(f"- ‡ {got[1]}.")
        elif s["status"] == "not fitted":
            s["fit_search"] = "not run"
            footnotes.append(f"- ‡ {s['variant']} / {s['cell']}: fit search not run "
                             f"(`lengen bench --fit-search` runs it).")
    agg = aggregates(all_rows)
    comp = comparisons(all_rows, own, base_names) if comparable else {"poi": [], "cells": []}
    cells = [c for c in CELLS if any(s["cell"] == c for s in summary)]
    variants = own + base_names
    by = {(s["variant"], s["cell"]): s for s in summary}
    star = {v: " *" if v in base_names else "" for v in variants}
    protocol = sorted(protocols[0] - {None}) or ["?"]
    seeds = sorted({int(r["seed"]) for r in rows if r.get("seed") not in (None, "")})

    def table(fn):
        grid = [["variant"] + cells]
        for v in variants:
            grid.append([v + star[v]] + [fn(by.get((v, c))) for c in cells])
        return markdown_table(grid, align="l" + "r" * len(cells))

    def eff(s):
        if s is None or s["status"] in ("n/a", "failed"):
            return (s or {}).get("status", "")
        if s["cell"] == "flipflop":
            return "-"
        e = s.get("effective_length")
        return "< shortest" if e is None and s["fit_k"] else ("-" if e is None else str(e))

    def lr(s):
        if s is None or s["status"] == "n/a":
            return (s or {}).get("status", "")
        return f"{s['lr_chosen']:g}" if s.get("lr_chosen") else "-"

    lines = [f"# {title or 'lengen bench card'}", "",
             f"Battery v{VERSION}, scale {scale}, protocol {', '.join(protocol)}; seeds "
             f"{seeds}; lengen {_commit()}; written "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
             "",
             "**Protocol.** Every entry gets the same budget: per cell, seed 0 runs at the cell's "
             f"default learning rate x {list(LR_FACTORS)} and the rate with the best held-out "
             "in-distribution validation score (training lengths only, a draw separate from "
             "training and test) is chosen; the other seeds run at it. A seed sets the init and "
             "the data order. (Protocol quick: 2 seeds at the default rate, every other OOD "
             "length.) A run counts only at the chosen rate.",
             "",
             "## OOD score per cell",
             "",
             "Mean over the fitted seeds [95% percentile bootstrap interval; with 3 or fewer "
             "fitted seeds its ends are the lowest and the highest seed] and k/n seeds that "
             "fitted their training distribution (‡ = none did: no OOD number counts); (x) = the "
             "paper's figure (flip-flop: TRA paper Table 1, mean of sparse and dense; Chomsky: "
             "Ruoss et al. 2023 Table 4, mean over 10 seeds at the best rate, trained on 1..40, "
             "tested on 41..500): context, not a target, as the papers' lengths and budgets are "
             "larger than this scale's (the battery names every difference). Higher is better; "
             "lm: ppl(1x)/ppl(8x). Cells: "
             + "; ".join(f"{c}: {CELLS[c][2]} ({CELLS[c][1]})" for c in cells) + ".",
             "", table(_cell_text), ""]
    if footnotes:
        lines += ["**Fit search** (`fit_search.csv`, `lengen bench --fit-search`): where no seed "
                  "fitted, the protocol's first seed was run again on a pre-registered ladder of "
                  "budgets (the grid widened, then more steps), one rung at a time, stopping at "
                  "the first that fits (rungs: "
                  + ", ".join(n for n, _, _ in FIT_LADDER) + "; docs/bench.md). A fitted rung "
                  "says the cell's budget is short for that entry; it does not change the "
                  "numbers above. Only pairs with no fitted seed are searched; a pair where "
                  "some seed fitted is not.", ""] + footnotes + [""]
    fc = fitted_cells(summary)
    lines += ["## Fitted cells", "",
              "Per entry: the cells it ran (n/a left out), those where at least two thirds of "
              "its seeds fitted their training distribution (2 of 3 at 3 seeds), and those "
              "where none did (‡ or failed).", ""]
    grid = [["variant", "cells run", "fitted on >= 2/3 of seeds", "fitted on none"]]
    for f in fc:
        grid.append([f["variant"] + star[f["variant"]], str(f["cells"]), str(f["two_thirds"]),
                     str(f["none"])])
    lines += [markdown_table(grid, align="lrrr"), ""]
    lines += ["## Effective length",
             "",
             "The longest tested length up to which the mean accuracy of the fitted seeds stays at "
             "or above the cell's threshold (its fit threshold: Chomsky and copy / reverse 90%, "
             "addition 95%; lm: the multiple of the window up to which ppl(1x)/ppl(L) >= 0.9); "
             "< shortest: already below it at the shortest tested length; -: no seed fitted, and "
             "always for flip-flop, whose tests are not lengths. Lengths in the task's unit; "
             "curves in curves/<cell>.png.",
             "", table(eff), "",
             "## Chosen learning rate", "", table(lr), "",
             "## Aggregate across cells", "",
             "Interquartile mean of every counted run's score (fitted: its OOD score clipped to "
             "[0, 1]; not fitted or failed: 0; n/a cells left out), 95% stratified bootstrap "
             "interval (runs resampled within each cell). Entries that cannot run some cells "
             "are aggregated over fewer cells (column cells).", ""]
    grid = [["variant", "IQM", "95% interval", "cells", "runs"]]
    for a in agg:
        grid.append([a["variant"] + star[a["variant"]], _pct(a["iqm"]),
                     f"[{_pct(a['lo'])}, {_pct(a['hi'])}]", str(a["cells"]), str(a["runs"])])
    lines += [markdown_table(grid), ""]
    if comp["poi"]:
        lines += ["## Probability of improvement", "",
                  "P(X > Y): over every pair of a run of X and a run of Y in the same cell (ties "
                  "1/2), averaged over the cells both ran (same scores as the aggregate), with a "
                  "95% stratified bootstrap interval. Rule: X beats Y when the interval's lower "
                  "end is above 1/2.", ""]
        grid = [["variant", "baseline", "cells", "P(X > Y)", "95% interval", "verdict"]]
        for p in comp["poi"]:
            grid.append([p["variant"], p["baseline"], str(p["cells"]), f"{p['poi']:.2f}",
                         f"[{p['lo']:.2f}, {p['hi']:.2f}]", p["verdict"]])
        lines += [markdown_table(grid, align="lllrrl"), "",
                  "## Per cell", "",
                  "Rule (lengen.bench.stats.separation), on the fitted seeds' OOD scores, at "
                  "least 2 per side: X beats Y when X's 95% interval lies wholly above Y's or the "
                  "lower end of P(X > Y)'s 95% interval is above 1/2; otherwise not separable.",
                  ""]
        lines += [f"- {c['sentence']}" for c in comp["cells"]] + [""]
    if note:
        lines += [note.strip(), ""]
    paths = []
    runs_csv = os.path.join(out, "runs.csv")
    _write_csv(rows, RUN_FIELDS, runs_csv)
    md = os.path.join(out, "scorecard.md")
    write_text_atomic("\n".join(lines), md)
    sc = os.path.join(out, "scorecard.csv")
    _write_csv(summary, SUMMARY_FIELDS + (["fit_search"] if footnotes else []), sc)
    js = os.path.join(out, "scorecard.json")
    save_json_atomic(_jsonable({"version": VERSION, "scale": scale, "protocol": protocol,
                                "seeds": seeds, "commit": _commit(), "summary": summary,
                                "aggregate": agg, "fitted_cells": fc, "poi": comp["poi"],
                                "cells": comp["cells"],
                                "note": note}), js)
    png = os.path.join(out, "scorecard.png")
    _figure(variants, cells, by, png, scale)
    paths += [runs_csv, md, sc, js, png]
    paths += plot_curves(all_rows, os.path.join(out, "curves"), scale, star)
    for p in paths:
        log(f"wrote {p}")
    return paths


def _jsonable(x):
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _write_csv(rows, fields, path):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    write_text_atomic(buf.getvalue(), path)


def compare_cards(a: str, b: str, out: str, *, log=print) -> list[str]:
    """Two cards side by side with the same statistics: the variants of ``a`` (a bench output
    folder or its runs.csv) as the entries, those of ``b`` as the baselines they are compared
    with. Both must be of this battery version and the same scale; a name in both gets the
    prefix ``A:`` / ``B:``."""
    ra, rb = read_runs(a), read_runs(b)
    scales = {r.get("scale") for r in ra} | {r.get("scale") for r in rb}
    if len(scales - {None, ""}) > 1:
        raise ConfigError(f"--compare: the two cards ran at different scales {sorted(scales)}; "
                          f"compare cards of one scale")
    fa, fb = (read_fit_search(os.path.dirname(os.path.abspath(runs_path(x)))) for x in (a, b))
    clash = {r["variant"] for r in ra} & {r["variant"] for r in rb}
    if clash:
        def tag(rows, t):
            return [dict(r, variant=f"{t}:{r['variant']}") if r["variant"] in clash else r
                    for r in rows]
        ra, fa, rb, fb = tag(ra, "A"), tag(fa, "A"), tag(rb, "B"), tag(fb, "B")
    scale = next(iter(scales - {None, ""}), "cpu")
    return write_card(ra, out, scale, base_rows=rb, fit_rows=fa + fb, log=log,
                      note=f"Entries from {runs_path(a)}; baselines (marked *) from "
                           f"{runs_path(b)}.", title=f"lengen bench: {a} vs {b}")


# ---- figures -----------------------------------------------------------------------------------

def plot_curves(rows: list[dict], folder: str, scale: str, star=None) -> list[str]:
    """One figure per cell: every entry's mean accuracy over its fitted seeds at every tested
    length with its 95% bootstrap band (flip-flop: its three splits); the training range
    shaded grey. Returns the paths written."""
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only

    os.makedirs(folder, exist_ok=True)
    star = star or {}
    paths = []
    for cell in CELLS:
        entries = [(v, mean_curve(_counted([r for r in rows if r["variant"] == v
                                            and r["cell"] == cell])))
                   for v in dict.fromkeys(r["variant"] for r in rows)]
        entries = [(v, c) for v, c in entries if c]
        if not entries:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for v, c in entries:
            keys = list(c)
            xs = list(range(len(keys))) if cell == "flipflop" else keys
            m = np.array([c[k][0] for k in keys])
            lo = np.array([c[k][1] for k in keys])
            hi = np.array([c[k][2] for k in keys])
            line, = ax.plot(xs, m, marker="o", ms=3, label=v + star.get(v, ""))
            ok = ~np.isnan(lo)
            if ok.any():
                ax.fill_between(np.asarray(xs)[ok], lo[ok], hi[ok], alpha=0.2,
                                color=line.get_color())
            if cell == "flipflop":
                ax.set_xticks(xs, keys)
        top = train_top(cell, scale)
        lo_x = min(min(c) for _, c in entries) if cell != "flipflop" else None
        if top is not None and lo_x is not None and top >= lo_x:
            ax.axvspan(lo_x - 0.5, top + 0.5, color="0.9", zorder=0)
        thr = effective_threshold(cell)
        if thr is not None:
            ax.axhline(thr, color="0.5", ls=":", lw=1)
        ax.set_xlabel({"lm": "multiple of the training window", "flipflop": "split"}.get(
            cell, "length (task units)"))
        ax.set_ylabel("ppl(1x) / ppl(L)" if cell == "lm" else "accuracy")
        ax.set_title(f"{cell}: mean of fitted seeds, 95% band (grey: trained)", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(folder, f"{cell}.png")
        savefig_atomic(fig, path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def _figure(variants, cells, by, path, scale) -> None:
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only

    vals = np.full((len(variants), len(cells)), np.nan)
    fig, ax = plt.subplots(figsize=(1.1 * len(cells) + 2.5, 0.5 * len(variants) + 1.8))
    for i, v in enumerate(variants):
        for j, c in enumerate(cells):
            s = by.get((v, c))
            if s is not None and s["status"] == "ok" and s["ood_mean"] == s["ood_mean"]:
                vals[i, j] = min(1.0, max(0.0, s["ood_mean"]))
    ax.imshow(np.ma.masked_invalid(vals), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_facecolor("#d0d0d0")
    for i, v in enumerate(variants):
        for j, c in enumerate(cells):
            s = by.get((v, c))
            if s is None:
                continue
            if s["status"] == "not fitted":
                ax.plot(j, i, marker="x", color="red", markersize=14, mew=2)
            label = {"n/a": "n/a", "failed": "fail"}.get(s["status"])
            if label is None:
                label = f"{s['fit_k']}/{s['fit_n']}"
                if s["status"] == "ok":
                    label = f"{100 * s['ood_mean']:.0f}\n{label}"
            dark = s["status"] == "ok" and vals[i, j] < 0.6          # viridis
            ax.text(j, i, label, ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(cells)), cells, rotation=30, ha="right")
    ax.set_yticks(range(len(variants)), variants)
    ax.set_title(f"lengen bench v{VERSION} ({scale}): OOD mean over fitted seeds, k/n fitted; "
                 f"x = none fitted", fontsize=9)
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)


__all__ = ["published", "read_runs", "read_scorecard", "baseline_path", "summarize",
           "aggregates", "fitted_cells", "comparisons", "write_card", "compare_cards",
           "plot_curves", "load_baselines", "run_score", "mean_curve", "RUN_FIELDS",
           "SUMMARY_FIELDS", "FIT_FIELDS", "FIT_SEARCH_CSV", "read_fit_search", "fit_search_note",
           "PENDING_CSV", "pending_note",
           "baseline_fit_search"]
