"""Registries: lookups with errors that list the valid names, validation of an entry's keyword
arguments, and one-line descriptions of entries (``lengen list``).

Registry classes (positional schemes, attention kinds, samplers, tasks) need no schema:
:func:`check_kwargs` reads the constructor signature, following ``**kw`` up the class chain (a
subclass that forwards ``**kw`` to its base accepts the base's keywords too), so a class added
later is validated with no code of its own. Simple annotations (``int``, ``float | None``,
``bool``, ``str``, ``dict``, ``tuple``) are checked and coerced; float values must be finite. An
argument named ``seed`` or ``*_seed`` must be an integer >= 0. A
class may declare ranges on top in a ``KWARG_RULES = {"name": Rule}`` class attribute (merged
along the class chain), further checks in its constructor (a task's, sampler's and scheme's
constructor runs once, at validation time, and the run uses what it built; an attention kind's
runs when the model is built, still before any file is written; see :func:`construct`), and
checks across config sections in a classmethod ``check_config(cfg)``.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points

import torch

from lengen.checks import (AnyOf, Bool, Float, Int, Mapping, Rule, Seq, Str, did_you_mean)
from lengen.errors import ConfigError, is_out_of_memory, out_of_memory_message


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


# ---- extension points: built-in names, import paths and installed plugins ----------------------

@dataclass(frozen=True, eq=False)
class ExtensionPoint:
    """One place a user can plug a class in: positional schemes (``model.posenc``), attention
    kinds, position samplers, tasks. A name in a config is resolved, in this order, as

    1. a key of the literal ``registry`` dict (the built-ins);
    2. an import path ``package.module:Name`` (``Name`` may be dotted: ``module:Outer.Inner``);
    3. a short name that an installed package registers as an entry point in ``group``
       (``[project.entry-points."lengen.posencs"] slopes = "mypkg.pe:Slopes"``), looked up
       only when 1 and 2 do not apply, so plain runs never scan the installed packages.

    The class must subclass ``base`` (or set the class attribute that ``also`` names to True).
    A resolved config stores a plugin by its import path (:meth:`canonical`), so a resumed run,
    ``lengen eval``, spawned sweep workers and Ray tasks import the same class without the entry
    point, as long as its module is importable there.
    """
    kind: str            # "positional scheme", in messages
    key: str             # the config key holding the name: "model.posenc"
    group: str           # entry-point group: "lengen.posencs"
    registry: dict
    base: type
    #: a class attribute that, set True, admits a class outside ``base`` with the same interface
    #: (attention kinds: ``is_token_mixer``, a token mixer that is no attention, e.g. an RNN)
    also: str | None = None

    def get(self, name, key: str | None = None) -> type:
        """The class ``name`` stands for, or a ConfigError saying why there is none."""
        key = key or self.key
        try:
            if name in self.registry:
                return self.registry[name]
        except TypeError:                   # an unhashable name (a list or mapping from YAML)
            pass
        if isinstance(name, str) and ":" in name:
            return self._checked(_import_path(name, f"{self.kind} '{name}' ({key})"), name, key)
        if isinstance(name, str):
            found = self.plugins().get(name)
            if found is not None:
                return self._checked(_import_path(found, f"{self.kind} '{name}' ({key}, entry "
                                                         f"point {name} = {found} in group "
                                                         f"{self.group})"), name, key)
        names = sorted(self.registry) + sorted(self.plugins())
        raise UnknownNameError(
            f"unknown {self.kind} '{name}' ({key}). Valid {self.kind}s: {', '.join(names)}; or "
            f"an import path package.module:Name to a subclass of {_qualname(self.base)}."
            f"{did_you_mean(name, names)}")

    def canonical(self, name: str) -> str:
        """The name a resolved config stores: a built-in name as it is, a plugin by the import
        path of its class (so nothing later depends on the entry point being installed)."""
        if isinstance(name, str) and name in self.registry:
            return name
        return _qualname(self.get(name))

    def plugins(self) -> dict[str, str]:
        """Entry-point name -> import path of the installed plugins of this point. Two
        packages claiming one name, or a plugin claiming a built-in name, is a ConfigError."""
        claims: dict[str, dict[str, str]] = {}     # name -> {import path: package}
        for ep in entry_points(group=self.group):  # one package found twice claims nothing new
            package = getattr(getattr(ep, "dist", None), "name", None) or "?"
            claims.setdefault(ep.name, {}).setdefault(ep.value, package)
        for name, paths in claims.items():
            if len(paths) > 1:
                both = "; ".join(f"{v} (package {p})" for v, p in paths.items())
                raise ConfigError(f"two installed plugins claim the {self.kind} name '{name}' "
                                  f"(entry-point group {self.group}): {both}. Uninstall one, or "
                                  f"name the class by its import path.")
            if name in self.registry:
                raise ConfigError(f"the installed plugin {next(iter(paths))} (package "
                                  f"{next(iter(paths.values()))}) claims '{name}', the name of a "
                                  f"built-in {self.kind}; rename its entry point in group "
                                  f"{self.group} (the built-in keeps the name).")
        return {name: next(iter(paths)) for name, paths in claims.items()}

    def _checked(self, obj, name: str, key: str) -> type:
        if not (isinstance(obj, type) and (issubclass(obj, self.base) or (
                self.also is not None and getattr(obj, self.also, False) is True))):
            what = f"the class {_qualname(obj)}" if isinstance(obj, type) else \
                f"a {type(obj).__name__}, not a class"
            also = f" (or set {self.also} = True)" if self.also else ""
            raise ConfigError(f"{key}='{name}' is {what}; a {self.kind} must subclass "
                              f"{_qualname(self.base)}{also}. See CONTRIBUTING.md for its "
                              f"interface.")
        return obj


def _qualname(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_path(path: str, what: str):
    """The object named by ``package.module:Name`` (``Name`` may be dotted). Import errors keep
    the module's own exception message."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what}: an import path is package.module:Name, with both parts "
                          f"(got '{path}').")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - whatever the plugin raises on import is its message
        raise ConfigError(f"{what}: module '{module_name}' could not be imported: "
                          f"{type(e).__name__}: {e}. Is the package installed (pip install -e "
                          f"...), or its folder on PYTHONPATH?") from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n, v in vars(module).items() if isinstance(v, type)
                     and v.__module__ == module.__name__]
            raise ConfigError(f"{what}: module '{module_name}' has no '{attr}'. Classes defined "
                              f"there: {', '.join(names) or 'none'}.{did_you_mean(attr, names)}")
        obj = getattr(obj, part)
    return obj


