"""The user's consent to run code named by data: plugin import paths read from a file lengen did
not get from the user in this command (a run directory's ``config.json``, a Hugging Face
export's ``lengen_model``), and transformers' ``trust_remote_code``.

The ecosystem's rule (transformers' ``trust_remote_code``): a file someone else wrote may name
code, but that code runs only when the user says so. lengen keeps it:

* **Plugin import paths from data.** Inside :func:`untrusted_source` (entered where lengen
  resolves a config it read from disk: :func:`lengen.rundir.load.load_run_at`, the
  ``lengen_model`` of an exported checkpoint), a ``package.module:Name`` is imported only when

  1. its module is already imported (importing it again runs nothing), or
  2. it is the import path of an installed entry point in one of lengen's plugin groups
     (``lengen.posencs`` ...): the user installed that package, or
  3. the user allowed it: ``--allow-plugin-imports`` on the command line,
     ``LENGEN_ALLOW_IMPORTS=1`` in the environment, or :func:`allow_plugin_imports` in Python.

  Otherwise :func:`check_import_allowed` raises :class:`PluginImportRefused`, naming the path,
  the file it came from and the flag. A config typed by the user (overrides, ``--config FILE``,
  a dict passed to ``lengen.resolve``) is the user's own and is not checked.
* **Remote code in a Hugging Face directory.** Every ``from_pretrained`` lengen calls passes
  :func:`trust_remote_code` (False unless ``--trust-remote-code`` / ``LENGEN_TRUST_REMOTE_CODE=1``
  / :func:`allow_remote_code`), so a directory with an ``auto_map`` is refused by transformers
  instead of asking "Do you wish to run the custom code? [y/N]".

The bottom layer (beside :mod:`lengen.errors`): the registry and the HF bridge both ask it.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys

from lengen.errors import ConfigError

#: environment variables that give the consent for a whole process (and its sweep workers)
ALLOW_IMPORTS_ENV = "LENGEN_ALLOW_IMPORTS"
TRUST_REMOTE_CODE_ENV = "LENGEN_TRUST_REMOTE_CODE"
#: the command-line flags (global: anywhere on the line, as --debug)
ALLOW_IMPORTS_FLAG = "--allow-plugin-imports"
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"

_allowed = {"imports": False, "remote_code": False}
#: the file whose config is being resolved, or None when the config is the user's own
_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("lengen_untrusted_source",
                                                                     default=None)


class PluginImportRefused(ConfigError):
    """A plugin import path read from data, not imported for want of the user's consent."""


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def allow_plugin_imports(allow: bool = True) -> None:
    """Allow (or forbid again) importing plugin paths named by files lengen reads, for this
    process (``--allow-plugin-imports``). Also exported as ``LENGEN_ALLOW_IMPORTS=1`` so spawned
    sweep workers inherit it."""
    _allowed["imports"] = bool(allow)
    if allow:
        os.environ[ALLOW_IMPORTS_ENV] = "1"
    else:
        os.environ.pop(ALLOW_IMPORTS_ENV, None)


def allow_remote_code(allow: bool = True) -> None:
    """Pass ``trust_remote_code=True`` to transformers from now on (``--trust-remote-code``)."""
    _allowed["remote_code"] = bool(allow)
    if allow:
        os.environ[TRUST_REMOTE_CODE_ENV] = "1"
    else:
        os.environ.pop(TRUST_REMOTE_CODE_ENV, None)


def plugin_imports_allowed() -> bool:
    return _allowed["imports"] or _env_true(ALLOW_IMPORTS_ENV)


def trust_remote_code() -> bool:
    """What lengen passes as ``trust_remote_code`` to every ``from_pretrained``: False unless
    the user allowed it."""
    return _allowed["remote_code"] or _env_true(TRUST_REMOTE_CODE_ENV)


@contextlib.contextmanager
def untrusted_source(source: str):
    """Within this block, plugin import paths come from ``source`` (a file path, in messages)
    and need consent (see the module docstring)."""
    token = _source.set(str(source))
    try:
        yield
    finally:
        _source.reset(token)


def remote_code_refused(path: str, e: BaseException) -> ConfigError | None:
    """transformers' refusal of a directory that ships code (``auto_map``) as a ConfigError
    naming the directory and the flag, or None when ``e`` is another error."""
    if "trust_remote_code" not in str(e):
        return None
    return ConfigError(f"{path} ships its own Python code (an auto_map in its config.json or "
                       f"tokenizer_config.json), and lengen does not run code from a "
                       f"checkpoint directory unless you allow it: if you trust it, rerun with "
                       f"{TRUST_REMOTE_CODE_FLAG} (or set {TRUST_REMOTE_CODE_ENV}=1)")


def check_import_allowed(path: str, what: str, entry_point_paths) -> None:
    """Raise :class:`PluginImportRefused` when ``path`` (``package.module:Name``, named by
    ``what``) comes from an untrusted source and is none of: an imported module, an installed
    entry point's path (``entry_point_paths()``: a callable, called only when needed), allowed by
    the user."""
    source = _source.get()
    if source is None or plugin_imports_allowed():
        return
    module = path.partition(":")[0]
    if module in sys.modules:
        return
    if path in set(entry_point_paths()):
        return
    raise PluginImportRefused(
        f"{what}: {source} names the plugin import path '{path}', and lengen does not import "
        f"code named by a file it reads (a downloaded run could run anything). If you trust "
        f"it, rerun with {ALLOW_IMPORTS_FLAG} (or set {ALLOW_IMPORTS_ENV}=1), or install the "
        f"plugin's package so that it registers '{path}' as an entry point")


__all__ = ["ALLOW_IMPORTS_ENV", "TRUST_REMOTE_CODE_ENV", "ALLOW_IMPORTS_FLAG",
           "TRUST_REMOTE_CODE_FLAG", "PluginImportRefused", "allow_plugin_imports",
           "allow_remote_code", "plugin_imports_allowed", "remote_code_refused", "trust_remote_code", "untrusted_source",
           "check_import_allowed"]
