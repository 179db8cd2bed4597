"""TRA Appendix B reproduction (``lengen reproduce tra-wikitext``): the smoke scale end to end
through the CLI, the Table 2 / Fig. 4 layouts with the published numbers, the finding logic, and
the cpu / paper scales' configs."""
from __future__ import annotations

import importlib
import json
import math
import os

import pandas as pd
import pytest

import lengen
from lengen.cli import main
from lengen.recipes import lm, tra_models
from lengen.recipes.tra_flipflop import recipe as tf
from lengen.recipes.tra_wikitext import recipe as tw
from lengen.recipes.tra_wikitext.report import NOT_FIT, finding, records

sweep_local = importlib.import_module("lengen.sweep.local")   # run_one calls its train


def registered(model: str) -> bool:
    try:
        tra_models.check_available([model])
        return True
    except ValueError:
        return False


AVAILABLE = [m for m in tw.MODELS if registered(m)]


def cell_table(md: str):
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("traw") / "smoke")
    argv = ["reproduce", "tra-wikitext", "--scale", "smoke", "--out", out, "--models", *AVAILABLE]
    assert main(argv) == 0
    return out


def test_the_model_table_is_the_flipflop_recipes():
    assert tw.MODELS is tra_models.MODELS is tf.MODELS
    assert list(tw.MODELS) == list(tw.PAPER_TABLE2)


def test_smoke_through_the_cli_writes_table2_and_fig4(smoke):
    import matplotlib.image

    out = smoke
    md = open(os.path.join(out, "table2.md")).read()
    table = cell_table(md)
    assert table[0] == ["Model"] + AVAILABLE                       # the paper's column order
    assert table[1][0] == "Perplexity (len=16)"
    for model, c in zip(AVAILABLE, table[1][1:]):
        mean, std = tw.PAPER_TABLE2[model]
        assert c.endswith(f"(paper {mean:.2f} ± {std:.2f})"), c
    # the caption states corpus (a stand-in), tokenizer, split, protocol, model and steps
    for text in ("stand-in for WikiText-103", "bytes tokenizer (257 ids)", "test split",
                 "non-overlapping windows", "1 layer(s), 4 heads, d_model 16", "3 steps",
                 "training window 16", "16, 32, 64, 128, 256, 512"):
        assert text in md, text
    rows = pd.read_csv(os.path.join(out, "results.csv"))
    ppl = rows[rows.metric == "ppl"]
    assert sorted(set(ppl.length)) == [16, 32, 64, 128, 256, 512]          # 1x .. 32x
    assert set(ppl.protocol) == {"nonoverlapping"} and set(ppl.eval_split) == {"test"}
    t2 = pd.read_csv(os.path.join(out, "table2.csv"))
    for rec in t2.itertuples():                                     # ours = the run's ppl at T
        v = ppl[(ppl.model == rec.model) & (ppl.length == 16)].value
        assert len(v) == 1 and math.isclose(rec.ours_mean, v.item(), rel_tol=1e-12)
        assert rec.paper_mean == tw.PAPER_TABLE2[rec.model][0]
    fig = open(os.path.join(out, "fig4.md")).read()
    f4 = cell_table(fig)
    assert f4[0][:7] == ["Model"] + [f"len={k}" for k in (16, 32, 64, 128, 256, 512)]
    assert [r[0].rstrip(NOT_FIT) for r in f4[1:]] == AVAILABLE
    assert "Paper (Fig. 4): FoT and TRA keep or improve" in fig
    curves = pd.read_csv(os.path.join(out, "fig4.csv"))
    assert len(curves) == 6 * len(AVAILABLE)
    img = matplotlib.image.imread(os.path.join(out, "fig4.png"))
    assert img.ndim == 3 and img.shape[1] > 300


def test_apes_table_and_labels_cover_32x(smoke):
    cfg = json.load(open(os.path.join(smoke, "APE-s0", "config.json")))
    assert cfg["model"]["posenc_kwargs"] == {"max_positions": 512}
    cfg = json.load(open(os.path.join(smoke, "Label-s0", "config.json")))
    assert cfg["model"]["positions"] == "label"
    assert cfg["model"]["positions_kwargs"] == {"max_length": 512}


def test_cli_rerun_reuses_finished_runs(smoke, monkeypatch, capsys):
    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(sweep_local, "train", no_training)
    argv = ["reproduce", "tra-wikitext", "--scale", "smoke", "--out", smoke, "--models",
            *AVAILABLE]
    assert main(argv) == 0
    assert "Perplexity (len=16)" in capsys.readouterr().out


def _rows(curves: dict, T=128):
    return [{"model": m, "seed": 0, "length": k, "metric": "ppl", "value": v, "status": "ok"}
            for m, c in curves.items() for k, v in c.items()]


