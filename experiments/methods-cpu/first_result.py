"""A first result per method (issue 52 item 6): flip-flop (IID / sparse / dense) and copy (seen /
unseen lengths) at the cpu scale, 3 seeds each, beside NoPE, RoPE and TRA from the same bench.

    python experiments/methods-cpu/first_result.py BENCH_FOLDER [--out results/methods-cpu]

Reads a ``lengen bench`` output folder (battery v2, protocol ``full``): its ``runs.csv`` where
one is written (a bench part writes it when the part ends), and every finished run folder
(``<variant>--<cell>--s<seed>--lr<lr>`` holding ``eval.json``; ``val.json`` for the learning
rate choice) that runs.csv does not hold yet, scored with the battery's own functions
(``lengen.bench.battery.score / curve / val_score``). A run both hold is scored both ways and
must agree (else this stops).

Per method x cell, only the runs at the chosen learning rate count, as on the bench card: seed 0
at each rate of the cell's grid, the rate with the best held-out validation score
(``lengen.bench.run.select_lr``), seeds 1 and 2 at that rate. A cell whose seed 0 has not run
every rate yet is left out (pending). Per split: ``n`` counted seeds, ``k/n`` of them fitted (the
cell's fit rule: flip-flop IID >= 95% whole-sequence accuracy; copy mean exact match at the
training lengths 2..10 >= 90%), and the mean over the fitted seeds with a 95% percentile
bootstrap interval (``lengen.bench.stats.bootstrap_mean``; one fitted seed: no interval).
Splits: flip-flop ``iid``, ``sparse`` (p_i = 0.98), ``dense`` (p_i = 0.1), each its
whole-sequence accuracy; copy ``seen`` (mean exact match over the tested lengths <= 10) and
``unseen`` (over 11..30, the cell's OOD score).

Writes ``table.csv`` (one row per method x split, with the fitted seeds' values and, for the
record, every counted seed's, unfitted ones included, which the mean never reads) and ``table.md``
(a markdown table, methods x splits) into ``--out``. Public API only.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys

from lengen.analysis.tables import markdown_table
from lengen.bench.stats import bootstrap_mean, fit_rate
from lengen.bench.battery import (VERSION, cell_config, curve, default_lr, lr_grid, score,
                                  train_top, val_score)
from lengen.bench.run import BASELINE_GROUPS, BASELINES, run_name, select_lr
from lengen.bench.scorecard import read_runs

CELLS = ("flipflop", "copy")
SPLITS = {"flipflop": ("iid", "sparse", "dense"), "copy": ("seen", "unseen")}
#: the references shown first, then the methods in BASELINE_GROUPS order, then any other label
REFERENCES = ("NoPE", "RoPE", "TRA")
FIELDS = ["method", "cell", "split", "n", "fitted_k", "fitted_n", "mean", "lo", "hi", "lr",
          "seeds", "fitted_seeds", "values", "all_values", "source"]
_NAME = re.compile(r"^(?P<label>.+)--(?P<cell>[a-z_]+)--s(?P<seed>\d+)--lr(?P<lr>[0-9.e+-]+)$")


def _label(folder_label: str, known: dict) -> str:
    """A run folder's label (spaces written ``_``) back to the variant's: from runs.csv where
    it names it, else a built-in baseline's, else the folder's as it is."""
    if folder_label in known:
        return known[folder_label]
    for name in BASELINES:
        if name.replace(" ", "_") == folder_label:
            return name
    return folder_label


def folder_row(run_dir: str, label: str, cell: str, scale: str) -> dict | None:
    """A runs.csv-like row of a finished run folder (None while it is still running): its
    fit, OOD score, validation score and curve from its ``eval.json`` / ``val.json``."""
    ev, va = os.path.join(run_dir, "eval.json"), os.path.join(run_dir, "val.json")
    if not os.path.isfile(ev):
        return None
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    want = cell_config(cell, scale)["train"]["steps"]
    if cfg["train"]["steps"] != want:
        raise SystemExit(f"{run_dir}: {cfg['train']['steps']} training steps, the {scale} "
                         f"scale's {cell} cell has {want}: give --scale of the bench")
    with open(ev) as f:
        rows = json.load(f)
    val = None
    if os.path.isfile(va):
        with open(va) as f:
            val = val_score(cell, json.load(f)["rows"])
    s = score(cell, scale, rows)
    return {"variant": label, "cell": cell, "seed": int(cfg["train"]["seed"]),
            "lr": float(cfg["train"]["lr"]), "status": "ok" if s["fitted"] else "not fitted",
            "fitted": bool(s["fitted"]), "ood": s["ood"], "val": val,
            "curve": json.dumps(curve(cell, scale, rows)), "counted": None,
            "source": "folder"}


def _same(a, b) -> bool:
    a, b = float("nan") if a is None else a, float("nan") if b is None else b
    return (a != a and b != b) or math.isclose(a, b, rel_tol=0, abs_tol=1e-9)


def collect(folder: str, scale: str = "cpu") -> list[dict]:
    """Every finished flip-flop and copy run of ``folder``: runs.csv rows (``source``
    ``runs.csv``), then the run folders runs.csv does not hold (``source`` ``folder``, their
    ``counted`` decided by :func:`mark_counted`)."""
    rows, known = [], {}
    path = os.path.join(folder, "runs.csv")
    if os.path.isfile(path):
        for r in read_runs(path):
            if r["cell"] in CELLS and r.get("status") != "n/a":
                if r.get("scale") != scale or r.get("protocol") != "full":
                    raise SystemExit(f"{path}: a {r.get('scale')} / {r.get('protocol')} row; "
                                     f"this table is of the {scale} scale, protocol full")
                rows.append(dict(r, source="runs.csv"))
                known[r["variant"].replace(" ", "_")] = r["variant"]
    held = {run_name(r["variant"], r["cell"], r["seed"], r["lr"]): r for r in rows}
    for name in sorted(os.listdir(folder)):
        m = _NAME.match(name)
        if not m or m["cell"] not in CELLS or not os.path.isdir(os.path.join(folder, name)):
            continue
        label = _label(m["label"], known)
        got = folder_row(os.path.join(folder, name), label, m["cell"], scale)
        if got is None:
            continue
        if name in held:                          # both: the two readings must agree
            r = held[name]
            if r["status"] != "failed" and (bool(r["fitted"]) != got["fitted"]
                                            or not _same(r["ood"], got["ood"])):
                raise SystemExit(f"{name}: runs.csv says fitted={r['fitted']} ood={r['ood']}, "
                                 f"its folder fitted={got['fitted']} ood={got['ood']}")
            continue
        rows.append(got)
    return mark_counted(rows, scale)


def mark_counted(rows: list[dict], scale: str) -> list[dict]:
    """Decide ``counted`` (and ``selected_lr``) for the folder rows, as the bench does: the
    rate chosen on seed 0's validation scores over the whole grid; a method x cell whose seed 0
    has not run every rate yet has no chosen rate (its runs are pending, none counted)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["variant"], r["cell"]), []).append(r)
    for (label, cell), mine in groups.items():
        chosen = next((r.get("selected_lr") for r in mine if r["source"] == "runs.csv"
                       and r.get("selected_lr")), None)
        if chosen is None:
            grid = lr_grid(cell, scale)
            first = [r for r in mine if r["seed"] == 0 and r.get("val") is not None]
            rates = {round(r["lr"], 12) for r in first}
            if all(round(lr, 12) in rates for lr in grid):
                chosen = select_lr(first, default_lr(cell, scale))
        for r in mine:
            r["selected_lr"] = chosen
            if r["source"] == "folder":
                r["counted"] = chosen is not None and abs(r["lr"] - chosen) <= 1e-12
    return rows


