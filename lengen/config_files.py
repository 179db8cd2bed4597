"""Config files and dotted overrides -> plain dicts (validated later by :func:`lengen.config.resolve`).

Every problem names the file (and line) or the override and says how to fix it: YAML/JSON syntax
errors, a key given twice, a directory or binary file, a top-level value that is not a mapping,
an override without ``=`` or with a malformed key or value.
"""
from __future__ import annotations

import copy
import json
import os

import yaml

from lengen.errors import ConfigError
from lengen.fileio import read_text_capped


def parse_value(text: str, item: str | None = None):
    """Parse an override value as YAML (numbers, booleans, lists, dicts), else keep the string.
    A value that starts like a list or mapping must parse."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        if text.lstrip()[:1] in ("[", "{"):
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"override '{item or text}': the value is not valid YAML "
                              f"({problem}); write lists as [a, b] and mappings as "
                              f"{{key: value}}, quoted for the shell") from None
        return text


def apply_overrides(d: dict, overrides: list[str]) -> dict:
    """``["train.steps=10", "model.attention=tra"]`` -> patched deep copy of ``d``."""
    d = copy.deepcopy(d)
    if isinstance(overrides, str):
        overrides = [overrides]
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            hint = (f"; to read a config file pass --config {item}"
                    if isinstance(item, str) and os.path.isfile(item) else "")
            raise ConfigError(f"override {item!r} has no '=': write key.path=value, e.g. "
                              f"train.steps=500{hint}")
        path, value = item.split("=", 1)
        keys = path.strip().split(".")
        if not path.strip() or any(not k.strip() for k in keys) or " " in path.strip():
            raise ConfigError(f"override '{item}': '{path}' is not a dotted key such as "
                              f"train.steps or model.attention_kwargs.qk_norm")
        node = d
        for i, key in enumerate(keys[:-1]):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': {'.'.join(keys[:i + 1])} is a value, not a "
                                  f"section, so it has no key '{keys[i + 1]}'")
        node[keys[-1]] = parse_value(value, item)
    return d


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that rejects a key given twice in one mapping (PyYAML keeps the last one)."""


def _unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
            seen.add(key)
        except TypeError:
            continue                     # an unhashable key: construct_mapping reports it
        if dup:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice",
                                                    key_node.start_mark)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _json_pairs(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"key {dup!r} appears twice")
    return dict(pairs)


def load_config_file(path: str) -> dict:
    """Read a YAML or JSON (``.json``) config file; every problem names the file (and line)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"config file {path} is a directory; --config takes a YAML or JSON file "
                          f"(a run's settings are in {os.path.join(path, 'config.json')})")
    try:
        # capped and regular files only: --config /dev/zero or a fifo would never finish reading
        text = read_text_capped(path, "config file", fix="--config takes a YAML or JSON file")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text file (not UTF-8); --config takes a "
                          f"YAML or JSON file") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
    if path.endswith(".json"):
        try:
            data = json.loads(text, object_pairs_hook=_json_pairs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config file {path} is not valid JSON: {e.msg} at line {e.lineno}, "
                              f"column {e.colno}. Fix that line (JSON needs double quotes and no "
                              f"trailing commas) or write the file as YAML") from None
        except ValueError as e:
            raise ConfigError(f"config file {path}: {e}; keep one of them") from None
    else:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}. Fix that "
                              f"line (indent with spaces, 'key: value' pairs)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping with sections model, task, "
                          f"train, eval (and name), but it holds a {type(data).__name__}")
    return data


__all__ = ["load_config_file", "apply_overrides", "parse_value"]
