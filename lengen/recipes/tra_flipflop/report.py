"""Report of the TRA Table 1 reproduction: Markdown + CSV table, bar chart, Appendix A heatmaps.

Reads rows (from :mod:`lengen.sweep`), never trains. Split out of :mod:`lengen.recipes.tra_flipflop`
so the recipe file stays about configs and running.
"""
from __future__ import annotations

import math
import os

import numpy as np

from lengen.analysis.heatmap import plot_attention, plot_attention_grid
from lengen.analysis.tables import fmt_mean_std, markdown_table, summarize
from lengen.fileio import savefig_atomic, write_csv_atomic, write_text_atomic
from lengen.recipes.tra_flipflop.published import PAPER_TABLE1
from lengen.recipes.tra_flipflop.specs import IID_SOLVED, SCALES, SPLITS

NOT_SOLVED = "†"


def table1_records(rows: list[dict], models: list[str]) -> list[dict]:
    """One record per (model, split): ours (mean/std/max/min/n over seeds) beside the paper's."""
    summ = summarize(rows, by=("model", "split"), metric="seq_acc", scale=100.0)
    recs = {(r["model"], r["split"]): r for r in summ.to_dict("records")}
    out = []
    for m in models:
        iid = recs.get((m, "iid"))
        solved = bool(iid is not None and iid["mean"] >= IID_SOLVED)
        for split, label in SPLITS.items():
            r = recs.get((m, split), {})
            p_mean, p_std = PAPER_TABLE1[split][m]
            out.append({"model": m, "split": split, "row": label,
                        "ours_mean": r.get("mean", math.nan), "ours_std": r.get("std", math.nan),
                        "ours_max": r.get("max", math.nan), "ours_min": r.get("min", math.nan),
                        "n_seeds": int(r.get("n", 0)), "paper_mean": p_mean, "paper_std": p_std,
                        "iid_solved": solved})
    return out


def table1_markdown(records: list[dict], models: list[str], caption: str) -> str:
    by = {(r["model"], r["split"]): r for r in records}
    grid = [["Model"] + models]
    any_mark = False
    for split, label in SPLITS.items():
        cells = []
        for m in models:
            r = by[(m, split)]
            ours = fmt_mean_std(r["ours_mean"], r["ours_std"]) if r["n_seeds"] else "failed"
            mark = NOT_SOLVED if split != "iid" and r["n_seeds"] and not r["iid_solved"] else ""
            any_mark |= bool(mark)
            cells.append(f"{ours}{mark} (paper {fmt_mean_std(r['paper_mean'], r['paper_std'])})")
        grid.append([f"Flip Flop {label}"] + cells)
    text = caption + "\n\n" + markdown_table(grid)
    if any_mark:
        text += (f"\n\n{NOT_SOLVED} IID not solved (mean IID whole-sequence accuracy < {IID_SOLVED:g}%): "
                 f"this model's OOD numbers are not meaningful.")
    return text + "\n"


def caption_for(scale: str, seeds: list, rel: str, wall_seconds: float | None = None) -> str:
    s = SCALES[scale]
    T = 2 * s["n_pairs"]
    cap = (f"Table 1 reproduction ({scale} scale). Whole-sequence accuracy (%), mean ± sample std "
           f"over {len(seeds)} seed(s) {list(seeds)} (ours), published TRA-paper Table 1 in "
           f"parentheses (mean ± std over four initialisations, 512 tokens). Ours: {T}-token "
           f"sequences ({s['n_pairs']} pairs), {s['n_layers']} layers, {s['n_heads']} heads, "
           f"d_model {s['d_model']}, SwiGLU MLP {s.get('d_ff') or 2 * s['d_model']}, RMSNorm pre-norm; AdamW lr "
           f"{s['lr']:g}, batch {s['batch_size']}, {s['steps']} steps, cosine decay; evaluation "
           f"on {s['eval_sequences']:,} fresh sequences per split (IID p_i=0.8, OOD dense p_i=0.1, "
           f"OOD sparse p_i=0.98). REL = {'T5 bucketed bias' if rel == 't5' else 'Transformer-XL relative'}.")
    if wall_seconds is not None:
        cap += f" Wall time of this invocation: {wall_seconds / 60:.1f} min."
    return cap


