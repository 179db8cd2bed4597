"""lengen bench (battery v4): variants parsed and refused as documented, one run per variant x cell
x seed x learning rate with n/a rows where a variant cannot run, the cells' fit rules and OOD scores
on constructed rows, the held-out validation split, learning-rate selection that never reads the OOD
columns, rows of another budget of a cell refused, the card's statistics and verdicts on constructed
runs, and a two-seed smoke bench end to end from the CLI and on a local Ray cluster."""
from __future__ import annotations

import csv
import json
import os
import shutil

import pytest

from lengen.bench.battery import (CELL_SINCE, CELLS, EVAL_SEED, LR_FACTORS, SCALES, VAL_SEED,
                                  VERSION, cell_config, check_version, lr_grid, score, train_top,
                                  validation_config, counts_now)
from lengen.bench.run import (BASELINE_GROUPS, BASELINES, baseline_variants, build_specs,
                              default_seeds, parse_variant, run_bench, select_lr)
from lengen.bench.scorecard import (RUN_FIELDS, compare_cards, fitted_cells, published,
                                    read_runs, read_scorecard, write_card)
from lengen.cli import main
from lengen.errors import ConfigError
from lengen.config import resolve


def test_parse_variant_labels_and_refusals():
    assert parse_variant("model.posenc=rope model.positions=randomized") == (
        "rope+randomized", ["model.posenc=rope", "model.positions=randomized"])
    assert parse_variant("name=mine model.posenc=pkg.pe:Slopes")[0] == "mine"
    assert parse_variant("model.posenc=pkg.pe:Slopes")[0] == "Slopes"
    assert parse_variant({"name": "x", "overrides": ["model.attention=tra"]}) == (
        "x", ["model.attention=tra"])
    with pytest.raises(ConfigError, match="empty variant"):     # never silently NoPE
        parse_variant("")
    with pytest.raises(ConfigError, match="only model.. keys can change"):
        parse_variant("train.steps=10")
    with pytest.raises(ConfigError, match="use letters, digits"):
        parse_variant("name=a/b model.posenc=rope")
    with pytest.raises(ConfigError, match="keys name .optional. and overrides"):
        parse_variant({"overide": []})


def test_specs_cover_every_cell_and_mark_what_cannot_run():
    specs, na = build_specs([("NoPE", []), ("TRA", ["model.attention=tra"])], "smoke",
                            seeds=[0])
    assert {(s.tags["variant"], s.tags["cell"]) for s in specs} >= {("NoPE", c) for c in CELLS}
    assert {r["cell"] for r in na} == {"bucket_sort", "reverse_string", "even_pairs",
                                       "missing_duplicate"}              # encoder cells
    assert all("causal" in r["reason"] and r["variant"] == "TRA" for r in na)
    with pytest.raises(ConfigError, match="two variants share a name"):
        build_specs([("a", []), ("a", ["model.posenc=rope"])], "smoke")
    with pytest.raises(ValueError, match="unknown bench cell"):
        build_specs([("a", [])], "smoke", cells=["copyy"])


def test_specs_per_seed_and_rate_differ_in_init_and_data_order():
    grid = {"copy": lr_grid("copy", "cpu")}
    specs, _ = build_specs([("RoPE", ["model.posenc=rope"])], "cpu", cells=["copy"],
                           seeds=[0, 1], lrs=grid)
    assert len(specs) == 2 * 3
    assert {(s.config["train"]["seed"], s.config["train"]["data_seed"]) for s in specs} == {
        (0, 0), (1, 1)}
    assert sorted({s.config["train"]["lr"] for s in specs}) == [5e-4, 1e-3, 2e-3]
    assert len({s.name for s in specs}) == 6 and specs[0].name == "RoPE--copy--s0--lr0.0005"
    assert {s.tags["lr_factor"] for s in specs} == set(LR_FACTORS)
    assert default_seeds("cpu") == [0, 1, 2] and default_seeds("paper") == [0, 1, 2, 3, 4]
    assert default_seeds("cpu", "quick") == [0, 1]
    with pytest.raises(ConfigError, match="seeds must differ"):
        build_specs([("a", [])], "smoke", seeds=[0, 0])


