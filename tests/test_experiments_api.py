"""The scripts under experiments/ use only lengen's public API (issue 51): a later change to
lengen's internals must not break the record of how a study was done.

The public API is what the documentation site's API reference renders: every ``::: module``
directive of ``docs/api/*.md``. A directive with ``members: [...]`` makes those names public; one
without makes the module's ``__all__`` public (or, where a module has none, the names it defines
without a leading underscore). ``import lengen.x`` / ``from lengen.x import y`` in a script must
name such a module and such a name (or a public submodule); nothing private (``_name``).
Imports of non-lengen modules and of a script's sibling scripts are not checked. Code that a
script runs under another commit's lengen (a string handed to ``python -c``) is not parsed.
"""
from __future__ import annotations

import ast
import glob
import importlib
import inspect
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True))
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$")
MEMBERS = re.compile(r"^\s+members:\s*\[(.*)\]\s*$")


def documented() -> dict[str, set[str] | None]:
    """{dotted path named by a ``:::`` directive: its ``members`` list, or None for all}."""
    out: dict[str, set[str] | None] = {}
    for page in sorted(glob.glob(os.path.join(ROOT, "docs", "api", "*.md"))):
        with open(page, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            m = DIRECTIVE.match(line)
            if not m:
                continue
            members = None
            for opt in lines[i + 1:]:
                if not opt.startswith(" ") or not opt.strip():
                    break
                mm = MEMBERS.match(opt)
                if mm:
                    members = {x.strip() for x in mm.group(1).split(",") if x.strip()}
            out[m.group(1)] = members
    return out


def public_names(module: str, docs: dict) -> set[str] | None:
    """The public names of ``module``, or None when the API reference does not document it (a
    directive naming one of its classes makes that one name public)."""
    names: set[str] = {p.rpartition(".")[2] for p in docs if p.rpartition(".")[0] == module
                       and not _is_module(p)}
    if module not in docs:
        return names or None
    if docs[module] is not None:
        return names | docs[module]
    mod = importlib.import_module(module)
    if hasattr(mod, "__all__"):
        return names | set(mod.__all__)
    own = {n for n, v in vars(mod).items() if not n.startswith("_") and not inspect.ismodule(v)
           and getattr(v, "__module__", module) == module}
    return names | own


def _is_module(path: str) -> bool:
    try:
        importlib.import_module(path)
    except ImportError:
        return False
    return True


def violations(source: str, docs: dict) -> list[str]:
    """Each import of ``source`` that reaches past the public API, as one line."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lengen" and alias.name != "lengen" \
                        and alias.name not in docs:
                    bad.append(f"line {node.lineno}: import {alias.name} (not a public module)")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "lengen":
            public = public_names(node.module, docs)
            for alias in node.names:
                what = f"line {node.lineno}: from {node.module} import {alias.name}"
                if alias.name.startswith("_"):
                    bad.append(f"{what} (private)")
                elif public is None:
                    bad.append(f"{what} ({node.module} is not a public module)")
                elif alias.name not in public and f"{node.module}.{alias.name}" not in docs:
                    bad.append(f"{what} (not in {node.module}'s public names)")
    return bad


@pytest.fixture(scope="module")
def docs():
    return documented()


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 20, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_script_uses_only_the_public_api(script, docs):
    with open(script, encoding="utf-8") as f:
        bad = violations(f.read(), docs)
    assert not bad, (f"{os.path.relpath(script, ROOT)} imports past lengen's public API (the "
                     "modules docs/api/*.md renders; export the name there, small and "
                     "documented, or use a public one):\n" + "\n".join(bad))


@pytest.mark.parametrize("line", [
    "from lengen.recipes.addition.specs import run_config",   # an undocumented module
    "from lengen.fileio import _replace_atomically",                     # private
    "from lengen.fileio import open_for_writing",              # outside the page's members
    "from lengen.eval import length_scores",                   # in lengen.eval.length_sweep only
    "import lengen.train.loop",
    "def f():\n    from lengen.rundir.layout import run_meta",  # inside a function too
])
def test_the_check_catches_an_internal_import(line, docs):
    assert violations(line, docs), line


@pytest.mark.parametrize("line", [
    "import lengen", "from lengen import resolve, train", "from lengen.sweep import RunSpec",
    "from lengen.recipes import estimate", "from lengen.recipes.addition import run_config",
    "from lengen.tasks.flipflop import generate_flipflop", "import pandas as pd",
    "from lengen.model.config import ModelConfig",
])
def test_the_check_passes_a_public_import(line, docs):
    assert not violations(line, docs), violations(line, docs)
