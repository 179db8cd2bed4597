"""``lengen reproduce tra-wikitext``: Appendix B of the TRA paper (Table 2, Fig. 4): nine models
trained as language models with a 128-token window, perplexity evaluated up to 32x that.

Protocol (every scale; a scale changes corpus size, tokenizer, model size and steps, never the
protocol):

* the nine models of the paper's Table 1 / Table 2, shared with the flip-flop recipe
  (:data:`lengen.recipes.tra_models.MODELS`: NoPE, APE, REL (T5 bucketed bias, or
  Transformer-XL with ``rel='xl'``), RoPE, Label, FoT, Diff, CoPE, TRA) on the paper's Llama-style
  backbone: SwiGLU MLP 2 x d_model for the linear and the gate units, RMSNorm pre-norm, cosine
  decay;
* next-token language modelling (:mod:`lengen.tasks.text`): training windows of T tokens at
  random offsets of the train split; evaluation on the **test** split (the paper: "we measure
  perplexity on the test set") at T x 1, 2, 4, 8, 16, 32 (128 .. 4096 at T = 128) with
  **non-overlapping windows**, each scored on all its targets (the paper does not say; this is the
  ALiBi paper's protocol for its main results); perplexity = exp(mean NLL over the scored targets);
* APE's learned table and Label's label range cover the longest evaluation length (32 T): APE's
  rows past T are never trained ("lengths not encountered during training will not have the
  corresponding embeddings trained"); Label draws sorted labels from [0, 32 T) in training and
  fresh ones at evaluation (seeded per block of windows);
* Table 2 = perplexity at the training length (mean ± std over seeds), Fig. 4 = perplexity vs
  evaluation length; the published Table 2 sits beside ours; Fig. 4 has no published numbers, so
  the report states the paper's reading of it per model and whether ours agrees (the ratio of
  perplexity at 32 T to that at T: ``keeps or improves`` <= 1.05 < ``degrades`` <= 2 <
  ``blows up``).

Scales (``SCALES`` in :mod:`.specs`):

* ``paper``: WikiText-103 (raw; ``--data-dir`` with the files, else ``datasets`` online), GPT-2
  BPE (the paper: "We use the GPT-2 tokenizer"), 8 layers, 8 heads, d_model 512, MLP 1024 (the
  paper's "medium" configuration of Turc et al.; ~72M parameters with the untied 50,257-id head,
  the paper says "circa 80 million"), window 128, batch 64, 100k steps, four seeds, the whole test
  split at every length. Not stated for the language model and taken from the paper's flip-flop
  setting ("our scheduling regime remains the same as before", the flip-flop recipe's ``paper``
  scale): AdamW lr 1e-4, betas (0.9, 0.999), weight decay 0.01 on all parameters, cosine decay to
  0 with no warmup, dropout 0.01, gradient clipping at 1.0. GPU.
* ``cpu``: the offline KJV corpus (a stand-in for WikiText-103; every caption says so), the
  locally trained byte-level ``bpe`` tokenizer with 2,048 ids (chosen by measurement: a
  GPT-2-vocabulary step is much slower on a CPU; see ``benchmarks/RESULTS.md``, "Tokenization and
  data loading vs a training step"), window T = 128 as in the paper,
  evaluation to 4096 (32 x), 2 layers, 4 heads, d_model 128, batch 32, 1,200 steps, AdamW lr 2e-3
  (100 warmup steps, cosine to 0.1 x), weight decay 0.1 on matrices, one seed, at most 32,768
  scored targets per length. Sized for 90 minutes on a 2-core CPU with ``--workers 2``; check
  with ``lengen reproduce tra-wikitext --scale cpu --workers 2 --estimate``.
* ``smoke``: seconds, for tests (bytes, the first 200k characters of each split, a 1-layer
  d_model-16 model, 3 steps; numbers are meaningless).

Outputs in ``--out`` (default ``runs/tra-wikitext-<scale>``): a run directory per model x seed,
``results.csv`` (all rows), ``table2.md/.csv`` (ours beside the published Table 2), ``fig4.md/.csv``
(perplexity per length, trend, the paper's reading, the finding) and ``fig4.png``.
"""
from __future__ import annotations

import os
import time

from lengen.recipes.common import default_device, log_failures, select
from lengen.recipes.lm import EVAL_ALL, estimate_runs, eval_lengths, task_caption, text_task_kwargs
from lengen.recipes.tra_models import (MODELS, RELS, check_available, model_parts, run_name,
                                       train_section)
from lengen.recipes.tra_wikitext.published import PAPER_FIG4, PAPER_TABLE2
from lengen.recipes.tra_wikitext.report import write_report
from lengen.recipes.tra_wikitext.specs import SCALES
from lengen.registry import lookup
from lengen.sweep import Grid, RunSpec, run_sweep


