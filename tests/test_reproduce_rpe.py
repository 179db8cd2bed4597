"""``lengen reproduce randomized-pe``: published numbers, scales, run configs, the aggregation of
Tables 1 / 4, and a smoke reproduction end to end through the CLI (tables, curves, ablations)."""
from __future__ import annotations

import csv
import math
import os

import pytest

from lengen.cli import main
from lengen.config import resolve
from lengen.recipes.randomized_pe import recipe as rpe
from lengen.recipes.randomized_pe.report import (FIT_THRESHOLD, UNFIT, aggregate, run_scores,
                                                 write_tables)
from lengen.sweep import default_threads, training_span


def test_published_tables_are_complete_and_consistent():
    assert list(rpe.PAPER_TABLE1) == list(rpe.PAPER_TASKS) == list(rpe.TASK_LABELS)
    for t in rpe.PAPER_TASKS:
        assert list(rpe.PAPER_TABLE1[t]) == list(rpe.SCHEMES)
        for s in rpe.SCHEMES:
            best, (mean, std) = rpe.PAPER_TABLE1[t][s], rpe.PAPER_TABLE4[t][s]
            assert 0 <= std and 15 <= mean <= best <= 100      # max over seeds >= mean
        # Table 3's sorted column is Table 1's randomized sin/cos column
        assert rpe.PAPER_TABLE3[t]["rand_sincos"] == rpe.PAPER_TABLE1[t]["rand_sincos"]
    # spot checks against the paper
    assert rpe.PAPER_TABLE1["reverse_string"]["relative"] == 58.3
    assert rpe.PAPER_TABLE1["missing_duplicate_string"]["rand_relative"] == 100.0
    assert rpe.PAPER_TABLE1["cycle_navigation"]["none"] == 61.9
    assert rpe.PAPER_TABLE1["bucket_sort"]["rand_learned"] == 99.5
    assert rpe.PAPER_TABLE4["even_pairs"]["relative"] == (67.6, 15.3)
    assert rpe.PAPER_TABLE4["binary_multiplication"]["rand_relative"] == (39.1, 7.1)
    assert rpe.PAPER_TABLE3["cycle_navigation"][rpe.UNSORTED] == 59.3
    assert [rpe.TASK_LABELS[t][0] for t in rpe.PAPER_TASKS] == ["R"] * 4 + ["DCF"] * 4 + ["CS"] * 7


def test_scales():
    p, c = rpe.SCALES["paper"], rpe.SCALES["cpu"]
    assert (p["steps"], len(p["seeds"]), p["lrs"], p["batch_size"]) == \
        (2_000_000, 10, (1e-4, 3e-4, 5e-4), 128)
    assert (p["N"], p["M"], p["L"], p["test_stride"], p["eval_sequences"]) == \
        (40, 500, 2048, 1, 500)
    assert p["tasks"] == rpe.PAPER_TASKS and list(p["schemes"]) == list(rpe.SCHEMES)
    assert {"even_pairs", "reverse_string", "duplicate_string", "missing_duplicate_string",
            "bucket_sort"} <= set(c["tasks"])
    assert {"sincos", "relative", "rand_sincos", "rand_relative"} <= set(c["schemes"])
    assert (c["N"], c["M"], c["L"], c["model"]) == (40, 500, 2048, {})   # protocol kept
    # the string tasks get a bigger budget than the default (they did not fit in 1,500 x 64)
    for t in ("reverse_string", "duplicate_string"):
        ts = rpe.task_scale("cpu", t)
        assert ts["steps"] * ts["batch_size"] > c["steps"] * c["batch_size"]
        assert (ts["N"], ts["M"], ts["L"], ts["model"]) == (40, 500, 2048, {})
    test, curve = rpe.eval_lengths("paper")
    assert test == list(range(41, 501)) and curve == list(range(1, 41))


