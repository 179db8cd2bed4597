"""train.wandb=true: a tiny run logs offline (WANDB_MODE=offline, WANDB_DIR in tmp_path) and its
offline run directory holds the history (the same scalars as metrics.jsonl at the same steps),
the run's project / name / tags, and the final evaluation rows as a table."""
from __future__ import annotations

import glob
import json
import os
import struct
import sys
import time

import pytest

import lengen
from lengen.errors import ConfigError
from lengen.train.loop import train


def tiny_cfg(**train_kw):
    return lengen.resolve({
        "name": "tiny-wb",
        "model": {"attention": "tra", "d_model": 16, "n_layers": 1, "n_heads": 2},
        "task": {"kwargs": {"n_pairs": 12}},
        "train": dict({"steps": 6, "batch_size": 4, "lr": 3e-3, "warmup_steps": 2,
                       "progress": False, "log_every": 1, "threads": 1}, **train_kw),
        "eval": {"sequences": 16, "batch_size": 8},
    }).config


def wandb_records(path):
    """The protobuf records of an offline ``run-<id>.wandb`` file (W&B's LevelDB-style log:
    a 7-byte header, then 32 KiB blocks of records with a 7-byte header each: crc32c, length,
    type full / first / middle / last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:                          # block trailer: zero padding
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        if pos + 7 + n > len(data):           # a record wandb-core is still writing
            return
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):                    # full, or the last piece of a split record
            r = pb.Record()
            r.ParseFromString(buf)
            buf = b""
            yield r


def finished_records(path, timeout=60.0):
    """The records once the file ends with the run's exit record: W&B's writer is a separate
    process (wandb-core) that may still be flushing when ``finish()`` has returned."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout
    while True:
        try:
            records = list(wandb_records(path))
        except DecodeError:                   # read mid-write (a CI run saw it): read again
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} has no exit record after {timeout} s "
                                 f"({len(records)} records)")
        time.sleep(0.2)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "wb").mkdir()
    return tmp_path / "wb"


def test_offline_run_holds_history_config_and_eval_table(tmp_path, offline):
    run_dir = tmp_path / "run"
    _, _, rows = train(tiny_cfg(wandb=True, wandb_project="lengen-test", wandb_tags=["tra", "ff"],
                                eval_every=3), str(run_dir), quiet=True)
    run_id = json.loads((run_dir / "wandb.json").read_text())["id"]
    runs = glob.glob(str(offline / "wandb" / f"offline-run-*-{run_id}"))
    assert len(runs) == 1, os.listdir(offline / "wandb")
    history, meta = {}, None
    for r in finished_records(os.path.join(runs[0], f"run-{run_id}.wandb")):
        kind = r.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
            history.setdefault(int(items["_step"]), {}).update(items)
        elif kind == "run":
            meta = r.run
    assert meta.project == "lengen-test" and meta.display_name == "tiny-wb"
    assert list(meta.tags) == ["tra", "ff"]
    # the same scalars as metrics.jsonl, at the same steps
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    want: dict[int, dict] = {}
    for rec in logged:
        want.setdefault(rec["step"], {}).update(
            {k: v for k, v in rec.items() if k not in ("step", "time")})
    assert sorted(want) == [1, 2, 3, 4, 5, 6] and "eval/iid/seq_acc" in want[3]
    for step, values in want.items():
        for k, v in values.items():
            assert json.loads(history[step][k]) == pytest.approx(v, rel=1e-12), (step, k)
    # the final evaluation rows as a table
    table = history[6]
    assert json.loads(table["eval/rows/_type"]) == "table-file"
    saved = json.loads(open(os.path.join(runs[0], "files",
                                         json.loads(table["eval/rows/path"]))).read())
    split_col, metric_col, value_col = (saved["columns"].index(c)
                                        for c in ("split", "metric", "value"))
    got = {(d[split_col], d[metric_col]): d[value_col] for d in saved["data"]}
    assert got == {(r["split"], r["metric"]): r["value"] for r in rows}
    assert len(got) == len(rows) > 0


def test_resumed_run_continues_the_same_wandb_run(tmp_path, offline):
    run_dir = str(tmp_path / "run")
    train(tiny_cfg(wandb=True), run_dir, stop_at=3, quiet=True)
    first = json.loads(open(os.path.join(run_dir, "wandb.json")).read())["id"]
    train(tiny_cfg(wandb=True), run_dir, quiet=True)
    assert json.loads(open(os.path.join(run_dir, "wandb.json")).read())["id"] == first
    # one offline directory per process (named by start time and id, "-1" added on a clash),
    # both logging W&B run `first`
    dirs = glob.glob(str(offline / "wandb" / "offline-run-*"))
    assert len(dirs) == 2
    assert all(os.path.isfile(os.path.join(d, f"run-{first}.wandb")) for d in dirs)


def test_missing_wandb_and_bad_settings_are_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)         # as if it were not installed
    with pytest.raises(ConfigError, match=r'pip install "lengen\[wandb\]".*train.wandb=false'):
        lengen.resolve({}, ["train.wandb=true"])
    lengen.resolve({}, ["train.wandb=false"])               # never imported when off
    with pytest.raises(ConfigError, match="train.wandb_tags"):
        lengen.resolve({}, ["train.wandb_tags=[a, a]"])
    with pytest.raises(ConfigError, match="train.wandb_project"):
        lengen.resolve({}, ["train.wandb_project=a/b"])
