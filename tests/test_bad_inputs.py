"""Bad and adversarial inputs, one table (issue 9): each gets a clear error or correct behaviour.

A *clear error* is exit status 2 from ``lengen.cli.main`` with no traceback, whose last stderr
line starts with ``lengen: error:`` (or argparse's ``error:``) and names the culprit (the key,
flag or file: the ``needles``); for library calls, the expected exception type with the
needles in its message. *Correct behaviour* cases run and check the outcome. Tokens in argv:
``<run>`` a copy of a tiny trained run (per case), ``<f>`` the folder of prepared files.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import lengen
from lengen.cli import main
from lengen.errors import ConfigError, RunDirError

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "task.kwargs.n_pairs=6",
        "train.steps=4", "train.batch_size=4", "train.warmup_steps=0", "train.ckpt_every=2",
        "train.log_every=1", "train.progress=false", "eval.sequences=8", "eval.batch_size=8"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    f = root / "files"
    f.mkdir()
    (f / "bad.yaml").write_text("train:\n  steps: 3\n lr: [\n")
    (f / "bad.json").write_text('{\n  "train": {\n    "steps": 3,\n  }\n}\n')
    (f / "bin.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (f / "list.yaml").write_text("- model\n- train\n")
    (f / "scalar.yaml").write_text("5\n")
    (f / "dup.yaml").write_text("train:\n  steps: 3\ntrain:\n  lr: 0.1\n")
    (f / "dup.json").write_text('{"train": {"steps": 3, "steps": 4}}')
    (f / "empty.yaml").write_text("")
    (f / "modle.yaml").write_text("modle:\n  d_model: 16\n")
    (f / "steps0.yaml").write_text("train:\n  steps: 0\n")
    (f / "adir").mkdir()
    (f / "afile").write_text("not a directory\n")
    (f / "bin.txt").write_bytes(bytes(range(256)) * 4)
    (f / "malformed.txt").write_text("w1r1\nw1r0\n")
    (f / "ok.txt").write_text("w1i0r1\nw0r0r0\n")
    (f / "norun").mkdir()
    os.mkfifo(f / "fifo.yaml")                      # a never-ending file: no writer ever comes
    (f / "huge.yaml").write_text("# " + "x" * (1 << 20) + "\n")
    run = str(root / "run")
    assert main(["train", "--run-dir", run, *TINY]) == 0
    copy = str(root / "copy")                       # a decoder sequence task, for generate
    assert main(["train", "--run-dir", copy, "task.name=copy", *TINY[:3], *TINY[4:]]) == 0
    return {"root": root, "files": str(f), "run": run, "copy": copy}


def copy_run(env, tmp_path) -> str:
    dst = str(tmp_path / "run")
    shutil.copytree(env["run"], dst)
    return dst


def subst(args, env, run):
    return [a.replace("<run>", run or "").replace("<f>", env["files"])
            .replace("<copy>", env["copy"]) for a in args]


# ---- case constructors -------------------------------------------------------------------------
CASES = []


def cli(id, argv, *needles, setup=None):
    """``lengen ARGV`` must fail clearly (exit 2) naming every needle."""
    CASES.append(pytest.param("cli", argv, needles, setup, id=id))


def cli_ok(id, argv, check=None, setup=None):
    """``lengen ARGV`` must succeed, then ``check(env, run, stdout, stderr)`` must hold."""
    CASES.append(pytest.param("cli_ok", argv, check, setup, id=id))


def lib(id, fn, exc, *needles):
    """``fn(env)`` must raise ``exc`` whose message contains every needle."""
    CASES.append(pytest.param("lib", fn, (exc, needles), None, id=id))


def lib_ok(id, fn):
    """``fn(env)`` must run; it asserts the correct behaviour itself."""
    CASES.append(pytest.param("lib_ok", fn, None, None, id=id))


def tr(id, overrides, *needles):
    """``lengen train OVERRIDES`` fails validation (before any file is written)."""
    cli(id, ["train", "--run-dir", "<run>/never", *overrides], *needles)


# ---- 1. keyword arguments of registry entries --------------------------------------------------
tr("kw-task-typo", ["task.kwargs.n_pair=8"], "unknown key 'n_pair' in task.kwargs",
   "Did you mean 'n_pairs'", "Valid keys: data_files, eval_n_pairs")
tr("kw-attn-typo", ["model.attention=tra", "model.attention_kwargs.qk_nrom=true"],
   "'qk_nrom'", "model.attention_kwargs", "Did you mean 'qk_norm'")
tr("kw-posenc-typo", ["model.posenc=rope", "model.posenc_kwargs.bsae=500"], "'bsae'",
   "Did you mean 'base'")
tr("kw-sampler-typo", ["model.positions=randomized", "model.positions_kwargs.max_lenn=64"],
   "'max_lenn'", "Did you mean 'max_length'")
tr("kw-identity-takes-none", ["model.positions_kwargs.max_length=64"],
   "takes no arguments")
tr("kw-chomsky-typo", ["task.name=reverse_string", "model.causal=false",
                       "task.kwargs.n_symbol=3"], "Did you mean 'n_symbols'",
   "max_eval_length, max_train_length, n_symbols")
tr("kw-even-pairs-no-symbols", ["task.name=even_pairs", "model.causal=false",
                                "task.kwargs.n_symbols=3"], "'n_symbols'",
   "Valid keys: max_eval_length, max_train_length")
tr("kw-not-dict-int", ["model.attention_kwargs=5"], "model.attention_kwargs must be a mapping")
tr("kw-not-dict-list", ["model.posenc_kwargs=[1, 2]"], "model.posenc_kwargs must be a mapping")
tr("kw-not-dict-str", ["task.kwargs=abc"], "task.kwargs must be a mapping")
tr("kw-nonstring-key", ["task.kwargs={1: 2}"], "non-string key 1")
for key, src in (("d_model", "model.d_model"), ("head_dim", "model.d_model / model.n_heads"),
                 ("causal", "model.causal"), ("n_heads", "model.n_heads")):
    tr(f"kw-framework-posenc-{key}", ["model.posenc=rope", f"model.posenc_kwargs.{key}=8"],
       f"model.posenc_kwargs.{key} cannot be set", src)
for key, src in (("n_heads", "model.n_heads"), ("impl", "model.attn_impl"),
                 ("block_size", "model.attn_block_size"), ("layer_idx", "layer's index"),
                 ("n_layers", "model.n_layers")):
    tr(f"kw-framework-attention-{key}", ["model.attention=diff",
                                         f"model.attention_kwargs.{key}=2"],
       f"model.attention_kwargs.{key} cannot be set", src)
tr("kw-bool-typo", ["model.attention=tra", "model.attention_kwargs.qk_norm=flase"],
   "model.attention_kwargs.qk_norm must be true or false", "'flase'")
tr("kw-int-text", ["model.posenc=learned", "model.posenc_kwargs.max_positions=abc"],
   "model.posenc_kwargs.max_positions must be an integer")
tr("kw-int-zero", ["model.posenc=learned", "model.posenc_kwargs.max_positions=0"],
   "max_positions must be an integer >= 1")
tr("kw-int-negative", ["model.posenc=learned", "model.posenc_kwargs.max_positions=-5"],
   "max_positions must be an integer >= 1")
tr("kw-float-zero", ["model.posenc=rope", "model.posenc_kwargs.base=0"], "base must be a finite number > 0")
tr("kw-float-nan", ["model.posenc=rope", "model.posenc_kwargs.base=.nan"], "base must be a finite")
tr("kw-float-inf", ["model.attention=fot", "model.attention_kwargs.gate_bias_init=.inf"],
   "gate_bias_init must be a finite")
tr("kw-t5-buckets", ["model.posenc=t5", "model.posenc_kwargs.num_buckets=1"], "num_buckets")
tr("kw-xl-odd-rel-dim", ["model.posenc=xl", "model.posenc_kwargs.rel_dim=7"],
   "positional scheme 'xl'", "even rel_dim")
tr("kw-xl-path", ["model.posenc=xl", "model.posenc_kwargs.path=fast"], "xl path must be")
tr("kw-cope-npos", ["model.attention=cope", "model.attention_kwargs.npos=0"], "npos")
tr("kw-diff-lambda-std", ["model.attention=diff", "model.attention_kwargs.lambda_std=-1"],
   "lambda_std must be a finite number >= 0")
tr("kw-diff-lambda-init", ["model.attention=diff", "model.attention_kwargs.lambda_init=1.5"],
   "lambda_init must be a finite number in [0, 1)")
tr("kw-sampler-eval-mode", ["model.positions=randomized",
                            "model.positions_kwargs.eval_mode=random"],
   "position sampler 'randomized'", "unknown eval_mode 'random'")
tr("kw-sampler-max-length", ["model.positions=randomized", "model.positions_kwargs.max_length=0"],
   "max_length must be >= 1")
tr("kw-sampler-sort", ["model.positions=label", "model.positions_kwargs.sort=maybe"],
   "model.positions_kwargs.sort must be true or false")
tr("kw-flipflop-pairs", ["task.kwargs.n_pairs=1"], "task.kwargs.n_pairs must be an integer >= 2")
tr("kw-flipflop-p", ["task.kwargs.p_ignore=1.5"], "task.kwargs.p_ignore must be a finite number in [0, 1]")
tr("kw-flipflop-split-p", ["task.kwargs.split_p_ignore={iid: 2}"], "split_p_ignore",
   "probability in [0, 1]")
tr("kw-data-files-typo", ["task.kwargs.data_files={trian: <f>/ok.txt}"],
   "unknown data_files key 'trian'", "Did you mean 'train'", "train, iid, sparse, dense")
tr("kw-data-files-missing", ["task.kwargs.data_files={iid: <f>/nope.txt}"],
   "nope.txt does not exist")
tr("kw-data-files-binary", ["task.kwargs.data_files={iid: <f>/bin.txt}"], "bin.txt is not a text file")
tr("kw-data-files-dir", ["task.kwargs.data_files={iid: <f>/adir}"], "adir is a directory")
tr("kw-data-files-malformed", ["task.kwargs.data_files={iid: <f>/malformed.txt}"],
   "malformed.txt: row 1 is malformed")
tr("kw-data-files-not-dict", ["task.kwargs.data_files=<f>/ok.txt"],
   "task.kwargs.data_files must be a mapping")
tr("kw-chomsky-train-length", ["task.name=reverse_string", "model.causal=false",
                               "task.kwargs.max_train_length=0"], "max_train_length must be >= 1")
tr("kw-chomsky-eval-length", ["task.name=reverse_string", "model.causal=false",
                              "task.kwargs.max_eval_length=10"], "max_eval_length (10) must exceed")
tr("kw-modular-operators", ["task.name=modular_arithmetic", "model.causal=false",
                            "task.kwargs.operators=[+, '%']"], "operators must be distinct symbols")
tr("kw-modulus", ["task.name=solve_equation", "model.causal=false", "task.kwargs.modulus=1"],
   "modulus must be >= 2")

# ---- 2. registry names -------------------------------------------------------------------------
tr("name-posenc", ["model.posenc=rop"], "unknown positional scheme 'rop' (model.posenc)",
   "alibi, fire, kerple_log, learned, nope, pope, prope, rope", "Did you mean 'rope'")
tr("name-attention", ["model.attention=flash"], "unknown attention kind 'flash'", "softmax, stickbreaking, tra")
tr("name-sampler", ["model.positions=random"], "unknown position sampler 'random'",
   "Did you mean 'randomized'")
tr("name-task", ["task.name=flipflopp"], "unknown task 'flipflopp' (task.name)", "Did you mean 'flipflop'")
tr("name-posenc-list", ["model.posenc=[rope]"], "model.posenc must be a registry name")

# ---- 3. field ranges ---------------------------------------------------------------------------
for key, value, *want in [
        ("train.steps", "0", "train.steps must be an integer >= 1"),
        ("train.steps", "-5", "train.steps must be an integer >= 1"),
        ("train.steps", "2.5", "got 2.5"),
        ("train.steps", "", "train.steps must be an integer >= 1, got None"),
        ("train.batch_size", "0", "train.batch_size must be an integer >= 1"),
        ("train.lr", "inf", "train.lr must be a finite number > 0"),
        ("train.lr", ".nan", "train.lr must be a finite number > 0"),
        ("train.lr", "0", "train.lr must be a finite number > 0"),
        ("train.lr", "-1e-3", "train.lr must be a finite number > 0"),
        ("train.lr", "fast", "got 'fast'"),
        ("train.warmup_steps", "-1", "train.warmup_steps must be an integer >= 0"),
        ("train.min_lr_frac", "-0.1", "train.min_lr_frac must be a finite number in [0, 1]"),
        ("train.min_lr_frac", "1.5", "train.min_lr_frac must be a finite number in [0, 1]"),
        ("train.weight_decay", "-0.1", "train.weight_decay must be a finite number >= 0"),
        ("train.betas", "0.9", "train.betas must be a pair [beta1, beta2]"),
        ("train.betas", "[0.9]", "train.betas must be a pair"),
        ("train.betas", "[0.9, 1.0]", "train.betas[1] must be a finite number in [0, 1)"),
        ("train.eps", "0", "train.eps must be a finite number > 0"),
        ("train.grad_clip", "-1", "train.grad_clip must be a finite number >= 0"),
        ("train.schedule", "cosin", "one of cosine, constant", "Did you mean 'cosine'"),
        ("train.optimizer", "sgd", "train.optimizer must be one of adamw, adam"),
        ("train.seed", "-1", "train.seed must be an integer in [0, "),
        ("train.data_seed", "1.5", "train.data_seed must be an integer"),
        ("train.eval_every", "-1", "train.eval_every must be an integer >= 0"),
        ("train.eval_sequences", "0", "train.eval_sequences must be an integer >= 1"),
        ("train.ckpt_every", "-2", "train.ckpt_every must be an integer >= 0"),
        ("train.keep_checkpoints", "-1", "train.keep_checkpoints must be an integer >= 0"),
        ("train.log_every", "-1", "train.log_every must be an integer >= 0"),
        ("train.threads", "-1", "train.threads must be an integer in [0, 1024]"),
        ("train.threads", "100000", "train.threads must be an integer in [0, 1024]"),
        ("train.tensorboard", "maybe", "train.tensorboard must be true or false"),
        ("train.progress", "1", "train.progress must be true or false"),
        ("train.device", "gpu", "train.device must be a torch device"),
        ("train.device", "meta", "train.device must be a torch device"),
        ("train.device", "0", "train.device must be a torch device"),
        ("train.device", "cuda:99", "train.device=cuda:99 is not available"),
        ("train.precision", "fp8", "train.precision must be one of fp32, bf16, fp16"),
        ("train.precision", "bfloat16", "train.precision must be one of fp32, bf16, fp16"),
        ("train.compile", "maybe", "train.compile must be true or false"),
        ("model.d_model", "0", "model.d_model must be an integer >= 1"),
        ("model.n_layers", "0", "model.n_layers must be an integer >= 1"),
        ("model.n_heads", "0", "model.n_heads must be an integer >= 1"),
        ("model.dropout", "1", "model.dropout must be a finite number in [0, 1)"),
        ("model.dropout", "-0.1", "model.dropout must be a finite number in [0, 1)"),
        ("model.vocab_size", "0", "model.vocab_size must be an integer >= 1"),
        ("model.d_ff", "0", "model.d_ff must be an integer >= 1"),
        ("model.attn_block_size", "0", "model.attn_block_size must be an integer >= 1"),
        ("model.attn_block_size", "-1", "model.attn_block_size must be an integer >= 1"),
        ("model.attn_impl", "fast", "model.attn_impl must be one of auto, naive, lean"),
        ("model.mlp", "swiglue", "model.mlp must be one of", "Did you mean 'swiglu'"),
        ("model.norm", "batch", "model.norm must be one of rms, layer"),
        ("model.norm_position", "middle", "model.norm_position must be one of pre, post, sandwich"),
        ("model.init_std", "0", "model.init_std must be a finite number > 0"),
        ("model.causal", "maybe", "model.causal must be true or false"),
        ("eval.splits", "[]", "eval.splits must be a non-empty list"),
        ("eval.splits", "[iid, iid]", "(iid repeated)"),
        ("eval.splits", "5", "eval.splits must be a non-empty list"),
        ("eval.splits", "[medium]", "unknown split 'medium'", "Valid splits: iid, sparse, dense"),
        ("eval.splits", "iid,sparse", "unknown split 'iid,sparse'", "eval.splits=[iid,sparse]"),
        ("eval.sequences", "0", "eval.sequences must be an integer >= 1"),
        ("eval.sequences", "-3", "eval.sequences must be an integer >= 1"),
        ("eval.batch_size", "0", "eval.batch_size must be an integer >= 1"),
        ("eval.seed", "-1", "eval.seed must be an integer"),
        ("name", "../escape", "name must be a run name"),
        ("name", "a/b", "name must be a run name")]:
    tr(f"range-{key}={value}", [f"{key}={value}"], *want)   # noqa: B023
tr("range-heads-divide", ["model.d_model=10", "model.n_heads=3"],
   "model.d_model=10 must be divisible by model.n_heads=3")
tr("range-learned-too-short", ["model.posenc=learned", "model.posenc_kwargs.max_positions=10"],
   "learned positional table has 10 rows", "model.posenc_kwargs.max_positions")
tr("range-rope-odd-head", ["model.posenc=rope", "model.d_model=18", "model.n_heads=2"],
   "rope needs an even head dim")
tr("range-tra-encoder", ["model.attention=tra", "model.causal=false"], "causal")
# a Chomsky task runs in a decoder too (a token mixer reads it causally, as the paper's RNNs);
# a decoder task in an encoder does not
tr("range-decoder-task-in-encoder", ["task.name=copy", "model.causal=false"],
   "task 'copy' needs model.causal=true")
tr("range-chomsky-split", ["task.name=reverse_string", "model.causal=false",
                           "eval.splits=[len=0]"], "bad split 'len=0'", "len=K")
tr("range-randomized-too-short", ["model.positions=randomized",
                                  "model.positions_kwargs.max_length=16"],
   "raise model.positions_kwargs.max_length")
tr("range-coupling-no-digits", ["task.name=copy", "model.positions=coupling"],
   "model.positions=coupling", "task 'copy' has no digit structure", "task.name=addition")
tr("range-abacus-learned-too-short", ["task.name=addition", "model.positions=abacus",
                                      "model.posenc=learned",
                                      "model.posenc_kwargs.max_positions=120"],
   "learned positional table has 120 rows", "model.posenc_kwargs.max_positions")
tr("range-addition-hints-too-long", ["task.name=addition", "task.kwargs.max_eval_length=120"],
   "operands of at most 101 digits", "task.kwargs.max_eval_length")

tr("range-warp-probability", ["task.name=copy", "model.positions=warp",
                               "model.positions_kwargs.p_head=1.5"],
   "model.positions_kwargs.p_head must be a finite number in [0, 1]")
tr("range-warp-probability-sum", ["task.name=copy", "model.positions=warp",
                                   "model.positions_kwargs={p_head: 0.6, p_tail: 0.6}"],
   "p_head + p_tail must be <= 1")
tr("range-warp-alpha", ["task.name=copy", "model.positions=warp",
                        "model.positions_kwargs.alphas=[0.5, 1]"], "0 < alpha < 1")
tr("range-warp-skew", ["task.name=copy", "model.positions=warp",
                       "model.positions_kwargs.skew=numpy:cos"], "f(0) = 0", "f(1) = 1")
tr("range-interpolate-items-no-items", ["model.positions=interpolate",
                                        "model.positions_kwargs.length_unit=items"],
   "position sampler 'interpolate'", "length_unit=tokens")
tr("range-rope-factor-no-scaling", ["model.posenc=rope", "model.posenc_kwargs.factor=2"],
   "posenc_kwargs.factor=2.0 needs a scaling")
tr("range-rope-fraction", ["model.posenc=rope", "model.posenc_kwargs.rotary_fraction=0.01"],
   "rotary_fraction")

# ---- 4. keys, sections and override syntax -------------------------------------------------------
tr("key-unknown", ["train.stepz=3"], "unknown config key(s) train.stepz", "Did you mean 'steps'")
tr("key-unknown-section", ["trian.steps=3"], "unknown config key(s) trian", "Did you mean 'train'")
tr("key-section-scalar", ["model=3"], "config section 'model' must be a mapping")
tr("key-value-as-section", ["train.steps.max=3"], "train.steps is a value, not a section")
tr("override-no-equals", ["train.steps"], "override 'train.steps' has no '='", "train.steps=500")
tr("override-empty-key", ["=3"], "is not a dotted key")
tr("override-double-dot", ["train..steps=3"], "'train..steps' is not a dotted key")
tr("override-bad-yaml", ["model.attention_kwargs={qk_norm: true"], "not valid YAML",
   "model.attention_kwargs={qk_norm: true")
tr("override-is-a-file", ["<f>/empty.yaml"], "has no '='", "--config <f>/empty.yaml")
cli("override-swallowed-by-config", ["train", "--config", "train.steps=3"],
    "--config got 'train.steps=3'", "looks like a key=value override")
cli("override-swallowed-by-run-dir", ["train", "--run-dir", "train.steps=3"],
    "--run-dir got 'train.steps=3'")
cli("unknown-flag", ["train", "--stepz", "3"], "unrecognized arguments: --stepz")
cli("no-command", [], "required")
cli("bad-command", ["frobnicate"], "invalid choice: 'frobnicate'")
cli("no-resume-and-fresh", ["train", "--no-resume", "--fresh"], "not allowed with argument")

# ---- 5. config files ---------------------------------------------------------------------------
for name, needles in [("missing.yaml", ["missing.yaml does not exist"]),
                      ("adir", ["adir is a directory", "config.json"]),
                      ("bad.yaml", ["bad.yaml is not valid YAML at line 3"]),
                      ("bad.json", ["bad.json is not valid JSON", "line 4, column 3"]),
                      ("bin.yaml", ["bin.yaml is not a text file"]),
                      ("list.yaml", ["list.yaml must hold a mapping", "list"]),
                      ("scalar.yaml", ["scalar.yaml must hold a mapping", "int"]),
                      ("dup.yaml", ["dup.yaml is not valid YAML", "'train' appears twice"]),
                      ("dup.json", ["dup.json", "'steps' appears twice"]),
                      ("modle.yaml", ["unknown config key(s) modle", "Did you mean 'model'"]),
                      ("steps0.yaml", ["train.steps must be an integer >= 1"])]:
    cli(f"file-{name}", ["train", "--run-dir", "<run>/never", "--config", f"<f>/{name}"], *needles)


def _empty_config_is_defaults(env):
    from lengen.config import load_config_file

    assert load_config_file(os.path.join(env["files"], "empty.yaml")) == {}


lib_ok("file-empty-yaml", _empty_config_is_defaults)


# ---- 6. lengen eval ------------------------------------------------------------------------------
def _corrupt(name, data: bytes | None = None, truncate: int | None = None):
    def setup(env, run):
        path = os.path.join(run, name)
        if truncate is not None:
            with open(path, "r+b") as f:
                f.truncate(truncate)
        else:
            with open(path, "wb") as f:
                f.write(data)
    return setup


def _other_model_weights(env, run):
    from lengen.rundir.checkpoint import save_weights

    other = lengen.Transformer(lengen.ModelConfig(vocab_size=5, d_model=32, n_layers=1, n_heads=2))
    save_weights(other, os.path.join(run, "model.safetensors"))


def _old_config_key(env, run):
    path = os.path.join(run, "config.json")
    d = json.load(open(path))
    d["train"]["warmup"] = 5
    json.dump(d, open(path, "w"))


cli("eval-missing-dir", ["eval", "<f>/nowhere"], "nowhere does not exist")
cli("eval-not-a-run", ["eval", "<f>/norun"], "norun is not a run directory", "no config.json")
cli("eval-sequences-0", ["eval", "<run>", "--sequences", "0"], "--sequences", "must be >= 1")
cli("eval-batch-0", ["eval", "<run>", "--batch-size", "0"], "--batch-size", "must be >= 1")
cli("eval-batch-text", ["eval", "<run>", "--batch-size", "many"], "--batch-size",
    "expected an integer")
cli("eval-seed-negative", ["eval", "<run>", "--seed", "-1"], "--seed")
cli("eval-split-unknown", ["eval", "<run>", "--splits", "medium"], "unknown split 'medium'",
    "Valid splits: iid, sparse, dense")
cli("eval-split-commas", ["eval", "<run>", "--splits", "iid,sparse"], "--splits iid sparse")
cli("eval-device-bad", ["eval", "<run>", "--device", "gpu"], "device must be a torch device")
cli("eval-device-missing", ["eval", "<run>", "--device", "cuda:99"], "cuda:99 is not available")
cli("eval-out-escape", ["eval", "<run>", "--out", "../x"], "out must be a file name stem")
cli("eval-config-corrupt", ["eval", "<run>"], "config.json is unreadable",
    "rerun lengen train", setup=_corrupt("config.json", b'{"model": {'))
cli("eval-config-binary", ["eval", "<run>"], "config.json is unreadable",
    setup=_corrupt("config.json", b"\xff\xfe\x00"))
cli("eval-config-old-key", ["eval", "<run>"], "config.json: unknown config key(s) train.warmup",
    "Did you mean 'warmup_steps'", setup=_old_config_key)
cli("eval-weights-truncated", ["eval", "<run>"], "model.safetensors is not a readable safetensors",
    "rerun lengen train", setup=_corrupt("model.safetensors", truncate=100))
cli("eval-weights-garbage", ["eval", "<run>"], "model.safetensors is not a readable",
    setup=_corrupt("model.safetensors", b"garbage" * 10))
cli("eval-weights-other-model", ["eval", "<run>"], "model.safetensors holds weights of another "
    "model", "shape mismatch", setup=_other_model_weights)


def _locked(env, run):
    from lengen.rundir.layout import RunDirLock

    lock = RunDirLock(run, "a test").__enter__()
    env.setdefault("cleanup", []).append(lambda: lock.__exit__(None, None, None))


cli("eval-locked", ["eval", "<run>"], "is in use by another lengen process",
    f"pid {os.getpid()}", setup=_locked)


def _same_numbers_any_batch_size(env, run, out, err):
    a = json.load(open(os.path.join(run, "b3.json")))
    assert main(["eval", run, "--batch-size", "64", "--out", "b64"]) == 0
    b = json.load(open(os.path.join(run, "b64.json")))
    # same sequences: accuracies equal exactly, nll up to float rounding in the matmuls
    exact = [(r["split"], r["metric"], r["value"]) for r in a if r["metric"] != "nll"]
    assert exact == [(r["split"], r["metric"], r["value"]) for r in b if r["metric"] != "nll"]
    assert [r["value"] for r in a] == pytest.approx([r["value"] for r in b], rel=1e-6)


cli_ok("eval-batch-size-does-not-matter", ["eval", "<run>", "--batch-size", "3", "--out", "b3"],
       _same_numbers_any_batch_size)

# ---- 7. lengen train on an existing run directory ----------------------------------------------
cli("rundir-no-resume-refused", ["train", "--run-dir", "<run>", "--no-resume", *TINY],
    "already holds a run", "--fresh")
cli("rundir-changed-lr", ["train", "--run-dir", "<run>", *TINY, "train.lr=0.5"],
    "holds a run with a different config (train.lr: 0.001 -> 0.5)", "--fresh")
cli("rundir-changed-task", ["train", "--run-dir", "<run>", *TINY, "task.kwargs.n_pairs=7"],
    "task.kwargs.n_pairs: 6 -> 7")
cli("rundir-locked", ["train", "--run-dir", "<run>", *TINY], "is in use by another lengen "
    "process", setup=_locked)
cli("rundir-is-a-file", ["train", "--run-dir", "<f>/afile", *TINY], "afile is a file")


def _checkpoints_a_file(env, run):
    shutil.rmtree(os.path.join(run, "checkpoints"))
    open(os.path.join(run, "checkpoints"), "w").write("x")


cli("rundir-checkpoints-is-a-file", ["train", "--run-dir", "<run>", *TINY],
    "checkpoints is a file", setup=_checkpoints_a_file)
cli("eval-run-dir-is-a-file", ["eval", "<f>/afile"], "afile does not exist (or is not a directory)")


def _only_checkpoint_broken(env, run):
    ck = os.path.join(run, "checkpoints")
    for d in os.listdir(ck):
        if d.startswith("step_"):
            os.remove(os.path.join(ck, d, "state.pt"))


cli("rundir-no-usable-checkpoint", ["train", "--run-dir", "<run>", *TINY],
    "none is usable", "state.pt is missing", "Not restarting from step 0",
    setup=_only_checkpoint_broken)


def _fresh_moved(env, run, out, err):
    prev = os.path.join(run, "previous")
    (moved,) = os.listdir(prev)
    assert os.path.exists(os.path.join(prev, moved, "eval.json"))
    assert "moved the previous run" in err
    steps = [json.loads(x)["step"] for x in open(os.path.join(run, "metrics.jsonl"))]
    assert steps == sorted(steps) and steps.count(4) <= 1


cli_ok("rundir-fresh-moves-aside", ["train", "--run-dir", "<run>", "--fresh", *TINY],
       _fresh_moved)


def _resumed_harmless(env, run, out, err):
    assert json.load(open(os.path.join(run, "config.json")))["train"]["log_every"] == 2
    assert {r["sequences"] for r in json.load(open(os.path.join(run, "eval.json")))} == {4}


cli_ok("rundir-harmless-change", ["train", "--run-dir", "<run>", *TINY, "train.log_every=2",
                                  "eval.sequences=4"], _resumed_harmless)


def _garbage_latest(env, run):
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write("\x00garbage")


cli_ok("rundir-garbage-latest", ["train", "--run-dir", "<run>", *TINY],
       lambda env, run, out, err: "checkpoints/latest names" in err, setup=_garbage_latest)


def _truncate_newest(env, run):
    from lengen.rundir.checkpoint import list_checkpoints

    newest = list_checkpoints(run)[0]
    with open(os.path.join(newest, "model.safetensors"), "r+b") as f:
        f.truncate(64)


cli_ok("rundir-truncated-newest", ["train", "--run-dir", "<run>", *TINY],
       lambda env, run, out, err: "step_0000004 is unusable" in err and "truncated" in err,
       setup=_truncate_newest)


def _overrides_anywhere(env, run, out, err):
    cfg = json.load(open(os.path.join(run, "x", "config.json")))
    assert cfg["train"]["steps"] == 2 and cfg["model"]["d_model"] == 16


cli_ok("override-after-flag", ["train", *TINY[:4], "--run-dir", "<run>/x", *TINY[4:],
                               "--no-resume", "train.steps=2"], _overrides_anywhere)

# ---- 8. other commands ---------------------------------------------------------------------------
cli("plot-split", ["plot", "attention", "<run>", "--split", "medium"], "unknown split 'medium'")
cli("plot-layer", ["plot", "attention", "<run>", "--layer", "5"], "layer 5 out of range")
cli("plot-index", ["plot", "attention", "<run>", "--index", "999"], "index 999 out of range")
cli("plot-missing-run", ["plot", "attention", "<f>/nowhere"], "nowhere does not exist")
cli("demo-steps-0", ["demo", "--steps", "0"], "--steps", "must be >= 1")
cli("demo-unknown-model", ["demo", "--models", "gpt", "--out", "<run>/demo"],
    "unknown demo model 'gpt'")
cli("reproduce-workers-0", ["reproduce", "tra-flipflop", "--workers", "0"], "--workers")
cli("reproduce-unknown-model", ["reproduce", "tra-flipflop", "--models", "XYZ", "--out",
                                "<run>/r"], "unknown Table 1 model(s) ['XYZ']")
cli("reproduce-lr-inf", ["reproduce", "randomized-pe", "--lrs", "inf"], "--lrs",
    "finite number > 0")
cli("reproduce-unknown-task", ["reproduce", "randomized-pe", "--tasks", "nosuch", "--out",
                               "<run>/r"], "unknown task(s) ['nosuch']")


def _list_entries(out: str) -> dict:
    """``lengen list`` output -> {name: description}, wrapped lines joined."""
    entries, name = {}, None
    for ln in out.splitlines():
        if ln.startswith("   ") and name:                   # a continuation of the description
            entries[name] += " " + ln.strip()
        elif ln.startswith("  "):
            name, _, text = ln.strip().partition(" ")
            entries[name] = text.strip()
    return entries


def _own_docstrings(env, run, out, err):
    lines = _list_entries(out)
    assert lines["identity"].startswith("Positions 0, 1, ..., T-1")
    assert lines["randomized"].startswith("Randomized positions (Ruoss et al. 2023)")
    assert lines["label"].startswith("Label positional encodings")
    assert len({lines["identity"], lines["randomized"], lines["label"]}) == 3


cli_ok("list-own-docstrings", ["list"], _own_docstrings)


def _whole_sentences(env, run, out, err):
    """Issue 30: descriptions are never cut mid-word: each is its entry's whole first sentence."""
    from lengen import ATTENTIONS, POSENCS, SAMPLERS, TASKS
    from lengen.registry import describe

    entries = _list_entries(out)
    for reg in (POSENCS, ATTENTIONS, SAMPLERS, TASKS):
        for name, obj in reg.items():
            assert entries[name] == describe(obj, reg, width=None), name
    assert not any(t.endswith("...") for t in entries.values())
    assert "coupling" in entries and "abacus" in entries