def test_run_configs():
    cfg = resolve(rpe.run_config("missing_duplicate_string", "rand_relative", "paper", seed=3,
                                 lr=3e-4)).config
    m, t = cfg.model, cfg.train
    assert (m.posenc, m.positions, m.causal, m.n_layers, m.d_model) == \
        ("xl", "randomized", False, 5, 64)
    assert m.positions_kwargs == {"max_length": 2048, "sort": True, "eval_mode": "randomized"}
    assert (t.steps, t.lr, t.seed, t.data_seed, t.optimizer, t.schedule) == \
        (2_000_000, 3e-4, 3, 3, "adam", "constant")
    assert cfg.eval.splits == [f"len={n}" for n in range(1, 501)]
    assert cfg.model.vocab_size == 7
    alibi = rpe.run_config("even_pairs", "alibi", "cpu")["model"]
    assert alibi["posenc_kwargs"] == {"encoder_asymmetric": True} and alibi["positions"] == "identity"
    rand_learned = rpe.run_config("even_pairs", "rand_learned", "cpu")["model"]
    assert rand_learned["posenc_kwargs"] == {"max_positions": 2048}
    # a standard learned table covers the longest test input (duplicate string: 500 + 1000)
    learned = rpe.run_config("duplicate_string", "learned", "cpu")["model"]
    assert learned["posenc_kwargs"] == {"max_positions": 1500}
    ident = rpe.run_config("even_pairs", "rand_sincos", "cpu", eval_randomized=False)["model"]
    assert ident["positions_kwargs"]["eval_mode"] == "identity"
    unsorted = rpe.run_config("even_pairs", rpe.UNSORTED, "cpu")["model"]
    assert unsorted["positions_kwargs"]["sort"] is False
    with pytest.raises(ValueError, match="L=512 is too small for reverse_string"):
        rpe.build_specs("cpu", tasks=["reverse_string"], ablation_L=[512])
    with pytest.raises(ValueError, match="unknown encoding"):
        rpe.build_specs("cpu", schemes=["rand_nope"])
    specs = rpe.build_specs("smoke", ablation_L=[32, 64], ablation_unsorted=True)
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    # L = 64 is the scale's L: that ablation point is the main run, not a second one
    assert "reverse_string-rand_relative-L32-s0-lr0.001" in names
    assert not any("-L64-" in n for n in names)


def test_per_task_budgets(monkeypatch):
    """A scale's ``per_task`` entries give one task its own steps, batch and lrs; the sweep puts
    the longest runs first, the caption states every budget, and explicit --lrs still win."""
    smoke = dict(rpe.SCALES["smoke"], per_task={"reverse_string": dict(
        steps=14, batch_size=4, lrs=(2e-3, 3e-3), seeds=(0, 1))})
    monkeypatch.setitem(rpe.SCALES, "smoke", smoke)
    assert rpe.task_scale("smoke", "even_pairs")["steps"] == 3
    specs = rpe.build_specs("smoke")
    budgets = [(s.tags["task"], s.config["train"]["steps"], s.config["train"]["batch_size"],
                s.config["train"]["lr"]) for s in specs]
    k = len(smoke["schemes"])
    assert budgets[:4 * k] == [("reverse_string", 14, 4, lr) for _ in smoke["schemes"]
                               for _ in (0, 1) for lr in (2e-3, 3e-3)]
    assert budgets[4 * k:] == [("even_pairs", 3, 8, 1e-3)] * k     # longest first
    # at equal steps x batch the encodings with costlier steps (STEP_COST: XL relative) go first
    assert [s.tags["scheme"] for s in specs[4 * k:]][:2] == ["relative", "rand_relative"]
    given = rpe.build_specs("smoke", lrs=[5e-4], seeds=[7])
    assert {(s.tags["lr"], s.tags["seed"]) for s in given} == {(5e-4, 7)}
    cap = rpe.caption("smoke", tasks=smoke["tasks"], schemes=smoke["schemes"])
    assert "others: 1 seed(s), 3 steps at batch 8, lr {0.001}" in cap
    assert "Reverse String: 2 seed(s), 14 steps at batch 4, lr {0.002, 0.003}" in cap
    assert "encoding(s); 1 seed(s), 3 steps at batch 8" in rpe.caption(
        "smoke", tasks=["even_pairs"], schemes=["relative"])


def test_per_encoding_budgets(monkeypatch):
    """A task's ``per_scheme`` entries give one encoding its own batch and lrs on that task only;
    the run config, the sweep, the caption and the estimate's schedule all follow them."""
    smoke = dict(rpe.SCALES["smoke"], per_task={"reverse_string": dict(
        steps=7, batch_size=4, per_scheme={"sincos": dict(batch_size=16, lrs=(5e-4,))})})
    monkeypatch.setitem(rpe.SCALES, "smoke", smoke)
    assert rpe.task_scale("smoke", "reverse_string", "sincos")["batch_size"] == 16
    assert rpe.task_scale("smoke", "reverse_string", "relative")["batch_size"] == 4
    assert rpe.task_scale("smoke", "even_pairs", "sincos")["batch_size"] == 8
    assert "per_scheme" not in rpe.task_scale("smoke", "reverse_string")
    budgets = {(s.tags["task"], s.tags["scheme"]): (s.config["train"]["batch_size"],
                                                   s.config["train"]["lr"])
               for s in rpe.build_specs("smoke")}
    assert budgets[("reverse_string", "sincos")] == (16, 5e-4)
    assert budgets[("reverse_string", "relative")] == (4, 1e-3)
    assert budgets[("even_pairs", "sincos")] == (8, 1e-3)
    assert rpe.build_specs("smoke")[0].name == "reverse_string-sincos-s0-lr0.0005"  # most work
    cap = rpe.caption("smoke", tasks=smoke["tasks"], schemes=smoke["schemes"])
    assert ("Reverse String: 1 seed(s), 7 steps at batch 4, lr {0.001} (sin/cos: 1 seed(s), "
            "7 steps at batch 16, lr {0.0005})") in cap
    assert "(sin/cos" not in rpe.caption("smoke", tasks=smoke["tasks"], schemes=["relative"])


