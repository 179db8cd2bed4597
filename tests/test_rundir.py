"""Run-directory safety (issue 9, class 5 and 6): crash points inside checkpoint writing,
truncated and corrupt files, pruning, a concurrent process, metrics after a hard kill, config
changes, task state, and an exact resume after a real SIGINT."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

import lengen
from lengen.errors import RunDirError
from lengen.train import TrainingDiverged, train
from lengen.rundir.checkpoint import checkpoint_problem, latest_checkpoint, list_checkpoints

ckpt_mod = importlib.import_module("lengen.rundir.checkpoint")
loop = importlib.import_module("lengen.train.loop")


def cfg(**train_kw):
    # randomized positions + dropout: every random stream matters for an exact resume
    return lengen.resolve({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.1,
                  "posenc": "learned", "positions": "randomized",
                  "posenc_kwargs": {"max_positions": 64}, "positions_kwargs": {"max_length": 64}},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": dict({"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 0,
                       "ckpt_every": 1, "log_every": 1, "progress": False}, **train_kw),
        "eval": {"sequences": 8, "batch_size": 8},
    }).config


def weights(run):
    return load_file(os.path.join(run, "model.safetensors"))


def assert_same_run(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    la = [json.loads(x) for x in open(os.path.join(a, "metrics.jsonl"))]
    lb = [json.loads(x) for x in open(os.path.join(b, "metrics.jsonl"))]
    strip = [[{k: v for k, v in r.items() if k != "time"} for r in rows] for rows in (la, lb)]
    assert strip[0] == strip[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("ref") / "run")
    train(cfg(), run, quiet=True)
    return run


class Crash(Exception):
    """Stands for the process dying at that point (nothing after it runs)."""


CRASH_POINTS = ["save_weights", "torch.save", "meta", "rename", "latest", "prune"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_inside_save_checkpoint_leaves_a_usable_checkpoint(point, reference, tmp_path,
                                                                 monkeypatch):
    run = str(tmp_path / "run")
    calls = {"n": 0}

    def crash_on_third(real):
        def wrapped(*a, **kw):
            calls["n"] += 1
            if calls["n"] == 3:
                raise Crash(point)
            return real(*a, **kw)
        return wrapped

    if point == "save_weights":
        monkeypatch.setattr(ckpt_mod, "save_weights", crash_on_third(ckpt_mod.save_weights))
    elif point == "torch.save":
        monkeypatch.setattr(ckpt_mod.torch, "save", crash_on_third(torch.save))
    elif point == "meta":
        monkeypatch.setattr(ckpt_mod.json, "dump", crash_on_third(json.dump))
    elif point == "rename":        # the step folder's rename into place (the 2nd os.replace)
        real_replace, n = os.replace, {"k": 0}

        def replace(src, dst):
            if os.path.basename(dst).startswith("step_"):
                n["k"] += 1
                if n["k"] == 3:
                    raise Crash(point)
            return real_replace(src, dst)
        monkeypatch.setattr(ckpt_mod.os, "replace", replace)
    elif point == "latest":
        monkeypatch.setattr(ckpt_mod, "_write_latest", crash_on_third(ckpt_mod._write_latest))
    else:
        monkeypatch.setattr(ckpt_mod, "_prune", crash_on_third(ckpt_mod._prune))
    with pytest.raises(Crash):
        train(cfg(), run, quiet=True)
    monkeypatch.undo()
    # the instant of the crash: a usable checkpoint exists and passes the full checksum
    ck = latest_checkpoint(run)
    assert ck is not None and checkpoint_problem(ck, deep=True) is None
    train(cfg(), run, quiet=True)
    assert_same_run(reference, run)
    assert not [d for d in os.listdir(os.path.join(run, "checkpoints")) if "." in d]


def test_resume_skips_truncated_and_corrupt_checkpoints(reference, tmp_path, capsys):
    run = str(tmp_path / "run")
    train(cfg(keep_checkpoints=3), run, stop_at=4, quiet=True)
    newest, second = list_checkpoints(run)[:2]
    with open(os.path.join(newest, "state.pt"), "r+b") as f:      # truncated
        f.truncate(50)
    path = os.path.join(second, "model.safetensors")             # same size, flipped bytes
    data = bytearray(open(path, "rb").read())
    data[-8:] = bytes(8)
    open(path, "wb").write(bytes(data))
    train(cfg(keep_checkpoints=3), run, quiet=True)
    err = capsys.readouterr().err
    assert "step_0000004 is unusable" in err and "truncated" in err
    assert "step_0000003 is unusable" in err and "checksum" in err
    assert_same_run(reference, run)


def test_no_usable_checkpoint_refuses_instead_of_restarting(tmp_path):
    run = str(tmp_path / "run")
    train(cfg(), run, stop_at=2, quiet=True)
    for ck in list_checkpoints(run):
        os.remove(os.path.join(ck, "state.pt"))
    metrics = open(os.path.join(run, "metrics.jsonl")).read()
    with pytest.raises(RunDirError, match="none is usable.*Not restarting from step 0"):
        train(cfg(), run, quiet=True)
    assert open(os.path.join(run, "metrics.jsonl")).read() == metrics


def test_pruning_never_removes_the_newest_usable_checkpoint(tmp_path, capsys):
    run = str(tmp_path / "run")
    train(cfg(ckpt_every=2, keep_checkpoints=1), run, stop_at=4, quiet=True)
    (only,) = list_checkpoints(run)
    assert only.endswith("step_0000004")
    # a newer but broken folder (e.g. a copy gone wrong) must not push the usable one out
    broken = only.replace("0004", "0005")
    shutil.copytree(only, broken)
    os.remove(os.path.join(broken, "state.pt"))
    ckpt_mod._prune(os.path.dirname(only), keep=1)             # keeps 4: 5 is not usable
    assert [os.path.basename(p) for p in list_checkpoints(run)] == ["step_0000005", "step_0000004"]
    train(cfg(ckpt_every=2, keep_checkpoints=1), run, stop_at=5, quiet=True)
    assert "step_0000005 is unusable" in capsys.readouterr().err
    assert [os.path.basename(p) for p in list_checkpoints(run)] == ["step_0000005"]
    assert checkpoint_problem(list_checkpoints(run)[0], deep=True) is None


def test_a_second_process_is_refused_while_the_first_holds_the_run(tmp_path):
    run = str(tmp_path / "run")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from lengen.rundir.layout import RunDirLock
        with RunDirLock({run!r}, "holding"):
            print("locked", flush=True)
            sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=f"in use by another lengen process \\(pid "
                                              f"{holder.pid} on .*holding"):
            train(cfg(), run, quiet=True)
        assert not os.path.exists(os.path.join(run, "metrics.jsonl"))
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    train(cfg(steps=1), run, quiet=True)                    # released: usable again


def test_hard_kill_leftovers_in_metrics_are_dropped_on_resume(reference, tmp_path, capsys):
    run = str(tmp_path / "run")
    train(cfg(ckpt_every=3), run, stop_at=3, quiet=True)
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:   # what a kill -9 at step 5 leaves
        f.write(json.dumps({"step": 4, "loss": 9.0}) + "\n" + json.dumps({"step": 5, "loss": 9.0})
                + "\n" + '{"step": 6, "lo')
    train(cfg(ckpt_every=3), run, quiet=True)
    assert "dropped 3 line(s)" in capsys.readouterr().err
    steps = [json.loads(x)["step"] for x in open(os.path.join(run, "metrics.jsonl"))]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_no_resume_refuses_and_fresh_moves_the_old_run_aside(tmp_path):
    run = str(tmp_path / "run")
    train(cfg(steps=2), run, quiet=True)
    before = open(os.path.join(run, "metrics.jsonl")).read()
    with pytest.raises(RunDirError, match="already holds a run.*--fresh"):
        train(cfg(steps=2), run, resume=False, quiet=True)
    assert open(os.path.join(run, "metrics.jsonl")).read() == before
    train(cfg(steps=3, lr=1e-2), run, fresh=True, quiet=True)
    (old,) = os.listdir(os.path.join(run, "previous"))
    assert open(os.path.join(run, "previous", old, "metrics.jsonl")).read() == before
    assert [json.loads(x)["step"] for x in open(os.path.join(run, "metrics.jsonl"))] == [1, 2, 3]


def test_config_json_unreadable_falls_back_to_the_checkpoint_config(tmp_path):
    run = str(tmp_path / "run")
    train(cfg(), run, stop_at=2, quiet=True)
    open(os.path.join(run, "config.json"), "w").write("{trunc")
    with pytest.raises(RunDirError, match=r"train.lr: 0.003 -> 0.01"):
        train(cfg(lr=1e-2), run, quiet=True)
    train(cfg(), run, quiet=True)
    assert json.load(open(os.path.join(run, "config.json")))["train"]["lr"] == 3e-3


def test_a_run_stored_before_a_new_config_key_still_resumes(tmp_path):
    """A stored config lacking keys lengen added later (here model.init / model.embed_dropout
    and train.eval_splits) resumes: the missing keys take their defaults."""
    run = str(tmp_path / "run")
    train(cfg(), run, stop_at=2, quiet=True)
    for path in [os.path.join(run, "config.json")] + [
            os.path.join(p, "meta.json") for p in list_checkpoints(run)]:
        d = json.load(open(path))
        old = d["config"] if "config" in d else d
        for section, key in (("model", "init"), ("model", "embed_dropout"),
                             ("train", "eval_splits")):
            old[section].pop(key, None)
        json.dump(d, open(path, "w"))
    train(cfg(), run, quiet=True)
    assert json.load(open(os.path.join(run, "config.json")))["model"]["init"] == "normal"


def test_divergence_names_only_a_checkpoint_that_exists(tmp_path, monkeypatch):
    orig = loop.loss_fn
    monkeypatch.setattr(loop, "loss_fn", lambda logits, batch: orig(logits, batch) * float("nan"))
    with pytest.raises(TrainingDiverged, match="No checkpoint was written yet") as info:
        train(cfg(ckpt_every=0), str(tmp_path / "a"), quiet=True)
    assert "last good checkpoint" not in str(info.value)
    assert latest_checkpoint(str(tmp_path / "a")) is None


class CountingFlipFlop(lengen.tasks.flipflop.FlipFlop):
    """Flip-flop that counts its training batches (task state that must survive a resume)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches = 0

    def train_batch(self, batch_size, generator):
        self.batches += 1
        return super().train_batch(batch_size, generator)

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state):
        self.batches = state.get("batches", 0)


