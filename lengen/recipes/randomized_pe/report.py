"""Tables and plots of ``lengen reproduce randomized-pe`` (reads rows, never trains).

From the sweep's rows (one per run x length x metric, tagged ``task scheme seed lr L``):

* ``scores.csv``: one score per run = mean ``token_acc`` (%) over the test lengths N+1..M, and
  ``train_score`` = the same over the evaluated training lengths 1..N (did the model fit them?);
* ``table1.md`` / ``table1.csv``: the paper's Table 1 layout (tasks grouped by level R / DCF / CS,
  one column per encoding), cell = ours (published), ours = max over seeds x learning rates; the
  CSV also carries the Table 4 statistics (mean ± std over seeds at the learning rate with the
  best mean) and the published ones;
* ``table4.md``: mean ± std, ours (published);
* ``table_train.md``: accuracy at the training lengths (the paper does not report it). A cell of
  Tables 1 / 4 whose runs at the best learning rate average below ``FIT_THRESHOLD`` % there is
  marked ‡: that model never fitted its training distribution, so its test score says more about
  under-training than about length generalization;
* ``curves/<task>.png``: accuracy vs input length per encoding (mean over seeds at the best
  learning rate, band = min..max over those seeds), dashed red line at N (Fig. 4);
* ``ablation_L.md/.csv/.png`` (Fig. 3) and ``table3.md/.csv`` (Table 3) when asked.
"""
from __future__ import annotations

import math
import os

from lengen.analysis.activations import plot_activations
from lengen.analysis.tables import markdown_table
from lengen.eval.length_sweep import length_curves, length_scores
from lengen.fileio import savefig_atomic, write_csv_atomic, write_text_atomic
from lengen.recipes.common import write_md
from lengen.recipes.randomized_pe.published import (PAPER_TABLE1, PAPER_TABLE3, PAPER_TABLE4,
                                                    UNSORTED)
from lengen.recipes.randomized_pe.scales import SCALES, eval_lengths
from lengen.recipes.randomized_pe.specs import EXTRA_SCHEMES, SCHEMES, TASK_LABELS
from lengen.sweep import training_span

LEVELS = ("R", "DCF", "CS")
FIT_THRESHOLD = 90.0   # % mean accuracy at training lengths 1..N below which a cell is marked ‡
UNFIT = "‡"


def _label(scheme: str) -> str:
    return (SCHEMES | EXTRA_SCHEMES)[scheme][0]


def run_scores(rows, *, N: int, M: int) -> list[dict]:
    """One record per finished run: ``run task scheme seed lr L score n_lengths min_n max_n
    train_score`` (in %; ``score`` over the test lengths N+1..M, ``train_score`` over the
    evaluated lengths 1..N, None if none was evaluated)."""
    by = ("run", "task", "scheme", "seed", "lr", "L")
    out = length_scores(rows, min_length=N + 1, max_length=M, by=by)
    fit = {tuple(r[c] for c in by): r["score"]
           for r in length_scores(rows, min_length=1, max_length=N, by=by)}
    for r in out:
        r["score"] *= 100.0
        f = fit.get(tuple(r[c] for c in by))
        r["train_score"] = None if f is None else 100.0 * f
    return out


def _std(vals: list[float]) -> float:
    if len(vals) < 2:
        return math.nan
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def aggregate(scores: list[dict], key=lambda r: (r["task"], r["scheme"])) -> dict:
    """``key -> {max, mean, std, best_lr, n_seeds, n_runs, train_mean, train_std}``: max over
    every run of the group; mean / sample std over the seeds of the learning rate with the best
    mean (Table 4); ``train_*`` = the same seeds' accuracy at the training lengths (None if
    unknown)."""
    groups: dict = {}
    for r in scores:
        groups.setdefault(key(r), {}).setdefault(r["lr"], []).append(r)
    out = {}
    for k, by_lr in groups.items():
        def mean_of(lr):
            return sum(r["score"] for r in by_lr[lr]) / len(by_lr[lr])

        best_lr = max(by_lr, key=mean_of)
        vals = [r["score"] for r in by_lr[best_lr]]
        fit = [r.get("train_score") for r in by_lr[best_lr]]
        fit = [] if any(f is None for f in fit) else fit
        out[k] = dict(max=max(r["score"] for rs in by_lr.values() for r in rs),
                      mean=sum(vals) / len(vals), std=_std(vals), best_lr=best_lr,
                      n_seeds=len(vals), n_runs=sum(len(v) for v in by_lr.values()),
                      train_mean=sum(fit) / len(fit) if fit else None,
                      train_std=_std(fit) if fit else None)
    return out


