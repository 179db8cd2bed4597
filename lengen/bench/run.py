"""``lengen bench``: train and evaluate model variants on every cell of the battery
(:mod:`lengen.bench.battery`) through a sweep, and write the scorecard beside the committed
baselines (:mod:`lengen.bench.scorecard`).

A variant is a label and a set of ``model.*`` overrides; the cells fix everything else, so two
variants differ only in what the overrides change. Runs are named ``<variant>--<cell>`` in the
output folder; finished runs are reused and interrupted ones resume (the sweep's own rules), so
the command can be run again, in parts, or with more variants.
"""
from __future__ import annotations

import os
import re
import shlex

import yaml

from lengen.bench.battery import CELLS, SCALES, VERSION, cell_config
from lengen.bench.scorecard import scorecard_rows, write_scorecard
from lengen.bench.variants import check_bench_file, check_some_cell_runs, check_variants
from lengen.config import resolve
from lengen.config_files import apply_overrides, load_config_file
from lengen.errors import ConfigError
from lengen.recipes.common import select
from lengen.recipes.estimate import report_total, time_training_steps, use_worker_threads
from lengen.rundir.load import prepare
from lengen.sweep import RunSpec, run_sweep

#: the baselines of the committed scorecard: label -> model overrides. Randomized RoPE draws
#: from [0, 2048), which holds the longest input of every cell at the cpu scale; index warping is
#: the paper's head_tail preset with the sqrt skew
BASELINES = {
    "NoPE": [],
    "RoPE": ["model.posenc=rope"],
    "ALiBi": ["model.posenc=alibi"],
    "FIRE": ["model.posenc=fire"],
    "Rand. RoPE": ["model.posenc=rope", "model.positions=randomized",
                   "model.positions_kwargs={max_length: 2048}"],
    "RoPE + warp": ["model.posenc=rope", "model.positions=warp",
                    "model.positions_kwargs={preset: head_tail, skew: sqrt}"],
    "TRA": ["model.attention=tra"],
    "FoT": ["model.attention=fot"],
}

_SAFE = re.compile(r"[^A-Za-z0-9._+,@-]+")


def parse_variant(text) -> tuple[str, list[str]]:
    """A variant as given on the command line or in a YAML list: ``'model.posenc=rope
    model.positions=randomized'`` (whitespace-separated overrides, optionally with
    ``name=LABEL`` among them; the label defaults to the overridden names), or a mapping
    ``{name: LABEL, overrides: [...]}``. -> (label, overrides). Only ``model.*`` keys may be
    overridden: the cells fix the rest."""
    if isinstance(text, dict):
        unknown = set(text) - {"name", "overrides"}
        if unknown or "overrides" not in text:
            raise ConfigError(f"a variant mapping has keys name (optional) and overrides (a "
                              f"list of model.* overrides), got {sorted(text)}")
        items, label = list(text["overrides"] or []), text.get("name")
    elif isinstance(text, str):
        items, label = shlex.split(text), None
        for it in list(items):
            if it.startswith("name="):
                label = it.split("=", 1)[1]
                items.remove(it)
    else:
        raise ConfigError(f"a variant is a string of model.* overrides or a mapping, got "
                          f"{type(text).__name__}")
    for it in items:
        if not isinstance(it, str) or "=" not in it or not it.startswith("model."):
            raise ConfigError(f"variant override {it!r}: write model.KEY=VALUE (e.g. "
                              f"model.posenc=rope); the cells fix the task, training and "
                              f"evaluation settings, so only model.* keys can change")
    if label is None:
        label = "+".join(it.split("=", 1)[1].split(":")[-1] for it in items
                         if it.split("=", 1)[0] in ("model.posenc", "model.attention",
                                                    "model.positions")) or "NoPE"
    if not _SAFE.sub("", label) or _SAFE.search(label.replace(" ", "_")):
        raise ConfigError(f"variant name {label!r}: use letters, digits and . _ + , @ -")
    return label, items


