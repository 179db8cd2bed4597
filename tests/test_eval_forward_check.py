"""An evaluation runs the model's per-call size check (lengen.model.memory.check_forward: a memory
estimate and a read of /proc/meminfo) once per batch shape, not once per batch; outside an
evaluation every forward call still checks, and inside one a larger call is still checked."""
from __future__ import annotations

import pytest
import torch

import lengen
from lengen.errors import ConfigError
from lengen.model import memory
from lengen.rundir.load import prepare


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = memory.check_fits

    def check_fits(m, **kw):
        calls.append((kw["batch"], kw["length"]))
        return real(m, **kw)

    monkeypatch.setattr(memory, "check_fits", check_fits)
    return calls


def _model_and_task():
    task, model = prepare(lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                                          "task": {"name": "copy"}}))
    return model, task


def test_evaluation_checks_once_per_batch_shape(counted):
    model, task = _model_and_task()
    lengen.evaluate(model, task, ["len=5"], n_sequences=8, batch_size=2)    # 4 batches
    assert len(counted) == 1, counted
    lengen.evaluate(model, task, ["len=5", "len=7"], n_sequences=8, batch_size=2)
    assert len(counted) == 3, counted             # one per split length, again per evaluation


def test_forward_outside_an_evaluation_checks_every_call(counted):
    model, _ = _model_and_task()
    tokens = torch.zeros(2, 7, dtype=torch.long)
    with torch.inference_mode():
        model.eval()(tokens)
        model(tokens)
    assert len(counted) == 2, counted


def test_a_larger_call_inside_is_still_checked(monkeypatch):
    m = lengen.resolve({}).config.model
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 16 << 30)
    with memory.forward_checks_once():
        memory.check_forward(m, batch=8, length=512, training=False)
        memory.check_forward(m, batch=4, length=256, training=False)      # covered: skipped
        with pytest.raises(ConfigError, match="batch 1 x 4000000 tokens"):
            memory.check_forward(m, batch=1, length=4_000_000, training=False)


def test_a_covered_call_does_not_read_free_memory_again(monkeypatch):
    """Decided (not an oversight, see forward_checks_once): inside, a call no larger than one
    that passed does not re-read the free memory, which the process's own allocator caches lower
    after a batch (so a re-check would refuse a shape that just ran); outside, every call reads
    it and is refused when it no longer fits."""
    m = lengen.resolve({}).config.model
    need = memory.estimate_bytes(m, batch=8, length=512, training=False)["total"]
    free = [need * 2]
    reads = []

    def available(device="cpu"):
        reads.append(free[0])
        return free[0]

    monkeypatch.setattr(memory, "available_bytes", available)
    with memory.forward_checks_once():
        memory.check_forward(m, batch=8, length=512, training=False)
        free[0] = 1 << 20                    # e.g. the allocator's cache after the first batch
        memory.check_forward(m, batch=8, length=512, training=False)   # covered: skipped
        assert len(reads) == 1
        with pytest.raises(ConfigError, match="out of memory"):
            memory.check_forward(m, batch=8, length=513, training=False)  # larger: read again
    assert len(reads) == 2
    with pytest.raises(ConfigError, match="batch 8 x 512 tokens"):
        memory.check_forward(m, batch=8, length=512, training=False)
    assert len(reads) == 3
