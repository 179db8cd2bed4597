"""Index-warping reproduction recipe: smoke run end to end (Table A layout, cells recomputed from
results.csv, published numbers beside ours, figures), configs of each column and scale, --estimate
through the CLI, registration, bad names."""
from __future__ import annotations

import importlib
import math
import os

import pytest
import torch

from lengen.cli import main
from lengen.recipes import RECIPES
from lengen.recipes.index_warping import recipe as iw


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("iw") / "smoke")
    res = iw.run_index_warping("smoke", out, quiet=True, log=lambda *a: None)
    return out, res


def test_smoke_writes_table_a_with_cells_from_the_rows(smoke):
    import matplotlib.image
    import pandas as pd

    out, res = smoke
    assert res["sweep"].ok
    md = open(os.path.join(out, "table_a.md")).read()
    header = [line for line in md.splitlines() if line.startswith("| Task")][0]
    assert [c.strip() for c in header.strip("|").split("|")][1:] == \
        [iw.MODELS[m][0] for m in iw.MODELS]
    assert "(43.2)" in md and "(19.2)" in md            # published copy row beside ours
    rows = pd.read_csv(os.path.join(out, "results.csv"))
    csv = pd.read_csv(os.path.join(out, "table_a.csv"))
    assert len(csv) == len(iw.MODELS)
    M = iw.SCALES["smoke"]["M"]["copy"]
    for rec in csv.itertuples():
        r = rows[(rows.model == rec.model) & (rows.metric == "seq_acc")].copy()
        r["n"] = r.split.str.slice(4).astype(int)
        assert set(r.n) == set(iw.task_lengths("copy", "smoke")[1])
        assert math.isclose(rec.all_mean, 100 * r.value.mean(), abs_tol=1e-9)
        assert math.isclose(rec.seen_mean, 100 * r[r.n <= M].value.mean(), abs_tol=1e-9)
        assert math.isclose(rec.unseen_mean, 100 * r[r.n > M].value.mean(), abs_tol=1e-9)
        want = iw.PAPER_TABLE_A["copy"].get(rec.model)
        assert (math.isnan(rec.paper) if want is None else rec.paper == want)
    for fig in ("fig5", "fig6", "figC"):
        img = matplotlib.image.imread(os.path.join(out, f"{fig}-copy.png"))
        assert img.ndim == 3 and img.shape[1] > 300


