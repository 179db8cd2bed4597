"""results/bench-cpu/v3/budget-probe: its runs are battery v3's runs of the two baselines at the
probe's longer steps (probe.py's ``STEPS_FACTOR``, the path the fit search's longer rungs take),
each with its resolved config beside it, and its verdict.md is what its pre-registered rule
(verdict.py) writes from its committed rows."""
from __future__ import annotations

import csv
import importlib.util
import json
import os

import pytest

from lengen.bench.battery import default_steps, lr_grid
from lengen.bench.run import BASELINES, _spec, run_name
from lengen.bench.scorecard import _conv_run, runs_path
from lengen.config import RUNTIME_KEYS, config_diff, resolve

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


def test_the_probes_verdict_is_what_its_rule_writes(v3_steps):
    with open(os.path.join(PROBE, "verdict.md")) as f:
        assert f.read() == VERDICT.verdict()