def test_every_baseline_builds_on_every_cell_it_can_run_at_cpu_scale():
    specs, na = build_specs(list(BASELINES.items()), "cpu", seeds=[0])
    assert len(BASELINES) == 18 and len(specs) + len(na) == len(BASELINES) * len(CELLS)
    encoder = {"bucket_sort", "reverse_string", "even_pairs", "missing_duplicate"}
    decoder_only = {"TRA", "FoT", "Selective", "Stick-breaking", "PaTH", "iRoPE"}
    assert {r["variant"] for r in na} == decoder_only     # n/a only on the encoder cells
    assert {r["cell"] for r in na} == encoder and len(na) == 4 * len(decoder_only)
    assert len(specs) == 18 * 9 - 24
    # the recurrences read the encoder cells causally (answers after the whole input), and are
    # causal already on the decoder cells, where the override changes nothing
    for s in specs:
        if s.tags["variant"] in ("LSTM", "Mamba-2", "Gated DeltaNet"):
            assert s.config["model"]["causal"] is True, s.name
    plain = {s.tags["cell"]: s.config for s in build_specs(
        [("a", ["model.attention=lstm"])], "cpu", seeds=[0], cells=["flipflop", "copy"])[0]}
    causal = {s.tags["cell"]: s.config for s in build_specs(
        [("a", ["model.attention=lstm", "model.causal=true"])], "cpu", seeds=[0],
        cells=["flipflop", "copy"])[0]}
    for cell in plain:          # the committed decoder-cell runs are the same runs
        assert (resolve(plain[cell]).config.to_dict()
                == resolve(causal[cell]).config.to_dict()), cell
    by = {s.tags["variant"]: s.config["model"] for s in specs if s.tags["cell"] == "copy"}
    assert by["RoPE + SSMax"]["attention_kwargs"] == {"logn": "ssmax"}
    assert by["iRoPE"]["layers"][0] == {"chunk": 16, "qk_norm": "rms"}
    assert by["iRoPE"]["layers"][1]["attention_kwargs"]["logn"] == "llama4"


def test_baseline_groups_cover_every_baseline_once():
    assert BASELINE_GROUPS["classic"] + BASELINE_GROUPS["methods"] == list(BASELINES)
    assert [n for n, _ in baseline_variants([])] == list(BASELINES)
    assert [n for n, _ in baseline_variants(["classic"])] == BASELINE_GROUPS["classic"]
    assert [n for n, _ in baseline_variants(["LSTM", "methods"])] == BASELINE_GROUPS["methods"]
    assert baseline_variants(["p-RoPE"]) == [("p-RoPE", ["model.posenc=prope"])]
    with pytest.raises(ConfigError, match="unknown baseline.*a group: classic, methods, all"):
        baseline_variants(["Lstm"])


def test_committed_baselines_are_built_in_baselines_run_as_such():
    """The committed baseline rows (``results/bench-cpu/v<VERSION>/runs.csv``, bench parts run with
    ``--baselines-only`` or as ``--variant 'name=LABEL ...'``): every label is one of
    ``BASELINES``, every run is of the full protocol at the cpu scale, on its cell's grid and
    with its cell's budget."""
    from lengen.bench.scorecard import baseline_path

    path = baseline_path("cpu")
    assert os.path.isfile(path), (f"{path}: the battery's committed baselines, which lengen "
                                  "bench shows by default, are missing (a new VERSION needs them)")
    rows = read_runs(path)                        # refuses rows of another battery version
    assert {r["variant"] for r in rows} <= set(BASELINES)
    for r in (r for r in rows if r["status"] != "n/a"):
        assert (r["protocol"], r["scale"]) == ("full", "cpu")
        assert any(abs(r["lr"] - lr) <= 1e-12 for lr in lr_grid(r["cell"], "cpu"))
        assert r["steps"] == cell_config(r["cell"], "cpu")["train"]["steps"]


@pytest.mark.parametrize("label", list(BASELINES))
def test_a_baseline_run_as_a_variant_makes_the_same_runs(label):
    """A baseline given as ``--variant 'name=LABEL OVERRIDES'`` (quoted where the label or an
    override holds a space) makes the very runs of ``--baselines-only LABEL``: the same names
    (so the same run folders), configs and runs.csv tags; such a bench part's rows can be
    committed as the baseline's."""
    import shlex

    overrides = BASELINES[label]
    text = shlex.join([f"name={label}"] + overrides)
    assert parse_variant(text) == (label, overrides)
    as_variant = build_specs([parse_variant(text)], "cpu", seeds=[0, 1], cells=["copy"],
                             lrs={"copy": [5e-4, 1e-3]})
    as_baseline = build_specs(baseline_variants([label]), "cpu", seeds=[0, 1], cells=["copy"],
                              lrs={"copy": [5e-4, 1e-3]})
    assert as_variant[1] == as_baseline[1]
    assert [(s.name, s.config, s.tags) for s in as_variant[0]] == [
        (s.name, s.config, s.tags) for s in as_baseline[0]]


def test_cell_configs_keep_the_protocol():
    ff = cell_config("flipflop", "cpu")
    assert ff["eval"]["splits"] == ["iid", "sparse", "dense"] and ff["task"]["name"] == "flipflop"
    ch = cell_config("even_pairs", "cpu")
    assert ch["model"]["causal"] is False and ch["train"]["optimizer"] == "adam"
    N = SCALES["cpu"]["chomsky"]["N"]
    lengths = [int(s[4:]) for s in ch["eval"]["splits"]]
    assert min(lengths) == 1 and max(lengths) == SCALES["cpu"]["chomsky"]["M"] and N in lengths
    add = cell_config("addition", "cpu")["task"]["kwargs"]
    assert add["format"] == "reversed" and add["hints"] is True
    lm = cell_config("lm", "cpu")["task"]["kwargs"]
    assert lm["eval_lengths"] == [128, 256, 512, 1024] and lm["corpus"] == "kjv"


def _len_rows(values: dict, metric: str) -> list[dict]:
    return [{"split": f"len={k}", "metric": metric, "value": v, "length": k + 1}
            for k, v in values.items()]