def unfit(a: dict | None) -> bool:
    """Did this cell's runs (best lr) fail to fit the training lengths? (False when unknown.)"""
    return bool(a) and a["train_mean"] is not None and a["train_mean"] < FIT_THRESHOLD


def _f(x, digits=1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pm(mean, std) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    return _f(mean) if std is None or math.isnan(std) else f"{_f(mean)} ± {_f(std)}"


def ordered_tasks(tasks) -> list[str]:
    """Tasks in the paper's order (grouped R, DCF, CS)."""
    return [t for t in TASK_LABELS if t in set(tasks)]


def table_grid(agg: dict, tasks, schemes, cell) -> list[list[str]]:
    """Rows ``[level, task, cells...]`` (level only on a group's first row) + a header row."""
    grid = [["Level", "Task"] + [_label(s) for s in schemes]]
    last = None
    for t in ordered_tasks(tasks):
        level, name = TASK_LABELS[t]
        grid.append([level if level != last else "", name] + [cell(t, s, agg.get((t, s)))
                                                              for s in schemes])
        last = level
    return grid


def write_tables(scores, out: str, *, tasks, schemes, caption: str, L: int, N: int,
                 train_lengths=None) -> tuple[dict, dict]:
    main = [r for r in scores if r["scheme"] in SCHEMES and r["L"] in (None, L)]
    agg = aggregate(main)
    paths = {}
    fit_note = (f"{UNFIT} did not fit the training lengths: its runs at the best learning rate "
                f"average below {FIT_THRESHOLD:.0f}% at lengths 1..{N} (`table_train.md`), so "
                f"the test score reflects under-training more than length generalization.")
    note = ("Cells: ours (published). Published numbers: Ruoss et al. (2023). † permutation-"
            "invariant task; ★ randomized learned = label encodings. Random accuracy 50% (20% "
            "for Modular Arithmetic (Simple), Cycle Navigation, Bucket Sort, Modular "
            "Arithmetic). " + fit_note)

    def mark(a):
        return UNFIT if unfit(a) else ""

    def cell1(t, s, a):
        return f"{_f(a['max']) + mark(a) if a else '-'} ({_f(PAPER_TABLE1[t][s])})"

    def cell4(t, s, a):
        return f"{_pm(a['mean'], a['std']) + mark(a) if a else '-'} ({_pm(*PAPER_TABLE4[t][s])})"

    def cell_train(t, s, a):
        return _pm(a["train_mean"], a["train_std"]) if a and a["train_mean"] is not None else "-"

    paths["table1_md"] = os.path.join(out, "table1.md")
    write_md(paths["table1_md"], "Table 1: accuracy (%) averaged over test lengths, max over "
             "seeds x learning rates", caption, table_grid(agg, tasks, schemes, cell1), note,
             label_columns=2)
    paths["table4_md"] = os.path.join(out, "table4.md")
    write_md(paths["table4_md"], "Table 4: accuracy (%) averaged over test lengths, mean ± std "
             "over seeds at the best learning rate", caption,
             table_grid(agg, tasks, schemes, cell4), note, label_columns=2)
    at = (f" (evaluated at lengths {', '.join(map(str, train_lengths))})"
          if train_lengths else "")
    paths["table_train_md"] = os.path.join(out, "table_train.md")
    write_md(paths["table_train_md"], f"Accuracy (%) at the training lengths 1..{N}{at}, mean ± "
             f"std over seeds at the best learning rate (the runs of Table 4)", caption,
             table_grid(agg, tasks, schemes, cell_train),
             "Not reported by the paper; a model that generalizes must first fit these. "
             + fit_note, label_columns=2)
    records = []
    for t in ordered_tasks(tasks):
        for s in schemes:
            a = agg.get((t, s), {})
            records.append(dict(level=TASK_LABELS[t][0], task=t, scheme=s, label=_label(s),
                                ours_max=a.get("max"), ours_mean=a.get("mean"),
                                ours_std=a.get("std"), ours_best_lr=a.get("best_lr"),
                                n_seeds=a.get("n_seeds", 0), n_runs=a.get("n_runs", 0),
                                ours_train_mean=a.get("train_mean"),
                                ours_train_std=a.get("train_std"), fitted=not unfit(a),
                                paper_max=PAPER_TABLE1[t][s], paper_mean=PAPER_TABLE4[t][s][0],
                                paper_std=PAPER_TABLE4[t][s][1]))
    paths["table1_csv"] = os.path.join(out, "table1.csv")
    write_csv_atomic(records, paths["table1_csv"])
    return agg, paths


def plot_curves(rows, scores, out: str, *, tasks, schemes, N: int, M: int, L: int) -> dict:
    """Fig. 4: one PNG per task, accuracy vs length per encoding (best lr, mean over seeds)."""
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only


    agg = aggregate([r for r in scores if r["scheme"] in SCHEMES and r["L"] in (None, L)])
    curves = length_curves([r for r in rows if r.get("L") in (None, L)],
                           by=("task", "scheme", "lr", "seed"))
    os.makedirs(os.path.join(out, "curves"), exist_ok=True)
    colors = {"none": "k", "sincos": "C0", "relative": "C1", "alibi": "C2", "rope": "C3",
              "learned": "C4"}
    paths = {}
    for t in ordered_tasks(tasks):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for s in schemes:
            if (t, s) not in agg:
                continue
            lr = agg[(t, s)]["best_lr"]
            runs = [v for (tt, ss, ll, _), v in curves.items() if (tt, ss, ll) == (t, s, lr)]
            lengths = sorted(set().union(*(set(x) for x, _ in runs)))
            per = [[dict(zip(x, y)).get(n) for x, y in runs] for n in lengths]
            mean = [100 * sum(v for v in p if v is not None) / sum(v is not None for v in p)
                    for p in per]
            lo = [100 * min(v for v in p if v is not None) for p in per]
            hi = [100 * max(v for v in p if v is not None) for p in per]
            base = s.removeprefix("rand_")
            style = "--" if s.startswith("rand_") else "-"
            line, = ax.plot(lengths, mean, style, color=colors.get(base), label=_label(s), lw=1.4)
            ax.fill_between(lengths, lo, hi, color=line.get_color(), alpha=0.12, lw=0)
        ax.axvline(N, color="red", ls="--", lw=1)
        ax.set(xlabel="input length", ylabel="accuracy (%)", xlim=(1, M), ylim=(0, 101),
               title=f"{TASK_LABELS[t][1]} (train 1..{N}, dashed line)")
        ax.legend(fontsize=7, ncol=2, loc="lower left")
        fig.tight_layout()
        paths[f"curve_{t}"] = os.path.join(out, "curves", f"{t}.png")
        savefig_atomic(fig, paths[f"curve_{t}"], dpi=110)
        plt.close(fig)
    return paths


def write_ablation_L(scores, out: str, *, caption: str) -> dict:
    """Fig. 3: randomized relative at each L (tasks that have more than one L)."""
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only

    rel = [r for r in scores if r["scheme"] == "rand_relative" and r["L"] is not None]
    agg = aggregate(rel, key=lambda r: (r["task"], r["L"]))
    tasks = ordered_tasks({t for t, _ in agg})
    Ls = sorted({L for _, L in agg})
    grid = [["Task"] + [f"L = {L}" for L in Ls]]
    records = []
    for t in tasks:
        cells = []
        for L in Ls:
            a = agg.get((t, L))
            cells.append(f"{_f(a['max'])} ({_pm(a['mean'], a['std'])})" if a else "-")
            if a:
                records.append(dict(task=t, L=L, ours_max=a["max"], ours_mean=a["mean"],
                                    ours_std=a["std"], ours_best_lr=a["best_lr"],
                                    n_seeds=a["n_seeds"], n_runs=a["n_runs"]))
        grid.append([TASK_LABELS[t][1]] + cells)
    paths = {"ablation_L_md": os.path.join(out, "ablation_L.md"),
             "ablation_L_csv": os.path.join(out, "ablation_L.csv"),
             "ablation_L_png": os.path.join(out, "ablation_L.png")}
    write_text_atomic(
        "**Fig. 3 ablation: randomized relative encoding, maximum position L** - cell: max over "
        "seeds x lrs (mean ± std at the best lr), accuracy (%) averaged over test lengths. The "
        "paper reports this only as a plot (largely flat in L for 1024..8192).\n\n"
        f"{caption}\n\n{markdown_table(grid)}\n", paths["ablation_L_md"])
    write_csv_atomic(records, paths["ablation_L_csv"])
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for t in tasks:
        xs = [L for L in Ls if (t, L) in agg]
        ax.plot(xs, [agg[(t, L)]["max"] for L in xs], "o-", label=f"{TASK_LABELS[t][1]} (max)")
        ax.errorbar(xs, [agg[(t, L)]["mean"] for L in xs],
                    yerr=[0 if math.isnan(agg[(t, L)]["std"]) else agg[(t, L)]["std"] for L in xs],
                    fmt="s:", capsize=3, alpha=0.7, label=f"{TASK_LABELS[t][1]} (mean ± std)")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="maximum position L", ylabel="accuracy (%)", ylim=(0, 101),
           title="Randomized relative: sweep over L")
    ax.legend(fontsize=7)
    fig.tight_layout()
    savefig_atomic(fig, paths["ablation_L_png"], dpi=110)
    plt.close(fig)
    return paths