cli_ok("list-whole-sentences", ["list"], _whole_sentences)

# ---- 9. library calls (the same validation from Python) ------------------------------------------
lib("lib-resolve-not-dict", lambda env: lengen.resolve("train.steps=3"), ConfigError,
    "must be a mapping")
lib("lib-resolve-bad-type", lambda env: lengen.resolve({"train": {"steps": "many"}}), ConfigError,
    "train.steps must be an integer")
lib("lib-resolve-bad-kwargs", lambda env: lengen.resolve({"model": {"attention_kwargs": {"x": 1}}}),
    ConfigError, "unknown key 'x' in model.attention_kwargs")


def _tiny_cfg():
    return lengen.resolve({}, TINY).config


def _mutated_after_resolve(env):
    cfg = _tiny_cfg()
    cfg.train.batch_size = 0            # train() validates again
    lengen.train(cfg, os.path.join(env["root"], "never"), quiet=True)


lib("lib-train-revalidates", _mutated_after_resolve, ConfigError, "train.batch_size")
lib("lib-train-stop-at", lambda env: lengen.train(_tiny_cfg(), os.path.join(env["root"], "n"),
                                                  stop_at=-1), ConfigError, "stop_at")


def _evaluate(**kw):
    def fn(env):
        cfg, task, model = lengen.load_run(env["run"])
        lengen.evaluate(model, task, ["iid"], **dict(dict(n_sequences=4, batch_size=4), **kw))
    return fn