def test_scores_and_fit_rules_on_constructed_rows():
    N = SCALES["cpu"]["chomsky"]["N"]
    s = score("even_pairs", "cpu", _len_rows({1: 1.0, N: 0.9, N + 1: 0.6, 100: 0.4}, "token_acc"))
    assert s["fitted"] and s["seen"] == pytest.approx(0.95) and s["ood"] == pytest.approx(0.5)
    s = score("even_pairs", "cpu", _len_rows({1: 0.9, N: 0.8, N + 1: 1.0}, "token_acc"))
    assert not s["fitted"]                                     # 85% < 90% at the training lengths
    ff = [{"split": k, "metric": "seq_acc", "value": v}
          for k, v in {"iid": 0.97, "sparse": 0.5, "dense": 1.0}.items()]
    assert score("flipflop", "cpu", ff) == {"fitted": True, "seen": 0.97, "ood": 0.75}
    M = SCALES["cpu"]["addition"]["N"]
    s = score("addition", "cpu", _len_rows({1: 1.0, M: 0.88, M + 1: 0.5}, "seq_acc"))
    assert not s["fitted"] and s["ood"] == 0.5                 # mean 94% at 1..N < 95%
    assert score("addition", "cpu", _len_rows({1: 1.0, M: 0.9}, "seq_acc"))["fitted"]
    lm = [{"split": f"len={k}", "metric": "ppl", "value": v, "length": k}
          for k, v in {128: 20.0, 1024: 40.0}.items()]
    assert score("lm", "cpu", lm)["ood"] == 0.5


def test_published_numbers_are_the_papers():
    assert published("TRA", "flipflop") == pytest.approx(1.0)          # 100 / 100
    assert published("RoPE", "flipflop") == pytest.approx((72.82 + 100) / 200)
    assert published("Rand. RoPE", "even_pairs") == pytest.approx(1.0)
    assert published("NoPE", "bucket_sort") == pytest.approx(0.237)
    assert published("mine", "flipflop") is None and published("NoPE", "copy") is None


def test_validation_split_is_held_out_and_in_distribution():
    for cell in ("even_pairs", "copy", "addition"):
        conf = cell_config(cell, "cpu", seed=2)
        val = validation_config(cell, conf, "cpu")
        top = train_top(cell, "cpu")
        lengths = [int(sp[4:]) for sp in val["eval"]["splits"]]
        assert lengths and max(lengths) == top                  # training lengths only
        assert val["eval"]["seed"] == VAL_SEED not in (EVAL_SEED, conf["train"]["data_seed"])
        assert val["train"] == conf["train"] and val["model"] == conf["model"]
    assert validation_config("flipflop", cell_config("flipflop", "cpu"), "cpu")["eval"][
        "splits"] == ["iid"]
    lm = validation_config("lm", cell_config("lm", "cpu"), "cpu")["task"]["kwargs"]
    assert lm["eval_split"] == "validation" and lm["eval_lengths"] == [128]
    assert cell_config("lm", "cpu")["task"]["kwargs"]["eval_split"] == "test"


def test_quick_protocol_keeps_the_training_lengths_and_thins_the_ood_ones():
    full = [int(s[4:]) for s in cell_config("even_pairs", "cpu")["eval"]["splits"]]
    quick = [int(s[4:]) for s in cell_config("even_pairs", "cpu",
                                             protocol="quick")["eval"]["splits"]]
    N = train_top("even_pairs", "cpu")
    assert [n for n in quick if n <= N] == [n for n in full if n <= N]
    assert len(quick) < len(full) and max(quick) == max(full)
    with pytest.raises(ConfigError, match="unknown bench protocol"):
        cell_config("copy", "cpu", protocol="fast")


class _OnlyValidation(dict):
    """A run row whose OOD columns cannot be read: selection must not touch them."""

    def __getitem__(self, key):
        if key in ("ood", "curve", "seen", "fitted"):
            raise AssertionError(f"lr selection read the {key!r} column")
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default


def test_lr_selection_reads_only_the_validation_split():
    # OOD would pick 2e-3 (0.9); validation picks 5e-4 (0.99)
    rows = [_OnlyValidation(lr=5e-4, status="ok", val=0.99, ood=0.1, curve="{}"),
            _OnlyValidation(lr=1e-3, status="ok", val=0.95, ood=0.5, curve="{}"),
            _OnlyValidation(lr=2e-3, status="not fitted", val=0.50, ood=0.9, curve="{}")]
    assert select_lr(rows, 1e-3) == 5e-4
    tie = [_OnlyValidation(lr=5e-4, status="ok", val=1.0), _OnlyValidation(lr=1e-3,
                                                                          status="ok", val=1.0),
           _OnlyValidation(lr=2e-3, status="ok", val=1.0)]
    assert select_lr(tie, 1e-3) == 1e-3                        # a tie goes to the default
    assert select_lr(tie[::2], 1e-3) == 5e-4                   # ... then to the smaller rate
    assert select_lr([_OnlyValidation(lr=5e-4, status="failed", val=None),
                      _OnlyValidation(lr=2e-3, status="ok", val=float("nan"))], 1e-3) == 1e-3
    # a failed run's stale number is not read
    assert select_lr([_OnlyValidation(lr=5e-4, status="failed", val=1.0),
                      _OnlyValidation(lr=2e-3, status="ok", val=0.2)], 1e-3) == 2e-3


