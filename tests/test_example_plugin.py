"""The example plugin package (examples/plugin), installed by pip as a user would install it
(into a temporary folder: real wheel build, real ``*.dist-info`` with its entry points), then used
by its short names through lengen: formula tests of its scheme and task, then train, resume,
eval, generate and a 2-worker sweep."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import lengen
from lengen.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target, source = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("src") / "plugin"
    # built from a copy: a build writes build/ and *.egg-info beside the sources
    shutil.copytree(os.path.join(ROOT, "examples", "plugin"), source)
    # --no-build-isolation: build with this environment's setuptools, no download
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-build-isolation", "--target", str(target), str(source)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert any(p.name.startswith("lengen_example_plugin") and p.name.endswith(".dist-info")
               for p in target.iterdir())
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(target))
    mp.setenv("PYTHONPATH", os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    yield target
    mp.undo()


def test_slopes_formula_and_batched_positions(installed):
    from lengen_example_plugin.slopes import LinearSlopes, reference_bias

    torch.manual_seed(0)
    pe = LinearSlopes(d_model=16, n_heads=4, head_dim=4).double()
    assert torch.allclose(pe.slopes(), 2.0 ** (-8.0 * torch.arange(1, 5, dtype=torch.float64) / 4))
    pos = torch.tensor([0.0, 0.5, 3.0, 7.25], dtype=torch.float64)
    got = pe.bias(pos, pos)                                          # [H, T, T]
    assert torch.allclose(got, reference_bias(pe, pos, pos), atol=1e-12)
    rows = pe.bias(pos.expand(3, -1), pos.expand(3, -1))             # [B, H, T, T]
    assert rows.shape == (3, 4, 4, 4) and torch.equal(rows[1], got)
    assert got.dtype == torch.float64                                # follows the parameters


def test_duplicate_task_answers_and_masks(installed):
    task = lengen.build_task("duplicate", max_train_length=4)
    assert task.name == "duplicate" and task.answer_length(3) == 6
    b = task.train_batch(8, torch.Generator().manual_seed(0))
    for row, tgt, mask in zip(b.inputs, b.targets, b.loss_mask):
        items = task.decode(row).split("[SEP]")[0].split()[1:]
        answer = [t for t, m in zip(task.decode(tgt).split(), mask.tolist()) if m]
        assert answer == items + items + ["<eos>"]


@pytest.mark.parametrize("name", ["slopes", "duplicate"])
def test_the_plugin_passes_lengen_check(installed, name, capsys):
    assert main(["check", name]) == 0
    out = capsys.readouterr()
    assert "| fail |" not in out.out and " 0 failed" in out.err


def test_short_names_train_eval_generate_and_sweep(installed, tmp_path, capsys):
    from lengen.sweep import RunSpec, run_sweep

    raw = {"model": {"posenc": "slopes", "d_model": 16, "n_layers": 1, "n_heads": 2},
           "task": {"name": "duplicate", "kwargs": {"max_train_length": 4}},
           "train": {"steps": 3, "batch_size": 4, "warmup_steps": 0, "progress": False,
                     "threads": 1},
           "eval": {"sequences": 4, "batch_size": 4, "splits": ["len=3", "len=6"]}}
    cfg = lengen.resolve(raw).config
    assert cfg.model.posenc == "lengen_example_plugin.slopes:LinearSlopes"
    assert cfg.task.name == "lengen_example_plugin.duplicate:Duplicate"
    run = str(tmp_path / "run")
    _, _, rows = lengen.train(cfg, run, quiet=True)
    assert {r["split"] for r in rows} == {"len=3", "len=6"}
    assert main(["eval", run, "--splits", "len=5", "--sequences", "4"]) == 0
    assert main(["generate", run, "--split", "len=3", "--n", "2"]) == 0
    assert "[DUP]" in capsys.readouterr().out
    assert main(["list"]) == 0
    listing = " ".join(capsys.readouterr().out.split())    # lines are wrapped at words
    assert "[plugin lengen_example_plugin.slopes:LinearSlopes] Learned per-head linear" in listing
    assert "[plugin lengen_example_plugin.duplicate:Duplicate] Duplicate:" in listing
    specs = [RunSpec(f"s{seed}", {**raw, "train": {**raw["train"], "seed": seed}})
             for seed in (0, 1)]
    res = run_sweep(specs, str(tmp_path / "sweep"), workers=2, threads=1, log=lambda *a: None)
    assert res.ok, res.failures
    assert os.getpid() not in {s["pid"] for s in res.status.values()}
    saved = json.load(open(tmp_path / "sweep" / "s1" / "config.json"))
    assert saved["task"]["name"] == "lengen_example_plugin.duplicate:Duplicate"


def test_the_plugin_scheme_in_a_smoke_bench(installed, tmp_path):
    """lengen bench --scale smoke --quick (2 seeds) with the plugin's scheme as a variant, 2
    workers."""
    out = tmp_path / "bench"
    assert main(["bench", "--scale", "smoke", "--variant", "model.posenc=slopes", "--cells",
                 "flipflop", "copy", "even_pairs", "--workers", "2", "--threads", "1", "--quick",
                 "--out", str(out), "--baselines", "none"]) == 0
    rows = {(r["variant"], r["cell"]): r for r in
            __import__("csv").DictReader(open(out / "scorecard.csv"))}
    assert set(rows) == {("slopes", c) for c in ("flipflop", "copy", "even_pairs")}
    assert all(r["status"] in ("ok", "not fitted") for r in rows.values())
