"""``lengen bench``: train and evaluate model variants on every cell of the battery
(:mod:`lengen.bench.battery`) through a sweep, and write the card beside the committed
baselines (:mod:`lengen.bench.scorecard`).

A variant is a label and a set of ``model.*`` overrides; the cells fix everything else, so two
variants differ only in what the overrides change. Every variant x cell runs several seeds
(each a different init and data order) under one protocol for all entries (the learning-rate
grid, chosen on a held-out in-distribution split: :mod:`lengen.bench.battery`). Runs are named
``<variant>--<cell>--s<seed>--lr<lr>`` in the output folder; finished runs are reused and
interrupted ones resume (the sweep's own rules), so the command can be run again, in parts, or
with more variants. ``runs.csv`` keeps one row per run; the card
(:mod:`lengen.bench.scorecard`) is computed from those rows only.
"""
from __future__ import annotations

import json
import os
import re
import shlex

import torch
import yaml

from lengen.bench.battery import (CELLS, LR_FACTORS, PROTOCOLS, SCALES, SEEDS, VERSION,
                                  cell_config, check_protocol, curve, default_lr, default_out,
                                  lr_grid, score, val_score, validation_config)
from lengen.bench.scorecard import FIT_SEARCH_CSV, read_fit_search, read_runs, write_card
from lengen.bench.variants import check_bench_file, check_some_cell_runs, check_variants
from lengen.config import resolve
from lengen.config_files import apply_overrides, load_config_file
from lengen.errors import ConfigError
from lengen.fileio import save_json_atomic
from lengen.recipes.common import select
from lengen.recipes.estimate import report_total, time_training_steps, use_worker_threads
from lengen.eval.evaluate import evaluate
from lengen.rundir.checkpoint import load_weights, verify_final_weights
from lengen.rundir.layout import stored_changes
from lengen.rundir.load import prepare
from lengen.runfiles import BENCH_VALIDATION
from lengen.sweep import RunSpec, finished_rows, run_one, run_sweep, training_span

#: the baselines of the committed scorecard: label -> model overrides, in two groups
#: (:data:`BASELINE_GROUPS`). ``classic``: the schemes and attention kinds of the four papers.
#: Randomized RoPE draws from [0, 2048), which holds the longest input of every cell at the cpu
#: scale; index warping is the paper's head_tail preset with the sqrt skew. ``methods``: the
#: methods published after them (docs/methods.md), each at its registry defaults on the cell's
#: NoPE softmax model, one change each: the attention kinds ``lstm``, ``selective``,
#: ``stickbreaking``, ``mamba2``, ``gated_deltanet``, ``path`` and the schemes ``prope``
#: (p = 0.75), ``pope``. The attention kinds are decoder-only: the three recurrences (LSTM,
#: Mamba-2, Gated DeltaNet) read the four encoder (Chomsky) cells causally, ``model.causal=true``,
#: the answer taken at the placeholders after the whole input, as Deletang et al. 2023's RNN
#: baselines read those tasks (a no-op on the decoder cells); the causal attention kinds are
#: ``n/a`` there, as the cells' transformer is an encoder. Two are compositions, named
#: here: ``RoPE + SSMax`` is RoPE with Scalable-Softmax's log-length query scaling
#: (``attention_kwargs.logn=ssmax``, on every layer; Nakanishi 2025 pairs it with RoPE) and
#: ``iRoPE`` is Llama 4's interleaved layout cut to the cells' 2 layers: layer 0 RoPE with
#: chunked attention (chunk 16) and RMS q/k norm, layer 1 NoPE, global, with temperature
#: tuning (``logn=llama4``, ``logn_floor_scale`` 16), the ``llama4-irope`` preset's layers 1:1
#: instead of 3:1 (the preset's 4-layer list does not divide 2 layers; on the 5-layer encoder
#: cells it is ``n/a``: its 2-layer list does not divide 5 layers, and its chunked layer needs a
#: causal decoder in any layout)
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
    "LSTM": ["model.attention=lstm", "model.causal=true"],
    "p-RoPE": ["model.posenc=prope"],
    "PoPE": ["model.posenc=pope"],
    "Selective": ["model.attention=selective"],
    "Stick-breaking": ["model.attention=stickbreaking"],
    "Mamba-2": ["model.attention=mamba2", "model.causal=true"],
    "Gated DeltaNet": ["model.attention=gated_deltanet", "model.causal=true"],
    "PaTH": ["model.attention=path"],
    "RoPE + SSMax": ["model.posenc=rope", "model.attention_kwargs.logn=ssmax"],
    "iRoPE": ["model.posenc=rope",
              "model.layers=[{chunk: 16, qk_norm: rms}, {posenc: nope, attention_kwargs: "
              "{logn: llama4, logn_floor_scale: 16}}]"],
}

