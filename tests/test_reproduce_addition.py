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
from lengen.recipes.addition.report import (FIT, REACH, _claim_rows, best, reach, run_scores,
                                            write_table)


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
    cfg = resolve(add.run_config("fire", "paper", seed=3, data_seed=2)).config
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
    for scale in ("cpu", "cpu-5k", "smoke"):
        specs = add.build_specs(scale)
        assert len({s.name for s in specs}) == len(specs)
        for s in specs:
            cfg = resolve(s.config).config
            assert cfg.task.name == "addition" and cfg.model.causal
        learned = [resolve(s.config).config for s in specs if s.tags["setting"] in ("coupling",
                                                                              "abacus")]
        assert learned and all(c.model.posenc == "learned" for c in learned)
    old = add.SCALES["cpu-5k"]
    assert (old["N"], old["M"], old["steps"], old["batch_size"]) == (10, 20, 5000, 32)
    # cpu-5k: two trials for the four PEs with hints (Fig. 3), one for every ablation
    main = [s for s in add.build_specs("cpu-5k") if s.tags["group"] == "main"]
    for setting in add.SETTINGS:
        seeds = sorted(s.tags["seed"] for s in main if s.tags["setting"] == setting)
        assert seeds == ([0, 1] if setting in add.PES else [0]), setting
    chosen = add.build_specs("cpu-5k", trials=[3], train_lengths=False, heatmap=False)
    assert {s.tags["seed"] for s in chosen} == {3} and len(chosen) == len(add.SETTINGS)


def test_cpu_scale_is_the_fitted_budget_with_per_setting_learning_rates():
    """The cpu scale at the Fig. 3 search's budget (results/addition-fig3-search): 8,000 steps
    at batch 128, FIRE and its ablations at lr 3e-3, KerpleLog / RoPE / NoPE / Abacus at 1e-3,
    coupling at 1e-3 for 12,000 steps; three seeds on every arm; FIRE at N = 20 and the
    init x order grid only on request, N = 20 tested to 40 digits."""
    specs = add.build_specs("cpu")
    assert len(specs) == 10 * 3
    by = {}
    for s in specs:
        cfg = resolve(s.config).config
        assert (cfg.train.batch_size, cfg.model.d_model, cfg.model.n_layers) == (128, 64, 2)
        by.setdefault(s.tags["setting"], set()).add((cfg.train.lr, cfg.train.steps))
        assert cfg.eval.splits == [f"len={n}" for n in range(1, 21)]
    assert by["fire"] == by["fire-nohints"] == by["fire-spaces"] == {(3e-3, 8000)}
    assert by["kerple_log"] == by["abacus"] == by["rope"] == by["nope"] == {(1e-3, 8000)}
    assert by["coupling"] == {(1e-3, 12000)}
    assert {s.tags["setting"] for s in specs} == {"fire", "kerple_log", "rope", "nope",
                                                  "fire-nohints", "fire-standard", "fire-norand",
                                                  "fire-spaces", "coupling", "abacus"}
    for setting in {s.tags["setting"] for s in specs}:
        assert sorted(s.tags["seed"] for s in specs if s.tags["setting"] == setting) == \
            [0, 1, 2]
    more = add.build_specs("cpu", train_lengths=True, heatmap=True)
    n20 = [resolve(s.config).config for s in more if s.tags["N"] == 20]
    assert len(n20) == 2 and all(c.eval.splits[-1] == "len=40" for c in n20)
    assert all(c.task.kwargs["max_eval_length"] == 40 for c in n20)
    assert len([s for s in more if s.tags["group"] == "heatmap"]) == 2     # (0,1) and (1,1)


