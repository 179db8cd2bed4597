"""Mixed precision (train.precision) and torch.compile (train.compile) in the training loop:
each precision trains (finite, decreasing loss; first loss and gradients near fp32), every
attention kind takes bf16 / fp16 training steps, resume is bit-exact under bf16 and fp16 (the
loss scaler's state is checkpointed), compile trains, checkpoints the uncompiled module and
resumes, and unavailable precisions or compilers fail before any work with the fix."""
from __future__ import annotations

import importlib
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import lengen
from lengen.attention import ATTENTIONS
from lengen.errors import ConfigError
from lengen.train import train
from lengen.rundir.checkpoint import latest_checkpoint

precision_mod = importlib.import_module("lengen.train.precision")


def cfg(**train_kw):
    return lengen.resolve({
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "dropout": 0.1,
                  "posenc": "learned", "positions": "randomized",
                  "posenc_kwargs": {"max_positions": 64}, "positions_kwargs": {"max_length": 64}},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": dict({"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 0,
                       "log_every": 1, "progress": False, "threads": 1}, **train_kw),
        "eval": {"sequences": 8, "batch_size": 8},
    }).config


def losses(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(x)["loss"] for x in f if '"loss"' in x]


def weights(run):
    return load_file(os.path.join(run, "model.safetensors"))


def learn_cfg(**train_kw):
    return lengen.resolve({
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "attention": "tra"},
        "task": {"kwargs": {"n_pairs": 8}},
        "train": dict({"steps": 60, "batch_size": 16, "lr": 3e-3, "warmup_steps": 5,
                       "log_every": 1, "progress": False, "threads": 1}, **train_kw),
        "eval": {"sequences": 16, "batch_size": 16, "splits": ["iid"]}}).config


