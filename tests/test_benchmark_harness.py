"""benchmarks/steps.py, the step-timing harness, runs and parses its arms (no timing is asserted:
timings on a shared machine are noise)."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import steps  # noqa: E402


def test_presets_are_the_replaced_scripts_arms():
    assert steps.parse_arms("linear") == {
        "neither": frozenset({"no-onednn", "no-keep", "no-tokens"}),
        "onednn": frozenset({"no-keep", "no-tokens"}), "keep": frozenset({"no-onednn", "no-tokens"}),
        "both": frozenset({"no-tokens"})}
    assert steps.parse_arms("tokens") == {"neither": frozenset({"no-tokens"}), "tokens": frozenset()}
    assert steps.parse_arms("default,no-fused+naive") == {
        "default": frozenset(), "no-fused+naive": frozenset({"no-fused", "naive"})}


def test_bad_arm_and_model_name_the_valid_ones():
    with pytest.raises(SystemExit, match="no-fused"):
        steps.parse_arms("no-fuse")
    with pytest.raises(SystemExit, match="flipflop:FoT"):
        steps.parse_models("tra:nop")


def test_grid_expands_from_the_registries():
    import lengen
    assert steps.parse_models("sdpa,*:nope") == ["sdpa"] + [f"{a}:nope" for a in lengen.ATTENTIONS]


def test_runs_at_tiny_size_and_restores_the_switches(capsys):
    import lengen
    before = {v: os.environ.get(v) for v, _ in steps.ENV_SWITCHES.values()}
    flags = {n: c.supports_keep for n, c in lengen.ATTENTIONS.items()}
    rows = steps.main(["--models", "sdpa,tra:nope", "--arms", "default,no-fused+no-keep",
                       "--rounds", "1", "--T", "16", "--batch", "2"])
    assert [(r["model"], r["arm"]) for r in rows] == [
        ("sdpa", "default"), ("sdpa", "no-fused+no-keep"), ("tra:nope", "default"),
        ("tra:nope", "no-fused+no-keep")]
    assert all("error" not in r and r["ms"] > 0 for r in rows), rows
    assert rows[0]["vs_base"] == 1.0
    assert {v: os.environ.get(v) for v in before} == before
    assert {n: c.supports_keep for n, c in lengen.ATTENTIONS.items()} == flags
    assert "| tra:nope | default |" in capsys.readouterr().out