lib("lib-evaluate-batch-0", _evaluate(batch_size=0), ValueError, "batch_size must be an integer >= 1")
lib("lib-evaluate-sequences-0", _evaluate(n_sequences=0), ValueError, "n_sequences must be")
lib("lib-evaluate-generator-seed", _evaluate(seed=torch.Generator()), TypeError,
    "int seed, not a torch.Generator")
def _evaluate_bad_split(env):
    cfg, task, model = lengen.load_run(env["run"])
    lengen.evaluate(model, task, ["x"], n_sequences=2, batch_size=2)


lib("lib-evaluate-bad-split", _evaluate_bad_split, ValueError, "unknown split 'x'")


def _load_binary(env):
    from lengen.tasks.flipflop_data import load_flipflop

    load_flipflop(os.path.join(env["files"], "bin.txt"))


lib("lib-flipflop-binary-file", _load_binary, ValueError, "bin.txt is not a text file")
lib("lib-load-run-missing", lambda env: lengen.load_run(os.path.join(env["files"], "nowhere")),
    RunDirError, "does not exist")


def _no_tensorboard(env):
    saved = sys.modules.get("tensorboard")
    sys.modules["tensorboard"] = None             # as if it were not installed
    try:
        lengen.resolve({}, ["train.tensorboard=true"])
    finally:
        if saved is None:
            del sys.modules["tensorboard"]
        else:
            sys.modules["tensorboard"] = saved


