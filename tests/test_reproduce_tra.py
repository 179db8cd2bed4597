"""TRA Table 1 reproduction recipe: smoke run end to end, table layout, published numbers, scales."""
from __future__ import annotations

import importlib
import math
import os

import pytest

from lengen.cli import build_parser, main
from lengen.recipes.estimate import makespan
from lengen.recipes.tra_flipflop import recipe as tf
from lengen.recipes.tra_flipflop.report import NOT_SOLVED, table1_markdown

sweep_local = importlib.import_module("lengen.sweep.local")   # run_one calls its train


def registered(model: str) -> bool:
    try:
        tf.check_available([model])
        return True
    except ValueError:
        return False


# the full nine when every attention kind / scheme / sampler has landed, else the ones present
AVAILABLE = [m for m in tf.MODELS if registered(m)]
ROWS = ["Flip Flop IID", "Flip Flop OOD dense", "Flip Flop OOD sparse"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tra") / "smoke")
    heat = all(registered(m) for m in tf.HEATMAP_PAIR)
    res = tf.run_tra_flipflop("smoke", out, models=AVAILABLE, heatmaps=heat, heatmap_seeds=(0, 1),
                              quiet=True, log=lambda *a: None)
    return out, res, heat


def cell_table(md: str):
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


def test_smoke_reproduction_writes_table1_layout(smoke):
    import matplotlib.image
    import pandas as pd

    out, res, _ = smoke
    assert res["sweep"].ok
    md = open(os.path.join(out, "table.md")).read()
    table = cell_table(md)
    assert table[0] == ["Model"] + AVAILABLE                       # paper's column order
    assert [r[0] for r in table[1:]] == ROWS                         # paper's row order
    for row, split in zip(table[1:], tf.SPLITS):
        for model, cell in zip(AVAILABLE, row[1:]):
            p_mean, p_std = tf.PAPER_TABLE1[split][model]
            assert cell.endswith(f"(paper {p_mean:.2f} ± {p_std:.2f})"), cell
    assert "24 fresh sequences per split" in md and "1 seed(s)" in md
    # ours in the cells = mean over seeds of the evaluation rows
    rows = pd.read_csv(os.path.join(out, "results.csv"))
    csv = pd.read_csv(os.path.join(out, "table.csv"))
    assert len(csv) == 3 * len(AVAILABLE)
    assert set(csv.columns) >= {"model", "split", "ours_mean", "ours_std", "ours_max", "n_seeds",
                                "paper_mean", "paper_std", "iid_solved"}
    for rec in csv.itertuples():
        vals = rows[(rows.model == rec.model) & (rows.split == rec.split) & (rows.metric == "seq_acc")
                    & (rows.group == "table")].value
        assert len(vals) == rec.n_seeds == 1
        assert math.isclose(rec.ours_mean, 100 * vals.mean(), rel_tol=1e-9)
        assert rec.paper_mean == tf.PAPER_TABLE1[rec.split][rec.model][0]
        assert rec.iid_solved == (csv[(csv.model == rec.model) & (csv.split == "iid")].ours_mean.item()
                                  >= tf.IID_SOLVED)
    img = matplotlib.image.imread(os.path.join(out, "table.png"))
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 300


def test_smoke_heatmaps_of_the_appendix_pair(smoke):
    out, res, heat = smoke
    assert heat, "the Appendix A pair (TRA, FoT) was not trained"
    for name in ("TRA.png", "FoT.png", "pair.png", "TRA-s1.png", "FoT-s1.png", "pair-s1.png"):
        assert os.path.getsize(os.path.join(out, "heatmaps", name)) > 1000
    cfg = res["sweep"].specs[-1].config
    assert (cfg["model"]["n_layers"], cfg["model"]["n_heads"]) == (2, 1)
    assert (cfg["train"]["seed"], cfg["train"]["data_seed"]) == (1, 1)
    # the pairs' rows stay out of Table 1; seed 0 keeps the original run names
    assert {r["run"] for r in res["rows"] if r.get("group") == "heatmap"} == \
        {"appA-TRA-2L1H", "appA-FoT-2L1H", "appA-TRA-2L1H-s1", "appA-FoT-2L1H-s1"}
    summary = cell_table(open(os.path.join(out, "heatmaps", "summary.md")).read())
    assert summary[0][:2] == ["Model", "Seed"] and len(summary) == 1 + 4
    rows = {(r["run"], r["split"]): 100 * r["value"] for r in res["rows"]
            if r.get("metric") == "seq_acc"}
    tra_s1 = [r for r in summary if r[:2] == ["TRA", "1"]][0]
    assert [float(x) for x in tra_s1[2:]] == \
        [round(rows[("appA-TRA-2L1H-s1", sp)], 1) for sp in tf.SPLITS]


def test_cli_rerun_reuses_finished_runs(smoke, monkeypatch, capsys):
    out, _, heat = smoke

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(sweep_local, "train", no_training)
    argv = ["reproduce", "tra-flipflop", "--scale", "smoke", "--out", out, "--models", *AVAILABLE]
    assert main(argv + (["--heatmaps"] if heat else [])) == 0
    assert "Flip Flop OOD sparse" in capsys.readouterr().out


def test_iid_not_solved_marks_ood_cells():
    recs = []
    for model, iid in (("TRA", 100.0), ("APE", 50.0)):
        for split in tf.SPLITS:
            recs.append({"model": model, "split": split, "ours_mean": iid if split == "iid" else 40.0,
                         "ours_std": 1.0, "n_seeds": 3, "paper_mean": 1.0, "paper_std": 0.5,
                         "iid_solved": iid >= tf.IID_SOLVED})
    table = cell_table(table1_markdown(recs, ["TRA", "APE"], "caption"))
    assert table[1][1:] == ["100.00 ± 1.00 (paper 1.00 ± 0.50)", "50.00 ± 1.00 (paper 1.00 ± 0.50)"]
    assert NOT_SOLVED not in table[2][1] and NOT_SOLVED not in table[3][1]      # TRA solved IID
    assert table[2][2].startswith(f"40.00 ± 1.00{NOT_SOLVED}") and NOT_SOLVED in table[3][2]
    md = table1_markdown(recs, ["TRA", "APE"], "caption")
    assert "IID not solved" in md


def test_missing_models_are_named_not_dropped(monkeypatch):
    from lengen.attention import ATTENTIONS
    from lengen.posenc import POSENCS

    monkeypatch.delitem(ATTENTIONS, "cope", raising=False)
    monkeypatch.delitem(POSENCS, "t5", raising=False)
    with pytest.raises(ValueError) as e:
        tf.build_specs("smoke")
    msg = str(e.value)
    assert "CoPE (needs attention 'cope')" in msg and "REL (needs posenc 't5')" in msg
    assert "--models NoPE APE RoPE" in msg


def test_scales_change_sizes_not_protocol():
    from lengen.config import resolve
    from lengen.train.loop import prepare

    p, c = tf.SCALES["paper"], tf.SCALES["cpu"]
    assert (p["n_pairs"], p["d_model"], p["n_layers"], p["n_heads"]) == (256, 256, 4, 4)
    assert (p["lr"], p["batch_size"], p["steps"], len(p["seeds"])) == (1e-4, 64, 25_000, 4)
    assert len(c["seeds"]) >= 3 and len(tf.SCALES["smoke"]["seeds"]) == 1
    w = tf.SCALES["width"]                    # the paper's width at half its length, with curves
    assert (w["n_pairs"], w["d_model"], w["d_ff"], w["n_layers"], w["n_heads"]) == (128, 256, 512, 4, 4)
    wt = tf.model_config("NoPE", "width")["train"]
    assert (wt["eval_every"], wt["eval_sequences"]) == (250, 500)
    assert "eval_every" not in tf.model_config("NoPE", "cpu")["train"]
    for scale in ("smoke", "cpu", "width", "paper"):
        cfgs = {m: tf.model_config(m, scale) for m in tf.MODELS}
        for m, d in cfgs.items():
            assert d["task"] == {"name": "flipflop", "kwargs": {"n_pairs": tf.SCALES[scale]["n_pairs"]}}
            assert d["eval"]["splits"] == ["iid", "dense", "sparse"]
            assert (d["model"]["mlp"], d["model"]["norm"], d["train"]["schedule"]) == ("swiglu", "rms", "cosine")
        assert cfgs["Label"]["model"]["positions"] == "label"
        assert cfgs["Label"]["model"]["positions_kwargs"]["max_length"] == 4 * 2 * tf.SCALES[scale]["n_pairs"]
    assert tf.model_config("REL", "cpu", rel="xl")["model"]["posenc"] == "xl"
    for m in AVAILABLE:                       # every column builds and fits its input length
        prepare(resolve(tf.model_config(m, "cpu")))
    for scale in ("cpu", "width", "paper"):   # the paper's MLP: 2 x d_model for linear and gate
        mc = resolve(tf.model_config("TRA", scale)).config.model
        assert mc.d_ff == 2 * mc.d_model == 2 * tf.SCALES[scale]["d_model"]
    if "Label" in AVAILABLE:                  # label table covers the paper's 512 tokens x 4
        prepare(resolve(tf.model_config("Label", "paper")))


def test_nested_cli_flags_have_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for cmd, child in (("reproduce", "tra-flipflop"), ("plot", "attention")):
        nested = next(a for a in sub.choices[cmd]._actions if a.dest in ("experiment", "plot"))
        for action in nested.choices[child]._actions:
            if action.dest != "help":
                assert action.help, f"lengen {cmd} {child}: {action.dest} has no --help text"


def test_timing_helper_extrapolates(capsys):
    est = tf.estimate_time("smoke", steps=1, models=AVAILABLE[:2], seeds=3, workers=2)
    assert set(est["seconds_per_run"]) == set(AVAILABLE[:2])
    # the sweep's dispatch (runs in order to the first free worker), not sum / workers
    costs = [est["seconds_per_run"][m] for m in AVAILABLE[:2] for _ in range(3)]
    assert est["total_seconds"] == pytest.approx(makespan(costs, 2)[0])
    assert "estimated total" in capsys.readouterr().out
