"""``results/bench-cpu/v3/segment.py``: a baseline part run in segments, on two machines. The
runs one segment finished are kept (without their weights) and restored into a fresh folder; the
same bench command there reads them back (cached, same rows and seconds) and trains only the
rest, so the part's rows equal those of the part run in one go; ``land`` then writes the part
into the card's folder with one ``parts.csv`` row per segment."""
from __future__ import annotations

import csv
import importlib.util
import os
import shutil

import pytest

from lengen.bench.run import BASELINES, run_bench

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "results", "bench-cpu", "v3",
                      "segment.py")


def _segment(store):
    spec = importlib.util.spec_from_file_location("segment_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.HERE = str(store)                      # keep into tmp, never into results/
    return mod


def _bench(out):
    return run_bench([("RoPE", BASELINES["RoPE"])], "smoke", str(out), cells=["addition"],
                     seeds=[0, 1, 2], baselines=None, log=lambda *a: None)


def _write_rows(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_a_kept_segment_restored_on_another_machine_gives_the_same_rows(tmp_path):
    seg = _segment(tmp_path / "store")
    first = tmp_path / "first"
    whole = _bench(first)            # the part in one go: seed 0 x 3 rates, then seeds 1, 2
    assert len(whole) == 5
    later = [n for n in os.listdir(first) if n.startswith(("RoPE--addition--s1--",
                                                           "RoPE--addition--s2--"))]
    assert len(later) == 2
    for n in later:                            # the segment stopped before seeds 1 and 2
        shutil.rmtree(first / n)

    s0 = sorted(n for n in os.listdir(first) if "--s0--" in n)
    aside = tmp_path / "aside"                 # kept once while its last run still trained
    shutil.move(first / s0[-1], aside)
    assert seg.save(str(first), "RoPE", start="2026-12-01T09:00:00Z",
                    end="2026-12-01T09:20:00Z", commit="c", label="early", machine="m0") == s0[:2]
    shutil.move(aside, first / s0[-1])
    with pytest.raises(SystemExit, match="started at"):
        seg.save(str(first), "RoPE", start="2026-12-01T09:01:00Z", end="x", commit="c",
                 label="first", machine="m", extend=True)
    kept = seg.save(str(first), "RoPE", start="2026-12-01T09:00:00Z",
                    end="2026-12-01T09:30:30Z", commit="c", label="first", machine="m",
                    extend=True)
    assert kept == s0[2:]
    kept = seg.read_manifest("RoPE")["segments"][0]["runs_kept"]
    assert kept == s0 and len(seg.read_manifest("RoPE")["segments"]) == 1
    store = tmp_path / "store" / "segments" / "RoPE"
    assert sorted(os.listdir(store / kept[0])) == sorted(seg.KEPT)    # no weights kept
    with pytest.raises(SystemExit, match="not kept already"):
        seg.save(str(first), "RoPE", start="a", end="b", commit="c", label="again", machine="m")

    second = tmp_path / "second"               # the next machine: nothing of the first
    second.mkdir()
    with open(first / "runs.csv", newline="") as f:   # an earlier part's rows, kept as they are
        other = [dict(r, variant="Other") for r in csv.DictReader(f) if r["seed"] == "0"]
    _write_rows(second / "runs.csv", other)
    _write_rows(second / "pending.csv", [{"variant": "Later", "cell": "addition"}])
    assert seg.restore(str(second), "RoPE") == kept
    with pytest.raises(SystemExit, match="exists"):
        seg.restore(str(second), "RoPE")
    rows = _bench(second)
    by = {(r["seed"], r["lr"]): r for r in rows}
    assert set(by) == {(r["seed"], r["lr"]) for r in whole}
    for r in whole:
        got = by[(r["seed"], r["lr"])]
        if r["seed"] == 0:                     # read back: every column, seconds included
            assert got == r
        else:                                  # trained again, same seed: same numbers
            assert {k: v for k, v in got.items() if k != "seconds"} == \
                   {k: v for k, v in r.items() if k != "seconds"}
    for name in kept:                          # read back, not retrained: still no weights
        assert not os.path.exists(second / name / "model.safetensors")

    card = tmp_path / "store"                  # the committed card folder, before the part
    (card / "configs").mkdir()
    (card / "curves").mkdir()
    _write_rows(card / "runs.csv", other)
    with open(card / "parts.csv", "w", newline="") as f:
        csv.writer(f).writerow(["part", "command", "lengen_commit", "start_utc", "end_utc",
                                "wall_min", "machine"])
    written = seg.land(str(second), "RoPE", start="2026-12-02T10:00:00Z",
                       end="2026-12-02T10:41:15Z", commit="d", label="second", machine="m2")
    assert not os.path.exists(store)           # the kept runs leave with the landing
    with open(card / "parts.csv", newline="") as f:
        parts = list(csv.DictReader(f))
    assert [(p["part"], p["wall_min"]) for p in parts] == [
        ("RoPE, addition (first)", "30.5"), ("RoPE, addition (second)", "41.3")]
    assert len(os.listdir(card / "configs")) == 5 and str(card / "scorecard.md") in written
    with open(card / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(other) + 5
    with pytest.raises(SystemExit, match="exists"):  # a committed config is never overwritten
        seg.land(str(second), "RoPE", start="a", end="b", commit="d", label="x", machine="m")
