"""``lengen reproduce tra-flipflop``: Table 1 of the TRA paper (flip-flop, nine models).

Protocol (every scale): flip-flop language modelling (Liu et al. 2023); train on p_i = 0.8,
evaluate whole-sequence accuracy (every read bit right) on fresh sequences of the three splits
IID (p_i = 0.8), OOD dense (0.1) and OOD sparse (0.98), same length as training; Llama-style
backbone (SwiGLU, RMSNorm pre-norm, MLP 2x d_model for the linear and the gate units), cosine
decay; mean ± sample std over seeds (each seed sets both the initialisation and the data order).
The nine columns (CLI keys in brackets; ``MODELS`` in :mod:`lengen.recipes.tra_models`, shared
with ``tra-wikitext``):

    NoPE  softmax + nope            APE   softmax + learned        REL   softmax + t5 (or xl)
    RoPE  softmax + rope            Label softmax + learned, positions 'label' over [0, 4T)
    FoT   fot + nope                Diff  diff + rope              CoPE  cope + nope
    TRA   tra + nope (q/k RMS-normalised per head, as in the public notebook)

REL: the paper describes relative encodings "introduced by Transformer-XL and also adopted by
T5" whose out-of-distribution distances share the learned value of the maximum distance; that is
T5's bucketed bias (``t5``, default: 32 buckets, max distance 128). ``rel='xl'`` uses the
Transformer-XL reading (sinusoid relative encoding with learned projections) instead.

Scales (``SCALES`` in :mod:`.specs`; a scale changes sizes and steps, never the protocol):

* ``paper``: 512-token sequences (256 pairs), 4 layers, 4 heads, d_model 256, AdamW lr 1e-4,
  batch 64, 25k steps (= one pass over the official 1.6M training sequences, as in the public TRA
  notebook), cosine decay to 0 with no warmup, dropout 0.01, four seeds; 10,000 evaluation
  sequences per split (the official sets have 16K IID / 4K dense / 160K sparse; we draw fresh
  ones from the same distributions). Assumed where the paper is silent: weight decay 0.01 on all
  parameters and betas (0.9, 0.999) (``torch.optim.AdamW`` defaults), gradient clipping at 1.0.
* ``width``: the paper's width (d_model 256, 4 layers, 4 heads, MLP 512) at 256 tokens (128
  pairs), with the cpu scale's optimiser (lr 1e-3, 100 warm-up steps, cosine to 0.1x, batch 32)
  for 2,500 steps, three seeds, and every 250 steps whole-sequence accuracy on 500 sequences of
  each split, so the curves show whether the OOD numbers settled (issue 28). Sized for one GPU
  (``results/tra-flipflop-width/README.md`` has the measured step times and why not 512 tokens).
* ``cpu``: 128-token sequences (64 pairs), 4 layers, 4 heads, d_model 64 with the paper's MLP
  width (2 x d_model = 128), lr 1e-3 (50 warmup steps), batch 32, 2,500 steps, three seeds, 2,000
  evaluation sequences per split. Chosen by probe grids, measured in
  ``results/tra-flipflop-cpu/README.md`` and ``results/tra-flipflop-cpu-4L/README.md`` (why 4
  layers, why 2,500 steps, the step times of the MLP widths, the wall time); ``--estimate``
  times it on your machine.
* ``smoke``: seconds; a tiny model for tests (numbers are meaningless).

Outputs in ``--out`` (default ``runs/tra-flipflop-<scale>``): one run directory per model x seed,
``results.csv`` (all rows), ``table.md`` / ``table.csv`` (Table 1 layout, ours beside the
published numbers), ``table.png`` (bar chart) and, with ``heatmaps=True``, the Appendix A pair
(2-layer, 1-head TRA and FoT) with their final-layer attention on one OOD-sparse sequence under
``heatmaps/``. A model whose mean IID accuracy is below ``IID_SOLVED`` % gets its OOD cells marked:
its OOD numbers say nothing about generalisation.
"""
from __future__ import annotations

