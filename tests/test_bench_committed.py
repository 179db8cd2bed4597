"""The committed bench cards (results/bench-cpu/v<VERSION>, the baselines lengen bench reads by
default, and every contributed card under results/bench-cpu/contrib/): each reads at this battery
version, and each run it counts has its resolved config beside it, so anyone can rerun one (the
leaderboard path of results/bench-cpu/README.md). The baseline card keeps the rows of earlier
battery versions whose cell is unchanged (``CELL_SINCE``); their configs stay in their own
version's folder (``results/bench-cpu/v<k>/configs``)."""
from __future__ import annotations

import csv
import glob
import importlib.util
import json
import os
import re
from collections import Counter

import pytest

from lengen.bench.battery import (CELLS, FIT_LADDER, VERSION, default_lr, default_steps,
                                  fit_rung, lr_grid)
from lengen.bench.export import FILL
from lengen.bench.run import BASELINES, _spec, build_specs, run_name
from lengen.bench.scorecard import read_fit_search, read_runs
from lengen.config import RUNTIME_KEYS, config_diff, resolve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "results", "bench-cpu")
CARDS = [os.path.join(BENCH, f"v{VERSION}")] + sorted(glob.glob(os.path.join(BENCH, "contrib",
                                                                              "*")))
#: the baseline card's pairs not run yet at this battery version (its README says why), as
#: ``variant,cell`` rows; none once the card is whole
PENDING = os.path.join(CARDS[0], "pending.csv")


def _pending() -> set:
    if not os.path.isfile(PENDING):
        return set()
    with open(PENDING, newline="") as f:
        return {(r["variant"], r["cell"]) for r in csv.DictReader(f)}


def _config(card, sub, name, version=VERSION):
    if card == CARDS[0] and version != VERSION:   # a row kept from an earlier battery version
        card = os.path.join(BENCH, f"v{version}")
    path = os.path.join(card, "configs", *sub, name + ".json")
    assert os.path.isfile(path), f"{os.path.relpath(path, ROOT)}: no resolved config"
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("card", CARDS, ids=[os.path.relpath(c, BENCH) for c in CARDS])
def test_a_committed_card_has_a_resolved_config_for_every_run(card):
    rows = [r for r in read_runs(card) if r["status"] != "n/a"]
    assert rows
    for r in rows:
        cfg = _config(card, [], run_name(r["variant"], r["cell"], r["seed"], r["lr"]),
                      r["bench_version"])
        assert (cfg["train"]["seed"], cfg["train"]["lr"]) == (r["seed"], r["lr"]), r
    for r in read_fit_search(card):
        cfg = _config(card, ["fit-search"],
                      run_name(r["variant"], r["cell"], r["seed"], r["lr"], r["steps"]),
                      r["bench_version"])
        assert (cfg["train"]["seed"], cfg["train"]["lr"], cfg["train"]["steps"]) == (
            r["seed"], r["lr"], r["steps"]), r


def test_the_baseline_cards_runs_are_this_batterys_runs():
    """Every run of the committed baseline card (and of its fit search) was trained on exactly
    the config this lengen's battery builds for it (the cell's config at the row's seed, rate
    and steps, with the baseline's overrides), apart from the run's name and the runtime keys.
    A cell's budget changed in ``battery.py`` without a new battery version (and its
    ``CELL_SINCE``) would stop matching here, rows kept from an earlier version included, so
    the card can never silently mix two budgets of one cell (the rates and steps are
    the rows' own: checked here against the ladder, and in ``test_bench.py`` against the
    grid). A key lengen adds later counts as None in a config stored before it, as for the run
    cache: a new key whose default is not None makes the committed runs other runs, here and
    in the cache."""
    card = CARDS[0]
    ignore = RUNTIME_KEYS + ("name",)
    runs = [(r, [], None) for r in read_runs(card) if r["status"] != "n/a"]
    runs += [(r, ["fit-search"], r["steps"]) for r in read_fit_search(card)]
    assert runs
    for r in read_fit_search(card):          # each on its rung of the pre-registered ladder
        _, factors, k = fit_rung(r["rung"])
        assert r["steps"] == k * default_steps(r["cell"], "cpu"), r
        rates = [default_lr(r["cell"], "cpu") * f for f in (factors or ())] or \
            lr_grid(r["cell"], "cpu") + [default_lr(r["cell"], "cpu") * f
                                          for f in FIT_LADDER[0][1]]
        assert any(abs(r["lr"] - lr) <= 1e-9 for lr in rates), r
    for r, sub, steps in runs:
        spec = _spec(r["variant"], BASELINES[r["variant"]], r["cell"], "cpu", r["seed"],
                     r["lr"], "full", "final", steps=steps)
        built = resolve(spec.config, check_device=False).config.to_dict()
        stored = _config(card, sub, spec.name, r["bench_version"])
        assert config_diff(stored, built, ignore) == [], (spec.name, r["bench_version"])


