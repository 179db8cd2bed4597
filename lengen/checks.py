"""Declarative validation: value rules for config fields and for registry classes' arguments.

Config dataclasses declare each field once, with its default, its rule and its one-line doc
(:func:`option`: ``steps: int = option(1000, Int(min=1), "optimizer steps")``, the torchtitan
way); :func:`rules_of` reads the rule table back (``lengen.config.TRAIN_RULES``,
``lengen.model.config.MODEL_RULES``) and :func:`check_fields` applies it. A rule both checks and coerces (YAML
reads ``3e-3`` as a string, a float given for an integer field must be integral), and its error
names the key, the valid range and an example fix.

The keyword arguments of registry classes are checked by :func:`lengen.registry.check_kwargs`
with these rules, read from the constructor signatures.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re

import torch

from lengen.errors import ConfigError


def did_you_mean(word, options) -> str:
    """`` Did you mean 'x'?`` for the closest option, or ''."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _example(value) -> str:
    """A value as it would be written in an override (YAML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_example(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_example(v)}" for k, v in value.items()) + "}"
    return str(value)


class Rule:
    """The valid values of one setting. ``check(value, key)`` returns the value (coerced to the
    right type) or raises :class:`ConfigError` naming ``key``."""

    def __init__(self, *, optional: bool = False):
        self.optional = optional

    def check(self, value, key: str, example=None):
        if value is None:
            if self.optional:
                return None
            self.fail(value, key, example)
        return self._check(value, key, example)

    def _check(self, value, key, example):
        return value

    def describe(self) -> str:
        raise NotImplementedError

    def fail(self, value, key, example=None, why: str = "", suggest: str = ""):
        what = self.describe() + (" (or null)" if self.optional else "")
        hint = f" (e.g. {key}={_example(example)})" if example is not None else ""
        raise ConfigError(f"{key} must be {what}, got {_show(value)}{why}.{suggest} Set {key} in "
                          f"the config file or with an override{hint}.")


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _bounds(lo, hi, lo_open, hi_open) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {_num(hi)}"
    return ""


class Number(Rule):
    """Shared range logic of :class:`Int` and :class:`Float`."""

    def __init__(self, min=None, max=None, *, gt=None, lt=None, optional=False):
        super().__init__(optional=optional)
        self.lo, self.lo_open = (gt, True) if gt is not None else (min, False)
        self.hi, self.hi_open = (lt, True) if lt is not None else (max, False)

    def in_range(self, x) -> bool:
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        if self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi):
            return False
        return True

    def range_text(self) -> str:
        return _bounds(self.lo, self.hi, self.lo_open, self.hi_open)


class Int(Number):
    def describe(self):
        return "an integer" + self.range_text()

    def _check(self, value, key, example):
        if isinstance(value, bool):
            self.fail(value, key, example)
        if isinstance(value, int):
            n = value
        else:
            try:
                f = float(value) if isinstance(value, (float, str)) else None
            except ValueError:
                f = None
            if f is None or not math.isfinite(f) or not f.is_integer():
                self.fail(value, key, example)
            n = int(f)
        if not self.in_range(n):
            self.fail(value, key, example)
        return n


class Float(Number):
    """A finite real number (NaN and infinities are never a meaningful setting)."""

    def describe(self):
        return "a finite number" + self.range_text()

    def _check(self, value, key, example):
        if isinstance(value, bool):
            self.fail(value, key, example)
        try:
            x = float(value) if isinstance(value, (int, float, str)) else None
        except ValueError:
            x = None
        if x is None or not math.isfinite(x) or not self.in_range(x):
            self.fail(value, key, example)
        return x


class Bool(Rule):
    def describe(self):
        return "true or false"

    def _check(self, value, key, example):
        if not isinstance(value, bool):
            self.fail(value, key, example)
        return value


class Str(Rule):
    def __init__(self, pattern: str | None = None, what: str = "a string", *, optional=False):
        super().__init__(optional=optional)
        self.pattern, self.what = (re.compile(pattern) if pattern else None), what

    def describe(self):
        return self.what

    def _check(self, value, key, example):
        if not isinstance(value, str) or (self.pattern and not self.pattern.fullmatch(value)):
            self.fail(value, key, example)
        return value


class Choice(Rule):
    def __init__(self, *values, optional=False):
        super().__init__(optional=optional)
        self.values = values

    def describe(self):
        return "one of " + ", ".join(map(str, self.values))

    def _check(self, value, key, example):
        if not isinstance(value, str) or value not in self.values:
            self.fail(value, key, example, suggest=did_you_mean(value, self.values))
        return value


class Seq(Rule):
    """A list of values each checked by ``item``. ``length``: exact length; ``min_len``;
    ``unique``: no repeats; ``scalar_ok``: a bare value stands for a one-element list (so
    ``eval.splits=iid`` means ``[iid]`` and is never split into characters)."""

    def __init__(self, item: Rule, *, length=None, min_len=0, unique=False, scalar_ok=False,
                 as_tuple=False, what=None, optional=False):
        super().__init__(optional=optional)
        self.item, self.length, self.min_len = item, length, min_len
        self.unique, self.scalar_ok, self.as_tuple, self.what = unique, scalar_ok, as_tuple, what

    def describe(self):
        if self.what:
            return self.what
        n = f"{self.length} " if self.length else ("a non-empty " if self.min_len else "a ")
        return f"{'a list of ' + n if self.length else n + 'list of '}{self.item.describe()}s"

    def _check(self, value, key, example):
        if self.scalar_ok and isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            self.fail(value, key, example)
        if (self.length is not None and len(value) != self.length) or len(value) < self.min_len:
            self.fail(value, key, example)
        out = [self.item.check(v, f"{key}[{i}]") for i, v in enumerate(value)]
        if self.unique:
            dup = sorted({str(v) for v in out if out.count(v) > 1})
            if dup:
                self.fail(value, key, example, why=f" ({', '.join(dup)} repeated)")
        return tuple(out) if self.as_tuple else out


class Mapping(Rule):
    """A dict (a ``*_kwargs`` section); an empty YAML section (null) counts as ``{}``."""

    def describe(self):
        return "a mapping of keyword arguments such as {name: value}"

    def check(self, value, key, example=None):
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(value, key, example, why=f" ({type(value).__name__})")
        return value


class AnyOf(Rule):
    """The first of ``rules`` that accepts the value (for annotations such as ``str | tuple``)."""

    def __init__(self, *rules, optional=False):
        super().__init__(optional=optional)
        self.rules = rules

    def describe(self):
        return " or ".join(r.describe() for r in self.rules)

    def _check(self, value, key, example):
        for r in self.rules:
            try:
                return r.check(value, key, example)
            except ConfigError:
                pass
        self.fail(value, key, example)


class IsA(Rule):
    """An instance of ``cls`` (the sections of an experiment config)."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def describe(self):
        return f"a {self.cls.__name__} (a mapping of its keys in a config file)"

    def _check(self, value, key, example):
        if not isinstance(value, self.cls):
            self.fail(value, key)
        return value


DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


class Device(Rule):
    """A torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``); availability is checked
    separately by :func:`check_device_available` where the device is used."""

    def describe(self):
        return "a torch device such as cpu, cuda, cuda:1 or mps"

    def _check(self, value, key, example):
        if not isinstance(value, str):
            self.fail(value, key, example)
        try:
            dev = torch.device(value)
        except (RuntimeError, ValueError, TypeError):
            self.fail(value, key, example)
        if dev.type not in DEVICE_TYPES:
            self.fail(value, key, example)
        return value


def check_device_available(device, key: str = "train.device") -> None:
    """Raise a ConfigError now if ``device`` cannot be used on this machine."""
    Device().check(str(device), key)
    dev = torch.device(device)
    fix = f"use {key}=cpu, or run on a machine with that device"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "torch sees no CUDA GPU")
            raise ConfigError(f"{key}={device} is not available: {why} (torch "
                              f"{torch.__version__}); {fix}.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}={device} is not available: this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s); {fix}.")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}={device} is not available (no Apple MPS backend here); {fix}.")
    elif dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ConfigError(f"{key}={device} is not available (no Intel XPU here); {fix}.")


# ---- config dataclasses ----------------------------------------------------------------------

def option(default, rule: Rule, doc: str, *, factory=None) -> dataclasses.Field:
    """A config dataclass field declared once: its ``default`` (a dict or list default is copied
    for each instance; ``factory`` instead: a callable making it), the :class:`Rule` its values
    must pass, and its ``doc`` (one line, shown wherever the fields are documented)."""
    meta = {"rule": rule, "doc": doc}
    if factory is None and isinstance(default, (dict, list)):
        factory = (lambda d=default: type(d)(d))
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def rules_of(cls) -> dict[str, Rule]:
    """``{field: Rule}`` of a config dataclass whose fields are :func:`option` s."""
    out = {}
    for f in dataclasses.fields(cls):
        if "rule" not in f.metadata:
            raise AssertionError(f"{cls.__name__}.{f.name} has no validation rule (declare it "
                                 f"with lengen.checks.option)")
        out[f.name] = f.metadata["rule"]
    return out


def docs_of(cls) -> dict[str, str]:
    """``{field: one-line doc}`` of a config dataclass whose fields are :func:`option` s."""
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}


def field_default(f: dataclasses.Field):
    """A field's default, as the example in an error message; None for a section (a dataclass
    made by its factory: building one would run its own validation just for an example)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        if dataclasses.is_dataclass(f.default_factory):
            return None
        return f.default_factory()
    return None


def check_fields(obj, rules: dict | None, section: str) -> None:
    """Check (and coerce in place) every field of dataclass ``obj`` against ``rules`` (None: the
    rules its fields declare, :func:`rules_of`)."""
    rules = rules_of(type(obj)) if rules is None else rules
    for f in dataclasses.fields(obj):
        key = f"{section}.{f.name}" if section else f.name
        rule = rules.get(f.name)
        if rule is None:
            raise AssertionError(f"{type(obj).__name__}.{f.name} has no validation rule")
        value = getattr(obj, f.name)
        new = rule.check(value, key, field_default(f))
        if new is not value:
            setattr(obj, f.name, new)


__all__ = ["Rule", "Int", "Float", "Bool", "Str", "Choice", "Seq", "Mapping", "AnyOf", "IsA", "Device",
           "check_fields", "check_device_available", "did_you_mean", "option", "rules_of",
           "docs_of"]
