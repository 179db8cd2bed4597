"""Report of the index-warping reproduction: Table A (ours beside the published averages, plus our
seen / unseen averages) and the accuracy-vs-length figures 5, 6 and C per task.

Reads rows (from :mod:`lengen.sweep`), never trains. Table A cell = unweighted mean of the
per-length sequence accuracy over the evaluated test lengths 2..5M (the paper's "average of
sequence accuracy on all testing lengths"), then mean ± std over seeds. "seen" averages the lengths
2..M, "unseen" M+1..5M: the paper's claim is that warping + PI extrapolates *without* losing the
seen lengths, which one average hides.
"""
from __future__ import annotations

import math
import os
import statistics

from lengen.analysis.length_curves import plot_length_curves
from lengen.analysis.tables import fmt_mean_std, markdown_table
from lengen.eval.length_sweep import length_scores
from lengen.fileio import write_csv_atomic, write_text_atomic
from lengen.recipes.index_warping.published import PAPER_TABLE_A, UNCERTAIN_ROWS
from lengen.recipes.index_warping.specs import FIG5, FIG6, FIG6_LABELS, FIGC, MODELS, SCALES

#: % mean sequence accuracy over the seen lengths 2..M below which a column is marked: it did not
#: fit its training distribution, so its unseen numbers say nothing about extrapolation
FIT = 90.0
NOT_FIT = "‡"


def table_a_records(rows: list[dict], scale: str, tasks, models) -> list[dict]:
    """One record per (task, column): ours (mean / std over seeds of the per-run average over
    all / seen / unseen lengths, in %) beside the published Table A value (None if absent)."""
    out = []
    for task in tasks:
        M = SCALES[scale]["M"][task]
        of_task = [r for r in rows if r.get("task") == task]
        for model in models:
            of_model = [r for r in of_task if r.get("model") == model]
            rec = {"task": task, "model": model, "label": MODELS[model][0],
                   "paper": PAPER_TABLE_A.get(task, {}).get(model)}
            for rng, lo, hi in (("all", 2, None), ("seen", 2, M), ("unseen", M + 1, None)):
                per_seed = [100 * s["score"] for s in length_scores(
                    of_model, min_length=lo, max_length=hi, metric="seq_acc", by=("seed",))]
                rec[f"{rng}_mean"] = statistics.fmean(per_seed) if per_seed else math.nan
                rec[f"{rng}_std"] = (statistics.stdev(per_seed) if len(per_seed) > 1
                                     else math.nan)
                if rng == "all":
                    rec["n_seeds"] = len(per_seed)
            rec["fits"] = rec["seen_mean"] >= FIT             # NaN (no runs): False
            out.append(rec)
    return out


def table_a_markdown(records: list[dict], tasks, models, caption: str) -> str:
    by = {(r["task"], r["model"]): r for r in records}
    lines = [caption, ""]
    grid = [["Task"] + [MODELS[m][0] for m in models]]
    for task in tasks:
        cells = []
        for m in models:
            r = by[(task, m)]
            paper = "?" if r["paper"] is None else f"{r['paper']:.1f}"
            ours = fmt_mean_std(r["all_mean"], r["all_std"], digits=1) if r["n_seeds"] \
                else "failed"
            mark = f" {NOT_FIT}" if r["n_seeds"] and not r["fits"] else ""
            cells.append(f"{ours}{mark} ({paper})")
        grid.append([task + (" *" if task in UNCERTAIN_ROWS else "")] + cells)
    lines += ["**Table A: average sequence accuracy (%) over test lengths 2..5M, ours (paper)**",
              "", markdown_table(grid), ""]
    grid = [["Task"] + [MODELS[m][0] for m in models]]
    for task in tasks:
        grid.append([task] + [
            f"{fmt_mean_std(by[(task, m)]['seen_mean'], None, digits=1)} / "
            f"{fmt_mean_std(by[(task, m)]['unseen_mean'], None, digits=1)}" for m in models])
    lines += ["**Ours split by length: seen (2..M) / unseen (M+1..5M) average sequence accuracy "
              "(%)**", "", markdown_table(grid), ""]
    if any(r["n_seeds"] and not r["fits"] for r in records):
        lines += [f"{NOT_FIT} did not fit its training distribution: mean sequence accuracy "
                  f"below {FIT:g}% over the seen lengths 2..M, so its average says nothing about "
                  f"length generalization.", ""]
    if any(t in UNCERTAIN_ROWS for t in tasks):
        lines += ["\\* the published Sum row is garbled in our copy of the paper (five numbers "
                  "for eight columns); '?' = unknown, the others are our reading.", ""]
    return "\n".join(lines)


def write_figures(rows: list[dict], out_dir: str, *, scale: str, tasks, models) -> dict:
    """fig5-/fig6-/figC-<task>.png for each task with at least two of the figure's columns."""
    paths = {}
    for task in tasks:
        M = SCALES[scale]["M"][task]
        of_task = [r for r in rows if r.get("task") == task]
        for fig, cols, names in (("fig5", FIG5, {}), ("fig6", FIG6, FIG6_LABELS),
                                 ("figC", FIGC, {})):
            have = [m for m in cols if m in models
                    and any(r.get("model") == m and r.get("metric") == "seq_acc" for r in of_task)]
            if len(have) < 2:
                continue
            sel = [r for r in of_task if r.get("model") in have]
            labels = {(m,): names.get(m, MODELS[m][0]) for m in have}
            path = os.path.join(out_dir, f"{fig}-{task}.png")
            plot_length_curves(sel, path, metric="seq_acc", by=("model",), train_range=(2, M),
                               labels=labels, title=f"{task} ({fig}, {scale} scale)")
            paths[f"{fig}_{task}"] = path
    return paths


def write_report(rows: list[dict], out_dir: str, *, scale: str, tasks, models, caption: str,
                 log=print):
    """Write table_a.md / table_a.csv and the figures to ``out_dir``; returns (records, paths)."""
    records = table_a_records(rows, scale, tasks, models)
    md = table_a_markdown(records, tasks, models, caption)
    paths = {"table_a_md": os.path.join(out_dir, "table_a.md"),
             "table_a_csv": os.path.join(out_dir, "table_a.csv")}
    write_text_atomic(md, paths["table_a_md"])
    write_csv_atomic(records, paths["table_a_csv"])
    paths.update(write_figures(rows, out_dir, scale=scale, tasks=tasks, models=models))
    log("\n" + md)
    log("wrote " + ", ".join(paths.values()))
    return records, paths


__all__ = ["table_a_records", "table_a_markdown", "write_figures", "write_report"]
