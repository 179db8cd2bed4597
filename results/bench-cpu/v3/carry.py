"""Battery v3's baseline card starts from battery v2's: every row of ``../v2/runs.csv`` and
``../v2/fit_search.csv`` whose cell battery v3 did not change
(:data:`lengen.bench.battery.CELL_SINCE`) is this battery's row as it is (same config, same
rule; ``tests/test_bench_committed.py`` rebuilds each run's config under v3 and compares it with
the one stored in ``../v2/configs``). They keep ``bench_version`` 2. The rows of the changed
cells (addition) are v3's own runs, added by the parts in ``parts.csv``.

    python results/bench-cpu/v3/carry.py      # writes runs.csv and fit_search.csv here

Refuses to overwrite: run once, before the first part.
"""
from __future__ import annotations

import csv
import io
import os

from lengen.bench.battery import counts_now
from lengen.fileio import write_text_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
V2 = os.path.join(os.path.dirname(HERE), "v2")


def carried(row: dict) -> bool:
    """Whether this battery counts ``row`` (of an earlier battery's card) as its own: the
    battery's one rule, :func:`lengen.bench.battery.counts_now` (a malformed row is an error)."""
    return counts_now(row["bench_version"], row["cell"], "row")


def carry(name: str) -> int:
    """Copy the rows of ``../v2/<name>`` whose cell is unchanged since v2; return how many."""
    src, dst = os.path.join(V2, name), os.path.join(HERE, name)
    if os.path.exists(dst):
        raise SystemExit(f"{dst} exists: carry.py runs once, before the first v3 part")
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
        print(f"{name}: {carry(name)} rows of ../v2/{name} kept")