def _runs(variant, cell, oods, *, fitted=None, lr=1e-3, protocol="full", version=VERSION,
          curve=None):
    fitted = fitted or [True] * len(oods)
    return [{"variant": variant, "cell": cell, "seed": i, "lr": lr, "lr_factor": 1.0,
             "role": "final", "counted": True, "selected_lr": lr,
             "status": "ok" if f else "not fitted", "fitted": f, "seen": 1.0, "val": 1.0,
             "ood": o, "curve": json.dumps(curve or {21: o, 37: o / 2}), "steps": 10,
             "seconds": 1.0, "scale": "cpu", "protocol": protocol, "bench_version": version,
             "reason": ""} for i, (o, f) in enumerate(zip(oods, fitted))]


def _write_runs(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def test_a_part_keeps_the_earlier_parts_rows_of_other_variants_and_other_cells(tmp_path):
    """A bench run in parts into one folder: a part that runs a variant on some cells keeps
    that variant's rows on the other cells (they were once dropped with every row of a variant
    the part ran), and rows of the pairs it runs are replaced, never doubled."""
    from lengen.bench.run import keep_earlier_pairs
    _write_runs(tmp_path / "runs.csv", _runs("RoPE", "copy", [0.1, 0.2])
                + _runs("RoPE", "flipflop", [0.9]) + _runs("NoPE", "copy", [0.05]))
    now = _runs("RoPE", "addition", [0.4]) + _runs("RoPE", "copy", [0.3])
    kept = keep_earlier_pairs(now, str(tmp_path))
    assert sorted((r["variant"], r["cell"], r["ood"]) for r in kept) == [
        ("NoPE", "copy", 0.05), ("RoPE", "flipflop", 0.9)]
    assert keep_earlier_pairs(now, str(tmp_path / "absent")) == []


def test_v1_rows_are_never_compared_with_v2_rows(tmp_path):
    v1 = tmp_path / "scorecard.csv"                       # the committed v1 card's format
    with open(v1, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "cell", "status", "fitted", "seen", "ood",
                                          "scale", "bench_version"])
        w.writeheader()
        w.writerow({"variant": "RoPE", "cell": "copy", "status": "ok", "fitted": True,
                    "seen": 1.0, "ood": 0.2, "scale": "cpu", "bench_version": 1})
    assert read_scorecard(str(v1))[0]["bench_version"] == 1          # history stays readable
    with pytest.raises(ConfigError, match=f"battery v1; this is battery v{VERSION}.*never "
                                          f"compared"):
        read_runs(str(v1))
    mine = _runs("mine", "copy", [0.5, 0.6])
    with pytest.raises(ConfigError, match="battery v1"):
        write_card(mine, str(tmp_path / "out"), "cpu", baselines=str(v1), log=None)
    old = tmp_path / "old.csv"
    _write_runs(old, _runs("RoPE", "copy", [0.5, 0.6], version=1))
    with pytest.raises(ConfigError, match="battery v1"):
        compare_cards(str(tmp_path / "old.csv"), str(old), str(tmp_path / "c"), log=None)
    with pytest.raises(ConfigError, match="battery v1"):
        write_card(_runs("x", "copy", [0.5], version=1), str(tmp_path / "o2"), "cpu",
                   baselines=None, log=None)
    assert check_version(VERSION) == VERSION and VERSION == 4


