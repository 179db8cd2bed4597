"""The idealized attention-score analysis of "Improving Length Generalization via Position Index
Warping" (``lengen analyze idealized``): Table 2 and Figs. 1, 2, A, B, 4.

Everything is computed from the formulas in :mod:`lengen.analysis.idealized` (pure formulas: no
training, no run directories).

Writes into ``--out``:

* ``table2.md`` / ``table2.csv`` -- the total difference (eq. 9) for training lengths 20 (c = 10)
  and 500 (c = 200), test 2x and 4x, without warping / sqrt / Beta(2, 5) CDF, ours beside the
  published values; which f_skew wins per setting in each; the same for a handful of alternative
  readings of the paper's implicit conventions.
* ``fig1_exp_scores_rope_d_alibi_slopes.png`` -- Fig. 1: exp(Attn_raw) vs relative distance
  (m = 1000, n = 0..1000) for RoPE at several d and ALiBi with slopes 1/2^i, i = 1..8.
* ``fig2_train500_test1000_bias_gap.png`` -- Fig. 2: RoPE and ALiBi over the training (l = 500)
  and test (l = 1000) distances; dotted lines = the lowest RoPE score met in training / in test.
* ``figA_pi_tail_sensitivity.png`` -- Fig. A: training l = 100 vs PI at l = 200 and 500; dotted
  lines at the 50th point from the last and at the last point.
* ``figB_sqrt_skew.png`` / ``fig4_beta25_cdf_skew.png`` -- Figs. B and 4: the two f_skew, with the
  warped training positions they give for L_train = 20.
* ``extra_table2_sensitivity_tails.png`` -- not in the paper: the sensitivities that eq. 9 sums,
  per Table 2 setting (training with each f_skew vs test with PI).

This module is the command (``add_arguments``, ``run``; registered in
``lengen.analysis.ANALYSES``): it imports the formulas, never the other way round.
"""
from __future__ import annotations

import csv
import math
import os

import numpy as np

from lengen.analysis import idealized as I
from lengen.analysis.tables import markdown_table
from lengen.fileio import make_output_dir, savefig_atomic

# alternative readings of the paper's implicit conventions, each a change to our default one
# (name, what it changes, kwargs for total_difference, d values)
ALTERNATIVES = [
    ("ours (default)", "c terms, exp(score), PI ratio L_tr/L_te, d -> inf", {}, None),
    ("d = 4096", "finite head dim 4096 instead of the d -> inf limit", {}, 4096),
    ("d = 64", "finite head dim 64 (T5-base / GPT-2 head size)", {}, 64),
    ("c + 1 terms", "sum i = 0..c as eq. 9 is printed", {"inclusive": True}, None),
    ("raw scores", "sensitivity of Attn_raw, not exp(Attn_raw)", {"exponentiate": False}, None),
    ("PI last index", "PI ratio (L_tr - 1)/(L_te - 1)", {"pi_ratio": "last_index"}, None),
]


def add_arguments(p) -> None:
    p.add_argument("--out", metavar="DIR", default="runs/idealized",
                   help="output folder (default runs/idealized)")
    p.add_argument("--d", nargs="+", default=["inf", "4096"], metavar="D",
                   help="RoPE head dims of the Table 2 columns: even integers or 'inf' for the "
                        "d -> infinity limit (default: inf 4096)")
    p.add_argument("--base", type=float, default=I.ROPE_BASE,
                   help="RoPE base (default 10000, i.e. theta logUniform(1e-4, 1) as d -> inf)")
    p.add_argument("--raw-scores", action="store_true",
                   help="sensitivity (eq. 6) of the raw score instead of exp(score), the softmax "
                        "numerator the paper plots (default: exp)")
    p.add_argument("--inclusive-sum", action="store_true",
                   help="eq. 9 over i = 0..c (c + 1 terms, the formula as printed) instead of "
                        "the last c indices (the text; default)")
    p.add_argument("--pi-ratio", choices=("length", "last_index"), default="length",
                   help="position interpolation ratio: L_train/L_test (eq. 5, default) or "
                        "(L_train-1)/(L_test-1)")
    p.add_argument("--fig1-d", nargs="+", default=["64", "inf"], metavar="D",
                   help="RoPE head dims drawn in Fig. 1 (default: 64 inf)")
    p.add_argument("--alibi-slope", type=float, default=1 / 16,
                   help="ALiBi slope drawn in Fig. 2 (default 1/16 = 0.0625)")
    p.add_argument("--no-figures", action="store_true", help="write Table 2 only")


