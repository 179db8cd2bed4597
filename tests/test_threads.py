"""lengen's thread policy (lengen/threads.py, issue 31): OMP_WAIT_POLICY=PASSIVE set on import
unless preset, one intra-op thread for small CPU models unless a count is given, and the count
used recorded in the run's config.json."""
import json
import os
import subprocess
import sys

import pytest
import torch

import lengen.threads as lt
from lengen.config import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def clean_threads(monkeypatch):
    """No OMP_NUM_THREADS, no process-wide count; torch's thread count restored afterwards."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(lt, "_process_threads", 0)
    yield
    torch.set_num_threads(before)


def test_choose_threads_small_models_get_one_thread(clean_threads):
    torch.set_num_threads(2)
    assert lt.choose_threads(0, 64) == 1
    assert lt.choose_threads(0, lt.SMALL_D_MODEL) == 1
    # above the threshold, on an accelerator, or with OMP_NUM_THREADS set: torch's current count
    assert lt.choose_threads(0, lt.SMALL_D_MODEL + 1) == 2
    assert lt.choose_threads(0, 64, "cuda:0") == 2
    assert lt.choose_threads(0, 64, environ={"OMP_NUM_THREADS": "2"}) == 2


def test_explicit_counts_win(clean_threads):
    assert lt.choose_threads(3, 64) == 3                  # train.threads / --threads
    assert lt.choose_threads(3, 1024, "cuda") == 3
    lt.set_process_threads(2)                             # a sweep's --threads
    assert torch.get_num_threads() == 2
    assert lt.choose_threads(0, 64) == 2
    assert lt.choose_threads(4, 64) == 4                  # the config still wins over it
    lt.set_process_threads(0)
    assert lt.choose_threads(0, 64) == 1


def test_set_wait_policy_keeps_a_users_value():
    env = {}
    assert lt.set_wait_policy(env, modules={}) == "PASSIVE"
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert lt.set_wait_policy(env, modules={}) == "ACTIVE" and env == {"OMP_WAIT_POLICY": "ACTIVE"}
    # torch already loaded: too late for this process's runtime, so the variable is not claimed
    env = {}
    assert lt.set_wait_policy(env, modules={"torch": object()}) is None and env == {}


@pytest.mark.parametrize("preset", [None, "ACTIVE"])
def test_importing_lengen_sets_the_wait_policy_unless_preset(preset):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run([sys.executable, "-c", "import lengen, os, sys; "
                          "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"],
                         env=env, capture_output=True, text=True, check=True)
    # set, and lengen did import torch after it (so the OpenMP runtime read it)
    assert out.stdout.split() == [preset or "PASSIVE", "True"]


def tiny(threads=0):
    return resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32},
                    "task": {"name": "flipflop", "kwargs": {"n_pairs": 4}},
                    "train": {"steps": 2, "batch_size": 4, "warmup_steps": 0, "progress": False,
                              "log_every": 0, "threads": threads},
                    "eval": {"sequences": 4, "splits": ["iid"]}}).config


@pytest.mark.parametrize("threads", [0, 2])
def test_train_records_the_thread_count_it_used(clean_threads, tmp_path, threads):
    from lengen.train import train

    torch.set_num_threads(2)
    cfg = tiny(threads)
    train(cfg, str(tmp_path / "run"), quiet=True)
    used = threads or 1                                    # d_model 16: one thread by default
    assert torch.get_num_threads() == used
    assert json.load(open(tmp_path / "run" / "config.json"))["train"]["threads"] == used
    assert cfg.train.threads == threads                    # the caller's config is left as is


def test_sweep_threads_are_explicit(clean_threads, tmp_path):
    from lengen.sweep import run_one

    res = run_one({"name": "r", "config": tiny().to_dict()}, str(tmp_path), threads=2)
    assert res["status"] == "done", res["error"]
    assert json.load(open(tmp_path / "r" / "config.json"))["train"]["threads"] == 2


# ---- the allocator's thresholds (tune_allocator) -------------------------------------------------
class FakeLibc:
    """Records mallopt calls; ``ok`` is what each returns (glibc: 1 on success)."""

    def __init__(self, ok=1):
        self.calls, self.ok = [], ok

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.ok


def test_tune_allocator_sets_both_thresholds():
    libc = FakeLibc()
    assert lt.tune_allocator(environ={}, libc=libc) is True
    assert libc.calls == [(-3, lt.MMAP_THRESHOLD), (-1, lt.TRIM_THRESHOLD)]
    assert lt.MMAP_THRESHOLD == 32 << 20            # glibc refuses more on 64-bit machines


def test_a_failing_mallopt_is_reported_and_stops_before_the_trim_threshold():
    libc = FakeLibc(ok=0)
    assert lt.tune_allocator(environ={}, libc=libc) is False
    # the trim threshold alone would turn glibc's adaptive mmap threshold off: never set it alone
    assert libc.calls == [(-3, lt.MMAP_THRESHOLD)]


@pytest.mark.parametrize("env, why", [
    ({"LENGEN_MALLOC_TUNING": "0"}, "LENGEN_MALLOC_TUNING"),
    ({"LENGEN_MALLOC_TUNING": "Off"}, "LENGEN_MALLOC_TUNING"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "GLIBC_TUNABLES"),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, "MALLOC_TRIM_THRESHOLD_"),
    ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "LD_PRELOAD"),
    ({"LD_PRELOAD": "libtcmalloc_minimal.so"}, "LD_PRELOAD"),
])
def test_the_users_allocator_settings_win(env, why):
    libc = FakeLibc()
    assert lt.allocator_chosen_by_user(env) == why
    assert lt.tune_allocator(environ=env, libc=libc) is False
    assert libc.calls == []


def test_other_settings_leave_the_allocator_to_lengen():
    env = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F", "LD_PRELOAD": "libfoo.so",
           "LENGEN_MALLOC_TUNING": "1", "MALLOC_ARENA_MAX": "2"}
    assert lt.allocator_chosen_by_user(env) is None


def _in_a_fresh_process(code: str, **env) -> str:
    full = {k: v for k, v in os.environ.items() if k != "LENGEN_MALLOC_TUNING"}
    full.update(env, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, check=True, timeout=300).stdout.strip()


@pytest.mark.skipif(not lt._is_glibc(), reason="glibc's mallopt only")
def test_cpu_work_tunes_glibc_once_and_the_opt_out_holds():
    code = ("import lengen.threads as t; a = t._allocator_tuned; t.use_threads(0, 64, 'cpu'); "
            "print(a, t._allocator_tuned, t.tune_allocator())")
    assert _in_a_fresh_process(code) == "None True True"
    assert _in_a_fresh_process(code, LENGEN_MALLOC_TUNING="0") == "None False False"
    # an accelerator's work leaves the host allocator alone
    gpu = "import lengen.threads as t; t.use_threads(0, 64, 'cuda:0'); print(t._allocator_tuned)"
    assert _in_a_fresh_process(gpu) == "None"
