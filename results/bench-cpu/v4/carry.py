"""Battery v4's baseline card starts from battery v3's: every row of ``../v3/runs.csv`` and
``../v3/fit_search.csv`` whose cell battery v4 did not change
(:data:`lengen.bench.battery.CELL_SINCE`: all but reverse and reverse string) is this battery's
row as it is (same config, same rule; ``tests/test_bench_committed.py`` rebuilds each run's
config under v4 and compares it with the one stored in its own version's ``configs``). They
keep their ``bench_version`` (2 or 3: v3's card itself carried v2's rows of the cells v3 did not
change). The rows of the changed cells are v4's own: the budget probe's runs of three pairs
(``seed_from_probe.py``) and the parts in ``parts.csv``.

    python results/bench-cpu/v4/carry.py      # writes runs.csv and fit_search.csv here

Refuses to overwrite: run once, before the first part.
"""
from __future__ import annotations

import csv
import io
import os

from lengen.bench.battery import counts_now
from lengen.fileio import write_text_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
V3 = os.path.join(os.path.dirname(HERE), "v3")


def carried(row: dict) -> bool:
    """Whether this battery counts ``row`` (of an earlier battery's card) as its own: the
    battery's one rule, :func:`lengen.bench.battery.counts_now` (a malformed row is an error)."""
    return counts_now(row["bench_version"], row["cell"], "row")


def carry(name: str) -> int:
    """Copy the rows of ``../v3/<name>`` whose cell is unchanged since their version; return
    how many."""
    src, dst = os.path.join(V3, name), os.path.join(HERE, name)
    if os.path.exists(dst):
        raise SystemExit(f"{dst} exists: carry.py runs once, before the first v4 part")
    with open(src, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    kept = [r for r in rows if carried(r)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(kept)
    write_text_atomic(buf.getvalue(), dst)
    return len(kept)


if __name__ == "__main__":
    for name in ("runs.csv", "fit_search.csv"):
        print(f"{name}: {carry(name)} rows of ../v3/{name} kept")
