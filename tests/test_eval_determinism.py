"""Evaluation is a function of (seed, split, sequence index) only (issue 9 class 7, issue 14 item 2):
the evaluated sequences and the evaluation positions do not depend on the batch size, randomized
evaluation is reproducible, evaluation never touches torch's global RNG, and periodic evaluation
cannot change training."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import lengen
from lengen.eval.evaluate import eval_stream, evaluate
from lengen.tasks import build_task
from lengen.tasks.base import EVAL_BLOCK, block_seed
from lengen.train import train
from lengen.train.loop import prepare


def sequences(task, split, n, batch_size, seed=0):
    return torch.cat([b.inputs for b in task.eval_batches(split, n, batch_size, seed)])


@pytest.mark.parametrize("task,split", [(build_task("flipflop", n_pairs=8), "sparse"),
                                        (build_task("reverse_string"), "len=45")])
def test_sequences_depend_on_seed_split_and_index_only(task, split):
    ref = sequences(task, split, 150, 150)
    for bs in (1, 7, 64, 1000):
        batches = list(task.eval_batches(split, 150, bs, 0))
        assert all(len(b) <= bs for b in batches)
        assert torch.equal(torch.cat([b.inputs for b in batches]), ref), bs
    assert torch.equal(sequences(task, split, 10, 3), ref[:10])     # a prefix, whatever n is
    assert not torch.equal(sequences(task, split, 150, 64, seed=1), ref)
    other = task.splits()[-1] if task.splits()[-1] != split else task.splits()[0]
    assert not torch.equal(sequences(task, other, 10, 10)[:, :5], ref[:10, :5])


def test_block_seeds_are_stable_across_processes():
    code = ("from lengen.tasks.base import block_seed; "
            "print(block_seed(1234, 'sparse', 3), block_seed(1234, 'sparse', 3, 'positions'))")
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONHASHSEED=h), check=True).stdout
           for h in ("1", "2")}
    assert out == {f"{block_seed(1234, 'sparse', 3)} {block_seed(1234, 'sparse', 3, 'positions')}\n"}
    assert block_seed(1234, "sparse", 3) != block_seed(1234, "sparse", 3, "positions")


def randomized_model(eval_mode="randomized"):
    cfg = lengen.resolve({
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "posenc": "learned",
                  "posenc_kwargs": {"max_positions": 64}, "positions": "label",
                  "positions_kwargs": {"max_length": 64, "eval_mode": eval_mode}},
        "task": {"kwargs": {"n_pairs": 8}}})
    task, model = prepare(cfg)
    return task, model


def test_randomized_evaluation_is_reproducible_and_batch_size_free():
    task, model = randomized_model()
    runs = {}
    for bs in (7, 64, 1000, 7):
        state = torch.get_rng_state()
        rows = evaluate(model, task, ["iid", "dense"], n_sequences=150, batch_size=bs, seed=5)
        assert torch.equal(torch.get_rng_state(), state)         # global RNG untouched
        runs.setdefault(bs, []).append(rows)
    first = runs[7][0]
    assert runs[7][1] == first                                   # the same call twice: equal
    for bs in (64, 1000):
        exact = [(r["split"], r["metric"], r["value"]) for r in runs[bs][0] if r["metric"] != "nll"]
        assert exact == [(r["split"], r["metric"], r["value"]) for r in first if r["metric"] != "nll"]
        assert [r["value"] for r in runs[bs][0]] == pytest.approx([r["value"] for r in first],
                                                                  rel=1e-6)
    # the seed matters (a different draw of sequences and positions)
    other = evaluate(model, task, ["iid"], n_sequences=150, batch_size=64, seed=6)
    assert [r["value"] for r in other] != [r["value"] for r in first[:4]]


def test_each_sequence_gets_its_blocks_positions_whatever_the_batch_size():
    task, model = randomized_model()
    model.eval()

    def positions(bs):
        out = {}
        for start, batch, pos in eval_stream(model, task, "iid", 150, bs, seed=0):
            assert pos is not None and pos.shape == (batch.inputs.shape[1],)
            for i in range(len(batch)):
                out[start + i] = pos
        return out

    a, b = positions(7), positions(1000)
    assert sorted(a) == list(range(150))
    for i in range(150):
        assert torch.equal(a[i], b[i]), i
    assert torch.equal(a[0], a[EVAL_BLOCK - 1]) and not torch.equal(a[0], a[EVAL_BLOCK])


def test_deterministic_samplers_keep_whole_batches():
    task, model = randomized_model(eval_mode="spread")
    model.eval()
    pieces = list(eval_stream(model, task, "iid", 150, 150, seed=0))
    assert len(pieces) == 1 and pieces[0][2] is None             # no block cutting needed


def cfg(**train_kw):
    return lengen.resolve({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.2, "posenc": "learned",
                  "posenc_kwargs": {"max_positions": 64}, "positions": "randomized",
                  "positions_kwargs": {"max_length": 64}},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": dict({"steps": 6, "batch_size": 4, "warmup_steps": 0, "log_every": 1,
                       "progress": False}, **train_kw),
        "eval": {"sequences": 20, "batch_size": 8}}).config


def test_periodic_evaluation_does_not_change_training(tmp_path):
    train(cfg(eval_every=0), str(tmp_path / "a"), quiet=True)
    train(cfg(eval_every=1, eval_sequences=20), str(tmp_path / "b"), quiet=True)
    wa = load_file(str(tmp_path / "a" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "model.safetensors"))
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    la = [json.loads(x) for x in open(tmp_path / "a" / "metrics.jsonl")]
    lb = [json.loads(x) for x in open(tmp_path / "b" / "metrics.jsonl")]
    assert [r["loss"] for r in la] == [r["loss"] for r in lb if "loss" in r]
    assert any("eval/iid/seq_acc" in r for r in lb)
    # the final evaluation equals a later evaluation of the saved run
    rows = json.load(open(tmp_path / "a" / "eval.json"))
    _, task, model = lengen.load_run(str(tmp_path / "a"))
    again = evaluate(model, task, ["iid", "sparse", "dense"], n_sequences=20, batch_size=3,
                     seed=1234)
    assert [r["value"] for r in again] == pytest.approx([r["value"] for r in rows], rel=1e-6)


def test_training_positions_have_their_own_stream(tmp_path, monkeypatch):
    """Drawing from torch's global RNG during training (user code, or evaluation as it used to
    be) does not change the training positions: they come from their own generator."""
    from lengen.samplers import RandomizedSampler
    from lengen.tasks.flipflop import FlipFlop

    real_sample, real_batch = RandomizedSampler.sample, FlipFlop.train_batch
    seen = {"a": [], "b": []}
    current = {"run": "a"}

    def spy(self, length, **kw):
        pos = real_sample(self, length, **kw)
        if kw.get("training"):
            assert kw.get("generator") is not None
            seen[current["run"]].append(pos)
        return pos

    def noisy(self, *a, **kw):
        if current["run"] == "b":
            torch.rand(5)                       # consume the global RNG before every step
        return real_batch(self, *a, **kw)

    monkeypatch.setattr(RandomizedSampler, "sample", spy)
    monkeypatch.setattr(FlipFlop, "train_batch", noisy)
    train(cfg(), str(tmp_path / "a"), quiet=True)
    current["run"] = "b"
    train(cfg(), str(tmp_path / "b"), quiet=True)
    assert len(seen["a"]) == 6 and len(seen["b"]) == 6
    for p, q in zip(seen["a"], seen["b"]):
        assert torch.equal(p, q)


def test_periodic_evaluation_on_chosen_splits(tmp_path):
    """train.eval_splits picks the lengths tracked during training (Zhou et al. Figs. 13,
    C.4-C.7); the final evaluation still covers eval.splits; bad names fail at resolve."""
    train(cfg(eval_every=2, eval_sequences=8, eval_splits=["sparse"]), str(tmp_path / "c"),
          quiet=True)
    lines = [json.loads(x) for x in open(tmp_path / "c" / "metrics.jsonl")]
    periodic = [r for r in lines if any(k.startswith("eval/") for k in r)]
    assert [r["step"] for r in periodic] == [2, 4]
    assert all({k.split("/")[1] for k in r if k.startswith("eval/")} == {"sparse"}
               for r in periodic)
    final = json.load(open(tmp_path / "c" / "eval.json"))
    assert {r["split"] for r in final} == {"iid", "sparse", "dense"}
    from lengen.errors import ConfigError

    with pytest.raises(ConfigError, match="train.eval_splits: .*unknown split 'spars'"):
        cfg(eval_splits=["spars"])
