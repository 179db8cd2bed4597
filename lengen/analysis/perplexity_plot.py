"""Perplexity vs evaluation length (reads rows, never trains).

    from lengen.analysis.perplexity_plot import plot_perplexity
    plot_perplexity(rows, "ppl.png", by=("attention", "pe"), train_length=128,
                    title="kjv (stand-in for WikiText-103), GPT-2 BPE")

Rows are those of :mod:`lengen.eval.perplexity` (metric ``ppl``, column ``length``), from one or
many runs. One line per group of ``by``: the mean over the group's rows at each length (e.g. over
seeds), with a shaded band from the minimum to the maximum when there are several. Log-scaled y
(perplexities blow up by orders of magnitude past the training length), log2-scaled x with the
evaluated lengths as ticks, and a dashed vertical line at the training length. Drawn with
Matplotlib's object API on the Agg canvas, so no global backend is touched.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

from lengen.analysis.tables import as_columns, metric_rows
from lengen.errors import ConfigError
from lengen.fileio import savefig_atomic


def perplexity_curves(rows: Iterable[dict], *, by: Sequence[str] = ("run",), metric: str = "ppl"
                      ) -> dict[tuple, dict[int, list[float]]]:
    """``{group key: {length: [values...]}}`` of ``metric`` (rows of failed runs are skipped)."""
    by = as_columns(by)
    curves: dict[tuple, dict[int, list[float]]] = {}
    for r in metric_rows(rows, metric, by):
        key = tuple(r.get(c) for c in by)
        curves.setdefault(key, {}).setdefault(int(r["length"]), []).append(float(r["value"]))
    return curves


def plot_perplexity(rows: Iterable[dict], out: str | None = None, *, by: Sequence[str] = ("run",),
                    train_length: int | None = None, metric: str = "ppl", title: str | None = None,
                    label=None, figsize=(6.4, 4.2)):
    """Draw the curves; save to ``out`` when given (PNG/PDF/SVG by extension). Returns the
    Matplotlib figure. ``label(key) -> str`` names a group (default: its values joined by ' ')."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only
    from matplotlib.ticker import NullLocator  # slow import: drawing only

    curves = perplexity_curves(rows, by=by, metric=metric)
    if not curves:
        raise ConfigError(f"no '{metric}' rows of a finished run to plot (rows need metric, "
                          f"value and length)")
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    lengths = sorted({k for c in curves.values() for k in c})
    for key, per_len in curves.items():
        xs = sorted(per_len)
        mean = [sum(per_len[x]) / len(per_len[x]) for x in xs]
        name = label(key) if label else " ".join(str(k) for k in key)
        (line,) = ax.plot(xs, mean, marker="o", markersize=3, label=name)
        if any(len(per_len[x]) > 1 for x in xs):
            ax.fill_between(xs, [min(per_len[x]) for x in xs], [max(per_len[x]) for x in xs],
                            color=line.get_color(), alpha=0.15, linewidth=0)
    if all(v > 0 for c in curves.values() for vs in c.values() for v in vs):
        ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(k) for k in lengths], rotation=45 if len(lengths) > 6 else 0)
    ax.xaxis.set_minor_locator(NullLocator())      # only the evaluated lengths on x
    if train_length is not None:
        ax.axvline(train_length, color="0.3", linestyle="--", linewidth=1)
        ax.annotate("training length", (train_length, 1), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", fontsize=8, color="0.3")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity" if metric == "ppl" else metric)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    if out:             # atomically: a reader never sees half a PNG
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        savefig_atomic(fig, out, dpi=150)
    return fig


__all__ = ["plot_perplexity", "perplexity_curves"]