def _split_value(cell: str, split: str, crv: dict, scale: str) -> float:
    if cell == "flipflop":
        return float(crv[split])
    top = train_top(cell, scale)
    lengths = [k for k in crv if (int(k) <= top) == (split == "seen")]
    return sum(float(crv[k]) for k in lengths) / len(lengths)


def _order(labels) -> list[str]:
    first = [x for x in REFERENCES if x in labels]
    methods = [x for x in BASELINE_GROUPS["methods"] if x in labels]
    return first + methods + sorted(x for x in labels if x not in first + methods)


def table(rows: list[dict], scale: str = "cpu") -> list[dict]:
    """One row per method x cell x split over the counted runs (see the module docstring)."""
    out = []
    for label in _order({r["variant"] for r in rows}):
        for cell in CELLS:
            counted = [r for r in rows if r["variant"] == label and r["cell"] == cell
                       and r.get("counted") and r.get("status") in ("ok", "not fitted")]
            if not counted:
                continue
            counted.sort(key=lambda r: r["seed"])
            k, n = fit_rate(r["fitted"] for r in counted)
            fitted = [r for r in counted if r["fitted"]]
            for split in SPLITS[cell]:
                every = [_split_value(cell, split, json.loads(r["curve"]), scale)
                         for r in counted]
                vals = [v for v, r in zip(every, counted) if r["fitted"]]
                m, lo, hi = bootstrap_mean(vals)
                out.append({"method": label, "cell": cell, "split": split, "n": n,
                            "fitted_k": k, "fitted_n": n, "mean": m, "lo": lo, "hi": hi,
                            "lr": counted[0]["selected_lr"],
                            "seeds": " ".join(str(r["seed"]) for r in counted),
                            "fitted_seeds": " ".join(str(r["seed"]) for r in fitted),
                            "values": " ".join(f"{v:.4f}" for v in vals),
                            "all_values": " ".join(f"{v:.4f}" for v in every),
                            "source": "+".join(sorted({r["source"] for r in counted}))})
    return out


