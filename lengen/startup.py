"""Ctrl-C while lengen starts: one line, not Python's traceback from inside ``import torch``.

``import lengen`` spends its first second importing torch; a Ctrl-C there used to print a
traceback from deep inside torch. When the process is the ``lengen`` command (the console script,
``python -m lengen``), :func:`ctrl_c_at_startup` turns it into ``lengen: interrupted while
starting up`` and exit status 130, as a Ctrl-C later does. In a library user's process (a
notebook, a script) the KeyboardInterrupt is left alone: it is theirs to handle.

Imports nothing heavy: it runs before torch is imported.
"""
from __future__ import annotations

import contextlib
import os
import sys


def is_command() -> bool:
    """Whether this process is the ``lengen`` command (console script or ``python -m lengen``;
    while ``-m`` imports the package, ``sys.argv[0]`` is ``-m``)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return (argv0 == "-m" or os.path.basename(argv0) in ("lengen", "lengen.exe")
            or argv0.endswith(os.path.join("lengen", "__main__.py")))


@contextlib.contextmanager
def ctrl_c_at_startup():
    """Around start-up imports: a KeyboardInterrupt in the ``lengen`` command exits with one
    line and status 130 (see the module docstring)."""
    try:
        yield
    except KeyboardInterrupt:
        if not is_command():
            raise
        print("lengen: interrupted while starting up; nothing was run", file=sys.stderr)
        raise SystemExit(130) from None


__all__ = ["ctrl_c_at_startup", "is_command"]
