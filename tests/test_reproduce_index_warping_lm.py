"""Index-warping LM reproduction (``lengen reproduce index-warping-lm``).

Runs on issue 12's real ``interpolate`` and ``warp`` samplers (lengen/samplers/). Two tests
change the registry: one removes them (the recipe must then refuse the models that need them,
with a clear message, and run the others) and one registers a ``warp`` with other keyword names
(the recipe must say where its kwargs are named)."""
from __future__ import annotations

import importlib
import json
import math
import os

import pandas as pd
import pytest
import torch

import lengen
from lengen import samplers as P
from lengen.cli import main
from lengen.errors import ConfigError
from lengen.recipes.index_warping_lm import recipe as iw
from lengen.recipes.index_warping_lm.report import UNDEFINED, paper_length

sweep_local = importlib.import_module("lengen.sweep.local")   # run_one calls its train


def beta25_cdf(x):
    """CDF of Beta(2, 5): 1 - (1 - x)^6 - 6 x (1 - x)^5."""
    return 1 - (1 - x) ** 6 - 6 * x * (1 - x) ** 5


def cell_table(md: str):
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]


def test_the_real_warp_sampler_with_the_recipes_kwargs_follows_the_papers_equations():
    """Head warping alpha j (eq. 7) or tail warping l F(j / l) with F the Beta(2, 5) CDF (eq. 8),
    per row, with the kwargs the recipe passes; interpolation j M / l at evaluation."""
    s = P.SAMPLERS["warp"](**iw.warp_kwargs(16, p_head=0.5, p_tail=0.5, alpha=6))
    pos = s.sample(16, training=True, batch_size=64, generator=torch.Generator().manual_seed(1),
                   lengths=torch.full((64,), 16))
    j = torch.arange(16.0)
    head = [torch.allclose(row, j / 6, atol=1e-6) for row in pos]
    tail = [torch.allclose(row, 16 * beta25_cdf(j / 16), atol=1e-5) for row in pos]
    assert all(h or t for h, t in zip(head, tail)) and any(head) and any(tail)
    ev = s.sample(64, training=False, batch_size=2, lengths=torch.tensor([64, 64]))
    assert torch.allclose(ev, torch.arange(64.0).expand(2, -1) / 4)


@pytest.fixture
def no_warp_samplers(monkeypatch):
    monkeypatch.delitem(P.SAMPLERS, "warp", raising=False)
    monkeypatch.delitem(P.SAMPLERS, "interpolate", raising=False)


def test_without_the_samplers_the_recipe_says_what_it_needs(capsys, no_warp_samplers):
    with pytest.raises(ValueError, match=iw.NEEDS_WARP) as e:
        iw.build_specs("smoke")
    assert "--models RoPE RandPE-8072 RandPE-4096 RandPE-1024 ALiBi" in str(e.value)
    assert main(["reproduce", "index-warping-lm", "--scale", "smoke", "--estimate"]) == 2
    assert iw.NEEDS_WARP in capsys.readouterr().err
    # the models that need neither build
    specs = iw.build_specs("smoke", models=["RoPE", "ALiBi", "RandPE-1024"])
    assert [s.name for s in specs] == ["RoPE-s0", "ALiBi-s0", "RandPE-1024-s0"]


def test_kwargs_the_installed_samplers_do_not_take_fail_naming_the_recipe(monkeypatch):
    class OtherNames(P.IdentitySampler):          # a 'warp' whose kwargs have other names
        def __init__(self, M: int, p_head: float = 0.15):
            super().__init__()

    monkeypatch.setitem(P.SAMPLERS, "warp", OtherNames)
    with pytest.raises(ConfigError, match="warp_kwargs / interpolate_kwargs"):
        iw.build_specs("smoke", models=["Ours"])


