"""``lengen reproduce addition``: Zhou et al. (2024), "Transformers Can Achieve Length
Generalization But Not Robustly": decimal addition, trained on 1..N digits, exact match (EM) of
greedy answers at every length 1..M.

Protocol (every scale; ``SCALES`` changes sizes, steps and trial counts, never the protocol):

* the ``addition`` task: both operands n digits, n ~ U(1, N), one zero pad for the carry; the
  paper's default format is the reversed one with index hints (102 ordered hints, a consecutive run
  from a random start, in training and at test time: the model writes the answer's hints itself);
* the paper's block (``lengen.model.presets``: GeGLU, RMSNorm before each sublayer and after each
  residual sum, final norm, no dropout, causal) and optimiser (AdamW, weight decay 0.1, linear
  warm-up, cosine to 0.1 x lr); FIRE shared by the layers;
* per-PE defaults (the paper: "we tailor the default hyperparameter choice to best suit each PE";
  only its final recipe is spelled out): FIRE runs with randomized positions (the recipe of Fig. 1:
  FIRE + randomized PE + reversed + hints), KerpleLog / RoPE / NoPE with positions 0..T-1, and no
  random spaces anywhere (random spaces only "marginally" help RoPE / KerpleLog; they are an
  ablation here). Randomized positions are a sorted subset of [0, L) in training and, as in Ruoss
  et al. and lengen's default, a fresh draw per block of test sequences at evaluation;
* ``SETTINGS``: the four PEs with hints (Figs. 3/4), without hints (Fig. 4), in the standard format
  (Fig. 5), with random spaces (Fig. 7, Shen et al.: a blank token with probability ``spaces`` in
  every prompt gap, geometric run length, at most 4; training only), with randomized positions
  toggled (Fig. 8: FIRE without, KerpleLog and RoPE with), and beyond the paper position coupling
  (learned table on the coupled ids; Cho et al. 2024) and Abacus (learned table on the digit
  index; McLeish et al. 2024), both in the reversed format without hints
  (:mod:`lengen.samplers.digits`). Trials = weight-initialisation seeds 0..T-1 on one data order
  (the paper's "10 FIRE trials using identical training data order but distinct weight
  initializations"); Fig. 11 is FIRE on an init x data-order grid; Fig. 13 is FIRE at several
  training lengths N;
* evaluation: EM of answer + EOS at every test length (teacher forced, which equals greedy
  decoding; ``lengen.eval.generation``), ``eval_sequences`` per length; OOD EM at ``track``
  lengths every ``eval_every`` steps (Figs. 13 and C.4-C.7); error analysis of real greedy decoding
  (``lengen.eval.addition_errors``) at ``error_lengths`` for the four PEs with hints and for
  coupling / Abacus (Fig. 9: with vs without carry; Fig. C.10: wrong digits per answer and where);
* a run that diverges (NaN loss: the paper's fragile seeds) is recorded as diverged and the sweep
  goes on; the report lists it and the command still exits 0 (other failures exit 1).

Not built: sequence packing to 2048 tokens (the paper's batches are packed; ours hold whole
examples, right-padded, so a batch of 128 holds fewer tokens than theirs); the 268M / 5M / 2M
model-size ablations (Figs. 14-15, C.14-C.15); the learning-rate, weight-decay and dropout
studies (Figs. 16, C.16-C.17).

Scales (numbers in ``SCALES``; the captions of the written tables restate them):

* ``paper``: the 25M preset, N = 40, every test length 1..100 with 1,000 sequences, 10 trials,
  50,000 steps at batch 128, lr 3e-4; Fig. 13 at N = 10, 20, 30, 40 (5 trials, as Fig. C.13);
  Fig. 11 on 3 inits x 5 data orders; randomized positions from [0, 2048). A GPU job (lengen
  picks cuda when present).
* ``gpu``: the paper's 5M preset (4 blocks x 256) on one GPU shared by the sweep's workers
  (``--workers 14`` on an H100), N = 10, test lengths 1..50 in steps of 2, 4,000 steps at batch
  128, lr 1e-3, bf16 autocast; three trials for the four PEs with hints, two per ablation, FIRE
  also at N = 20 (two trials); randomized positions from [0, 640). Measured in
  ``results/addition-gpu/README.md``.
* ``cpu``: a small model of the paper's block (2 blocks, d_model 64, see ``SCALES['cpu']``),
  N = 10, test lengths 1..20, at the budget the Fig. 3 search found (8,000 steps at batch 128,
  ``results/addition-fig3-search``): FIRE and its four ablations at lr 3e-3, KerpleLog and Abacus
  at 1e-3, position coupling at 1e-3 for 12,000 steps (``per_setting``); three init seeds on
  every arm. RoPE and NoPE fitted at no budget of that search and run at its last lr, 1e-3;
  FIRE at N = 20 (tested to 40) and the init x data-order grid only with ``--train-lengths`` /
  ``--heatmap``. 30 runs, about 4 hours on 2 cores with
  ``--workers 2`` (``--estimate`` times it on the machine); ``--part 1/3`` .. ``3/3`` runs one
  seed of every setting each, under 2 hours, and each part's report covers every finished run.
  At N = 10 the paper itself reports no generalization beyond the training lengths (its Fig.
  13), so the cpu scale cannot show FIRE's 2.5x extension; what it shows is measured in
  ``results/addition-cpu-recipe/README.md``.
* ``cpu-5k``: the first cpu scale, 5,000 steps at batch 32 and lr 3e-3 (two trials for the four
  PEs with hints, one for each ablation, FIRE also on a 2 x 2 init x data-order grid), about an
  hour; FIRE fitted on 1 of 3 seeds there (``results/addition-cpu``, ``addition-cpu-seeds``).
* ``smoke``: seconds, for tests (tiny model, N = 3, M = 5; numbers are meaningless).

Outputs in ``--out`` (default ``runs/addition-<scale>``): one run directory per setting x trial
(``lengen.sweep``; error analyses in ``<run>/errors.json``), ``results.csv`` (every row: final EM
per length, EM during training, error-analysis rows), and the report (:mod:`.report`):
``table.md/.csv``, ``claims.md``, ``errors.md``, ``fig*.png``.
"""
from __future__ import annotations

