"""Command-line arguments every sweep recipe shares (``lengen reproduce <recipe> --help``)."""
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


def exit_code(result: dict) -> int:
    """1 when some run of the sweep failed (the rest finished and were tabulated), else 0."""
    return 1 if result["sweep"].failures else 0


__all__ = ["add_sweep_arguments", "exit_code"]