def test_a_row_counts_while_its_cell_is_unchanged(tmp_path):
    """Battery v3 changed only the addition cell and v4 only reverse and reverse string
    (``CELL_SINCE``): a v2 row of any other cell is this battery's row (same config, same
    rule), a v3 addition row too, a v2 addition row or a v3 reverse row is refused, and so is a
    row of a version this lengen does not know, or of a cell it does not have."""
    changed = {"addition": 3, "reverse": 4, "reverse_string": 4}
    assert CELL_SINCE == {**{c: 2 for c in CELLS}, **changed}
    assert all(check_version(2, cell=c) == 2 for c in CELLS if c not in changed)
    assert check_version(3, cell="addition") == 3 and check_version(4, cell="reverse") == 4
    # the rule itself (what results/bench-cpu/v4/carry.py keeps rows by): a malformed row is
    # an error, never a row quietly left out
    assert counts_now(2, "copy") and counts_now(3, "addition") and not counts_now(2, "addition")
    assert counts_now(4, "copy") and counts_now(4, "reverse_string")
    assert not counts_now(3, "reverse") and not counts_now(2, "reverse_string")
    assert not counts_now(5, "copy") and not counts_now(1, "copy")
    with pytest.raises(ConfigError, match="unknown bench cell 'adition'"):
        counts_now(2, "adition")
    with pytest.raises(ConfigError, match="must be an integer battery version, got 'x'"):
        counts_now("x", "copy")
    with pytest.raises(ConfigError, match=r"battery v2; this is battery v4's addition cell "
                                          r"\(unchanged since v3\).*never compared"):
        check_version(2, "rows", cell="addition")
    with pytest.raises(ConfigError, match=r"battery v3; this is battery v4's reverse cell "
                                          r"\(unchanged since v4\)"):
        check_version(3, "rows", cell="reverse")
    for v, cell in ((1, "copy"), (5, "copy"), (2, None), (3, None)):
        with pytest.raises(ConfigError, match=f"battery v{v}; this is battery v4"):
            check_version(v, "rows", cell=cell)
    with pytest.raises(ConfigError, match="unknown bench cell 'adition'. Valid: flipflop"):
        check_version(3, "rows", cell="adition")
    old = tmp_path / "v2.csv"
    _write_runs(old, _runs("RoPE", "copy", [0.5, 0.6], version=2)
                + _runs("RoPE", "addition", [0.5], version=2))
    with pytest.raises(ConfigError, match="battery v2; this is battery v4's addition cell"):
        read_runs(str(old))
    _write_runs(old, _runs("RoPE", "copy", [0.5, 0.6], version=2))
    assert [r["bench_version"] for r in read_runs(str(old))] == [2, 2]
    # a baseline card completed in parts names what it has not run yet (pending.csv beside it)
    base = tmp_path / "base"
    base.mkdir()
    _write_runs(base / "runs.csv", _runs("RoPE", "copy", [0.5, 0.6], version=2)
                + _runs("ALiBi", "addition", [0.4, 0.5]))
    (base / "pending.csv").write_text("variant,cell\nRoPE,addition\nNoPE,addition\n")
    write_card(_runs("mine", "copy", [0.5, 0.6]), str(tmp_path / "card"), "cpu",
               baselines=str(base), log=None)
    md = (tmp_path / "card" / "scorecard.md").read_text()
    assert ("Not run yet at battery v4 (the baseline card is completed in parts; pending.csv): "
            "addition: RoPE, NoPE.") in md
    write_card(_runs("mine", "copy", [0.5, 0.6]), str(tmp_path / "card2"), "cpu",
               baselines=str(old), log=None)
    assert "Not run yet" not in (tmp_path / "card2" / "scorecard.md").read_text()
    # a part written into the baseline folder itself, which --baselines also names: said once
    write_card(_runs("mine", "copy", [0.5, 0.6]), str(base), "cpu", baselines=str(base),
               log=None)
    assert (base / "scorecard.md").read_text().count("Not run yet at battery v4") == 1
    # a card completed in parts beside another folder's baselines, with the same pending pairs:
    # the sentence is said for each
    (tmp_path / "card3").mkdir()
    shutil.copy(base / "pending.csv", tmp_path / "card3" / "pending.csv")
    write_card(_runs("mine", "copy", [0.5, 0.6]), str(tmp_path / "card3"), "cpu",
               baselines=str(base), log=None)
    assert (tmp_path / "card3" / "scorecard.md").read_text().count("Not run yet at battery v4") \
        == 2


def test_fitted_cells_counts_failed_seeds_and_leaves_out_na():
    s = [{"variant": "x", "cell": "copy", "status": "ok", "fit_k": 1, "fit_n": 1, "failed": 2},
         {"variant": "x", "cell": "reverse", "status": "ok", "fit_k": 2, "fit_n": 3,
          "failed": 0},
         {"variant": "x", "cell": "addition", "status": "failed", "fit_k": 0, "fit_n": 0,
          "failed": 3},
         {"variant": "x", "cell": "lm", "status": "n/a"}]
    assert fitted_cells(s) == [{"variant": "x", "cells": 3, "two_thirds": 1, "none": 1}]


