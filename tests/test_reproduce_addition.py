"""``lengen reproduce addition``: published claims, scales and run configs (every scale's configs
build), the scores / reach / claims logic on hand-made rows, the smoke reproduction end to end
through the CLI, and a diverging run recorded without stopping the sweep."""
from __future__ import annotations

import csv
import json
import os

import pytest

from lengen.cli import main
from lengen.config import resolve
from lengen.recipes import RECIPES
from lengen.recipes.addition import published, recipe as add, specs
from lengen.recipes.addition.report import (FIT, REACH, UNFIT, _claim_rows, best, reach,
                                            run_scores, write_table)


def test_registered_and_published_claims_are_well_formed():
    assert RECIPES["addition"] == "lengen.recipes.addition.cli"
    keys = [c["key"] for c in published.CLAIMS]
    assert len(keys) == len(set(keys)) and "fire_100" in keys and "single_digit" in keys
    assert published.PAPER_REACH == {40: 100, 30: 45, 20: 25, 10: 10}
    for c in published.CLAIMS:
        assert c["where"] and c["text"] and c["op"] and c["paper"]
    fire = next(c for c in published.CLAIMS if c["key"] == "fire_100")
    assert (fire["value"], fire["op"]) == (98.0, ">")
    assert set(published.BEYOND) == {"coupling", "abacus"}


def test_settings_and_figures():
    S = add.SETTINGS
    assert S["fire"]["positions"] == "randomized" and S["rope"]["positions"] == "identity"
    assert S["fire-norand"]["positions"] == "identity"
    assert S["kerple_log-rand"]["positions"] == "randomized"
    assert all(S[f"{pe}-nohints"]["hints"] is False for pe in add.PES)
    assert all(S[f"{pe}-standard"]["format"] == "standard" for pe in add.PES)
    assert "nope-rand" not in S and "nope-norand" not in S
    assert (S["coupling"]["posenc"], S["coupling"]["hints"]) == ("learned", False)
    assert (S["abacus"]["positions"], S["abacus"]["format"]) == ("abacus", "reversed")
    for fig, settings in add.FIGURES.items():
        assert set(settings) <= set(S), fig


def test_paper_scale_is_the_papers_protocol():
    p = add.SCALES["paper"]
    assert (p["N"], p["M"], p["steps"], p["batch_size"], p["lr"], p["warmup_steps"]) == \
        (40, 100, 50_000, 128, 3e-4, 500)
    assert (len(p["trials"]), p["eval_sequences"], p["train_lengths"]) == \
        (10, 1000, (10, 20, 30, 40))
    assert p["heatmap"] == ((0, 1, 2), (0, 1, 2, 3, 4)) and p["track"] == (30, 50, 70, 90)
    cfg = resolve(add.run_config("fire", "paper", seed=3, data_seed=2))
    m, t = cfg.model, cfg.train
    assert (m.n_layers, m.d_model, m.d_ff, m.n_heads, m.mlp, m.norm, m.norm_position) == \
        (6, 512, 2048, 8, "geglu", "rms", "pre_post")
    assert (m.posenc, m.positions, m.dropout) == ("fire", "randomized", 0.0)
    assert (t.steps, t.batch_size, t.lr, t.weight_decay, t.warmup_steps, t.min_lr_frac) == \
        (50_000, 128, 3e-4, 0.1, 500, 0.1)
    assert (t.seed, t.data_seed, t.eval_splits) == (3, 2, ["len=30", "len=50", "len=70",
                                                           "len=90"])
    assert cfg.eval.splits == [f"len={n}" for n in range(1, 101)]
    assert cfg.task.kwargs["max_train_length"] == 40 and cfg.task.kwargs["hints"] is True
    # the standard format states its hint order (runs from before issue 27 store none, so the
    # sweep cannot reuse them as this order); the reversed one, unchanged, does not
    assert "hint_order" not in cfg.task.kwargs
    std = add.run_config("fire-standard", "paper")["task"]["kwargs"]
    assert std["format"] == "standard" and std["hint_order"] == "written"
    specs = add.build_specs("paper")
    n_main = len(add.SETTINGS) * 10
    # FIRE at N = 10, 20, 30 (5 trials; N = 40 is the main grid) + the 3 x 5 grid minus its
    # three data-order-0 cells (main-grid trials)
    assert len(specs) == n_main + 3 * 5 + (15 - 3)