def _first_sentence(text: str) -> str:
    para = " ".join((text or "").strip().split("\n\n")[0].split())
    para = re.sub(r":\w+:`~?([^`]+)`", r"\1", para).replace("``", "")
    # the first sentence: a full stop followed by a capital, not after "et al." / "e.g." / "i.e."
    m = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)[.!?](?=\s+[A-Z])", para)
    return para[:m.start() + 1] if m else para


def describe(obj, registry: dict | None = None, width: int | None = 100) -> str:
    """One line describing a registry entry: the first sentence of its own docstring; for a class
    without one, its module's docstring when that module defines no other entry of ``registry``
    (one class per file), else ''. Longer than ``width`` (None: no limit) it is cut at a word."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not doc:
        siblings = [o for o in (registry or {}).values() if getattr(o, "__module__", None)
                    == obj.__module__]
        if len(siblings) <= 1:
            doc = sys.modules[obj.__module__].__doc__
    line = _first_sentence(doc or "")
    if width is None or len(line) <= width:
        return line
    return line[:width - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."    # never mid-word


def constructor_params(cls) -> dict[str, inspect.Parameter]:
    """Keyword parameters ``cls(**kw)`` accepts: its ``__init__``'s named parameters, plus, while
    an ``__init__`` takes ``**kw``, those of the next ``__init__`` up the class chain (the usual
    ``super().__init__(**kw)`` forwarding). ``object`` and ``torch.nn.Module`` end the chain (their
    ``*args, **kwargs`` accept nothing useful)."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if klass in (object, torch.nn.Module):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        forwards = False
        for name, p in list(inspect.signature(init).parameters.items())[1:]:   # skip self
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                params.setdefault(name, p)
            elif p.kind is p.VAR_KEYWORD:
                forwards = True
        if not forwards:
            break
    return params


#: the valid values of a registry class's ``seed`` / ``*_seed`` argument (= lengen.config.SEED)
SEED_RULE = Int(min=0, max=2 ** 63 - 1)

_TYPE_RULES = {"int": Int, "float": Float, "bool": Bool, "str": Str, "dict": Mapping}


def annotation_rule(annotation) -> Rule | None:
    """A rule for a simple annotation (``int``, ``float | None``, ``str | tuple`` ...), or None
    when the annotation is absent or not one of these (then only the constructor checks)."""
    if annotation is inspect.Parameter.empty:
        return None
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    parts = [p.strip() for p in str(text).split("|")]
    optional = "None" in parts
    rules = []
    for p in parts:
        if p == "None":
            continue
        if p in ("tuple", "list"):
            rules.append(Seq(AnyOf(Int(), Float(), Str(), Bool()), what="a list"))
        elif p in _TYPE_RULES:
            rules.append(_TYPE_RULES[p]())
        else:
            return None
    if not rules:
        return None
    return AnyOf(*rules, optional=optional)


