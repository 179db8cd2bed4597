"""Argument types and error reporting for the ``lengen`` command line (kept out of
:mod:`lengen.cli` so that module stays the parser and the command table)."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings

import yaml

from lengen.errors import ConfigError, LengenError, LengenWarning

_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*=")


def looks_like_override(text: str) -> bool:
    """``train.steps=3``-shaped (a dotted key, then ``=``)."""
    return bool(_OVERRIDE.match(text)) and not text.startswith("-")


def int_at_least(low: int):
    """argparse ``type=`` for an integer ``>= low`` (argparse then names the flag)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def positive_float(text: str) -> float:
    """argparse ``type=`` for a finite number ``> 0``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def json_object(text: str) -> dict:
    """argparse ``type=`` for a JSON object such as ``'{"factor": 2}'``."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object ({{...}}), got {text!r}")
    return value


def yaml_mapping(text: str) -> dict:
    """argparse ``type=`` for a mapping written as YAML flow or JSON, e.g.
    ``'{rope_type: linear, factor: 2}'``."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"expected a mapping such as '{{key: value}}', got "
                                         f"{text!r} ({str(e).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a mapping ({{key: value}}), got {text!r}")
    return value


def not_an_override(flag: str):
    """An argparse ``type`` for a path flag: ``--run-dir train.steps=3`` means the override was
    swallowed as the flag's value, so it is refused while the command line is parsed."""
    def check(value: str) -> str:
        if looks_like_override(value):
            raise argparse.ArgumentTypeError(
                f"{flag} got '{value}', which looks like a key=value override; give {flag} its "
                f"value first (e.g. {flag} runs/x {value})")
        return value
    return check


def message(e: BaseException) -> str:
    """An exception as one line for the user (OSErrors as 'reason: file')."""
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{e.strerror}: {e.filename}"
    return str(e) or type(e).__name__


def is_user_error(e: BaseException) -> bool:
    """Errors whose message tells the user what to fix (exit status 2, no traceback); anything
    else is reported as unexpected (exit status 1, with a pointer to --debug)."""
    return isinstance(e, (LengenError, ValueError, OSError, ImportError, yaml.YAMLError))


def silence_stdout() -> None:
    """After a broken pipe (``lengen list | head``): point stdout at /dev/null so the
    interpreter's final flush does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class lengen_warnings:
    """``with lengen_warnings(): ...`` prints each :class:`lengen.errors.LengenWarning` as one
    ``lengen: warning: ...`` line on stderr (other warnings keep Python's format)."""

    def __enter__(self):
        self._saved = warnings.showwarning
        saved = self._saved

        def show(msg, category, filename, lineno, file=None, line=None):
            if issubclass(category, LengenWarning):
                print(f"lengen: warning: {msg}", file=file or sys.stderr)
            else:
                saved(msg, category, filename, lineno, file, line)

        warnings.showwarning = show
        return self

    def __exit__(self, *exc):
        warnings.showwarning = self._saved
        return False



__all__ = ["lengen_warnings", "int_at_least", "positive_float", "looks_like_override",
           "not_an_override", "message", "is_user_error", "silence_stdout"]
