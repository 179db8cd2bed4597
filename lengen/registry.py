"""Registry lookups with errors that list the valid names, and one-line descriptions of entries."""
from __future__ import annotations

import re
import sys

from lengen.checks import did_you_mean
from lengen.errors import ConfigError


class UnknownNameError(ConfigError):
    """A registry name that does not exist; the message lists the valid ones."""


def lookup(registry: dict, name: str, kind: str, key: str | None = None):
    """Return ``registry[name]`` or raise a ConfigError naming the valid choices (and the config
    ``key`` that holds the name, when given)."""
    try:
        if name in registry:
            return registry[name]
    except TypeError:                     # an unhashable name (a list or mapping from YAML)
        pass
    valid = ", ".join(sorted(registry))
    where = f" ({key})" if key else ""
    raise UnknownNameError(f"unknown {kind} '{name}'{where}. Valid {kind}s: {valid}."
                           f"{did_you_mean(name, registry)}")


def _first_sentence(text: str) -> str:
    para = " ".join((text or "").strip().split("\n\n")[0].split())
    para = re.sub(r":\w+:`~?([^`]+)`", r"\1", para).replace("``", "")
    # the first sentence: a full stop followed by a capital, not after "et al." / "e.g." / "i.e."
    m = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)[.!?](?=\s+[A-Z])", para)
    return para[:m.start() + 1] if m else para


def describe(obj, registry: dict | None = None, width: int = 100) -> str:
    """One line describing a registry entry: the first sentence of its own docstring; for a class
    without one, its module's docstring when that module defines no other entry of ``registry``
    (one class per file), else ''."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not doc:
        siblings = [o for o in (registry or {}).values() if getattr(o, "__module__", None)
                    == obj.__module__]
        if len(siblings) <= 1:
            doc = sys.modules[obj.__module__].__doc__
    line = _first_sentence(doc or "")
    return line if len(line) <= width else line[:width - 3].rstrip() + "..."