def kwarg_rules(cls) -> dict[str, Rule]:
    """``KWARG_RULES`` merged along the class chain (a subclass's entry wins)."""
    rules: dict[str, Rule] = {}
    for klass in reversed(cls.__mro__):
        rules.update(klass.__dict__.get("KWARG_RULES", {}))
    return rules


def check_kwargs(cls, kwargs, *, section: str, kind: str, name: str,
                 framework: dict[str, str] | None = None) -> dict:
    """Validate the user's keyword arguments for registry class ``cls`` (``kind`` '``name``',
    configured in ``section``) and return them coerced. ``framework`` maps the keywords the
    model passes itself to the config key they come from; users may not set those."""
    framework = framework or {}
    kwargs = Mapping().check(kwargs, section, {})
    params = constructor_params(cls)
    settable = {k: p for k, p in params.items() if k not in framework}
    rules = kwarg_rules(cls)
    out = {}
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise ConfigError(f"{section} has a non-string key {key!r}; keys are argument names "
                              f"of {kind} '{name}': {', '.join(sorted(settable)) or 'none'}.")
        if key in framework:
            raise ConfigError(f"{section}.{key} cannot be set: the model passes {key} to {kind} "
                              f"'{name}' itself, from {framework[key]}. Remove {key} from "
                              f"{section} and set {framework[key]} instead.")
        if key not in settable:
            valid = ", ".join(sorted(settable)) or f"none ({kind} '{name}' takes no arguments)"
            raise ConfigError(f"unknown key '{key}' in {section} for {kind} '{name}'. Valid keys: "
                              f"{valid}.{did_you_mean(key, settable)}")
        p = settable[key]
        example = None if p.default is p.empty else p.default
        rule = annotation_rule(p.annotation)
        if rule is not None:
            value = rule.check(value, f"{section}.{key}", example)
        if key in rules:
            value = rules[key].check(value, f"{section}.{key}", example)
        elif key == "seed" or key.endswith("_seed"):
            # every seed is an integer >= 0, as train.seed / train.data_seed / eval.seed are
            # (torch refuses negative seeds deep inside, or they alias positive ones)
            value = SEED_RULE.check(value, f"{section}.{key}", example)
        out[key] = value
    missing = [k for k, p in settable.items() if p.default is p.empty and k not in out]
    if missing:
        raise ConfigError(f"{kind} '{name}' needs {section}.{missing[0]} (required keys: "
                          f"{', '.join(missing)}); add it, e.g. {section}.{missing[0]}=...")
    return out


def fill_from_task(cls, kwargs: dict, task, splits, *, what: str) -> dict:
    """``kwargs`` with what only the task knows filled in by ``cls.task_defaults(kwargs, task,
    splits)`` when the component has that hook (M for position interpolation, the original
    length of RoPE scaling, the digit ids of coupling / Abacus); a ValueError from the hook
    becomes a ConfigError starting with ``what``. Used when a config is resolved and when a run
    is evaluated with another sampler."""
    hook = getattr(cls, "task_defaults", None)
    if hook is None:
        return kwargs
    try:
        return hook(kwargs, task, list(splits))
    except ValueError as e:
        raise ConfigError(f"{what}: {e}") from None


def construct(cls, kwargs: dict, *, what: str, **framework_values):
    """``cls(**framework_values, **kwargs)``, turning a constructor's complaint (ValueError,
    TypeError, a missing data file, a missing optional package, a torch error such as a negative
    or unallocatable size) into a ConfigError that names ``what`` (e.g. "positional scheme 'rope'
    (model.posenc, model.posenc_kwargs={})")."""
    try:
        return cls(**framework_values, **kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError, OSError, ImportError, RuntimeError, ArithmeticError,
            MemoryError) as e:
        if is_out_of_memory(e):         # the size is the culprit, not the component's name
            sizes = ", ".join(f"{k}={v}" for k, v in framework_values.items()
                              if isinstance(v, int) and not isinstance(v, bool))
            raise ConfigError(f"{out_of_memory_message(e)} (while building {what}"
                              f"{' with ' + sizes if sizes else ''})") from e
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"cannot build {what}: {msg}") from e


__all__ = ["UnknownNameError", "ExtensionPoint", "lookup", "describe", "check_kwargs", "fill_from_task",
           "constructor_params", "annotation_rule", "kwarg_rules", "construct"]