def test_scale_budgets_name_known_tasks_and_encodings():
    """A typo in a ``per_task`` / ``per_scheme`` key would silently fall back to the default
    budget: every key must be a task / encoding of its scale."""
    for name, s in rpe.SCALES.items():
        for task, d in s.get("per_task", {}).items():
            assert task in s["tasks"], (name, task)
            assert set(d.get("per_scheme", {})) <= set(s["schemes"]), (name, task)


def test_aggregate_max_and_mean_at_best_lr():
    scores = [dict(task="t", scheme="s", lr=lr, seed=k, score=v)
              for lr, vals in ((1e-4, [90.0, 10.0]), (3e-4, [60.0, 70.0])) for k, v in enumerate(vals)]
    a = aggregate(scores)[("t", "s")]
    assert a["max"] == 90.0 and a["best_lr"] == 3e-4 and a["mean"] == 65.0
    assert a["std"] == pytest.approx(math.sqrt(50.0)) and (a["n_seeds"], a["n_runs"]) == (2, 4)
    assert a["train_mean"] is None                      # no training-length scores given


def _rows(run, task, scheme, accs):
    """Sweep-style rows of one run: token_acc per input length n (split len=n)."""
    return [dict(run=run, task=task, scheme=scheme, seed=0, lr=1e-3, L=None, split=f"len={n}",
                 metric="token_acc", value=v, status="ok") for n, v in accs.items()]


def test_scores_separate_training_and_test_lengths():
    rows = _rows("a", "even_pairs", "sincos", {1: 1.0, 3: 0.5, 4: 0.25, 6: 0.75}) + \
        [dict(r, metric="seq_acc", value=0.0) for r in _rows("a", "even_pairs", "sincos", {1: 1})]
    (r,) = run_scores(rows, N=3, M=6)
    assert r["score"] == pytest.approx(50.0) and (r["min_n"], r["max_n"]) == (4, 6)
    assert r["train_score"] == pytest.approx(75.0)      # lengths 1 and 3 only
    (r,) = run_scores(_rows("b", "even_pairs", "sincos", {5: 1.0}), N=3, M=6)
    assert r["train_score"] is None                     # no training length evaluated


def test_cells_that_did_not_fit_the_training_lengths_are_marked(tmp_path):
    fitted = _rows("a", "even_pairs", "sincos", {1: 1.0, 2: 0.95, 4: 0.5})
    unfitted = _rows("b", "even_pairs", "rand_sincos", {1: 1.0, 2: 0.7, 4: 0.6})
    scores = run_scores(fitted + unfitted, N=2, M=4)
    agg, paths = write_tables(scores, str(tmp_path), tasks=["even_pairs"],
                              schemes=["sincos", "rand_sincos"], caption="cap", L=2048, N=2,
                              train_lengths=[1, 2])
    fit = agg[("even_pairs", "rand_sincos")]["train_mean"]
    assert fit == pytest.approx(85.0) and fit < FIT_THRESHOLD
    with open(paths["table1_md"]) as f:
        row = [ln for ln in f.read().splitlines() if ln.startswith("| R | Even Pairs")][0]
    p = rpe.PAPER_TABLE1["even_pairs"]
    assert f"| 50.0 ({p['sincos']:.1f}) | 60.0{UNFIT} ({p['rand_sincos']:.1f}) |" in row
    with open(paths["table_train_md"]) as f:
        t = f.read()
    assert "training lengths 1..2 (evaluated at lengths 1, 2)" in t and "| 97.5 | 85.0 |" in t
    rows = read_csv(paths["table1_csv"])
    assert [r["fitted"] for r in rows] == ["True", "False"]
    assert float(rows[1]["ours_train_mean"]) == pytest.approx(85.0)


def test_training_span_reads_the_run_directories(tmp_path):
    for name, start, end in (("a", 100.0, 160.0), ("b", 130.0, 400.0)):
        d = tmp_path / name
        d.mkdir()
        for f, t in (("config.json", start), ("eval.json", end)):
            (d / f).write_text("{}")
            os.utime(d / f, (t, t))
    assert training_span(str(tmp_path), ["a", "b", "a"]) == 300.0
    assert training_span(str(tmp_path), ["a", "missing"]) is None
    assert training_span(str(tmp_path), []) is None