lib("lib-tensorboard-missing", _no_tensorboard, ConfigError, "pip install 'lengen[tensorboard]'",
    "train.tensorboard=false")


def _no_wandb(env):
    saved = sys.modules.get("wandb")
    sys.modules["wandb"] = None                   # as if it were not installed
    try:
        lengen.resolve({}, ["train.wandb=true"])
    finally:
        if saved is None:
            del sys.modules["wandb"]
        else:
            sys.modules["wandb"] = saved


lib("lib-wandb-missing", _no_wandb, ConfigError, 'pip install "lengen[wandb]"', "train.wandb=false")
tr("kw-rope-scaling-option", ["model.posenc=rope", "model.posenc_kwargs.scaling=yarn",
                              "model.posenc_kwargs.factor=2", "model.posenc_kwargs.low_freq_factor=1"],
   "low_freq_factor is not an option of scaling=yarn", "llama3",
   "takes factor, original_length, beta_fast, beta_slow, attention_factor")


def _run_config_as_config_file(env):
    from lengen.config import load_config_file

    path = os.path.join(env["run"], "config.json")
    again = json.loads(json.dumps(lengen.resolve(load_config_file(path)).config.to_dict()))
    assert again == json.load(open(path))


lib_ok("lib-run-config-json-as-config", _run_config_as_config_file)