def write_table3(scores, out: str, *, tasks, caption: str, L: int) -> dict:
    """Table 3: randomized sin/cos with and without sorting, max over seeds x lrs."""
    agg = aggregate([r for r in scores if r["scheme"] in ("rand_sincos", UNSORTED)
                     and r["L"] == L])
    grid = [["Level", "Task", "w/o sorting", "w/ sorting"]]
    records, last = [], None
    for t in ordered_tasks(tasks):
        level, name = TASK_LABELS[t]
        cells = []
        for s in (UNSORTED, "rand_sincos"):
            a = agg.get((t, s))
            cells.append(f"{_f(a['max']) if a else '-'} ({_f(PAPER_TABLE3[t][s])})")
            a = a or {}
            records.append(dict(level=level, task=t, scheme=s, sorted=s == "rand_sincos",
                                ours_max=a.get("max"), ours_mean=a.get("mean"),
                                ours_std=a.get("std"), paper_max=PAPER_TABLE3[t][s]))
        grid.append([level if level != last else "", name] + cells)
        last = level
    paths = {"table3_md": os.path.join(out, "table3.md"),
             "table3_csv": os.path.join(out, "table3.csv")}
    write_md(paths["table3_md"], "Table 3: randomized sin/cos with and without sorting, accuracy "
             "(%) averaged over test lengths, max over seeds x learning rates", caption, grid,
             "Cells: ours (published, Ruoss et al. 2023 Table 3).", label_columns=2)
    write_csv_atomic(records, paths["table3_csv"])
    return paths