def test_every_cpu_and_smoke_config_builds():
    for scale in ("cpu", "smoke"):
        specs = add.build_specs(scale)
        assert len({s.name for s in specs}) == len(specs)
        for s in specs:
            cfg = resolve(s.config)
            assert cfg.task.name == "addition" and cfg.model.causal
        learned = [resolve(s.config) for s in specs if s.tags["setting"] in ("coupling",
                                                                              "abacus")]
        assert learned and all(c.model.posenc == "learned" for c in learned)
    cpu = add.SCALES["cpu"]
    assert cpu["N"] == 10 and cpu["M"] >= 20
    # two trials for the four PEs with hints (Fig. 3), one for every ablation; --seeds
    # replaces both
    main = [s for s in add.build_specs("cpu") if s.tags["group"] == "main"]
    for setting in add.SETTINGS:
        seeds = sorted(s.tags["seed"] for s in main if s.tags["setting"] == setting)
        assert seeds == ([0, 1] if setting in add.PES else [0]), setting
    chosen = add.build_specs("cpu", trials=[3], train_lengths=False, heatmap=False)
    assert {s.tags["seed"] for s in chosen} == {3} and len(chosen) == len(add.SETTINGS)


def test_gpu_scale_is_the_papers_5m_model_and_every_config_fits_its_inputs():
    """The gpu scale (results/addition-gpu): the paper's 5M model in bf16, 3 trials for the
    PEs with hints and 2 per ablation, FIRE also at N = 20; every randomized-positions config
    draws from a range that holds the longest test input, and the caption names the stride."""
    from lengen.tasks import build_task

    g = add.SCALES["gpu"]
    specs = add.build_specs("gpu")
    assert len({s.name for s in specs}) == len(specs)
    main = [s for s in specs if s.tags["group"] == "main"]
    for setting in add.SETTINGS:
        seeds = sorted(s.tags["seed"] for s in main if s.tags["setting"] == setting)
        assert seeds == ([0, 1, 2] if setting in add.PES else [0, 1]), setting
    assert sorted(s.tags["seed"] for s in specs if s.tags["N"] == 20) == [0, 1]
    for s in specs:
        cfg = resolve(s.config)
        m = cfg.model
        assert (m.n_layers, m.d_model, m.d_ff, m.n_heads) == (4, 256, 1024, 4)
        assert cfg.train.precision == "bf16" and cfg.train.batch_size == 128
        assert cfg.eval.splits[-1] == f"len={g['M']}" and cfg.eval.splits[:2] == ["len=1",
                                                                                 "len=3"]
        if m.positions == "randomized":
            task = build_task(cfg.task.name, **cfg.task.kwargs)
            longest = task.eval_batches(f"len={g['M']}", 1, 1, seed=0).__next__().inputs
            assert m.positions_kwargs["max_length"] >= longest.shape[1]
    cap = add.caption("gpu", n_runs=len(specs), trials=[0, 1], pe_trials=[0, 1, 2])
    assert "5M model" in cap and "bf16 autocast" in cap and "in steps of 2" in cap


