"""``lengen reproduce index-warping-lm``: the language-modelling study of "Improving Length
Generalization via Position Index Warping" (Section 5.2, Table 3, Fig. 7, App. B.2, Table B).

Protocol (every scale; a scale changes corpus size, tokenizer, model size and steps, never the
protocol):

* GPT-2's architecture (``lengen.model.presets`` ``gpt2-base``: plain GELU MLP 4 x d_model,
  pre-LayerNorm, tied embeddings) with RoPE (full rotation, base 10000) or ALiBi in place of
  learned positions; next-token language modelling with a training context of T tokens;
  evaluation on the **test** split ("We use WikiText-103 for training and testing") at
  T x 1, 2, 4, 6, 8 (512 .. 4096 at T = 512), with non-overlapping windows scored on all their
  targets (the paper does not say which protocol);
* models (``MODELS``; the paper's Table 3 rows, Fig. 7 and Table B):

  - ``RoPE``: positions 0..T-1 in training and evaluation.
  - ``RoPE+PI``: the RoPE run's weights evaluated with position interpolation (sampler
    ``interpolate``: positions x T / K at evaluation length K > T), as the paper's PI without
    fine-tuning; no second training run.
  - ``RandPE-8072`` / ``-4096`` / ``-1024``: RoPE with randomized positions (Ruoss et al. 2023):
    a sorted draw of T distinct positions from [0, L) per batch in training, fresh draws at
    evaluation (seeded per block of windows); L = 8072, 4096, 1024 at T = 512, scaled with T
    (L / T fixed) at smaller scales. Lengths above L cannot be encoded: the paper's "•".
  - ``ALiBi``.
  - ``Ours``: RoPE trained with head + tail index warping (sampler ``warp``): each training
    sequence independently gets head warping alpha j (alpha = 1/6) with probability 0.15, tail
    warping l F(j / l) with F the CDF of Beta(2, 5) with probability 0.15, and positions 0..T-1
    otherwise; evaluation with position interpolation. ``head_only`` / ``tail_only``: one warp
    with probability 0.30 (Fig. 6/7's presets); Ours is ``head_tail``.
  - Table B: ``alpha-2``, ``alpha-4``, ``alpha-8``: Ours with alpha = 1/2, 1/4, 1/8 (1/6 is Ours;
    the paper does not say which model Table B varies, see :mod:`.published`).

* The warping and interpolation samplers are lengen/samplers/ (issue 12), registered as
  ``warp`` and ``interpolate``: :func:`interpolate_kwargs` and :func:`warp_kwargs` are the one
  place that names their keyword arguments. Without them installed, the models that need them
  fail before anything runs with a message saying so; the others run.

Scales (``SCALES`` in :mod:`.specs`, with the model table ``MODELS`` and the exhibits' columns):

* ``paper``: WikiText-103 (raw; ``--data-dir`` or ``datasets`` online), GPT-2 BPE (the paper
  does not name a tokenizer; GPT-2's is the architecture's own), ``gpt2-base`` (12 layers, 12
  heads, d_model 768; 123.6M parameters, the paper says 117M), context 512, evaluation to 4096
  (8 x), AdamW lr 5e-5 without weight decay, betas (0.9, 0.999), batch 64 (App. B.2: the HF
  causal-LM example's hyperparameters); no warmup, gradient clipping 1.0, dropout 0.1 (GPT-2's).
  Steps are not stated: we take 11,000, about 3 epochs (the HF example's default) of
  WikiText-103's ~120M GPT-2 tokens at 64 x 512 tokens per step. The HF example decays the
  learning rate linearly to 0; lengen has cosine and constant schedules, so cosine to 0. One seed
  (the paper reports single numbers). The whole test split at every length. GPU.
* ``cpu``: the offline KJV corpus (a stand-in for WikiText-103; every caption says so), the
  locally trained ``bpe`` tokenizer with 2,048 ids (as the tra-wikitext recipe, by the same
  measurement), T = 128, evaluation at T x 1, 2, 4, 6, 8 (the paper's columns) and also 16 and
  32 (to 4096; no published numbers there), a 2-layer GPT-2-style model (4 heads, d_model 128,
  GELU MLP 512, tied), batch 32, 1,500 steps, AdamW lr 2e-3 (100 warmup steps, cosine to 0.1 x;
  the paper's 5e-5 barely moves a small model in 1,500 steps), no weight decay, betas
  (0.9, 0.999), no dropout, one seed, at most 32,768 scored targets per length. Sized for 90
  minutes on a 2-core CPU with ``--workers 2``; check with ``--estimate``.
* ``smoke``: seconds, for tests (bytes, a small slice of the corpus, a 1-layer d_model-16 model,
  3 steps; numbers are meaningless).

Outputs in ``--out`` (default ``runs/index-warping-lm-<scale>``): a run directory per model x
seed (the RoPE+PI rows in the RoPE run's ``eval-pi.json``), ``results.csv`` (all rows, RoPE+PI
included), ``table3.md/.csv``, ``tableB.md/.csv``, ``fig7.md/.png``, ``table3.png`` and
``findings.md`` (each of the paper's claims, checked on ours).
"""
from __future__ import annotations

