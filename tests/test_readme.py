"""The README cannot drift: its commands run, its registry table is the registries, its example
script is the file it names.

Every line of the README's ```bash blocks is either run here at smoke size (training steps, eval
sequences and recipe scales made tiny by the rewrites below) or named in ``NOT_RUN`` with the
reason. A new command the test does not know fails the test, so a README edit must decide which.
Commands run in a temporary folder (``runs/...`` lands there) in the order the README gives them,
so a later command can read an earlier one's run directory, as a reader's would.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

import lengen

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

#: commands the test does not run, by prefix, with why (installs, the demo and the test suite are
#: what CI itself runs; estimates time real training)
NOT_RUN = {
    "python3 -m venv": "the two set-up commands: CI runs the test one (.ci/run), the demo is timed by hand",
    "pip install": "installs into the reader's environment",
    "python examples/compare_schemes.py": "run below with --steps 2 (test_compare_example)",
}
#: commands whose expensive form is replaced by their --help here (they time real training)
HELP_ONLY = ("--estimate",)
#: appended to every `lengen train`: a smoke-sized run
TRAIN_SMOKE = ["train.steps=2", "train.ckpt_every=1", "eval.sequences=8", "eval.batch_size=8"]


def readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def bash_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks: continuation lines joined, comments and blanks dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if shlex.split(line, comments=True):
                out.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return out


def not_run(cmd: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if cmd.startswith(prefix)), None)


def smoke(cmd: str) -> list[str]:
    """The command as run here: `lengen` -> `python -m lengen`, at smoke size."""
    words = shlex.split(cmd)
    assert words[0] == "lengen", f"a README command the test does not know how to run: {cmd!r} " \
                                 f"(add it to NOT_RUN with a reason, or make it a lengen command)"
    if any(w in HELP_ONLY for w in words):
        return [sys.executable, "-m", "lengen", words[1], "--help"]
    if words[1] == "train":
        words += TRAIN_SMOKE
    if words[1] == "eval" and "--sequences" in words:
        i = words.index("--sequences")
        words[i + 1] = "8"
    for flag in ("--scale",):
        if flag in words:
            words[words.index(flag) + 1] = "smoke"
    return [sys.executable, "-m", "lengen"] + words[1:]


def test_every_readme_command_is_run_or_excused():
    cmds = bash_commands(readme())
    assert len(cmds) >= 15, cmds            # the parse found the tour
    unknown = [c for c in cmds if not not_run(c) and not c.startswith("lengen ")]
    assert not unknown, f"README commands neither run by this test nor in NOT_RUN: {unknown}"
    # the two set-up commands are there, and the test one is what CI runs
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    ci_cmd = "pip install torch==2.13.0 && pip install -e \".[test]\" && python -m pytest -q"
    assert ci_cmd in ci
    assert any(c.endswith(ci_cmd) for c in cmds), "the README's test command differs from .ci/run's"
    assert any(c.endswith("pip install -e . && lengen demo") for c in cmds)


@pytest.mark.slow
def test_readme_commands_run_at_smoke_size(tmp_path, monkeypatch):
    """Run every lengen command of the README in order, in this process (no interpreter start-up
    per command; about 40 s on 2 cores)."""
    from lengen.cli import main

    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples", "plugin"))
    for cmd in bash_commands(readme()):
        if not_run(cmd):
            continue
        argv = smoke(cmd)[3:]                       # drop [python, -m, lengen]
        try:
            rc = main(argv)
        except SystemExit as e:                     # --help, or argparse refusing a flag
            rc = e.code
        assert rc in (0, None), f"README command failed (exit {rc}): {cmd}\nran: lengen {shlex.join(argv)}"


def test_compare_example_is_the_readme_block():
    """The README shows examples/compare_schemes.py verbatim."""
    with open(os.path.join(ROOT, "examples", "compare_schemes.py"), encoding="utf-8") as f:
        code = f.read()
    blocks = re.findall(r"```python\n(.*?)```", readme(), flags=re.S)
    assert code in blocks, "README's sweep example differs from examples/compare_schemes.py"


@pytest.mark.slow
def test_compare_example_runs(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "compare_schemes.py"),
                        "--steps", "2", "--out", str(tmp_path / "cmp")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "len=20" in p.stdout and "rope" in p.stdout, p.stdout


def registry_table(text: str) -> dict[str, set[str]]:
    """{CLI key: names} of the README's registry table."""
    rows = {}
    for key, names in re.findall(r"^\| [^|]*\(`([a-z.]+)`\) \| (.*) \|$", text, flags=re.M):
        rows[key] = set(re.findall(r"`([a-z0-9_]+)`", names))
    return rows


def test_registry_table_is_the_registries():
    rows = registry_table(readme())
    want = {"model.posenc": lengen.POSENCS, "model.attention": lengen.ATTENTIONS,
            "model.positions": lengen.SAMPLERS, "task.name": lengen.TASKS}
    assert set(rows) == set(want), rows.keys()
    for key, registry in want.items():
        assert rows[key] == set(registry), (key, rows[key] ^ set(registry))


def test_readme_tables_render():
    """An unescaped | inside a table row's code span splits the cell: every row of a table has
    as many cells as its header."""
    for table in re.findall(r"((?:^\|.*\|\n)+)", readme(), flags=re.M):
        lines = table.strip().splitlines()
        n = len(re.split(r"(?<!\\)\|", lines[0]))
        for line in lines:
            assert len(re.split(r"(?<!\\)\|", line)) == n, line


def test_readme_is_a_landing_page():
    words = len(readme().split())
    assert words <= 2600, f"README.md has {words} words; detail belongs in docs/"


def all_help_texts():
    """The --help text of every command and subcommand (recipes and analyses included)."""
    import argparse

    from lengen.cli import build_parser

    def walk(p, name):
        yield name, p.format_help()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, q in a.choices.items():
                    yield from walk(q, f"{name} {sub}")
    yield from walk(build_parser(), "lengen")


def test_help_has_no_issue_numbers_or_markup():
    bad = [(name, m.group(0)) for name, text in all_help_texts()
           for m in re.finditer(r"\bissues? \d+|:(?:func|mod|class|meth|attr):`|``", text)]
    assert not bad, f"--help texts with issue numbers or Sphinx markup: {bad[:10]}"
