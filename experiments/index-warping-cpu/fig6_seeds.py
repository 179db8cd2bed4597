"""Fig. 6 of the index-warping paper on several seeds (issue 27 item 5): per task and column,
the Table A average (all evaluated lengths), the seen and unseen averages per seed, and the
orderings "head_tail is best" and "head_only beats tail_only" judged by the rule in this folder's
README (written before the runs of seeds 1 and 2 were read).

    PYTHONPATH=. python experiments/index-warping-cpu/fig6_seeds.py results.csv [MORE.csv ...]
    PYTHONPATH=. python experiments/index-warping-cpu/fig6_seeds.py --tasks summation \
        --out results/index-warping-summation/fig6_seeds ROWS.csv [MORE.csv ...]

Reads every given ``results.csv`` (the recipe's rows; the committed one holds seed 0, the others
the seeds run since), keeps the Fig. 6 columns of copy, reverse and sort, and writes
``fig6_seeds.csv`` (one row per task x column x seed) and ``fig6_seeds.md`` (means, stds, fitted
counts and verdicts) next to this script.
"""
from __future__ import annotations

import csv
import os
import statistics
import sys

from lengen.eval.length_sweep import length_scores
from lengen.fileio import write_csv_atomic, write_text_atomic
from lengen.recipes.index_warping import SCALES

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "index-warping-cpu")   # the results folder this script reads and writes
TASKS = ("copy", "reverse", "sort")
COLUMNS = {"ours_sqrt": "head_tail", "head_only": "head_only", "tail_only": "tail_only"}
FIT = 90.0                      # seen-length average (%) for a run to count
NEED = 3                        # fitted seeds per column for a verdict (the 3)


def per_seed(rows, tasks=TASKS, columns=COLUMNS):
    """One record per task x column x seed: the Table A average (all lengths), the seen and
    unseen averages (%), and whether the run fits (seen >= FIT)."""
    out = []
    for task in tasks:
        M = SCALES["cpu"]["M"][task]
        for col, label in columns.items():
            of = [r for r in rows if r["task"] == task and r["model"] == col]
            rec = {}
            for rng, lo, hi in (("all", 2, None), ("seen", 2, M), ("unseen", M + 1, None)):
                for s in length_scores(of, min_length=lo, max_length=hi, metric="seq_acc",
                                       by=("seed",)):
                    rec.setdefault(int(s["seed"]), {})[rng] = 100 * s["score"]
            for seed, v in sorted(rec.items()):
                out.append({"task": task, "column": label, "seed": seed,
                            "all": round(v["all"], 2), "seen": round(v["seen"], 2),
                            "unseen": round(v["unseen"], 2), "fits": v["seen"] >= FIT})
    return out


def mean_std(v: list[float]) -> str:
    """'mean ± sample std' (one decimal), the value alone for one run, '-' for none."""
    if not v:
        return "-"
    return (f"{statistics.fmean(v):.1f} ± {statistics.stdev(v):.1f}" if len(v) > 1
            else f"{v[0]:.1f}")


def verdict(a: list[float], b: list[float], need: int = NEED) -> str:
    """a above b, by the README's rule."""
    if len(a) < need or len(b) < need:
        return f"untested (fitted seeds {len(a)} / {len(b)} < {need})"
    gap = statistics.fmean(a) - statistics.fmean(b)
    spread = max(statistics.stdev(a), statistics.stdev(b))
    if gap <= 0:
        return "not reproduced"
    return "reproduced" if gap > spread else "direction only"


def main(paths, tasks=TASKS, stem=os.path.join(HERE, "fig6_seeds")) -> int:
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            rows += [r for r in csv.DictReader(f) if r.get("status", "ok") in ("ok", "")]
    recs = per_seed(rows, tasks)
    write_csv_atomic(recs, stem + ".csv")
    lines = ["| task | column | seeds run | fitted | Table A average, fitted: mean ± std | "
             "unseen, fitted: mean ± std |", "|---|---|---|---|---|---|"]
    fitted = {}
    for task in tasks:
        for label in COLUMNS.values():
            rr = [r for r in recs if r["task"] == task and r["column"] == label]
            ok = [r for r in rr if r["fits"]]
            fitted[task, label] = [r["all"] for r in ok]

            def ms(key, ok=ok):
                return mean_std([r[key] for r in ok])
            lines.append(f"| {task} | {label} | {len(rr)} ({', '.join(str(r['seed']) for r in rr)})"
                         f" | {len(ok)} | {ms('all')} | {ms('unseen')} |")
    lines += ["", "| task | head_tail > head_only | head_tail > tail_only | head_tail best | "
              "head_only > tail_only |", "|---|---|---|---|---|"]
    for task in tasks:
        ht, ho, to = (fitted[task, c] for c in ("head_tail", "head_only", "tail_only"))
        v1, v2 = verdict(ht, ho), verdict(ht, to)
        order = ("reproduced", "direction only", "not reproduced")
        best = (v1 if v1.startswith("untested") else v2 if v2.startswith("untested") else
                max(v1, v2, key=order.index))       # the weaker of the two comparisons
        lines.append(f"| {task} | {v1} | {v2} | {best} | {verdict(ho, to)} |")
    write_text_atomic("\n".join(lines) + "\n", stem + ".md")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="*", default=[os.path.join(HERE, "results.csv")])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--out", default=os.path.join(HERE, "fig6_seeds"), help="output stem")
    a = ap.parse_args()
    sys.exit(main(a.rows, tuple(a.tasks), a.out))
