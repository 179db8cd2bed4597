"""Grid sweeps: expansion, local runs, interruption + resume, recorded failures, worker processes."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

# run_one calls the ``train`` of this module: the tests patch it there to interrupt or fail runs
sweep_local = importlib.import_module("lengen.sweep.local")
from lengen.sweep import Grid, RunSpec, as_specs, run_one, run_sweep
from lengen.sweep.local import worker_death

TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": {"steps": 6, "batch_size": 4, "warmup_steps": 0, "log_every": 1, "ckpt_every": 2,
                  "progress": False},
        "eval": {"sequences": 8, "batch_size": 8}}


def tiny_grid():
    return Grid(TINY, axes={"scheme": {"nope": {"model.posenc": "nope"},
                                       "tra": {"model": {"attention": "tra"}}},
                            "train.seed": [0, 1]},
                name="{scheme}-s{seed}")


def mtimes(out, names):
    return {n: os.stat(os.path.join(out, n, "eval.json")).st_mtime_ns for n in names}


def metric_steps(out, name):
    with open(os.path.join(out, name, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if "loss" in line]


def test_grid_expansion():
    g = Grid({"train": {"steps": 3}, "model": {"attention_kwargs": {"qk_norm": True}}},
             axes={"scheme": {"rope": {"model.posenc": "rope"},
                              "tra": {"model": {"attention": "tra", "attention_kwargs": {"gate_bias_init": 1.0}}}},
                   "train.seed": [0, 1, 2], "train.lr": [1e-3, 3e-3]},
             name="{scheme}-s{seed}-lr{lr}")
    specs = g.specs()
    assert len(g) == len(specs) == 12
    assert [s.name for s in specs[:3]] == ["rope-s0-lr0.001", "rope-s0-lr0.003", "rope-s1-lr0.001"]
    tra = next(s for s in specs if s.name == "tra-s2-lr0.003")
    assert tra.tags == {"scheme": "tra", "seed": 2, "lr": 0.003}
    assert tra.config["train"] == {"steps": 3, "seed": 2, "lr": 0.003}
    assert tra.config["name"] == "tra-s2-lr0.003"
    # *kwargs dicts are replaced wholesale, other sections merged
    assert tra.config["model"] == {"attention": "tra", "attention_kwargs": {"gate_bias_init": 1.0}}
    assert specs[0].config["model"] == {"attention_kwargs": {"qk_norm": True}, "posenc": "rope"}
    # default names, exclusion, explicit named configs
    g2 = Grid({}, axes={"train.seed": [0, 1], "train.lr": [0.1]}, exclude=lambda t: t["seed"] == 1)
    assert [s.name for s in g2] == ["seed=0-lr=0.1"]
    assert [s.name for s in as_specs({"a": {}, "b": {"train": {"steps": 2}}})] == ["a", "b"]
    with pytest.raises(ValueError, match="share the run name"):
        Grid({}, axes={"train.seed": [0, 1], "train.lr": [1, 2]}, name="s{seed}").specs()
    with pytest.raises(ValueError, match="empty"):
        Grid({}, axes={"train.seed": []})
    with pytest.raises(ValueError, match="duplicate run names"):
        as_specs([RunSpec("x", {}), RunSpec("x", {})])


def test_unknown_config_fails_before_any_run(tmp_path):
    g = Grid(TINY, axes={"model.posenc": ["nope", "ropee"]})
    with pytest.raises(ValueError, match="ropee"):
        run_sweep(g, str(tmp_path / "sw"), log=None)
    assert not (tmp_path / "sw").exists()


def test_interrupt_resume_failures_and_retry(tmp_path, monkeypatch):
    out = str(tmp_path / "sweep")
    real_train = sweep_local.train
    calls = []

    def interrupted(cfg, run_dir, **kw):      # Ctrl-C in the middle of the second run
        calls.append(cfg.config.name)
        if cfg.config.name == "nope-s1":
            real_train(cfg, run_dir, stop_at=4, **kw)
            raise KeyboardInterrupt
        return real_train(cfg, run_dir, **kw)

    monkeypatch.setattr(sweep_local, "train", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny_grid(), out, log=None)
    assert calls == ["nope-s0", "nope-s1"]
    saved = json.load(open(os.path.join(out, "results.json")))
    assert {r["run"] for r in saved} == {"nope-s0"} and len(saved) == 12    # 3 splits x 4 metrics
    assert not os.path.exists(os.path.join(out, "nope-s1", "eval.json"))
    first = mtimes(out, ["nope-s0"])

    def failing(cfg, run_dir, **kw):          # second pass: one run breaks at run time
        calls.append(cfg.config.name)
        if cfg.config.name == "tra-s1":
            raise RuntimeError("injected failure")
        return real_train(cfg, run_dir, **kw)

    calls.clear()
    monkeypatch.setattr(sweep_local, "train", failing)
    res = run_sweep(tiny_grid(), out, log=None)
    assert calls == ["nope-s1", "tra-s0", "tra-s1"]            # nope-s0 not recomputed
    assert mtimes(out, ["nope-s0"]) == first
    assert metric_steps(out, "nope-s1") == [1, 2, 3, 4, 5, 6]  # resumed at step 4, not restarted
    assert [s["status"] for s in res.status.values()] == ["cached", "done", "done", "failed"]
    assert not res.ok
    fails = json.load(open(os.path.join(out, "failures.json")))
    assert [f["name"] for f in fails] == ["tra-s1"] and "injected failure" in fails[0]["error"]
    assert "Traceback" in fails[0]["traceback"]
    assert os.path.exists(os.path.join(out, "tra-s1", "failure.json"))
    import pandas as pd

    df = pd.read_csv(os.path.join(out, "results.csv"))
    assert set(df[df.status == "ok"].run) == {"nope-s0", "nope-s1", "tra-s0"}
    assert df[df.status == "failed"].run.tolist() == ["tra-s1"]
    assert set(df.scheme) == {"nope", "tra"}

    calls.clear()

    def counting(cfg, run_dir, **kw):         # third pass: nothing breaks any more
        calls.append(cfg.config.name)
        return real_train(cfg, run_dir, **kw)

    monkeypatch.setattr(sweep_local, "train", counting)
    before = mtimes(out, ["nope-s0", "nope-s1", "tra-s0"])
    res = run_sweep(tiny_grid(), out, log=None)
    assert calls == ["tra-s1"] and res.ok
    assert mtimes(out, ["nope-s0", "nope-s1", "tra-s0"]) == before
    assert not os.path.exists(os.path.join(out, "tra-s1", "failure.json"))
    assert json.load(open(os.path.join(out, "failures.json"))) == []
    assert len(res.rows) == 4 * 12 and {r["status"] for r in res.rows} == {"ok"}

    # a finished run whose training config changed is not silently reused
    g = Grid(dict(TINY, train=dict(TINY["train"], lr=0.5)), axes={"scheme": {"nope": {}}},
             name=lambda t: "nope-s0")
    res = run_sweep(g, out, log=None)
    assert res.status["nope-s0"]["status"] == "failed"
    assert "different config (train.lr)" in res.failures[0]["error"]
    # one whose evaluation settings changed is re-evaluated from its weights, not retrained
    calls.clear()
    metrics = open(os.path.join(out, "nope-s0", "metrics.jsonl")).read()
    g = Grid(dict(TINY, eval={"sequences": 16, "batch_size": 8}), axes={"scheme": {"nope": {}}},
             name=lambda t: "nope-s0")
    res = run_sweep(g, out, log=None)
    assert res.status["nope-s0"]["status"] == "done" and calls == []
    assert {r["sequences"] for r in res.rows} == {16}
    assert open(os.path.join(out, "nope-s0", "metrics.jsonl")).read() == metrics
    assert json.load(open(os.path.join(out, "nope-s0", "config.json")))["eval"]["sequences"] == 16
    assert run_sweep(g, out, log=None).status["nope-s0"]["status"] == "cached"


def test_sigkill_midway_then_rerun(tmp_path):
    """A hard kill (no cleanup at all) right after a checkpoint of the second run."""
    out = str(tmp_path / "killed")
    script = textwrap.dedent(f"""
        import os, signal, sys, torch
        torch.set_num_threads(1)
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_sweep import TINY, sweep_local
        from lengen.sweep import Grid, run_sweep
        real = sweep_local.train
        def train(cfg, run_dir, **kw):
            if cfg.config.name == "seed=1":
                real(cfg, run_dir, stop_at=2, **kw)
                os.kill(os.getpid(), signal.SIGKILL)
            return real(cfg, run_dir, **kw)
        sweep_local.train = train
        run_sweep(Grid(TINY, axes={{"train.seed": [0, 1]}}), {out!r}, log=None)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    saved = json.load(open(os.path.join(out, "results.json")))
    assert {r["run"] for r in saved} == {"seed=0"}
    t0 = mtimes(out, ["seed=0"])
    res = run_sweep(Grid(TINY, axes={"train.seed": [0, 1]}), out, log=None)
    assert [s["status"] for s in res.status.values()] == ["cached", "done"]
    assert mtimes(out, ["seed=0"]) == t0
    assert metric_steps(out, "seed=1") == [1, 2, 3, 4, 5, 6]


