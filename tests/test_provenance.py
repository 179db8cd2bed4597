"""Run records (issue 54 item 5): every run directory records the lengen commit it ran, whether
the checkout was dirty and when the run started; a sweep's provenance.csv carries the same columns."""
from __future__ import annotations

import csv
import datetime as dt
import json
import os
import subprocess

import pytest

from lengen import provenance
from lengen.sweep import Grid, run_sweep
from lengen.train import train


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A throwaway git checkout with one commit."""
    root = tmp_path / "src"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / "a.py").write_text("x = 1\n")
    _git(root, "add", "a.py")
    _git(root, "commit", "-q", "-m", "first")
    provenance.is_checkout.cache_clear()
    provenance.source_commit.cache_clear()
    yield root
    provenance.is_checkout.cache_clear()
    provenance.source_commit.cache_clear()


def test_commit_and_dirty_state_of_a_checkout(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert provenance.source_commit(str(repo)) == head
    assert provenance.source_dirty(str(repo)) is False
    (repo / "a.py").write_text("x = 2\n")                   # an uncommitted edit
    assert provenance.source_dirty(str(repo)) is True
    (repo / "a.py").write_text("x = 1\n")
    (repo / "new.py").write_text("")                        # an untracked file is dirty too
    assert provenance.source_dirty(str(repo)) is True


def test_not_a_checkout_gives_the_package_version(repo, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    inner = repo / "pkg"                                    # inside a repo, not its top
    inner.mkdir()
    for root in (plain, inner):
        assert provenance.source_commit(str(root)) == f"version {provenance.package_version()}"
        assert provenance.source_dirty(str(root)) is None


def test_start_record_keeps_the_first_start_on_resume(repo, tmp_path, monkeypatch):
    times = iter(["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00",
                  "2026-01-03T00:00:00+00:00"])
    monkeypatch.setattr(provenance, "utc_now", lambda: next(times))
    run = tmp_path / "run"
    run.mkdir()
    first = provenance.start_record(str(run), 0, str(repo))
    assert first["started_utc"] == "2026-01-01T00:00:00+00:00"
    assert first["lengen_commit"] == _git(repo, "rev-parse", "HEAD")
    (run / provenance.RECORD_NAME).write_text(json.dumps(first))
    resumed = provenance.start_record(str(run), 40, str(repo))
    assert resumed["started_utc"] == first["started_utc"]          # the run's start is kept
    assert [s["step"] for s in resumed["starts"]] == [0, 40]
    (run / provenance.RECORD_NAME).write_text(json.dumps(resumed))
    again = provenance.start_record(str(run), 0, str(repo))       # a restart from step 0
    assert again["started_utc"] == "2026-01-03T00:00:00+00:00" and len(again["starts"]) == 1


TINY = {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"kwargs": {"n_pairs": 6}},
        "train": {"steps": 4, "batch_size": 4, "warmup_steps": 0, "log_every": 2,
                  "ckpt_every": 2, "progress": False},
        "eval": {"sequences": 8, "batch_size": 8}}


def _utc(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text)
    assert t.utcoffset() == dt.timedelta(0), text
    return t


def test_train_writes_the_record_and_a_resume_appends(tmp_path):
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    run = str(tmp_path / "run")
    train(TINY, run, stop_at=2, quiet=True)
    with open(os.path.join(run, provenance.RECORD_NAME)) as f:
        rec = json.load(f)
    assert _utc(rec["started_utc"]) >= before
    assert rec["lengen_commit"] == provenance.source_commit()
    assert rec["lengen_dirty"] == provenance.source_dirty()
    assert rec["machine"] == provenance.machine()
    assert "torch " in rec["machine"] and "cpu kernels" in rec["machine"]
    train(TINY, run, quiet=True)                                   # resume to the end
    with open(os.path.join(run, provenance.RECORD_NAME)) as f:
        resumed = json.load(f)
    assert resumed["started_utc"] == rec["started_utc"]
    assert [s["step"] for s in resumed["starts"]] == [0, 2]


def test_a_sweep_writes_runs_csv_with_each_runs_record(tmp_path):
    out = str(tmp_path / "sw")
    grid = Grid(TINY, axes={"train.seed": [0, 1]}, name="s{seed}")
    run_sweep(grid, out, log=None)
    with open(os.path.join(out, "provenance.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["s0", "s1"] and [r["seed"] for r in rows] == ["0", "1"]
    for r in rows:
        with open(os.path.join(out, r["run"], provenance.RECORD_NAME)) as f:
            rec = json.load(f)
        assert r["status"] == "done"
        assert r["started_utc"] == rec["started_utc"] and _utc(r["started_utc"])
        assert r["lengen_commit"] == rec["lengen_commit"] == provenance.source_commit()
    assert _utc(rows[0]["started_utc"]) <= _utc(rows[1]["started_utc"])
    run_sweep(grid, out, log=None)                                  # cached: same records
    with open(os.path.join(out, "provenance.csv")) as f:
        again = list(csv.DictReader(f))
    assert [r["status"] for r in again] == ["cached", "cached"]
    assert [r["started_utc"] for r in again] == [r["started_utc"] for r in rows]
