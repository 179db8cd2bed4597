"""``lengen sweep``: any comparison over seeds with the bench card's statistics, from the
command line (no script, so no ``if __name__ == "__main__":`` guard for the worker processes).

    lengen sweep task.name=copy model.posenc=rope,alibi train.steps=500 --seeds 0 1 2 --workers 2

An override whose value holds commas at its top level (``model.posenc=rope,alibi``) is an
*axis*: every combination of the axes' values is an *arm*; every arm runs every seed (``train.seed``
and ``train.data_seed`` both set to it: a different init and data order per seed), through
:func:`lengen.sweep.run_sweep` (local worker processes or ``--backend ray``). Then, per arm:

* **fit rate** ``k/n``: a run fitted when its mean score over the in-distribution splits
  (``iid``, or the length splits up to the task's ``max_train_length``) is at least
  ``fit_threshold`` (perplexity: finite); with no in-distribution split evaluated there is no
  fit rule and every run counts (the table says so);
* **OOD**: the mean over the other splits per run; its mean over the fitted seeds with a 95%
  percentile bootstrap interval (:mod:`lengen.bench.stats`), and the same per split;
* between every two arms, :func:`lengen.bench.stats.separation` on the fitted seeds' OOD
  scores: "X beats Y" only where its rule says so, else "not separable".

Written into ``out``: the sweep's files (``results.csv``, run directories), ``table.md`` (printed)
and ``table.csv`` (one row per arm x split: k, n, mean, lo, hi).
"""
from __future__ import annotations

import itertools
import math
import os
import re

from lengen.analysis.tables import markdown_table
from lengen.bench import stats
from lengen.config import resolve
from lengen.config_files import apply_overrides
from lengen.errors import ConfigError
from lengen.fileio import write_csv_atomic, write_text_atomic
from lengen.rundir.load import prepare
from lengen.sweep import RunSpec, run_sweep
from lengen.tasks.splits import is_length_split, parse_split

LOWER_IS_BETTER = ("ppl", "nll", "loss")


def split_top_level(value: str) -> list[str]:
    """``"rope,alibi"`` -> ``["rope", "alibi"]``; commas inside ``[]``, ``{}``, ``()`` or quotes
    do not split (``"[1, 2]"`` stays one value)."""
    parts, depth, cur, quote = [], 0, "", None
    for ch in value:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_axes(overrides) -> tuple[list[str], dict[str, list[str]]]:
    """Overrides -> (fixed overrides, ``{key: [values]}`` axes in the order given)."""
    fixed, axes = [], {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} has no '=': write key.path=value, or "
                              f"key.path=a,b for an axis")
        key, value = item.split("=", 1)
        values = split_top_level(value)
        if len(values) > 1:
            if "" in values:
                raise ConfigError(f"axis {key}: an empty value in {value!r}")
            if key in axes:
                raise ConfigError(f"axis {key} given twice")
            axes[key] = values
        else:
            fixed.append(item)
    return fixed, axes


_UNSAFE = re.compile(r"[^A-Za-z0-9._+,=@-]+")


def arms(base: dict, overrides) -> list[tuple[str, dict]]:
    """``[(label, config)]``: one per combination of the axes' values (one arm, labelled
    ``run``, when there is no axis)."""
    fixed, axes = parse_axes(overrides)
    base = apply_overrides(base, fixed)
    if not axes:
        return [("run", base)]
    out = []
    for combo in itertools.product(*axes.values()):
        items = [f"{k}={v}" for k, v in zip(axes, combo)]
        label = " ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(axes, combo))
        out.append((label, apply_overrides(base, items)))
    return out


def build_specs(base: dict, overrides, seeds) -> tuple[list[RunSpec], dict]:
    """RunSpecs of every arm x seed, and ``{label: config}`` of the arms."""
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must be distinct integers, got {seeds}")
    specs, by_arm = [], {}
    for label, config in arms(base, overrides):
        by_arm[label] = config
        for s in seeds:
            c = apply_overrides(config, [f"train.seed={s}", f"train.data_seed={s}"])
            name = _UNSAFE.sub("_", label.replace(" ", "_")) + f"--s{s}"
            c["name"] = name
            specs.append(RunSpec(name, c, {"arm": label, "seed": s}))
    return specs, by_arm


