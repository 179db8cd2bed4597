"""The command line: help everywhere, clear errors, train -> eval round trip, config files."""
from __future__ import annotations

import json
import os

import pytest

import lengen
from lengen.cli import build_parser, main


def test_every_command_and_flag_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.dest != "help":
                assert action.help, f"lengen {name}: {action.dest} has no --help text"


def test_unknown_names_list_the_valid_ones(capsys):
    assert main(["train", "model.posenc=rop", "train.progress=false"]) == 2
    err = capsys.readouterr().err
    assert "unknown positional scheme 'rop'" in err
    assert all(name in err for name in lengen.POSENCS)
    assert main(["train", "model.attention=flash"]) == 2
    err = capsys.readouterr().err
    assert "unknown attention kind 'flash'" in err
    assert all(name in err for name in lengen.ATTENTIONS)
    assert main(["train", "train.stepz=3"]) == 2
    assert "unknown config key(s) train.stepz" in capsys.readouterr().err


def test_config_file_plus_overrides(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model:\n  attention: fot\n  d_model: 16\ntrain:\n  steps: 7\n")
    from lengen.config import load_config_file, resolve

    cfg = resolve(load_config_file(str(cfg_file)), ["train.steps=3", "model.attention_kwargs={gate_bias_init: 2.0}"]).config
    assert (cfg.model.attention, cfg.model.d_model, cfg.train.steps) == ("fot", 16, 3)
    assert cfg.model.attention_kwargs == {"gate_bias_init": 2.0}


def test_train_then_eval_writes_rows(tmp_path, capsys):
    run = str(tmp_path / "run")
    args = ["train", "--run-dir", run, "model.d_model=16", "model.n_layers=1", "model.n_heads=2",
            "task.kwargs.n_pairs=8", "train.steps=3", "train.batch_size=4", "train.progress=false",
            "eval.sequences=8"]
    assert main(args) == 0
    assert main(["eval", run, "--splits", "sparse", "dense", "--sequences", "10", "--out", "ood"]) == 0
    rows = json.load(open(os.path.join(run, "ood.json")))
    assert {r["split"] for r in rows} == {"sparse", "dense"}
    assert {r["metric"] for r in rows} == {"seq_acc", "token_acc", "glitch_rate", "nll"}
    assert all(r["sequences"] == 10 for r in rows)
    assert open(os.path.join(run, "ood.csv")).readline().startswith("run,")
    assert main(["eval", run, "--splits", "medium"]) == 2
    assert "Valid splits: iid, sparse, dense" in capsys.readouterr().err


def test_eval_reproduces_training_eval(tmp_path):
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "attention": "tra"},
                          "task": {"kwargs": {"n_pairs": 8}},
                          "train": {"steps": 3, "batch_size": 4, "progress": False},
                          "eval": {"sequences": 20}})
    _, _, rows = lengen.train(cfg, str(tmp_path))
    _, task, model = lengen.load_run(str(tmp_path))
    again = lengen.evaluate(model, task, ["iid", "sparse", "dense"], n_sequences=20, batch_size=64)
    assert [r["value"] for r in rows] == pytest.approx([r["value"] for r in again])


def test_evaluate_run_with_another_position_sampler(tmp_path):
    """A run trained on positions 0..T-1 evaluated with another sampler (no weights change):
    rows name the sampler, the run's own eval.json is kept, the numbers are those of the same
    weights under the new positions, and a bad sampler or kwarg fails before any evaluation."""
    from lengen.errors import ConfigError
    from lengen.runs import evaluate_run
    from lengen.samplers import RandomizedSampler

    run = str(tmp_path / "run")
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "posenc": "rope"},
                          "task": {"kwargs": {"n_pairs": 8}},
                          "train": {"steps": 3, "batch_size": 4, "progress": False},
                          "eval": {"sequences": 16, "splits": ["iid"]}})
    _, _, own = lengen.train(cfg, run)
    rows = evaluate_run(run, positions="randomized", positions_kwargs={"max_length": 64},
                        out="rand", plot=False)
    assert {r["positions"] for r in rows} == {"randomized"}
    assert json.load(open(os.path.join(run, "eval.json"))) == own          # untouched
    _, task, model = lengen.load_run(run)
    model.sampler = RandomizedSampler(max_length=64)
    want = lengen.evaluate(model, task, ["iid"], n_sequences=16, batch_size=64)
    assert [r["value"] for r in rows] == pytest.approx([r["value"] for r in want])
    assert [r["value"] for r in rows] != pytest.approx([r["value"] for r in own])
    with pytest.raises(ConfigError, match="unknown position sampler 'warped'"):
        evaluate_run(run, positions="warped", out="x")
    with pytest.raises(ConfigError, match="unknown key 'max_len' in positions_kwargs"):
        evaluate_run(run, positions="randomized", positions_kwargs={"max_len": 8}, out="x")
    assert not os.path.exists(os.path.join(run, "x.json"))