#: ``lengen bench --baselines-only GROUP``: the baselines run together (``all``: every one)
BASELINE_GROUPS = {
    "classic": ["NoPE", "RoPE", "ALiBi", "FIRE", "Rand. RoPE", "RoPE + warp", "TRA", "FoT"],
    "methods": ["LSTM", "p-RoPE", "PoPE", "Selective", "Stick-breaking", "Mamba-2",
                "Gated DeltaNet", "PaTH", "RoPE + SSMax", "iRoPE"],
    "all": list(BASELINES),
}


def baseline_variants(names) -> list[tuple[str, list[str]]]:
    """``[(label, overrides)]`` of the built-in baselines ``names`` (labels of
    :data:`BASELINES` or groups of :data:`BASELINE_GROUPS`; none: every baseline), each once,
    in the order given. An unknown name is a ConfigError listing the valid ones."""
    out = []
    for name in (list(names) or ["all"]):
        got = BASELINE_GROUPS.get(name, [name])
        bad = [n for n in got if n not in BASELINES]
        if bad:
            raise ConfigError(f"--baselines-only {name!r}: unknown baseline. Valid: "
                              f"{', '.join(repr(n) for n in BASELINES)}, or a group: "
                              f"{', '.join(BASELINE_GROUPS)}")
        out += [n for n in got if n not in out]
    return [(n, list(BASELINES[n])) for n in out]


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
    if not items and label is None:
        raise ConfigError("an empty variant (--variant '' or an empty string in --variants): "
                          "a variant is model.* overrides such as --variant "
                          "'model.posenc=rope'; the default model is --variant "
                          "'model.posenc=nope'")
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


def run_name(label: str, cell: str, seed: int | None = None, lr: float | None = None,
             steps: int | None = None) -> str:
    """``<variant>--<cell>--s<seed>--lr<lr>`` (v1's ``<variant>--<cell>`` without seed and lr;
    the fit search's runs end in ``--steps<steps>``, :mod:`lengen.bench.fit_search`)."""
    name = f"{label.replace(' ', '_')}--{cell}"
    if seed is not None:
        name += f"--s{int(seed)}"
    if lr is not None:
        name += f"--lr{float(lr):g}"
    if steps is not None:
        name += f"--steps{int(steps)}"
    return name


def check_seeds(seeds) -> list[int]:
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ConfigError(f"seeds must be a non-empty list of integers >= 0, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must differ from each other, got {seeds}")
    return seeds


def default_seeds(scale: str, protocol: str = "full") -> list[int]:
    """``0 .. n-1``: n = the protocol's seed count (quick: 2), else :data:`SEEDS` of the
    scale (3 at cpu, 5 at paper)."""
    n = PROTOCOLS[check_protocol(protocol)][0] or SEEDS[scale]
    return list(range(n))


def _spec(label, overrides, cell, scale, seed, lr, protocol, role, device=None, steps=None):
    """One run's RunSpec; ``steps`` (the fit search's runs only) sets the training steps and
    ends the name in ``--steps<steps>``."""
    config = apply_overrides(cell_config(cell, scale, seed, lr=lr, protocol=protocol,
                                         steps=steps), overrides)
    if device:
        config["train"]["device"] = device
    config["name"] = run_name(label, cell, seed, lr, steps)
    factor = lr / default_lr(cell, scale)
    return RunSpec(config["name"], config,
                   {"variant": label, "cell": cell, "seed": seed, "lr": lr,
                    "lr_factor": float(f"{factor:.6g}"), "role": role,
                    "bench_version": VERSION, "scale": scale, "protocol": protocol})