import os
import time

from lengen.config import resolve
from lengen.errors import ConfigError
from lengen.recipes.common import (add_eval_only_rows, default_device, eval_with_positions,
                                   log_failures, select, train_section, trained_columns)
from lengen.recipes.index_warping_lm.published import PAPER_TABLE3, PAPER_TABLEB
from lengen.recipes.index_warping_lm.report import write_report
from lengen.recipes.index_warping_lm.specs import (ALL_MODELS, BETA, EVAL_ONLY, EVAL_ONLY_BASE,
                                                   FIG7, MODELS, NEEDS_WARP, SCALES, TABLE3,
                                                   TABLEB, model_lengths, randomized_L)
from lengen.recipes.lm import EVAL_ALL, estimate_runs, task_caption, text_task_kwargs
from lengen.registry import lookup
from lengen.samplers import SAMPLERS, build_sampler
from lengen.sweep import Grid, RunSpec, run_sweep


# --- the samplers of issue 12: the one place naming their keyword arguments ----------------------
def interpolate_kwargs(train_length: int) -> dict:
    """``interpolate``: identity in training; positions x T / K at evaluation length K > T."""
    return {"train_length": int(train_length)}


def warp_kwargs(train_length: int, *, p_head: float, p_tail: float, alpha: int) -> dict:
    """``warp``: per training instance, head warping (alpha j) with probability ``p_head``, tail
    warping (l F(j / l), F the Beta(2, 5) CDF) with ``p_tail``; interpolation at evaluation."""
    return {"train_length": int(train_length), "p_head": float(p_head), "p_tail": float(p_tail),
            "alphas": 1.0 / alpha, "skew": "beta", "beta_a": BETA[0], "beta_b": BETA[1],
            "eval_mode": "interpolate"}


def samplers_needed(models) -> list[str]:
    need = []
    for m in models:
        name = EVAL_ONLY[m][2] if m in EVAL_ONLY else MODELS[m][2]
        if name in ("warp", "interpolate") and name not in need:
            need.append(name)
    return need


def check_available(models) -> None:
    """Raise ValueError when a selected model needs a sampler that is not registered."""
    select(models, ALL_MODELS, (), "model")
    missing = [n for n in samplers_needed(models) if n not in SAMPLERS]
    if missing:
        lacking = [m for m in models if set(samplers_needed([m])) & set(missing)]
        others = [m for m in models if m not in lacking]
        raise ValueError(
            f"the index-warping LM study {NEEDS_WARP} (lengen/samplers/, issue 12): position "
            f"sampler(s) {', '.join(repr(n) for n in missing)} are not registered in "
            f"lengen.samplers.SAMPLERS (registered: {', '.join(sorted(SAMPLERS))}), and "
            f"{', '.join(lacking)} use them. Install a lengen with them, or run the others: "
            f"--models {' '.join(others) or '(none)'}")


def model_config(model: str, scale: str = "cpu", seed: int = 0, *, corpus: str | None = None,
                 data_dir: str | None = None, device: str = "cpu",
                 name: str | None = None) -> dict:
    """Config dict of one trained model at a scale."""
    s = lookup(SCALES, scale, "scale")
    _, posenc, sampler, settings = lookup(MODELS, model, "model")
    T = s["seq_len"]
    mc = dict(s["model"], posenc=posenc, positions=sampler)
    if sampler == "randomized":
        mc["positions_kwargs"] = {"max_length": randomized_L(model, T), "eval_mode": "randomized"}
    elif sampler == "warp":
        mc["positions_kwargs"] = warp_kwargs(T, **settings)
    train = train_section(s, seed, device, log_every=10, base=s["train"])
    return {"name": name or run_name(model, seed), "model": mc,
            "task": {"name": "text", "kwargs": text_task_kwargs(
                s, corpus=corpus, data_dir=data_dir, eval_lengths_=model_lengths(model, scale))},
            "train": train,
            "eval": {"sequences": EVAL_ALL, "batch_size": s["eval_batch_size"], "seed": 1234}}


def run_name(model: str, seed: int) -> str:
    return f"{model}-s{seed}"


def trained_models(models) -> list[str]:
    """The models to train for a selection (RoPE+PI needs the RoPE run)."""
    return trained_columns(models, EVAL_ONLY_BASE)