import copy
import functools
import json
import os
import time
import traceback

import torch

from lengen.config import resolve
from lengen.eval.addition_errors import addition_error_analysis
from lengen.eval.evaluate import evaluate
from lengen.fileio import save_json_atomic
from lengen.recipes.addition.specs import (ERROR_SETTINGS, EVAL_SEED, FIGURES, PE_LABELS, PES,
                                           SCALES, SETTINGS, build_specs, caption,
                                           default_device, eval_lengths, run_config, run_name,
                                           trial_seeds)
from lengen.recipes.addition.report import write_report
from lengen.recipes.addition.scores import is_divergence
from lengen.recipes.common import log_failures, part_of
from lengen.recipes.estimate import report_total, time_training_steps, timed, use_worker_threads
from lengen.rundir.load import load_run, prepare
from lengen.sweep import RunSpec, SweepResult, finished_rows, run_one, run_sweep
from lengen.sweep.grid import failure_result
from lengen.tasks.splits import length_splits


# ---- running ------------------------------------------------------------------------------------
#: bumped when the error analysis gains metrics, so cached ``errors.json`` are recomputed
ERROR_ANALYSIS_VERSION = 2


def error_key(analysis: dict) -> dict:
    return dict({k: analysis[k] for k in ("error_splits", "error_sequences", "seed")},
                version=ERROR_ANALYSIS_VERSION)


def training_rows(run_dir: str, meta: dict) -> list[dict]:
    """Periodic-evaluation EM of a run (``metrics.jsonl``) as rows with metric
    ``seq_acc_during_training`` and the ``step``."""
    rows = []
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            for k, v in d.items():
                parts = k.split("/")
                if len(parts) == 3 and parts[0] == "eval" and parts[2] == "seq_acc":
                    rows.append(dict(meta, split=parts[1], metric="seq_acc_during_training",
                                     value=v, step=d["step"]))
    return rows


def error_rows(spec, run_dir: str, analysis: dict) -> list[dict]:
    """Greedy-decoding error analysis of a finished run at the error lengths, cached in
    ``<run>/errors.json`` (recomputed when its settings differ)."""
    path = os.path.join(run_dir, "errors.json")
    key = error_key(analysis)
    try:
        with open(path) as f:
            cached = json.load(f)
        if cached.get("key") == key:
            return cached["rows"]
    except (OSError, ValueError):
        pass
    cfg, task, model = load_run(run_dir, device=analysis.get("device", "cpu"))
    with torch.random.fork_rng(devices=[]):
        rows, records = addition_error_analysis(
            model, task, analysis["error_splits"], n_sequences=analysis["error_sequences"],
            seed=analysis["seed"], batch_size=cfg.eval.batch_size,
            device=analysis.get("device", "cpu"), meta={"run": spec.name})
    save_json_atomic({"key": key, "rows": rows, "records": records}, path)
    return rows


