"""lengen sweep (lengen.bench.seeds): axes parsed from overrides, one run per arm x seed with
the seed as init and data order, the table's statistics on constructed rows (fit rule, lower-is-
better metrics, verdicts), and a tiny sweep end to end from the CLI."""
from __future__ import annotations

import csv

import pytest

from lengen.bench import seeds
from lengen.cli import main
from lengen.errors import ConfigError


def test_axes_split_only_at_top_level_commas():
    assert seeds.split_top_level("rope,alibi") == ["rope", "alibi"]
    assert seeds.split_top_level("[1, 2]") == ["[1, 2]"]
    assert seeds.split_top_level("{a: 1, b: 2},{a: 3}") == ["{a: 1, b: 2}", "{a: 3}"]
    assert seeds.split_top_level("'x,y',z") == ["'x,y'", "z"]
    fixed, axes = seeds.parse_axes(["task.name=copy", "model.posenc=rope,alibi",
                                    "eval.splits=[len=2, len=5]", "train.lr=1e-3,2e-3"])
    assert fixed == ["task.name=copy", "eval.splits=[len=2, len=5]"]
    assert axes == {"model.posenc": ["rope", "alibi"], "train.lr": ["1e-3", "2e-3"]}
    with pytest.raises(ConfigError, match="empty value"):
        seeds.parse_axes(["model.posenc=rope,"])
    with pytest.raises(ConfigError, match="has no '='"):
        seeds.parse_axes(["model.posenc"])


def test_specs_are_arms_times_seeds():
    specs, by_arm = seeds.build_specs({}, ["task.name=copy", "model.posenc=rope,alibi",
                                           "train.lr=1e-3,2e-3"], [0, 3])
    assert list(by_arm) == ["posenc=rope lr=1e-3", "posenc=rope lr=2e-3",
                            "posenc=alibi lr=1e-3", "posenc=alibi lr=2e-3"]
    assert len(specs) == 8 and len({s.name for s in specs}) == 8
    assert {(s.config["train"]["seed"], s.config["train"]["data_seed"]) for s in specs} == {
        (0, 0), (3, 3)}
    assert all(s.config["task"]["name"] == "copy" for s in specs)
    with pytest.raises(ConfigError, match="distinct"):
        seeds.build_specs({}, [], [1, 1])


def _rows(run, values, metric="seq_acc"):
    return [{"run": run, "split": sp, "metric": metric, "value": v} for sp, v in values.items()]


def test_summary_fit_rule_intervals_and_verdicts():
    specs, by_arm = seeds.build_specs({}, ["task.name=copy", "model.posenc=rope,alibi"],
                                      [0, 1, 2])
    # copy's max_train_length is 20: len=5 is in-distribution, len=25 and len=30 are not
    rows = []
    for s, (ood, iid) in zip(specs, [(0.8, 1.0), (0.9, 1.0), (0.1, 0.5),       # rope
                                     (0.1, 1.0), (0.2, 1.0), (0.15, 0.95)]):   # alibi
        rows += _rows(s.name, {"len=5": iid, "len=25": ood, "len=30": ood})
    summ = seeds.summarize(rows, specs, by_arm)
    rope, alibi = summ["arms"]
    assert (rope["fit_k"], rope["fit_n"]) == (2, 3) and (alibi["fit_k"], alibi["fit_n"]) == (3, 3)
    assert rope["ood_mean"] == pytest.approx(0.85)           # the unfitted seed is left out
    assert (rope["ood_lo"], rope["ood_hi"]) == (0.8, 0.9)
    assert rope["id_mean_all"] == pytest.approx(2.5 / 3)
    assert summ["pairs"][0]["sentence"].startswith("posenc=rope beats posenc=alibi on OOD")
    md = seeds.render(summ)
    assert "| posenc=rope | 2/3 | 83.3 | 85.0 [80.0, 90.0] |" in md
    # a stricter threshold: nobody fits, nothing is judged
    summ = seeds.summarize(rows, specs, by_arm, fit_threshold=1.01)
    assert summ["pairs"][0]["verdict"] == "untested"
    # perplexity: lower is better, fitted = finite
    prow = []
    for s, v in zip(specs, [10, 11, 12, 20, 21, 22]):
        prow += _rows(s.name, {"len=25": v}, "ppl")
    summ = seeds.summarize(prow, specs, by_arm, metric="ppl")
    assert summ["pairs"][0]["sentence"].startswith("posenc=rope beats posenc=alibi")


def test_sweep_from_the_cli(tmp_path, capsys):
    out = tmp_path / "sw"
    args = ["sweep", "task.name=copy", "model.posenc=rope,alibi", "train.steps=3",
            "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "eval.sequences=4",
            "eval.batch_size=4", "eval.splits=[len=2, len=25]", "train.threads=1",
            "--seeds", "0", "1", "--out", str(out), "--fit-threshold", "0"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "| posenc=rope | 2/2 |" in text and "| posenc=alibi | 2/2 |" in text
    rows = list(csv.DictReader(open(out / "table.csv")))
    assert {(r["arm"], r["split"]) for r in rows} >= {("posenc=rope", "len=25"),
                                                      ("posenc=alibi", "OOD")}
    assert (out / "table.md").read_text().startswith("Metric seq_acc")
