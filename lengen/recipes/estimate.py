"""What every recipe's ``--estimate`` shares: time training steps through the training loop's
own pieces, and turn per-run costs into the wall time of a sweep on ``workers`` processes.

Each recipe times its own evaluation (perplexity windows, exact match by length, greedy
decoding for error analysis) and hands the per-run costs, in the sweep's order, to
:func:`report_total`, which also reports how loaded the machine was (:func:`load_note`: an
estimate timed beside other work is inflated, and says so). Nothing is written.
"""
from __future__ import annotations

import json
import os
import time

import torch

from lengen.sweep import default_threads
from lengen.threads import set_process_threads, use_threads
from lengen.train.loop import positions_generator
from lengen.train.optim import build_optimizer, build_scheduler
from lengen.train.precision import compile_model, grad_scaler
from lengen.train.step import apply_update, backward_and_clip, forward_loss


def use_worker_threads(workers: int, threads: int | None = None) -> None:
    """Time with the torch threads a sweep's runs get: ``threads`` when given (explicit, as
    :func:`lengen.sweep.run_sweep` makes it), else a worker's share of the cores
    (:func:`lengen.sweep.default_threads`: cores // workers), within which
    :func:`time_training_steps` picks as :func:`lengen.train` does."""
    if threads:
        set_process_threads(threads)
        return
    share = default_threads(workers)
    if share:
        torch.set_num_threads(share)


def sync(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device="cpu") -> float:
    """Seconds ``fn()`` takes (device work included)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def time_training_steps(cfg, task, model, *, steps: int = 10, warmup: int = 2,
                        device="cpu") -> float:
    """Seconds per training step of ``model`` on ``task`` as :func:`lengen.train` runs it on one
    process: the batch, the sampler's training positions, forward (under ``train.precision``'s
    autocast, compiled when ``train.compile``), outputs restricted to the scored slice, loss,
    backward (fp16: scaled), clipping, AdamW and the schedule. ``warmup`` steps first, untimed
    (they include compilation). Leaves the model in eval mode."""
    tc, dev = cfg.train, torch.device(device)
    use_threads(tc.threads, cfg.model.d_model, device)       # the count lengen.train would use
    model.to(device).train()
    opt = build_optimizer(model, tc)
    sched = build_scheduler(opt, tc)
    scaler = grad_scaler(tc.precision, dev)
    fwd = compile_model(model) if tc.compile else model
    gen, pos_gen = torch.Generator().manual_seed(0), positions_generator(0)
    out_slice = getattr(task, "output_slice", None)

    def step():                         # the loop's step on one process (lengen.train.step)
        batch = task.train_batch(tc.batch_size, gen).to(device)
        B, T = batch.inputs.shape
        pos = model.sample_positions(T, batch_size=B, device=device, generator=pos_gen,
                                     batch=batch)
        loss = forward_loss(fwd, batch, pos, tc, dev, out_slice)
        backward_and_clip(loss, model, opt, scaler, tc)
        apply_update(opt, scaler, sched)

    for _ in range(warmup):
        step()
    seconds = sum(timed(step, device) for _ in range(steps)) / steps
    model.eval()
    return seconds


def timing_key(config: dict) -> str:
    """Configs that differ only in name and seeds cost the same (time them once)."""
    c = json.loads(json.dumps(config))
    c.pop("name", None)
    for k in ("seed", "data_seed"):
        c.get("train", {}).pop(k, None)
    return json.dumps(c, sort_keys=True)


def makespan(costs: list[float], workers: int) -> tuple[float, list[float]]:
    """Wall time of running ``costs`` in order on ``workers`` workers, each run going to the
    first free worker (how :func:`lengen.sweep.run_sweep` dispatches). -> (total, per worker)."""
    free = [0.0] * max(1, int(workers))
    for c in costs:
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += c
    return max(free), free


def report_total(costs: list[float], workers: int, what: str, *, serial: float = 0.0,
                 log=print) -> float:
    """Log and return the sweep's estimated wall time: the makespan of ``costs`` (seconds per
    run, in the sweep's order) on ``workers`` workers, plus ``serial`` seconds run after it."""
    total, loads = makespan(costs, workers)
    total += serial
    log(f"estimated total: {what} with {workers} worker(s): {total / 60:.1f} min "
        f"({total / 3600:.2f} h; torch threads {torch.get_num_threads()} per worker; per worker "
        f"{', '.join(f'{x / 60:.0f}' for x in loads)} min"
        + (f"; + {serial / 60:.1f} min after the sweep" if serial else "") + ")")
    log(load_note(torch.get_num_threads()))
    return total


def machine_load() -> tuple[float, int] | None:
    """(1-minute load average, cores), or None where the OS does not say."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
    return load, os.cpu_count() or 1


def load_note(own_threads: int, load: tuple[float, int] | None = None) -> str:
    """How loaded the machine was while timing, and how far to trust the estimate. The load
    average counts this estimate's own ``own_threads`` too; the rest is other work, which shared
    the cores with the timed steps. Beyond half the cores taken by others the estimate is
    flagged as inflated."""
    load = machine_load() if load is None else load
    if load is None:
        return ("machine load: unknown on this OS; an estimate timed on a busy machine is "
                "inflated by the share of the CPU other work took")
    avg, cores = load
    others = max(0.0, avg - own_threads)
    note = (f"machine load while timing: {avg:.1f} (1-minute average) on {cores} cores; other "
            f"work accounts for about {others:.1f} of it")
    if others > cores / 2:
        return (f"{note}. WARNING: the machine was busy (other work > cores / 2), so the timed "
                f"steps shared the CPU and this estimate is inflated, by about as much as that "
                f"work slowed them (several-fold on a fully loaded machine); treat it as an "
                f"upper bound and rerun --estimate on an idle machine for a number to plan with")
    return (f"{note}: a fair reading. Trust it as a planning figure (timed steps extrapolated; "
            f"data loading, evaluation and checkpoints vary with the machine), not a measurement")


__all__ = ["use_worker_threads", "sync", "timed", "time_training_steps", "timing_key",
           "makespan", "report_total", "machine_load", "load_note"]
