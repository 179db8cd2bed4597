"""The committed bench cards (results/bench-cpu/v2, the baselines lengen bench reads by default,
and every contributed card under results/bench-cpu/contrib/): each reads at this battery version,
and each run it counts has its resolved config beside it, so anyone can rerun one (the
leaderboard path of results/bench-cpu/README.md)."""
from __future__ import annotations

import glob
import json
import os

import pytest

from lengen.bench.run import run_name
from lengen.bench.scorecard import read_fit_search, read_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "results", "bench-cpu")
CARDS = [os.path.join(BENCH, "v2")] + sorted(glob.glob(os.path.join(BENCH, "contrib", "*")))


def _config(card, sub, name):
    path = os.path.join(card, "configs", *sub, name + ".json")
    assert os.path.isfile(path), f"{os.path.relpath(path, ROOT)}: no resolved config"
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("card", CARDS, ids=[os.path.relpath(c, BENCH) for c in CARDS])
def test_a_committed_card_has_a_resolved_config_for_every_run(card):
    rows = [r for r in read_runs(card) if r["status"] != "n/a"]
    assert rows
    for r in rows:
        cfg = _config(card, [], run_name(r["variant"], r["cell"], r["seed"], r["lr"]))
        assert (cfg["train"]["seed"], cfg["train"]["lr"]) == (r["seed"], r["lr"]), r
    for r in read_fit_search(card):
        cfg = _config(card, ["fit-search"],
                      run_name(r["variant"], r["cell"], r["seed"], r["lr"], r["steps"]))
        assert (cfg["train"]["seed"], cfg["train"]["lr"], cfg["train"]["steps"]) == (
            r["seed"], r["lr"], r["steps"]), r


@pytest.mark.parametrize("card", CARDS[1:], ids=[os.path.relpath(c, BENCH) for c in CARDS[1:]])
def test_a_contributed_card_says_how_it_was_made(card):
    with open(os.path.join(card, "README.md")) as f:
        text = f.read()
    for what in ("lengen bench", "commit"):
        assert what in text, f"{card}/README.md does not give the {what}"
    assert os.path.isfile(os.path.join(card, "scorecard.md"))
