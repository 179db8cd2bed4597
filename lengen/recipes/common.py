"""What every sweep recipe shares: command-line arguments (``lengen reproduce <recipe> --help``),
the choice of a training device, the check of selected names."""
from __future__ import annotations

from lengen.cliutil import int_at_least


def add_sweep_arguments(p, name: str, *, scale_help: str, seeds_help: str) -> None:
    """--scale, --out, --workers, --seeds, --backend, --threads, --device, --estimate."""
    p.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu",
                   help="sizes and steps (the protocol is unchanged): " + scale_help)
    p.add_argument("--out", metavar="DIR", default=None,
                   help=f"output folder (default runs/{name}-<scale>)")
    p.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1: one run after another)")
    p.add_argument("--seeds", type=int_at_least(0), nargs="+", default=None, metavar="S",
                   help=seeds_help)
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local processes (default) or Ray tasks (needs: pip install ray)")
    p.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per worker (default: cores // workers when workers > 1)")
    p.add_argument("--device", default=None,
                   help="torch device for training (default: cuda at paper scale if present, "
                        "else cpu)")
    p.add_argument("--estimate", action="store_true",
                   help="time a few training steps (and an evaluation batch) per run on this "
                        "machine and print the estimated total wall time instead of running")


def default_device(scale: str) -> str:
    """cuda at the paper scale when a GPU is present, else cpu (cpu and smoke scales are sized
    for a CPU)."""
    import torch

    return "cuda" if scale == "paper" and torch.cuda.is_available() else "cpu"


def select(given, valid, default, what: str) -> list:
    """``given`` (or ``default`` when None / empty) as a list, every name checked against
    ``valid``; ValueError ``unknown <what>(s) [...]. Valid: ...`` otherwise."""
    chosen = list(given or default)
    bad = [x for x in chosen if x not in valid]
    if bad:
        raise ValueError(f"unknown {what}(s) {bad}. Valid: {', '.join(valid)}")
    return chosen


def write_csv(path: str, records: list[dict]) -> None:
    """``records`` (dicts; columns in order of first appearance) as CSV, written atomically."""
    from lengen.eval.evaluate import rows_to_csv, write_text_atomic

    write_text_atomic(rows_to_csv(records), path)


def write_md(path: str, title: str, caption: str, grid, note: str = "", *,
             label_columns: int = 1) -> None:
    """A report table: bold title, caption, the Markdown table of ``grid`` (header row first;
    the first ``label_columns`` columns left-aligned, the rest right-aligned) and an optional
    note, written atomically."""
    from lengen.analysis.tables import markdown_table
    from lengen.eval.evaluate import write_text_atomic

    align = "l" * label_columns + "r" * (len(grid[0]) - label_columns)
    text = f"**{title}**\n\n{caption}\n\n{markdown_table(grid, align=align)}\n"
    write_text_atomic(text + (f"\n{note}\n" if note else ""), path)


def exit_code(result: dict) -> int:
    """1 when some run of the sweep failed (the rest finished and were tabulated), else 0."""
    return 1 if result["sweep"].failures else 0


__all__ = ["add_sweep_arguments", "default_device", "exit_code", "select", "write_csv", "write_md"]