def test_model_settings_follow_the_paper():
    cfg = iw.model_config("Ours", "paper")
    kw = cfg["model"]["positions_kwargs"]
    assert cfg["model"]["positions"] == "warp" and cfg["model"]["posenc"] == "rope"
    assert (kw["p_head"], kw["p_tail"], kw["alphas"], kw["skew"]) == (0.15, 0.15, 1 / 6, "beta")
    assert (kw["beta_a"], kw["beta_b"], kw["train_length"]) == (2.0, 5.0, 512)
    for m, (ph, pt) in (("head_only", (0.30, 0.0)), ("tail_only", (0.0, 0.30))):
        kw = iw.model_config(m, "paper")["model"]["positions_kwargs"]
        assert (kw["p_head"], kw["p_tail"], kw["alphas"]) == (ph, pt, 1 / 6)
    assert [iw.model_config(f"alpha-{d}", "paper")["model"]["positions_kwargs"]["alphas"]
            for d in (2, 4, 8)] == [1 / 2, 1 / 4, 1 / 8]
    # randomized PE: L as the paper's at T = 512, scaled with T; lengths past L are not run
    for m, L in (("RandPE-8072", 8072), ("RandPE-4096", 4096), ("RandPE-1024", 1024)):
        c = iw.model_config(m, "paper")
        assert c["model"]["positions_kwargs"] == {"max_length": L, "eval_mode": "randomized"}
    assert iw.model_config("RandPE-1024", "paper")["task"]["kwargs"]["eval_lengths"] == [512, 1024]
    assert iw.randomized_L("RandPE-8072", 128) == 2018
    assert iw.model_lengths("RandPE-8072", "cpu") == [128, 256, 512, 768, 1024]
    m, t = cfg["model"], cfg["train"]
    assert (m["n_layers"], m["n_heads"], m["d_model"], m["d_ff"], m["mlp"], m["norm"],
            m["tie_embeddings"]) == (12, 12, 768, 3072, "gelu", "layer", True)
    assert (t["lr"], t["weight_decay"], t["betas"], t["batch_size"], t["steps"]) == \
        (5e-5, 0.0, [0.9, 0.999], 64, 11_000)
    assert cfg["task"]["kwargs"]["eval_lengths"] == [512, 1024, 2048, 3072, 4096]
    assert iw.model_config("ALiBi", "paper")["model"]["posenc"] == "alibi"


def test_paper_lengths_map_by_multiple_of_the_training_length():
    assert [paper_length(k, 128) for k in (128, 256, 512, 768, 1024, 2048)] == \
        [512, 1024, 2048, 3072, 4096, None]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("iwlm") / "smoke")
    assert main(["reproduce", "index-warping-lm", "--scale", "smoke", "--out", out]) == 0
    yield out


def test_smoke_through_the_cli_writes_every_table(smoke):
    import matplotlib.image

    out = smoke
    t3 = open(os.path.join(out, "table3.md")).read()
    table = cell_table(t3)
    assert table[0] == ["PE category", "Model"] + [f"len={k}" for k in
                                                    (16, 32, 64, 96, 128, 256, 512)]
    labels = [r[1] for r in table[1:]]
    assert labels[:2] == ["RoPE", "Position Interpolation"] and labels[-2:] == ["ALiBi",
                                                                              "Ours (head_tail)"]
    assert "Randomized PE (L = 252; paper 8072 at 512)" in labels
    rope = table[1]
    assert rope[2].endswith("(paper 19.22)") and rope[6].endswith("(paper 307.38)")
    assert "(paper" not in rope[7] and "(paper" not in rope[8]          # past 8x: no paper
    r1024 = next(r for r in table if r[1].startswith("Randomized PE (L = 32"))
    assert r1024[2].endswith("(paper 19.83)") and r1024[3].endswith("(paper 18.80)")
    assert r1024[4] == f"{UNDEFINED} (paper {UNDEFINED})" and r1024[8] == UNDEFINED
    for text in ("stand-in for WikiText-103", "bytes tokenizer", "test split",
                 "non-overlapping windows", "1 layer(s), 2 heads, d_model 16", "3 steps"):
        assert text in t3, text
    tb = cell_table(open(os.path.join(out, "tableB.md")).read())
    assert [r[0] for r in tb[1:]] == ["1/2", "1/4", "1/6", "1/8"]
    assert tb[1][1].endswith("(paper 19.06)") and tb[3][5].endswith("(paper 19.48)")
    f7 = cell_table(open(os.path.join(out, "fig7.md")).read())
    assert [r[0] for r in f7[1:]] == ["RoPE", "Position Interpolation", "head_only",
                                      "tail_only", "head_tail (= Ours)"]
    findings = open(os.path.join(out, "findings.md")).read()
    for key in ("ours_beats_multiplicative", "ours_small_drop_seen", "warps_beat_baseline",
                "head_tail_best", "randpe_hurts_seen", "alibi_best", "alpha_tradeoff"):
        assert f"**{key}**" in findings, key
    for name in ("table3.png", "fig7.png"):
        img = matplotlib.image.imread(os.path.join(out, name))
        assert img.ndim == 3 and img.shape[1] > 300
    csv = pd.read_csv(os.path.join(out, "table3.csv"))
    assert set(csv.model) == set(iw.TABLE3)


