"""results/bench-cpu/v3/budget-probe: its runs are battery v3's runs of the two baselines at the
probe's longer steps (probe.py's ``STEPS_FACTOR``, the path the fit search's longer rungs take),
each with its resolved config beside it and its fitted flag the cell's rule on its score; its
verdict.md is what its pre-registered rule (verdict.py) writes from its committed rows, and the
pre-registered files are as committed before the runs; seed 0's config at v2's fit-search rate
and steps is that search run's (the README's "same configs"); and battery v4 took its steps on
reverse and reverse string only."""
from __future__ import annotations

import csv
import importlib.util
import json
import os

import pytest

from lengen.bench.battery import FLIPFLOP_FIT, default_steps, effective_threshold, lr_grid
from lengen.bench.run import BASELINES, _spec, run_name
from lengen.bench.scorecard import _conv_run, runs_path
from lengen.config import RUNTIME_KEYS, config_diff, resolve
from lengen.fileio import file_digest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "results", "bench-cpu", "v3", "budget-probe")


def _load_verdict():
    spec = importlib.util.spec_from_file_location("budget_probe_verdict",
                                                  os.path.join(PROBE, "verdict.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VERDICT = _load_verdict()        # the probe's pre-registered rule (results/, not a package)


@pytest.fixture
def v3_steps(monkeypatch):
    """The probe's rule as committed, run under the battery it was written for: its guard that
    the battery's steps are v3's (``verdict.factors()``) calls ``battery.default_steps``, which
    this answers with v3's steps (``verdict.V3_STEPS``); battery v4 doubled two of them. Yields
    the battery's own ``default_steps``."""
    from lengen.bench import battery

    own = battery.default_steps
    monkeypatch.setattr(battery, "default_steps",
                        lambda cell, scale="cpu": VERDICT.V3_STEPS[cell])
    yield own


def test_the_probes_runs_are_battery_v3s_runs_at_its_longer_steps(v3_steps):
    factors = VERDICT.factors()
    with open(runs_path(PROBE), newline="") as f:  # battery v3's rows: read_runs, at v4,
        rows = [_conv_run(r) for r in csv.DictReader(f)]      # refuses two of their cells
    assert {r["bench_version"] for r in rows} == {3}
    assert {(r["variant"], r["cell"]) for r in rows} == set(VERDICT.PAIRS)
    for variant, cell in VERDICT.PAIRS:     # the whole protocol ran: no row missing
        mine = [r for r in rows if (r["variant"], r["cell"]) == (variant, cell)]
        tune = sorted(r["lr"] for r in mine if r["role"] == "tune" and r["seed"] == 0)
        assert tune == sorted(lr_grid(cell, "cpu")), (variant, cell, tune)
        finals = sorted(r["seed"] for r in mine if r["role"] == "final")
        assert finals == [1, 2] and len(mine) == 5, (variant, cell, finals)
    for r in rows:
        seed, lr, steps = r["seed"], r["lr"], r["steps"]
        assert steps == factors[r["cell"]] * VERDICT.V3_STEPS[r["cell"]], r
        spec = _spec(r["variant"], BASELINES[r["variant"]], r["cell"], "cpu", seed, lr,
                     "full", "final", steps=steps)
        built = resolve(spec.config, check_device=False).config.to_dict()
        with open(os.path.join(PROBE, "configs",
                               run_name(r["variant"], r["cell"], seed, lr) + ".json")) as f:
            stored = json.load(f)
        assert config_diff(stored, built, RUNTIME_KEYS + ("name",)) == [], r


def test_battery_v4_took_the_probes_steps_on_reverse_and_reverse_string_only(v3_steps):
    """Battery v4's steps are the probe's candidate (probe.py's factor on v3's steps) on the
    two cells it changed, and v3's on the other two the probe tried (lengen/bench/battery.py)."""
    factors = VERDICT.factors()
    taken = {"reverse", "reverse_string"}
    assert {c: default_steps(c, "cpu") for c in factors} == {
        c: (factors[c] if c in taken else 1) * VERDICT.V3_STEPS[c] for c in factors}


def test_the_rules_v3_steps_are_the_v3_cards_own():
    """verdict.py's ``V3_STEPS`` (which the ``v3_steps`` fixture answers the rule's guard with)
    are the steps of the runs the v3 card holds for those cells (their configs, committed)."""
    v2 = os.path.join(ROOT, "results", "bench-cpu", "v2", "configs")
    for cell, steps in VERDICT.V3_STEPS.items():
        lr = lr_grid(cell, "cpu")[1]
        with open(os.path.join(v2, run_name("NoPE", cell, 0, lr) + ".json")) as f:
            assert json.load(f)["train"]["steps"] == steps, cell


def test_the_probes_verdict_is_what_its_rule_writes(v3_steps):
    with open(os.path.join(PROBE, "verdict.md")) as f:
        assert f.read() == VERDICT.verdict()


#: sha256 of the probe's pre-registered files as committed at e8776e0, before any of its runs
#: (PLAN.md): an edit to any of them after the runs shows here
PREREGISTERED = {
    "PLAN.md": "e00b95db05262cb46bc851a4cb3ca22a1019dfa1d2565b13301e7d0a192504d6",
    "probe.py": "c3e6a83a001b2ead11287704a62bea7fc190e15eb026809e3fe9dc6db7225670",
    "verdict.py": "cc52a51f8e7dadc09bb78e73390924bae07640e191ebd3eacea1f5c984ba9868",
}


def test_the_preregistered_files_are_as_committed_before_the_runs():
    for name, digest in PREREGISTERED.items():
        assert file_digest(os.path.join(PROBE, name)) == digest, name


def test_each_runs_fitted_flag_is_the_cells_rule_on_its_seen_score():
    with open(runs_path(PROBE), newline="") as f:
        rows = [_conv_run(r) for r in csv.DictReader(f)]
    for r in rows:
        rule = FLIPFLOP_FIT if r["cell"] == "flipflop" else effective_threshold(r["cell"])
        assert r["fitted"] == (r["seen"] >= rule), r


def test_seed_0_at_the_fit_searchs_rate_and_steps_ran_the_search_runs_config():
    """The README says seed 0's score did not always repeat v2's fit search at the same rate
    and steps, with the same config: each fitted search run of a probed pair and the probe's
    seed-0 run at its rate differ only in the name and the runtime keys."""
    v2 = os.path.join(ROOT, "results", "bench-cpu", "v2")
    with open(os.path.join(v2, "fit_search.csv"), newline="") as f:
        found = [r for r in csv.DictReader(f) if r["fitted"] == "True"
                 and (r["variant"], r["cell"]) in set(VERDICT.PAIRS)]
    assert {(r["variant"], r["cell"]) for r in found} == set(VERDICT.PAIRS) - {
        ("Rand. RoPE", "reverse")}            # no search for it: it fitted a seed at v2
    for r in found:
        lr, steps = float(r["lr"]), int(r["steps"])
        with open(os.path.join(v2, "configs", "fit-search",
                               run_name(r["variant"], r["cell"], 0, lr, steps) + ".json")) as f:
            searched = json.load(f)
        with open(os.path.join(PROBE, "configs",
                               run_name(r["variant"], r["cell"], 0, lr) + ".json")) as f:
            probed = json.load(f)
        assert probed["train"]["steps"] == steps
        assert config_diff(probed, searched, RUNTIME_KEYS + ("name",)) == [], r
