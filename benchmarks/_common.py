"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""
from __future__ import annotations

import subprocess


def lengen_revision() -> str:
    """Short commit of the lengen checkout (+ '-dirty' when lengen/ has uncommitted changes)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lengen"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
