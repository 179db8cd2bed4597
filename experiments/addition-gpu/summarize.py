"""Addition ``gpu`` scale (issue 27 items 1-3): per-setting statistics over fitted runs, which
the verdicts of README.md read.

    PYTHONPATH=. python experiments/addition-gpu/summarize.py

Reads ``scores.csv`` / ``results.csv`` (the recipe's report, in this folder) and writes
``fitted.csv`` / ``fitted.md``: per setting, n, how many runs fit (mean EM >= 95 % over the
evaluated lengths 1..N, the issue's rule), in-distribution EM, OOD EM (the evaluated lengths
N+1..50) over the fitted runs, mean +- sample std, and the mean EM over lengths 5..N of every run
(the dip at 1-3 digits of randomized FIRE left out). The periodic evaluations (EM at 5, 10, 15,
20, 30 and 40 digits every 500 steps) are the recipe's ``seq_acc_during_training`` rows of
``results.csv``.
"""
from __future__ import annotations

import os

import pandas as pd

from lengen.analysis.tables import markdown_table

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-gpu")   # the results folder this script reads and writes
FIT = 95.0


def ms(x) -> str:
    x = pd.Series(x, dtype=float)
    if len(x) == 0:
        return "-"
    return f"{x.mean():.1f}" if len(x) == 1 else f"{x.mean():.1f} ± {x.std():.1f}"


def per_length() -> pd.DataFrame:
    r = pd.read_csv(os.path.join(HERE, "results.csv"))
    r = r[(r.metric == "seq_acc") & r.split.str.startswith("len=")].copy()
    r["digits"] = r.split.str[4:].astype(int)
    r["em"] = 100 * r.value
    return r[["run", "setting", "N", "seed", "digits", "em"]]


def fitted_table() -> pd.DataFrame:
    sc = pd.read_csv(os.path.join(HERE, "scores.csv"))
    pl = per_length()
    rows = []
    for (setting, N), g in sc.groupby(["setting", "N"], sort=False):
        fit = g[g.in_dist >= FIT]
        mid = [pl[(pl.run == r) & pl.digits.between(5, N)].em.mean() for r in g.run]
        rows.append(dict(setting=setting, N=N, n=len(g), fitted=len(fit),
                         seeds=" ".join(map(str, g.seed)),
                         in_dist_all=" / ".join(f"{v:.1f}" for v in g.in_dist),
                         em_5_N_all=" / ".join(f"{v:.1f}" for v in mid),
                         ood_all=" / ".join(f"{v:.1f}" for v in g.ood),
                         in_dist_fitted=ms(fit.in_dist), ood_fitted=ms(fit.ood)))
    return pd.DataFrame(rows)


if __name__ == "__main__":
    t = fitted_table()
    t.to_csv(os.path.join(HERE, "fitted.csv"), index=False)
    with open(os.path.join(HERE, "fitted.md"), "w") as f:
        f.write("Per setting: runs (init seeds), how many fit (mean EM >= 95 % over the evaluated "
                "lengths 1..N), each run's in-distribution EM, EM over 5..N and OOD EM "
                "(evaluated lengths N+1..50), and means ± sample std over the fitted runs "
                "only.\n\n"
                + markdown_table([list(t.columns)] + t.astype(str).values.tolist()) + "\n")
    print(t.to_string())