def _null_kwargs(env):
    from lengen.config import load_config_file

    path = os.path.join(env["root"], "null.yaml")
    open(path, "w").write("model:\n  attention_kwargs:\neval:\n  splits:\n")
    cfg = lengen.resolve(load_config_file(path)).config
    assert cfg.model.attention_kwargs == {} and cfg.eval.splits is None


lib_ok("lib-empty-yaml-sections", _null_kwargs)


def _eval_splits_string(env):
    cfg = lengen.resolve({}, ["eval.splits=iid"]).config
    assert cfg.eval.splits == ["iid"]


lib_ok("lib-splits-bare-string", _eval_splits_string)


def _coerced(env):
    cfg = lengen.resolve({}, ["model.posenc=learned", "model.posenc_kwargs.max_positions=1e3",
                              "train.steps=1e3"]).config
    assert cfg.model.posenc_kwargs == {"max_positions": 1000} and cfg.train.steps == 1000


lib_ok("lib-numeric-strings-coerced", _coerced)


def _resolve_keeps_rng(env):
    torch.manual_seed(5)
    a = torch.rand(3)
    torch.manual_seed(5)
    lengen.resolve({}, ["model.posenc=xl"])     # builds modules, but on a forked RNG
    assert torch.equal(torch.rand(3), a)