def test_card_statistics_and_verdicts_on_constructed_runs(tmp_path):
    base = tmp_path / "base.csv"
    _write_runs(base, _runs("RoPE", "copy", [0.10, 0.12, 0.11])
                + _runs("RoPE", "even_pairs", [0.5, 0.9, 0.7])
                + _runs("RoPE", "addition", [0.3, 0.0, 0.0], fitted=[True, False, False]))
    mine = (_runs("mine", "copy", [0.90, 0.92, 0.91]) + _runs("mine", "even_pairs",
                                                             [0.6, 0.8, 0.4])
            + _runs("mine", "addition", [0.0, 0.0, 0.0], fitted=[False] * 3)
            + [{"variant": "mine", "cell": "lm", "status": "n/a", "reason": "no",
                "bench_version": VERSION, "scale": "cpu", "protocol": "full"}])
    out = tmp_path / "card"
    paths = write_card(mine, str(out), "cpu", baselines=str(base), log=None)
    md = (out / "scorecard.md").read_text()
    # n = 3 values a, b, c: the bootstrap means' extremes are min and max, each with
    # probability 1/27 > 2.5%, so the interval is [min, max]
    assert "| mine | 60.0 [40.0, 80.0] 3/3 | 91.0 [90.0, 92.0] 3/3 | ‡ 0/3 | n/a |" in md
    assert "| RoPE * | 70.0 [50.0, 90.0] 3/3 (50.4) | 11.0 [10.0, 12.0] 3/3 | 30.0 1/3 |" in md
    assert "- mine beats RoPE on copy (intervals disjoint)" in md
    assert "- mine vs RoPE on even_pairs: not separable" in md
    assert "- mine vs RoPE on addition: untested (fewer than 2 fitted seeds (n = 0 vs 1))" in md
    summ = {(r["variant"], r["cell"]): r for r in csv.DictReader(open(out / "scorecard.csv"))}
    assert summ[("mine", "copy")]["effective_length"] == "21"    # 0.91 at 21, 0.455 at 37
    assert summ[("RoPE", "copy")]["effective_length"] == ""       # 0.11 < 90% at 21
    assert summ[("mine", "copy")]["fit_k"] == "3" and summ[("mine", "lm")]["status"] == "n/a"
    # fitted cells: n/a left out; RoPE's addition (1 of 3) is neither two thirds nor none
    assert "| mine | 3 | 2 | 1 |" in md and "| RoPE * | 3 | 2 | 0 |" in md
    # a ‡ pair with no fit-search row says the search was not run
    assert ("- ‡ mine / addition: fit search not run (`lengen bench --fit-search` runs it)."
            in md) and summ[("mine", "addition")]["fit_search"] == "not run"
    assert summ[("RoPE", "addition")]["fit_search"] == ""
    card = json.load(open(out / "scorecard.json"))
    assert card["fitted_cells"] == [
        {"variant": "mine", "cells": 3, "two_thirds": 2, "none": 1},
        {"variant": "RoPE", "cells": 3, "two_thirds": 2, "none": 0}]
    poi = card["poi"][0]
    # per cell: copy 1 (every pair); even_pairs 0.6 0.8 0.4 vs 0.5 0.9 0.7: 0.6 > 0.5,
    # 0.8 > 0.5 and 0.7, 0.4 above none: 3/9; addition (unfitted = 0): mine 0 0 0 vs RoPE's
    # 0.3 0 0: six ties of nine pairs -> 3/9
    assert poi["poi"] == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)
    assert {a["variant"]: a["cells"] for a in card["aggregate"]} == {"mine": 3, "RoPE": 3}
    assert (out / "curves" / "copy.png").stat().st_size > 1000
    assert [r["variant"] for r in csv.DictReader(open(out / "runs.csv"))].count("RoPE") == 0
    # a quick card beside full baselines: shown, never judged
    write_card(_runs("q", "copy", [0.9, 0.95], protocol="quick"), str(tmp_path / "q"), "cpu",
               baselines=str(base), log=None)
    md = (tmp_path / "q" / "scorecard.md").read_text()
    assert "different tuning budgets" in md and "beats" not in md
    # --compare: the same card from two folders
    assert main(["bench", "--compare", str(out), str(base), "--out",
                 str(tmp_path / "cmp")]) == 0
    assert "- mine beats RoPE on copy" in (tmp_path / "cmp" / "scorecard.md").read_text()
    assert len(paths) >= 5


def test_smoke_bench_two_seeds_from_the_cli(tmp_path, capsys):
    out = tmp_path / "bench"
    args = ["bench", "--scale", "smoke", "--variant", "model.posenc=rope", "--variant",
            "name=tra model.attention=tra", "--cells", "flipflop", "even_pairs",
            "--out", str(out), "--threads", "1", "--baselines", "none", "--seeds", "0", "1"]
    assert main(args) == 0
    rows = list(csv.DictReader(open(out / "runs.csv")))
    ran = [(r["variant"], r["cell"], r["seed"], r["lr"]) for r in rows if r["status"] != "n/a"]
    # seed 0 at the three rates of the grid, seed 1 at the chosen one, per variant x cell
    assert len(ran) == 3 * (3 + 1) and len(set(ran)) == len(ran)
    assert {(r["variant"], r["cell"]) for r in rows if r["status"] == "n/a"} == {
        ("tra", "even_pairs")}
    for v, c in (("rope", "flipflop"), ("rope", "even_pairs"), ("tra", "flipflop")):
        mine = [r for r in rows if (r["variant"], r["cell"]) == (v, c)]
        chosen = {r["selected_lr"] for r in mine}
        assert len(chosen) == 1
        counted = [r for r in mine if r["counted"] == "True"]
        assert sorted(r["seed"] for r in counted) == ["0", "1"]
        assert {r["lr"] for r in counted} == chosen
        assert all(r["val"] not in ("", "None") for r in mine)          # validation ran
    assert (out / "scorecard.png").stat().st_size > 1000
    assert "k/n seeds" in (out / "scorecard.md").read_text()
    assert (out / "rope--flipflop--s0--lr0.001" / "val.json").exists()
    capsys.readouterr()
    assert main(args) == 0                                   # finished runs are reused
    assert "cached" in capsys.readouterr().out and "done" not in capsys.readouterr().out
    assert main(args[:-3] + ["--quick", "--out", str(tmp_path / "q")]) == 0
    q = list(csv.DictReader(open(tmp_path / "q" / "runs.csv")))
    assert {r["protocol"] for r in q} == {"quick"}
    assert {(r["seed"], r["lr"]) for r in q if r["variant"] == "rope" and r["cell"] ==
            "flipflop"} == {("0", "0.001"), ("1", "0.001")}
    assert main(["bench", "--scale", "smoke"]) == 2          # no variant: a clear refusal
    assert "needs at least one variant" in capsys.readouterr().err