def run_addition(spec, out_dir: str, *, quiet: bool = True, threads: int = 0,
                 analysis: dict | None = None) -> dict:
    """:func:`lengen.sweep.run_one`, then the run's training-curve rows and (for settings in
    ``analysis['settings']``) its error-analysis rows, appended to the result's rows.
    Picklable through ``functools.partial`` for sweep workers."""
    if isinstance(spec, dict):
        spec = RunSpec(**spec)
    res = run_one(spec, out_dir, quiet=quiet, threads=threads)
    if res["status"] == "failed" or analysis is None:
        return res
    run_dir = os.path.join(out_dir, spec.name)
    meta = {"run": spec.name}
    try:
        extra = training_rows(run_dir, meta)
        if spec.tags.get("setting") in analysis["settings"]:
            extra += error_rows(spec, run_dir, analysis)
    except Exception as e:  # noqa: BLE001 - recorded like a failing run
        res.update(status="failed", error=f"error analysis: {type(e).__name__}: {e}",
                   traceback=traceback.format_exc(), rows=[])
        return res
    res["rows"] = list(res["rows"]) + extra
    return res


def analysis_settings(scale: str, device: str) -> dict:
    """The greedy-decoding error analysis of ``scale`` as :func:`run_addition` takes it: which
    settings are analysed, at which lengths, how many sequences, the evaluation seed."""
    s = SCALES[scale]
    return {"settings": list(ERROR_SETTINGS), "error_splits": length_splits(s["error_lengths"]),
            "error_sequences": s["error_sequences"], "seed": EVAL_SEED, "device": device}


def run_addition_recipe(scale: str = "cpu", out: str | None = None, *, workers: int = 1,
                        settings=None, trials=None, train_lengths: bool | None = None,
                        heatmap: bool | None = None, backend: str = "local",
                        threads: int | None = None, device: str | None = None,
                        quiet: bool | None = None, part: tuple[int, int] | None = None,
                        log=print) -> dict:
    """Train (or reuse) every run, analyse the errors, write the report. ``part`` (K, N): train
    only part K of N of the grid (:func:`grid_part`); the report then covers every run of the
    grid finished in ``out`` so far, and names the ones still to run. Returns ``{"rows",
    "paths", "sweep", "diverged", "failed", "pending"}``."""
    out = out or os.path.join("runs", f"addition-{scale}")
    device = device or default_device(scale)
    grid = build_specs(scale, settings=settings, trials=trials, device=device,
                       train_lengths=train_lengths, heatmap=heatmap)
    specs = grid_part(grid, part)
    run_fn = functools.partial(run_addition, analysis=analysis_settings(scale, device))
    t0 = time.time()
    if part is not None:
        log(f"part {part[0]} of {part[1]}: {len(specs)} of the grid's {len(grid)} runs")
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads,
                    quiet=(workers > 1) if quiet is None else quiet, log=log, run_fn=run_fn)
    t_part = time.time() - t0
    own_failures = res.failures               # this invocation's: its exit code and messages
    rows, pending = list(res.rows), []
    if part is not None:
        res, pending = read_back_other_parts(grid, res, out, run_fn)
        res.write()           # results.csv, failures.json, sweep.json: every part's runs so far
        rows = res.rows
    trials, pe_trials = trial_seeds(scale, trials)
    cap = caption(scale, n_runs=len(grid), trials=trials, pe_trials=pe_trials)
    if pending:
        cap += (f" Not run yet ({len(pending)} of {len(grid)}; the other parts of --part): "
                f"{', '.join(pending)}.")
    if part is not None:
        trained = [sp.name for sp in specs
                   if res.status.get(sp.name, {"status": "cached"})["status"] != "cached"]
        cap += (f" Part {part[0]} of {part[1]} trained {len(trained)} of its {len(specs)} runs "
                f"in {t_part / 60:.1f} min" + (" (the others were finished: read back)."
                                              if len(trained) < len(specs) else "."))
    paths = write_report(rows, out, scale=scale, caption=cap,
                         wall_seconds=time.time() - t0, log=log)
    diverged = [f["name"] for f in own_failures if is_divergence(f["error"])]
    other = [f for f in own_failures if not is_divergence(f["error"])]
    if diverged:
        log(f"{len(diverged)} run(s) diverged (recorded in the report): {', '.join(diverged)}")
    log_failures(other, out, log)
    return {"rows": rows, "paths": paths, "sweep": res, "diverged": diverged,
            "failed": [f["name"] for f in other], "pending": pending}


def read_back_other_parts(grid: list, res, out: str, run_fn):
    """After one part of ``grid`` ran (``res``): every run of the other parts that is finished
    in ``out``, read back (nothing trains: ``run_fn`` returns a finished run's rows, and its
    cached error analysis), and every one that failed there (its ``failure.json``), as one
    :class:`lengen.sweep.SweepResult` over the grid; and the names of the runs not run yet."""
    results = dict(res.results)
    pending = []
    for sp in grid:
        if sp.name in results:
            continue
        run_dir = os.path.join(out, sp.name)
        if finished_rows(resolve(sp.config).config.to_dict(), run_dir)[0] is not None:
            results[sp.name] = run_fn(sp, out, quiet=True, threads=0)
            continue
        try:
            with open(os.path.join(run_dir, "failure.json")) as f:
                failed = json.load(f)
            results[sp.name] = failure_result(sp, failed.get("error") or "failed",
                                              failed.get("traceback"))
        except (OSError, ValueError):
            pending.append(sp.name)
    return SweepResult(grid, results, out), pending