def arm_protocol(config: dict, metric: str | None = None, fit_splits=None):
    """(metric, in-distribution split test) of an arm's task: the task's ``score_metric``
    (``seq_acc`` if it names none) unless ``metric`` is given; in-distribution = ``fit_splits``
    when given, else ``iid``, else the length splits up to the task's ``max_train_length``."""
    task, _ = prepare(resolve(config))
    metric = metric or getattr(task, "score_metric", None) or (
        "ppl" if getattr(task, "evaluation", "") == "perplexity" else "seq_acc")
    if fit_splits:
        chosen = set(fit_splits)
        return metric, lambda sp: sp in chosen
    top = getattr(task, "max_train_length", None)

    def seen(sp: str) -> bool:
        if sp == "iid":
            return True
        if top is not None and is_length_split(sp):
            return parse_split(sp) <= top
        return False

    return metric, seen


def summarize(results_rows, specs, by_arm: dict, *, metric=None, fit_threshold: float = 0.9,
              fit_splits=None) -> dict:
    """Per arm: fit rate, OOD mean over fitted seeds with its interval, per split the same;
    between arms: separation verdicts. -> ``{"arms": [...], "splits": [...], "pairs": [...]}``."""
    by_run: dict[str, list[dict]] = {}
    for r in results_rows:
        by_run.setdefault(r.get("run"), []).append(r)
    arms_out, split_rows, ood_by_arm, rule_by_arm = [], [], {}, {}
    for label, config in by_arm.items():
        m, seen = arm_protocol(config, metric, fit_splits)
        lower = m in LOWER_IS_BETTER
        runs = []
        for spec in (s for s in specs if s.tags["arm"] == label):
            vals = {r["split"]: float(r["value"]) for r in by_run.get(spec.name, [])
                    if r.get("metric") == m and r.get("value") not in (None, "")}
            if not vals:
                runs.append(None)            # failed or no row of the metric
                continue
            ids = [v for sp, v in vals.items() if seen(sp)]
            oods = {sp: v for sp, v in vals.items() if not seen(sp)}
            if lower:
                fitted = all(math.isfinite(v) for v in vals.values())
            else:
                fitted = (not ids) or (sum(ids) / len(ids) >= fit_threshold)
            runs.append({"vals": vals, "fitted": fitted,
                         "id": sum(ids) / len(ids) if ids else math.nan,
                         "ood": sum(oods.values()) / len(oods) if oods else math.nan,
                         "has_rule": bool(ids) or lower})
        done = [r for r in runs if r is not None]
        fit = [r for r in done if r["fitted"]]
        ood = [r["ood"] for r in fit if r["ood"] == r["ood"]]
        k, n, mean, lo, hi = stats.fit_summary((r["fitted"] for r in done), ood)
        rule = ("finite" if lower else f"in-distribution mean >= {fit_threshold:g}"
                if any(r["has_rule"] for r in done) else "none (no in-distribution split)")
        id_all = [r["id"] for r in done if r["id"] == r["id"]]
        arms_out.append({"arm": label, "metric": m, "fit_k": k, "fit_n": n,
                         "id_mean_all": sum(id_all) / len(id_all) if id_all else math.nan,
                         "failed": len(runs) - len(done), "ood_mean": mean, "ood_lo": lo,
                         "ood_hi": hi, "fit_rule": rule})
        ood_by_arm[label] = [-x for x in ood] if lower else ood
        rule_by_arm[label] = rule
        splits = list(dict.fromkeys(sp for r in fit for sp in r["vals"]))
        for sp in splits:
            xs = [r["vals"][sp] for r in fit if sp in r["vals"]]
            mm, ll, hh = stats.bootstrap_mean(xs)
            split_rows.append({"arm": label, "split": sp, "metric": m,
                               "in_distribution": seen(sp), "n": len(xs), "mean": mm,
                               "lo": ll, "hi": hh})
    pairs = []
    labels = list(by_arm)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            res = stats.separation(ood_by_arm[a], ood_by_arm[b])
            pairs.append({"x": a, "y": b, **res,
                          "sentence": stats.sentence(a, b, "OOD", res)})
    return {"arms": arms_out, "splits": split_rows, "pairs": pairs}


