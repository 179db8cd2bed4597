"""One table of every claim's verdict under both readings (fits / learns) and both protocol
readings (A: the recipe's evaluation, randomized runs drawing positions as in training; B:
``reading_b.py``, those runs evaluated with positions 0..T-1).

    python experiments/addition-cpu-recipe/summarize.py [FOLDER]

FOLDER (default: this folder) holds the recipe's ``claims.csv`` (protocol A) and
``reading_b/claims.csv`` (protocol B). Writes ``FOLDER/verdicts.csv`` and ``.md``: one row per
claim and reading, with n, the two arms' means and pass counts under each protocol. Nothing is
recomputed: the verdicts are the report code's (``lengen.recipes.addition.report``).
"""
from __future__ import annotations

import csv
import os
import sys

from lengen.fileio import write_csv_atomic
from lengen.recipes.common import write_md

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu-recipe")   # the results folder this script reads and writes
FIELDS = ("verdict", "n", "base_mean", "other_mean", "diff", "larger_std", "base_passed",
          "other_passed")
#: the columns the Markdown table shows per protocol reading
SHOWN = ("verdict", "n", "base_mean", "other_mean", "base_passed", "other_passed")


def read(path: str) -> dict:
    with open(path) as f:
        return {(r["key"], r["reading"]): r for r in csv.DictReader(f)}


def fmt(v: str) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v or "-"
    return str(int(f)) if f.is_integer() else f"{f:.1f}"


def main(folder: str = HERE) -> None:
    a = read(os.path.join(folder, "claims.csv"))
    b = read(os.path.join(folder, "reading_b", "claims.csv"))
    rows = []
    for (key, reading), ra in a.items():
        row = {"key": key, "reading": reading, "where": ra["where"]}
        for proto, r in (("A", ra), ("B", b.get((key, reading), {}))):
            row.update({f"{proto}_{f}": r.get(f, "") for f in FIELDS})
        rows.append(row)
    write_csv_atomic(rows, os.path.join(folder, "verdicts.csv"))
    grid = [["claim", "where", "reading"] + [f"{p}: {c}" for p in "AB" for c in SHOWN]]
    grid += [[r["key"], r["where"], r["reading"]] + [fmt(r[f"{p}_{c}"]) for p in "AB"
                                                     for c in SHOWN] for r in rows]
    write_md(os.path.join(folder, "verdicts.md"),
             "Verdicts by claim, reading and protocol reading",
             "A: the recipe's evaluation; B: randomized runs evaluated at positions 0..T-1. "
             "n = seeds in the paired comparison; means are OOD EM (11..20 digits) over those "
             "seeds (base = FIRE, except for randomized:fire, Fig. 8, where base = FIRE without "
             "randomized positions and other = FIRE); passed = seeds that pass the reading, for "
             "the pass-count claims.", grid, label_columns=3)
    print(f"wrote {folder}/verdicts.csv, {folder}/verdicts.md")


if __name__ == "__main__":
    main(*sys.argv[1:])