@pytest.fixture(scope="module")
def fp32_run(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("fp32") / "run")
    train(learn_cfg(), run, quiet=True)
    return run


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_trains_near_fp32(precision, fp32_run, tmp_path):
    run = str(tmp_path / "run")
    train(learn_cfg(precision=precision), run, quiet=True)
    ref, got = losses(fp32_run), losses(run)
    assert len(got) == 60 and all(map(torch.isfinite, torch.tensor(got)))
    # same initial weights and batch: the first loss differs by the half-precision rounding only
    assert got[0] == pytest.approx(ref[0], abs=0.02)
    first, last = sum(got[:10]) / 10, sum(got[-10:]) / 10
    assert last < first - 0.1, (first, last)       # it learns (fp32: see the fixture's losses)
    assert abs(last - sum(ref[-10:]) / 10) < 0.15
    assert json.load(open(os.path.join(run, "config.json")))["train"]["precision"] == precision


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_first_gradients_near_fp32(precision, monkeypatch, tmp_path):
    """The gradients of the first step (unscaled for fp16) agree with fp32's to half-precision
    accuracy, for every parameter tensor."""
    grads = {}
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, *a, **kw):
        params = list(params)
        grads.setdefault(cur["p"], [p.grad.detach().clone() for p in params])
        return real(params, *a, **kw)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    cur = {}
    for p in ("fp32", precision):
        cur["p"] = p
        train(learn_cfg(precision=p, steps=1), str(tmp_path / p), quiet=True)
    for a, b in zip(grads["fp32"], grads[precision]):
        assert a.abs().max() > 0
        err = (a - b).norm() / a.norm()
        assert err < (0.05 if precision == "bf16" else 0.01), err


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_every_attention_kind_trains_in_half_precision(attention, precision, tmp_path):
    c = lengen.resolve({
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "attention": attention,
                  # a token mixer reads no positional scheme (lengen.attention.mixer)
                  "posenc": "fire" if ATTENTIONS[attention].uses_posenc
                  else "nope"},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": {"steps": 2, "batch_size": 4, "log_every": 1, "progress": False, "threads": 1,
                  "precision": precision},
        "eval": {"sequences": 4, "batch_size": 4, "splits": ["iid"]}})
    _, _, rows = train(c, str(tmp_path), quiet=True)
    assert all(torch.isfinite(torch.tensor(losses(str(tmp_path)))))
    assert all(r["value"] == r["value"] for r in rows)      # evaluation (fp32) gives numbers


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_resume_is_exact_in_half_precision(precision, tmp_path):
    train(cfg(precision=precision), str(tmp_path / "a"), quiet=True)
    train(cfg(precision=precision), str(tmp_path / "b"), stop_at=3, quiet=True)
    state_file = os.path.join(latest_checkpoint(str(tmp_path / "b")), "state.pt")
    state = torch.load(state_file, weights_only=True)
    assert ("scaler" in state) == (precision == "fp16")
    if precision == "fp16":
        assert state["scaler"]["scale"] > 0 and "_growth_tracker" in state["scaler"]
    train(cfg(precision=precision), str(tmp_path / "b"), quiet=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert losses(str(tmp_path / "a")) == losses(str(tmp_path / "b"))
    # and half precision really changed the computation
    train(cfg(), str(tmp_path / "fp32"), quiet=True)
    assert losses(str(tmp_path / "fp32")) != losses(str(tmp_path / "a"))


def test_precision_is_part_of_the_run(tmp_path):
    from lengen.errors import RunDirError

    train(cfg(precision="bf16"), str(tmp_path), stop_at=2, quiet=True)
    with pytest.raises(RunDirError, match=r"train.precision: 'bf16' -> 'fp32'"):
        train(cfg(), str(tmp_path), quiet=True)


def test_runs_made_before_the_precision_keys_still_resume(tmp_path):
    """config.json of a run from before train.precision / train.compile existed."""
    train(cfg(), str(tmp_path / "old"), stop_at=3, quiet=True)
    path = tmp_path / "old" / "config.json"
    stored = json.load(open(path))
    del stored["train"]["precision"], stored["train"]["compile"]
    path.write_text(json.dumps(stored))
    train(cfg(), str(tmp_path / "old"), quiet=True)
    train(cfg(), str(tmp_path / "new"), quiet=True)
    assert losses(str(tmp_path / "old")) == losses(str(tmp_path / "new"))


# ---- unavailable precision or compiler: clear errors before any work ---------------------------

def test_unavailable_precision_fails_before_work(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda device_type: False)
    with pytest.raises(ConfigError, match=r"train.precision=bf16: .*no autocast for device "
                                          r"type 'cpu'; set train.precision=fp32"):
        train(cfg(precision="bf16"), str(tmp_path / "run"), quiet=True)
    assert not os.path.exists(tmp_path / "run")
    lengen.resolve({"train": {"precision": "fp32"}})          # fp32 needs no autocast


def test_precision_probe_failure_is_reported(monkeypatch):
    real = torch.autocast

    def broken(device_type, dtype=None, **kw):
        if dtype is torch.float16:
            raise RuntimeError("In CPU autocast, but the target dtype is not supported")
        return real(device_type, dtype=dtype, **kw)

    monkeypatch.setattr(torch, "autocast", broken)
    with pytest.raises(ConfigError, match=r"train.precision=fp16: autocast to torch.float16 "
                                          r"fails on cpu.*set train.precision=fp32 or bf16"):
        lengen.resolve({"train": {"precision": "fp16"}})


def test_unavailable_compiler_fails_before_work(tmp_path, monkeypatch):
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.raises(ConfigError, match=r"train.compile=true: torch.compile is not supported "
                                          r".*set train.compile=false"):
        train(cfg(compile=True), str(tmp_path / "run"), quiet=True)
    monkeypatch.undo()
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(ConfigError, match=r"train.compile=true on cpu needs a C\+\+ compiler"):
        lengen.resolve({"train": {"compile": True}})
    assert not os.path.exists(tmp_path / "run")


def test_a_compiler_failure_at_the_first_step_names_the_key(tmp_path, monkeypatch):
    class BackendCompilerFailed(RuntimeError):
        pass

    BackendCompilerFailed.__module__ = "torch._dynamo.exc"

    def broken(module):
        def fwd(*a, **kw):
            raise BackendCompilerFailed("backend='inductor' raised: CppCompileError")
        return fwd

    monkeypatch.setattr(importlib.import_module("lengen.train.loop"), "compile_model", broken)
    with pytest.raises(ConfigError, match=r"train.compile=true: torch.compile failed on the first "
                                          r"training step \(BackendCompilerFailed: backend="
                                          r"'inductor'.*set train.compile=false"):
        train(cfg(compile=True), str(tmp_path), quiet=True)


# ---- torch.compile for real (Inductor; the first compile takes tens of seconds on a CPU) ------

def compile_unavailable() -> str | None:
    """Why torch.compile cannot run on this machine's CPU (no TorchDynamo for this Python, no
    C++ compiler), or None: the one optional dependency the real-compile test needs."""
    try:
        precision_mod.check_compile("cpu")
    except ConfigError as e:
        return str(e)
    return None


@pytest.mark.slow
@pytest.mark.skipif(compile_unavailable() is not None, reason=compile_unavailable() or "")
def test_compile_trains_checkpoints_the_plain_module_and_resumes(tmp_path):
    def cfg1(**kw):            # one layer: compile time grows with the graph
        c = cfg(**kw)
        c.model.n_layers = 1
        return c

    c = dict(compile=True, steps=4, ckpt_every=2)
    train(cfg1(**c), str(tmp_path / "a"), stop_at=2, quiet=True)
    ck = load_file(os.path.join(latest_checkpoint(str(tmp_path / "a")), "model.safetensors"))
    assert not [k for k in ck if "_orig_mod" in k or k.startswith("module.")]
    model, _, rows = train(cfg1(**c), str(tmp_path / "a"), quiet=True)
    assert type(model) is lengen.Transformer and rows
    train(cfg1(**c), str(tmp_path / "b"), quiet=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:      # exact, dropout included: Inductor seeds its RNG from torch's global one
        assert torch.equal(wa[k], wb[k]), k
    assert all(map(torch.isfinite, torch.tensor(losses(str(tmp_path / "a")))))
    # compiled == eager up to float rounding (without dropout: Inductor draws its own masks)
    for mode in ("compiled", "eager"):
        no_dropout = cfg1(compile=mode == "compiled", steps=3)
        no_dropout.model.dropout = 0.0
        train(no_dropout, str(tmp_path / mode), quiet=True)
    wc, we = weights(tmp_path / "compiled"), weights(tmp_path / "eager")
    for k in wc:
        torch.testing.assert_close(wc[k], we[k], rtol=1e-4, atol=1e-5)
    assert losses(str(tmp_path / "compiled")) == pytest.approx(losses(str(tmp_path / "eager")),
                                                               rel=1e-5)