def test_bad_input_through_the_recipe_configs():
    """Wrong options and parameters fail at resolve time, before any training."""
    from lengen.errors import ConfigError

    base = add.run_config("fire", "cpu")
    for patch, match in [
        (("task", "kwargs", "format", "little"), "unknown task.kwargs.format"),
        (("task", "kwargs", "hint_start", "middle"), "hint_start"),
        (("task", "kwargs", "max_eval_length", 150), "at most 101 digits"),
        (("model", "posenc_kwargs", "c_init", -1.0), "c_init"),
        (("model", "posenc_kwargs", "L_init", 0), "L_init"),
    ]:
        cfg = resolve(base)                      # the base resolves
        bad = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        sec, *rest = patch
        node = bad[sec] = dict(bad[sec])
        for k in rest[:-2]:
            node[k] = dict(node.get(k, {}))
            node = node[k]
        node[rest[-2]] = rest[-1]
        with pytest.raises(ConfigError, match=match):
            resolve(bad)
    kerple = add.run_config("kerple_log", "cpu")
    kerple["model"]["posenc_kwargs"] = {"r1_init": 0.0}
    with pytest.raises(ConfigError, match="r1_init"):
        resolve(kerple)
    coupling = add.run_config("coupling", "cpu")
    coupling["model"]["posenc_kwargs"] = {"max_positions": 10}
    with pytest.raises(ConfigError, match="learned positional table has 10 rows"):
        resolve(coupling)
    assert cfg.model.posenc == "fire"
    with pytest.raises(ValueError, match="unknown setting"):
        add.build_specs("cpu", settings=["fire", "alibi"])


def rows_for(run, setting, curve, N=3, seed=0, data_seed=0, group="main"):
    return [dict(run=run, setting=setting, label=add.SETTINGS[setting]["label"], N=N, seed=seed,
                 data_seed=data_seed, group=group, split=f"len={n}", metric="seq_acc",
                 value=v / 100, status="ok") for n, v in curve.items()]


def test_reach_and_run_scores():
    assert reach({1: 100, 2: 95, 3: 91, 4: 89, 5: 100}) == 3
    assert reach({1: 50, 2: 100}) == 0
    rows = (rows_for("a", "fire", {1: 100, 2: 100, 3: 100, 4: 95, 5: 40})
            + rows_for("b", "fire", {1: 100, 2: 80, 3: 60, 4: 10, 5: 0}, seed=1)
            + [dict(run="c", setting="rope", label="RoPE", N=3, seed=0, data_seed=0,
                    group="main", status="failed", metric=None, value=None,
                    error="TrainingDiverged: loss is nan at step 2")])
    sc = {r["run"]: r for r in run_scores(rows, M=5)}
    assert sc["a"]["in_dist"] == 100 and sc["a"]["ood"] == pytest.approx(67.5)
    assert (sc["a"]["reach"], sc["a"]["ratio"], sc["a"]["at_M"]) == (4, 4 / 3, 40)
    assert sc["a"]["fitted"] and not sc["b"]["fitted"]
    assert sc["c"]["status"] == "diverged"
    assert best(list(sc.values()), "fire", 3)["run"] == "a"
    assert best(list(sc.values()), "rope", 3) is None
    assert FIT == 90.0 and REACH == 90.0


def test_claims_do_not_count_pairs_where_neither_run_fitted(monkeypatch):
    """Two unfitted runs (both 0% beyond N) would otherwise 'agree' with any sign the paper
    states; they are shown, marked, and left out of the count."""
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    good = {1: 100, 2: 100, 3: 100, 4: 99, 5: 99}
    dead = {1: 20, 2: 0, 3: 0, 4: 0, 5: 0}
    rows = (rows_for("f", "fire", good) + rows_for("fn", "fire-nohints", dead)
            + rows_for("k", "kerple_log", dead) + rows_for("kn", "kerple_log-nohints", dead)
            + rows_for("ks", "kerple_log-spaces", dead) + rows_for("kr", "kerple_log-rand", dead)
            + rows_for("fr", "fire-norand", good) + rows_for("fs", "fire-spaces", dead))
    claims = {c["key"]: c for c in _claim_rows(rows, run_scores(rows, M=5), "smoke")}
    assert claims["no_hints"]["holds"] == "1 of 1 PEs (1 not counted)"
    assert "KerpleLog 6.7/0.0 vs 6.7/0.0 (neither run fitted" in claims["no_hints"]["ours"]
    # spaces: FIRE -99 counted (paper: -), KerpleLog 0 vs 0 not counted (paper: +)
    assert claims["spaces"]["holds"] == "1 of 1 PEs (1 not counted)"
    # randomized: FIRE 0 difference (counted, disagrees), KerpleLog not counted
    assert claims["randomized"]["holds"] == "0 of 1 PEs (1 not counted)"
    # FIRE beats only unfitted PEs: nothing to compare its degradation with
    assert claims["others_degrade"]["holds"] == "untested (no other PE fitted)"
    assert "KerpleLog 0.0" + UNFIT in claims["others_degrade"]["ours"]
    only_dead = [r for r in rows if r["run"] in ("k", "kn")]
    claims = {c["key"]: c for c in _claim_rows(only_dead, run_scores(only_dead, M=5), "smoke")}
    assert claims["no_hints"]["holds"] == "untested (neither run fitted for any PE)"


