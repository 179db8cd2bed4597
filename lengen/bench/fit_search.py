"""``lengen bench --fit-search``: run the pre-registered budget ladder
(:data:`lengen.bench.battery.FIT_LADDER`, the rungs and why in
:mod:`lengen.bench.battery`) for the (variant, cell) pairs of a finished bench whose runs show
no fitted run, and write ``fit_search.csv`` beside its ``runs.csv``.

* *Which pairs*: those with a finished run in ``OUT/runs.csv`` and no fitted one (any seed, any
  rate of the grid); a pair with a fitted run, an ``n/a`` pair, one whose runs all failed and a
  variant without rows are left out (the last named, or an error when named explicitly).
* *What runs*: the protocol's first seed (its tuning seed), one rung at a time for every pair
  still unfitted (the pairs of a rung run together on ``--workers``), stopping a pair at its
  first rung on which a run fits (the cell's own fit rule). The steps rungs take the rate with
  the best held-out validation score among the first seed's runs at the protocol's steps
  (:func:`lengen.bench.run.select_lr`: the OOD columns are never read).
* *How*: the bench's own run machinery (:func:`lengen.bench.run.run_bench_one` through
  :func:`lengen.sweep.run_sweep`): runs live in ``OUT/fit-search/`` as
  ``<variant>--<cell>--s<seed>--lr<lr>--steps<steps>``, apart from the protocol's; finished runs
  are reused, interrupted ones resume, and a rung already in ``fit_search.csv`` (finished, same
  rate, steps, seed, scale and battery version) is not run again.
* *What it writes*: ``OUT/fit_search.csv`` (:data:`lengen.bench.scorecard.FIT_FIELDS`: one
  row per run; rows of pairs not searched now are kept), then the card again from
  ``OUT/runs.csv``, whose footnote names what was tried. The card's numbers stay the
  protocol's.
"""
from __future__ import annotations

import os

from lengen.bench.battery import (CELLS, FIT_LADDER, VERSION, check_version, default_lr,
                                  default_out, default_steps, fit_rung_cost)
from lengen.bench.run import _rows_of, _spec, run_bench_one, select_lr
from lengen.bench.scorecard import (FIT_FIELDS, FIT_SEARCH_CSV, _write_csv, read_fit_search,
                                    read_runs, runs_path, write_card)
from lengen.bench.variants import check_variants
from lengen.config import resolve
from lengen.errors import ConfigError
from lengen.provenance import short_commit, source_commit
from lengen.recipes.common import select
from lengen.rundir.layout import stored_changes
from lengen.sweep import run_sweep

#: the fit search's run folders, inside the bench's output folder
FIT_DIR = "fit-search"
_FINISHED = ("ok", "not fitted")


def unfitted_pairs(runs: list[dict], labels, cells, log=print) -> list[dict]:
    """The pairs of ``runs`` (runs.csv rows) the ladder runs for, in the order of ``labels`` x
    ``cells``: ``{variant, cell, seed, base}`` with ``seed`` the protocol's first (tuning) seed
    and ``base`` its finished runs at the protocol's steps (the grid). A pair with a fitted run
    is not searched; n/a, all-failed and absent pairs are skipped (logged)."""
    out = []
    for v in labels:
        for cell in cells:
            mine = [r for r in runs if r["variant"] == v and r["cell"] == cell]
            if not mine or any(r.get("status") == "n/a" for r in mine):
                continue
            done = [r for r in mine if r.get("status") in _FINISHED]
            if not done:
                log(f"  {v} / {cell}: every run failed: nothing to search (rerun the bench)")
                continue
            if any(r.get("fitted") for r in done):
                continue
            quick = sorted({r.get("protocol") for r in mine} - {"full"})
            if quick:
                raise ConfigError(f"{v} / {cell}: the fit search extends the full protocol's "
                                  f"grid, but these runs are of protocol {quick}; run the full "
                                  f"protocol (lengen bench without --quick) first")
            tune = [r for r in done if r.get("role") == "tune"] or done
            seed = min(int(r["seed"]) for r in tune)
            out.append({"variant": v, "cell": cell, "seed": seed,
                        "base": [r for r in tune if int(r["seed"]) == seed]})
    return out


