"""The recipes' shared ``--estimate`` pieces (``lengen/recipes/estimate.py``): the sweep's
dispatch (makespan), the training-step timer doing the training loop's work, and every recipe's
estimate scheduling its grid through them."""
from __future__ import annotations

import pytest
import torch

import lengen
from lengen.recipes import estimate as est
from lengen.recipes.randomized_pe import recipe as rpe
from lengen.recipes.tra_flipflop import recipe as tf
from lengen.train.loop import prepare


def test_makespan_follows_the_sweeps_dispatch():
    # runs go in order to the first free worker: [5, 1, 1, 1] on 2 workers -> 5 | 1+1+1
    assert est.makespan([5, 1, 1, 1], 2) == (5, [5, 3])
    assert est.makespan([1, 1, 5], 2) == (6, [6, 1])
    assert est.makespan([2, 2], 1) == (4, [4])
    assert est.makespan([], 3) == (0, [0, 0, 0])


def test_report_total_is_the_makespan_plus_serial_work():
    lines = []
    total = est.report_total([60, 60, 60], 2, "3 runs", serial=30, log=lines.append)
    assert total == 150                                    # 120 on one worker + 30 after
    assert "3 runs with 2 worker(s): 2.5 min" in lines[0] and "+ 0.5 min after" in lines[0]


def test_timing_key_ignores_names_and_seeds():
    a = {"name": "x-s0", "train": {"seed": 0, "data_seed": 0, "steps": 5}}
    b = {"name": "x-s1", "train": {"seed": 1, "data_seed": 1, "steps": 5}}
    c = {"name": "x-s1", "train": {"seed": 1, "data_seed": 1, "steps": 6}}
    assert est.timing_key(a) == est.timing_key(b) != est.timing_key(c)


def test_training_step_timer_does_the_loops_work(monkeypatch):
    """Positions come from the sampler's training draw (randomized: a generator is passed), the
    encoder's outputs are restricted to its output classes (a scored target outside them would
    raise), the weights move (an optimizer step) and the model ends in eval mode."""
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "causal": False,
                                    "positions": "randomized",
                                    "positions_kwargs": {"max_length": 64}},
                          "task": {"name": "reverse_string", "kwargs": {"max_train_length": 6,
                                                                       "max_eval_length": 12}},
                          "train": {"batch_size": 4, "progress": False}})
    task, model = prepare(cfg)
    seen = []
    real = model.sample_positions

    def spy(T, **k):
        pos = real(T, **k)
        # a training draw: model in training mode, and positions other than 0..T-1
        seen.append(model.training and not torch.equal(pos.reshape(-1, T)[0].long(),
                                                        torch.arange(T)))
        return pos

    monkeypatch.setattr(model, "sample_positions", spy)
    before = [p.detach().clone() for p in model.parameters()]
    t = est.time_training_steps(cfg.config, task, model, steps=2, warmup=1)
    assert t > 0 and seen == [True] * 3
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not model.training


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_step_timer_follows_the_configs_precision(precision, monkeypatch):
    """Autocast around the forward as the loop does (the logits come out in the half dtype),
    and fp16 steps through the loss scaler."""
    from lengen.train import precision as prec

    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                          "task": {"kwargs": {"n_pairs": 8}},
                          "train": {"batch_size": 4, "progress": False,
                                    "precision": precision}})
    task, model = prepare(cfg)
    dtypes, scalers = [], []
    real_fwd, real_scaler = model.forward, prec.grad_scaler

    def forward(*a, **k):
        out = real_fwd(*a, **k)
        dtypes.append(out.dtype)
        return out

    def grad_scaler(*a):
        scalers.append(real_scaler(*a))
        return scalers[-1]

    monkeypatch.setattr(model, "forward", forward)
    monkeypatch.setattr(est, "grad_scaler", grad_scaler)      # the one the timer calls
    assert est.time_training_steps(cfg.config, task, model, steps=1, warmup=0) > 0
    assert set(dtypes) == {prec.DTYPES[precision]}
    assert scalers[0].is_enabled() == (precision == "fp16")


def test_tra_flipflop_estimate_schedules_models_by_seeds(capsys):
    res = tf.estimate_time("smoke", models=["NoPE", "TRA"], seeds=3, workers=2, steps=1)
    per = res["seconds_per_run"]
    assert set(per) == {"NoPE", "TRA"}
    costs = [per["NoPE"]] * 3 + [per["TRA"]] * 3
    assert res["total_seconds"] == pytest.approx(est.makespan(costs, 2)[0])
    assert "2 models x 3 seeds with 2 worker(s)" in capsys.readouterr().out


def test_randomized_pe_estimate_schedules_the_grid(capsys):
    res = rpe.estimate_time("smoke", tasks=["reverse_string"], schemes=["rope"], seeds=2, lrs=1,
                            steps=1)
    (cost,) = res["seconds_per_run"].values()
    assert res["total_seconds"] == pytest.approx(2 * cost)            # one worker
    assert "1 tasks x 1 encodings x 2 seeds x 1 lrs" in capsys.readouterr().out


def test_randomized_pe_estimate_follows_per_encoding_budgets(monkeypatch):
    """An encoding's own seeds and steps on a task (``per_scheme``) change its runs' count and
    cost in the schedule, not the other encodings'."""
    smoke = dict(rpe.SCALES["smoke"], per_task={"reverse_string": dict(
        per_scheme={"sincos": dict(seeds=(0, 1, 2), steps=50)})})
    monkeypatch.setitem(rpe.SCALES, "smoke", smoke)
    res = rpe.estimate_time("smoke", tasks=["reverse_string"], schemes=["sincos", "relative"],
                            steps=1, log=lambda *a: None)
    per = res["seconds_per_run"]
    costs = [per[("reverse_string", "sincos")]] * 3 + [per[("reverse_string", "relative")]]
    assert res["total_seconds"] == pytest.approx(sum(costs))           # one worker


def test_the_estimate_says_how_loaded_the_machine_was():
    """Issue 30: an estimate timed on a busy machine is inflated and must say so."""
    from lengen.recipes.estimate import load_note

    busy = load_note(1, (7.7, 2))               # others ~6.7 of 2 cores: more than half
    assert "7.7" in busy and "on 2 cores" in busy and "about 6.7" in busy
    assert "WARNING" in busy and "inflated" in busy and "idle machine" in busy
    idle = load_note(1, (1.2, 16))
    assert "WARNING" not in idle and "planning figure" in idle
    edge = load_note(2, (3.0, 2))               # others exactly cores / 2: not yet flagged
    assert "WARNING" not in edge
    assert "WARNING" in load_note(0, (1.1, 2))
    lines = []
    est.report_total([60.0, 60.0], 2, "2 runs", log=lines.append)
    assert lines[0].startswith("estimated total: 2 runs") and "machine load" in lines[1]
