"""The memory / work estimate that refuses impossible sizes before anything is built (issue 30),
and the classification of allocation and disk-full failures."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
import torch

import lengen
from lengen.errors import ConfigError
from lengen.fileio import is_disk_full
from lengen.model import memory as mem


@pytest.mark.parametrize("kw", [dict(), dict(mlp="gelu"), dict(tie_embeddings=True),
                                dict(d_model=48, n_layers=3, n_heads=3, d_ff=80, vocab_size=50)])
def test_parameter_count_is_a_tight_lower_bound(kw):
    """What the estimate counts is in the real model (norms and biases are what it leaves out)."""
    cfg = lengen.ModelConfig(**dict(dict(vocab_size=20, d_model=32, n_layers=2, n_heads=4), **kw))
    real = sum(p.numel() for p in lengen.Transformer(cfg).parameters())
    assert 0.95 * real <= mem.parameter_count(cfg) <= real


def test_estimate_grows_with_each_size_and_lean_attention_is_smaller():
    cfg = lengen.ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4)
    base = mem.estimate_bytes(cfg, batch=4, length=64, training=True)
    assert mem.estimate_bytes(cfg, batch=8, length=64, training=True)["total"] > base["total"]
    assert mem.estimate_bytes(cfg, batch=4, length=128, training=True)["attention"] == \
        4 * base["attention"]                                   # the square of the length
    assert mem.estimate_bytes(cfg, batch=4, length=64, training=False)["total"] < base["total"]
    naive = mem.estimate_bytes(cfg, batch=1, length=4096, training=False, lean=False)
    lean = mem.estimate_bytes(cfg, batch=1, length=4096, training=False, lean=True)
    assert lean["attention"] * 16 == naive["attention"]        # block 256 of 4096 keys


def test_check_fits_names_the_culprit(monkeypatch):
    cfg = lengen.ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4)
    monkeypatch.setattr(mem, "available_bytes", lambda device="cpu": 1 << 20)
    with pytest.raises(ConfigError, match="out of memory .*attention scores.*model.n_heads=4"):
        mem.check_fits(cfg, batch=64, length=2048, training=True, sizes="batch 64")
    with pytest.raises(ConfigError, match="building this model.*the weights"):
        mem.check_fits(lengen.ModelConfig(d_model=1024, n_layers=8, n_heads=8), batch=0,
                       length=0, training=False)
    mem.check_fits(cfg, batch=1, length=8, training=False)      # 1 MiB is enough for this
    monkeypatch.setattr(mem, "available_bytes", lambda device="cpu": None)
    mem.check_fits(cfg, batch=10 ** 6, length=10 ** 6, training=True)    # unknown: no refusal


def test_check_work_counts_every_split():
    cfg = lengen.ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4)
    one = mem.forward_flops(cfg, sequences=10, length=100)
    assert mem.check_work(cfg, sequences=10, length=[100, 100]) == pytest.approx(2 * one)
    with pytest.raises(ConfigError, match="floating-point operations"):
        mem.check_work(cfg, sequences=10 ** 9, length=1000)
    mem.check_work(cfg, sequences=10 ** 9, length=1000, device="cuda")   # a GPU: not refused


@pytest.mark.parametrize("exc,oom", [
    (MemoryError(), True),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("shape mismatch"), False), (ValueError("out of memory"), False)])
def test_is_out_of_memory(exc, oom):
    assert mem.is_out_of_memory(exc) is oom


@pytest.mark.parametrize("exc,full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 33856 vs 33808"), True),
    (Exception('Error while serializing: IoError(Os { code: 28, kind: StorageFull })'), True),
    (OSError(errno.EACCES, "Permission denied"), False), (RuntimeError("boom"), False)])
def test_is_disk_full(exc, full):
    assert is_disk_full(exc) is full


def test_out_of_memory_message_keeps_the_size():
    e = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                     "allocate memory: you tried to allocate 12000000000000 bytes. Error code 12")
    text = mem.out_of_memory_message(e)
    assert text.startswith("out of memory (tried to allocate 12000000000000 bytes")
    assert "model.d_model" in text and "eval.batch_size" in text


# ---- language-model evaluation applies the head in blocks (issue 55) -----------------------------

PEAK_SCRIPT = r"""
import json, sys
import lengen
from lengen.eval.evaluate import evaluate
from lengen.eval.perplexity import eval_logits_at_once
from lengen.model.memory import estimate_bytes
from lengen.rundir.load import prepare

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

