"""``lengen reproduce randomized-pe``: Ruoss et al. (2023), Tables 1 and 4, Fig. 4, and the
ablations of Appendix B.1 (Fig. 3: the maximum position L; Table 3: sorted vs unsorted).

Protocol (every scale; ``SCALES`` changes sizes and steps, never the protocol):

* the 15 Chomsky-hierarchy tasks as encoder tasks (input + output placeholders, answer read at the
  placeholders); train on input lengths uniform in 1..N, one length per batch;
* the paper's encoder (``lengen.model.presets``: 5 blocks, 8 heads, d_model 64, ReLU FFN 256,
  post-LayerNorm, no final norm, embeddings x sqrt(d), dropout 0.1, bidirectional), Adam without
  weight decay or schedule, gradient clipping at 1.0; loss and argmax over the output classes;
* eleven encodings (``SCHEMES``): none, sin/cos, relative (Transformer-XL), ALiBi (bidirectional,
  ``m(-|i-j| + 0.5[j<i])``), RoPE, learned; and the same five with randomized positions (a sorted
  random subset of [0, L), one draw per batch; randomized learned = label encodings). Randomized
  relative uses the signed differences of the drawn positions over [-(L-1), L-1] (the public
  code's right-of-query bug is not reproduced);
* score of a run = mean over the test lengths N+1..M of the per-length accuracy
  (:mod:`lengen.eval.length_sweep`); Table 1 = max over seeds x learning rates, Table 4 = mean ±
  std over seeds at the learning rate with the best mean;
* evaluation: dropout off (the reference leaves it on); randomized positions keep drawing fresh
  sorted positions at test time as in the paper (``eval_randomized=False``: positions 0..T-1).

Scales: ``SCALES`` in :mod:`lengen.recipes.randomized_pe.scales` (paper, cpu, smoke; the cpu
scale's per-task and per-encoding budgets and the search behind them are described there).

Outputs in ``--out`` (default ``runs/randomized-pe-<scale>``): one run directory per task x
encoding x seed x lr (``lengen.sweep``), ``results.csv`` (every row), ``scores.csv`` (one score per
run), ``table1.md/.csv`` (max; the CSV also holds the Table 4 numbers), ``table4.md`` (mean ± std),
``curves/<task>.png`` (Fig. 4), and with the ablations ``ablation_L.md/.csv/.png`` (Fig. 3) and
``table3.md/.csv`` (sorted vs unsorted). Published numbers sit beside ours in every table.
"""
from __future__ import annotations

import os
import time

import torch

from lengen.config import resolve
from lengen.eval.length_sweep import length_splits
from lengen.recipes.common import default_device, log_failures, train_section
from lengen.recipes.estimate import report_total, time_training_steps, timed, use_worker_threads
from lengen.model.presets import RUOSS2023_ENCODER, RUOSS2023_TRAIN
from lengen.recipes.randomized_pe.published import (PAPER_TABLE1, PAPER_TABLE3, PAPER_TABLE4,
                                                    UNSORTED)
from lengen.recipes.randomized_pe.report import write_report
from lengen.recipes.randomized_pe.scales import (PAPER_TASKS, SCALES, eval_lengths, task_scale,
                                                 work)
from lengen.recipes.randomized_pe.specs import (ABLATION_L_TASKS, EXTRA_SCHEMES, SCHEMES,
                                                TASK_LABELS)
from lengen.registry import lookup
from lengen.rundir.load import prepare
from lengen.sweep import RunSpec, run_sweep
from lengen.tasks import build_task

# --- configs ------------------------------------------------------------------------------------
def scheme_parts(scheme: str) -> tuple[str, str, str, bool]:
    return lookup(SCHEMES | EXTRA_SCHEMES, scheme, "encoding")