def test_parts_cover_the_grid_once_one_seed_each():
    grid = add.build_specs("cpu")
    parts = [add.grid_part(grid, (k, 3)) for k in (1, 2, 3)]
    names = [s.name for p in parts for s in p]
    assert sorted(names) == sorted(s.name for s in grid)
    assert [{s.tags["seed"] for s in p} for p in parts] == [{0}, {1}, {2}]
    assert add.grid_part(grid, None) == grid
    from lengen.recipes.common import parse_part, part_of
    assert parse_part("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "2", "a/b"):
        with pytest.raises(ValueError, match="--part"):
            parse_part(bad)
    assert [len(part_of(list(range(7)), (k, 3))) for k in (1, 2, 3)] == [3, 2, 2]


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
        cfg = resolve(s.config).config
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
        cfg = resolve(base).config                      # the base resolves
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
            # the short-length dip: learns addition (2..3) without fitting 1..3
            + rows_for("d", "fire", {1: 40, 2: 100, 3: 100, 4: 50, 5: 0}, seed=2)
            + [dict(run="c", setting="rope", label="RoPE", N=3, seed=0, data_seed=0,
                    group="main", status="failed", metric=None, value=None,
                    error="TrainingDiverged: loss is nan at step 2")])
    sc = {r["run"]: r for r in run_scores(rows, M=5)}
    assert sc["a"]["in_dist"] == 100 and sc["a"]["ood"] == pytest.approx(67.5)
    assert (sc["a"]["reach"], sc["a"]["ratio"], sc["a"]["at_M"]) == (4, 4 / 3, 40)
    assert (sc["a"]["fits"], sc["a"]["learns"]) == (True, True)
    assert (sc["b"]["fits"], sc["b"]["learns"]) == (False, False)
    assert (sc["d"]["fits"], sc["d"]["learns"]) == (False, True)
    assert sc["d"]["em_fits"] == pytest.approx(80) and sc["d"]["em_learns"] == 100
    assert sc["c"]["status"] == "diverged"
    assert best(list(sc.values()), "fire", 3)["run"] == "a"
    assert best(list(sc.values()), "rope", 3) is None
    assert FIT == 95.0 and REACH == 90.0
    # M per training length: a run at N = 4 tested to 8 is scored to 8
    longer = rows_for("n4", "fire", {n: 100 for n in range(1, 9)}, N=4)
    assert run_scores(longer, M=lambda N: 2 * N)[0]["at_M"] == 100


GOOD = {1: 100, 2: 100, 3: 100, 4: 99, 5: 99}
DEAD = {1: 20, 2: 0, 3: 0, 4: 0, 5: 0}


def ood_curve(ood: float) -> dict:
    """A run that fits 1..3 with OOD EM ``ood`` at 4 and 5."""
    return {1: 100, 2: 100, 3: 100, 4: ood, 5: ood}


def seeds_of(setting, curves: dict) -> list:
    return [r for seed, c in curves.items() for r in rows_for(f"{setting}-{seed}", setting, c,
                                                              seed=seed)]


def claims_of(rows, reading="fits") -> dict:
    return {c["key"]: c for c in _claim_rows(rows, run_scores(rows, M=5), "smoke")
            if c["reading"] == reading}