def test_smoke_bench_on_a_local_ray_cluster(tmp_path):
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path / "ray"
        rows = run_bench([("rope", ["model.posenc=rope"])], "smoke", str(out),
                         cells=["flipflop"], seeds=[0, 1], protocol="quick", backend="ray",
                         baselines=None, log=lambda *a: None)
    finally:
        ray.shutdown()
    assert sorted((r["seed"], r["status"] != "failed") for r in rows) == [(0, True), (1, True)]
    pids = {json.load(open(out / "sweep.json"))["runs"][r]["pid"] for r in
            ["rope--flipflop--s0--lr0.001", "rope--flipflop--s1--lr0.001"]}
    assert os.getpid() not in pids                          # trained in Ray workers
    assert (out / "rope--flipflop--s1--lr0.001" / "val.json").exists()
    assert (out / "scorecard.md").exists()


def test_cuda_runs_are_packed_on_a_gpu_through_ray_fractions(tmp_path, monkeypatch):
    import lengen.bench.run as bench_run
    from lengen.sweep import SweepResult

    seen = []

    def fake_sweep(specs, out, **kw):
        seen.append((specs, kw))
        return SweepResult(specs, {}, out)            # nothing ran: every run "failed"

    monkeypatch.setattr(bench_run, "run_sweep", fake_sweep)
    rows = run_bench([("rope", ["model.posenc=rope"])], "smoke", str(tmp_path / "b"),
                     cells=["copy"], seeds=[0, 1], protocol="quick", backend="ray",
                     device="cuda", runs_per_gpu=4, baselines=None, log=lambda *a: None)
    specs, kw = seen[0]
    assert kw["backend"] == "ray" and kw["ray_options"]["num_gpus"] == 0.25
    assert kw["run_fn"] is bench_run.run_bench_one
    assert {s.config["train"]["device"] for s in specs} == {"cuda"}
    assert {r["status"] for r in rows} == {"failed"}


def test_a_bench_in_parts_keeps_one_runs_csv(tmp_path, capsys):
    out = str(tmp_path / "parts")
    common = ["bench", "--scale", "smoke", "--cells", "flipflop", "--quick", "--out", out,
              "--threads", "1", "--baselines", "none"]
    assert main(common + ["--baselines-only", "NoPE"]) == 0
    assert main(common + ["--baselines-only", "RoPE"]) == 0
    rows = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
    assert sorted({r["variant"] for r in rows}) == ["NoPE", "RoPE"] and len(rows) == 4
    capsys.readouterr()
    assert main(common + ["--baselines-only", "Rope"]) == 2
    assert "unknown baseline" in capsys.readouterr().err


def test_a_bench_refuses_a_folder_it_cannot_finish_in_before_training(tmp_path, capsys):
    """An output folder a bench would fail in at the end or run by run is refused before any
    training: a run directory of one of its names holding a finished run of another config
    (an earlier budget of the cell, say), and a runs.csv row it would keep that is of another
    battery budget. A row of a pair the bench runs again is replaced, whatever its version."""
    out = tmp_path / "b"
    common = ["bench", "--scale", "smoke", "--cells", "flipflop", "--quick", "--out", str(out),
              "--threads", "1", "--baselines", "none", "--baselines-only", "NoPE"]
    assert main(common) == 0
    run_dir = next(p for p in out.iterdir() if p.name.startswith("NoPE--flipflop--s0"))
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["train"]["batch_size"] += 1                       # made under another budget
    (run_dir / "config.json").write_text(json.dumps(cfg))
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(common) == 2
    err = capsys.readouterr().err
    assert f"1 run(s) of this bench's names started with another config: {run_dir.name} " \
           f"(different config: train.batch_size)" in err and "another --out" in err
    assert sorted(p.name for p in out.iterdir()) == before          # nothing trained or written
    (run_dir / "eval.json").rename(run_dir / "eval.bak")     # unfinished: refused all the same
    assert main(common) == 2
    assert "started with another config" in capsys.readouterr().err
    (run_dir / "eval.bak").rename(run_dir / "eval.json")
    cfg["train"]["batch_size"] -= 1
    (run_dir / "config.json").write_text(json.dumps(cfg))
    sweep = (out / "sweep.json").stat().st_mtime_ns
    rows = list(csv.DictReader(open(out / "runs.csv")))
    _write_runs(out / "runs.csv", rows + _runs("RoPE", "copy", [0.5], version=1))
    assert main(common) == 2
    assert "battery v1" in capsys.readouterr().err               # a kept row of another budget
    assert (out / "sweep.json").stat().st_mtime_ns == sweep          # refused before the sweep
    _write_runs(out / "runs.csv", rows)
    fit = "variant,cell,seed,lr,steps,rung,status,fitted,bench_version\n"
    (out / "fit_search.csv").write_text(fit + "NoPE,flipflop,0,0.001,8,lr-wide,ok,False,1\n")
    assert main(common) == 2
    err = capsys.readouterr().err
    assert "battery v1" in err and "move that file away" in err
    assert (out / "sweep.json").stat().st_mtime_ns == sweep
    (out / "fit_search.csv").unlink()
    _write_runs(out / "runs.csv", [dict(r, bench_version=1) for r in rows])
    assert main(common) == 0                    # the pair run again: its old rows replaced
    again = list(csv.DictReader(open(out / "runs.csv")))
    assert {r["bench_version"] for r in again} == {str(VERSION)} and len(again) == len(rows)


