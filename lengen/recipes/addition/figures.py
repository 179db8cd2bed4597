"""Figures of ``lengen reproduce addition`` (reads rows and scores, never trains).

* ``fig3_best.png`` / ``fig3_all.png``: EM vs length of the four PEs with index hints, best trial
  (Fig. 3) and every trial (Fig. C.1);
* ``fig4.png`` (with vs without hints), ``fig5.png`` (reversed vs standard), ``fig7.png`` (random
  spaces), ``fig8.png`` (randomized positions), ``fig_beyond.png`` (FIRE, position coupling,
  Abacus): best trials, one panel per PE where a figure compares settings of one PE;
* ``fig9.png``: digit error rate with and without a carry into the digit (greedy decoding,
  pooled over trials);
* ``fig_c10.png``: wrong digits per wrong answer and error positions (significance), pooled;
* ``fig11.png``: OOD EM of FIRE over weight-init seed x data-order seed;
* ``fig13.png``: FIRE's best trial per training length N;
* ``fig_training.png``: EM at the tracked lengths during training, every trial (Figs. C.4-C.7).

The training lengths are shaded in every EM-vs-length plot.
"""
from __future__ import annotations

import math
import os

from lengen.analysis.length_curves import length_curve_figure
from lengen.fileio import savefig_atomic
from lengen.recipes.addition.scores import best, pooled, trials
from lengen.recipes.addition.specs import FIGURES, PE_LABELS, PES, SCALES, SETTINGS


def _plt():
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only

    return plt


def _best_rows(rows, scores, settings, N):

    picked = {}
    for st in settings:
        b = best(scores, st, N)
        if b:
            picked[b["run"]] = st
    return [dict(r, setting=picked[r["run"]]) for r in rows
            if r.get("run") in picked and r.get("metric") == "seq_acc"]


def _curves(ax, rows, settings, N, title):
    labels = {(st,): SETTINGS[st]["label"] for st in settings}
    length_curve_figure(rows, metric="seq_acc", by=("setting",), train_range=(1, N),
                        title=title, labels=labels, ax=ax)
    ax.set_ylabel("exact match (%)")
    ax.set_xlabel("digits")