def rung_rates(rung, pair: dict, scale: str, searched: list[dict]) -> list[float]:
    """The learning rates of ``rung`` for ``pair``: the cell's default x the rung's factors, or
    (None) the rate with the best validation score among the pair's first-seed runs at the
    protocol's steps (the grid's and the search's so far; :func:`select_lr`)."""
    name, factors, _ = rung
    base = default_lr(pair["cell"], scale)
    if factors:
        return [float(f"{base * f:.6g}") for f in factors]
    steps = default_steps(pair["cell"], scale)
    pool = list(pair["base"]) + [r for r in searched if int(r["steps"]) == steps
                                 and r.get("status") in _FINISHED]
    return [select_lr(pool, base)]


def _fit_row(run_row: dict, rung, commit: str) -> dict:
    name, _, k = rung
    return {**{f: run_row.get(f) for f in FIT_FIELDS}, "rung": name, "steps_factor": k,
            "commit": commit}


def _same(a: dict, b: dict) -> bool:
    return (a["variant"], a["cell"], a["rung"], int(a["seed"]), int(a["steps"]),
            a.get("scale")) == (b["variant"], b["cell"], b["rung"], int(b["seed"]),
                                int(b["steps"]), b.get("scale")) and \
        abs(float(a["lr"]) - float(b["lr"])) <= 1e-12


def _check_base_config(spec, out: str) -> None:
    """The fit search's configs are the protocol's with other steps and rates: where the
    protocol's run of the same variant, cell, seed and rate is in ``out``, its stored config
    must be the one these overrides make (other overrides under the same label: an error)."""
    run_dir = os.path.join(out, spec.name)
    if not os.path.isdir(run_dir):
        return
    diff = stored_changes(run_dir, resolve(spec.config, check_device=False).config.to_dict())
    if diff:
        keys = ", ".join(f"{k}: {a!r} there, {b!r} here" for k, a, b in diff[:4])
        raise ConfigError(f"variant {spec.tags['variant']!r}: the overrides given make another "
                          f"model than its protocol runs in {out} ({keys}); give the "
                          f"variant as the bench ran it")


def _targets(variants, scale, out, cells, required, log, device=None):
    check_variants(variants)
    cells = select(cells, list(CELLS), list(CELLS), "bench cell")
    path = runs_path(out)
    if not os.path.isfile(path):
        raise ConfigError(f"--fit-search reads the runs.csv of a finished bench in --out; "
                          f"there is none at {path}: run the bench into that folder first")
    runs = read_runs(path)
    scales = {r.get("scale") for r in runs if r.get("status") != "n/a"} - {None, ""}
    if scales and scales != {scale}:
        raise ConfigError(f"{path} holds runs at scale {sorted(scales)}, not {scale!r}: give "
                          f"--scale {sorted(scales)[0]}")
    have = list(dict.fromkeys(r["variant"] for r in runs))
    labels = [label for label, _ in variants]
    missing = [v for v in labels if v not in have]
    bad = [v for v in missing if v in required or len(missing) == len(labels)]
    if bad:
        raise ConfigError(f"--fit-search: no runs of {', '.join(repr(v) for v in bad)} in "
                          f"{path}. Valid (variants with runs there): "
                          f"{', '.join(repr(v) for v in have) or 'none'}")
    for v in missing:
        log(f"  {v}: no runs in {path}: skipped")
    overrides = dict(variants)
    pairs = unfitted_pairs(runs, [v for v in labels if v in have], cells, log=log)
    for p in pairs:
        p["overrides"] = overrides[p["variant"]]
        _check_base_config(_spec(p["variant"], p["overrides"], p["cell"], scale, p["seed"],
                                 p["base"][0]["lr"], "full", "tune", device), out)
    return runs, pairs