def build_specs(variants, scale: str = "cpu", *, cells=None, seeds=None, lrs=None,
                protocol: str = "full", role: str = "final", device: str | None = None):
    """(RunSpecs, n/a rows): one run per variant x cell x seed x learning rate whose config
    resolves. ``lrs``: ``{(variant, cell): [lr, ...]}`` or ``{cell: [...]}`` (default: the
    cell's default rate). A variant that cannot run on a cell (an attention kind defined only
    for decoders on an encoder cell, a learned table too short for the cell's lengths) gets one
    ``n/a`` row with the reason."""
    cells = select(cells, list(CELLS), list(CELLS), "bench cell")
    seeds = check_seeds(default_seeds(scale, protocol) if seeds is None else seeds)
    labels = [label for label, _ in variants]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"two variants share a name: {labels}; give each name=LABEL")
    specs, na = [], []
    for label, overrides in variants:
        for cell in cells:
            rates = (lrs or {}).get((label, cell), (lrs or {}).get(cell)) or \
                [default_lr(cell, scale)]
            first = _spec(label, overrides, cell, scale, seeds[0], rates[0], protocol, role,
                          device)
            try:             # the device is checked where the run trains (a Ray worker)
                resolve(first.config, check_device=False)
            except ConfigError as e:
                na.append({"variant": label, "cell": cell, "status": "n/a",
                           "reason": str(e).splitlines()[0]})
                continue
            for seed in seeds:
                for lr in rates:
                    specs.append(_spec(label, overrides, cell, scale, seed, lr, protocol, role,
                                       device))
    return specs, na


# ---- one run: train + test evaluation (the sweep's run_one) + held-out validation ----------

def _validate(spec: RunSpec, run_dir: str) -> list[dict]:
    """The run's held-out validation rows (:func:`lengen.bench.battery.validation_config`),
    computed once from its final weights and kept in ``val.json`` beside ``eval.json``."""
    cell, scale = spec.tags["cell"], spec.tags["scale"]
    vconf = validation_config(cell, spec.config, scale)
    key = {"eval": vconf.get("eval"), "task": vconf.get("task")}
    path = os.path.join(run_dir, BENCH_VALIDATION)
    try:
        with open(path) as f:
            kept = json.load(f)
        if kept.get("key") == key:
            return kept["rows"]
    except (OSError, ValueError, AttributeError):
        pass
    resolved = resolve(vconf)
    cfg = resolved.config
    task, model = prepare(resolved)
    verify_final_weights(run_dir)                # the checksum the run recorded
    load_weights(model, os.path.join(run_dir, "model.safetensors"))
    device = torch.device(cfg.train.device)
    model.to(device).eval()
    rows = evaluate(model, task, cfg.eval.splits or task.splits(),
                    n_sequences=cfg.eval.sequences, batch_size=cfg.eval.batch_size,
                    seed=cfg.eval.seed, device=device)
    rows = [{k: r.get(k) for k in ("split", "metric", "value", "length")} for r in rows]
    save_json_atomic({"key": key, "rows": rows}, path, root=run_dir)   # never through a link
    return rows


def run_bench_one(spec, out_dir: str, *, quiet: bool = True, threads: int = 0) -> dict:
    """:func:`lengen.sweep.run_one` (train, test evaluation), then the held-out validation
    evaluation, whose rows are appended with ``split`` prefixed ``val:`` (the cells' scores
    never read them; :func:`select_lr` reads only them). Importable by name, so local
    workers and Ray tasks call this very function."""
    if isinstance(spec, dict):
        spec = RunSpec(**spec)
    res = run_one(spec, out_dir, quiet=quiet, threads=threads)
    if res["status"] in ("done", "cached"):
        try:
            val = _validate(spec, os.path.join(out_dir, spec.name))
        except Exception as e:  # noqa: BLE001 - recorded as the run's failure, sweep goes on
            res.update(status="failed", error=f"validation: {type(e).__name__}: {e}",
                       rows=[])
            return res
        res["rows"] = list(res["rows"]) + [dict(r, split=f"val:{r['split']}") for r in val]
    return res


# ---- rows, selection -------------------------------------------------------------------------

def run_row(spec: RunSpec, status: dict, rows: list[dict], seconds=None) -> dict:
    """One ``runs.csv`` row of a finished (or failed) run: its fit, its in-distribution
    (``seen``, the test draw the fit rule reads) and held-out validation (``val``) figures, its
    OOD score, its accuracy per length (``curve``, JSON), steps and wall seconds."""
    t = spec.tags
    row = {k: t[k] for k in ("variant", "cell", "seed", "lr", "lr_factor", "role", "scale",
                             "protocol", "bench_version")}
    row.update(steps=spec.config["train"]["steps"], counted=False, reason="",
               seconds=round(float(seconds if seconds is not None else
                                   status.get("seconds") or 0.0), 1))
    if status.get("status") not in ("done", "cached"):
        return dict(row, status="failed", fitted=None, seen=None, val=None, ood=None,
                    curve="{}", reason=str(status.get("error") or "not run").splitlines()[0])
    test = [r for r in rows if not str(r.get("split", "")).startswith("val:")]
    val = [dict(r, split=str(r["split"])[4:]) for r in rows
           if str(r.get("split", "")).startswith("val:")]
    s = score(t["cell"], t["scale"], test)
    return dict(row, status="ok" if s["fitted"] else "not fitted", fitted=bool(s["fitted"]),
                seen=s["seen"], ood=s["ood"], val=val_score(t["cell"], val),
                curve=json.dumps(curve(t["cell"], t["scale"], test)),
                reason="" if s["fitted"] else "did not fit its training distribution")