def test_claims_are_paired_over_the_seeds_both_arms_pass(monkeypatch):
    """Every verdict comes from the runs that pass a reading, paired by seed (n >= 2), never a
    best trial: FIRE's best seed is above every KerpleLog run, but its mean is not."""
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    rows = (seeds_of("fire", {0: ood_curve(90), 1: ood_curve(10), 2: ood_curve(10)})
            + seeds_of("kerple_log", {0: ood_curve(50), 1: ood_curve(50), 2: ood_curve(50)})
            + seeds_of("rope", {0: DEAD, 1: DEAD, 2: DEAD})
            + seeds_of("fire-nohints", {0: DEAD, 1: DEAD, 2: DEAD})
            + seeds_of("fire-norand", {0: ood_curve(5), 1: ood_curve(5), 2: DEAD})
            + seeds_of("fire-spaces", {0: ood_curve(0), 1: DEAD, 2: DEAD}))
    c = claims_of(rows)
    k = c["others_degrade:kerple_log"]
    assert k["verdict"] == "not reproduced" and k["n"] == 3
    assert (k["base_mean"], k["other_mean"]) == (pytest.approx(110 / 3), 50)
    assert c["others_degrade:rope"]["verdict"] == "untested"           # RoPE passes on none
    assert "RoPE passes 0 of 3" in c["others_degrade:rope"]["ours"]
    nh = c["no_hints:fire"]
    assert (nh["verdict"], nh["base_passed"], nh["other_passed"]) == ("reproduced", 3, 0)
    # randomized positions: over seeds 0 and 1 (both arms pass) FIRE 50 vs 5 without them, a
    # gap under FIRE's std over those seeds (90 and 10: 56.6)
    r = c["randomized:fire"]
    assert r["n"] == 2 and r["diff"] == pytest.approx(45) and r["verdict"] == "direction only"
    assert r["larger_std"] == pytest.approx(56.5685, abs=1e-3)
    assert c["spaces:fire"]["verdict"] == "untested" and c["spaces:fire"]["n"] == 1
    assert c["fire_100"]["verdict"] == "untested"       # N = 3 < 40: the claim is for 1..40
    v = c["variance"]
    assert v["verdict"] == "reproduced" and "passes on 3 of 3" in v["ours"]
    # a FIRE seed that does not fit leaves the paired comparisons and fails "every trial fits"
    rows2 = [dict(x, value=0.0) if x["run"] == "fire-0" else x for x in rows]
    c2 = claims_of(rows2)
    assert c2["others_degrade:kerple_log"]["n"] == 2
    # 2 of 3 trials fit: single-arm/v1 reads more than half, and the claim's rule (written
    # before the runs) turns that into not reproduced: one unfitted trial contradicts it
    assert c2["variance"]["verdict"] == "not reproduced"
    assert c2["variance"]["rule"] == "single-arm/v1"
    assert c2["randomized:fire"]["verdict"] == "untested"          # only seed 1 left


def test_the_learns_reading_keeps_runs_with_the_short_length_dip(monkeypatch):
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    dip = {1: 30, 2: 100, 3: 100, 4: 80, 5: 60}
    rows = (seeds_of("fire", {0: dip, 1: dip}) + seeds_of("fire-norand", {0: ood_curve(10),
                                                                          1: ood_curve(20)}))
    assert claims_of(rows, "fits")["randomized:fire"]["verdict"] == "untested"
    learns = claims_of(rows, "learns")["randomized:fire"]
    assert learns["verdict"] == "reproduced" and learns["n"] == 2
    assert learns["other_mean"] == 70 and learns["base_mean"] == 15


def test_claims_follow_the_rows(tmp_path, monkeypatch):
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    rows = (seeds_of("fire", {0: GOOD, 1: GOOD}) + seeds_of("fire-standard", {0: DEAD, 1: GOOD})
            + seeds_of("coupling", {0: ood_curve(100), 1: ood_curve(99)})
            + [r for seed in (0, 1) for r in rows_for(
                f"fN2-{seed}", "fire", {1: 100, 2: 100, 3: 90, 4: 10, 5: 0}, N=2, seed=seed,
                group="train_length")])
    c = claims_of(rows)
    # the standard format passes on one seed of two: FIRE's 2 against 1 is direction only
    assert c["reversed:fire"]["verdict"] == "direction only"
    # coupling 99.5 +- 0.71 against FIRE's 99 +- 0: above it by less than the larger std
    assert c["coupling"]["verdict"] == "direction only"
    assert c["coupling"]["diff"] == pytest.approx(0.5)
    # train length: reach - N is 0 at N = 2 and 2 at N = 3 on both seeds (std 0)
    assert c["train_length"]["verdict"] == "reproduced"
    assert "10 -> 10" in c["train_length"]["ours"]
    assert c["5m"]["verdict"] == "n/a"
    # the published number stands in its own column beside ours
    assert c["fire_100"]["paper"].startswith("> 98% EM at 100 digits")
    scores = run_scores(rows, M=5)
    paths = write_table(scores, str(tmp_path), scale="smoke", caption="cap")
    text = open(paths["table_md"]).read()
    assert "| FIRE, standard format | 2 (0) | 1 of 2 | 1 of 2 |" in text


