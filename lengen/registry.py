"""Registry lookups with errors that list the valid names."""
from __future__ import annotations

import difflib


class UnknownNameError(ValueError):
    """A registry name that does not exist; the message lists the valid ones."""


def lookup(registry: dict, name: str, kind: str):
    """Return ``registry[name]`` or raise a ValueError naming the valid choices."""
    if name in registry:
        return registry[name]
    valid = ", ".join(sorted(registry))
    close = difflib.get_close_matches(str(name), list(registry), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise UnknownNameError(f"unknown {kind} '{name}'. Valid {kind}s: {valid}.{hint}")
