"""Grids of named run configurations.

A :class:`Grid` is a base config plus *axes*; its runs are the Cartesian product of the axes'
values, each a :class:`RunSpec` (a unique name, the full config dict, and the axis labels as
tags that end up as columns of the result table)::

    grid = Grid({"task": {"kwargs": {"n_pairs": 64}}, "train": {"steps": 600}},
                axes={
                    "scheme": {"nope": {"model.posenc": "nope"},            # label -> patch
                               "tra": {"model.attention": "tra"}},
                    "train.seed": [0, 1, 2],                                 # dotted key -> values
                    "train.lr": [1e-3, 3e-3],
                },
                name="{scheme}-s{seed}-lr{lr}")
    len(grid)            # 12
    [s.name for s in grid][:2]   # ['nope-s0-lr0.001', 'nope-s0-lr0.003']

An axis given as a list sets the dotted config key it is named after; its tag is the key's last
component (``train.seed`` -> ``seed``). An axis given as a mapping is ``label -> patch``, where a
patch is a dict of dotted keys (``{"model.posenc": "rope"}``) and/or nested sections
(``{"model": {"posenc": "rope"}}``); its tag is the axis name. The run's ``name`` (also its
run-directory name and the ``run`` column of its rows) comes from the ``name`` template, formatted
with the tags, or by default ``tag=label`` pairs joined with ``-``. ``exclude`` drops
combinations (a function of the tags dict).

Explicit lists of named configs work too: :func:`as_specs` accepts a Grid, a ``{name: config}``
mapping or an iterable of RunSpec.
"""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from lengen.errors import ArgumentError, ConfigError

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._=+,@-]+$")


def check_run_name(name, what: str = "run name", fix: str = "choose a plain name such as "
                   "rope-s0") -> str:
    """``name`` as a run-directory name: one path component of safe characters, not ``.`` or
    ``..`` (which would put the run into ``out_dir`` itself or its parent), not empty. -> it."""
    if not isinstance(name, str) or not name or name in (".", "..") \
            or not _SAFE_NAME.match(name):
        why = ("is not a string" if not isinstance(name, str) else "is empty" if not name else
               "names the sweep folder itself or its parent, not a folder inside it"
               if name in (".", "..") else "is not a single safe folder name (letters, digits "
               "and . _ = + , @ -; no / or spaces)")
        raise ConfigError(f"{what} {name!r} {why}: each run is written to out_dir/<run name>/, "
                          f"so the name must be one folder inside out_dir; {fix}")
    return name


@dataclass
class RunSpec:
    """One run of a sweep: ``name`` is unique within the sweep and names its run directory."""
    name: str
    config: dict
    tags: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "config": self.config, "tags": self.tags}


def set_dotted(d: dict, dotted: str, value) -> None:
    """``set_dotted(d, "model.attention_kwargs.qk_norm", False)`` (creates missing sections)."""
    keys = dotted.split(".")
    node = d
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set '{dotted}': '{key}' is not a section")
    node[keys[-1]] = copy.deepcopy(value)


