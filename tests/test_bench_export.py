"""``lengen bench --export``: a finished bench folder becomes the card folder a contributor sends
(results/bench-cpu/README.md, "Contributing a variant's card"), with every run's config, the
provenance and a README whose numbers the number check accepts; bad input is refused with
nothing written."""
from __future__ import annotations

import csv
import os

import pytest

from lengen.analysis.numbers import check_readme
from lengen.bench.export import FILL, export_card
from lengen.cli import main
from lengen.errors import ConfigError


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b"
    assert main(["bench", "--scale", "smoke", "--variant", "name=mine model.posenc=rope",
                 "--cells", "flipflop", "copy", "--seeds", "0", "1", "--out", str(out),
                 "--threads", "1", "--baselines", "none"]) == 0
    return out


def test_export_copies_the_bench_files_and_every_runs_config(bench, tmp_path, capsys):
    dest = tmp_path / "contrib" / "mine"
    assert main(["bench", "--export", str(dest), "--out", str(bench)]) == 0
    assert "complete the FILL: lines" in capsys.readouterr().out
    for f in ("runs.csv", "scorecard.md", "scorecard.csv", "scorecard.json", "scorecard.png"):
        assert (dest / f).read_bytes() == (bench / f).read_bytes()
    assert sorted(os.listdir(dest / "curves")) == sorted(os.listdir(bench / "curves"))
    rows = list(csv.DictReader(open(dest / "runs.csv")))
    runs = sorted(r.name for r in bench.iterdir() if (r / "config.json").is_file())
    assert len(runs) == len(rows) == 2 * (3 + 1)           # 2 cells x (3 rates + 1 seed)
    assert sorted(os.listdir(dest / "configs")) == [r + ".json" for r in runs]
    for r in runs:
        assert (dest / "configs" / (r + ".json")).read_bytes() == \
            (bench / r / "config.json").read_bytes()
    prov = list(csv.DictReader(open(dest / "provenance.csv")))
    assert sorted(p["run"] for p in prov) == runs and all(p["lengen_commit"] for p in prov)
    text = (dest / "README.md").read_text()
    assert text.count(FILL) == 3          # what only the contributor knows, and the note
    assert "battery v2, scale smoke, protocol full" in text and "cells flipflop, copy" in text
    # its numbers are tied to the files beside it, so the number check passes as it is
    assert check_readme(str(dest / "README.md"), baseline={}) == []


def test_export_refuses_what_it_cannot_make_whole_and_writes_nothing(bench, tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    assert main(["bench", "--export", str(full), "--out", str(bench)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert os.listdir(full) == ["mine.txt"]
    # a run directory without its config: no card could be checked, so none is written
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(bench, broken)
    os.remove(broken / "mine--copy--s1--lr0.001" / "config.json")
    with pytest.raises(ConfigError, match="1 run.*have no config.json"):
        export_card(str(broken), str(tmp_path / "out"), log=None)
    assert not (tmp_path / "out").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".export-")]
    with pytest.raises(ConfigError, match="no such file"):
        export_card(str(tmp_path / "nothing"), str(tmp_path / "out2"), log=None)
    # an empty destination folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = export_card(str(bench), str(empty), log=None)
    assert paths[0] == str(empty / "README.md") and (empty / "runs.csv").is_file()