def select_lr(rows, default: float) -> float:
    """The learning rate chosen among ``rows`` (one per rate of the grid, seed 0): the one with
    the best held-out **validation** score; ties go to ``default`` (the cell's rate), then to the
    smaller rate; no readable validation score at all: ``default``. Reads only each row's
    ``lr``, ``status`` and ``val``: never the OOD columns (``ood``, ``curve``)."""
    scored = []
    for r in rows:
        v = r["val"] if r["status"] in ("ok", "not fitted") else None
        if v is not None and v == v:
            scored.append((float(v), float(r["lr"])))
    if not scored:
        return default
    best = max(v for v, _ in scored)
    tied = [lr for v, lr in scored if v == best]
    return default if any(abs(lr - default) <= 1e-12 for lr in tied) else min(tied)


def _seconds(out: str, name: str, status: dict):
    span = training_span(out, [name])
    return span if span is not None else status.get("seconds")


def _rows_of(result, specs, out) -> list[dict]:
    rows = []
    for spec in specs:
        st = result.status.get(spec.name, {})
        got = result.results.get(spec.name, {}).get("rows") or []
        rows.append(run_row(spec, st, got, _seconds(out, spec.name, st)))
    return rows


def run_bench(variants, scale: str = "cpu", out: str | None = None, *, workers: int = 1,
              cells=None, threads: int | None = None, baselines: str | None = "default",
              seeds=None, protocol: str = "full", backend: str = "local",
              device: str | None = None, runs_per_gpu: int = 1, ray_address: str | None = None,
              log=print):
    """Train and evaluate every variant x cell x seed (x learning rate while tuning) into
    ``out`` (default ``runs/bench-<scale>``), then write ``runs.csv`` and the card there.

    ``protocol='full'``: the first seed (0 by default) of every variant x cell runs at every rate
    of the cell's grid (phase 1), the rate is chosen on the held-out validation split
    (:func:`select_lr`), the other seeds run at it (phase 2). ``'quick'``: every seed at the
    cell's default rate, one phase. ``backend='ray'`` sends each run as a Ray task
    (``device='cuda'`` with ``runs_per_gpu`` runs sharing a GPU through Ray's fractional GPUs).
    Returns the rows of ``runs.csv``."""
    check_protocol(protocol)
    check_variants(variants)                     # typos fail before any cell runs
    check_bench_file(None if baselines in (None, "default") else baselines, "--baselines")
    out = out or default_out(scale)
    seeds = check_seeds(default_seeds(scale, protocol) if seeds is None else seeds)
    tune = PROTOCOLS[protocol][1]
    cells = select(cells, list(CELLS), list(CELLS), "bench cell")
    ray_options = None
    if backend == "ray":
        gpus = (1.0 / max(1, runs_per_gpu)) if device and device.startswith("cuda") else 0
        ray_options = {"address": ray_address, "num_cpus": 1, "num_gpus": gpus}
    grid = {c: lr_grid(c, scale) for c in cells} if tune else None
    first, na = build_specs(variants, scale, cells=cells, seeds=seeds[:1] if tune else seeds,
                            lrs=grid, protocol=protocol, role="tune" if tune else "final",
                            device=device)
    check_some_cell_runs(variants, first, na)
    if tune and len(seeds) > 1:               # the later seeds, at any rate the grid may choose
        later_any, _ = build_specs(variants, scale, cells=cells, seeds=seeds[1:], lrs=grid,
                                   protocol=protocol, device=device)
    else:
        later_any = []
    check_out_folder(first + later_any, {(v, c) for v, _ in variants for c in cells}, out)
    n_later = len(first) // len(grid[cells[0]]) * (len(seeds) - 1) if tune else 0
    log(f"lengen bench v{VERSION} at scale {scale}, protocol {protocol}: {len(variants)} "
        f"variant(s) x {len(cells)} cell(s) x seeds {seeds}"
        + (f", lr grid = the cell's default x {list(LR_FACTORS)} on seed 0" if tune else
           ", each cell's default lr")
        + f": {len(first) + n_later} run(s) ({len(na)} n/a) into {out}")
    sweep_kw = dict(workers=workers, threads=threads, log=log, run_fn=run_bench_one,
                    backend=backend, ray_options=ray_options)
    res = run_sweep(first, out, **sweep_kw)
    rows = _rows_of(res, first, out)
    specs = list(first)
    if tune:
        chosen = {}
        for label, _ in variants:
            for cell in cells:
                mine = [r for r in rows if r["variant"] == label and r["cell"] == cell]
                if mine:
                    chosen[(label, cell)] = [select_lr(mine, default_lr(cell, scale))]
        for r in rows:
            r["selected_lr"] = chosen[(r["variant"], r["cell"])][0]
        if len(seeds) > 1:
            later, _ = build_specs(variants, scale, cells=cells, seeds=seeds[1:],
                                   lrs=chosen, protocol=protocol, device=device)
            # the whole set again: phase 1's runs are read back (cached), so the sweep's
            # results.csv / sweep.json cover every run of the bench
            res2 = run_sweep(first + later, out, **sweep_kw)
            rows2 = _rows_of(res2, later, out)
            for r in rows2:
                r["selected_lr"] = chosen[(r["variant"], r["cell"])][0]
            rows += rows2
            specs += later
    else:
        for r in rows:
            r["selected_lr"] = r["lr"]
    for r in rows:
        r["counted"] = abs(float(r["lr"]) - float(r["selected_lr"])) <= 1e-12
    rows += [dict(r, scale=scale, protocol=protocol, bench_version=VERSION) for r in na]
    write_card(keep_earlier_pairs(rows, out) + rows, out, scale, baselines=baselines, log=log)
    return rows