import os
import time

import torch

from lengen.config import resolve
from lengen.recipes.common import default_device, log_failures, select
from lengen.recipes.estimate import report_total, time_training_steps, timed, use_worker_threads
from lengen.recipes.tra_flipflop.published import PAPER_TABLE1
from lengen.recipes.tra_flipflop.report import write_heatmaps, write_report
from lengen.recipes.tra_flipflop.specs import (HEATMAP_PAIR, IID_SOLVED, LABEL_RANGE, SCALES,
                                               SPLITS)
from lengen.recipes.tra_models import (MODELS, RELS, check_available, model_parts, run_name,
                                       train_section)
from lengen.registry import lookup
from lengen.rundir.load import prepare
from lengen.sweep import Grid, RunSpec, run_sweep


def model_config(model: str, scale: str = "cpu", seed: int = 0, *, rel: str = "t5",
                 n_layers: int | None = None, n_heads: int | None = None, device: str = "cpu",
                 name: str | None = None) -> dict:
    """Config dict of one Table 1 model at a scale (``n_layers``/``n_heads`` override the scale's,
    for the Appendix A pair)."""
    s = lookup(SCALES, scale, "scale")
    attention, posenc, positions = model_parts(model, rel)
    T = 2 * s["n_pairs"] - 1                                 # model input length
    mc = {"attention": attention, "posenc": posenc, "positions": positions,
          "d_model": s["d_model"], "d_ff": s.get("d_ff"), "n_layers": n_layers or s["n_layers"],
          "n_heads": n_heads or s["n_heads"], "mlp": "swiglu", "norm": "rms",
          "norm_position": "pre", "dropout": s["dropout"]}
    if positions == "label":
        L = LABEL_RANGE * (T + 1)
        mc["positions_kwargs"] = {"max_length": L}
        mc["posenc_kwargs"] = {"max_positions": L}
    elif posenc == "learned":
        mc["posenc_kwargs"] = {"max_positions": T + 1}
    return {
        "name": name or f"{model}-s{seed}",
        "model": mc,
        "task": {"name": "flipflop", "kwargs": {"n_pairs": s["n_pairs"]}},
        "train": train_section(s, seed, device),
        "eval": {"sequences": s["eval_sequences"], "batch_size": s["eval_batch_size"],
                 "splits": list(SPLITS)},
    }


def heatmap_run_name(model: str, seed: int) -> str:
    """Run name of one Appendix A model (seed 0 keeps the original, suffix-free name)."""
    return f"appA-{model}-2L1H" + (f"-s{seed}" if seed else "")


def build_specs(scale: str = "cpu", *, seeds=None, models=None, rel: str = "t5",
                heatmaps: bool = False, heatmap_seeds=(0,), device: str = "cpu"):
    """RunSpecs of the Table 1 grid (models x seeds), plus the Appendix A pair if asked (one
    pair per seed in ``heatmap_seeds``)."""
    models = select(models, MODELS, MODELS, "Table 1 model")
    check_available(models + (list(HEATMAP_PAIR) if heatmaps else []), rel)
    seeds = list(SCALES[scale]["seeds"] if seeds is None else seeds)
    grid = Grid(axes={"model": {m: {} for m in models}, "seed": {s: {} for s in seeds}},
                name=lambda t: run_name(t["model"], t["seed"], rel))
    specs = []
    for spec in grid:
        cfg = model_config(spec.tags["model"], scale, spec.tags["seed"], rel=rel, device=device,
                           name=spec.name)
        specs.append(RunSpec(spec.name, cfg, dict(spec.tags, group="table")))
    if heatmaps:
        for seed in heatmap_seeds:
            for m in HEATMAP_PAIR:
                name = heatmap_run_name(m, seed)
                specs.append(RunSpec(name, model_config(m, scale, seed, n_layers=2, n_heads=1,
                                                        device=device, name=name),
                                     {"model": m, "seed": seed, "group": "heatmap"}))
    return specs