lib_ok("lib-resolve-leaves-rng-alone", _resolve_keeps_rng)


# ---- silently replaced or accepted values (issue 30, item 4; the Python API: test_bad_api.py) ---
cli("run-dir-empty", ["train", "--run-dir", "", *TINY], "--run-dir is empty")
tr("vocab-below-task", ["model.vocab_size=3"], "model.vocab_size=3", "task 'flipflop' (5 tokens",
   "Leave model.vocab_size out")
tr("negative-task-seed", ["task.name=copy", "task.kwargs.dataset_seed=-1"],
   "task.kwargs.dataset_seed must be an integer in [0")
tr("negative-data-seed", ["train.data_seed=-1"], "train.data_seed must be an integer in [0")
cli("generate-negative-seed", ["generate", "<run>", "--seed", "-1"], "argument --seed: must be >= 0")


def _unfinish(env, run):
    """As if killed after the checkpoint at step 2 of 4 (TINY checkpoints every 2 steps)."""
    os.remove(os.path.join(run, "model.safetensors"))
    shutil.rmtree(os.path.join(run, "checkpoints", "step_0000004"))


def _eval_warns_unfinished(env, run, out, err):
    assert "lengen: warning:" in err, err
    assert "has not finished training: using its checkpoint at step 2 of train.steps=4" in err
    rows = json.load(open(os.path.join(run, "late.json")))
    return all(r["step"] == 2 for r in rows)