def load_variants(path: str) -> list[tuple[str, list[str]]]:
    """Variants from a YAML (or JSON) file holding a list of strings or mappings."""
    check_bench_file(path, "--variants")            # a fifo would block forever
    data = load_config_file(path) if not path.endswith((".yaml", ".yml")) else _yaml(path)
    if not isinstance(data, list):
        raise ConfigError(f"{path}: a variants file holds a list (of override strings or "
                          f"{{name, overrides}} mappings), got {type(data).__name__}")
    return [parse_variant(v) for v in data]


def _yaml(path: str):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f.read(1 << 20))


def run_name(label: str, cell: str) -> str:
    return f"{label.replace(' ', '_')}--{cell}"


def build_specs(variants, scale: str = "cpu", *, cells=None, seed: int = 0):
    """(RunSpecs, n/a rows): one run per variant x cell whose config resolves; a variant that
    cannot run on a cell (an attention kind defined only for decoders on an encoder cell, a
    learned table too short for the cell's lengths) gets an ``n/a`` row with the reason."""
    cells = select(cells, list(CELLS), list(CELLS), "bench cell")
    labels = [label for label, _ in variants]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"two variants share a name: {labels}; give each name=LABEL")
    specs, na = [], []
    for label, overrides in variants:
        for cell in cells:
            config = apply_overrides(cell_config(cell, scale, seed), overrides)
            config["name"] = run_name(label, cell)
            try:
                resolve(config)
            except ConfigError as e:
                na.append({"variant": label, "cell": cell, "status": "n/a",
                           "reason": str(e).splitlines()[0]})
                continue
            specs.append(RunSpec(config["name"], config,
                                 {"variant": label, "cell": cell, "bench_version": VERSION,
                                  "scale": scale}))
    return specs, na


def run_bench(variants, scale: str = "cpu", out: str | None = None, *, workers: int = 1,
              cells=None, threads: int | None = None, baselines: str | None = "default",
              log=print):
    """Train and evaluate every variant x cell into ``out`` (default ``runs/bench-<scale>``),
    then write the scorecard there. Returns the scorecard rows."""
    out = out or os.path.join("runs", f"bench-{scale}")
    check_variants(variants)                     # typos fail before any cell runs
    check_bench_file(None if baselines in (None, "default") else baselines, "--baselines")
    specs, na = build_specs(variants, scale, cells=cells)
    check_some_cell_runs(variants, specs, na)
    log(f"lengen bench v{VERSION} at scale {scale}: {len(variants)} variant(s) x "
        f"{len(cells or CELLS)} cell(s) = {len(specs)} run(s) ({len(na)} n/a) into {out}")
    res = run_sweep(specs, out, workers=workers, threads=threads, log=log)
    rows = scorecard_rows(res, specs, na, scale)
    write_scorecard(rows, out, scale, baselines=baselines, log=log)
    return rows


def estimate_bench(variants, scale: str = "cpu", *, workers: int = 1, cells=None,
                   threads: int | None = None, steps: int = 5, log=print) -> float:
    """Time a few training steps of every run on this machine and print the estimated wall time
    of the whole bench on ``workers`` processes (evaluation not included; it is small next to
    training at these scales). Says how loaded the machine was."""
    use_worker_threads(workers, threads)
    check_variants(variants)
    specs, na = build_specs(variants, scale, cells=cells)
    check_some_cell_runs(variants, specs, na)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    costs = []
    for spec in specs:
        cfg = resolve(spec.config)
        task, model = prepare(cfg)[:2]
        per_step = time_training_steps(cfg, task, model, steps=steps)
        costs.append(per_step * cfg.train.steps)
        log(f"  {spec.name}: {per_step * 1000:.0f} ms/step x {cfg.train.steps} steps = "
            f"{per_step * cfg.train.steps / 60:.1f} min")
    cores = os.cpu_count() or 1
    if load > cores / 2:
        log(f"warning: the machine was busy while timing (1-minute load {load:.1f} on {cores} "
            f"cores): the estimate is high by up to the load's share; time it again when idle")
    return report_total(costs, workers, f"lengen bench ({len(specs)} runs)", log=log)


__all__ = ["BASELINES", "parse_variant", "load_variants", "build_specs", "run_bench",
           "estimate_bench", "run_name", "SCALES"]
