"""``lengen reproduce index-warping``: the algorithmic-task experiments of "Improving Length
Generalization via Position Index Warping" (Sec. 5.1, Appendix B.1): Fig. 5, Table A, Fig. 6 and
Fig. C.

Protocol (every scale; ``SCALES`` changes sizes and steps, never the protocol; the tables
``SCALES``, ``MODELS``, ``TASK_M`` and the exhibits' columns are in :mod:`.specs`):

* tasks copy, reverse, sort, summation (:mod:`lengen.tasks.sequence`, Kazemnejad et al.'s
  decoder formats); training lengths K ~ U(2, M), test lengths 2..5M (seen and unseen), with
  M = 20 for copy / reverse and 8 for sort / summation (``TASK_M``; smaller scales shrink M);
* a causal decoder (T5-base-like at paper scale: ReLU MLP, RMSNorm pre-norm, dropout 0.1);
* metric: sequence accuracy (exact match of answer + EOS, teacher forced = greedy) per test length;
  Table A = its unweighted mean over the evaluated lengths 2..5M, mean over seeds;
* columns (``MODELS``; CLI keys): ``rope`` (RoPE, positions 0..T-1), ``rope_pi`` (RoPE with
  position interpolation at evaluation, ratio M / L_te per test length: the ``interpolate``
  sampler; PI is the identity in training, so this column is the RoPE run's weights evaluated
  again, not a second, bit-identical training run), ``alibi``, ``rpe_10m`` / ``rpe_5m`` / ``rpe_3m`` (RoPE with Ruoss et al.'s randomized
  positions over [0, L), L = 10M / 5M / 3M), ``ours_sqrt`` / ``ours_beta`` (RoPE with index
  warping, the ``warp`` sampler: 15% head alpha * j with alpha in {0.4..0.8}, 15% tail l f(j / l)
  with f = sqrt or the Beta(2, 5) CDF, PI at evaluation), and Fig. 6's ``head_only`` /
  ``tail_only`` (30% of one warp; ``head_tail`` is ``ours_sqrt``).

Readings where the paper is silent (stated in every caption):

* **M and L_te count tokens** of the model input (prompt + answer), as in the samplers' default
  ``length_unit="tokens"`` (:mod:`lengen.samplers.interpolate`), so PI maps every test position
  into the trained range; ``--length-unit items`` uses the paper's item counts instead.
* **Randomized PE's L = k M** with M the longest training input in tokens. Ruoss et al.'s
  positions are distinct integers in [0, L), so L must hold the longest test input; when k M is
  smaller (3M for copy: 3 x 42 < 202 tokens at K = 100) we raise L to the longest test input and
  the report says so (the paper does not say what it did).
* **RoPE rotates the whole head** (the paper's eq. 2); Kazemnejad et al.'s code rotates 25%
  (``--rotary-fraction 0.25``).
* **Schedule**: the paper's polynomial decay is not implemented in lengen; the paper scale uses
  linear warm-up (6%) and cosine decay to 0 instead.

Scales:

* ``paper``: all 4 tasks x 10 columns x 3 seeds; 12 layers, 12 heads, d_model 768, d_ff 3072,
  dropout 0.1; AdamW lr 3e-5, weight decay 0.05, batch 64, 40,000 steps, 6% warm-up; a fixed
  training set of 100K examples; every test length 2..5M with 10K test sequences in all
  (ceil(10000 / (5M - 1)) per length). GPU.
* ``cpu``: about 1.8 hours on a 2-core CPU with ``--workers 2`` (90 minutes before summation
  got its own budget; check with ``--estimate``; the lead runs it): the 4 tasks at the paper's
  M, 7 columns (``CPU_MODELS``: RoPE, RoPE+PI, ALiBi, R.P. (3M), ours (sqrt), head_only,
  tail_only; ``--models`` adds the others), one seed, a small decoder (3 layers, 4 heads, d_model 128), 3,000 steps at batch 64,
  lr 1e-3 (summation: 12,000 steps at lr 3e-4, the budget at which RoPE fits its training
  lengths, ``results/index-warping-summation/``), test lengths 2..5M strided (both ends, M and
  M + 1 kept), 64 sequences per length.
  Its wall time and what fits at this size (which cells are marked ‡) are measured in
  ``results/index-warping-cpu/README.md``.
* ``smoke``: seconds, for tests (copy with M = 3, a tiny model; numbers are meaningless).

Outputs in ``--out`` (default ``runs/index-warping-<scale>``): one run directory per task x column x
seed (``lengen.sweep``), ``results.csv`` (every row), ``table_a.md`` / ``table_a.csv`` (ours beside
the published Table A, plus our seen / unseen averages), and per task ``fig5-<task>.png``,
``fig6-<task>.png``, ``figC-<task>.png`` (accuracy vs length, training lengths shaded).
"""
from __future__ import annotations