def run(args) -> int:
    d_values = [I.parse_d(t) for t in args.d]
    fig1_d = [I.parse_d(t) for t in args.fig1_d]
    if not args.alibi_slope > 0:
        raise ValueError(f"--alibi-slope must be > 0, got {args.alibi_slope}")
    kw = dict(base=args.base, exponentiate=not args.raw_scores, inclusive=args.inclusive_sum,
              pi_ratio=args.pi_ratio)
    make_output_dir(args.out)
    rows = I.table2(d_values, **kw)
    md = table2_markdown(rows, d_values, kw)
    write_table2(rows, md, args.out)
    print(md)
    written = ["table2.md", "table2.csv"]
    if not args.no_figures:
        written += write_figures(args.out, fig1_d=fig1_d, alibi_slope=args.alibi_slope,
                                 base=args.base, exponentiate=not args.raw_scores)
    print("\nwrote " + ", ".join(os.path.join(args.out, n) for n in written))
    return 0


# -- Table 2 ---------------------------------------------------------------------------------------
def _cols(d_values):
    return [f"ours_d={I.d_label(d)}" for d in d_values]


def _reading(kw) -> str:
    return (f"{'c + 1' if kw.get('inclusive') else 'c'} terms, "
            f"{'raw scores' if not kw.get('exponentiate', True) else 'exp(Attn_raw)'}, "
            f"PI ratio {'(L_tr-1)/(L_te-1)' if kw.get('pi_ratio') == 'last_index' else 'L_tr/L_te'}, "
            f"RoPE base {kw.get('base', I.ROPE_BASE):g}")


def table2_markdown(rows, d_values, kw) -> str:
    cols = _cols(d_values)
    out = ["# Table 2: total difference in attention sensitivity (eq. 9), idealized RoPE", "",
           f"Reading: {_reading(kw)}; conventions in `lengen/analysis/idealized.py`. "
           "Published values transcribed from the paper's Table 2.", ""]
    grid = [["train len", "c", "f_skew", "test len", "published"]
            + [f"ours d={c.split('=')[1]}" for c in cols] + [f"ours-pub (d={cols[0].split('=')[1]})"]]
    for r in rows:
        grid.append([str(r["train_len"]), str(r["c"]), I.SKEW_LABELS[r["f_skew"]],
                     f"{r['ratio']}x ({r['test_len']})", f"{r['published']:.3f}"]
                    + [f"{r[c]:.3f}" for c in cols] + [f"{r[cols[0]] - r['published']:+.3f}"])
    out += [markdown_table(grid, align="lrlr" + "r" * (len(grid[0]) - 4)), "",
            "## Which f_skew wins (smallest total difference)", ""]
    pub_w = I.winners(rows, "published")
    grid = [["train len", "test", "published"] + [f"ours d={c.split('=')[1]}" for c in cols]]
    for (ltr, ratio), w in pub_w.items():
        cells = []
        for c in cols:
            ow = I.winners(rows, c)[(ltr, ratio)]
            cells.append(f"{I.SKEW_LABELS[ow]} ({'match' if ow == w else 'differs'})")
        grid.append([str(ltr), f"{ratio}x", I.SKEW_LABELS[w]] + cells)
    out += [markdown_table(grid, align="lrl" + "l" * len(cols)), ""]
    for c in cols:
        both = all(_skews_below_identity(rows, c, ltr, ratio) for (ltr, ratio) in pub_w)
        out.append(f"- {c}: both skews reduce the total difference below 'w/o' in every setting: "
                   f"{'yes' if both else 'no'}; max |ours - published| = "
                   f"{max(abs(r[c] - r['published']) for r in rows):.3f}")
    both = all(_skews_below_identity(rows, "published", ltr, ratio) for (ltr, ratio) in pub_w)
    out.append(f"- published: both skews below 'w/o' in every setting: {'yes' if both else 'no'}")
    out += ["", "## Alternative readings (each changes one convention of the default)", ""]
    grid = [["reading", "what changes", "max abs diff", "mean abs diff", "winners match",
             "cells within 0.005"]]
    for name, what, akw, d in ALTERNATIVES:
        alt = I.table2((d,), **{**{"base": kw.get("base", I.ROPE_BASE)}, **akw})
        col = _cols((d,))[0]
        diffs = [abs(r[col] - r["published"]) for r in alt]
        aw = I.winners(alt, col)
        grid.append([name, what, f"{max(diffs):.3f}", f"{np.mean(diffs):.3f}",
                     f"{sum(aw[k] == w for k, w in pub_w.items())}/{len(pub_w)}",
                     f"{sum(x <= 0.005 for x in diffs)}/{len(diffs)}"])
    out += [markdown_table(grid, align="llrrrr"), ""]
    return "\n".join(out)


