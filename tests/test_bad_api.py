"""Bad inputs to the Python API, one table (issue 30): the library holds the CLI's standard.

Each case is a call, the exception class it must raise (every one a :class:`LengenError` a caller
can catch; ``ConfigError`` is a ValueError, ``ArgumentError`` also a TypeError) and needles its
one-paragraph message must contain (the argument or key, and the fix or the valid values). ``ok``
cases run a call that must work and check its outcome (a plain dict where a config is expected,
a ``.jsonl`` corpus read as JSON Lines). The CLI's own table is ``tests/test_bad_inputs.py``.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import warnings

import pytest
import torch

import lengen
from lengen.errors import (ArgumentError, ConfigError, LengenError, LengenWarning, RunDirError)
from lengen.model import ModelConfig, Transformer

TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": {"steps": 4, "batch_size": 4, "warmup_steps": 0, "ckpt_every": 2,
                  "progress": False, "threads": 1},
        "eval": {"sequences": 8, "batch_size": 8}}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    done = str(root / "done")
    _, _, rows = lengen.train(TINY, done, quiet=True)          # a plain dict as the config
    assert rows and all(r["step"] == 4 for r in rows)
    unfinished = str(root / "unfinished")
    lengen.train(TINY, unfinished, stop_at=2, quiet=True)
    assert not os.path.exists(os.path.join(unfinished, "model.safetensors"))
    return {"root": root, "done": done, "unfinished": unfinished}


def model(**kw):
    return Transformer(ModelConfig(**dict(dict(vocab_size=8, d_model=16, n_layers=1, n_heads=2),
                                          **kw)))


CASES = []


def bad(id, fn, exc, *needles):
    """``fn(env)`` must raise ``exc`` (a LengenError) naming every needle."""
    CASES.append(pytest.param("bad", fn, (exc, needles), id=id))


def ok(id, fn):
    """``fn(env)`` must run; it asserts the correct outcome itself."""
    CASES.append(pytest.param("ok", fn, None, id=id))


def new_dir(env, name="never"):
    return os.path.join(env["root"], name)


# ---- configs: a plain dict wherever a config is expected ------------------------------------------
bad("train-dict-unknown-key", lambda env: lengen.train({"train": {"stepz": 1}}, new_dir(env)),
    ConfigError, "train.stepz", "Did you mean 'steps'")
bad("train-dict-bad-value", lambda env: lengen.train({"train": {"lr": -1}}, new_dir(env)),
    ConfigError, "train.lr must be a finite number > 0")
bad("train-config-int", lambda env: lengen.train(5, new_dir(env)), ArgumentError,
    "ExperimentConfig", "dict", "got int")
bad("train-config-list", lambda env: lengen.train(["train.steps=3"], new_dir(env)), ArgumentError,
    "ExperimentConfig", "got list")
bad("resolve-overrides-dict", lambda env: lengen.resolve({}, {"train.steps": 3}), ArgumentError,
    "overrides must be a list of 'key.path=value' strings")
bad("resolve-overrides-int-item", lambda env: lengen.resolve({}, [3]), ConfigError,
    "override 3 has no '='")
bad("transformer-dict-typo", lambda env: Transformer({"d_modle": 16}), ConfigError,
    "model.d_modle", "Did you mean 'd_model'")
bad("transformer-int", lambda env: Transformer(5), ArgumentError, "ModelConfig", "got int")
bad("transformer-experiment-config", lambda env: Transformer(lengen.resolve({}).config),
    ArgumentError, "ModelConfig", "ExperimentConfig", "cfg.model")
bad("transformer-resolved", lambda env: Transformer(lengen.resolve({})), ArgumentError,
    "ModelConfig", "got Resolved", ".config.model")


def _train_with_dict(env):
    run = new_dir(env, "from-dict")
    _, _, rows = lengen.train(dict(TINY, train=dict(TINY["train"], steps=2)), run, quiet=True)
    assert rows and json.load(open(os.path.join(run, "config.json")))["train"]["steps"] == 2


def _transformer_from_dict(env):
    m = Transformer({"vocab_size": 8, "d_model": 16, "n_layers": 1, "n_heads": 2})
    assert m(torch.tensor([[1, 2, 3]])).shape == (1, 3, 8)


ok("train-accepts-a-dict", _train_with_dict)
ok("transformer-accepts-a-dict", _transformer_from_dict)

# ---- run directories ----------------------------------------------------------------------------
bad("train-run-dir-int", lambda env: lengen.train(TINY, 5), ArgumentError, "run_dir must be a path",
    "got int 5")
bad("train-run-dir-none", lambda env: lengen.train(TINY, None), ArgumentError, "run_dir",
    "NoneType")
bad("train-run-dir-empty", lambda env: lengen.train(TINY, ""), ConfigError, "run_dir is empty")
bad("train-run-dir-bytes", lambda env: lengen.train(TINY, b"runs/x"), ArgumentError,
    "run_dir must be a path")
bad("train-resume-not-bool", lambda env: lengen.train(TINY, new_dir(env), resume="no"),
    ArgumentError, "resume must be True or False")
bad("load-run-int", lambda env: lengen.load_run(5), ArgumentError, "run_dir must be a path")
bad("load-run-empty", lambda env: lengen.load_run(""), ConfigError, "run_dir is empty")
bad("load-run-missing", lambda env: lengen.load_run(new_dir(env, "nowhere")), RunDirError,
    "does not exist")


def _evaluate_run(**kw):
    def fn(env):
        from lengen.runs import evaluate_run

        return evaluate_run(kw.pop("run_dir", env["done"]), plot=False, **kw)
    return fn


bad("evaluate-run-int-dir", _evaluate_run(run_dir=7), ArgumentError, "run_dir must be a path")
bad("evaluate-run-negative-seed", _evaluate_run(seed=-1), ConfigError,
    "seed must be an integer in [0")
bad("evaluate-run-columns-list", _evaluate_run(columns=["x"]), ConfigError,
    "columns must be a dict")
ok("load-run-path-object", lambda env: lengen.load_run(pathlib.Path(env["done"])))


def _eval_rows_carry_step(env):
    rows = _evaluate_run(out="again")(env)
    assert rows and all(r["step"] == 4 for r in rows), rows[0]
    stored = json.load(open(os.path.join(env["done"], "again.json")))
    assert all(r["step"] == 4 for r in stored)


def _unfinished_run_warns(env):
    with pytest.warns(LengenWarning, match=r"has not finished training: using its checkpoint at "
                                           r"step 2 of train.steps=4"):
        rows = _evaluate_run(run_dir=env["unfinished"], out="partial")(env)
    assert all(r["step"] == 2 for r in rows)


def _finished_run_does_not_warn(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LengenWarning)
        lengen.load_run(env["done"])


ok("eval-rows-carry-step", _eval_rows_carry_step)
ok("eval-unfinished-run-warns", _unfinished_run_warns)
ok("load-finished-run-no-warning", _finished_run_does_not_warn)

# ---- model.vocab_size: never replaced silently ---------------------------------------------------
bad("vocab-below-task", lambda env: lengen.resolve({"model": {"vocab_size": 3}}), ConfigError,
    "model.vocab_size=3", "task 'flipflop' (5 tokens", "Leave model.vocab_size out")
bad("vocab-below-task-override", lambda env: lengen.resolve(
    {"task": {"name": "addition"}}, ["model.vocab_size=4"]), ConfigError, "model.vocab_size=4",
    "'addition'")


def _vocab_from_task(env):
    cfg = lengen.resolve({"task": {"name": "addition"}}).config
    task = lengen.build_task("addition")
    assert cfg.model.vocab_size == task.vocab_size > 8        # unset: taken from the task
    again = lengen.resolve(cfg.to_dict()).config                     # a stored config reloads as is
    assert again.model.vocab_size == task.vocab_size


def _vocab_above_task_kept(env):
    assert lengen.resolve({"model": {"vocab_size": 100}}).config.model.vocab_size == 100


ok("vocab-unset-follows-task", _vocab_from_task)
ok("vocab-above-task-kept", _vocab_above_task_kept)

# ---- seeds --------------------------------------------------------------------------------------
for key in ("train.seed", "train.data_seed", "eval.seed"):
    section, name = key.split(".")
    bad(f"negative-{key}", lambda env, s=section, n=name: lengen.resolve({s: {n: -1}}),
        ConfigError, f"{key} must be an integer in [0")
bad("negative-task-dataset-seed", lambda env: lengen.resolve(
    {"task": {"name": "copy", "kwargs": {"dataset_seed": -3}}, "model": {"causal": True}}),
    ConfigError, "task.kwargs.dataset_seed must be an integer in [0")
bad("build-task-negative-seed", lambda env: lengen.build_task("copy", dataset_seed=-1),
    ConfigError, "task.kwargs.dataset_seed")
bad("build-task-typo", lambda env: lengen.build_task("copy", min_lenght=3), ConfigError,
    "unknown key 'min_lenght' in task.kwargs", "Did you mean 'min_length'")
bad("build-task-unknown", lambda env: lengen.build_task("cpy"), ConfigError,
    "unknown task 'cpy'", "Did you mean 'copy'")

# ---- Transformer(ModelConfig): the config file's checks -----------------------------------------
bad("transformer-attention-kwarg", lambda env: Transformer(ModelConfig(attention_kwargs={"foo": 1})),
    ConfigError, "unknown key 'foo' in model.attention_kwargs", "Valid keys:")
bad("transformer-posenc-kwarg-typo", lambda env: model(posenc="rope", posenc_kwargs={"bsae": 10}),
    ConfigError, "'bsae'", "Did you mean 'base'")
bad("transformer-posenc-framework-key", lambda env: model(posenc="rope",
                                                         posenc_kwargs={"d_model": 8}),
    ConfigError, "model.posenc_kwargs.d_model cannot be set", "model.d_model")
bad("transformer-sampler-kwarg-type", lambda env: model(positions="randomized",
                                                       positions_kwargs={"max_length": "x"}),
    ConfigError, "model.positions_kwargs.max_length must be an integer")
bad("transformer-unknown-posenc", lambda env: model(posenc="ropee"), ConfigError,
    "unknown positional scheme 'ropee'", "Did you mean 'rope'")


def _mutated_config(env):
    cfg = ModelConfig(vocab_size=8, d_model=16, n_layers=1, n_heads=2)
    cfg.n_heads = 3                                           # set after the config was checked
    Transformer(cfg)


bad("transformer-revalidates", _mutated_config, ConfigError, "model.d_model=16",
    "divisible by model.n_heads=3")
bad("transformer-needs-task-ids", lambda env: model(vocab_size=20, positions="coupling"),
    ConfigError, "position sampler 'coupling'", "digit_ids is not set")
bad("modelconfig-vocab-none", lambda env: ModelConfig(vocab_size=None), ConfigError,
    "model.vocab_size must be an integer >= 1")

# ---- forward: token ids and positions -----------------------------------------------------------
bad("forward-id-above-vocab", lambda env: model()(torch.tensor([[1, 99]])), ConfigError,
    "token id 99", "vocabulary [0, 8)", "model.vocab_size=8")
bad("forward-negative-id", lambda env: model()(torch.tensor([[1, -1]])), ConfigError,
    "token id -1")
bad("forward-float-tokens", lambda env: model()(torch.tensor([[1.0, 2.0]])), ConfigError,
    "integer token ids", "float32")
bad("forward-1d-tokens", lambda env: model()(torch.tensor([1, 2])), ConfigError,
    "tokens must be [B, T]", "tokens[None]")
bad("forward-list-tokens", lambda env: model()([[1, 2]]), ArgumentError,
    "tokens must be a [B, T] tensor", "got list")
bad("forward-nan-position", lambda env: model()(torch.tensor([[1, 2]]),
                                                torch.tensor([0.0, math.nan])),
    ConfigError, "positions must be finite", "nan")
bad("forward-inf-position", lambda env: model()(torch.tensor([[1, 2]]),
                                                torch.tensor([[0.0, math.inf]])),
    ConfigError, "positions must be finite", "inf")
bad("forward-positions-shape", lambda env: model()(torch.tensor([[1, 2]]), torch.arange(3)),
    ConfigError, "positions must be [T] = [2]")
bad("forward-positions-list", lambda env: model()(torch.tensor([[1, 2]]), [0, 1]),
    ArgumentError, "positions must be a tensor")
bad("forward-bool-positions", lambda env: model()(torch.tensor([[1, 2]]),
                                                  torch.tensor([True, False])),
    ConfigError, "positions must be real numbers")


def _forward_ok(env):
    m = model()
    out = m(torch.tensor([[0, 7]]), torch.tensor([0, 5]))     # ids at both ends, int positions
    assert out.shape == (1, 2, 8) and torch.isfinite(out).all()


ok("forward-edge-ids-ok", _forward_ok)

# ---- generation ---------------------------------------------------------------------------------
P = [torch.tensor([1, 2])]
bad("generate-id-above-vocab", lambda env: model().generate([torch.tensor([1, 99])], 3),
    ConfigError, "token id 99", "vocabulary [0, 8)")
bad("generate-zero-tokens", lambda env: model().generate(P, 0), ConfigError,
    "max_new_tokens must be a positive int")
bad("generate-float-tokens", lambda env: model().generate(P, 2.0), ArgumentError,
    "max_new_tokens must be a positive int")
bad("generate-temperature-text", lambda env: model().generate(P, 2, temperature="hot"),
    ArgumentError, "temperature must be a number")
bad("generate-temperature-nan", lambda env: model().generate(P, 2, temperature=math.nan),
    ConfigError, "temperature must be >= 0 (0 = greedy) and finite")
bad("generate-temperature-negative", lambda env: model().generate(P, 2, temperature=-1),
    ConfigError, "temperature must be >= 0 (0 = greedy) and finite")
bad("generate-top-k-zero", lambda env: model().generate(P, 2, temperature=1.0, top_k=0),
    ConfigError, "top_k must be in 1..8")
bad("generate-top-k-text", lambda env: model().generate(P, 2, temperature=1.0, top_k="3"),
    ArgumentError, "top_k must be an int")
bad("generate-eos-outside", lambda env: model().generate(P, 2, eos_id=99), ConfigError,
    "eos_id=99 is outside the vocabulary")
bad("generate-eos-text", lambda env: model().generate(P, 2, eos_id="<eos>"), ArgumentError,
    "eos_id must be an int")
bad("generate-prompt-string", lambda env: model().generate("12", 2), ConfigError,
    "prompts must be a list of 1-D LongTensors")
bad("generate-no-prompts", lambda env: model().generate([], 2), ConfigError, "no prompts given")
bad("generate-empty-prompt", lambda env: model().generate([torch.tensor([], dtype=torch.long)], 2),
    ConfigError, "prompt 0 is empty")
bad("generate-float-prompt", lambda env: model().generate([torch.tensor([1.0, 2.0])], 2),
    ConfigError, "prompt 0 must hold integer token ids")
bad("generate-nan-positions", lambda env: model().generate(
    P, 2, positions=torch.tensor([0.0, 1.0, math.nan, 3.0])), ConfigError, "positions must be finite")
bad("generate-generator-int", lambda env: model().generate(P, 2, temperature=1.0, generator=3),
    ArgumentError, "generator must be a torch.Generator")
bad("generate-not-a-model", lambda env: __import__("lengen.model.generate", fromlist=["x"])
    .generate(torch.nn.Linear(2, 2), P, 2), ArgumentError, "generate needs a lengen Transformer")
bad("generate-learned-table-too-short", lambda env: model(
    posenc="learned", posenc_kwargs={"max_positions": 4}).generate(P, 8), ConfigError,
    "cannot generate 8 tokens after prompts of up to 2")

# ---- evaluate -------------------------------------------------------------------------------------


def _evaluate(**kw):
    def fn(env):
        cfg, task, m = lengen.load_run(env["done"])
        args = dict(model=m, task=task, splits=["iid"], n_sequences=4, batch_size=4)
        args.update(kw)
        lengen.evaluate(args.pop("model"), args.pop("task"), args.pop("splits"), **args)
    return fn


bad("evaluate-negative-seed", _evaluate(seed=-1), ArgumentError,
    "evaluation seed must be an integer >= 0")
bad("evaluate-bad-split", _evaluate(splits=["iid", "idd"]), ConfigError, "unknown split 'idd'",
    "Did you mean 'iid'")
bad("evaluate-no-splits", _evaluate(splits=[]), ConfigError, "no splits given")
bad("evaluate-model-none", _evaluate(model=None), ArgumentError, "evaluate needs a model")
bad("evaluate-task-string", _evaluate(task="flipflop"), ArgumentError, "evaluate needs a task",
    "build_task")

# ---- sweeps -------------------------------------------------------------------------------------


def _sweep(**kw):
    def fn(env):
        from lengen.sweep import run_sweep

        args = dict(runs={"a": TINY}, out_dir=new_dir(env, "sweep"), log=None)
        args.update(kw)
        run_sweep(args.pop("runs"), args.pop("out_dir"), **args)
    return fn


bad("sweep-workers-negative", _sweep(workers=-1), ConfigError, "workers must be an integer >= 1",
    "got -1")
bad("sweep-workers-zero", _sweep(workers=0), ConfigError, "workers must be an integer >= 1")
bad("sweep-workers-float", _sweep(workers=1.5), ArgumentError, "workers must be an integer >= 1")
bad("sweep-threads-negative", _sweep(threads=-2), ConfigError, "threads must be None")
bad("sweep-backend-unknown", _sweep(backend="slurm"), ConfigError, "unknown sweep backend 'slurm'",
    "local, ray")
bad("sweep-out-dir-empty", _sweep(out_dir=""), ConfigError, "out_dir is empty")
bad("sweep-out-dir-int", _sweep(out_dir=3), ArgumentError, "out_dir must be a path")
bad("sweep-runs-string", _sweep(runs="a"), ArgumentError, "a sweep's runs must be a Grid")
bad("sweep-runs-items", _sweep(runs=[5]), ArgumentError, "got an item of type int")
bad("sweep-config-typo", _sweep(runs={"a": {"train": {"setps": 2}}}), ConfigError, "train.setps")
bad("sweep-default-threads-zero", lambda env: __import__("lengen.sweep", fromlist=["x"])
    .default_threads(0), ConfigError, "workers must be an integer >= 1")


def _grid(**kw):
    def fn(env):
        from lengen.sweep import Grid

        Grid(**kw).specs()
    return fn


bad("grid-empty-axis", _grid(axes={"train.seed": []}), ConfigError, "grid axis 'train.seed' is empty")
bad("grid-base-list", _grid(base=[1]), ArgumentError, "Grid base must be a config dict")
bad("grid-template-unknown-tag", _grid(axes={"train.seed": [0, 1]}, name="s{sed}"), ConfigError,
    "'s{sed}'", "'seed'")
bad("grid-axis-string", _grid(axes={"train.seed": "012"}), ConfigError,
    "must be a list of values")

# ---- analysis helpers ---------------------------------------------------------------------------
ROWS = [{"run": "a", "split": "iid", "metric": "seq_acc", "value": 1.0, "seed": 0},
        {"run": "a", "split": "iid", "metric": "nll", "value": 0.1, "seed": 0}]


def _summarize(rows=ROWS, **kw):
    def fn(env):
        from lengen.analysis.tables import summarize

        return summarize(rows, **kw)
    return fn


bad("summarize-unknown-metric", _summarize(metric="acc"), ConfigError, "no rows of metric 'acc'",
    "nll, seq_acc")
bad("summarize-unknown-column", _summarize(by=("model", "split")), ConfigError,
    "no column(s) 'model'", "run, split")
bad("summarize-rows-dict", _summarize(rows={"run": "a"}), ArgumentError,
    "rows must be a list of row dicts")
bad("summarize-row-not-dict", _summarize(rows=[1, 2]), ArgumentError, "rows must be dicts")
bad("summarize-scale-nan", _summarize(scale=math.nan), ConfigError, "scale must be a finite")


def _pivot_unknown_column(env):
    from lengen.analysis.tables import pivot_cells, summarize

    pivot_cells(summarize(ROWS), index="model", columns="split")


bad("pivot-unknown-column", _pivot_unknown_column, ConfigError, "no column(s) 'model'")


def _curve_points(**kw):
    def fn(env):
        from lengen.analysis.length_curves import curve_points

        rows = [dict(ROWS[0], split="len=5"), dict(ROWS[0], split="len=9", value=0.0)]
        return curve_points(rows, **dict(dict(metric="seq_acc"), **kw))
    return fn


bad("curve-points-unknown-column", _curve_points(by=("model",)), ConfigError,
    "no column(s) 'model'")
bad("curve-points-unknown-metric", _curve_points(metric="token_acc"), ConfigError,
    "no rows of metric 'token_acc'")
bad("perplexity-curves-unknown-metric", lambda env: __import__(
    "lengen.analysis.perplexity_plot", fromlist=["x"]).perplexity_curves(ROWS, metric="ppl"),
    ConfigError, "no rows of metric 'ppl'", "nll, seq_acc")


def _summarize_ok(env):
    one = _summarize(by="split")(env)                          # a bare column name
    assert list(one["split"]) == ["iid"] and one["mean"][0] == 1.0
    failed = [{"run": "b", "status": "failed", "metric": None, "value": None}]
    assert _summarize(rows=failed)(env).empty                  # no finished run: an empty table


ok("summarize-bare-column-and-no-finished-run", _summarize_ok)

# ---- text corpora: JSON Lines read as JSON Lines ------------------------------------------------


def _corpus_file(env, name, text):
    path = os.path.join(env["root"], name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _jsonl_read(env):
    from lengen.data.corpus import read_lines

    path = _corpus_file(env, "c.jsonl", '{"text": "In the beginning"}\n\n'
                                        '{"text": "two\\nlines", "id": 3}\n{"text": ""}\n')
    lines = [line for _, _, line in read_lines(path)]
    assert lines == ["In the beginning\n", "two\n", "lines\n", "\n"], lines
    assert not any("{" in line or '"' in line for line in lines)


ok("corpus-jsonl-text-field", _jsonl_read)


def _read(name, text):
    def fn(env):
        from lengen.data.corpus import read_lines

        list(read_lines(_corpus_file(env, name, text)))
    return fn


bad("corpus-jsonl-not-json", _read("bad.jsonl", '{"text": "a"}\nplain text\n'), ConfigError,
    "bad.jsonl: line 2 is not valid JSON", '"text"')
bad("corpus-jsonl-no-text", _read("notext.jsonl", '{"body": "a"}\n'), ConfigError,
    "notext.jsonl: line 1 has no string 'text' field", "['body']")
bad("corpus-json-refused", _read("c.json", '[{"text": "a"}]\n'), ConfigError,
    "a .json file is not a corpus format", ".jsonl")


# ---- the runner ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,fn,expect", CASES)
def test_bad_api(kind, fn, expect, env):
    if kind == "ok":
        fn(env)
        return
    exc, needles = expect
    assert issubclass(exc, LengenError)
    with pytest.raises(exc) as info:
        fn(env)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_the_table_is_big_enough():
    assert sum(c.values[0] == "bad" for c in CASES) >= 40, len(CASES)


def test_error_classes_catch_as_the_builtins():
    """Old code that caught ValueError / TypeError for bad arguments keeps working."""
    assert issubclass(ConfigError, ValueError) and issubclass(ArgumentError, ConfigError)
    assert issubclass(ArgumentError, TypeError)


# ---- the last helpers: attention maps, a sweep's run_one, the addition error summary ----------
def _attention(split="iid", **kw):
    def call(env):
        from lengen.analysis.heatmap import attention_map

        return attention_map(env["done"], split, **kw)
    return call


def _run_one(out_dir):
    def call(env):
        from lengen.sweep.local import run_one

        return run_one({"name": "x", "config": TINY}, out_dir)
    return call


def _addition_summary(records):
    def call(env):
        from lengen.eval.addition_errors import summarize

        return summarize(records)
    return call


bad("attention-layer-out-of-range", _attention(layer=5), ConfigError, "layer 5 out of range",
    "give 0 .. 0")
bad("attention-index-out-of-range", _attention(index=99), ConfigError, "index 99 out of range")
bad("attention-layer-not-int", _attention(layer="last"), ConfigError, "layer")
bad("attention-bad-split", _attention(split="spars"), ConfigError, "split", "sparse")
bad("run-one-out-dir-int", _run_one(7), ArgumentError, "out_dir must be a folder path")
bad("addition-summary-not-records", _addition_summary([{"n_digits": 2}]), ArgumentError, "records[0]",
    "lacks carry")