def test_the_pre_flight_compares_configs_up_to_name_and_runtime_keys(tmp_path):
    """check_out_folder on the full protocol's specs (later seeds at every rate of the grid): a
    run directory whose stored config differs only in its name or a runtime key (a run copied
    in under another name, as results/bench-cpu/v3/seed_from_probe12.py does) passes; one that
    differs in a training key is refused, whichever seed or rate its name has."""
    from lengen.bench.run import check_out_folder

    grid = {"copy": lr_grid("copy", "smoke")}
    first, _ = build_specs([("RoPE", ["model.posenc=rope"])], "smoke", cells=["copy"],
                           seeds=[0], lrs=grid, role="tune")
    later, _ = build_specs([("RoPE", ["model.posenc=rope"])], "smoke", cells=["copy"],
                           seeds=[1], lrs=grid)
    specs = first + later
    assert len(specs) == 2 * len(grid["copy"])
    pairs = {("RoPE", "copy")}
    target = later[-1]                               # seed 1 at a rate the grid may not choose
    cfg = resolve(target.config, check_device=False).config.to_dict()
    run_dir = tmp_path / target.name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(dict(cfg, name="elsewhere", train=dict(
        cfg["train"], threads=7))))
    check_out_folder(specs, pairs, str(tmp_path))                    # name, threads: fine
    (run_dir / "config.json").write_text(json.dumps(dict(cfg, train=dict(
        cfg["train"], steps=cfg["train"]["steps"] + 1))))
    with pytest.raises(ConfigError, match=f"{target.name} \\(different config: train.steps\\)"):
        check_out_folder(specs, pairs, str(tmp_path))


def test_estimate_names_every_cell_with_its_evaluation_and_runs(capsys):
    from lengen.bench.run import estimate_bench

    lines = []
    total = estimate_bench([("rope", ["model.posenc=rope"]), ("tra", ["model.attention=tra"])],
                           "smoke", seeds=[0, 1, 2], steps=1, log=lines.append)
    per_cell = {ln.split(":")[0].strip() for ln in lines if "per run" in ln}
    assert per_cell == {f"rope / {c}" for c in CELLS} | {
        f"tra / {c}" for c in CELLS if c not in ("bucket_sort", "reverse_string",
                                                  "even_pairs", "missing_duplicate")}
    assert all("evaluation" in ln and "x 5 runs" in ln for ln in lines if "per run" in ln)
    assert sum("n/a" in ln for ln in lines) == 4                 # TRA on the encoder cells
    assert any("(70 runs: 3 rates on seed 0 + 2 seed(s)" in ln for ln in lines) and total > 0
    lines.clear()
    estimate_bench([("rope", ["model.posenc=rope"])], "smoke", protocol="quick", steps=1,
                   cells=["copy"], log=lines.append)
    assert any("x 2 runs" in ln for ln in lines)


def test_estimate_counts_the_runs_finished_in_out_as_done(tmp_path):
    """A bench run in parts: --estimate on the folder names what is left, not the whole
    protocol. One cell fully run, then one run of it deleted: 1 run left, costed as such."""
    import shutil

    from lengen.bench.run import estimate_bench, finished_in, run_bench

    out = str(tmp_path / "bench")
    rope = ("rope", ["model.posenc=rope"])
    rows = run_bench([rope], "smoke", out, cells=["copy"], seeds=[0, 1], baselines=None,
                     log=lambda *a: None)
    assert {r["status"] for r in rows} <= {"ok", "not fitted"} and len(rows) == 4  # 3 rates + s1
    assert finished_in(out, "rope", rope[1], "copy", "smoke", [0, 1]) == 4
    assert finished_in(out, "rope", rope[1], "copy", "smoke", [0, 1, 2]) == 4   # seed 2 not run
    assert finished_in(out, "rope", ["model.posenc=alibi"], "copy", "smoke", [0, 1]) == 0

    lines = []
    total = estimate_bench([rope], "smoke", cells=["copy"], seeds=[0, 1], steps=1, out=out,
                           log=lines.append)
    assert total == 0 and any("copy: all 4 runs finished" in ln for ln in lines)
    assert any("(0 runs:" in ln and "less 4 finished" in ln for ln in lines)
    victim = next(d for d in os.listdir(out) if d.startswith("rope--copy--s1--"))
    shutil.rmtree(os.path.join(out, victim))
    lines.clear()
    total = estimate_bench([rope], "smoke", cells=["copy"], seeds=[0, 1], steps=1, out=out,
                           log=lines.append)
    assert total > 0 and any("x 1 runs (3 of 4 finished" in ln for ln in lines)
    assert any("(1 runs:" in ln and "less 3 finished" in ln for ln in lines)