def test_eval_with_interpolation_fills_the_training_length_from_the_task(tmp_path, capsys):
    """``lengen eval RUN --positions interpolate`` on a RoPE run trained on positions 0..T-1:
    M (the longest training input) comes from the run's task as in training (it used to be left
    out, so the sampler failed), rows equal the sampler built by hand, and bad kwargs fail early."""
    from lengen.runs import evaluate_run
    from lengen.samplers.interpolate import InterpolateSampler
    from lengen.tasks.base import task_train_length

    run = str(tmp_path / "run")
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "posenc": "rope"},
                          "task": {"name": "copy", "kwargs": {"min_length": 2,
                                                             "max_train_length": 4,
                                                             "max_eval_length": 12}},
                          "train": {"steps": 3, "batch_size": 4, "progress": False},
                          "eval": {"sequences": 8, "splits": ["len=4", "len=12"]}})
    lengen.train(cfg, run)
    assert main(["eval", run, "--positions", "interpolate", "--out", "pi"]) == 0
    rows = json.load(open(os.path.join(run, "pi.json")))
    assert {r["positions"] for r in rows} == {"interpolate"}
    _, task, model = lengen.load_run(run)
    M = task_train_length(task)
    assert M == task.max_input_length(["len=4"])
    model.sampler = InterpolateSampler(train_length=M)
    want = lengen.evaluate(model, task, ["len=4", "len=12"], n_sequences=8, batch_size=64)
    assert [r["value"] for r in rows] == pytest.approx([r["value"] for r in want])
    fixed = evaluate_run(run, positions="interpolate", positions_kwargs={"factor": 3.0},
                         out="pi3", plot=False)
    assert {r["positions"] for r in fixed} == {"interpolate"}
    capsys.readouterr()
    assert main(["eval", run, "--positions", "interpolate", "--positions-kwargs", "[2]"]) == 2
    assert "expected a JSON object" in capsys.readouterr().err
    assert main(["eval", run, "--positions", "interpolate", "--positions-kwargs",
                 '{"factr": 2}', "--out", "bad"]) == 2
    assert "unknown key 'factr' in positions_kwargs" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(run, "bad.json"))


def test_scalar_overrides_are_coerced_to_field_types():
    from lengen.config import resolve

    cfg = resolve({}, ["train.lr=3e-3", "train.steps=1e3", "model.dropout=0"]).config
    assert cfg.train.lr == 0.003 and cfg.train.steps == 1000 and isinstance(cfg.train.steps, int)
    with pytest.raises(ValueError, match="train.steps must be an integer >= 1, got 2.5"):
        resolve({}, ["train.steps=2.5"])
    with pytest.raises(ValueError, match="train.lr must be a finite number > 0, got 'fast'"):
        resolve({}, ["train.lr=fast"])


def test_a_new_recipe_is_one_registry_line(monkeypatch, capsys):
    """``lengen reproduce`` is built from lengen.recipes.RECIPES: a module with add_arguments/run
    and a docstring becomes a subcommand with its own flags and --help, no cli.py change."""
    import sys
    import types

    import lengen.cli as cli

    mod = types.ModuleType("fake_recipe")
    mod.__doc__ = "Fake paper: one table.\n\nLonger description of the fake recipe."
    mod.add_arguments = lambda p: p.add_argument("--knob", type=int, default=1, help="a knob")
    mod.run = lambda args: print(f"ran with knob {args.knob}") or 0
    monkeypatch.setitem(sys.modules, "fake_recipe", mod)
    monkeypatch.setitem(cli.RECIPES, "fake", "fake_recipe")
    assert cli.main(["reproduce", "fake", "--knob", "3"]) == 0
    assert "ran with knob 3" in capsys.readouterr().out
    assert cli.main(["reproduce", "--help"]) == 0
    assert "fake" in capsys.readouterr().out
    assert cli.main(["reproduce", "fake", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Longer description of the fake recipe." in out and "--knob" in out


def test_plot_activations_cli(tmp_path, capsys):
    import lengen
    from lengen.model.presets import preset

    run = str(tmp_path / "rev")
    cfg = preset("ruoss2023-encoder", posenc="xl")
    cfg["model"].update(n_layers=1, d_model=16, n_heads=2, d_ff=32)
    cfg["task"] = {"name": "reverse_string", "kwargs": {"max_train_length": 6,
                                                         "max_eval_length": 20}}
    cfg["train"].update(steps=2, batch_size=4, progress=False)
    cfg["eval"] = {"splits": ["len=7"], "sequences": 4, "batch_size": 4}
    lengen.train(lengen.resolve(cfg), run, quiet=True)
    out = str(tmp_path / "pca.png")
    assert main(["plot", "activations", run, "--lengths", "6", "15", "--n", "3",
                 "--out", out]) == 0
    text = capsys.readouterr().out
    assert "shift of the longest length: emb" in text and f"wrote {out}" in text
    assert main(["plot", "activations", run, "--lengths", "0"]) == 2
