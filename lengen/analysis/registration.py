"""Did a rule come before the runs it governs? From git history (issue 54 item 5).

A reading in ``results/claims.yaml`` labelled ``pre-registered`` names its ``rule_file`` and the
``rule_commit`` that stated the rule. It passes when (1) ``rule_commit`` touched ``rule_file``;
(2) for every data file the reading's arms read, the first commit that added it is a strict
descendant of ``rule_commit`` (so the results were committed after the rule, never with it).
(3) where the reading's data record when each run started (a ``started_utc`` column, as the
``provenance.csv`` of a sweep has: :mod:`lengen.provenance`), in a data file itself or in the
``provenance.csv`` beside it, every run started after ``rule_commit``'s commit time (a run started
before the rule was committed is not governed by it, even when its results were committed
later); (4) every row of every data file comes from a commit that is a strict descendant of
``rule_commit`` (``git blame -M -C -C``: a row last changed, or copied from another file, in a
commit at or before the rule fails, so that rows first committed under another folder, or a rule
amended after some of its rows, are caught where the file's first commit alone would pass).
A reading that fails is *exploratory*, not *pre-registered* (:func:`label`); a reading labelled
*pre-registered* in ``results/claims.yaml`` that fails is an error.

    python -m lengen.analysis.registration       # exit 1 with one line per failing reading
"""
from __future__ import annotations

import csv
import functools
import os
import subprocess
import sys
from datetime import datetime, timezone

from lengen.provenance import git

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def have_history(repo: str = REPO) -> bool:
    return os.path.exists(os.path.join(repo, ".git"))


def first_commit(path: str, repo: str = REPO) -> str | None:
    """The commit that first added ``path`` (following renames), or None if never committed."""
    out = git(repo, "log", "--format=%H", "--follow", "--", path, check=True).strip().splitlines()
    return out[-1] if out else None


@functools.lru_cache(maxsize=4096)
def strictly_before(a: str, b: str, repo: str = REPO) -> bool:
    """Is commit ``a`` an ancestor of ``b`` and not ``b`` itself?"""
    a, b = (git(repo, "rev-parse", c, check=True).strip() for c in (a, b))
    if a == b:
        return False
    return git(repo, "merge-base", "--is-ancestor", a, b) is not None   # exit 0: ancestor


def commit_time(commit: str, repo: str = REPO) -> datetime:
    """The commit's committer time (timezone-aware)."""
    iso = git(repo, "show", "-s", "--format=%cI", commit, check=True)
    return datetime.fromisoformat(iso.strip())


def row_commits(path: str, repo: str = REPO) -> tuple[tuple[int, str], ...]:
    """(line number, commit) for every line of ``path`` as committed at HEAD, from ``git blame
    --line-porcelain -M -C -C``: the commit that last gave the line its content, following
    moves within the file and copies from other files of the commit that created it."""
    return _row_commits(path, repo, git(repo, "rev-parse", "HEAD", check=True).strip())


@functools.lru_cache(maxsize=256)
def _row_commits(path: str, repo: str, head: str) -> tuple[tuple[int, str], ...]:
    out = git(repo, "blame", "--line-porcelain", "-M", "-C", "-C", head, "--", path, check=True,
              timeout=600)   # copy detection reads the history: slow on a loaded machine
    rows = []
    for line in out.splitlines():
        if line.startswith("\t"):            # the file's own line, never a header
            continue
        parts = line.split()
        if len(parts) >= 3 and len(parts[0]) == 40 and all(c in "0123456789abcdef"
                                                          for c in parts[0]):
            rows.append((int(parts[2]), parts[0]))
    return tuple(rows)


