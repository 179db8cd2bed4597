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

from lengen.errors import ArgumentError, ConfigError


def summarize(rows: Iterable[dict], by: Sequence[str] = ("run", "split"), *, metric: str = "seq_acc",
              scale: float = 1.0, seed_col: str = "seed"):
    """Mean, sample std (ddof=1; NaN for one seed), max and min of ``metric`` over seeds.

    Rows of other metrics and rows whose ``status`` is not ``ok`` (failed runs) are left out.
    Returns a DataFrame with the ``by`` columns plus ``mean std max min n seeds``, in the
    order groups first appear in ``rows``; an empty one only when no row is of a finished run.
    A ``metric`` no finished row has, or a ``by`` column no row of it has, is a ConfigError
    listing what the rows do have (never an empty table that looks like a result)."""
    import pandas as pd  # slow import: tables only

    by = as_columns(by)
    if (isinstance(scale, bool) or not isinstance(scale, (int, float))
            or not math.isfinite(scale)):
        raise ConfigError(f"scale must be a finite number (e.g. 100 for percent), got {scale!r}")
    cols = list(by) + ["mean", "std", "max", "min", "n", "seeds"]
    picked = metric_rows(rows, metric, by)
    if not picked:
        return pd.DataFrame(columns=cols)       # no finished run (none given, or all failed)
    df = pd.DataFrame(picked)
    df = df.assign(value=df["value"].astype(float) * scale)
    out = []
    for key, g in df.groupby(list(by), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = g["value"]
        out.append(dict(zip(by, key), mean=vals.mean(), std=vals.std(ddof=1) if len(vals) > 1 else math.nan,
                        max=vals.max(), min=vals.min(), n=len(vals),
                        seeds=sorted(g[seed_col].tolist()) if seed_col in g else None))
    return pd.DataFrame(out, columns=cols)


def as_columns(by) -> tuple:
    """``by`` as a tuple of column names (a bare string is one column)."""
    if isinstance(by, str):
        return (by,)
    if (isinstance(by, (bytes, dict)) or not isinstance(by, Sequence)
            or not all(isinstance(c, str) for c in by)):
        raise ArgumentError(f"by must be a list of column names such as ('model', 'split'), got "
                            f"{by!r}")
    return tuple(by)


def metric_rows(rows, metric: str, by=()) -> list[dict]:
    """The rows of finished runs (``status`` ok, a value) of ``metric``: [] when no row is of
    a finished run; a ConfigError when there are some but none of ``metric`` (listing the
    metrics there are), or when a ``by`` column is on none of them (listing their columns), so
    a typo never yields an empty table or one merged group."""
    rows = _row_list(rows)
    by = as_columns(by)
    if not isinstance(metric, str):
        raise ArgumentError(f"metric must be a metric name such as 'seq_acc', got {metric!r}")
    done = [r for r in rows if r.get("status", "ok") == "ok" and r.get("value") is not None]
    if not done:
        return []
    present = sorted({str(r.get("metric")) for r in done})
    if metric not in present:
        raise ConfigError(f"no rows of metric {metric!r}; the rows' metrics are "
                          f"{', '.join(present)}. Pass one of them as metric=")
    picked = [r for r in done if r.get("metric") == metric]
    have = list(dict.fromkeys(k for r in picked for k in r))
    missing = [c for c in by if c not in have]
    if missing:
        raise ConfigError(f"the {metric} rows have no column(s) {', '.join(map(repr, missing))}; "
                          f"their columns are {', '.join(map(str, have))}. Pass some of those "
                          f"as by=")
    return picked


def _row_list(rows) -> list[dict]:
    """Evaluation rows as a list of dicts, or an ArgumentError saying what rows are."""
    if isinstance(rows, (str, bytes, dict)) or not isinstance(rows, Iterable):
        raise ArgumentError(f"rows must be a list of row dicts (as in eval.json or a sweep's "
                            f"results.json), got {type(rows).__name__}")
    rows = list(rows)
    bad = next((r for r in rows if not isinstance(r, dict)), None)
    if bad is not None:
        raise ArgumentError(f"rows must be dicts (one per run x split x metric), got an item of "
                            f"type {type(bad).__name__}: {bad!r:.80}")
    return rows


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
    missing = [c for c in (index, columns) if c not in getattr(summary, "columns", ())]
    if missing:
        raise ConfigError(f"the summary has no column(s) {', '.join(map(repr, missing))}; its "
                          f"columns are {', '.join(map(str, getattr(summary, 'columns', [])))}. "
                          f"Use the by= columns given to summarize as index= and columns=")
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


__all__ = ["summarize", "metric_rows", "as_columns", "fmt_mean_std", "pivot_cells", "markdown_table", "frame_to_markdown"]
