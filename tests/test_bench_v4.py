"""results/bench-cpu/v4: the rows battery v4's card holds of its own version on the two cells it
changed, besides its parts' runs: the budget probe's runs of three pairs (seed_from_probe.py,
whose configs it checks equal v4's) and the n/a rows of the baselines that cannot run a cell
(na_rows.py), each exactly as its script makes it."""
from __future__ import annotations

import csv
import importlib.util
import os
import shlex

import pytest

from lengen.bench.battery import VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V4 = os.path.join(ROOT, "results", "bench-cpu", "v4")
pytestmark = pytest.mark.skipif(VERSION != 4, reason="battery v4's card")


def _script(name):
    spec = importlib.util.spec_from_file_location(f"v4_{name}", os.path.join(V4, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows():
    with open(os.path.join(V4, "runs.csv"), newline="") as f:
        return list(csv.DictReader(f))


def _key(r: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in r.items()))


def test_the_probes_pairs_are_its_runs_with_their_configs_checked():
    seed = _script("seed_from_probe")
    rows = [r for r in _rows() if (r["variant"], r["cell"]) in seed.PAIRS]
    want = [r for r, _, _ in seed.probe_rows()]          # asserts each config equals v4's
    assert sorted(map(_key, rows)) == sorted(map(_key, want)) and len(rows) == 15
    for r in rows:
        assert r["bench_version"] == "4" and r["steps"] in ("8000", "12000"), r


def test_the_na_rows_on_the_changed_cells_are_the_batterys():
    na = _script("na_rows")
    rows = [r for r in _rows() if r["status"] == "n/a" and r["cell"] in na.CELLS]
    want = na.na_rows()
    assert len(rows) == len(want) == 6
    full = {k: "" for k in rows[0]}                  # the csv writer's blanks
    assert sorted(map(_key, rows)) == sorted(_key(dict(full, **r)) for r in want)


def test_every_changed_pair_is_landed_by_a_part_or_pending():
    """Each runnable (baseline, changed cell) pair either has rows that a ``parts.csv`` row made
    (its command names the baseline and the cell: a bench part, or seed_from_probe.py for the
    probe's pairs) or is in ``pending.csv``, never both; the n/a pairs have only their row."""
    from lengen.bench.run import BASELINES

    na = _script("na_rows")
    seed = _script("seed_from_probe")
    rows = _rows()
    with open(os.path.join(V4, "pending.csv"), newline="") as f:
        pending = {(r["variant"], r["cell"]) for r in csv.DictReader(f)}
    with open(os.path.join(V4, "parts.csv"), newline="") as f:
        parts = list(csv.DictReader(f))
    cannot = {(r["variant"], r["cell"]) for r in na.na_rows()}
    landed = set()
    for p in parts:
        if p["command"] == "python results/bench-cpu/v4/seed_from_probe.py":
            landed |= set(seed.PAIRS)
            continue
        args = shlex.split(p["command"])
        after = args[args.index("--cells") + 1:]
        cells = after[:next(i for i, a in enumerate(after) if a.startswith("--"))]
        assert set(cells) <= set(na.CELLS), p
        if "--fit-search" in args:      # the fit search's part: fit_search.csv rows, no runs
            continue
        names = args[args.index("--baselines-only") + 1:args.index("--cells")]
        landed |= {(n, c) for n in names for c in cells} - cannot
    runnable = {(b, c) for b in BASELINES for c in na.CELLS} - cannot
    assert landed | pending == runnable and not landed & pending
    for pair in runnable:
        have = [r for r in rows if (r["variant"], r["cell"]) == pair]
        assert len(have) == (5 if pair in landed else 0), pair
        assert all(r["bench_version"] == "4" for r in have), pair
