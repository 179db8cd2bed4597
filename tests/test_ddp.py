"""Data-parallel training (lengen.train.distributed) on CPU with gloo and 2 processes: gradients
equal single-process training on the global batch, a 2-process run equals a 1-process run, a
SIGKILLed torchrun job resumes bit-exactly, resuming at another world size continues the run, and
rank 0's run-directory errors (a held lock) fail every rank cleanly.

Ranks are spawned processes that join one gloo group (``run_ranks``) and run a list of jobs in it,
so the ~2 s start-up of a process is paid once per test; one test goes through the real
``torchrun -m lengen train`` command line."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
from safetensors.torch import load_file

import lengen
from lengen.rundir.checkpoint import latest_checkpoint
from lengen.samplers import SAMPLERS, PositionSampler

pytestmark = pytest.mark.skipif(not torch.distributed.is_available()
                                or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


class RowOffsetPositions(PositionSampler):
    """Test sampler: per sequence and batch-aware, row b is 0..T-1 stretched by 1 + s_b / 8 with
    s_b = its length / 4 plus (training) a random integer in 0..7, so a wrong row slice of the
    positions shows even through a relative scheme."""
    per_instance, uses_batch, random_at_eval = True, True, False

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        base = torch.arange(length, dtype=torch.float32, device=device)
        if batch_size is None:
            return base
        shift = (lengths.float() / 4)[:, None] if lengths is not None else 0
        if training:
            shift = shift + torch.randint(0, 8, (batch_size, 1), generator=generator).float()
        return base * (1 + shift / 8)

    def max_position(self, length):
        return float((length - 1) * (1 + (8 + length / 4) / 8))


def register_sampler():
    SAMPLERS.setdefault("test_row_offset", RowOffsetPositions)


def copy_cfg(**train_kw):
    """A decoder task with rows of different lengths (uneven token counts per rank) and
    per-sequence positions (the sampler is registered by the caller)."""
    return {"model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "posenc": "rope",
                      "attention": "tra", "positions": "test_row_offset"},
            "task": {"name": "copy", "kwargs": {"max_train_length": 6}},
            "train": dict({"steps": 4, "batch_size": 6, "lr": 3e-3, "warmup_steps": 1,
                           "log_every": 1, "progress": False, "threads": 1}, **train_kw),
            "eval": {"sequences": 8, "batch_size": 8, "splits": ["len=3"]}}


def flip_cfg(**train_kw):
    """Dropout and randomized positions: every random stream matters for an exact resume."""
    return {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.1,
                      "posenc": "learned", "positions": "randomized",
                      "posenc_kwargs": {"max_positions": 64}, "positions_kwargs": {"max_length": 64}},
            "task": {"kwargs": {"n_pairs": 6}},
            "train": dict({"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 0,
                           "ckpt_every": 2, "log_every": 1, "progress": False, "threads": 1},
                          **train_kw),
            "eval": {"sequences": 8, "batch_size": 8}}


# ---- running ranks ------------------------------------------------------------------------------

def _rank_main(rank, world, store, jobs, queue):
    # torchrun's environment (the loop reads RANK / WORLD_SIZE / LOCAL_RANK), but the group
    # meets through a file store: a TCP port picked by binding port 0 and releasing it could be
    # taken by another process before rank 0 binds it again (a rare, unreproducible failure)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    register_sampler()
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                         world_size=world)
    results = []
    for fn, args in jobs:
        try:
            results.append(("ok", fn(*args)))
        except Exception as e:  # noqa: BLE001 - reported to the test
            results.append(("error", f"{type(e).__name__}: {e}"))
    torch.distributed.destroy_process_group()
    queue.put((rank, pickle.dumps(results)))     # plain bytes: no shared-memory tensors


def run_ranks(jobs, world=2, timeout=300):
    """Run ``jobs`` ([(fn, args)], module-level functions) in order on ``world`` spawned ranks
    sharing one gloo process group; returns each rank's [(status, result)]."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store_dir = tempfile.mkdtemp(prefix="lengen-ddp-")
    store = os.path.join(store_dir, "store")          # must not exist before the group meets
    procs = [ctx.Process(target=_rank_main, args=(r, world, store, jobs, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    try:
        for _ in range(world):
            rank, results = queue.get(timeout=timeout)
            out[rank] = pickle.loads(results)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        shutil.rmtree(store_dir, ignore_errors=True)
    return [out[r] for r in range(world)]


def job_train(cfg_dict, run_dir, kwargs=None):
    _, _, rows = lengen.train(lengen.resolve(cfg_dict), run_dir, quiet=True, **(kwargs or {}))
    return rows


def spy_grads():
    """Record the gradients the loop clips at its first step (all-reduced ones under DDP)."""
    captured = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, *a, **kw):
        params = list(params)
        if not captured:
            captured.append([p.grad.detach().clone() for p in params])
        return real(params, *a, **kw)

    spy.__wrapped__ = real
    return captured, spy


def job_first_grads(cfg_dict, run_dir):
    captured, spy = spy_grads()
    torch.nn.utils.clip_grad_norm_ = spy
    job_train(cfg_dict, run_dir)
    return captured[0]


def job_hold_lock_then_train(cfg_dict, run_dir):
    """Rank 0's lock is held by 'another process' (an open RunDirLock in rank 0)."""
    from lengen.rundir.layout import RunDirLock

    if torch.distributed.get_rank() == 0:
        with RunDirLock(run_dir, "test"):
            return job_train(cfg_dict, run_dir)
    return job_train(cfg_dict, run_dir)


def weights(run):
    return load_file(os.path.join(run, "model.safetensors"))


def metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(x).items() if k != "time"} for x in f]


