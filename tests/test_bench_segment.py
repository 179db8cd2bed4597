"""``experiments/bench-cpu/segment.py``: a baseline part run in segments, on two machines. The
runs one segment finished are kept (without their weights) and restored into a fresh folder; the
same bench command there reads them back (cached, same rows and seconds) and trains only the
rest, so the part's rows equal those of the part run in one go; ``land`` then writes the part
into the card's folder with one ``parts.csv`` row per segment. A kept run the bench would not
read back as it is (another config) is refused, with nothing left behind."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil

import pytest

from lengen.bench.run import BASELINES, run_bench, run_name

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "experiments", "bench-cpu", "segment.py")


def _segment(store):
    spec = importlib.util.spec_from_file_location("segment_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.HERE = str(store)                      # keep into tmp, never into results/
    return mod


def _bench(label, out):
    return run_bench([(label, BASELINES[label])], "smoke", str(out), cells=["addition"],
                     seeds=[0, 1, 2], baselines=None, log=lambda *a: None)


def _write_rows(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _first_segment(seg, label, tmp_path):
    """A whole part, then its later seeds' runs deleted (the segment stopped before them) and
    seed 0's runs kept in two saves of one segment. Returns (the whole part's rows, folder)."""
    first = tmp_path / "first"
    whole = _bench(label, first)     # the part in one go: seed 0 x 3 rates, then seeds 1, 2
    assert len(whole) == 5
    stem = run_name(label, "addition")
    later = [n for n in os.listdir(first) if n.startswith((stem + "--s1--", stem + "--s2--"))]
    assert len(later) == 2
    for n in later:
        shutil.rmtree(first / n)
    s0 = sorted(n for n in os.listdir(first) if n.startswith(stem + "--s0--"))
    assert len(s0) == 3
    aside = tmp_path / "aside"                 # kept once while its last run still trained
    shutil.move(first / s0[-1], aside)
    assert seg.save(str(first), label, start="2026-12-01T09:00:00Z",
                    end="2026-12-01T09:20:00Z", commit="c", label="early", machine="m0") == s0[:2]
    shutil.move(aside, first / s0[-1])
    with pytest.raises(SystemExit, match="started at"):
        seg.save(str(first), label, start="2026-12-01T09:01:00Z", end="2026-12-01T09:30:30Z",
                 commit="c", label="first", machine="m", extend=True)
    with pytest.raises(SystemExit, match="ISO UTC"):
        seg.save(str(first), label, start="2026-12-01T09:00:00Z", end="x", commit="c",
                 label="first", machine="m", extend=True)
    assert seg.save(str(first), label, start="2026-12-01T09:00:00Z",
                    end="2026-12-01T09:30:30Z", commit="c", label="first", machine="m",
                    extend=True) == s0[2:]
    man = seg.read_manifest(label)
    assert len(man["segments"]) == 1 and man["segments"][0]["runs_kept"] == s0
    assert sorted(os.listdir(os.path.join(seg.folder(label), s0[0]))) == sorted(seg.KEPT)
    with pytest.raises(SystemExit, match="not kept already"):
        seg.save(str(first), label, start="2026-12-01T10:00:00Z",
                 end="2026-12-01T10:01:00Z", commit="c", label="again", machine="m")
    return whole, first, s0


@pytest.mark.parametrize("label", ["RoPE", "Rand. RoPE"])      # a label with a space
def test_a_kept_segment_restored_on_another_machine_gives_the_same_rows(tmp_path, label):
    seg = _segment(tmp_path / "store")
    whole, first, kept = _first_segment(seg, label, tmp_path)

    second = tmp_path / "second"               # the next machine: nothing of the first
    second.mkdir()
    with open(first / "runs.csv", newline="") as f:   # an earlier part's rows, kept as they are
        other = [dict(r, variant="Other") for r in csv.DictReader(f) if r["seed"] == "0"]
    _write_rows(second / "runs.csv", other)
    _write_rows(second / "pending.csv", [{"variant": "Later", "cell": "addition"}])
    assert seg.restore(str(second), label, "smoke") == kept
    with pytest.raises(SystemExit, match="exists"):
        seg.restore(str(second), label, "smoke")
    rows = _bench(label, second)
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
    written = seg.land(str(second), label, start="2026-12-02T10:00:00Z",
                       end="2026-12-02T10:41:15Z", commit="d", label="second", machine="m2")
    assert not os.path.exists(seg.folder(label))    # the kept runs leave with the landing
    with open(card / "parts.csv", newline="") as f:
        text = f.read()
    quoted = f"'{label}'" if " " in label else label
    assert text.splitlines()[1:] == [
        f'"{label}, addition (first)",lengen bench --baselines-only {quoted} --cells addition '
        f"--scale cpu --workers 2 --threads 1 --out DIR --baselines none,c,"
        f"2026-12-01T09:00:00Z,2026-12-01T09:30:30Z,30.5,m",
        f'"{label}, addition (second)",lengen bench --baselines-only {quoted} --cells addition '
        f"--scale cpu --workers 2 --threads 1 --out DIR --baselines none,d,"
        f"2026-12-02T10:00:00Z,2026-12-02T10:41:15Z,41.3,m2"]
    assert text.count("\r\n") == 3             # parts.csv's line ends
    configs = sorted(os.listdir(card / "configs"))
    assert len(configs) == 5 and all(c.startswith(run_name(label, "addition")) for c in configs)
    assert str(card / "scorecard.md") in written
    with open(card / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(other) + 5
    with pytest.raises(SystemExit, match="exists"):  # a committed config is never overwritten
        seg.land(str(second), label, start="2026-12-02T10:00:00Z", end="2026-12-02T10:41:15Z",
                 commit="d", label="x", machine="m")


def test_a_kept_run_the_bench_would_not_read_back_is_refused(tmp_path):
    """A kept run whose config is not what this checkout's bench builds (its evaluation
    settings changed since, say) would be evaluated again, and without its weights trained
    again: restore refuses it and leaves nothing in the folder."""
    seg = _segment(tmp_path / "store")
    _, _, kept = _first_segment(seg, "RoPE", tmp_path)
    path = os.path.join(seg.folder("RoPE"), kept[1], "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["eval"]["sequences"] += 1
    with open(path, "w") as f:
        json.dump(cfg, f)
    second = tmp_path / "second"
    second.mkdir()
    with pytest.raises(SystemExit, match=kept[1].replace(".", r"\.") + ": its config"):
        seg.restore(str(second), "RoPE", "smoke")
    assert os.listdir(second) == []


def test_an_unfinished_run_is_kept_from_its_checkpoint_resumed_and_its_seconds_add_up(
        tmp_path):
    """A segment stopped inside a run (Ctrl-C saves a checkpoint): the run is kept from its
    newest checkpoint, resumed by the bench on the next machine, and ends with the rows of
    a run trained in one go; its seconds on the card are both segments' spans."""
    import socket

    from lengen import train
    from lengen.bench.battery import lr_grid
    from lengen.bench.run import build_specs, run_bench_one

    seg = _segment(tmp_path / "store")
    whole = _bench("RoPE", tmp_path / "ref")
    specs, _ = build_specs([("RoPE", BASELINES["RoPE"])], "smoke", cells=["addition"],
                           seeds=[0], lrs={"addition": lr_grid("addition", "smoke")},
                           role="tune")
    first = tmp_path / "first"
    for spec in specs[:2]:
        assert run_bench_one(spec, str(first))["status"] == "done"
    stopped = specs[2].name
    assert train(specs[2].config, str(first / stopped), stop_at=2, quiet=True)[2] is None
    (first / stopped / ".lock").write_text(f"pid {os.getpid()} on {socket.gethostname()}, "
                                           f"training since now")
    with pytest.raises(SystemExit, match="still trains it"):
        seg.save(str(first), "RoPE", start="2026-12-01T09:00:00Z", end="2026-12-01T09:30:00Z",
                 commit="c", label="first", machine="m", unfinished=True)
    (first / stopped / ".lock").unlink()
    kept = seg.save(str(first), "RoPE", start="2026-12-01T09:00:00Z",
                    end="2026-12-01T09:30:00Z", commit="c", label="first", machine="m",
                    unfinished=True)
    assert kept == [s.name for s in specs]
    man = seg.read_manifest("RoPE")
    entry = man["runs"][stopped]
    assert entry["unfinished"] and entry["step"] == 2 and entry["seconds"] >= 0
    assert sorted(os.listdir(os.path.join(seg.folder("RoPE"), stopped, "checkpoints"))) == \
        ["latest", "step_0000002"]
    entry["seconds"] = 100.0                 # a smoke run's span rounds to 0: make it count
    with open(os.path.join(seg.folder("RoPE"), "segment.json"), "w") as f:
        json.dump(man, f)

    second = tmp_path / "second"
    second.mkdir()
    with open(tmp_path / "ref" / "runs.csv", newline="") as f:
        other = [dict(r, variant="Other") for r in csv.DictReader(f) if r["seed"] == "0"]
    _write_rows(second / "runs.csv", other)
    _write_rows(second / "pending.csv", [{"variant": "Later", "cell": "addition"}])
    seg.restore(str(second), "RoPE", "smoke")
    with pytest.raises(SystemExit, match="not kept already"):   # restored, not trained since
        seg.save(str(second), "RoPE", start="2026-12-02T10:00:00Z", end="2026-12-02T10:01:00Z",
                 commit="d", label="x", machine="m", unfinished=True)
    rows = _bench("RoPE", second)
    # the resume rewrote config.json: the bench's seconds for it start there, not at the first
    assert os.stat(second / stopped / "config.json").st_mtime_ns > entry["config_mtime_ns"]
    by = {(r["seed"], r["lr"]): r for r in rows}
    for r in whole:                          # the resumed run equals the one trained in one go
        got = by[(r["seed"], r["lr"])]
        assert {k: v for k, v in got.items() if k != "seconds"} == \
               {k: v for k, v in r.items() if k != "seconds"}
    resumed = next(r for r in rows if run_name("RoPE", "addition", r["seed"], r["lr"])
                   == stopped)

    card = tmp_path / "store"
    (card / "configs").mkdir()
    (card / "curves").mkdir()
    _write_rows(card / "runs.csv", other)
    with open(card / "parts.csv", "w", newline="") as f:
        csv.writer(f).writerow(["part", "command", "lengen_commit", "start_utc", "end_utc",
                                "wall_min", "machine"])
    seg.land(str(second), "RoPE", start="2026-12-02T10:00:00Z", end="2026-12-02T10:10:00Z",
             commit="d", label="second", machine="m2")
    with open(card / "runs.csv", newline="") as f:
        landed_text = f.read()
    with open(second / "runs.csv", newline="") as f:
        bench_text = f.read()
    changed = [(a, b) for a, b in zip(landed_text.split("\r\n"), bench_text.split("\r\n"))
               if a != b]                    # byte for byte but the one seconds cell
    assert len(landed_text.split("\r\n")) == len(bench_text.split("\r\n")) == len(other) + 7
    assert len(changed) == 1 and changed[0][0].startswith("RoPE,addition,0,")
    with open(card / "runs.csv", newline="") as f:
        landed = {run_name(r["variant"], r["cell"], int(r["seed"]), float(r["lr"])): r
                  for r in csv.DictReader(f) if r["variant"] == "RoPE"}
    assert float(landed[stopped]["seconds"]) == round(resumed["seconds"] + entry["seconds"], 1)
    for name in kept[:2]:                    # read back: the bench's seconds, untouched
        assert float(landed[name]["seconds"]) == by[(0, float(name.rsplit("lr", 1)[1]))][
            "seconds"]