def test_task_state_is_checkpointed(tmp_path, monkeypatch):
    monkeypatch.setitem(lengen.TASKS, "counting", CountingFlipFlop)
    c = lengen.resolve({"task": {"name": "counting", "kwargs": {"n_pairs": 6}},
                        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                        "train": {"steps": 5, "batch_size": 2, "progress": False}})
    _, task, _ = train(c, str(tmp_path), stop_at=3, quiet=True)
    assert task.batches == 3
    _, task, _ = train(c, str(tmp_path), quiet=True)
    assert task.batches == 5                 # 3 restored from the checkpoint + 2 more


SIGINT_SCRIPT = """
import os, signal, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
import test_rundir
from lengen.tasks.flipflop import FlipFlop
from lengen.train import train
real, n = FlipFlop.train_batch, {{"k": 0}}
def train_batch(self, *a, **kw):
    batch = real(self, *a, **kw)
    n["k"] += 1
    if n["k"] == 3:                    # Ctrl-C right after the batch of step 3 was drawn
        os.kill(os.getpid(), signal.{sig})
    return batch
FlipFlop.train_batch = train_batch
try:
    train(test_rundir.cfg(ckpt_every=0), {run!r}, quiet=True)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_resume_equals_an_uninterrupted_run(reference, tmp_path, sig):
    """Ctrl-C, and SIGTERM (a scheduler's time limit, docker stop) the same way."""
    run = str(tmp_path / "run")
    script = SIGINT_SCRIPT.format(tests=os.path.dirname(__file__), run=run, sig=sig)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "finishing this step and saving a checkpoint" in proc.stderr
    # the step whose batch was drawn finished; the checkpoint is at that step boundary
    assert latest_checkpoint(run).endswith("step_0000003")
    train(cfg(ckpt_every=0), run, quiet=True)
    assert_same_run(reference, run)


def test_the_sigint_handler_is_restored(tmp_path):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    train(cfg(steps=1), str(tmp_path), quiet=True)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_sweep_reevaluates_a_run_with_a_truncated_eval_json(tmp_path, monkeypatch):
    from lengen.sweep import run_sweep

    sweep_local = importlib.import_module("lengen.sweep.local")   # run_one calls its train
    out = str(tmp_path / "sweep")
    runs = {"a": {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "task": {"kwargs": {"n_pairs": 6}},
                  "train": {"steps": 3, "batch_size": 4, "progress": False},
                  "eval": {"sequences": 8}}}
    first = run_sweep(runs, out, log=None)
    path = os.path.join(out, "a", "eval.json")
    open(path, "r+b").truncate(30)
    calls = []
    monkeypatch.setattr(sweep_local, "train", lambda *a, **kw: calls.append(a) or (None, None, []))
    res = run_sweep(runs, out, log=None)
    assert res.ok and res.status["a"]["status"] == "done" and calls == []    # not retrained
    assert res.rows == first.rows
    assert json.load(open(path)) == [{k: v for k, v in r.items() if k != "status"}
                                     for r in first.rows]