def _rung_specs(rung, pairs, scale, searched, device):
    """[(pair, RunSpec)] of ``rung`` for every pair still unfitted (names end in --steps)."""
    name, _, k = rung
    specs = []
    for p in pairs:
        steps = default_steps(p["cell"], scale) * k
        mine = [r for r in searched if (r["variant"], r["cell"]) == (p["variant"], p["cell"])]
        for lr in rung_rates(rung, p, scale, mine):
            spec = _spec(p["variant"], p["overrides"], p["cell"], scale, p["seed"], lr, "full",
                         "fit-search", device, steps=steps)
            spec.tags.update(rung=name, steps_factor=k)
            specs.append((p, spec))
    return specs


def run_fit_search(variants, scale: str = "cpu", out: str | None = None, *, cells=None,
                   workers: int = 1, threads: int | None = None, baselines="default",
                   required=(), backend: str = "local", device: str | None = None,
                   ray_options: dict | None = None, log=print) -> list[dict]:
    """Run :data:`FIT_LADDER` for the unfitted pairs of ``variants`` (``[(label,
    overrides)]``, as the bench ran them) in ``out/runs.csv`` (module docstring); write
    ``out/fit_search.csv`` after every rung and the card at the end (``baselines`` as
    :func:`lengen.bench.run.run_bench` takes them). ``required``: labels that must have runs
    there (named on the command line; a variant of a group without runs is skipped). Returns
    the rows of this search."""
    out = out or default_out(scale)
    log = log or (lambda *a, **k: None)
    runs, pairs = _targets(variants, scale, out, cells, set(required), log, device)
    fit_csv = os.path.join(out, FIT_SEARCH_CSV)
    kept = read_fit_search(fit_csv)
    searched_keys = {(p["variant"], p["cell"]) for p in pairs}
    others = [r for r in kept if (r["variant"], r["cell"]) not in searched_keys]
    log(f"lengen bench v{VERSION} fit search at scale {scale}: {len(pairs)} unfitted pair(s) "
        f"({', '.join(p['variant'] + ' / ' + p['cell'] for p in pairs) or 'none'}); rungs "
        + ", ".join(f"{n} ({fit_rung_cost(n)} run(s) of the protocol's length)"
                    for n, _, _ in FIT_LADDER) + f"; runs into {os.path.join(out, FIT_DIR)}")
    commit = short_commit(source_commit())
    rows, pending = [], list(pairs)
    for rung in FIT_LADDER:
        if not pending:
            break
        todo, reused = [], []
        for p, spec in _rung_specs(rung, pending, scale, rows, device):
            want = {"variant": p["variant"], "cell": p["cell"], "rung": rung[0],
                    "seed": p["seed"], "steps": spec.config["train"]["steps"],
                    "lr": spec.config["train"]["lr"], "scale": scale}
            old = [r for r in kept if r.get("status") in _FINISHED and _same(r, want)]
            if old:
                reused.append(old[0])
            else:
                todo.append(spec)
        if reused:
            log(f"  {rung[0]}: {len(reused)} run(s) already in {fit_csv}, not run again")
        got = list(reused)
        todo.sort(key=lambda spec: -spec.config["train"]["steps"])     # longest first
        if todo:
            res = run_sweep(todo, os.path.join(out, FIT_DIR), workers=workers, threads=threads,
                            log=log, run_fn=run_bench_one, backend=backend,
                            ray_options=ray_options)
            for spec, r in zip(todo, _rows_of(res, todo, os.path.join(out, FIT_DIR))):
                record = res.results.get(spec.name, {}).get("record") or {}
                made = record.get("lengen_commit") or commit     # the run's own, if recorded
                got.append(_fit_row(r, rung, short_commit(made)))
        rows += got
        fitted = {(r["variant"], r["cell"]) for r in got if r.get("fitted")}
        pending = [p for p in pending if (p["variant"], p["cell"]) not in fitted]
        _write_csv(others + rows, FIT_FIELDS, fit_csv)
        for r in got:
            log(f"  {r['variant']} / {r['cell']} {rung[0]}: lr {float(r['lr']):g} x "
                f"{int(r['steps']):,} steps: {r['status']}")
    for r in rows:
        check_version(r["bench_version"], "the fit search's rows", r.get("cell"))
    if pairs:
        write_card(runs, out, scale, baselines=baselines, log=log)
    return rows


