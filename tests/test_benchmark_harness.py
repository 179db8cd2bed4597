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


def test_xl_forms_and_eval_forward(capsys):
    """xl_tiles.py's forms and mixers.py's evaluation forward are arms / an option here."""
    assert steps.parse_arms("xl")["rand-lowrank"] == frozenset({"randomized", "xl-lowrank"})
    with pytest.raises(SystemExit, match="at most one of"):
        steps.parse_arms("xl-lowrank+xl-dense")
    rows = steps.main(["--models", "sdpa,softmax:xl,softmax:rope", "--arms",
                       "default,xl-dense,randomized+xl-lowrank", "--rounds", "1", "--T", "16",
                       "--batch", "2", "--eval"])
    by = {(r["model"], r["arm"]): r for r in rows}
    assert "error" not in by["softmax:xl", "xl-dense"] and by["sdpa", "default"]["eval_vs_base"] == 1.0
    assert by["softmax:xl", "randomized+xl-lowrank"]["eval_ms"] > 0
    assert "are for ATTENTION:xl" in by["softmax:rope", "xl-dense"]["error"]
    assert "error" not in by["softmax:rope", "default"]


def test_xl_arms_reach_the_built_model():
    import argparse

    from lengen.posenc.xl import TransformerXLRelative
    args = argparse.Namespace(T=16, batch=2, d_model=16, layers=1, heads=2)

    def xl(switches):
        case = steps.Case("softmax:xl", frozenset(switches), args)
        return next(m for m in case.net.modules() if isinstance(m, TransformerXLRelative))
    assert xl({"xl-toeplitz"}).path == "table" and xl({"xl-lowrank"}).path == "trig"
    assert xl(set()).path == "auto" and "tiled_bias" not in vars(xl(set()))
    dense = xl({"xl-dense"})
    assert dense.path == "auto" and dense.tiled_bias() is None


def test_ops_harness_runs_each_op_table(tmp_path):
    """benchmarks/ops.py: every op declares its arms and cases; a tiny run gives a row per
    (case, arm) with the first arm's ratio 1."""
    import json

    import ops
    for name, op in ops.OPS.items():
        assert len(op.arms) >= 2 and op.cases, name
    assert ops.select("bias_hooks", ["T=16"]) == ["T=16"]
    assert ops.select("fused_rows", ["copy*"]) == [f"copy {o}" for o in ops.FUSED_OPS]
    with pytest.raises(SystemExit, match="rms_norm"):
        ops.main(["--ops", "rmsnorm"])
    out = tmp_path / "ops.json"
    want = {"rms_norm": "tra_qk", "linear": "proj 64->64 x-only", "swiglu": "wide",
            "adamw": "copy:rope", "bias_hooks": "T=16", "fused_rows": "addition tra"}
    assert set(want) == set(ops.OPS)
    rows = ops.main(["--ops", ",".join(want), "--cases", ",".join(want.values()), "--rounds", "1",
                     "--json", str(out)])
    ran = {n: c for n, c in want.items() if ops.OPS[n].missing() is None}   # C kernels built
    assert {(r["op"], r["case"]) for r in rows} == set(ran.items())
    assert len(rows) == sum(len(ops.OPS[n].arms) for n in ran)
    assert all(r["ms"] > 0 for r in rows)
    assert all(r["vs_first"] == 1.0 for r in rows if r["arm"] == ops.OPS[r["op"]].arms[0])
    assert json.loads(out.read_text())["rows"][0]["op"] == "rms_norm"