def run_config(task: str, scheme: str, scale: str = "cpu", seed: int = 0, lr: float | None = None,
               *, L: int | None = None, eval_randomized: bool = True, device: str = "cpu",
               name: str | None = None) -> dict:
    """Config dict of one run: ``task`` with encoding ``scheme`` at ``scale``."""
    s = task_scale(scale, task, scheme)
    _, posenc, positions, sort = scheme_parts(scheme)
    L = s["L"] if L is None else int(L)
    lr = s["lrs"][0] if lr is None else lr
    task_kwargs = {"max_train_length": s["N"], "max_eval_length": s["M"]}
    t = build_task(task, **task_kwargs)
    test, curve = eval_lengths(scale)
    splits = length_splits(curve + test)
    mc = dict(RUOSS2023_ENCODER, **s["model"], vocab_size=t.vocab_size, posenc=posenc,
              positions=positions)
    if positions == "randomized":
        need = t.max_input_length(splits)
        if L < need:
            raise ValueError(f"L={L} is too small for {task} at scale {scale}: its longest model "
                             f"input (length {s['M']} plus output placeholders) has {need} "
                             f"tokens, and randomized positions are distinct integers in [0, L)")
        mc["positions_kwargs"] = {"max_length": L, "sort": sort,
                                  "eval_mode": "randomized" if eval_randomized else "identity"}
    if posenc == "alibi":
        mc["posenc_kwargs"] = {"encoder_asymmetric": True}
    elif posenc == "learned":
        rows = L if positions == "randomized" else t.max_input_length(splits)
        if positions == "randomized" and not eval_randomized:
            rows = max(L, t.max_input_length(splits))
        mc["posenc_kwargs"] = {"max_positions": rows}
    train = train_section(s, seed, device, log_every=50, base=RUOSS2023_TRAIN, lr=lr)
    return {"name": name or run_name(task, scheme, seed, lr),
            "model": mc, "task": {"name": task, "kwargs": task_kwargs}, "train": train,
            "eval": {"splits": splits, "sequences": s["eval_sequences"],
                     "batch_size": s["eval_batch_size"], "seed": 1234}}


def run_name(task: str, scheme: str, seed: int, lr: float, L: int | None = None) -> str:
    return f"{task}-{scheme}{'' if L is None else f'-L{L}'}-s{seed}-lr{lr:g}"


def build_specs(scale: str = "cpu", *, tasks=None, schemes=None, seeds=None, lrs=None,
                ablation_L=None, ablation_unsorted: bool = False, eval_randomized: bool = True,
                device: str = "cpu"):
    """RunSpecs: tasks x schemes x seeds x lrs, plus the ablation runs if asked.

    Tags: ``task scheme seed lr L group`` (L is None for identity positions). ``ablation_L`` (a
    list of L values) adds randomized relative at each L on the Fig. 3 tasks among ``tasks`` (all
    of ``tasks`` if neither is selected); the main runs at the scale's L are shared, not repeated.
    ``ablation_unsorted`` adds randomized sin/cos without sorting on every task, and the sorted
    runs it is compared with."""
    s = SCALES[scale]
    tasks = list(tasks or s["tasks"])
    schemes = list(schemes or s["schemes"])
    for label, given, valid in (("task", tasks, PAPER_TASKS), ("encoding", schemes, SCHEMES)):
        bad = [x for x in given if x not in valid]
        if bad:
            raise ValueError(f"unknown {label}(s) {bad}. Valid: {', '.join(valid)}")
    specs, seen = [], set()

    def seeds_lrs(task, scheme):   # (seed, lr) pairs: the given ones, else the task's (and
        d = task_scale(scale, task, scheme)   # encoding's) at this scale; seed outer, lr inner
        return [(x, y) for x in (d["seeds"] if seeds is None else seeds)
                for y in (d["lrs"] if lrs is None else lrs)]

    def add(task, scheme, seed, lr, L, group):
        randomized = scheme_parts(scheme)[2] == "randomized"
        L_tag = (L or s["L"]) if randomized else None
        name = run_name(task, scheme, seed, lr, None if L in (None, s["L"]) else L)
        if name in seen:
            return
        seen.add(name)
        cfg = run_config(task, scheme, scale, seed, lr, L=L, eval_randomized=eval_randomized,
                         device=device, name=name)
        specs.append(RunSpec(name, cfg, {"task": task, "scheme": scheme, "seed": seed, "lr": lr,
                                         "L": L_tag, "group": group}))

    for t in tasks:
        for k in schemes:   # each task x encoding may have its own seeds and lrs
            for seed, lr in seeds_lrs(t, k):
                add(t, k, seed, lr, None, "main")
    if ablation_L is not None:
        ab_tasks = [t for t in ABLATION_L_TASKS if t in tasks] or tasks
        for t in ab_tasks:
            for L in list(ablation_L) or list(s["ablation_L"]):
                for seed, lr in seeds_lrs(t, "rand_relative"):
                    add(t, "rand_relative", seed, lr, int(L), "ablation_L")
    if ablation_unsorted:
        for t in tasks:
            for scheme in ("rand_sincos", UNSORTED):
                for seed, lr in seeds_lrs(t, scheme):
                    add(t, scheme, seed, lr, None, "unsorted")
    # Longest runs first (stable otherwise): the workers take runs in this order, and a long run
    # started last would leave the other workers idle at the end.
    specs.sort(key=lambda r: -work(r.config["train"], r.config["model"]["posenc"]))
    return specs