def estimate_fit_search(variants, scale: str = "cpu", out: str | None = None, *, cells=None,
                        workers: int = 1, threads: int | None = None, required=(),
                        steps: int = 5, log=print) -> tuple[float, float]:
    """Time a few training steps and one test + validation evaluation of every pair the
    ladder would run (nothing is written) and print each rung's cost and the wall time on
    ``workers`` processes: at most (no rung fits: every rung runs) and at least (the first
    rung fits everywhere). Returns (most, least) in seconds."""
    from lengen.bench.battery import validation_config
    from lengen.bench.run import _time_eval
    from lengen.recipes.estimate import (load_note, makespan, time_training_steps, timed,
                                         use_worker_threads)
    from lengen.rundir.load import prepare

    import torch

    out = out or default_out(scale)
    log = log or (lambda *a, **k: None)
    use_worker_threads(workers, threads)
    _, pairs = _targets(variants, scale, out, cells, set(required), log)
    per_rung = {n: [] for n, _, _ in FIT_LADDER}
    for p in pairs:
        spec = _spec(p["variant"], p["overrides"], p["cell"], scale, p["seed"],
                     default_lr(p["cell"], scale), "full", "fit-search")
        resolved = resolve(spec.config)
        cfg = resolved.config
        task, model = prepare(resolved)
        per_step = time_training_steps(cfg, task, model, steps=steps)
        ev = timed(lambda: _time_eval(cfg, task, model))
        vcfg = resolve(validation_config(p["cell"], spec.config, scale))
        vtask, _ = prepare(vcfg)[:2]
        ev += timed(lambda: _time_eval(vcfg.config, vtask, model))
        base = cfg.train.steps
        parts = []
        for name, factors, k in FIT_LADDER:
            one = per_step * base * k + ev
            per_rung[name] += [(base * k, one)] * (len(factors) if factors else 1)
            parts.append(f"{name} {len(factors) if factors else 1} x {base * k:,} steps = "
                         f"{(len(factors) if factors else 1) * one / 60:.1f} min")
        log(f"  {p['variant']} / {p['cell']}: {per_step * 1000:.0f} ms/step, evaluation "
            f"{ev:.1f} s; " + ", ".join(parts))
    # each rung's runs go longest first (as run_fit_search sends them), rungs one after another
    order = {n: [c for _, c in sorted(runs, key=lambda x: -x[0])] for n, runs in
             per_rung.items()}
    most = sum(makespan(c, workers)[0] for c in order.values() if c)
    least = makespan(order[FIT_LADDER[0][0]], workers)[0] if pairs else 0.0
    n_runs = sum(len(c) for c in per_rung.values())
    log(f"estimated total: lengen bench v{VERSION} fit search, {len(pairs)} pair(s), rungs "
        f"one after another with {workers} worker(s): at most {most / 60:.1f} min "
        f"({most / 3600:.2f} h, {n_runs} runs: no rung fits), at least {least / 60:.1f} min "
        f"(rung {FIT_LADDER[0][0]} fits every pair); torch threads {torch.get_num_threads()} "
        f"per worker")
    log(load_note(torch.get_num_threads()))
    return most, least


__all__ = ["FIT_DIR", "unfitted_pairs", "rung_rates", "run_fit_search",
           "estimate_fit_search"]