def test_default_threads_split_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert (default_threads(1), default_threads(2), default_threads(3), default_threads(16)) == \
        (0, 4, 2, 1)
    assert default_threads(4, "ray", {"num_cpus": 2}) == 2


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("rpe") / "smoke")
    rc = main(["reproduce", "randomized-pe", "--scale", "smoke", "--out", out, "--threads", "1",
               "--ablation-L", "--ablation-unsorted"])
    return rc, out


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_smoke_reproduction_outputs(smoke):
    rc, out = smoke
    assert rc == 0
    s = rpe.SCALES["smoke"]
    for f in ["table1.md", "table1.csv", "table4.md", "table_train.md", "scores.csv", "results.csv",
              "ablation_L.md", "ablation_L.csv", "ablation_L.png", "table3.md", "table3.csv"] + \
             [f"curves/{t}.png" for t in s["tasks"]]:
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    for png in ["ablation_L.png"] + [f"curves/{t}.png" for t in s["tasks"]]:
        with open(os.path.join(out, png), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    # one score per main run, over the test lengths N+1..M only
    scores = read_csv(os.path.join(out, "scores.csv"))
    main_runs = [r for r in scores if r["scheme"] in rpe.SCHEMES and r["L"] in ("", str(s["L"]))]
    assert len(main_runs) == len(s["tasks"]) * len(s["schemes"]) * len(s["seeds"]) * len(s["lrs"])
    test, _ = rpe.eval_lengths("smoke")
    for r in scores:
        got = (int(r["min_n"]), int(r["max_n"]), int(r["n_lengths"]))
        assert got == (s["N"] + 1, s["M"], len(test))
        assert 0 <= float(r["score"]) <= 100 and 0 <= float(r["train_score"]) <= 100


def test_smoke_table1_layout_and_published_numbers(smoke):
    _, out = smoke
    s = rpe.SCALES["smoke"]
    with open(os.path.join(out, "table1.md")) as f:
        md = f.read()
    assert md.startswith("**Table 1")
    assert "Scale `smoke`" in md and "3 steps" in md and "stride 3" in md     # caption states sizes
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert lines[0] == ("| Level | Task | None | sin/cos | Relative | Rand. sin/cos "
                        "| Rand. Relative |")
    # tasks grouped by level, in the paper's order, published number beside ours in every cell
    assert lines[2].startswith("| R | Even Pairs | ")
    assert lines[3].startswith("| DCF | Reverse String | ")
    for line, task in zip(lines[2:], s["tasks"]):
        cells = [c.strip() for c in line.strip("|").split("|")][2:]
        for cell, scheme in zip(cells, s["schemes"]):
            ours, paper = cell.split(" (")
            assert paper == f"{rpe.PAPER_TABLE1[task][scheme]:.1f})"
            assert 0 <= float(ours.removesuffix(UNFIT)) <= 100
    rows = read_csv(os.path.join(out, "table1.csv"))
    want = [(t, k) for t in s["tasks"] for k in s["schemes"]]
    assert [(r["task"], r["scheme"]) for r in rows] == want
    for r in rows:
        assert float(r["paper_max"]) == rpe.PAPER_TABLE1[r["task"]][r["scheme"]]
        paper4 = (float(r["paper_mean"]), float(r["paper_std"]))
        assert paper4 == rpe.PAPER_TABLE4[r["task"]][r["scheme"]]
        assert float(r["ours_mean"]) <= float(r["ours_max"]) and r["n_runs"] == "1"
    with open(os.path.join(out, "table4.md")) as f:
        t4 = f.read()
    assert "| R | Even Pairs | " in t4 and "(99.6 ± 0.6) |" in t4
    with open(os.path.join(out, "table3.md")) as f:
        t3 = f.read()
    assert "| Level | Task | w/o sorting | w/ sorting |" in t3
    assert "| R | Even Pairs | " in t3 and "(50.4) | " in t3 and "(100.0) |" in t3
    ab = read_csv(os.path.join(out, "ablation_L.csv"))
    assert sorted({int(r["L"]) for r in ab if r["task"] == "reverse_string"}) == list(s["ablation_L"])


def test_smoke_rerun_reuses_finished_runs(smoke):
    _, out = smoke
    res = rpe.run_randomized_pe("smoke", out, ablation_L=[], ablation_unsorted=True, quiet=True,
                                log=lambda *a, **k: None)
    assert {v["status"] for v in res["sweep"].status.values()} == {"cached"}


def test_smoke_reproduction_writes_fig5_activations(smoke):
    """Fig. 5: activation PCA of the Reverse String relative vs randomized-relative runs."""
    rc, out = smoke
    s = rpe.SCALES["smoke"]
    assert os.path.getsize(os.path.join(out, "fig5_activations.png")) > 1000
    with open(os.path.join(out, "fig5_activations.md")) as f:
        text = f.read()
    assert f"fitted on length {s['N']}" in text
    assert "| Relative" in text and "| Rand. Relative" in text
    assert text.count("shift ") == 2 * (s["model"]["n_layers"] + 1)