def keep_earlier_pairs(rows: list[dict], out: str) -> list[dict]:
    """The rows of ``out/runs.csv`` (an earlier part of this bench) of the variant x cell pairs
    not run now, so a bench run in parts into one folder keeps one ``runs.csv`` of every part,
    whether a part adds variants or cells (a variant run again on some cells keeps its rows on
    the others). The rows of the pairs run now are replaced whatever their battery version; a
    row kept there must be of this battery's budget for its cell (:func:`read_runs`), and
    :func:`run_bench` checks that before it trains anything."""
    path = os.path.join(out, "runs.csv")
    if not os.path.isfile(path):
        return []
    now = {(r["variant"], r["cell"]) for r in rows}
    return read_runs(path, drop=now)


def check_out_folder(specs, pairs, out: str) -> None:
    """Before a bench trains anything, what it would otherwise fail on at the end or run by
    run: the rows ``out/runs.csv`` keeps (those of other pairs than ``pairs``) and every row
    of ``out/fit_search.csv`` (the card reads them all) must be of this battery's budget for
    their cell, and no run directory of one of ``specs``' names may hold a run (finished or
    not) started with another config, one made under an earlier budget of its cell, say.
    ``specs`` may include runs the bench will not reach (later seeds at every rate of the
    grid), so such a folder is refused even where the chosen rate would have missed it."""
    keep_earlier_pairs([{"variant": v, "cell": c} for v, c in pairs], out)
    try:
        read_fit_search(out)
    except ConfigError as e:
        raise ConfigError(f"{e}. The card reads every row of {FIT_SEARCH_CSV}: move that "
                          f"file away or bench into another --out") from None
    stale = []
    for spec in specs:
        run_dir = os.path.join(out, spec.name)
        if not os.path.isdir(run_dir):         # nothing to compare: resolve no config for it
            continue
        diff = stored_changes(run_dir, resolve(spec.config, check_device=False).config.to_dict())
        if diff:
            stale.append(f"{spec.name} (different config: "
                         f"{', '.join(k for k, _, _ in diff[:6])})")
    if stale:
        raise ConfigError(f"{out} holds {len(stale)} run(s) of this bench's names started "
                          f"with another config: {'; '.join(stale[:4])}"
                          f"{' ...' if len(stale) > 4 else ''}. Delete those directories "
                          f"(an earlier battery version's runs of a cell it changed, say) or "
                          f"bench into another --out")


