"""The v4 card's n/a rows on the two cells v4 changed (reverse, reverse string): one per
built-in baseline that cannot run the cell, with the reason battery v4 gives
(:func:`lengen.bench.run.build_specs`, the same rows a bench writes for these pairs: a part that
runs such a baseline on these cells replaces them with equal ones). An n/a row needs no run;
v3's rows of these pairs no longer count at v4 (:data:`lengen.bench.battery.CELL_SINCE`), so
without these the card would show the pairs as "not run yet".

    python results/bench-cpu/v4/na_rows.py     # appends them to runs.csv here (once)
"""
from __future__ import annotations

import csv
import os

from lengen.bench.battery import VERSION
from lengen.bench.run import BASELINES, build_specs
from lengen.fileio import write_csv_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
CELLS = ("reverse", "reverse_string")


def na_rows() -> list[dict]:
    _, na = build_specs(list(BASELINES.items()), "cpu", cells=list(CELLS))
    return [dict(r, scale="cpu", protocol="full", bench_version=VERSION) for r in na]


def main() -> None:
    path = os.path.join(HERE, "runs.csv")
    with open(path, newline="") as f:
        have = list(csv.DictReader(f))
    new = na_rows()
    if any(r["status"] == "n/a" and r["cell"] in CELLS for r in have):
        raise SystemExit(f"{path} already has n/a rows on {CELLS}: na_rows.py runs once")
    write_csv_atomic(have + new, path)      # columns: the card's, blanks where n/a has none
    print(f"{len(new)} n/a rows appended to {path}: "
          + "; ".join(f"{r['variant']} / {r['cell']}" for r in new))


if __name__ == "__main__":
    main()