def grid_part(grid: list, part: tuple[int, int] | None) -> list:
    """Part K of N of the grid (``--part K/N``): the runs ordered by init seed, then data order,
    then the grid's order, cut into N contiguous pieces, so that at the cpu scale (three seeds,
    ``--part k/3``) each part is one seed of every setting, and a claim's paired comparison has
    two seeds after two parts."""
    order = {sp.name: i for i, sp in enumerate(grid)}
    return part_of(grid, part, key=lambda sp: (sp.tags["seed"], sp.tags["data_seed"],
                                               order[sp.name]))


# ---- time estimate ------------------------------------------------------------------------------
def estimate_time(scale: str = "cpu", *, settings=None, trials=None,
                  train_lengths: bool | None = None, heatmap: bool | None = None,
                  workers: int = 1, threads: int | None = None, device: str | None = None,
                  steps: int = 8, part: tuple[int, int] | None = None, log=print) -> dict:
    """Time ``steps`` training steps (:func:`lengen.recipes.estimate.time_training_steps`) for
    every distinct (setting, N) of the grid, plus its evaluation work measured on this machine:
    the final evaluation (one batch per test length, scaled to ``eval_sequences``), the periodic
    evaluations (``track`` lengths, every ``eval_every`` steps) and the greedy-decoding error
    analysis (one generation batch per error length, scaled); then schedule the grid's runs
    over ``workers`` processes as the sweep does (``threads`` per worker defaults to what the
    sweep gives each worker: cores // workers). Nothing is written; measure on an otherwise
    idle machine."""
    device = device or default_device(scale)
    s = SCALES[scale]
    specs = grid_part(build_specs(scale, settings=settings, trials=trials, device=device,
                                  train_lengths=train_lengths, heatmap=heatmap), part)
    use_worker_threads(workers, threads)
    per_kind: dict[tuple, float] = {}
    for spec in specs:
        kind = (spec.tags["setting"], spec.tags["N"])
        if kind in per_kind:
            continue
        resolved = resolve(copy.deepcopy(spec.config))
        cfg = resolved.config
        task, model = prepare(resolved)
        t_step = time_training_steps(cfg, task, model, steps=steps, device=device)
        bs = cfg.eval.batch_size
        # one batch per length, scaled to the sequences evaluated
        n_final = min(bs, cfg.eval.sequences)
        t_final = sum(timed(lambda sp=sp: evaluate(model, task, [sp], n_sequences=n_final,
                                                   batch_size=bs), device)
                      * cfg.eval.sequences / n_final for sp in cfg.eval.splits)
        per_eval = sum(timed(lambda sp=sp: evaluate(
            model, task, [sp], n_sequences=cfg.train.eval_sequences, batch_size=bs), device)
            for sp in cfg.train.eval_splits)
        n_periodic = (cfg.train.steps - 1) // cfg.train.eval_every if cfg.train.eval_every else 0
        t_err = 0.0
        if spec.tags["setting"] in ERROR_SETTINGS:
            n = min(bs, s["error_sequences"])
            for L in s["error_lengths"]:
                t_err += timed(lambda L=L: addition_error_analysis(
                    model, task, [f"len={L}"], n_sequences=n, batch_size=bs,
                    device=device), device) * s["error_sequences"] / n
        per_kind[kind] = (t_step * cfg.train.steps + t_final + per_eval * n_periodic + t_err)
        log(f"{spec.tags['setting']:>18} N={spec.tags['N']:<3}: {1000 * t_step:7.1f} ms/step, "
            f"final eval {t_final:5.1f} s, periodic {per_eval * n_periodic:5.1f} s, errors "
            f"{t_err:5.1f} s -> {per_kind[kind] / 60:5.1f} min per run")
    costs = [per_kind[(sp.tags["setting"], sp.tags["N"])] for sp in specs]
    total = report_total(costs, workers, f"{len(specs)} runs", log=log)
    return {"seconds_per_kind": per_kind, "total_seconds": total, "runs": len(specs)}


__all__ = ["SCALES", "SETTINGS", "FIGURES", "PES", "PE_LABELS", "ERROR_SETTINGS", "EVAL_SEED",
           "build_specs", "run_config", "run_name", "default_device", "run_addition",
           "run_addition_recipe", "grid_part", "read_back_other_parts", "estimate_time",
           "eval_lengths", "caption", "is_divergence", "analysis_settings", "write_report"]