def test_rope_pi_is_the_rope_run_evaluated_with_interpolation(smoke):
    rows = pd.read_csv(os.path.join(smoke, "results.csv"))
    ppl = rows[rows.metric == "ppl"]
    rope = ppl[ppl.model == "RoPE"].set_index("length").value
    pi = ppl[ppl.model == "RoPE+PI"].set_index("length").value
    assert set(ppl[ppl.model == "RoPE+PI"].positions) == {"interpolate"}
    assert pi[16] == pytest.approx(rope[16], rel=1e-6)        # interpolation is identity at T
    assert pi[512] != pytest.approx(rope[512], rel=1e-6)
    assert not os.path.exists(os.path.join(smoke, "RoPE+PI-s0"))       # no second training run
    assert os.path.exists(os.path.join(smoke, "RoPE-s0", "eval-pi.json"))
    # randomized PE runs evaluate only lengths it can encode
    r = ppl[ppl.model == "RandPE-1024"]
    assert sorted(r.length) == [16, 32]
    # the warp models were trained with the warp sampler and evaluated with its PI
    cfg = json.load(open(os.path.join(smoke, "Ours-s0", "config.json")))
    assert cfg["model"]["positions"] == "warp"


def test_rerun_reuses_runs_and_the_pi_evaluation(smoke, monkeypatch, capsys):
    common = importlib.import_module("lengen.recipes.common")   # calls its evaluate_run

    def no(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(sweep_local, "train", no)
    monkeypatch.setattr(common, "evaluate_run", no)
    assert main(["reproduce", "index-warping-lm", "--scale", "smoke", "--out", smoke]) == 0
    assert "**Table 3**" in capsys.readouterr().out


def test_cpu_scale_configs_resolve():
    specs = iw.build_specs("cpu")
    assert [s.tags["model"] for s in specs] == [m for m in iw.ALL_MODELS if m != "RoPE+PI"]
    for spec in specs:
        cfg = lengen.resolve(spec.config).config
        kw = cfg.task.kwargs
        assert (kw["tokenizer"], kw["corpus"], kw["seq_len"]) == ("bpe", "kjv", 128)
        assert (cfg.model.d_model, cfg.model.d_ff, cfg.model.mlp) == (128, 512, "gelu")
        if "RandPE" in spec.name:
            assert max(kw["eval_lengths"]) <= iw.randomized_L(spec.tags["model"], 128)
        else:
            assert kw["eval_lengths"] == [128, 256, 512, 768, 1024, 2048, 4096]


def test_estimate_includes_the_pi_evaluation(capsys):
    res = iw.estimate_time("smoke", models=["RoPE", "RoPE+PI", "Ours"], steps=2, workers=1,
                           threads=1)
    assert set(res["per_run"]) == {"RoPE-s0", "Ours-s0"}
    out = capsys.readouterr().out
    assert "+ RoPE+PI:" in out and "after the sweep" in out
    assert res["total_seconds"] > sum(res["per_run"].values())
    assert math.isfinite(res["total_seconds"])