L, B = 256, 16
resolved = lengen.resolve({}, ["task.name=text", "model.d_model=16", "model.n_layers=1",
                               "model.n_heads=2", f"eval.splits=[len={L}]"], check_device=False)
task, model = prepare(resolved)
cfg = resolved.config
model.eval()
evaluate(model, task, [f"len={L}"], n_sequences=1, batch_size=1, seed=0)      # warm-up
base = status("VmRSS")
evaluate(model, task, [f"len={L}"], n_sequences=B, batch_size=B, seed=0)
e = estimate_bytes(cfg.model, batch=B, length=L, training=False,
                   logits_at_once=eval_logits_at_once(task, cfg.model.vocab_size))
print(json.dumps({"rise": status("VmHWM") - base, "logits": e["logits"],
                  "full": B * L * cfg.model.vocab_size * 4}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_lm_evaluation_logits_estimate_matches_a_measured_peak():
    """Perplexity evaluation holds one block of logits (and its log-probabilities) at a time: the
    estimate counts that block, which is what the measured peak rise is made of, and not the
    batch x length x 50257 logits (25 x the measured rise here) it once counted."""
    # glibc's malloc would serve the measured evaluation partly from heap pages the warm-up
    # freed, so the RSS rise varied 17-67 MB between runs (a flaky bound); with large blocks
    # mapped and returned to the system, the rise is the evaluation's own peak (about 34 MB,
    # within 1% over runs)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072",
           "MALLOC_TRIM_THRESHOLD_": "131072"}
    proc = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    assert m["logits"] <= 1.5 * m["rise"]          # no more than what evaluation allocates
    assert m["full"] > 10 * m["rise"]              # the old estimate's count was far above it


def test_the_readme_lm_example_fits_in_24_gib(monkeypatch):
    """``lengen train task.name=text train.steps=20 model.d_model=64 model.n_layers=2`` was
    refused on a 24 GiB machine (51.5 GiB of logits counted)."""
    from lengen.model import memory
    from lengen.rundir.load import prepare
    from lengen.train.loop import check_memory

    resolved = lengen.resolve({}, ["task.name=text", "train.steps=20", "model.d_model=64",
                                   "model.n_layers=2"], check_device=False)
    task, _ = prepare(resolved)
    cfg = resolved.config
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 24 << 30)
    check_memory(cfg, task)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 64 << 20)
    with pytest.raises(ConfigError, match="out of memory"):      # the check still bites
        check_memory(cfg, task)


def test_check_forward_refuses_millions_of_tokens(monkeypatch):
    from lengen.model import memory

    m = lengen.resolve({}).config.model
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 16 << 30)
    memory.check_forward(m, batch=8, length=512, training=False)
    with pytest.raises(ConfigError, match="batch 1 x 4000000 tokens"):
        memory.check_forward(m, batch=1, length=4_000_000, training=False)


def test_transformer_forward_refuses_millions_of_tokens_up_front(monkeypatch):
    """``Transformer.forward`` (the Python API) checks the call's size before any work: a
    4-million-token sequence is refused with the size named, not left to the allocator."""
    from lengen.model import ModelConfig, Transformer, memory

    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 16 << 30)
    model = Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=1, n_heads=2)).eval()
    model(torch.zeros(2, 64, dtype=torch.long))                      # an ordinary call runs
    with pytest.raises(ConfigError, match="batch 1 x 4000000 tokens"):
        model(torch.zeros(1, 4_000_000, dtype=torch.long))