def _eval_rows_have_step(env, run, out, err):
    assert "warning" not in err, err
    rows = json.load(open(os.path.join(run, "again.json")))
    return all(r["step"] == 4 for r in rows)


cli_ok("eval-rows-carry-step", ["eval", "<run>", "--out", "again"], _eval_rows_have_step)
cli_ok("eval-unfinished-run-warns", ["eval", "<run>", "--out", "late"], _eval_warns_unfinished,
       setup=_unfinish)

# ---- 10. issue 30: data loss, unbounded work, resource errors, exit codes ---------------------
# data loss: no output name may replace a file lengen owns in a run directory
for stem, owned in (("config", "config.json"), ("eval", "eval.json / eval.csv"),
                    ("metrics", "metrics.jsonl"), ("model", "model.safetensors"),
                    ("checkpoints", "checkpoints"), ("tb", "tb"), ("previous", "previous")):
    cli(f"loss-eval-out-{stem}", ["eval", "<run>", "--out", stem], f"--out {stem} would overwrite "
        f"{owned}", "which lengen owns", "nothing was written")
for name in ("config.json", "eval.json", "model.safetensors", "metrics.jsonl"):
    cli(f"loss-plot-attention-out-{name}", ["plot", "attention", "<run>", "--out", f"<run>/{name}"],
        f"would overwrite {name}", "which lengen owns")
cli("loss-plot-activations-out-config", ["plot", "activations", "<copy>", "--lengths", "3", "5",
                                         "--n", "2", "--out", "<copy>/config.json"],
    "would overwrite config.json")


def _config_untouched(env):
    """The refused command leaves the run's files byte for byte as they were."""
    run = os.path.join(env["root"], "untouched")
    shutil.copytree(env["run"], run, dirs_exist_ok=True)
    before = {n: open(os.path.join(run, n), "rb").read() for n in ("config.json", "eval.json",
                                                                     "eval.csv")}
    for stem in ("config", "eval"):
        assert main(["eval", run, "--out", stem]) == 2
    assert {n: open(os.path.join(run, n), "rb").read() for n in before} == before
    assert main(["eval", run, "--sequences", "4"]) == 0          # then the run still works


lib_ok("loss-refused-out-leaves-the-run-intact", _config_untouched)


def _training_eval_kept(env, run, out, err):
    train_rows = json.load(open(os.path.join(env["run"], "eval.json")))
    assert json.load(open(os.path.join(run, "eval.json"))) == train_rows      # not replaced
    assert {r["sequences"] for r in json.load(open(os.path.join(run, "reeval.json")))} == {4}
    assert "reeval.json" in out and "training-time eval.json is kept" in out


cli_ok("loss-eval-default-keeps-training-eval", ["eval", "<run>", "--sequences", "4"],
       _training_eval_kept)

# hangs and unbounded work: never-ending files, sizes that follow from an argument
cli("hang-config-dev-zero", ["train", "--run-dir", "<run>/never", "--config", "/dev/zero"],
    "config file /dev/zero is a character device, not a regular file")
cli("hang-config-fifo", ["train", "--run-dir", "<run>/never", "--config", "<f>/fifo.yaml"],
    "fifo.yaml is a named pipe (fifo)")
cli("hang-config-huge", ["train", "--run-dir", "<run>/never", "--config", "<f>/huge.yaml"],
    "huge.yaml is larger than 1024 KiB")
tr("hang-data-files-dev-zero", ["task.kwargs.data_files={iid: /dev/zero}"],
   "/dev/zero is a character device")
tr("hang-data-files-fifo", ["task.kwargs.data_files={iid: <f>/fifo.yaml}"],
   "fifo.yaml is a named pipe")
cli("hang-generate-n-huge", ["generate", "<copy>", "--n", "100000"], "--n 100000",
    "at most 1000", "lengen eval RUN --sequences 100000")
cli("hang-generate-split-far", ["generate", "<copy>", "--split", "len=100000"],
    "len=100000 asks for answers of 100001 tokens", "up to 100 items", "lengen eval RUN --splits "
    "len=100000")
cli("hang-generate-prompt-far", ["generate", "<copy>", "--prompt", " ".join(["a"] * 2000)],
    "the prompt (2000 items)", "far beyond")
cli("hang-eval-split-far", ["eval", "<copy>", "--splits", "len=1000000", "--sequences", "1"],
    "floating-point operations", "2,000,002 tokens", "--device cuda")
cli("hang-activations-lengths-far", ["plot", "activations", "<copy>", "--lengths", "3",
                                     "1000000", "--n", "30"], "--lengths", "--n")
cli("hang-eval-sequences-huge", ["eval", "<run>", "--sequences", "1000000000"],
    "floating-point operations", "Lower --sequences")


def _generate_within_bounds(env, run, out, err):
    assert out.strip().endswith(("0/1 right", "1/1 right")) and "len=150" in out, out[-300:]


cli_ok("hang-generate-far-but-allowed", ["generate", "<copy>", "--split", "len=150", "--n", "1"],
       _generate_within_bounds)

# resource errors: "out of memory" naming the size, estimated before anything is built
tr("oom-d-model", ["model.d_model=1000000"], "out of memory (estimated before starting)",
   "building this model", "model.d_model=1000000", "Lower model.d_model")
tr("oom-layers", ["model.d_model=4096", "model.n_layers=2000", "model.n_heads=4"],
   "out of memory", "model.n_layers=2000")
tr("oom-batch-length", ["task.kwargs.n_pairs=4000", "train.batch_size=100000"],
   "out of memory", "train.batch_size=100000", "training inputs of 7999 tokens",
   "attention scores")
tr("oom-eval-batch", ["task.kwargs.n_pairs=2000", "train.batch_size=1", "eval.batch_size=200000",
                      "eval.sequences=200000"], "out of memory", "eval.batch_size=200000",
   "evaluation inputs of 3999 tokens")
cli("oom-eval-long-batch", ["eval", "<copy>", "--splits", "len=20000", "--batch-size", "100000",
                            "--sequences", "100000"],
    "out of memory (estimated before starting)", "batch size 100000 (--batch-size)")


def _raise_in_forward(exc):
    def setup(env, run):
        from lengen.model.transformer import Transformer

        real = Transformer.forward

        def forward(self, *a, **k):
            raise exc
        Transformer.forward = forward
        env.setdefault("cleanup", []).append(lambda: setattr(Transformer, "forward", real))
    return setup