def run_tra_flipflop(scale: str = "cpu", out: str | None = None, *, workers: int = 1, seeds=None,
                     models=None, rel: str = "t5", heatmaps: bool = False, heatmap_seeds=(0,),
                     backend: str = "local",
                     threads: int | None = None, device: str | None = None, quiet: bool | None = None,
                     log=print) -> dict:
    """Train (or resume / reuse) every run, then write the table, chart and heatmaps.
    Returns ``{"rows", "summary", "paths", "sweep"}``."""
    out = out or os.path.join("runs", f"tra-flipflop-{scale}")
    device = device or default_device(scale)
    specs = build_specs(scale, seeds=seeds, models=models, rel=rel, heatmaps=heatmaps,
                        heatmap_seeds=tuple(heatmap_seeds), device=device)
    t0 = time.time()
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log)
    wall = time.time() - t0
    rows = [r for r in res.rows if r.get("group") == "table"]
    models = list(models or MODELS)
    summary, paths = write_report(rows, out, scale=scale, models=models, rel=rel, wall_seconds=wall,
                                  seeds=sorted({s.tags["seed"] for s in specs
                                                 if s.tags["group"] == "table"}), log=log)
    if heatmaps:
        paths.update(write_heatmaps(out, specs, res, log=log))
    log_failures(res.failures, out, log)
    return {"rows": res.rows, "summary": summary, "paths": paths, "sweep": res}


def estimate_time(scale: str = "cpu", *, steps: int = 10, models=None, seeds: int | None = None,
                  workers: int = 1, threads: int | None = None, device: str | None = None,
                  log=print) -> dict:
    """Time ``steps`` training steps (:func:`lengen.recipes.estimate.time_training_steps`) and
    one evaluation batch per model on this machine and schedule the whole reproduction (models
    x seeds, the sweep's order) over ``workers`` processes as the sweep does (``threads`` per
    worker defaults to what the sweep gives each worker: cores // workers). Nothing is written.
    Measure on an otherwise idle machine."""
    device = device or default_device(scale)
    s = SCALES[scale]
    models = list(models or MODELS)
    check_available(models)
    n_seeds = seeds or len(s["seeds"])
    use_worker_threads(workers, threads)
    per_run = {}
    for m in models:
        resolved = resolve(model_config(m, scale, 0, device=device))
        cfg = resolved.config
        task, model = prepare(resolved)
        t_step = time_training_steps(cfg, task, model, steps=steps, device=device)
        with torch.inference_mode():
            batch = task.eval_batch("iid", cfg.eval.batch_size,
                                    torch.Generator().manual_seed(0)).to(device)
            model(batch.inputs)                     # warm-up
            t_eval = timed(lambda: model(batch.inputs), device)
        n_eval_batches = len(SPLITS) * -(-cfg.eval.sequences // cfg.eval.batch_size)
        per_run[m] = t_step * cfg.train.steps + t_eval * n_eval_batches
        log(f"{m:>6}: {1000 * t_step:7.1f} ms/step, {t_eval:6.2f} s/eval batch -> "
            f"{per_run[m] / 60:6.1f} min per run")
    costs = [per_run[m] for m in models for _ in range(n_seeds)]
    total = report_total(costs, workers, f"{len(models)} models x {n_seeds} seeds", log=log)
    return {"seconds_per_run": per_run, "total_seconds": total}


# SCALES, SPLITS, IID_SOLVED and HEATMAP_PAIR live in .specs, MODELS, RELS and check_available in
# lengen.recipes.tra_models; they are re-exported here as the recipe's public API.
__all__ = ["SCALES", "MODELS", "RELS", "PAPER_TABLE1", "SPLITS", "IID_SOLVED", "HEATMAP_PAIR",
           "build_specs", "model_config", "run_tra_flipflop", "estimate_time", "check_available"]