def bar_chart(records: list[dict], models: list[str], out: str, title: str = "") -> str:
    """Grouped bars, one panel per split: ours (mean, std error bar) beside the paper's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only

    by = {(r["model"], r["split"]): r for r in records}
    fig = Figure(figsize=(4.2 * len(SPLITS), 3.8))
    FigureCanvasAgg(fig)
    x = np.arange(len(models))
    for i, (split, label) in enumerate(SPLITS.items()):
        ax = fig.add_subplot(1, len(SPLITS), i + 1)
        ours = [by[(m, split)]["ours_mean"] for m in models]
        err = [0.0 if math.isnan(by[(m, split)]["ours_std"]) else by[(m, split)]["ours_std"]
               for m in models]
        paper = [by[(m, split)]["paper_mean"] for m in models]
        ax.bar(x - 0.2, ours, 0.4, yerr=err, capsize=2, label="ours", color="tab:blue")
        ax.bar(x + 0.2, paper, 0.4, label="paper", color="lightgray", edgecolor="gray", hatch="//")
        for j, m in enumerate(models):
            if split != "iid" and by[(m, split)]["n_seeds"] and not by[(m, split)]["iid_solved"]:
                ax.text(x[j] - 0.2, 2, NOT_SOLVED, ha="center", fontsize=9, color="darkred")
        ax.set_xticks(x, models, rotation=45, fontsize=8)
        ax.set_ylim(0, 105)
        ax.set_title(label, fontsize=10)
        if i == 0:
            ax.set_ylabel("whole-sequence accuracy (%)")
            ax.legend(fontsize=8, loc="lower left")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    savefig_atomic(fig, out, dpi=120)
    return out


def write_report(rows: list[dict], out_dir: str, *, scale: str, models: list[str], rel: str = "t5",
                 seeds=None, wall_seconds: float | None = None, log=print):
    """Write table.md, table.csv, table.png to ``out_dir``; returns (records, paths)."""
    seeds = seeds if seeds is not None else sorted({r.get("seed") for r in rows if "seed" in r})
    records = table1_records(rows, models)
    caption = caption_for(scale, seeds, rel, wall_seconds)
    md = table1_markdown(records, models, caption)
    paths = {"table_md": os.path.join(out_dir, "table.md"), "table_csv": os.path.join(out_dir, "table.csv"),
             "table_png": os.path.join(out_dir, "table.png")}
    write_text_atomic(md, paths["table_md"])
    write_csv_atomic(records, paths["table_csv"])
    bar_chart(records, models, paths["table_png"],
              title=f"TRA Table 1, {scale} scale: ours vs paper")
    log("\n" + md)
    log(f"wrote {paths['table_md']}, {paths['table_csv']}, {paths['table_png']}")
    return records, paths


def write_heatmaps(out_dir: str, specs, sweep, *, split: str = "sparse", index: int = 0,
                   log=print) -> dict:
    """Final-layer attention of the Appendix A pair on one OOD-sparse sequence: per seed, one PNG
    per model and a side-by-side figure (seed 0: ``TRA.png``, ``pair.png``; seed k:
    ``TRA-sk.png``, ``pair-sk.png``), and ``summary.md`` with every pair model's whole-sequence
    accuracy per split (whether it learned at all decides what its heatmap means). Runs that
    failed are reported and skipped."""
    runs = [s for s in specs if s.tags.get("group") == "heatmap"]
    done = [s for s in runs if sweep.status.get(s.name, {}).get("status") in ("done", "cached")]
    hdir = os.path.join(out_dir, "heatmaps")
    os.makedirs(hdir, exist_ok=True)
    paths = {}
    for seed in dict.fromkeys(s.tags["seed"] for s in runs):
        suffix = f"-s{seed}" if seed else ""
        of_seed = [s for s in runs if s.tags["seed"] == seed]
        ok = [s for s in of_seed if s in done]
        for s in ok:
            paths[f"heatmap_{s.tags['model']}{suffix}"] = plot_attention(
                os.path.join(out_dir, s.name), split=split, layer=-1, head=0, index=index,
                out=os.path.join(hdir, f"{s.tags['model']}{suffix}.png"))
        if len(ok) == len(of_seed) and len(ok) > 1:
            paths[f"heatmap_pair{suffix}"] = plot_attention_grid(
                [os.path.join(out_dir, s.name) for s in ok],
                os.path.join(hdir, f"pair{suffix}.png"),
                titles=[f"{s.tags['model']} (2 layers, 1 head, seed {seed})" for s in ok],
                split=split, index=index)
    acc = {(r["run"], r["split"]): 100 * r["value"] for r in sweep.rows
           if r.get("group") == "heatmap" and r.get("metric") == "seq_acc"}
    grid = [["Model", "Seed"] + [f"{label} (%)" for label in SPLITS.values()]]
    for s in done:
        grid.append([s.tags["model"], str(s.tags["seed"])]
                    + [f"{acc[(s.name, sp)]:.1f}" if (s.name, sp) in acc else "-" for sp in SPLITS])
    if done:
        paths["heatmap_summary"] = os.path.join(hdir, "summary.md")
        write_text_atomic("**Appendix A pair (2 layers, 1 head): whole-sequence accuracy**\n\n"
                          + markdown_table(grid) + "\n", paths["heatmap_summary"])
    for s in runs:
        if s not in done:
            log(f"heatmap run {s.name} did not finish; no heatmap for it")
    if paths:
        log("wrote " + ", ".join(paths.values()))
    return paths
