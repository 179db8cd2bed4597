"""Did a rule come before the runs it governs? From git history (issue 54 item 5).

A reading in ``results/claims.yaml`` labelled ``pre-registered`` names its ``rule_file`` and the
``rule_commit`` that stated the rule. It passes when (1) ``rule_commit`` touched ``rule_file``;
(2) for every data file the reading's arms read, the first commit that added it is a strict
descendant of ``rule_commit`` (so the results were committed after the rule, never with it).
A reading that fails is *exploratory*, not *pre-registered*. (Run start times are not yet
compared: the committed folders do not record them in one format.)

    python -m lengen.analysis.registration       # exit 1 with one line per failing reading
"""
from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def have_history() -> bool:
    return os.path.exists(os.path.join(REPO, ".git"))


def first_commit(path: str) -> str | None:
    """The commit that first added ``path`` (following renames), or None if never committed."""
    out = _git("log", "--format=%H", "--follow", "--", path).splitlines()
    return out[-1] if out else None


def strictly_before(a: str, b: str) -> bool:
    """Is commit ``a`` an ancestor of ``b`` and not ``b`` itself?"""
    a, b = _git("rev-parse", a), _git("rev-parse", b)
    if a == b:
        return False
    r = subprocess.run(["git", "-C", REPO, "merge-base", "--is-ancestor", a, b])
    return r.returncode == 0


def data_files(reading: dict) -> list[str]:
    files = []
    for arm in reading["arms"]:
        fs = arm["file"] if isinstance(arm["file"], list) else [arm["file"]]
        files += [os.path.join("results", f) for f in fs]
    return sorted(set(files))


def check_reading(reading: dict) -> list[str]:
    """Problems with one pre-registered reading's order (empty: the rule came first)."""
    rule_file, rule_commit = reading["rule_file"], reading["rule_commit"]
    where = reading["folder"]
    try:
        touched = _git("show", "--format=", "--name-only", rule_commit).splitlines()
    except subprocess.CalledProcessError:
        return [f"{where}: rule_commit {rule_commit} is not in this repository's history"]
    problems = []
    if rule_file not in touched:
        problems.append(f"{where}: rule_commit {rule_commit} does not touch {rule_file}")
    for f in data_files(reading):
        first = first_commit(f)
        if first is None:
            problems.append(f"{where}: {f} was never committed")
        elif not strictly_before(rule_commit, first):
            problems.append(f"{where}: {f} first committed in {first[:7]}, not after the rule "
                            f"({rule_commit})")
    return problems


def check(claims: list[dict]) -> list[str]:
    problems = []
    for c in claims:
        for r in c["readings"]:
            if r.get("registration") == "pre-registered":
                problems += [f"{c['id']}: {p}" for p in check_reading(r)]
    return problems


def main() -> int:
    from lengen.analysis.verdict_table import RESULTS, load
    if not have_history():
        print("no .git: the rule order cannot be checked here")
        return 0
    problems = check(load(os.path.join(RESULTS, "claims.yaml")))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