def compare(rows, scores, out, name, settings, N, title, *, per_pe: bool) -> str | None:
    """Best-trial curves of ``settings``; ``per_pe``: one panel per PE (pairs of settings)."""
    plt = _plt()
    sub = _best_rows(rows, scores, settings, N)
    if not sub:
        return None
    groups = ([[s for s in settings if s == pe or s.startswith(pe + "-")] for pe in PES]
              if per_pe else [settings])
    groups = [g for g in groups if any(r["setting"] in g for r in sub)]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, g in zip(axes[0], groups):
        pe = next((p for p in PES if g and g[0].startswith(p)), None)
        _curves(ax, [r for r in sub if r["setting"] in g], g, N,
                PE_LABELS.get(pe, "") if per_pe else "")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, f"{name}.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def all_trials(rows, scores, out, settings, N) -> str | None:
    plt = _plt()
    have = [st for st in settings if trials(scores, st, N)]
    if not have:
        return None
    fig, axes = plt.subplots(1, len(have), figsize=(4.2 * len(have), 3.6), squeeze=False)
    for ax, st in zip(axes[0], have):
        runs = {r["run"]: r for r in trials(scores, st, N)}
        sub = [r for r in rows if r.get("run") in runs and r.get("metric") == "seq_acc"]
        labels = {(name,): f"init {r['seed']}" for name, r in runs.items()}
        length_curve_figure(sub, metric="seq_acc", by=("run",), train_range=(1, N),
                            title=SETTINGS[st]["label"], labels=labels, ax=ax)
        ax.set_ylabel("exact match (%)")
        ax.set_xlabel("digits")
    fig.suptitle("Every trial (Fig. C.1)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "fig3_all.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def carry(rows, scores, out, N) -> str | None:

    plt = _plt()
    bars = []
    for st in SETTINGS:
        runs = {r["run"] for r in trials(scores, st, N)}
        # per-digit reading (see lengen.eval.addition_errors): the per-example "without carry"
        # class is all but empty past ~10 digits
        wc, _ = pooled(rows, runs, "digit_acc_carry_in")
        wo, _ = pooled(rows, runs, "digit_acc_no_carry_in")
        if wc is not None or wo is not None:
            bars.append((SETTINGS[st]["label"], 100 - (wc or 0), 100 - (wo or 0)))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(bars), 3.4))
    x = range(len(bars))
    ax.bar([i - 0.2 for i in x], [b[1] for b in bars], 0.4, label="carry into the digit")
    ax.bar([i + 0.2 for i in x], [b[2] for b in bars], 0.4, label="no carry into it")
    ax.set_xticks(list(x), [b[0] for b in bars], rotation=20, fontsize=8)
    ax.set(ylabel="digit error rate (%)", title="Errors with and without carry (Fig. 9)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "fig9.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def error_shapes(rows, scores, out, N, setting="fire") -> str | None:

    plt = _plt()
    runs = {r["run"] for r in trials(scores, setting, N)}
    counts: dict[int, float] = {}
    where: dict[int, float] = {}
    for r in rows:
        if r.get("run") not in runs:
            continue
        if r.get("metric") == "wrong_digits_count":
            counts[int(r["k"])] = counts.get(int(r["k"]), 0) + float(r["value"])
        elif r.get("metric") == "error_position_count":
            where[int(r["position"])] = where.get(int(r["position"]), 0) + float(r["value"])
    if not counts:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    ks = sorted(counts)
    total = sum(counts.values())
    a.bar(ks, [100 * counts[k] / total for k in ks])
    a.set(xlabel="wrong digits in a wrong answer", ylabel="% of wrong answers",
          title=f"{SETTINGS[setting]['label']}: error count")
    ps = sorted(where)
    b.bar(ps, [where[p] for p in ps])
    b.set(xlabel="significance of the wrong digit (0 = units)", ylabel="wrong digits",
          title="error positions (Fig. C.10)")
    fig.tight_layout()
    path = os.path.join(out, "fig_c10.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def heatmap(scores, out, scale) -> str | None:
    plt = _plt()
    s = SCALES[scale]
    inits, orders = s["heatmap"]
    cell = {(r["seed"], r["data_seed"]): r for r in scores if r["setting"] == "fire"
            and int(r["N"]) == s["N"] and r["status"] in ("ok", "diverged")}
    if not any((i, d) in cell for i in inits for d in orders):
        return None
    grid = [[(cell[(i, d)].get("ood") if (i, d) in cell and cell[(i, d)]["status"] == "ok"
              else math.nan) for d in orders] for i in inits]
    fig, ax = plt.subplots(figsize=(1.6 + 0.9 * len(orders), 1.2 + 0.7 * len(inits)))
    im = ax.imshow([[math.nan if v is None else v for v in row] for row in grid], vmin=0,
                   vmax=100, cmap="viridis")
    for y, row in enumerate(grid):
        for x, v in enumerate(row):
            txt = "div." if (inits[y], orders[x]) in cell and cell[(inits[y], orders[x])][
                "status"] == "diverged" else ("-" if v is None or math.isnan(v) else f"{v:.0f}")
            ax.text(x, y, txt, ha="center", va="center", color="w", fontsize=8)
    ax.set_xticks(range(len(orders)), [str(d) for d in orders])
    ax.set_yticks(range(len(inits)), [str(i) for i in inits])
    ax.set(xlabel="data-order seed", ylabel="init seed",
           title=f"FIRE: OOD EM % ({s['N'] + 1}..{s['M']}), Fig. 11")
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    path = os.path.join(out, "fig11.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def train_lengths(rows, scores, out, scale) -> str | None:
    plt = _plt()
    Ns = sorted({int(r["N"]) for r in scores if r["setting"] == "fire" and r["status"] == "ok"})
    picked = {best(scores, "fire", n)["run"]: n for n in Ns if best(scores, "fire", n)}
    if len(picked) < 2:
        return None
    sub = [dict(r, N=picked[r["run"]]) for r in rows if r.get("run") in picked
           and r.get("metric") == "seq_acc"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    length_curve_figure(sub, metric="seq_acc", by=("N",),
                        labels={(n,): f"trained 1..{n}" for n in Ns},
                        title="FIRE, best trial per training length (Fig. 13)", ax=ax)
    for n in Ns:
        ax.axvline(n + 0.5, color="0.6", ls=":", lw=0.8)
    ax.set(ylabel="exact match (%)", xlabel="digits")
    fig.tight_layout()
    path = os.path.join(out, "fig13.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def training_curves(rows, scores, out, scale) -> str | None:

    plt = _plt()
    s = SCALES[scale]
    have = [st for st in (*PES, "coupling", "abacus") if trials(scores, st, s["N"])]
    data = [r for r in rows if r.get("metric") == "seq_acc_during_training"]
    if not have or not data:
        return None
    fig, axes = plt.subplots(1, len(have), figsize=(3.8 * len(have), 3.4), squeeze=False)
    colors = {f"len={n}": f"C{i}" for i, n in enumerate(s["track"])}
    for ax, st in zip(axes[0], have):
        for t in trials(scores, st, s["N"]):
            for split, c in colors.items():
                pts = sorted((r["step"], 100 * float(r["value"])) for r in data
                             if r["run"] == t["run"] and r["split"] == split)
                if pts:
                    ax.plot(*zip(*pts), color=c, lw=1, alpha=0.8,
                            label=split.replace("len=", "") + " digits" if t is trials(
                                scores, st, s["N"])[0] else None)
        ax.set(title=SETTINGS[st]["label"], xlabel="step", ylabel="EM (%)", ylim=(-2, 102))
        ax.legend(fontsize=7)
    fig.suptitle("OOD exact match during training, every trial (Figs. 13, C.4-C.7)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "fig_training.png")
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def write_figures(rows, scores, out: str, *, scale: str) -> dict:
    N = SCALES[scale]["N"]
    made = {
        "fig3_best": compare(rows, scores, out, "fig3_best", FIGURES["fig3"], N,
                             "Best trial, reversed format with index hints (Fig. 3)",
                             per_pe=False),
        "fig3_all": all_trials(rows, scores, out, FIGURES["fig3"], N),
        "fig4": compare(rows, scores, out, "fig4", FIGURES["fig4"], N,
                        "With and without index hints, best trial (Fig. 4)", per_pe=True),
        "fig5": compare(rows, scores, out, "fig5", FIGURES["fig5"], N,
                        "Reversed vs standard format, best trial (Fig. 5)", per_pe=True),
        "fig7": compare(rows, scores, out, "fig7", FIGURES["fig7"], N,
                        "Random-space augmentation, best trial (Fig. 7)", per_pe=True),
        "fig8": compare(rows, scores, out, "fig8", FIGURES["fig8"], N,
                        "Randomized positions, best trial (Fig. 8)", per_pe=True),
        "fig_beyond": compare(rows, scores, out, "fig_beyond", FIGURES["beyond"], N,
                              "FIRE beside position coupling and Abacus, best trial",
                              per_pe=False),
        "fig9": carry(rows, scores, out, N),
        "fig_c10": error_shapes(rows, scores, out, N),
        "fig11": heatmap(scores, out, scale),
        "fig13": train_lengths(rows, scores, out, scale),
        "fig_training": training_curves(rows, scores, out, scale),
    }
    return {k: v for k, v in made.items() if v}


__all__ = ["write_figures", "compare", "all_trials", "carry", "error_shapes", "heatmap",
           "train_lengths", "training_curves"]