def test_claims_follow_the_rows(tmp_path, monkeypatch):
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    good = {1: 100, 2: 100, 3: 100, 4: 99, 5: 99}
    weak = {1: 100, 2: 100, 3: 100, 4: 50, 5: 20}
    rows = (rows_for("f", "fire", good) + rows_for("r", "rope", weak)
            + rows_for("fn", "fire-nohints", {1: 50, 2: 10, 3: 0, 4: 0, 5: 0})
            + rows_for("fs", "fire-standard", weak)
            + rows_for("fN2", "fire", {1: 100, 2: 100, 3: 90, 4: 10, 5: 0}, N=2,
                       group="train_length"))
    scores = run_scores(rows, M=5)
    claims = {c["key"]: c for c in _claim_rows(rows, scores, "smoke")}
    assert claims["fire_100"]["holds"] == "yes" and "99.0% at 5 digits" in claims["fire_100"][
        "ours"]
    assert claims["others_degrade"]["holds"] == "yes"
    assert claims["no_hints"]["holds"] == "1 of 1 PEs"
    assert claims["reversed"]["holds"] == "1 of 1 PEs"
    assert claims["train_length"]["holds"] == "yes"          # reach 2 (N=2) < 5 (N=3)
    assert claims["5m"]["holds"] == "n/a"
    # the published number stands in its own column beside ours
    assert claims["fire_100"]["paper"].startswith("> 98% EM at 100 digits")
    assert claims["train_length"]["paper"] == "reach 40 -> 100, 30 -> 45, 20 -> 25, 10 -> 10"
    # a standard format that beats the reversed one flips the claim
    rows2 = [dict(r, value=0.0) if r["run"] == "f" and r["split"] in ("len=4", "len=5")
             else r for r in rows]
    claims2 = {c["key"]: c for c in _claim_rows(rows2, run_scores(rows2, M=5), "smoke")}
    assert claims2["reversed"]["holds"] == "0 of 1 PEs"
    assert claims2["fire_100"]["holds"] == "no"
    paths = write_table(scores, str(tmp_path), scale="smoke", caption="cap")
    text = open(paths["table_md"]).read()
    assert "| FIRE, no hints | 1 (0) | 20.0 | 0.0" + UNFIT in text