def dying_run(spec, out_dir, **kw):
    """Per-run function for worker tests: the worker process dies on one run."""
    if spec.name == "tra-s1":
        os._exit(3)
    return run_one(spec, out_dir, **kw)


def test_worker_death_messages():
    assert "killed by signal 9" in worker_death(-9)
    assert "exit code 1" in worker_death(1) and "if __name__ == '__main__':" in worker_death(1)


def test_two_workers_match_sequential_and_survive_a_dead_worker(tmp_path):
    seq = run_sweep(tiny_grid(), str(tmp_path / "seq"), threads=1, log=None)
    assert seq.ok
    par_out = str(tmp_path / "par")
    par = run_sweep(tiny_grid(), par_out, workers=2, threads=1, run_fn=dying_run, log=None)
    assert par.status["tra-s1"]["status"] == "failed"
    assert "worker process died (exit code 3)" in par.status["tra-s1"]["error"]
    assert "__main__" in par.status["tra-s1"]["error"]         # the usual cause, named
    assert [par.status[n]["status"] for n in ("nope-s0", "nope-s1", "tra-s0")] == ["done"] * 3
    assert {par.status[n]["pid"] for n in ("nope-s0", "nope-s1", "tra-s0")} - {os.getpid(), None}
    par = run_sweep(tiny_grid(), par_out, workers=2, threads=1, log=None)
    assert par.ok and par.status["tra-s1"]["status"] == "done"
    # same rows in the same order; values equal up to float rounding (a kernel may reduce in a
    # different order in another process)
    strip = [[{k: v for k, v in r.items() if k != "value"} for r in res.rows] for res in (par, seq)]
    assert strip[0] == strip[1]
    assert [r["value"] for r in par.rows] == pytest.approx([r["value"] for r in seq.rows], rel=1e-6)


def test_ray_backend_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match="pip install 'ray"):
        run_sweep(tiny_grid(), str(tmp_path / "r"), backend="ray", log=None)
    with pytest.raises(ValueError, match="unknown sweep backend"):
        run_sweep(tiny_grid(), str(tmp_path / "r"), backend="slurm", log=None)


def test_ray_backend_gives_the_same_rows(tmp_path):
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        seq = run_sweep(tiny_grid(), str(tmp_path / "seq"), threads=1, log=None)
        res = run_sweep(tiny_grid(), str(tmp_path / "ray"), backend="ray", log=None)
        assert res.ok and res.rows == seq.rows
    finally:
        ray.shutdown()