def write_activation_pca(scores, out: str, *, N: int, M: int, n_sequences: int = 30,
                         log=print) -> dict:
    """Fig. 5 of the paper: 2D PCA of each layer's activations at the training length N and at
    a longer length (150 when N = 40, i.e. 3.75 N, capped at M), fitted on length N, for the
    first Reverse String run with relative and with randomized relative encodings. Writes
    ``fig5_activations.png`` and ``fig5_activations.md`` (the per-layer shift of the long cloud
    in units of the training cloud's spread; see :mod:`lengen.analysis.activations`). Skipped
    (empty dict) unless both runs are in the grid."""
    picks = {}
    for r in sorted(scores, key=lambda r: (r["seed"], r["lr"])):
        if r["task"] == "reverse_string" and r["scheme"] in ("relative", "rand_relative"):
            picks.setdefault(r["scheme"], r["run"])
    if len(picks) < 2:
        return {}
    long_n = min(M, max(N + 1, round(N * 150 / 40)))
    runs = [os.path.join(out, picks[s]) for s in ("relative", "rand_relative")]
    png = os.path.join(out, "fig5_activations.png")
    _, res = plot_activations(runs, (N, long_n), n_sequences=n_sequences, out=png,
                              labels=[_label("relative"), _label("rand_relative")])
    md = os.path.join(out, "fig5_activations.md")
    lines = [f"Fig. 5 (Ruoss et al.): activation PCA on Reverse String, fitted on length {N}, "
             f"{n_sequences} sequences per length, input-token positions. Shift = distance of "
             f"the length-{long_n} cloud's mean from the length-{N} cloud's mean in units of the "
             f"latter's spread (0 = same place); spread = ratio of the clouds' spreads.", "",
             "| Model | acc % (len " + f"{N} / {long_n})" + " | " + " | ".join(
                 "embeddings" if i == 0 else f"layer {i}" for i in range(len(res[0]["layers"])))
             + " |", "|:---|---:|" + "---:|" * len(res[0]["layers"])]
    for label, rr in zip((_label("relative"), _label("rand_relative")), res):
        acc = " / ".join(f"{100 * rr['accuracy'][n]:.1f}" for n in rr["lengths"])
        cells = " | ".join(f"shift {sh[long_n]['shift']:.2f}, spread {sh[long_n]['spread']:.2f}"
                           for sh in rr["shift"])
        lines.append(f"| {label} ({rr['run']}) | {acc} | {cells} |")
    write_text_atomic("\n".join(lines) + "\n", md)
    log(f"wrote {png} (Fig. 5 activations)")
    return {"fig5_png": png, "fig5_md": md}


