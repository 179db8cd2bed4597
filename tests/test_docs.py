"""The documentation site builds with warnings as errors, and its pages print no result number that
no committed file holds.

`mkdocs build --strict` runs here (CI installs mkdocs with the test extra), so a broken link, a
missing snippet file, an API page naming a module that moved, or a docstring mkdocstrings cannot
render fails the suite. The number check is the docs' counterpart of results/check_numbers.py:
every number with a decimal point or a percent sign in a page's prose must occur in a file the page
names in a code span (`results/<folder>/`, `benchmarks/RESULTS.md`, ...), or in the page's
``<!-- not results: N N ... -->`` list (sizes, settings, published figures with their source
given beside them). Pages included from results/ READMEs are checked by results/check_numbers.py.

The two checks divide the work: lengen/analysis/numbers.py (results/check_numbers.py,
tests/test_results_numbers.py) ties every number of a *results paragraph* of README.md and
docs/*.md to an expression over results/; this one reads every decimal or percent number in the
prose of every page (docs/**, README.md), results paragraph or not, against the files the page
names (results/ and benchmarks/). What a printed number is and what prose holds none (code,
comments, links, dates, hashes) is numbers.py's (``RESULT``, ``prose_text``). numbers.py alone
would not do here: it leaves other paragraphs unchecked (a benchmarks/ figure in docs/*.md) and
reads the pages under docs/recipes/ and docs/tutorials/ as results READMEs.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from lengen.analysis.numbers import RESULT, prose_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
DATA_EXT = (".csv", ".md", ".json", ".jsonl", ".txt", ".log")


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None
                    or importlib.util.find_spec("mkdocstrings") is None,
                    reason="mkdocs / mkdocstrings not installed (pip install -e \".[docs]\"); "
                           "the test extra installs them, so CI builds the site")
def test_site_builds_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, f"mkdocs build --strict failed:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    assert (tmp_path / "site" / "api" / "lengen" / "index.html").exists()


def named_sources(text: str) -> list[str]:
    """The committed files a page names in code spans (folders: every data file in them)."""
    files = []
    for span in re.findall(r"`([^`\s]+)`", text):
        path = os.path.join(ROOT, span.rstrip("/"))
        if span.startswith(("results/", "benchmarks/")) and os.path.isdir(path):
            files += [f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                      if f.endswith(DATA_EXT)]
        elif span.startswith(("results/", "benchmarks/")) and os.path.isfile(path):
            files.append(path)
    return files


def numbers_in(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def unsourced_numbers(text: str) -> list[str]:
    allowed = set()
    for block in re.findall(r"<!-- not results:(.*?)-->", text, flags=re.S):
        allowed |= set(block.split())
    sources = " ".join(numbers_in(f) for f in named_sources(text))
    bad = []
    for num in RESULT.findall(prose_text(text)):
        if num in allowed:
            continue
        variants = {num}
        if "." in num:            # 1.50 printed as 1.5 in a file, a fraction as a percentage
            variants.add(num.rstrip("0").rstrip("."))
        if not any(re.search(r"(?<![\d.])" + re.escape(v) + r"(?!\d)", sources) for v in variants):
            bad.append(num)
    return bad


#: pages whose numbers are not lengen's results
EXEMPT = {"docs/reference-notes.md": "facts quoted from the papers and public code, each with its source"}


def pages() -> list[str]:
    found = sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))
    return [p for p in found if os.path.relpath(p, ROOT) not in EXEMPT] + [os.path.join(ROOT, "README.md")]


@pytest.mark.parametrize("page", pages(), ids=lambda p: os.path.relpath(p, ROOT))
def test_page_numbers_come_from_committed_files(page):
    bad = unsourced_numbers(numbers_in(page))
    assert not bad, (f"{os.path.relpath(page, ROOT)} prints {bad}, found in no file it names: name "
                     f"the results/ or benchmarks/ file in a code span, or list a setting in "
                     f"<!-- not results: ... -->")


def test_number_check_catches_a_stray_number():
    page = "Measured in `results/demo-cpu/`: TRA solves sparse (100.0), NoPE 31.8% IID, RoPE 12.3%."
    assert unsourced_numbers(page) == ["12.3"]
    assert unsourced_numbers(page + "\n<!-- not results: 12.3 -->") == []


def test_snippets_name_existing_files():
    """Each recipe page includes results READMEs that exist (the build checks it too; this says
    which page when mkdocs is not installed)."""
    for page in glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True):
        for ref in re.findall(r'^--8<-- "([^"]+)"', numbers_in(page), flags=re.M):
            assert os.path.exists(os.path.join(ROOT, ref)), (page, ref)


def docs_commands():
    """(page, command) for every `lengen ...` line of the docs' ```bash blocks."""
    out = []
    for page in sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)):
        for block in re.findall(r"```bash\n(.*?)```", numbers_in(page), flags=re.S):
            pending = ""
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = pending + " " + line if pending else line
                try:                               # a quoted argument may span lines
                    shlex.split(line, comments=True)
                except ValueError:
                    pending = line
                    continue
                pending = ""
                line = re.sub(r"\s+#\s.*$", "", line).strip()
                if line.startswith("lengen "):
                    out.append((os.path.relpath(page, ROOT), line))
    return out


def test_docs_commands_parse():
    """Every lengen command in the docs names a real command and real flags (the README's are
    run by tests/test_readme.py; these are parsed, not run: many train for minutes)."""
    from lengen.cli import build_parser

    cmds = docs_commands()
    assert len(cmds) > 40
    bad = []
    for page, cmd in cmds:
        argv = shlex.split(cmd)[1:]
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit as e:
            if e.code:
                bad.append(f"{page}: {cmd}")
    assert not bad, "docs commands lengen refuses:\n" + "\n".join(bad)