def _f(x, pct: bool) -> str:
    if x is None or x != x:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.3g}"


def render(summary: dict) -> str:
    """The Markdown table of :func:`summarize` (one row per arm; per split mean [interval])."""
    arms_ = summary["arms"]
    if not arms_:
        return "no arms\n"
    pct = all(a["metric"] not in LOWER_IS_BETTER for a in arms_)
    splits = list(dict.fromkeys(r["split"] for r in summary["splits"]))
    cell = {(r["arm"], r["split"]): r for r in summary["splits"]}
    grid = [["arm", "fit k/n", "in-dist. (all seeds)", "OOD mean [95% CI]"] + splits]
    for a in arms_:
        row = [a["arm"], f"{a['fit_k']}/{a['fit_n']}" + (f" ({a['failed']} failed)"
                                                         if a["failed"] else ""),
               _f(a["id_mean_all"], pct),
               f"{_f(a['ood_mean'], pct)} [{_f(a['ood_lo'], pct)}, {_f(a['ood_hi'], pct)}]"]
        for sp in splits:
            r = cell.get((a["arm"], sp))
            row.append("" if r is None else f"{_f(r['mean'], pct)} [{_f(r['lo'], pct)}, "
                                            f"{_f(r['hi'], pct)}]")
        grid.append(row)
    metric = arms_[0]["metric"]
    lines = [f"Metric {metric}" + (" (x100)" if pct else "") + "; mean over the fitted seeds "
             "[95% percentile bootstrap interval] (in-dist. (all seeds): the mean over every seed "
             "of a run's in-distribution mean, fitted or not); fit rule: "
             + "; ".join(sorted({a["fit_rule"] for a in arms_})) + ". OOD = mean over the "
             "splits that are not in-distribution.", "", markdown_table(grid), ""]
    if summary["pairs"]:
        lines += ["Rule (lengen.bench.stats.separation; at least 2 fitted seeds per arm): X "
                  "beats Y when X's 95% interval lies wholly above Y's or the lower end of "
                  "P(X > Y)'s 95% interval is above 1/2; otherwise not separable.", ""]
        lines += [f"- {p['sentence']}" for p in summary["pairs"]] + [""]
    return "\n".join(lines)


def run_seed_sweep(base: dict, overrides, seeds, out: str, *, workers: int = 1,
                   backend: str = "local", threads: int | None = None, metric=None,
                   fit_threshold: float = 0.9, fit_splits=None, ray_options=None,
                   log=print) -> dict:
    """Run every arm x seed into ``out`` and write ``table.md`` / ``table.csv`` there.
    Returns the summary (:func:`summarize`) with ``markdown`` added."""
    specs, by_arm = build_specs(base, overrides, seeds)
    log(f"lengen sweep: {len(by_arm)} arm(s) x seeds {list(seeds)} = {len(specs)} run(s) "
        f"into {out}")
    res = run_sweep(specs, out, workers=workers, backend=backend, threads=threads, log=log,
                    ray_options=ray_options)
    summary = summarize(res.rows, specs, by_arm, metric=metric, fit_threshold=fit_threshold,
                        fit_splits=fit_splits)
    md = render(summary)
    write_text_atomic(md, os.path.join(out, "table.md"))
    rows = [dict(r, fit_k=a["fit_k"], fit_n=a["fit_n"]) for a in summary["arms"]
            for r in summary["splits"] if r["arm"] == a["arm"]]
    rows += [{"arm": a["arm"], "split": "OOD", "metric": a["metric"], "in_distribution": False,
              "n": a["fit_k"], "mean": a["ood_mean"], "lo": a["ood_lo"], "hi": a["ood_hi"],
              "fit_k": a["fit_k"], "fit_n": a["fit_n"]} for a in summary["arms"]]
    write_csv_atomic(rows, os.path.join(out, "table.csv"))
    summary["markdown"] = md
    return summary


__all__ = ["split_top_level", "parse_axes", "arms", "build_specs", "summarize", "render",
           "run_seed_sweep"]