def early_rows(path: str, rule_commit: str, repo: str = REPO) -> dict[str, list[int]]:
    """Commit -> the line numbers of ``path`` (its header, line 1 of a csv, left out) whose
    content comes from that commit when it is not a strict descendant of ``rule_commit``."""
    out: dict[str, list[int]] = {}
    verdict: dict[str, bool] = {}
    skip = 1 if path.endswith(".csv") else 0
    for line, commit in row_commits(path, repo):
        if line <= skip:
            continue
        if commit not in verdict:
            verdict[commit] = strictly_before(rule_commit, commit, repo)
        if not verdict[commit]:
            out.setdefault(commit, []).append(line)
    return out


START = "started_utc"


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def run_starts(files: list[str], repo: str = REPO) -> dict[str, list[datetime]]:
    """Each csv that records run start times -> those times: a data file with a ``started_utc``
    column, and the ``provenance.csv`` beside a data file when it has one. Files without the column
    (every folder committed before provenance.csv existed) give nothing."""
    out: dict[str, list[datetime]] = {}
    candidates = []
    for f in files:
        candidates += [f, os.path.join(os.path.dirname(f), "provenance.csv")]
    for f in dict.fromkeys(candidates):
        path = os.path.join(repo, f)
        if not f.endswith(".csv") or not os.path.exists(path):
            continue
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        times = [_utc(r[START]) for r in rows if (r.get(START) or "").strip()]
        if times:
            out[f] = times
    return out


def data_files(reading: dict) -> list[str]:
    files = []
    for arm in reading["arms"]:
        fs = arm["file"] if isinstance(arm["file"], list) else [arm["file"]]
        files += [os.path.join("results", f) for f in fs]
    return sorted(set(files))


def check_reading(reading: dict, repo: str = REPO) -> list[str]:
    """Problems with one pre-registered reading's order (empty: the rule came first)."""
    rule_file, rule_commit = reading["rule_file"], reading["rule_commit"]
    where = reading["folder"]
    try:
        touched = git(repo, "show", "--format=", "--name-only", rule_commit,
                      check=True).strip().splitlines()
    except subprocess.CalledProcessError:
        return [f"{where}: rule_commit {rule_commit} is not in this repository's history"]
    problems = []
    if rule_file not in touched:
        problems.append(f"{where}: rule_commit {rule_commit} does not touch {rule_file}")
    files = data_files(reading)
    for f in files:
        first = first_commit(f, repo)
        if first is None:
            problems.append(f"{where}: {f} was never committed")
        elif not strictly_before(rule_commit, first, repo):
            problems.append(f"{where}: {f} first committed in {first[:7]}, not after the rule "
                            f"({rule_commit})")
        else:
            early = early_rows(f, rule_commit, repo)
            if early:
                n = sum(len(v) for v in early.values())
                problems.append(f"{where}: {n} row(s) of {f} come from commit(s) not after the "
                                f"rule ({', '.join(c[:7] for c in sorted(early))}; rule "
                                f"{rule_commit})")
    ruled = commit_time(rule_commit, repo)
    for f, times in run_starts(files, repo).items():
        early = [t for t in times if t <= ruled]
        if early:
            problems.append(f"{where}: {len(early)} of {len(times)} run(s) in {f} started before "
                            f"the rule was committed ({min(early).isoformat()} <= "
                            f"{ruled.isoformat()}, {rule_commit})")
    return problems


def label(reading: dict, repo: str = REPO) -> str:
    """What the history shows: ``pre-registered`` when the reading names a rule commit and
    :func:`check_reading` finds nothing, else ``exploratory``."""
    if not (reading.get("rule_commit") and reading.get("rule_file")):
        return "exploratory"
    return "exploratory" if check_reading(reading, repo) else "pre-registered"


def check(claims: list[dict], repo: str = REPO) -> list[str]:
    """Every reading labelled ``pre-registered`` whose rule did not come first (one line each:
    it must be labelled ``exploratory``)."""
    problems = []
    for c in claims:
        for r in c["readings"]:
            if r.get("registration") == "pre-registered":
                problems += [f"{c['id']}: {p} (label it exploratory)"
                             for p in check_reading(r, repo)]
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