def test_the_baseline_cards_earlier_rows_are_those_its_carry_script_keeps():
    """The baseline card's rows of an earlier battery version are exactly, row for row and
    value for value, that version's own rows (in its folder, with its version: a card carries
    rows of the versions before it too) whose cell the battery still counts (``carry.py``'s
    ``carried``, which asks ``battery.counts_now``), each once: none dropped, added, edited or
    doubled by hand since. A card without a ``carry.py`` keeps no earlier rows."""
    card = CARDS[0]
    script = os.path.join(card, "carry.py")
    have: dict = {}
    for name in ("runs.csv", "fit_search.csv"):
        for r in _raw(os.path.join(card, name)):
            if int(r["bench_version"]) != VERSION:
                have.setdefault((name, int(r["bench_version"])), Counter())[_row(r)] += 1
    if not os.path.isfile(script):
        assert not have, "earlier battery versions' rows but no carry.py that says which"
        return
    spec = importlib.util.spec_from_file_location("carry", script)
    carry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(carry)
    earlier = [v for v in range(1, VERSION) if os.path.isdir(os.path.join(BENCH, f"v{v}"))]
    assert earlier and have
    for name in ("runs.csv", "fit_search.csv"):
        for v in earlier:
            src = os.path.join(BENCH, f"v{v}", name)
            rows = _raw(src) if os.path.isfile(src) else []
            # v's own rows: v's card may hold rows it carried from an earlier version itself
            want = Counter(_row(r) for r in rows
                           if int(r["bench_version"]) == v and carry.carried(r))
            assert have.get((name, v), Counter()) == want, (name, v)
    assert sum(sum(c.values()) for c in have.values()) > 0


def _raw(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _row(r: dict) -> tuple:
    return tuple(sorted(r.items()))


@pytest.mark.parametrize("card", CARDS[1:], ids=[os.path.relpath(c, BENCH) for c in CARDS[1:]])
def test_a_contributed_card_says_how_it_was_made(card):
    with open(os.path.join(card, "README.md")) as f:
        text = f.read()
    # the command that made the runs (not just the --compare hint an exported README has)
    assert re.search(r"lengen bench (--variants? |--baselines-only)", text), \
        f"{card}/README.md does not give the lengen bench command that made its runs"
    assert "commit" in text, f"{card}/README.md does not give the lengen commit"
    assert FILL not in text, (f"{card}/README.md still has a line of lengen bench --export's "
                              f"to complete ({FILL})")
    assert os.path.isfile(os.path.join(card, "scorecard.md"))


def test_the_baseline_card_has_every_baseline_on_every_cell():
    """The committed baseline card is whole but for its pending pairs: every built-in baseline has
    rows on every cell, runs where the battery builds a config for it and one ``n/a`` row (with
    the reason) where it cannot run, both as :func:`lengen.bench.run.build_specs` decides. A
    blank cell on the card would otherwise read as "not run yet" when the scheme cannot run
    there. The only exception: the pairs ``pending.csv`` names (not run yet at this battery
    version, each a pair the battery can run), which have no row."""
    rows = read_runs(CARDS[0])
    pending = _pending()
    assert pending <= {(v, c) for v in BASELINES for c in CELLS}, pending
    for label, overrides in BASELINES.items():
        mine = [r for r in rows if r["variant"] == label]
        _, na = build_specs([(label, overrides)], "cpu")
        runnable = set(CELLS) - {n["cell"] for n in na}
        for cell in CELLS:
            have = [r for r in mine if r["cell"] == cell]
            if (label, cell) in pending:
                assert not have and cell in runnable, (f"{label} / {cell}: in pending.csv but "
                                                       f"has rows or cannot run")
                continue
            assert have, f"{label} / {cell}: no row in the committed card"
            if cell in runnable:                  # the protocol's seeds, each counted once
                assert all(r["status"] != "n/a" for r in have), (label, cell)
                assert sorted(r["seed"] for r in have if r.get("counted")) == [0, 1, 2], (
                    label, cell)
            else:
                assert [r["status"] for r in have] == ["n/a"], (label, cell)
                assert have[0]["reason"] == next(n for n in na if n["cell"] == cell)["reason"]