def test_claim_signs_follow_the_paper(monkeypatch):
    """Fig. 7: random spaces help RoPE and KerpleLog, hurt NoPE and FIRE; Fig. 8: randomized
    positions help FIRE and hurt KerpleLog. Each arm on two seeds that pass, the gap well over
    the std: the verdict says whether the data go the paper's way."""
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))

    def pair(setting, ood, spread=1):
        return seeds_of(setting, {0: ood_curve(ood), 1: ood_curve(ood + spread)})

    up = (pair("rope", 10) + pair("rope-spaces", 60) + pair("fire", 60) + pair("fire-spaces", 10)
          + pair("kerple_log", 60) + pair("kerple_log-rand", 10) + pair("fire-norand", 10))
    c = claims_of(up)
    assert c["spaces:rope"]["verdict"] == "reproduced"           # + : spaces above
    assert c["spaces:fire"]["verdict"] == "reproduced"           # - : spaces below
    assert c["randomized:kerple_log"]["verdict"] == "reproduced"  # - : randomized below
    assert c["randomized:fire"]["verdict"] == "reproduced"       # + : randomized above
    down = (pair("rope", 60) + pair("rope-spaces", 10) + pair("fire", 10) + pair("fire-spaces", 60)
            + pair("kerple_log", 10) + pair("kerple_log-rand", 60) + pair("fire-norand", 60))
    c = claims_of(down)
    for key in ("spaces:rope", "spaces:fire", "randomized:kerple_log", "randomized:fire"):
        assert c[key]["verdict"] == "not reproduced", key


def test_diverged_runs_count_as_not_learning_and_reach_follows_the_reading(monkeypatch):
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    diverged = [dict(run=f"fire-nohints-{sd}", setting="fire-nohints", label="x", N=3, seed=sd,
                     data_seed=0, group="main", status="failed", metric=None, value=None,
                     error="TrainingDiverged: loss is nan") for sd in (0, 1)]
    rows = seeds_of("fire", {0: GOOD, 1: GOOD}) + diverged
    nh = claims_of(rows)["no_hints:fire"]
    assert (nh["verdict"], nh["n"], nh["other_passed"]) == ("reproduced", 2, 0)
    # a dip at 1 digit: no reach from 1, but from the learns reading's first length (2) the
    # run reaches 4, one past N
    dip = {1: 30, 2: 100, 3: 100, 4: 95, 5: 20}
    sc = run_scores(rows_for("d", "fire", dip), M=5)[0]
    assert (sc["reach_fits"], sc["reach_learns"]) == (0, 4)


def test_variance_covers_the_init_by_data_order_grid(monkeypatch):
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5))
    rows = (seeds_of("fire", {0: ood_curve(50), 1: ood_curve(52)})
            + rows_for("fire-s0-d1", "fire", ood_curve(80), seed=0, data_seed=1,
                       group="heatmap"))
    v = claims_of(rows)["variance"]
    assert "passes on 3 of 3" in v["ours"] and v["verdict"] == "reproduced"   # 50..80
    rows += rows_for("fire-s1-d1", "fire", DEAD, seed=1, data_seed=1, group="heatmap")
    # a trial did not fit: "every trial" is contradicted however many others fit (the rule
    # written before the runs)
    assert claims_of(rows)["variance"]["verdict"] == "not reproduced"
    # every trial fits but OOD EM does not vary: the claim's second half fails
    same = seeds_of("fire", {0: ood_curve(50), 1: ood_curve(50)})
    v = claims_of(same)["variance"]
    assert v["verdict"] == "not reproduced" and "spread" in v["why"]
    # one trial that fits beside one that does not: half is not more than half
    two = seeds_of("fire", {0: ood_curve(50), 1: DEAD})
    assert claims_of(two)["variance"]["verdict"] == "not reproduced"
    assert claims_of(seeds_of("fire", {0: ood_curve(50)}))["variance"]["verdict"] == "untested"