def _cell(t: dict | None) -> str:
    if t is None:
        return "pending"
    fit = f"{t['fitted_k']}/{t['fitted_n']}"
    if t["fitted_k"] == 0:
        return f"‡ {fit}"
    mean = 100 * t["mean"]
    if t["lo"] != t["lo"]:                    # one fitted seed: no interval
        return f"{mean:.1f} ({fit})"
    return f"{mean:.1f} [{100 * t['lo']:.1f}, {100 * t['hi']:.1f}] ({fit})"


#: the README's declaration that ties a ``--tied`` table's entries to ``table.csv``
#: (lengen.analysis.numbers): ``C(method, cell, split)`` gives an entry's printed numbers
TIE_DECLARATION = """t := csv('table.csv')
C := lambda m, c, s: (lambda r: ([] if r.fitted_k == 0 else [100 * r['mean']] + ([] if r.lo != r.lo else [100 * r.lo, 100 * r.hi])) + [r.fitted_k, r.fitted_n])(row(t, method=m, cell=c, split=s))"""


def markdown(trows: list[dict], tied: bool = False) -> str:
    """Methods x splits; each entry ``mean [95% interval] (k/n)`` in %, over the fitted seeds;
    ``‡ 0/n`` where no seed fitted, ``pending`` where the cell has no chosen rate yet. With
    ``tied``, each entry is followed by ``<!-- num: C(...) -->`` (see :data:`TIE_DECLARATION`)."""
    by = {(t["method"], t["cell"], t["split"]): t for t in trows}
    heads = [f"{c} {s}" for c in CELLS for s in SPLITS[c]]
    grid = [["method"] + heads]

    def entry(label, c, s):
        text = _cell(by.get((label, c, s)))
        if tied and (label, c, s) in by:
            text += f" <!-- num: C({label!r}, {c!r}, {s!r}) -->"
        return text
    for label in dict.fromkeys(t["method"] for t in trows):
        grid.append([label] + [entry(label, c, s) for c in CELLS for s in SPLITS[c]])
    return markdown_table(grid, align="l" + "r" * len(heads))


def write(trows: list[dict], out: str) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "table.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for t in trows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in t.items()})
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
        f.write(markdown(trows) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="a lengen bench output folder (battery v%d)" % VERSION)
    p.add_argument("--out", default=os.path.join("results", "methods-cpu"))
    p.add_argument("--scale", default="cpu")
    p.add_argument("--tied", action="store_true",
                   help="print the table with each entry tied to table.csv for a README")
    a = p.parse_args(argv)
    trows = table(collect(a.folder, a.scale), a.scale)
    write(trows, a.out)
    print(markdown(trows, tied=a.tied))
    print(f"wrote {os.path.join(a.out, 'table.csv')} and table.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