def assert_close_runs(a, b, exact):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        tol = dict(rtol=0, atol=0) if exact else dict(rtol=2e-4, atol=2e-5)
        torch.testing.assert_close(wa[k], wb[k], msg=k, **tol)
    ma, mb = metrics(a), metrics(b)
    assert [m["step"] for m in ma] == [m["step"] for m in mb]
    if exact:
        assert ma == mb
    else:
        for x, y in zip(ma, mb):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k] == pytest.approx(y[k], rel=1e-4, abs=1e-5), (k, x, y)


# ---- tests --------------------------------------------------------------------------------------

def test_two_ranks_equal_one_process_on_the_global_batch(tmp_path, monkeypatch):
    """Gradients after one step (all-reduced on each rank) equal single-process gradients on the
    concatenated batch; a 4-step run matches in weights, losses, grad norms and evaluation."""
    monkeypatch.setitem(SAMPLERS, "test_row_offset", RowOffsetPositions)
    cfg = copy_cfg()
    captured, spy = spy_grads()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    torch.set_num_threads(1)
    _, _, single_rows = lengen.train(lengen.resolve(cfg), str(tmp_path / "single"), quiet=True)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy.__wrapped__)
    ranks = run_ranks([(job_first_grads, (cfg, str(tmp_path / "ddp")))])
    (s0, g0), (s1, g1) = ranks[0][0], ranks[1][0]
    assert s0 == s1 == "ok", (g0, g1)
    names = [n for n, _ in lengen.Transformer(lengen.resolve(cfg).config.model).named_parameters()]
    assert len(g0) == len(captured[0]) == len(names)
    for name, a, b, ref in zip(names, g0, g1, captured[0]):
        assert torch.equal(a, b), name                  # all-reduced: identical on the ranks
        assert ref.abs().max() > 0, name                # the test sees real gradients
        torch.testing.assert_close(a, ref, rtol=1e-5, atol=1e-6, msg=name)
    assert_close_runs(str(tmp_path / "single"), str(tmp_path / "ddp"), exact=False)
    ddp_rows = json.load(open(tmp_path / "ddp" / "eval.json"))
    assert [r["value"] for r in ddp_rows] == pytest.approx([r["value"] for r in single_rows],
                                                           rel=1e-4)
    # rank 0 alone wrote the run directory (one metrics line per step, no stray files)
    assert sorted(os.listdir(tmp_path / "ddp")) == sorted(os.listdir(tmp_path / "single"))