def test_parts_report_every_finished_run_and_keep_other_parts_failures(tmp_path, monkeypatch,
                                                                       capsys):
    orig = add.run_config

    def exploding(setting, *a, **kw):
        cfg = orig(setting, *a, **kw)
        if setting == "rope" and kw.get("seed", a[1] if len(a) > 1 else 0) == 0:
            cfg["train"]["lr"] = 1e30                     # NaN loss within the 3 steps
        return cfg

    monkeypatch.setattr(specs, "run_config", exploding)
    out = str(tmp_path / "parts")
    args = ["reproduce", "addition", "--scale", "smoke", "--out", out, "--settings", "fire",
            "rope", "--seeds", "0", "1", "--no-heatmap", "--no-train-lengths"]
    assert main(args + ["--part", "1/2"]) == 0
    text = capsys.readouterr().out
    assert "part 1 of 2: 2 of the grid's 4 runs" in text
    assert "Not run yet (2 of 4" in open(os.path.join(out, "table.md")).read()
    assert main(args + ["--part", "2/2"]) == 0
    with open(os.path.join(out, "scores.csv")) as f:
        status = {r["run"]: r["status"] for r in csv.DictReader(f)}
    assert status == {"fire-s0-d0": "ok", "rope-s0-d0": "diverged", "fire-s1-d0": "ok",
                      "rope-s1-d0": "ok"}
    with open(os.path.join(out, "sweep.json")) as f:
        sweep = json.load(f)
    assert sweep["pending"] == [] and set(sweep["runs"]) == set(status)
    assert sweep["runs"]["fire-s0-d0"]["status"] == "cached"      # read back, not retrained
    with open(os.path.join(out, "failures.json")) as f:
        assert [x["name"] for x in json.load(f)] == ["rope-s0-d0"]   # part 1's, kept
    with open(os.path.join(out, "results.csv")) as f:
        assert {r["run"] for r in csv.DictReader(f)} == set(status)
    assert "Not run yet" not in open(os.path.join(out, "table.md")).read()


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
    assert "> 98% exact match at 100 digits" in claims and "| fits |" in claims
    header = next(line for line in claims.splitlines() if line.startswith("| Claim"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Claim (where)", "Paper", "Reading", "Ours at this scale", "Verdict"]
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


def test_claims_come_from_the_engines_rules_at_equal_budgets(monkeypatch):
    """audit #2: the report judged with compare_* (an unpaired 'all passing runs' rule beside
    the paired one, budgets never compared); it now calls judge_* and names the rule per row.
    Coupling at its own 12,000 steps against FIRE at the scale's steps is untested however far
    above it is; a different lr alone is stated, not refused (each setting's searched lr)."""
    own = {"coupling": dict(lr=1e-3, steps=12_000), "kerple_log": dict(lr=3e-4)}
    monkeypatch.setitem(add.SCALES, "smoke", dict(add.SCALES["smoke"], N=3, M=5,
                                                  per_setting=own))
    rows = (seeds_of("fire", {0: ood_curve(10), 1: ood_curve(12), 2: ood_curve(11)})
            + seeds_of("coupling", {0: ood_curve(90), 1: ood_curve(95), 2: ood_curve(99)})
            + seeds_of("kerple_log", {0: ood_curve(1), 1: ood_curve(2), 2: ood_curve(3)}))
    c = claims_of(rows)
    assert c["coupling"]["verdict"] == "untested" and c["coupling"]["rule"] == "paired-gap/v1"
    assert "unequal budgets" in c["coupling"]["why"] and "12000 steps" in c["coupling"]["why"]
    k = c["others_degrade:kerple_log"]
    assert k["verdict"] == "reproduced" and "lr per arm" in k["why"]
    assert "unpaired" not in k and "all passing runs" not in k["ours"]