def apply_patch(config: dict, patch: dict) -> dict:
    """Deep copy of ``config`` with ``patch`` applied (dotted keys or nested sections; ``*kwargs``
    dicts are replaced wholesale, as in :func:`lengen.config.resolve`)."""
    out = copy.deepcopy(config)
    for k, v in patch.items():
        if "." in k:
            set_dotted(out, k, v)
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and not k.endswith("kwargs"):
            out[k] = apply_patch(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _label(value) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


class Grid:
    """Cartesian product of named axes over a base config (see the module docstring)."""

    def __init__(self, base: dict | None = None, axes: dict | None = None, *,
                 name: str | Callable[[dict], str] | None = None,
                 exclude: Callable[[dict], bool] | None = None):
        if base is not None and not isinstance(base, dict):
            raise ArgumentError(f"Grid base must be a config dict (sections model, task, train, "
                                f"eval), got {type(base).__name__}")
        if axes is not None and not isinstance(axes, dict):
            raise ArgumentError(f"Grid axes must be a dict axis -> list of values or label -> "
                                f"patch, got {type(axes).__name__}")
        if not (name is None or isinstance(name, str) or callable(name)):
            raise ArgumentError(f"Grid name must be a template string such as '{{scheme}}-s{{seed}}' "
                                f"or a function of the tags, got {type(name).__name__}")
        if exclude is not None and not callable(exclude):
            raise ArgumentError(f"Grid exclude must be a function of the tags dict, got "
                                f"{type(exclude).__name__}")
        self.base = copy.deepcopy(base or {})
        self.axes: list[tuple[str, list[tuple[object, dict]]]] = []
        for axis, values in (axes or {}).items():
            self.axes.append(self._normalise_axis(axis, values))
        tags = [t for t, _ in self.axes]
        if len(set(tags)) != len(tags):
            raise ConfigError(f"grid axes have duplicate tag names: {tags}")
        self.name, self.exclude = name, exclude

    @staticmethod
    def _normalise_axis(axis: str, values) -> tuple[str, list]:
        if isinstance(values, dict):
            if not values:
                raise ConfigError(f"grid axis '{axis}' is empty")
            for label, patch in values.items():
                if not isinstance(patch, dict):
                    raise ConfigError(f"grid axis '{axis}': the patch for '{label}' must be a dict "
                                     f"of config keys, got {patch!r}")
            return axis, [(label, dict(patch)) for label, patch in values.items()]
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise ConfigError(f"grid axis '{axis}' must be a list of values or a mapping "
                             f"label -> patch, got {values!r}")
        values = list(values)
        if not values:
            raise ConfigError(f"grid axis '{axis}' is empty")
        return axis.split(".")[-1], [(v, {axis: v}) for v in values]

    def _name(self, tags: dict) -> str:
        if callable(self.name):
            name = self.name(tags)
        elif self.name:
            try:
                name = self.name.format(**{k: _label(v) for k, v in tags.items()})
            except (KeyError, IndexError, ValueError) as e:
                raise ConfigError(f"Grid name template {self.name!r} cannot be filled ({type(e).__name__}: "
                                  f"{e}); it may use the tags {', '.join(map(repr, tags)) or '(none)'} "
                                  f"as {{tag}}") from None
        else:
            name = "-".join(f"{k}={_label(v)}" for k, v in tags.items()) or "run"
        return check_run_name(name, "run name", f"pass Grid(name=...) with a simpler template "
                                                f"(tags {tags})")

    def __iter__(self) -> Iterator[RunSpec]:
        tag_names = [t for t, _ in self.axes]
        seen = {}
        for combo in itertools.product(*(vals for _, vals in self.axes)):
            tags = {t: label for t, (label, _) in zip(tag_names, combo)}
            if self.exclude and self.exclude(tags):
                continue
            config = self.base
            for _, patch in combo:
                config = apply_patch(config, patch)
            name = self._name(tags)
            if name in seen:
                raise ConfigError(f"two grid points share the run name '{name}' ({seen[name]} and "
                                 f"{tags}); make the name template include every axis")
            seen[name] = tags
            yield RunSpec(name, apply_patch(config, {"name": name}), tags)

    def specs(self) -> list[RunSpec]:
        return [s for s in self.__iter__()]

    def __len__(self) -> int:
        return len(self.specs())

    def __repr__(self) -> str:
        axes = ", ".join(f"{t}[{len(v)}]" for t, v in self.axes)
        return f"Grid({axes}; {len(self)} runs)"


def as_specs(runs) -> list[RunSpec]:
    """A Grid, ``{name: config}`` mapping, or iterable of RunSpec -> list of RunSpec (names unique)."""
    if isinstance(runs, Grid):
        specs = runs.specs()
    elif isinstance(runs, dict):
        for n, c in runs.items():
            if not isinstance(n, str) or not isinstance(c, dict):
                raise ArgumentError(f"a {{name: config}} sweep maps run names (str) to config "
                                    f"dicts; got {n!r}: {type(c).__name__}")
        specs = [RunSpec(n, apply_patch(c, {"name": n})) for n, c in runs.items()]
    elif isinstance(runs, (str, bytes)) or not isinstance(runs, Iterable):
        raise ArgumentError(f"a sweep's runs must be a Grid, a {{name: config}} dict or a list of "
                            f"RunSpec, got {type(runs).__name__}")
    else:
        specs = list(runs)
        for s in specs:
            if not isinstance(s, RunSpec):
                raise ArgumentError(f"a sweep's runs must be a Grid, a {{name: config}} dict or "
                                    f"RunSpec items, got an item of type {type(s).__name__}")
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"duplicate run names in sweep: {', '.join(dup)}")
    for s in specs:
        check_run_name(s.name)
    return specs


def failure_result(spec: RunSpec, error: str, tb: str | None = None) -> dict:
    """A result record for a run whose worker died or whose remote task raised."""
    return {"name": spec.name, "tags": spec.tags, "rows": [], "seconds": 0.0, "pid": None,
            "status": "failed", "error": error, "traceback": tb}


__all__ = ["check_run_name", "failure_result", "Grid", "RunSpec", "apply_patch", "as_specs", "set_dotted"]