def test_finding_appears_when_fot_and_tra_keep_and_most_pes_degrade():
    lens = [128, 512, 4096]
    curves = {"NoPE": [30, 60, 400], "APE": [31, 200, 900], "RoPE": [29, 90, 300],
              "FoT": [30, 28, 27], "TRA": [29.5, 27, 26], "CoPE": [30, 29, 50],
              "Diff": [28, 28.5, 29]}
    recs = records(_rows({m: dict(zip(lens, v)) for m, v in curves.items()}), list(curves), 128)
    by = {r["model"]: r for r in recs}
    assert by["TRA"]["trend"] == "improves" and by["Diff"]["trend"] == "keeps"
    assert by["NoPE"]["trend"] == "blows up" and by["CoPE"]["trend"] == "degrades"
    text = finding(recs)
    assert "The finding appears" in text and "3 of the 4 other" in text
    assert "TRA is below FoT at 3 of 3 lengths" in text
    assert "CoPE keeps its perplexity (<= 1.05x) up to 4x the training length" in text
    # FoT blowing up breaks it; a model far above the best at T is marked
    curves["FoT"] = [30, 80, 500]
    curves["APE"] = [60, 200, 900]
    recs = records(_rows({m: dict(zip(lens, v)) for m, v in curves.items()}), list(curves), 128)
    text = finding(recs)
    assert "does not appear" in text and "FoT did not keep" in text
    assert f"{NOT_FIT} APE" in text
    assert not {r["model"]: r for r in recs}["APE"]["fit"]


def test_holds_to_is_the_longest_length_kept_from_the_training_length_on():
    curve = {128: 20.0, 256: 19.0, 512: 21.0, 1024: 21.5, 2048: 20.0, 4096: 40.0}
    assert lm.holds_to(curve, 128) == 4.0          # 1024 is 1.075x: kept up to 512 only
    assert lm.holds_to({128: 20.0, 4096: 21.0}, 128) == 32.0
    assert lm.holds_to({128: 20.0, 256: float("nan"), 512: 20.0}, 128) == 1.0
    assert math.isnan(lm.holds_to({256: 20.0}, 128))


def test_trend_thresholds():
    assert lm.trend({128: 10.0, 4096: 9.7}, 128) == (pytest.approx(0.97), "improves")
    assert lm.trend({128: 10.0, 4096: 10.5}, 128)[1] == "keeps"
    assert lm.trend({128: 10.0, 4096: 20.0}, 128)[1] == "degrades"
    assert lm.trend({128: 10.0, 4096: 20.1}, 128)[1] == "blows up"
    assert lm.trend({128: 10.0, 4096: math.inf}, 128)[1] == "blows up"
    assert lm.trend({256: 10.0}, 128) == (pytest.approx(math.nan, nan_ok=True), "-")


def test_cpu_scale_configs_resolve():
    for spec in tw.build_specs("cpu", models=AVAILABLE):
        cfg = lengen.resolve(spec.config).config
        kw = cfg.task.kwargs
        assert (kw["tokenizer"], kw["tokenizer_kwargs"], kw["corpus"]) == \
            ("bpe", {"vocab_size": 2048}, "kjv")
        assert kw["seq_len"] == 128 and max(kw["eval_lengths"]) == 4096
        assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.d_ff) == (128, 2, 256)
        assert cfg.eval.sequences >= lm.EVAL_ALL and kw["max_eval_tokens"] == 32768


def test_paper_scale_is_the_papers_setting():
    cfg = tw.model_config("TRA", "paper", 3)
    m, t, kw = cfg["model"], cfg["train"], cfg["task"]["kwargs"]
    assert (m["n_layers"], m["n_heads"], m["d_model"], m["mlp"], m["norm"]) == \
        (8, 8, 512, "swiglu", "rms")
    assert (t["steps"], t["batch_size"], t["schedule"], t["seed"]) == (100_000, 64, "cosine", 3)
    assert (kw["corpus"], kw["tokenizer"], kw["seq_len"], kw["eval_split"]) == \
        ("wikitext-103", "gpt2", 128, "test")
    assert kw["eval_lengths"] == [128, 256, 512, 1024, 2048, 4096]
    assert kw["max_eval_tokens"] >= lm.EVAL_ALL
    assert len(tw.build_specs("paper", models=AVAILABLE)) == 4 * len(AVAILABLE)
    with_dir = tw.model_config("RoPE", "paper", data_dir="/data/wt103")
    assert with_dir["task"]["kwargs"]["data_dir"] == "/data/wt103"


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown Table 2 model"):
        tw.build_specs("smoke", models=["GPT"])


def test_estimate_times_training_and_every_length(capsys):
    res = tw.estimate_time("smoke", models=AVAILABLE[:2], steps=2, workers=2, threads=1)
    assert set(res["per_run"]) == {f"{m}-s0" for m in AVAILABLE[:2]}
    assert res["total_seconds"] == pytest.approx(max(res["workers"]))
    assert len(res["workers"]) == 2
    assert "evaluation s per length {16:" in capsys.readouterr().out
