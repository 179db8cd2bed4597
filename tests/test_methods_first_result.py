"""experiments/methods-cpu/first_result.py (issue 52's first result per method): the counted runs
are seed 0 at the rate its validation score chose and the other seeds at that rate, the means are
over the fitted seeds only, a cell whose grid is unfinished is pending, and a bench folder read
from its run folders alone gives the same table as read through its runs.csv."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil

import pytest

from lengen.bench import stats
from lengen.bench.battery import cell_config, lr_grid
from lengen.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def fr():
    path = os.path.join(ROOT, "experiments", "methods-cpu", "first_result.py")
    spec = importlib.util.spec_from_file_location("methods_first_result", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flipflop_run(folder, label, seed, lr, iid, sparse, dense, val):
    name = f"{label}--flipflop--s{seed}--lr{lr:g}"
    d = os.path.join(folder, name)
    os.makedirs(d)
    cfg = cell_config("flipflop", "smoke", seed, lr=lr)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(cfg, name=name), f)
    rows = [{"split": s, "metric": "seq_acc", "value": v, "length": 15}
            for s, v in (("iid", iid), ("sparse", sparse), ("dense", dense))]
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump(rows, f)
    with open(os.path.join(d, "val.json"), "w") as f:
        json.dump({"key": {}, "rows": [{"split": "iid", "metric": "seq_acc", "value": val,
                                        "length": 15}]}, f)


def _copy_run(folder, label, seed, lr, accs, val):
    name = f"{label}--copy--s{seed}--lr{lr:g}"
    d = os.path.join(folder, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(cell_config("copy", "smoke", seed, lr=lr), name=name), f)
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump([{"split": f"len={k}", "metric": "seq_acc", "value": v, "length": 2 * k}
                   for k, v in accs.items()], f)
    with open(os.path.join(d, "val.json"), "w") as f:
        json.dump({"key": {}, "rows": [{"split": "len=2", "metric": "seq_acc", "value": val,
                                        "length": 4}]}, f)


def test_copy_splits_at_the_training_length(tmp_path, fr):
    out = str(tmp_path / "bench")
    accs = {2: 1.0, 3: 0.9, 4: 0.5, 5: 0.3, 6: 0.1}      # smoke copy: trained on 2..3
    for lr in lr_grid("copy", "smoke"):
        _copy_run(out, "PoPE", 0, lr, accs, val=0.5)       # a tie: the cell's default rate
    t = {r["split"]: r for r in fr.table(fr.collect(out, "smoke"), "smoke")}
    assert t["seen"]["mean"] == pytest.approx(0.95) and t["seen"]["fitted_k"] == 1
    assert t["unseen"]["mean"] == pytest.approx(0.3) and t["unseen"]["lo"] != t["unseen"]["lo"]
    assert t["seen"]["lr"] == lr_grid("copy", "smoke")[1] and t["seen"]["n"] == 1


def test_counted_seeds_fitted_means_and_pending_cells(tmp_path, fr):
    out = str(tmp_path / "bench")
    lo, mid, hi = lr_grid("flipflop", "smoke")
    # seed 0 on the grid: the validation score picks the highest rate (its test figures, and
    # those of the other rates, must not decide anything)
    _flipflop_run(out, "Gated_DeltaNet", 0, lo, 1.0, 1.0, 1.0, val=0.90)
    _flipflop_run(out, "Gated_DeltaNet", 0, mid, 1.0, 1.0, 1.0, val=0.91)
    _flipflop_run(out, "Gated_DeltaNet", 0, hi, 0.97, 0.60, 0.20, val=0.99)
    _flipflop_run(out, "Gated_DeltaNet", 1, hi, 0.99, 0.80, 0.40, val=0.99)
    _flipflop_run(out, "Gated_DeltaNet", 2, hi, 0.50, 0.10, 0.00, val=0.50)   # not fitted
    _flipflop_run(out, "Gated_DeltaNet", 1, lo, 1.0, 1.0, 1.0, val=1.0)      # not at the rate
    _flipflop_run(out, "NoPE", 0, lo, 1.0, 1.0, 1.0, val=1.0)   # grid unfinished: pending
    rows = fr.collect(out, "smoke")
    t = {(r["method"], r["split"]): r for r in fr.table(rows, "smoke")}
    assert {m for m, _ in t} == {"Gated DeltaNet"}               # the label, space restored
    sparse = t[("Gated DeltaNet", "sparse")]
    assert (sparse["n"], sparse["fitted_k"], sparse["seeds"]) == (3, 2, "0 1 2")
    assert sparse["lr"] == hi and sparse["fitted_seeds"] == "0 1"
    assert sparse["mean"] == pytest.approx(0.70)
    assert (sparse["lo"], sparse["hi"]) == pytest.approx(stats.bootstrap_mean([0.6, 0.8])[1:])
    assert t[("Gated DeltaNet", "dense")]["mean"] == pytest.approx(0.30)
    assert t[("Gated DeltaNet", "iid")]["all_values"] == "0.9700 0.9900 0.5000"
    fr.write(fr.table(rows, "smoke"), str(tmp_path / "res"))
    md = open(tmp_path / "res" / "table.md").read()
    assert "| Gated DeltaNet | 98.0 [97.0, 99.0] (2/3) | 70.0 [60.0, 80.0] (2/3) |" in md
    got = list(csv.DictReader(open(tmp_path / "res" / "table.csv")))
    assert len(got) == 3 and got[0]["fitted_k"] == "2"


def test_a_folder_read_without_its_runs_csv_gives_the_same_table(tmp_path, fr, capsys):
    out = str(tmp_path / "b")
    assert main(["bench", "--scale", "smoke", "--cells", "flipflop", "copy", "--out", out,
                 "--threads", "1", "--baselines", "none", "--baselines-only", "NoPE"]) == 0
    capsys.readouterr()
    with_csv = fr.table(fr.collect(out, "smoke"), "smoke")
    assert {r["source"] for r in with_csv} == {"runs.csv"}
    assert {(r["cell"], r["split"]) for r in with_csv} == {
        ("flipflop", "iid"), ("flipflop", "sparse"), ("flipflop", "dense"), ("copy", "seen"),
        ("copy", "unseen")}
    assert {r["n"] for r in with_csv} == {2}                   # smoke: 2 seeds
    runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
    for cell, split in (("copy", "unseen"), ("flipflop", "sparse")):
        ood = [float(r["ood"]) for r in sorted(runs, key=lambda r: r["seed"])
               if r["cell"] == cell and r["counted"] == "True"]
        mine = next(r for r in with_csv if (r["cell"], r["split"]) == (cell, split))
        if split == "sparse":                   # the cell's OOD score: mean of sparse, dense
            dense = next(r for r in with_csv if (r["cell"], r["split"]) == (cell, "dense"))
            ood = [2 * o - float(d) for o, d in zip(ood, dense["all_values"].split())]
        assert [float(v) for v in mine["all_values"].split()] == pytest.approx(ood, abs=1e-4)
    bare = str(tmp_path / "bare")
    shutil.copytree(out, bare)
    os.remove(os.path.join(bare, "runs.csv"))
    from_folders = fr.table(fr.collect(bare, "smoke"), "smoke")
    assert {r["source"] for r in from_folders} == {"folder"}
    def strip(rows):                 # nan (no fitted seed) compared as None
        return [{k: (None if v != v else v) for k, v in r.items() if k != "source"}
                for r in rows]

    assert strip(with_csv) == strip(from_folders)
    with pytest.raises(SystemExit, match="training steps"):    # not the scale it ran at
        fr.collect(bare, "cpu")
