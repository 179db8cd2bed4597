"""lengen.analysis.registration on a throwaway git history (issue 54 item 5): a reading is
pre-registered only when its rule was committed before its data, and, where the data record run
start times (provenance.csv's started_utc), before every run started."""
from __future__ import annotations

import os
import subprocess

import pytest

from lengen.analysis import registration

RULE = "results/f/README.md"


def _git(root, *args, when=None):
    env = dict(os.environ)
    if when:
        env.update(GIT_COMMITTER_DATE=when, GIT_AUTHOR_DATE=when)
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def _commit(root, files: dict, when: str) -> str:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        _git(root, "add", name)
    _git(root, "commit", "-q", "-m", "x", when=when)
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    _commit(root, {"x.txt": "start\n"}, "2026-01-01T00:00:00+00:00")
    return root


def _reading(rule_commit):
    return {"folder": "f", "registration": "pre-registered", "rule_file": RULE,
            "rule_commit": rule_commit,
            "arms": [{"label": "A", "file": "f/scores.csv"}, {"label": "B", "file": "f/scores.csv"}]}


SCORES = "seed,score\n0,1.0\n1,2.0\n"


def _runs(*starts):
    return "run,seed,started_utc\n" + "".join(f"s{i},{i},{t}\n" for i, t in enumerate(starts))


def test_rule_then_runs_then_data_is_pre_registered(repo):
    rule = _commit(repo, {RULE: "rule: B above A\n"}, "2026-01-02T00:00:00+00:00")
    _commit(repo, {"results/f/scores.csv": SCORES,
                   "results/f/provenance.csv": _runs("2026-01-02T01:00:00+00:00",
                                               "2026-01-02T02:00:00Z")},
            "2026-01-03T00:00:00+00:00")
    r = _reading(rule)
    assert registration.check_reading(r, str(repo)) == []
    assert registration.label(r, str(repo)) == "pre-registered"


def test_a_run_started_before_the_rule_makes_it_exploratory(repo):
    rule = _commit(repo, {RULE: "rule: B above A\n"}, "2026-01-02T00:00:00+00:00")
    # the results are committed after the rule, but one run started before it was written
    _commit(repo, {"results/f/scores.csv": SCORES,
                   "results/f/provenance.csv": _runs("2026-01-01T23:00:00+00:00",
                                               "2026-01-02T02:00:00+00:00")},
            "2026-01-03T00:00:00+00:00")
    r = _reading(rule)
    problems = registration.check_reading(r, str(repo))
    assert len(problems) == 1 and "1 of 2 run(s) in results/f/provenance.csv started before" in \
        problems[0], problems
    assert registration.label(r, str(repo)) == "exploratory"
    claims = [{"id": "c", "readings": [r]}]
    assert registration.check(claims, str(repo))[0].endswith("(label it exploratory)")
    # labelled exploratory, the same reading is no error
    assert registration.check([{"id": "c", "readings": [dict(r, registration="exploratory")]}],
                              str(repo)) == []


def test_start_times_in_the_data_file_itself_count_too(repo):
    rule = _commit(repo, {RULE: "rule\n"}, "2026-01-02T00:00:00+00:00")
    _commit(repo, {"results/f/scores.csv": "seed,score,started_utc\n0,1.0,2026-01-01T12:00:00\n"
                   "1,2.0,2026-01-02T12:00:00\n"}, "2026-01-03T00:00:00+00:00")
    problems = registration.check_reading(_reading(rule), str(repo))
    assert any("in results/f/scores.csv started before" in p for p in problems), problems


def test_rule_and_data_in_one_commit_or_data_first_fail(repo):
    both = _commit(repo, {RULE: "rule\n", "results/f/scores.csv": SCORES},
                   "2026-01-02T00:00:00+00:00")
    assert any("not after the rule" in p
               for p in registration.check_reading(_reading(both), str(repo)))
    later = _commit(repo, {RULE: "rule, restated\n"}, "2026-01-03T00:00:00+00:00")
    assert any("not after the rule" in p
               for p in registration.check_reading(_reading(later), str(repo)))


def test_a_rule_commit_that_does_not_touch_the_rule_file(repo):
    other = _commit(repo, {"results/f/notes.md": "n\n"}, "2026-01-02T00:00:00+00:00")
    _commit(repo, {"results/f/scores.csv": SCORES}, "2026-01-03T00:00:00+00:00")
    problems = registration.check_reading(_reading(other), str(repo))
    assert len(problems) == 1 and "does not touch" in problems[0], problems
    assert "not in this repository's history" in registration.check_reading(
        _reading("0" * 40), str(repo))[0]


def test_no_rule_commit_is_exploratory(repo):
    assert registration.label({"folder": "f", "arms": []}, str(repo)) == "exploratory"


def test_rows_committed_before_the_rule_under_another_folder_fail(repo):
    # audit #22: the data file is new after the rule, but its rows were committed earlier in
    # another folder (copied in with one new row): its first commit alone would pass
    def rows(seeds):     # rows as long as a real csv's (git blame's copy detection needs them)
        return "".join(f"fire-lr0.003-st8000-d64-L2-b128-s{s},fire,{s},96.3,100.0,32.4,True\n"
                       for s in seeds)
    head = "run,setting,seed,em_1_10,em_6_10,ood,fits\n"
    _commit(repo, {"results/old/scores.csv": head + rows([0, 1])}, "2026-01-02T00:00:00+00:00")
    rule = _commit(repo, {RULE: "rule\n"}, "2026-01-03T00:00:00+00:00")
    # unlike the old file (no rename): the old rows among many new ones
    _commit(repo, {"results/f/scores.csv": head + rows(range(2, 8)) + rows([0, 1])},
            "2026-01-04T00:00:00+00:00")
    assert registration.strictly_before(rule, registration.first_commit(
        "results/f/scores.csv", str(repo)), str(repo))          # the first-commit check passes
    problems = registration.check_reading(_reading(rule), str(repo))
    assert len(problems) == 1 and "2 row(s) of results/f/scores.csv come from commit(s) not " \
        "after the rule" in problems[0], problems


def test_a_rule_amended_after_some_rows_fails(repo):
    _commit(repo, {RULE: "rule\n"}, "2026-01-02T00:00:00+00:00")
    _commit(repo, {"results/f/scores.csv": SCORES}, "2026-01-03T00:00:00+00:00")
    amended = _commit(repo, {RULE: "rule, amended: seed 2 too\n"}, "2026-01-04T00:00:00+00:00")
    # the amendment's reading: its file was first committed before it, and so were its rows
    _commit(repo, {"results/f/more.csv": "seed,score\n2,3.0\n"}, "2026-01-05T00:00:00+00:00")
    r = dict(_reading(amended), arms=[{"label": "A", "file": "f/more.csv"},
                                      {"label": "B", "file": "f/scores.csv"}])
    problems = registration.check_reading(r, str(repo))
    assert any("f/scores.csv first committed" in p for p in problems), problems
    # rows appended to an old file after the amendment pass; the rows before it do not
    _commit(repo, {"results/f/more.csv": "seed,score\n2,3.0\n3,4.0\n"}, "2026-01-06T00:00:00+00:00")
    assert registration.early_rows("results/f/more.csv", amended, str(repo)) == {}
    early = registration.early_rows("results/f/scores.csv", amended, str(repo))
    assert sum(len(v) for v in early.values()) == 2
