"""Tables from evaluation rows (reads results, never trains).

Rows are the long-format dicts written by ``lengen.train`` / ``lengen.sweep`` (one per run x
split x metric). :func:`summarize` aggregates over seeds; :func:`markdown_table` renders any grid
of strings; :func:`pivot_cells` lays a summary out as ``rows x columns`` of formatted cells.

    df = summarize(rows, by=("model", "split"), metric="seq_acc", scale=100)
    #   model split  mean  std  max  min  n  values
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence


def summarize(rows: Iterable[dict], by: Sequence[str] = ("run", "split"), *, metric: str = "seq_acc",
              scale: float = 1.0, seed_col: str = "seed"):
    """Mean, sample std (ddof=1; NaN for one seed), max and min of ``metric`` over seeds.

    Rows of other metrics and rows whose ``status`` is not ``ok`` (failed runs) are left out.
    Returns a DataFrame with the ``by`` columns plus ``mean std max min n seeds``, in the
    order groups first appear in ``rows``."""
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r.get("metric") == metric
                       and r.get("status", "ok") == "ok" and r.get("value") is not None])
    cols = list(by) + ["mean", "std", "max", "min", "n", "seeds"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise ValueError(f"rows have no column(s) {missing}; available: {sorted(df.columns)}")
    df = df.assign(value=df["value"].astype(float) * scale)
    out = []
    for key, g in df.groupby(list(by), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = g["value"]
        out.append(dict(zip(by, key), mean=vals.mean(), std=vals.std(ddof=1) if len(vals) > 1 else math.nan,
                        max=vals.max(), min=vals.min(), n=len(vals),
                        seeds=sorted(g[seed_col].tolist()) if seed_col in g else None))
    return pd.DataFrame(out, columns=cols)


def fmt_mean_std(mean: float | None, std: float | None = None, digits: int = 2) -> str:
    """``97.12 ± 1.30``; ``97.12`` when std is NaN/None (one seed); ``-`` when mean is missing."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def pivot_cells(summary, index: str, columns: str, *, index_order=None, column_order=None,
                fmt=None) -> list[list[str]]:
    """Summary DataFrame -> grid of formatted cells (first row = header, first column = index).

    ``fmt(record) -> str`` formats one summary record (default :func:`fmt_mean_std`); a missing
    combination is ``-``."""
    fmt = fmt or (lambda r: fmt_mean_std(r["mean"], r["std"]))
    recs = {(r[index], r[columns]): r for r in summary.to_dict("records")}
    index_order = list(index_order or dict.fromkeys(summary[index]))
    column_order = list(column_order or dict.fromkeys(summary[columns]))
    grid = [[index] + [str(c) for c in column_order]]
    for i in index_order:
        grid.append([str(i)] + [fmt(recs[(i, c)]) if (i, c) in recs else "-" for c in column_order])
    return grid


def markdown_table(grid: Sequence[Sequence[str]], align: str | None = None) -> str:
    """Markdown table from a grid of strings (first row is the header). ``align``: one of
    ``l r c`` per column (default: first column left, others right)."""
    if not grid:
        return ""
    ncol = len(grid[0])
    align = align or ("l" + "r" * (ncol - 1))
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    esc = [[str(c).replace("|", "\\|") for c in row] for row in grid]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
    return "\n".join(lines)


def frame_to_markdown(df, floatfmt: str = ".4g") -> str:
    """Any DataFrame -> Markdown (no ``tabulate`` dependency)."""
    grid = [[str(c) for c in df.columns]]
    for rec in df.itertuples(index=False):
        grid.append([format(v, floatfmt) if isinstance(v, float) else str(v) for v in rec])
    return markdown_table(grid)


__all__ = ["summarize", "fmt_mean_std", "pivot_cells", "markdown_table", "frame_to_markdown"]
