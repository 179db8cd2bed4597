"""Accuracy-vs-length plots of length sweeps, with the training range shaded.

Reads rows (from :func:`lengen.eval.length_sweep.evaluate_lengths`, ``lengen eval`` or a sweep's
``results.csv``), never trains. One curve per group of ``by`` columns (default: per run); where a
group has several rows at one length (seeds pooled by ``by=("pe",)``, say) the curve is their mean
and a band spans their min..max. The shaded span is the training range, as in the index-warping
paper's Fig. 5 ("the shaded areas denote the lengths seen during training").

    rows = evaluate_lengths(model, task, range(2, 41), n_sequences=200, batch_size=100,
                            meta={"run": "rope"})
    plot_length_curves(rows, "copy.png", metric="seq_acc", train_range=task.train_lengths())
    plot_task_sweep(rows, task, "copy.png")            # the same, metric and range from the task
"""
from __future__ import annotations

from typing import Iterable, Sequence

from lengen.analysis.tables import as_columns, metric_rows
from lengen.errors import ConfigError
from lengen.eval.length_sweep import add_lengths, score_metric
from lengen.fileio import savefig_atomic
from lengen.tasks.splits import is_length_split


def curve_points(rows: Iterable[dict], *, metric: str, by: Sequence[str] = ("run",)) -> dict:
    """``{group key: (lengths, mean, lo, hi)}`` of ``metric`` (fractions), lengths ascending;
    lo/hi are the min/max over the group's rows at each length."""
    by = as_columns(by)
    per: dict[tuple, dict[int, list[float]]] = {}
    for r in add_lengths(metric_rows(rows, metric, by)):
        per.setdefault(tuple(r.get(c) for c in by), {}).setdefault(r["n"], []).append(
            float(r["value"]))
    out = {}
    for key, d in per.items():
        ns = sorted(d)
        out[key] = (ns, [sum(d[n]) / len(d[n]) for n in ns], [min(d[n]) for n in ns],
                    [max(d[n]) for n in ns])
    return out


def length_curve_figure(rows: Iterable[dict], *, metric: str = "seq_acc",
                        by: Sequence[str] = ("run",), train_range: tuple[int, int] | None = None,
                        title: str | None = None, labels: dict | None = None, ax=None):
    """A Matplotlib figure: ``metric`` (%) vs test length K per group; the training range
    ``(lo, hi)`` (inclusive) shaded grey. ``labels`` maps a group key (tuple) to a legend label.
    Returns the figure (the caller saves or closes it)."""
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only

    points = curve_points(rows, metric=metric, by=by)
    if not points:
        raise ConfigError(f"no '{metric}' rows of a finished run with a len=K split to plot")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
    else:
        fig = ax.figure
    if train_range is not None:
        lo, hi = train_range
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.88", lw=0, zorder=0,
                   label=f"training lengths {lo}..{hi}")
    for key, (ns, mean, low, high) in points.items():
        label = (labels or {}).get(key, " ".join(str(k) for k in key))
        line, = ax.plot(ns, [100 * v for v in mean], "o-", ms=2.5, lw=1.4, label=label)
        if low != high:
            ax.fill_between(ns, [100 * v for v in low], [100 * v for v in high],
                            color=line.get_color(), alpha=0.15, lw=0)
    every = [n for ns, *_ in points.values() for n in ns]
    ax.set(xlabel="test length K", ylabel=f"{metric} (%)", ylim=(-1, 101),
           xlim=(min(every) - 0.5, max(every) + 0.5), title=title or "")
    from matplotlib.ticker import MaxNLocator  # slow import: drawing only

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))      # lengths are whole numbers
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def plot_length_curves(rows: Iterable[dict], path: str, **kwargs) -> str:
    """Save :func:`length_curve_figure` (same keywords) as a PNG at ``path``; returns ``path``."""
    import matplotlib.pyplot as plt  # slow import: drawing only

    fig = length_curve_figure(rows, **kwargs)
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)
    return path


def plot_task_sweep(rows: Iterable[dict], task, path: str, *, by: Sequence[str] = ("run",),
                    title: str | None = None) -> str | None:
    """:func:`plot_length_curves` with the task's metric and training range. Returns None (and
    writes nothing) unless the rows hold at least two ``len=K`` lengths."""
    rows = [r for r in rows if is_length_split(r.get("split"))]
    if len({r["split"] for r in rows}) < 2:
        return None
    train = task.train_lengths() if hasattr(task, "train_lengths") else None
    return plot_length_curves(rows, path, metric=score_metric(task), by=by, train_range=train,
                              title=title or f"{task.name}: accuracy vs length")


__all__ = ["curve_points", "length_curve_figure", "plot_length_curves", "plot_task_sweep"]