def build_specs(scale: str = "cpu", *, seeds=None, models=None, corpus: str | None = None,
                data_dir: str | None = None, device: str = "cpu"):
    """RunSpecs of the trained models x seeds (tags ``model seed``). Configs that use issue 12's
    samplers are resolved here, so kwargs the installed samplers do not take fail at once."""
    models = list(models or ALL_MODELS)
    check_available(models)
    seeds = list(SCALES[scale]["seeds"] if seeds is None else seeds)
    grid = Grid(axes={"model": {m: {} for m in trained_models(models)},
                      "seed": {x: {} for x in seeds}},
                name=lambda t: run_name(t["model"], t["seed"]))
    specs = [RunSpec(g.name, model_config(g.tags["model"], scale, g.tags["seed"], corpus=corpus,
                                          data_dir=data_dir, device=device, name=g.name),
                     dict(g.tags)) for g in grid]
    for spec in specs:
        if spec.config["model"]["positions"] in ("warp", "interpolate"):
            try:
                resolve(spec.config, check_device=False)
            except ConfigError as e:
                raise ConfigError(f"{e} (the recipe's keyword arguments for issue 12's samplers "
                                  f"are set in lengen.recipes.index_warping_lm.recipe "
                                  f"warp_kwargs / interpolate_kwargs)") from None
    return specs


def pi_rows(out: str, spec, scale: str, *, device: str = "cpu", log=print) -> list[dict]:
    """Rows of the RoPE run ``spec`` evaluated with position interpolation (model ``RoPE+PI``;
    :func:`lengen.recipes.common.eval_with_positions`, cached in ``RUN_DIR/eval-pi.json``)."""

    return eval_with_positions(os.path.join(out, spec.name), "interpolate",
                               interpolate_kwargs(SCALES[scale]["seq_len"]), stem="eval-pi",
                               splits=[f"len={k}" for k in model_lengths("RoPE", scale)],
                               device=device, log=log)


def run_index_warping_lm(scale: str = "cpu", out: str | None = None, *, workers: int = 1,
                         seeds=None, models=None, corpus: str | None = None,
                         data_dir: str | None = None, backend: str = "local",
                         threads: int | None = None, device: str | None = None,
                         quiet: bool | None = None, log=print) -> dict:
    """Train (or resume / reuse) every run, evaluate RoPE+PI, then write the tables, figures and
    findings. Returns ``{"rows", "paths", "sweep"}``."""
    out = out or os.path.join("runs", f"index-warping-lm-{scale}")
    device = device or default_device(scale)
    models = list(models or ALL_MODELS)
    specs = build_specs(scale, seeds=seeds, models=models, corpus=corpus, data_dir=data_dir,
                        device=device)
    t0 = time.time()
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log)
    rows, failures = add_eval_only_rows(
        [r for r in res.rows if r.get("model") in models], res, specs, out,
        {m: base for m, base in EVAL_ONLY_BASE.items() if m in models},
        lambda spec, col: pi_rows(out, spec, scale, device=device, log=log), log=log)
    wall = time.time() - t0
    paths = write_report(rows, out, scale=scale, models=models,
                         seeds=sorted({s.tags["seed"] for s in specs}),
                         data_caption=task_caption(specs[0].config["task"]["kwargs"]),
                         wall_seconds=wall, log=log)
    log_failures(failures, out, log)
    return {"rows": rows, "paths": paths, "sweep": res, "failures": failures}


def estimate_time(scale: str = "cpu", *, steps: int = 10, models=None, seeds: int | None = None,
                  corpus: str | None = None, data_dir: str | None = None, workers: int = 1,
                  threads: int | None = None, device: str | None = None, log=print) -> dict:
    """Time ``steps`` training steps and one evaluation batch per length for every trained model
    (and the RoPE+PI evaluation) on this machine, and schedule the runs over ``workers`` as the
    sweep does (:func:`lengen.recipes.lm.estimate_runs`). Nothing is written."""
    device = device or default_device(scale)
    models = list(models or ALL_MODELS)
    n = len(SCALES[scale]["seeds"]) if seeds is None else seeds
    specs = build_specs(scale, seeds=list(range(n)), models=models, corpus=corpus,
                        data_dir=data_dir, device=device)
    T = SCALES[scale]["seq_len"]

    def extra(spec):
        if spec.tags["model"] == "RoPE" and "RoPE+PI" in models:
            return [("RoPE+PI", build_sampler("interpolate", **interpolate_kwargs(T)))]
        return []

    return estimate_runs(specs, steps=steps, workers=workers, threads=threads, device=device,
                         eval_extra=extra, label=lambda s: s.tags["model"], log=log)


__all__ = ["SCALES", "MODELS", "EVAL_ONLY", "ALL_MODELS", "TABLE3", "FIG7", "TABLEB",
           "PAPER_TABLE3", "PAPER_TABLEB", "NEEDS_WARP", "interpolate_kwargs", "warp_kwargs",
           "randomized_L", "model_lengths", "check_available", "model_config", "build_specs",
           "run_name", "pi_rows", "run_index_warping_lm", "estimate_time"]
