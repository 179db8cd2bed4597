"""Training loop: exact resume, interrupt handling, divergence, and real learning."""
from __future__ import annotations

import importlib
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import lengen
from lengen.train import TrainingDiverged, train
from lengen.rundir.checkpoint import latest_checkpoint


def tiny_cfg(**train_kw):
    return lengen.resolve({
        "model": {"attention": "tra", "d_model": 16, "n_layers": 2, "n_heads": 2, "dropout": 0.1},
        "task": {"kwargs": {"n_pairs": 12}},
        "train": dict({"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 2, "progress": False,
                       "log_every": 1}, **train_kw),
        "eval": {"sequences": 16, "batch_size": 8},
    }).config


def weights(run_dir):
    return load_file(os.path.join(run_dir, "model.safetensors"))


def test_resume_reproduces_uninterrupted_training(tmp_path):
    # dropout + data sampling make this sensitive to every RNG stream being restored
    train(tiny_cfg(), str(tmp_path / "a"), quiet=True)
    _, _, partial = train(tiny_cfg(), str(tmp_path / "b"), stop_at=3, quiet=True)
    assert partial is None and latest_checkpoint(str(tmp_path / "b")).endswith("step_0000003")
    _, _, rows = train(tiny_cfg(), str(tmp_path / "b"), quiet=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)
    la = [json.loads(x)["loss"] for x in open(tmp_path / "a" / "metrics.jsonl")]
    lb = [json.loads(x)["loss"] for x in open(tmp_path / "b" / "metrics.jsonl")]
    assert la == lb and len(la) == 6


def test_different_config_refuses_to_resume(tmp_path):
    from lengen.errors import RunDirError

    train(tiny_cfg(), str(tmp_path), stop_at=2, quiet=True)
    stored = open(tmp_path / "config.json").read()
    cfg = tiny_cfg()
    cfg.model.d_model = 32
    with pytest.raises(RunDirError, match=r"different config \(model.d_model: 16 -> 32\).*--fresh"):
        train(cfg, str(tmp_path), quiet=True)
    with pytest.raises(RunDirError, match=r"train.lr: 0.003 -> 0.001; train.seed: 0 -> 1"):
        train(tiny_cfg(lr=1e-3, seed=1), str(tmp_path), quiet=True)
    assert open(tmp_path / "config.json").read() == stored       # never rewritten by a refusal
    # keys that do not change what is computed may differ
    cfg = tiny_cfg(threads=1, log_every=2, ckpt_every=1, progress=False)
    cfg.eval.sequences = 8
    _, _, rows = train(cfg, str(tmp_path), quiet=True)
    assert rows[0]["sequences"] == 8


def test_keyboard_interrupt_keeps_a_resumable_checkpoint(tmp_path, monkeypatch):
    from lengen.tasks.flipflop import FlipFlop

    calls = {"n": 0}
    orig = FlipFlop.train_batch

    def flaky(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return orig(self, *a, **kw)

    monkeypatch.setattr(FlipFlop, "train_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        train(tiny_cfg(), str(tmp_path / "b"), quiet=True)
    assert latest_checkpoint(str(tmp_path / "b")).endswith("step_0000004")
    monkeypatch.setattr(FlipFlop, "train_batch", orig)
    train(tiny_cfg(), str(tmp_path / "b"), quiet=True)
    train(tiny_cfg(), str(tmp_path / "a"), quiet=True)
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


def test_nan_loss_stops_with_clear_error_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    loop = importlib.import_module("lengen.train.loop")  # lengen.train is also the function

    orig, calls = loop.loss_fn, {"n": 0}

    def poisoned(logits, batch):
        calls["n"] += 1
        loss = orig(logits, batch)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(loop, "loss_fn", poisoned)
    with pytest.raises(TrainingDiverged, match="loss is nan at step 3"):
        train(tiny_cfg(ckpt_every=2), str(tmp_path), quiet=True)
    ck = latest_checkpoint(str(tmp_path))
    assert ck.endswith("step_0000002")
    for v in load_file(os.path.join(ck, "model.safetensors")).values():
        assert torch.isfinite(v).all()


def test_learned_table_too_small_fails_before_training(tmp_path):
    cfg = tiny_cfg()
    cfg.model.posenc, cfg.model.posenc_kwargs = "learned", {"max_positions": 10}
    with pytest.raises(ValueError, match="learned positional table has 10 rows"):
        train(cfg, str(tmp_path), quiet=True)
    assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_odd_rope_head_dim_fails_before_training(tmp_path):
    cfg = tiny_cfg()
    cfg.model.posenc, cfg.model.d_model, cfg.model.n_heads = "rope", 18, 2
    with pytest.raises(ValueError, match="even head dim"):
        train(cfg, str(tmp_path), quiet=True)


@pytest.mark.parametrize("attention,floor", [("tra", 0.55), ("softmax", 0.7)])
def test_tiny_model_learns_flipflop_iid(tmp_path, attention, floor):
    """Real learning in 250 steps: per-read accuracy above the 50% of guessing the read bit (1000
    evaluation sequences x 16 reads keep the sampling error near 0.005). The floors hold with a
    margin over seeds 0-7 at 1 and 2 torch threads (a change of float path, as another CPU
    would make): softmax NoPE 0.78-0.85 (equal at both thread counts); TRA 0.94-1.0 on 14 of
    the 16, but 0.58 and 0.79 on two seeds at 2 threads (seed 0, tested here: 0.94 / 0.94).
    TRA's outcome at this budget swings with the float path, so its floor only says "learned
    beyond chance"; the step-by-step maths is tested against references elsewhere."""
    cfg = lengen.resolve({
        "model": {"attention": attention, "posenc": "nope", "d_model": 32, "n_layers": 2, "n_heads": 2},
        "task": {"kwargs": {"n_pairs": 16}},
        "train": {"steps": 250, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20,
                  "progress": False, "seed": 0},
        "eval": {"sequences": 1000, "splits": ["iid"]},
    })
    _, _, rows = train(cfg, str(tmp_path), quiet=True)
    acc = {r["metric"]: r["value"] for r in rows}
    assert acc["token_acc"] > floor, acc


def test_tensorboard_scalars_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(tiny_cfg(tensorboard=True, eval_every=3), str(tmp_path), quiet=True)
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loss", "lr", "grad_norm", "eval/iid/seq_acc"} <= set(tags)
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3, 4, 5, 6]
