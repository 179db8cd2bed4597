"""``lengen bench --export``: a finished bench folder becomes the card folder a contributor sends
(results/bench-cpu/README.md, "Contributing a variant's card"), with every run's config, every
run's provenance and a README whose numbers the number check accepts; bad input is refused with
nothing written. The bench here is a smoke one made as a user would: in two parts into one
folder (so the folder's own provenance.csv holds only the second part's runs), with an n/a cell
and a fit search."""
from __future__ import annotations

import csv
import json
import os
import shutil

import pytest

from lengen import provenance
from lengen.analysis.numbers import check_readme
from lengen.bench import export as ex
from lengen.bench.battery import VERSION
from lengen.bench.export import FILL, export_card
from lengen.cli import main
from lengen.errors import ConfigError


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b"
    common = ["--scale", "smoke", "--out", str(out), "--threads", "1", "--baselines", "none",
              "--seeds", "0", "1"]
    # part 1: flip-flop; part 2: copy, and even pairs where TRA (decoder only) is n/a
    assert main(["bench", "--variant", "name=Mamba-2ish model.posenc=rope", "--variant",
                 "name=tra model.attention=tra", "--cells", "flipflop"] + common) == 0
    assert main(["bench", "--variant", "name=tra model.attention=tra",
                 "--cells", "copy", "even_pairs"] + common) == 0
    assert main(["bench", "--fit-search", "--variant", "name=tra model.attention=tra",
                 "--cells", "copy", "--scale", "smoke", "--out", str(out), "--threads",
                 "1"]) == 0
    return out


def _runs(folder):
    return list(csv.DictReader(open(os.path.join(folder, "runs.csv"))))


def test_export_copies_the_bench_files_and_every_runs_config(bench, tmp_path, capsys):
    dest = tmp_path / "contrib" / "mine"
    assert main(["bench", "--export", str(dest), "--out", str(bench)]) == 0
    assert "complete the FILL: lines" in capsys.readouterr().out
    for f in ("runs.csv", "fit_search.csv", "scorecard.md", "scorecard.csv", "scorecard.json",
              "scorecard.png"):
        assert (dest / f).read_bytes() == (bench / f).read_bytes()
    assert sorted(os.listdir(dest / "curves")) == sorted(os.listdir(bench / "curves"))
    rows = _runs(dest)
    assert ("tra", "even_pairs", "n/a") in {(r["variant"], r["cell"], r["status"]) for r in rows}
    runs = sorted(r.name for r in bench.iterdir() if (r / "config.json").is_file())
    fits = sorted(r.name for r in (bench / "fit-search").iterdir()
                  if (r / "config.json").is_file())
    assert len(runs) == sum(r["status"] != "n/a" for r in rows) == 3 * (3 + 1) and fits
    assert sorted(os.listdir(dest / "configs")) == sorted([r + ".json" for r in runs]
                                                          + ["fit-search"])
    assert sorted(os.listdir(dest / "configs" / "fit-search")) == [f + ".json" for f in fits]
    for r in runs:
        assert (dest / "configs" / (r + ".json")).read_bytes() == \
            (bench / r / "config.json").read_bytes()
    # every run's provenance, though the folder's own provenance.csv has the last part's only
    own = {p["run"] for p in csv.DictReader(open(bench / "provenance.csv"))}
    prov = list(csv.DictReader(open(dest / "provenance.csv")))
    assert sorted(p["run"] for p in prov) == sorted(runs + fits) and not own >= set(runs)
    assert all(p["lengen_commit"] and p["lengen_dirty"] in ("True", "False") for p in prov)
    assert all(p["machine"] == provenance.machine() for p in prov)
    text = (dest / "README.md").read_text()
    assert text.count(FILL) == 3          # what only the contributor knows, and the note
    assert f"battery v{VERSION}, scale smoke, protocol full;" in text and "`Mamba-2ish`" in text
    assert f"{len(runs)} <!--" in text and f"{len(fits)} <!--" in text
    # its numbers are tied to the files beside it, so the number check passes as it is
    assert check_readme(str(dest / "README.md"), baseline={}) == []


def test_a_failed_run_and_a_run_without_provenance_are_exported_as_they_are(bench, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(bench, src)
    rows = _runs(src)
    victim = next(r for r in rows if r["variant"] == "tra" and r["cell"] == "copy"
                  and r["seed"] == "1")
    victim.update(status="failed", fitted="", reason="RuntimeError: stopped before the start")
    with open(src / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    name = f"tra--copy--s1--lr{float(victim['lr']):g}"
    shutil.rmtree(src / name)                        # it failed before writing anything
    os.remove(next(p for p in (src / "fit-search").glob("*/provenance.json")))
    export_card(str(src), str(tmp_path / "out"), log=None)
    assert not (tmp_path / "out" / "configs" / (name + ".json")).exists()
    prov = {p["run"]: p for p in csv.DictReader(open(tmp_path / "out" / "provenance.csv"))}
    assert prov[name]["lengen_commit"] == ""
    text = (tmp_path / "out" / "README.md").read_text()
    assert text.count(FILL) == 4 and "run(s) whose folder has no `provenance.json`" in text
    assert check_readme(str(tmp_path / "out" / "README.md"), baseline={}) == []


def test_export_refuses_what_it_cannot_make_whole_and_writes_nothing(bench, tmp_path, capsys,
                                                                     monkeypatch):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    assert main(["bench", "--export", str(full), "--out", str(bench)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert os.listdir(full) == ["mine.txt"]
    assert main(["bench", "--export", str(tmp_path / "x"), "--out", str(bench),
                 "--variant", "model.posenc=rope", "--estimate"]) == 2
    assert "trains nothing; it takes no --variant, --estimate" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    # a finished run without its config: no card that could not be rerun is made
    broken = tmp_path / "broken"
    shutil.copytree(bench, broken)
    os.remove(broken / "tra--copy--s0--lr0.001" / "config.json")
    with pytest.raises(ConfigError, match="1 run.*have no config.json"):
        export_card(str(broken), str(tmp_path / "out"), log=None)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="no such file"):
        export_card(str(tmp_path / "nothing"), str(tmp_path / "out2"), log=None)
    # a failure while copying removes the half-built folder and leaves DEST absent
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ex.shutil, "copytree", boom)
    with pytest.raises(OSError, match="disk full"):
        export_card(str(bench), str(tmp_path / "out3"), log=None)
    assert not (tmp_path / "out3").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".export-")]
    monkeypatch.undo()
    # an empty destination folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = export_card(str(bench), str(empty), log=None)
    assert paths[0] == str(empty / "README.md") and (empty / "runs.csv").is_file()
    assert json.load(open(empty / "scorecard.json"))