def model_config(model: str, scale: str = "cpu", seed: int = 0, *, rel: str = "t5",
                 corpus: str | None = None, data_dir: str | None = None, device: str = "cpu",
                 name: str | None = None) -> dict:
    """Config dict of one Table 2 model at a scale (``corpus`` / ``data_dir`` override the
    scale's corpus)."""
    s = lookup(SCALES, scale, "scale")
    attention, posenc, positions = model_parts(model, rel)
    longest = max(eval_lengths(s))
    mc = {"attention": attention, "posenc": posenc, "positions": positions,
          "d_model": s["d_model"], "n_layers": s["n_layers"], "n_heads": s["n_heads"],
          "d_ff": 2 * s["d_model"], "mlp": "swiglu", "norm": "rms", "norm_position": "pre",
          "dropout": s["dropout"]}
    if positions == "label":            # labels drawn from [0, 32 T): every evaluation length fits
        mc["positions_kwargs"] = {"max_length": longest}
    if posenc == "learned":
        mc["posenc_kwargs"] = {"max_positions": longest}
    return {
        "name": name or run_name(model, seed, rel),
        "model": mc,
        "task": {"name": "text",
                 "kwargs": text_task_kwargs(s, corpus=corpus, data_dir=data_dir)},
        "train": train_section(s, seed, device),
        "eval": {"sequences": EVAL_ALL, "batch_size": s["eval_batch_size"], "seed": 1234},
    }


def build_specs(scale: str = "cpu", *, seeds=None, models=None, rel: str = "t5",
                corpus: str | None = None, data_dir: str | None = None, device: str = "cpu"):
    """RunSpecs of the Table 2 grid (models x seeds), tagged ``model seed``."""
    models = select(models, MODELS, MODELS, "Table 2 model")
    check_available(models, rel)
    seeds = list(SCALES[scale]["seeds"] if seeds is None else seeds)
    grid = Grid(axes={"model": {m: {} for m in models}, "seed": {x: {} for x in seeds}},
                name=lambda t: run_name(t["model"], t["seed"], rel))
    return [RunSpec(g.name, model_config(g.tags["model"], scale, g.tags["seed"], rel=rel,
                                         corpus=corpus, data_dir=data_dir, device=device,
                                         name=g.name), dict(g.tags))
            for g in grid]


def run_tra_wikitext(scale: str = "cpu", out: str | None = None, *, workers: int = 1, seeds=None,
                     models=None, rel: str = "t5", corpus: str | None = None,
                     data_dir: str | None = None, backend: str = "local",
                     threads: int | None = None, device: str | None = None,
                     quiet: bool | None = None, log=print) -> dict:
    """Train (or resume / reuse) every run, then write Table 2 and Fig. 4.
    Returns ``{"rows", "records", "paths", "sweep"}``."""
    out = out or os.path.join("runs", f"tra-wikitext-{scale}")
    device = device or default_device(scale)
    specs = build_specs(scale, seeds=seeds, models=models, rel=rel, corpus=corpus,
                        data_dir=data_dir, device=device)
    t0 = time.time()
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log)
    wall = time.time() - t0
    models = list(models or MODELS)
    records, paths = write_report(
        res.rows, out, scale=scale, models=models, rel=rel, wall_seconds=wall,
        seeds=sorted({s.tags["seed"] for s in specs}),
        data_caption=task_caption(specs[0].config["task"]["kwargs"]), log=log)
    log_failures(res.failures, out, log)
    return {"rows": res.rows, "records": records, "paths": paths, "sweep": res}


def estimate_time(scale: str = "cpu", *, steps: int = 10, models=None, seeds: int | None = None,
                  rel: str = "t5", corpus: str | None = None, data_dir: str | None = None,
                  workers: int = 1, threads: int | None = None, device: str | None = None,
                  log=print) -> dict:
    """Time ``steps`` training steps and one evaluation batch per length for every model on this
    machine and schedule the runs over ``workers`` as the sweep does (see
    :func:`lengen.recipes.lm.estimate_runs`). Nothing is written. Measure on an idle machine."""

    device = device or default_device(scale)
    n = len(SCALES[scale]["seeds"]) if seeds is None else seeds
    specs = build_specs(scale, seeds=list(range(n)), models=models, rel=rel, corpus=corpus,
                        data_dir=data_dir, device=device)
    return estimate_runs(specs, steps=steps, workers=workers, threads=threads, device=device,
                         log=log)


__all__ = ["SCALES", "MODELS", "PAPER_TABLE2", "PAPER_FIG4", "RELS", "build_specs",
           "model_config", "run_name", "run_tra_wikitext", "estimate_time", "write_report"]