def write_report(rows, out: str, *, scale: str, tasks, schemes, caption: str,
                 ablation_L: bool = False, ablation_unsorted: bool = False,
                 wall_seconds: float | None = None, log=print) -> tuple[list[dict], dict]:
    s = SCALES[scale]
    N, M, L = s["N"], s["M"], s["L"]
    scores = run_scores(rows, N=N, M=M)
    paths = {"scores_csv": os.path.join(out, "scores.csv")}
    write_csv_atomic(scores, paths["scores_csv"])
    span = training_span(out, [r["run"] for r in scores])
    cap = caption + (f" Training wall time (first run start to last run end, from the run "
                     f"directories): {span / 60:.1f} min." if span is not None else "")
    cap += (f" Wall time of this invocation: {wall_seconds / 60:.1f} min."
            if wall_seconds is not None else "")
    agg, p = write_tables(scores, out, tasks=tasks, schemes=schemes, caption=cap, L=L, N=N,
                          train_lengths=eval_lengths(scale)[1])
    paths.update(p)
    paths.update(plot_curves(rows, scores, out, tasks=tasks, schemes=schemes, N=N, M=M, L=L))
    paths.update(write_activation_pca(scores, out, N=N, M=M, log=log))
    if ablation_L:
        paths.update(write_ablation_L(scores, out, caption=cap))
    if ablation_unsorted:
        paths.update(write_table3(scores, out, tasks=tasks, caption=cap, L=L))
    with open(paths["table1_md"]) as f:
        log(f.read())
    log("wrote " + ", ".join(sorted(paths.values())))
    return scores, paths


__all__ = ["FIT_THRESHOLD", "unfit", "run_scores", "aggregate", "write_report",
           "write_activation_pca", "write_tables", "plot_curves",
           "write_ablation_L", "write_table3", "ordered_tasks"]