def test_rope_pi_is_the_rope_run_evaluated_with_interpolation(smoke, tmp_path):
    """No second training run for RoPE+PI (it would be bit-identical): its rows are the RoPE
    run's weights evaluated with the interpolate sampler, M filled in from the task, cached in
    the run; asking for RoPE+PI alone still trains RoPE."""
    import json

    import lengen
    from lengen.samplers.interpolate import InterpolateSampler

    out, res = smoke
    names = {s.name for s in iw.build_specs("smoke")}
    assert "copy-rope-s0" in names and not any("rope_pi" in n for n in names)
    assert not os.path.exists(os.path.join(out, "copy-rope_pi-s0"))
    pi = [r for r in res["rows"] if r["model"] == "rope_pi" and r["metric"] == "seq_acc"]
    assert pi and {r["positions"] for r in pi} == {"interpolate"}
    _, task, model = lengen.load_run(os.path.join(out, "copy-rope-s0"))
    cfg = lengen.resolve(iw.run_config("copy", "rope_pi", "smoke")).config
    model.sampler = InterpolateSampler(**cfg.model.positions_kwargs)
    want = lengen.evaluate(model, task, [r["split"] for r in pi], n_sequences=cfg.eval.sequences,
                           batch_size=cfg.eval.batch_size, seed=cfg.eval.seed)
    assert [r["value"] for r in pi] == pytest.approx([r["value"] for r in want if
                                                      r["metric"] == "seq_acc"])
    cached = json.load(open(os.path.join(out, "copy-rope-s0", "eval-rope_pi.json")))
    assert [r["value"] for r in cached if r["metric"] == "seq_acc"] == [r["value"] for r in pi]
    # the premise: a RoPE+PI training run would give the RoPE run's weights bit for bit
    from safetensors.torch import load_file

    lengen.train(cfg, str(tmp_path / "pi-trained"), quiet=True)
    a = load_file(os.path.join(out, "copy-rope-s0", "model.safetensors"))
    b = load_file(str(tmp_path / "pi-trained" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [s.tags["model"] for s in iw.build_specs("smoke", models=["rope_pi"])] == ["rope"]
    alone = iw.run_index_warping("smoke", str(tmp_path / "alone"), models=["rope_pi"],
                                 quiet=True, log=lambda *a: None)
    assert {r["model"] for r in alone["rows"]} == {"rope", "rope_pi"}
    assert not alone["failures"]


def test_eval_with_positions_reuses_only_the_same_evaluation(tmp_path, monkeypatch):
    """The cached RoPE+PI rows are reused while nothing changed, and evaluated again when the
    run's stored evaluation settings change without retraining (a sweep's reevaluate rewrites
    config.json and eval.json, not the weights)."""
    import json

    import lengen
    common = importlib.import_module("lengen.recipes.common")   # calls its evaluate_run
    eval_with_positions = common.eval_with_positions

    run = str(tmp_path / "rope")
    lengen.train(lengen.resolve(iw.run_config("copy", "rope", "smoke")), run, quiet=True)
    calls = []
    real = common.evaluate_run
    monkeypatch.setattr(common, "evaluate_run", lambda *a, **k: calls.append(1) or real(*a, **k))
    kw = {"length_unit": "tokens"}
    first = eval_with_positions(run, "interpolate", kw, stem="eval-pi", log=lambda *a: None)
    again = eval_with_positions(run, "interpolate", kw, stem="eval-pi", log=lambda *a: None)
    assert len(calls) == 1 and again == first
    cfg_path = os.path.join(run, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["eval"]["sequences"] = 2 * cfg["eval"]["sequences"]
    json.dump(cfg, open(cfg_path, "w"))
    changed = eval_with_positions(run, "interpolate", kw, stem="eval-pi", log=lambda *a: None)
    assert len(calls) == 2
    assert {r["sequences"] for r in changed} == {cfg["eval"]["sequences"]}
    eval_with_positions(run, "interpolate", {"factor": 2.0}, stem="eval-pi", log=lambda *a: None)
    assert len(calls) == 3                                   # other kwargs: evaluated again


def test_columns_get_their_samplers():
    cfg = {m: iw.run_config("copy", m, "cpu") for m in iw.MODELS}
    assert cfg["rope"]["model"]["positions"] == "identity"
    assert cfg["rope_pi"]["model"]["positions"] == "interpolate"
    assert cfg["alibi"]["model"]["posenc"] == "alibi"
    assert cfg["ours_sqrt"]["model"]["positions_kwargs"] == {"preset": "head_tail",
                                                             "skew": "sqrt", "length_unit": "tokens"}
    assert cfg["ours_beta"]["model"]["positions_kwargs"]["skew"] == "beta"
    assert cfg["head_only"]["model"]["positions_kwargs"]["preset"] == "head_only"
    # copy, M = 20: longest training input 2 * 20 + 2 = 42 tokens, longest test 2 * 100 + 2
    L = {m: cfg[m]["model"]["positions_kwargs"]["max_length"] for m in ("rpe_10m", "rpe_5m",
                                                                         "rpe_3m")}
    assert L == {"rpe_10m": 420, "rpe_5m": 210, "rpe_3m": 202}     # 3M raised to the test input
    task = cfg["rope"]["task"]["kwargs"]
    assert task == {"min_length": 2, "max_train_length": 20, "max_eval_length": 100}
    lengths = iw.task_lengths("copy", "cpu")[1]
    assert lengths[0] == 2 and lengths[-1] == 100 and {20, 21} <= set(lengths)
    assert iw.task_lengths("sort", "paper")[1] == list(range(2, 41))
    paper = iw.run_config("sort", "ours_sqrt", "paper")
    assert paper["train"]["lr"] == 3e-5 and paper["train"]["steps"] == 40_000
    assert paper["task"]["kwargs"]["train_size"] == 100_000
    assert paper["eval"]["sequences"] == math.ceil(10_000 / 39)
    frac = iw.run_config("copy", "rope", "cpu", rotary_fraction=0.25)
    assert frac["model"]["posenc_kwargs"] == {"rotary_fraction": 0.25}


def test_configs_resolve_and_fill_M():
    import lengen

    cfg = lengen.resolve(iw.run_config("reverse", "rope_pi", "cpu")).config
    assert cfg.model.positions_kwargs["train_length"] == 2 * 20 + 2
    cfg = lengen.resolve(iw.run_config("sort", "ours_sqrt", "cpu", length_unit="items")).config
    assert cfg.model.positions_kwargs["train_length"] == 8


def test_estimate_through_the_cli(capsys):
    assert "index-warping" in RECIPES
    assert main(["reproduce", "index-warping", "--scale", "smoke", "--estimate",
                 "--models", "rope", "ours_sqrt"]) == 0
    text = capsys.readouterr().out
    assert "ms/step" in text and "estimated total: 1 tasks x 2 trained columns" in text
    # RoPE+PI trains nothing: the RoPE run's evaluation with PI after the sweep
    assert main(["reproduce", "index-warping", "--scale", "smoke", "--estimate",
                 "--models", "rope_pi"]) == 0
    text = capsys.readouterr().out
    assert "rope_pi: evaluation of the rope run" in text and "1 trained columns" in text
    assert "min after the sweep" in text


def test_bad_names():
    with pytest.raises(ValueError, match="unknown column"):
        iw.build_specs("smoke", models=["rope", "yarn"])
    with pytest.raises(ValueError, match="unknown task"):
        iw.build_specs("smoke", tasks=["addition"])


def test_a_column_that_did_not_fit_its_seen_lengths_is_marked():
    """Seen-length average below 90%: the cell carries the mark and the table says why; a
    fitted column does not."""
    from lengen.recipes.index_warping.report import FIT, NOT_FIT, table_a_markdown

    def rec(model, seen):
        return {"task": "copy", "model": model, "label": iw.MODELS[model][0], "paper": None,
                "n_seeds": 1, "all_mean": 50.0, "all_std": math.nan, "seen_mean": seen,
                "unseen_mean": 10.0, "fits": seen >= FIT}

    md = table_a_markdown([rec("rope", 100.0), rec("rpe_3m", 80.3)], ["copy"],
                          ["rope", "rpe_3m"], "cap")
    row = [line for line in md.splitlines() if line.startswith("| copy")][0]
    rope, rpe = [c.strip() for c in row.strip("|").split("|")][1:]
    assert NOT_FIT not in rope and NOT_FIT in rpe
    assert "did not fit its training distribution" in md
    assert NOT_FIT not in table_a_markdown([rec("rope", 100.0)], ["copy"], ["rope"], "cap")


def test_cpu_scale_gives_summation_its_own_budget():
    """The cpu scale trains summation at the budget its search found (12,000 steps at lr 3e-4,
    results/index-warping-summation/), every other task at the scale's; the caption says so."""
    s = iw.SCALES["cpu"]
    summ = iw.run_config("summation", "rope", "cpu", 0)["train"]
    assert (summ["steps"], summ["lr"]) == (12_000, 3e-4)
    assert summ["warmup_steps"] == s["warmup_steps"]
    for task in ("copy", "reverse", "sort"):
        tr = iw.run_config(task, "ours_sqrt", "cpu", 1)["train"]
        assert (tr["steps"], tr["lr"]) == (s["steps"], s["lr"])
    assert "Summation trains 12000 steps at lr 0.0003" in iw.caption("cpu", seeds=[0])
    assert "instead" not in iw.caption("smoke", seeds=[0])