def _skews_below_identity(rows, col, ltr, ratio) -> bool:
    vals = {r["f_skew"]: r[col] for r in rows if r["train_len"] == ltr and r["ratio"] == ratio}
    return vals["sqrt"] < vals["identity"] and vals["beta"] < vals["identity"]


def write_table2(rows, md: str, out: str) -> None:
    with open(os.path.join(out, "table2.md"), "w") as fh:
        fh.write(md + "\n")
    with open(os.path.join(out, "table2.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


# -- figures ---------------------------------------------------------------------------------------
def _figure(ncols=1, size=(6.4, 4.2)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only

    fig = Figure(figsize=(size[0] * ncols, size[1]))
    FigureCanvasAgg(fig)                      # Agg canvas: no global backend, no display
    axes = [fig.add_subplot(1, ncols, k + 1) for k in range(ncols)]
    return fig, axes


def _save(fig, out, name) -> str:
    fig.tight_layout()
    savefig_atomic(fig, os.path.join(out, name), dpi=120)
    return name


def _dname(d) -> str:
    return "d → ∞" if d is None else f"d = {d}"


def fig1(out, fig1_d, base) -> str:
    """Fig. 1: exp(Attn_raw(m - n)) for m = 1000, n = 0..1000."""
    x = np.arange(0, 1001, dtype=np.float64)
    fig, (ax,) = _figure()
    for d in fig1_d:
        ax.plot(x, np.exp(I.rope_score(x, d, base)), lw=1.6, label=f"RoPE, {_dname(d)}")
    for i in range(1, 9):
        ax.plot(x, np.exp(I.alibi_score(x, 2.0 ** -i)), lw=0.9, ls="--", label=f"ALiBi, slope 1/2^{i}")
    ax.axhline(math.exp(-1), color="gray", lw=0.6, ls=":")
    ax.set(xlabel="relative distance m - n (m = 1000)", ylabel="exp(Attn_raw)",
           title="Fig. 1: exponentiated raw scores, uniform unit q/k")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out, "fig1_exp_scores_rope_d_alibi_slopes.png")


def fig2(out, slope, base, l_train=500, l_test=1000) -> str:
    """Fig. 2: training (l = 500) vs test (l = 1000) distances; RoPE meets unseen biases."""
    fig, (ax,) = _figure()
    xtr, xte = np.arange(l_train, dtype=np.float64), np.arange(l_test, dtype=np.float64)
    rtr, rte = np.exp(I.rope_score(xtr, None, base)), np.exp(I.rope_score(xte, None, base))
    ax.axvspan(0, l_train - 1, color="0.9", label=f"seen in training (< {l_train})")
    ax.plot(xte, rte, color="tab:orange", lw=1.2, label=f"RoPE d → ∞, test l = {l_test}")
    ax.plot(xtr, rtr, color="tab:blue", lw=2.0, label=f"RoPE d → ∞, train l = {l_train}")
    ax.plot(xte, np.exp(I.alibi_score(xte, slope)), color="tab:red", lw=1.2,
            label=f"ALiBi slope {slope:g}, test")
    ax.plot(xtr, np.exp(I.alibi_score(xtr, slope)), color="tab:green", lw=2.0,
            label=f"ALiBi slope {slope:g}, train")
    ax.axhline(rtr.min(), color="tab:pink", ls=":", lw=1.5, label=f"RoPE lowest in training {rtr.min():.3f}")
    ax.axhline(rte.min(), color="tab:purple", ls=":", lw=1.5, label=f"RoPE lowest in test {rte.min():.3f}")
    ax.set(xlabel="relative distance m - n", ylabel="exp(Attn_raw)",
           title="Fig. 2: positional-bias gap between training and test")
    ax.legend(fontsize=7)
    return _save(fig, out, "fig2_train500_test1000_bias_gap.png")


def figA(out, base, l_train=100, test_lens=(200, 500), back=50) -> str:
    """Fig. A: PI squeezes the tail; the score change over the last 50 indices shrinks with l."""
    fig, (ax,) = _figure()
    cases = [(l_train, "tab:blue", "gray", "train")] + list(
        zip(test_lens, ("tab:red", "tab:green"), ("tab:pink", "darkgreen"), ("PI",) * 2))
    last = None
    for length, color, lcolor, kind in cases:
        i = np.arange(length, dtype=np.float64)
        y = np.exp(I.rope_score(I.interpolate(i, l_train, length), None, base))
        ax.plot(i, y, color=color, lw=1.5, label=f"{kind} l = {length}")
        ax.axhline(y[length - back], color=lcolor, ls=":", lw=1.3,
                   label=f"50th from last, l = {length}: {y[length - back]:.4f}")
        ax.plot([length - back], [y[length - back]], "o", color=color, ms=4)
        last = y[-1] if last is None else last
    ax.axhline(last, color="gold", ls=":", lw=1.5, label=f"last point (train): {last:.4f}")
    ax.set(xlabel="token index i (PI: position i * 100 / l)", ylabel="exp(Attn_raw), d → ∞",
           title="Fig. A: tail sensitivity falls with length under PI")
    ax.legend(fontsize=7)
    return _save(fig, out, "figA_pi_tail_sensitivity.png")


def fig_skew(out, skew, title, name, l_train=20) -> str:
    """Figs. B and 4: f_skew on [0, 1], and the warped training positions l f(j / l)."""
    fig, (a0, a1) = _figure(ncols=2, size=(5.0, 4.0))
    t = np.linspace(0, 1, 401)
    f = I.get_skew(skew)
    a0.plot(t, f(t), lw=2, label=title)
    a0.plot(t, t, color="gray", ls="--", lw=1, label="identity (no warping)")
    a0.set(xlabel="t", ylabel="f_skew(t)", title=title)
    a0.legend(fontsize=8)
    j = np.arange(l_train)
    a1.plot(j, I.tail_warp(j, l_train, skew), "o", ms=4, label=f"l f(j / l), l = {l_train}")
    a1.plot(j, j, ".", color="gray", label="j (no warping)")
    a1.set(xlabel="training index j", ylabel="warped position (eq. 8)",
           title="denser position indices towards the tail")
    a1.legend(fontsize=8)
    return _save(fig, out, name)


def fig_tails(out, base, exponentiate) -> str:
    """Not in the paper: the per-index sensitivities summed by eq. 9 in each Table 2 setting."""
    fig, axes = _figure(ncols=4, size=(4.0, 3.6))
    k = 0
    for ltr, c in I.TABLE2_C.items():
        for ratio in I.TABLE2_RATIOS:
            ax, lte, i = axes[k], ltr * ratio, np.arange(c)
            te = I.sensitivity(lambda j: I.interpolate(j, ltr, lte), lte - i, base=base,
                               exponentiate=exponentiate)
            ax.plot(i, te, color="black", lw=2, label=f"test {lte} with PI")
            for skew in I.SKEWS:
                tr = I.sensitivity(lambda j: I.tail_warp(j, ltr, skew), ltr - i, base=base,
                                   exponentiate=exponentiate)
                ax.plot(i, tr, lw=1.2, label=f"train {ltr} {I.SKEW_LABELS[skew]}")
            ax.set(xlabel="i (index L - i from the end)", title=f"train {ltr}, test {ratio}x")
            ax.legend(fontsize=6)
            k += 1
    axes[0].set_ylabel("attention sensitivity (eq. 6)")
    return _save(fig, out, "extra_table2_sensitivity_tails.png")


def write_figures(out, *, fig1_d, alibi_slope, base, exponentiate) -> list[str]:
    return [fig1(out, fig1_d, base), fig2(out, alibi_slope, base), figA(out, base),
            fig_skew(out, "sqrt", "Fig. B: f_skew = sqrt", "figB_sqrt_skew.png"),
            fig_skew(out, "beta", "Fig. 4: f_skew = CDF of Beta(2, 5)", "fig4_beta25_cdf_skew.png"),
            fig_tails(out, base, exponentiate)]


__all__ = ["add_arguments", "run", "table2_markdown", "write_table2", "write_figures", "ALTERNATIVES"]
