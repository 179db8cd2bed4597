"""``lengen bench``'s variants and file arguments checked before any cell runs: a typo is an
error, never a scorecard of ``n/a`` cells and exit status 0.

* :func:`check_variants`: each variant's overrides resolved on the default config, so an unknown
  scheme, a misspelt key or an unknown keyword argument fails at once, naming the variant (an
  empty variant, ``--variant ''``, is refused by :func:`lengen.bench.run.parse_variant` instead
  of silently becoming NoPE).
* :func:`check_some_cell_runs`: after the cells are resolved, a variant that runs on no cell at
  all is an error (an ``n/a`` on some cells is a real answer: a decoder-only attention kind on an
  encoder cell).
* :func:`check_bench_file`: ``--variants FILE`` / ``--baselines CSV`` must be regular files that
  exist (a fifo would block forever; a missing baselines file showed none, silently).
"""
from __future__ import annotations

import os
import re

from lengen.config import resolve
from lengen.errors import ConfigError
from lengen.fileio import check_regular_file
from lengen.registry import UnknownNameError

#: messages of the resolve errors that are typos in the variant itself, whatever the cell
_TYPO = re.compile(r"^unknown (config )?key")


def check_variants(variants) -> None:
    """Raise ConfigError for a variant whose overrides name an unknown scheme / attention kind / sampler, an unknown
    model key or an unknown keyword argument (see the module docstring). ``variants``:
    ``[(label, overrides)]`` as :func:`lengen.bench.run.parse_variant` returns them (which
    refuses an empty variant, ``--variant ''``)."""
    for label, overrides in variants:
        try:
            resolve({}, list(overrides), check_device=False)
        except UnknownNameError as e:
            raise ConfigError(f"variant {label!r}: {e}") from None
        except ConfigError as e:
            if _TYPO.match(str(e)):
                raise ConfigError(f"variant {label!r}: {e}") from None


def check_some_cell_runs(variants, specs, na) -> None:
    """Raise ConfigError naming each variant that resolved on no cell (every cell ``n/a``),
    with the first reason, before anything runs."""
    ran = {s.tags.get("variant") for s in specs}
    dead = [label for label, _ in variants if label not in ran]
    if dead:
        reasons = {r["variant"]: r["reason"] for r in reversed(na)}
        shown = "; ".join(f"{d!r}: {reasons.get(d, 'no cell selected')}" for d in dead)
        raise ConfigError(f"variant(s) that can run on none of the selected cells: {shown}. "
                          f"Fix the overrides (see lengen list) or choose other --cells")


def check_bench_file(path: str | None, flag: str) -> None:
    """``path`` (``--variants`` / ``--baselines``) must be an existing regular file (for
    ``--baselines`` also a card folder holding one: its ``runs.csv``)."""
    if path is None:
        return
    if flag == "--baselines" and os.path.isdir(path):      # a card folder: its runs.csv
        path = os.path.join(path, "runs.csv")
    check_regular_file(path, f"{flag}")
    if not os.path.isfile(path):
        raise ConfigError(f"{flag} {path} does not exist (or is not a file); give a path to a "
                          f"file" + (" (a runs.csv, or a card folder holding one), or --baselines none for no baselines"
                                     if flag == "--baselines" else ""))


__all__ = ["check_variants", "check_some_cell_runs", "check_bench_file"]