def test_smoke_end_to_end_through_the_cli(tmp_path, capsys):
    out = str(tmp_path / "add")
    assert main(["reproduce", "addition", "--scale", "smoke", "--out", out]) == 0
    files = set(os.listdir(out))
    for f in ("table.md", "table.csv", "claims.md", "claims.csv", "errors.md", "scores.csv",
              "results.csv", "fig3_best.png", "fig3_all.png", "fig4.png", "fig5.png",
              "fig7.png", "fig8.png", "fig9.png", "fig_c10.png", "fig11.png", "fig13.png",
              "fig_training.png", "fig_beyond.png"):
        assert f in files, f
    table = open(os.path.join(out, "table.md")).read()
    for label in ("FIRE", "RoPE", "FIRE, no hints", "Position coupling", "Abacus"):
        assert f"| {label} |" in table
    claims = open(os.path.join(out, "claims.md")).read()
    assert "> 98% exact match at 100 digits" in claims and "Holds here?" in claims
    header = next(line for line in claims.splitlines() if line.startswith("| Claim"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Claim (where)", "Paper", "Ours at this scale", "Holds here?"]
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    metrics = {r["metric"] for r in rows}
    assert {"seq_acc", "seq_acc_during_training", "acc_with_carry", "digit_acc_carry_in",
            "digit_acc_no_carry_in", "single_digit_error_share"} <= metrics
    during = [r for r in rows if r["metric"] == "seq_acc_during_training"]
    assert {r["split"] for r in during} == {"len=2", "len=5"} and {r["step"] for r in during} \
        == {"2"}
    # error analyses are cached in the run directories and reused by a second invocation
    assert os.path.exists(os.path.join(out, "fire-s0-d0", "errors.json"))
    assert os.path.exists(os.path.join(out, "rope-s0-d0", "errors.json"))
    assert not os.path.exists(os.path.join(out, "fire-nohints-s0-d0", "errors.json"))
    mtime = os.path.getmtime(os.path.join(out, "fire-s0-d0", "errors.json"))
    assert main(["reproduce", "addition", "--scale", "smoke", "--out", out, "--settings",
                 "fire", "--no-heatmap", "--no-train-lengths"]) == 0
    assert os.path.getmtime(os.path.join(out, "fire-s0-d0", "errors.json")) == mtime
    assert "cached" in capsys.readouterr().out
    # an analysis cached by an older lengen (no version in its key) is recomputed
    path = os.path.join(out, "fire-s0-d0", "errors.json")
    with open(path) as f:
        cached = json.load(f)
    del cached["key"]["version"]
    cached["rows"] = [r for r in cached["rows"] if not r["metric"].startswith("digit_acc")]
    with open(path, "w") as f:
        json.dump(cached, f)
    assert main(["reproduce", "addition", "--scale", "smoke", "--out", out, "--settings",
                 "fire", "--no-heatmap", "--no-train-lengths"]) == 0
    with open(path) as f:
        again = json.load(f)
    assert again["key"]["version"] == add.ERROR_ANALYSIS_VERSION
    assert any(r["metric"] == "digit_acc_carry_in" for r in again["rows"])


def test_a_diverging_run_is_recorded_not_fatal(tmp_path, monkeypatch, capsys):
    orig = add.run_config

    def exploding(setting, *a, **kw):
        cfg = orig(setting, *a, **kw)
        if setting == "rope":        # an absurd learning rate: NaN loss within the 3 steps
            cfg["train"]["lr"] = 1e30
        return cfg

    # build_specs (lengen.recipes.addition.specs) looks run_config up in its own module
    monkeypatch.setattr(specs, "run_config", exploding)
    out = str(tmp_path / "div")
    code = main(["reproduce", "addition", "--scale", "smoke", "--out", out, "--settings",
                 "fire", "rope", "--no-heatmap", "--no-train-lengths"])
    assert code == 0
    text = capsys.readouterr().out
    assert "diverged (recorded in the report): rope-s0-d0" in text
    table = open(os.path.join(out, "table.md")).read()
    assert "| RoPE | 0 (1) |" in table
    with open(os.path.join(out, "scores.csv")) as f:
        status = {r["run"]: r["status"] for r in csv.DictReader(f)}
    assert status == {"fire-s0-d0": "ok", "rope-s0-d0": "diverged"}


def test_estimate_runs_and_counts_the_grid(capsys):
    res = add.estimate_time("smoke", settings=["fire", "coupling"], train_lengths=False,
                            heatmap=False, steps=1)
    assert res["runs"] == 2 and res["total_seconds"] > 0
    assert set(res["seconds_per_kind"]) == {("fire", 3), ("coupling", 3)}
    assert "estimated total: 2 runs" in capsys.readouterr().out