def caption(scale: str, *, tasks, schemes, seeds=None, lrs=None,
            eval_randomized: bool = True) -> str:
    """What was run, in words (the tables' caption); ``seeds`` / ``lrs`` = those given on the
    command line (None: each task's at this scale)."""
    s = SCALES[scale]
    test, curve = eval_lengths(scale)
    if s["test_stride"] == 1:
        lens = "every length"
    else:
        shown = (f"{test[0]}, {test[1]}, ..., {test[-2]}, {test[-1]}" if len(test) > 4
                 else ", ".join(map(str, test)))
        lens = f"lengths {shown} (stride {s['test_stride']}, {len(test)} lengths)"
    sizes = ", ".join(f"{k} {v}" for k, v in s["model"].items())
    model = (f"a reduced encoder ({sizes})" if sizes
             else "the paper's encoder (5 blocks, 8 heads, d_model 64, FFN 256)")

    def budget(task, scheme=None):   # "2 seed(s), 1,500 steps at batch 64, lr {0.0005}"
        d = task_scale(scale, task, scheme)   # (values given on the command line win)
        n_seeds = len(seeds) if seeds is not None else len(d["seeds"])
        return (f"{n_seeds} seed(s), {d['steps']:,} steps at batch {d['batch_size']}, lr "
                f"{{{', '.join(f'{x:g}' for x in (lrs or d['lrs']))}}}")

    def task_budget(task):   # the task's budget, then the encodings' that differ, in brackets
        own = [k for k in schemes if budget(task, k) != budget(task)]
        return budget(task) + "".join(f" ({scheme_parts(k)[0]}: {budget(task, k)})" for k in own)

    own = [t for t in tasks if t in s.get("per_task", {})]
    rest = [t for t in tasks if t not in own]
    parts = [("others: " if own else "") + budget(rest[0])] if rest else []
    parts += [f"{TASK_LABELS[t][1]}: {task_budget(t)}" for t in own]
    text = (f"Scale `{scale}`: {len(tasks)} task(s) x {len(schemes)} encoding(s); "
            f"{'; '.join(parts)}; {model}; train lengths U(1..{s['N']}); score = mean accuracy "
            f"over test {lens} in {s['N'] + 1}..{s['M']}, {s['eval_sequences']} sequences per "
            f"length; L = {s['L']}; randomized positions at evaluation: "
            f"{'fresh sorted draws (as the paper)' if eval_randomized else 'identity 0..T-1'}; "
            f"dropout off at evaluation.")
    if scale != "paper":
        p = SCALES["paper"]
        text += (f" The paper: 15 tasks x 11 encodings x {len(p['seeds'])} seeds x 3 lrs, "
                 f"{p['steps']:,} steps at batch {p['batch_size']}, every test length "
                 f"{p['N'] + 1}..{p['M']} with {p['eval_sequences']} sequences; numbers at this "
                 f"scale are not comparable in absolute terms.")
    return text