import os
import time

import torch

from lengen.config import resolve
from lengen.eval.length_sweep import sweep_lengths
from lengen.recipes.common import (add_eval_only_rows, default_device, eval_with_positions,
                                   log_failures, select, train_section, trained_columns)
from lengen.recipes.estimate import report_total, time_training_steps, timed, use_worker_threads
from lengen.recipes.index_warping.published import PAPER_TABLE_A, UNCERTAIN_ROWS
from lengen.recipes.index_warping.report import write_report
from lengen.recipes.index_warping.specs import (CPU_MODELS, EVAL_ONLY, FIG5, FIG6, FIGC, MODELS,
                                                PAPER_TEST_SEQUENCES, SCALES, TABLE_A, TASK_M,
                                                TEST_FACTOR)
from lengen.registry import lookup
from lengen.rundir.load import prepare
from lengen.sweep import Grid, RunSpec, run_sweep
from lengen.tasks import build_task
from lengen.tasks.splits import length_splits


def task_lengths(task: str, scale: str) -> tuple[int, list[int]]:
    """(M, the evaluated test lengths 2..5M): every length, or a stride keeping 2, M and 5M."""
    s = lookup(SCALES, scale, "scale")
    M = s["M"][task]
    top = TEST_FACTOR * M
    stride = s["test_stride"] or max(1, M // 4)
    return M, sorted(set(sweep_lengths(2, top, stride)) | {M, M + 1})


def eval_sequences(task: str, scale: str) -> int:
    s = SCALES[scale]
    if s["eval_sequences"] is not None:
        return s["eval_sequences"]
    M = s["M"][task]
    return -(-PAPER_TEST_SEQUENCES // (TEST_FACTOR * M - 1))


def randomized_L(task_obj, k: int, test_lengths) -> tuple[int, bool]:
    """(L, raised): L = k x the longest training input (tokens), raised to the longest test
    input when smaller (positions are distinct integers in [0, L))."""
    L = k * task_obj.train_input_length()
    need = task_obj.max_input_length(length_splits(test_lengths))
    return (need, True) if need > L else (L, False)


def run_config(task: str, model: str, scale: str = "cpu", seed: int = 0, *,
               length_unit: str = "tokens", rotary_fraction: float = 1.0, device: str = "cpu",
               name: str | None = None) -> dict:
    """Config dict of one run: column ``model`` on ``task`` at ``scale``."""
    s = lookup(SCALES, scale, "scale")
    lookup(TASK_M, task, "task")
    _, posenc, positions, extra = lookup(MODELS, model, "Table A / Fig. 6 column")
    M, lengths = task_lengths(task, scale)
    task_kwargs = {"min_length": 2, "max_train_length": M, "max_eval_length": TEST_FACTOR * M}
    if s["train_size"]:
        task_kwargs["train_size"] = s["train_size"]
    mc = dict(s["model"], mlp="relu", norm="rms", norm_position="pre", posenc=posenc,
              positions=positions)
    if posenc == "rope" and rotary_fraction != 1.0:
        mc["posenc_kwargs"] = {"rotary_fraction": rotary_fraction}
    if positions == "randomized":
        t = build_task(task, **task_kwargs)
        L, _ = randomized_L(t, extra["k"], lengths)
        mc["positions_kwargs"] = {"max_length": L}
    elif positions in ("interpolate", "warp"):
        mc["positions_kwargs"] = dict(extra, length_unit=length_unit)
    st = {**s, **s.get("per_task", {}).get(task, {})}          # the task's own steps / lr
    train = train_section(st, seed, device, log_every=50,
                          copy=("lr", "warmup_steps", "min_lr_frac", "weight_decay"),
                          betas=[0.9, 0.999], schedule="cosine")
    return {"name": name or run_name(task, model, seed), "model": mc,
            "task": {"name": task, "kwargs": task_kwargs}, "train": train,
            "eval": {"splits": length_splits(lengths), "sequences": eval_sequences(task, scale),
                     "batch_size": s["eval_batch_size"], "seed": 1234}}


def run_name(task: str, model: str, seed: int) -> str:
    return f"{task}-{model}-s{seed}"


def build_specs(scale: str = "cpu", *, tasks=None, models=None, seeds=None,
                length_unit: str = "tokens", rotary_fraction: float = 1.0, device: str = "cpu"):
    """RunSpecs of tasks x trained columns x seeds (tags: task, model, seed); an evaluation-only
    column (``EVAL_ONLY``) adds the column it evaluates instead of a run of its own."""
    s = lookup(SCALES, scale, "scale")
    tasks = select(tasks, TASK_M, s["tasks"], "task")
    models = trained_columns(select(models, MODELS, s["models"], "column"), EVAL_ONLY)
    seeds = list(s["seeds"] if seeds is None else seeds)
    grid = Grid(axes={"task": {t: {} for t in tasks}, "model": {m: {} for m in models},
                      "seed": {x: {} for x in seeds}},
                name=lambda g: run_name(g["task"], g["model"], g["seed"]))
    return [RunSpec(spec.name, run_config(spec.tags["task"], spec.tags["model"], scale,
                                          spec.tags["seed"], length_unit=length_unit,
                                          rotary_fraction=rotary_fraction, device=device,
                                          name=spec.name), dict(spec.tags))
            for spec in grid]


def caption(scale: str, *, seeds, length_unit: str = "tokens", rotary_fraction: float = 1.0,
            wall_seconds: float | None = None) -> str:
    s = SCALES[scale]
    m = s["model"]
    n_eval = (f"{s['eval_sequences']} sequences per test length" if s["eval_sequences"]
              else f"{PAPER_TEST_SEQUENCES:,} test sequences spread over the lengths")
    every = "every length" if s["test_stride"] == 1 else "strided"
    rotated = ("the whole head" if rotary_fraction == 1
               else f"{rotary_fraction:g} of each head")
    cap = (f"Index-warping reproduction ({scale} scale): sequence accuracy (%), ours = mean over "
           f"{len(seeds)} seed(s) {list(seeds)}; published Table A in parentheses. Decoder "
           f"{m['n_layers']} layers, {m['n_heads']} heads, d_model {m['d_model']}, ReLU MLP "
           f"{m['d_ff']}, RMSNorm pre-norm, dropout {m['dropout']:g}; AdamW lr {s['lr']:g}, "
           f"weight decay {s['weight_decay']:g}, batch {s['batch_size']}, {s['steps']} steps, "
           f"{s['warmup_steps']} warm-up steps then cosine decay (the paper: polynomial); "
           f"training K ~ U(2, M), test K = 2..5M ({every}), "
           f"{n_eval}. M and L_te of PI count {length_unit}; randomized PE's L = k x the "
           f"longest training input in tokens, raised to the longest test input where smaller; "
           f"RoPE rotates {rotated}.")
    for task, tt in s.get("per_task", {}).items():
        cap += (f" {task.capitalize()} trains {tt.get('steps', s['steps'])} steps at lr "
                f"{tt.get('lr', s['lr']):g} instead (the first budget of the search at which "
                f"RoPE fitted its training lengths).")
    if wall_seconds is not None:
        cap += f" Wall time of this invocation: {wall_seconds / 60:.1f} min."
    return cap


def run_index_warping(scale: str = "cpu", out: str | None = None, *, workers: int = 1,
                      tasks=None, models=None, seeds=None, length_unit: str = "tokens",
                      rotary_fraction: float = 1.0, backend: str = "local",
                      threads: int | None = None, device: str | None = None,
                      quiet: bool | None = None, log=print) -> dict:
    """Train (or reuse) every run, then write Table A and the figures.
    Returns ``{"rows", "records", "paths", "sweep"}``."""
    s = SCALES[scale]
    out = out or os.path.join("runs", f"index-warping-{scale}")
    device = device or default_device(scale)
    specs = build_specs(scale, tasks=tasks, models=models, seeds=seeds, length_unit=length_unit,
                        rotary_fraction=rotary_fraction, device=device)
    models = select(models, MODELS, s["models"], "column")
    t0 = time.time()
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log)

    def evaluate(spec, col):                    # an evaluation-only column on its base run
        mc = run_config(spec.tags["task"], col, scale, spec.tags["seed"], length_unit=length_unit,
                        rotary_fraction=rotary_fraction, device=device)["model"]
        return eval_with_positions(os.path.join(out, spec.name), mc["positions"],
                                   mc["positions_kwargs"], stem=f"eval-{col}", device=device,
                                   log=log)

    rows, failures = add_eval_only_rows(res.rows, res, specs, out,
                                        {c: EVAL_ONLY[c] for c in models if c in EVAL_ONLY},
                                        evaluate, log=log)
    seeds = sorted({sp.tags["seed"] for sp in specs})
    cap = caption(scale, seeds=seeds, length_unit=length_unit, rotary_fraction=rotary_fraction,
                  wall_seconds=time.time() - t0)
    records, paths = write_report(rows, out, scale=scale,
                                  tasks=select(tasks, TASK_M, s["tasks"], "task"),
                                  models=models, caption=cap, log=log)
    log_failures(failures, out, log)
    return {"rows": rows, "records": records, "paths": paths, "sweep": res,
            "failures": failures}


def estimate_time(scale: str = "cpu", *, steps: int = 10, tasks=None, models=None,
                  seeds: int | None = None, workers: int = 1, threads: int | None = None,
                  device: str | None = None, log=print) -> dict:
    """Time ``steps`` training steps per task x trained column (:func:`lengen.recipes.estimate.
    time_training_steps`) and one evaluation batch at the longest test length, and schedule the
    grid (tasks x columns x seeds, the sweep's order) over ``workers`` processes as the sweep
    does (``threads`` per worker defaults to what the sweep gives each worker); evaluation-only
    columns (RoPE+PI) add their evaluation after the sweep. Evaluation at a shorter length is
    scaled from the longest as (T / T_max)^2 (conservative). Nothing is written; measure on an
    otherwise idle machine."""
    device = device or default_device(scale)
    s = SCALES[scale]
    tasks = select(tasks, TASK_M, s["tasks"], "task")
    models = select(models, MODELS, s["models"], "column")
    trained = trained_columns(models, EVAL_ONLY)
    n_seeds = seeds or len(s["seeds"])
    use_worker_threads(workers, threads)
    per_run, serial = {}, 0.0
    for task in tasks:
        for m in trained + [c for c in models if c in EVAL_ONLY]:
            resolved = resolve(run_config(task, m, scale, device=device))
            cfg = resolved.config
            tsk, model = prepare(resolved)
            t_step = (0.0 if m in EVAL_ONLY else
                      time_training_steps(cfg, tsk, model, steps=steps, device=device))
            model.eval()
            _, lengths = task_lengths(task, scale)
            with torch.inference_mode():
                b = tsk.eval_batch(f"len={max(lengths)}", cfg.eval.batch_size,
                                   torch.Generator().manual_seed(0)).to(device)
                t_max = timed(lambda: model(b.inputs, positions=model.sample_positions(
                    b.inputs.shape[1], batch_size=b.inputs.shape[0], device=device, batch=b)),
                    device)
            T_max = tsk.input_length(max(lengths))
            n_batches = -(-cfg.eval.sequences // cfg.eval.batch_size)
            t_eval = t_max * n_batches * sum((tsk.input_length(n) / T_max) ** 2 for n in lengths)
            per_run[(task, m)] = t_step * cfg.train.steps + t_eval
            if m in EVAL_ONLY:
                serial += t_eval * n_seeds
                log(f"{task:>10} {m:>10}: evaluation of the {EVAL_ONLY[m]} run ~{t_eval:6.1f} s "
                    f"(after the sweep)")
            else:
                log(f"{task:>10} {m:>10}: {1000 * t_step:7.1f} ms/step, eval ~{t_eval:6.1f} s "
                    f"-> {per_run[(task, m)] / 60:6.1f} min per run")
    costs = [per_run[(t, m)] for t in tasks for m in trained for _ in range(n_seeds)]
    total = report_total(costs, workers, f"{len(tasks)} tasks x {len(trained)} trained columns "
                         f"x {n_seeds} seed(s)", serial=serial, log=log)
    return {"seconds_per_run": per_run, "total_seconds": total}


__all__ = ["SCALES", "MODELS", "CPU_MODELS", "EVAL_ONLY", "trained_columns", "TASK_M", "FIG5",
           "FIG6", "FIGC", "TABLE_A", "PAPER_TABLE_A", "UNCERTAIN_ROWS", "build_specs", "run_config", "run_index_warping",
           "estimate_time", "task_lengths", "randomized_L", "caption"]