def test_world_size_change_on_resume_and_a_held_lock(tmp_path, capsys):
    """2 -> 1 and 1 -> 2 processes in the middle of a run continue it (equal to the
    uninterrupted single-process run within fp32 rounding, dropout 0); a lock held where rank 0
    runs fails both ranks with the same RunDirError; a global batch not divisible by the world
    size fails before any file is made."""
    cfg = flip_cfg()
    cfg["model"]["dropout"] = 0.0
    single, a, b, locked = (str(tmp_path / n) for n in ("single", "a", "b", "locked"))
    torch.set_num_threads(1)
    lengen.train(lengen.resolve(cfg), single, quiet=True)
    lengen.train(lengen.resolve(cfg), b, quiet=True, stop_at=3)       # 1 process, then 2
    odd = dict(cfg, train=dict(cfg["train"], batch_size=5))
    ranks = run_ranks([(job_train, (cfg, a, {"stop_at": 3})),          # 2 processes, then 1
                       (job_train, (cfg, b)),
                       (job_hold_lock_then_train, (cfg, locked)),
                       (job_train, (odd, str(tmp_path / "odd")))])
    for r in (0, 1):
        assert [s for s, _ in ranks[r][:2]] == ["ok", "ok"], ranks[r]
        status, err = ranks[r][2]
        assert status == "error" and err.startswith("RunDirError") and "in use by" in err, err
        status, err = ranks[r][3]
        assert status == "error" and "train.batch_size=5 is the global batch" in err, err
    assert ranks[0][1][1] is not None and ranks[1][1][1] is None     # rows on rank 0 only
    assert not os.path.exists(os.path.join(locked, "config.json"))
    assert not os.path.exists(tmp_path / "odd")
    state = torch.load(os.path.join(latest_checkpoint(a), "state.pt"), weights_only=True)
    assert state["step"] == 3 and state["world_size"] == 2 and len(state["rank_rng"]) == 2
    capsys.readouterr()
    lengen.train(lengen.resolve(cfg), a, quiet=True)
    assert "resuming a run saved by 2 process(es) with 1" in capsys.readouterr().err
    assert_close_runs(single, a, exact=False)
    assert_close_runs(single, b, exact=False)


TORCHRUN_KILL = """
    import importlib, os, signal, sys
    loop = importlib.import_module("lengen.train.loop")   # lengen.train is also the function
    real = loop.save_checkpoint
    def save(run_dir, step, *a, **kw):          # rank 0 dies right after writing step 4
        out = real(run_dir, step, *a, **kw)
        if step == {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    loop.save_checkpoint = save
    from lengen.cli import main
    sys.exit(main())
"""


def torchrun(args, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_sigkilled_torchrun_job_resumes_equal_to_an_uninterrupted_one(tmp_path):
    cfg = flip_cfg()
    overrides = [f"{k}={json.dumps(v)}" for section in ("model", "task", "train", "eval")
                 for k, v in _flatten(cfg[section], section)]
    killed = str(tmp_path / "killed")
    script = tmp_path / "kill_after_ckpt.py"
    script.write_text(textwrap.dedent(TORCHRUN_KILL.format(kill_at=4)))
    proc = torchrun([str(script), "train", "--run-dir", killed, *overrides])
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert latest_checkpoint(killed).endswith("step_0000004")
    assert not os.path.exists(os.path.join(killed, "model.safetensors"))
    assert [m["step"] for m in metrics(killed)] == [1, 2, 3, 4]
    proc = torchrun(["-m", "lengen", "train", "--run-dir", killed, *overrides])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("run directory:") == 1 and "seq_acc" in proc.stdout   # rank 0 only
    ranks = run_ranks([(job_train, (cfg, str(tmp_path / "whole")))])
    assert ranks[0][0][0] == "ok", ranks
    assert_close_runs(str(tmp_path / "whole"), killed, exact=True)


def _flatten(d, prefix):
    for k, v in d.items():
        if isinstance(v, dict) and v and not k.endswith("kwargs"):
            yield from _flatten(v, f"{prefix}.{k}")
        elif isinstance(v, dict):
            for kk, vv in v.items():
                yield f"{prefix}.{k}.{kk}", vv
        else:
            yield f"{prefix}.{k}", v