def finished_in(out: str, label: str, overrides, cell: str, scale: str, seeds,
                protocol: str = "full") -> int:
    """How many of the protocol's runs of ``label`` x ``cell`` are already finished in ``out``
    (same config, readable ``eval.json``: what :func:`run_bench` reuses as ``cached``). Tuning:
    seed 0's runs at each rate of the grid, plus one per later seed finished at any rate of the
    grid (the chosen rate is one of them); ``quick``: every seed at the default rate."""
    tune = PROTOCOLS[protocol][1]
    rates = lr_grid(cell, scale) if tune else [default_lr(cell, scale)]

    def done(seed, lr) -> bool:
        spec = _spec(label, overrides, cell, scale, seed, lr, protocol, "final")
        cfg = resolve(spec.config, check_device=False).config.to_dict()
        return finished_rows(cfg, os.path.join(out, spec.name))[0] is not None

    if not tune:
        return sum(done(seed, rates[0]) for seed in seeds)
    return (sum(done(seeds[0], lr) for lr in rates)
            + sum(any(done(seed, lr) for lr in rates) for seed in seeds[1:]))


def estimate_bench(variants, scale: str = "cpu", *, workers: int = 1, cells=None,
                   threads: int | None = None, steps: int = 5, seeds=None,
                   protocol: str = "full", out: str | None = None, log=print) -> float:
    """Time a few training steps and one test + validation evaluation of every variant x cell
    on this machine, and print the estimated wall time of the whole bench on ``workers``
    processes (every cell, every seed and learning rate of the protocol; a cell whose config
    cannot run for a variant is named as n/a, never dropped silently). Says how loaded the
    machine was. ``out``: the bench's output folder; runs already finished there are reused
    by :func:`run_bench`, so they are counted as done, not timed (:func:`finished_in`)."""
    from lengen.recipes.estimate import timed

    check_protocol(protocol)
    use_worker_threads(workers, threads)
    seeds = check_seeds(default_seeds(scale, protocol) if seeds is None else seeds)
    tune = PROTOCOLS[protocol][1]
    per_cell_runs = (len(LR_FACTORS) + len(seeds) - 1) if tune else len(seeds)
    check_variants(variants)
    specs, na = build_specs(variants, scale, cells=cells, seeds=seeds[:1], protocol=protocol)
    check_some_cell_runs(variants, specs, na)
    overrides = dict(variants)
    costs, reused = [], 0
    for spec in specs:
        label, cell = spec.tags["variant"], spec.tags["cell"]
        have = (finished_in(out, label, overrides[label], cell, scale, seeds, protocol)
                if out and os.path.isdir(out) else 0)
        reused += have
        if have >= per_cell_runs:
            log(f"  {label} / {cell}: all {per_cell_runs} runs finished in {out} (reused)")
            continue
        resolved = resolve(spec.config)
        cfg = resolved.config
        task, model = prepare(resolved)
        per_step = time_training_steps(cfg, task, model, steps=steps)
        ev = timed(lambda: _time_eval(cfg, task, model))
        vcfg = resolve(validation_config(spec.tags["cell"], spec.config, scale))
        vtask, _ = prepare(vcfg)[:2]
        ev += timed(lambda: _time_eval(vcfg.config, vtask, model))
        one = per_step * cfg.train.steps + ev
        costs += [one] * (per_cell_runs - have)
        log(f"  {label} / {cell}: {per_step * 1000:.0f} ms/step x "
            f"{cfg.train.steps} steps + evaluation {ev:.1f} s = {one / 60:.1f} min per run, "
            f"x {per_cell_runs - have} runs"
            + (f" ({have} of {per_cell_runs} finished in {out}, reused)" if have else ""))
    for r in na:
        log(f"  {r['variant']} / {r['cell']}: n/a ({r['reason']})")
    what = (f"lengen bench v{VERSION} protocol {protocol} ({len(costs)} runs: "
            + (f"{len(LR_FACTORS)} rates on seed 0 + {len(seeds) - 1} seed(s) at the chosen "
               f"rate" if tune else f"{len(seeds)} seeds at the default rate")
            + " per variant x cell"
            + (f", less {reused} finished in {out} and reused" if reused else "") + ")")
    return report_total(costs, workers, what, log=log)


def _time_eval(cfg, task, model) -> None:
    from lengen.eval.evaluate import evaluate

    model.eval()
    evaluate(model, task, cfg.eval.splits or task.splits(), n_sequences=cfg.eval.sequences,
             batch_size=cfg.eval.batch_size, seed=cfg.eval.seed)


__all__ = ["BASELINES", "BASELINE_GROUPS", "baseline_variants", "parse_variant", "load_variants", "build_specs", "run_bench",
           "estimate_bench", "finished_in", "run_name", "run_bench_one", "run_row", "select_lr",
           "default_seeds", "RUN_FIELDS", "SCALES"]