for kind, exc in (("cpu", RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. "
                                       "DefaultCPUAllocator: can't allocate memory: you tried to "
                                       "allocate 12000000000000 bytes. Error code 12")),
                  ("cuda", RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")),
                  ("python", MemoryError())):
    cli(f"oom-simulated-{kind}", ["eval", "<run>", "--out", "x"], "out of memory",
        "model.d_model", "eval.batch_size", setup=_raise_in_forward(exc))


def _oom_while_building(env):
    from lengen.registry import construct

    class Huge:
        def __init__(self, d_model):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                               "allocate 4000000000000 bytes")
    construct(Huge, {}, what="attention kind 'huge'", d_model=10 ** 6)


lib("oom-simulated-building", _oom_while_building, ConfigError, "out of memory",
    "d_model=1000000", "attention kind 'huge'")


def _disk_full(exc, only: str = ""):
    """torch.save in lengen.rundir.checkpoint writes half a file and raises ``exc`` (for paths
    containing ``only``), as a full disk does."""
    def setup(env, run):
        import importlib

        ck = importlib.import_module("lengen.rundir.checkpoint")
        real = ck.torch.save

        def save(obj, path, *a, **k):
            if only not in str(path):
                return real(obj, path, *a, **k)
            with open(path, "wb") as f:
                f.write(b"\0" * 100)
            raise exc
        ck.torch.save = save
        env.setdefault("cleanup", []).append(lambda: setattr(ck.torch, "save", real))
    return setup


for kind, exc in (("enospc", OSError(errno.ENOSPC, "No space left on device")),
                  ("torch-pos", RuntimeError("[enforce fail at inline_container.cc:626] . "
                                             "unexpected pos 33856 vs 33808")),
                  ("torch-write", RuntimeError("PytorchStreamWriter failed writing file "
                                               "data/0: file write failed"))):
    cli(f"disk-full-checkpoint-{kind}", ["train", "--run-dir", "<run>/new", *TINY],
        "disk full while writing <run>/new/checkpoints/step_0000002", "MiB free",
        "temporary folder is removed", "no earlier checkpoint", setup=_disk_full(exc))


def _no_tmp_left(env):
    """A full disk at the second checkpoint: exit 2, no .tmp folder, the first one kept, and
    the same command resumes from it once there is room."""
    import contextlib
    import io

    run = os.path.join(env["root"], "diskfull")
    _disk_full(OSError(errno.ENOSPC, "No space left on device"), only="step_0000004")(env, run)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(["train", "--run-dir", run, *TINY])
    finally:
        for fn in env.pop("cleanup", []):
            fn()
    assert code == 2 and "disk full while writing" in err.getvalue(), err.getvalue()
    assert "step_0000002, is kept" in err.getvalue(), err.getvalue()
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["latest", "step_0000002"]
    assert main(["train", "--run-dir", run, *TINY]) == 0              # room again: resumes


lib_ok("disk-full-cleans-up-and-resumes", _no_tmp_left)


def _eval_disk_full(env, run):
    import lengen.fileio as fio

    real = fio.write_text_atomic

    def write(text, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", path)
    fio.write_text_atomic = write
    env.setdefault("cleanup", []).append(lambda: setattr(fio, "write_text_atomic", real))


cli("disk-full-eval-rows", ["eval", "<run>", "--out", "x"], "disk full while writing <run>/x.json",
    setup=_eval_disk_full)

# exit codes: every refusal of bad input exits 2, and says what to do
cli("exit-cmap", ["plot", "attention", "<run>", "--cmap", "nocmap"], "unknown colormap 'nocmap'",
    "--cmap", "magma")
cli("exit-cmap-close", ["plot", "attention", "<run>", "--cmap", "viridiss"],
    "Did you mean 'viridis'")
cli("exit-generate-seed", ["generate", "<copy>", "--seed", "-1"], "--seed", "must be >= 0")
cli("exit-demo-out-file", ["demo", "--out", "<f>/afile", "--steps", "1"],
    "--out <f>/afile is a file, not a folder", "move the file away")
cli("exit-reproduce-out-file", ["reproduce", "tra-flipflop", "--scale", "smoke", "--out",
                                "<f>/afile"], "--out <f>/afile is a file, not a folder")
cli("exit-reproduce-out-under-file", ["reproduce", "randomized-pe", "--scale", "smoke", "--out",
                                      "<f>/afile/sub"], "lies inside <f>/afile, which is a file")
cli("exit-analyze-out-file", ["analyze", "idealized", "--out", "<f>/afile"],
    "--out <f>/afile is a file, not a folder")
cli("exit-plot-out-under-file", ["plot", "attention", "<run>", "--out", "<f>/afile/x.png"],
    "lies inside <f>/afile, which is a file")
cli("exit-plot-out-folder", ["plot", "attention", "<run>", "--out", "<f>/adir"],
    "--out <f>/adir is a folder; --out takes a file name")


# ---- the runner ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,payload,expect,setup", CASES)
def test_bad_input(kind, payload, expect, setup, env, tmp_path, capsys):
    run = copy_run(env, tmp_path) if kind.startswith("cli") else None
    try:
        if setup:
            setup(env, run)
        if kind in ("cli", "cli_ok"):
            capsys.readouterr()
            code = main(subst(payload, env, run))
            out, err = capsys.readouterr()
            assert "Traceback" not in err, err
            if kind == "cli":
                assert code == 2, (code, err)
                last = err.strip().splitlines()[-1]
                assert last.startswith(("lengen: error:", "lengen")) and "error" in last, err
                for needle in subst(list(expect), env, run):
                    assert needle in err, (needle, err)
            else:
                assert code == 0, err
                if expect is not None:
                    assert expect(env, run, out, err) is not False, err
        elif kind == "lib":
            exc, needles = expect
            with pytest.raises(exc) as info:
                payload(env)
            for needle in needles:
                assert needle in str(info.value), (needle, str(info.value))
        else:
            payload(env)
    finally:
        for fn in env.pop("cleanup", []):
            fn()


def test_the_table_is_big_enough():
    verdicts = [c.values[0] for c in CASES]
    errors = sum(v in ("cli", "lib") for v in verdicts)
    assert len(CASES) >= 130 and errors >= 100, (len(CASES), errors)


def test_debug_flag_shows_the_traceback(capsys):
    for argv in (["--debug", "train", "train.steps=0"], ["train", "--debug", "train.steps=0"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" in err and "train.steps must be an integer >= 1" in err


def test_list_into_a_closed_pipe_prints_no_traceback():
    """``lengen list | head``: the reader goes away; no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from lengen.cli import main; "
                             "sys.exit(main(['list']))"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()                       # closed before the child writes anything
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