def run_randomized_pe(scale: str = "cpu", out: str | None = None, *, workers: int = 1, tasks=None,
                      schemes=None, seeds=None, lrs=None, eval_randomized: bool = True,
                      ablation_L=None, ablation_unsorted: bool = False, backend: str = "local",
                      threads: int | None = None, device: str | None = None,
                      quiet: bool | None = None, log=print) -> dict:
    """Train (or reuse) every run, then write tables, curves and ablations.
    Returns ``{"rows", "scores", "paths", "sweep"}``."""
    s = SCALES[scale]
    out = out or os.path.join("runs", f"randomized-pe-{scale}"
                              + ("" if eval_randomized else "-evalid"))
    device = device or default_device(scale)
    specs = build_specs(scale, tasks=tasks, schemes=schemes, seeds=seeds, lrs=lrs,
                        ablation_L=ablation_L, ablation_unsorted=ablation_unsorted,
                        eval_randomized=eval_randomized, device=device)
    t0 = time.time()
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log)
    tasks = list(tasks or s["tasks"])
    schemes = list(schemes or s["schemes"])
    cap = caption(scale, tasks=tasks, schemes=schemes, seeds=seeds, lrs=lrs,
                  eval_randomized=eval_randomized)
    scores, paths = write_report(res.rows, out, scale=scale, tasks=tasks, schemes=schemes,
                                 caption=cap, ablation_L=ablation_L is not None,
                                 ablation_unsorted=ablation_unsorted,
                                 wall_seconds=time.time() - t0, log=log)
    log_failures(res.failures, out, log)
    return {"rows": res.rows, "scores": scores, "paths": paths, "sweep": res}


def estimate_time(scale: str = "cpu", *, steps: int = 10, tasks=None, schemes=None,
                  seeds: int | None = None, lrs: int | None = None, workers: int = 1,
                  threads: int | None = None, device: str | None = None, log=print) -> dict:
    """Time ``steps`` training steps per task x encoding (:func:`lengen.recipes.estimate.
    time_training_steps`: lengths and positions drawn as in training) and one evaluation batch
    at the longest test length, and schedule the whole grid (no ablations; tasks x encodings x
    seeds x lrs, the sweep's order) over ``workers`` processes as the sweep does (``threads``
    per worker defaults to what the sweep gives each worker: cores // workers). The evaluation
    cost of a length is scaled from the longest one as (T / T_max)^2, which over-estimates the
    shorter lengths (conservative). Nothing is written; measure on an otherwise idle machine."""
    device = device or default_device(scale)
    s = SCALES[scale]
    tasks, schemes = list(tasks or s["tasks"]), list(schemes or s["schemes"])
    use_worker_threads(workers, threads)
    per_run = {}
    for task in tasks:
        for scheme in schemes:
            resolved = resolve(run_config(task, scheme, scale, device=device))
            cfg = resolved.config
            tsk, model = prepare(resolved)
            t_step = time_training_steps(cfg, tsk, model, steps=steps, device=device)
            lengths = [int(x.split("=")[1]) for x in cfg.eval.splits]
            with torch.inference_mode():
                b = tsk.eval_batch(f"len={max(lengths)}", cfg.eval.batch_size,
                                   torch.Generator().manual_seed(0)).to(device)
                t_max = timed(lambda: model(b.inputs), device)
            T_max = tsk.model_length(max(lengths))
            n_batches = -(-cfg.eval.sequences // cfg.eval.batch_size)
            t_eval = t_max * n_batches * sum((tsk.model_length(n) / T_max) ** 2 for n in lengths)
            per_run[(task, scheme)] = t_step * cfg.train.steps + t_eval
            log(f"{task:>26} {scheme:>14}: {1000 * t_step:7.1f} ms/step, eval ~{t_eval:6.1f} s "
                f"-> {per_run[(task, scheme)] / 60:6.1f} min per run")
    runs = []   # (work, seconds), sorted as build_specs orders the sweep
    for t in tasks:
        for k in schemes:
            ts = task_scale(scale, t, k)
            n_runs = (seeds or len(ts["seeds"])) * (lrs or len(ts["lrs"]))
            runs += [(work(ts, scheme_parts(k)[1]), per_run[(t, k)])] * n_runs
    costs = [c for _, c in sorted(runs, key=lambda r: -r[0])]
    scale_s = "the scale's"
    total = report_total(costs, workers, f"{len(tasks)} tasks x {len(schemes)} encodings x "
                         f"{seeds or scale_s} seeds x {lrs or scale_s} lrs", log=log)
    return {"seconds_per_run": per_run, "total_seconds": total}


__all__ = ["SCALES", "SCHEMES", "PAPER_TASKS", "PAPER_TABLE1", "PAPER_TABLE3", "PAPER_TABLE4",
           "TASK_LABELS", "build_specs", "run_config", "run_randomized_pe", "estimate_time",
           "caption", "eval_lengths", "task_scale"]
