"""Per-seed averages of this folder's Table A row (``results.csv``): sequence accuracy (%) over
all test lengths, the seen ones (K <= 8) and the unseen ones, per column and seed, written to
``per_seed.csv`` (lengen's own ``length_scores``, as the recipe's table uses).

    PYTHONPATH=. python experiments/index-warping-summation/per_seed.py
"""
import csv
import os

from lengen.eval.length_sweep import length_scores
from lengen.fileio import write_csv_atomic

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "index-warping-summation")   # the results folder this script reads and writes
M = 8

with open(os.path.join(HERE, "results.csv"), newline="") as f:
    rows = list(csv.DictReader(f))
out = []
for col in dict.fromkeys(r["model"] for r in rows):
    of = [r for r in rows if r["model"] == col]
    per = {}
    for rng, lo, hi in (("all", 2, None), ("seen", 2, M), ("unseen", M + 1, None)):
        for s in length_scores(of, min_length=lo, max_length=hi, metric="seq_acc", by=("seed",)):
            per.setdefault(int(s["seed"]), {})[rng] = round(100 * s["score"], 2)
    out += [{"column": col, "seed": seed, **v} for seed, v in sorted(per.items())]
write_csv_atomic(out, os.path.join(HERE, "per_seed.csv"))
print(open(os.path.join(HERE, "per_seed.csv")).read())
