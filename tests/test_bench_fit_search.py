"""lengen bench --fit-search: the pre-registered budget ladder (battery.FIT_LADDER) runs only for
the (variant, cell) pairs with no fitted run, on the protocol's first seed, stops a pair at its
first fitted rung, writes fit_search.csv, resumes without rerunning finished rungs, and the card
names what was tried in a footnote (and is unchanged without fit_search.csv). Runs are
constructed or come from a monkeypatched sweep, except one smoke-scale search from the CLI."""
from __future__ import annotations

import csv
import json
import os

import pytest

import lengen.bench.fit_search as fs
from lengen.bench.battery import (FIT_LADDER, VERSION, cell_config, default_steps, fit_rung,
                                  fit_rung_cost, lr_grid)
from lengen.bench.scorecard import (FIT_FIELDS, RUN_FIELDS, SUMMARY_FIELDS, compare_cards,
                                    read_fit_search, read_runs, write_card)
from lengen.cli import main
from lengen.errors import ConfigError
from lengen.sweep import SweepResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _row(variant, cell, seed, lr, *, fitted=False, val=0.3, role="tune", counted=None,
         status=None, scale="smoke", protocol="full"):
    status = status or ("ok" if fitted else "not fitted")
    return {"variant": variant, "cell": cell, "seed": seed, "lr": lr, "lr_factor": 1.0,
            "role": role, "counted": counted if counted is not None else role == "final",
            "selected_lr": lr, "status": status, "fitted": fitted if status != "failed" else
            None, "seen": 0.99 if fitted else 0.3, "val": val, "ood": 0.1,
            "curve": json.dumps({"iid": 0.3} if cell == "flipflop" else {"3": 0.99, "12": 0.1}),
            "steps": default_steps(cell, scale),
            "seconds": 1.0, "scale": scale, "protocol": protocol, "bench_version": VERSION,
            "reason": ""}


def _pair(variant, cell, vals=(0.3, 0.5, 0.4), *, fitted=(False, False, False),
          scale="smoke", **kw):
    """The protocol's rows of a pair: seed 0 at the three rates (validation ``vals``), then
    seed 1 at the rate with the best validation score."""
    grid = lr_grid(cell, scale)
    best = grid[vals.index(max(vals))]
    rows = [_row(variant, cell, 0, lr, val=v, fitted=f, scale=scale, counted=lr == best, **kw)
            for lr, v, f in zip(grid, vals, fitted)]
    return rows + [_row(variant, cell, 1, best, role="final", scale=scale, **kw)]


def _write(path, rows, fields=RUN_FIELDS):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def test_the_ladder_is_written_once_with_its_cost():
    assert [r[0] for r in FIT_LADDER] == ["lr-wide", "steps-x2", "steps-x4"]
    assert fit_rung("lr-wide")[1] == (0.25, 4.0) and fit_rung("steps-x4")[2] == 4
    assert [fit_rung_cost(r[0]) for r in FIT_LADDER] == [2, 2, 4]
    with pytest.raises(ConfigError, match="unknown fit-search rung 'x8'. Valid: lr-wide, "
                                          "steps-x2, steps-x4"):
        fit_rung("x8")
    base = cell_config("flipflop", "cpu")["train"]
    long = cell_config("flipflop", "cpu", steps=4 * base["steps"])["train"]
    assert long["steps"] == 10_000 and long["ckpt_every"] == 2000 and base["ckpt_every"] == 500
    assert {k: v for k, v in long.items() if k not in ("steps", "ckpt_every")} == {
        k: v for k, v in base.items() if k not in ("steps", "ckpt_every")}
    assert cell_config("reverse_string", "cpu", steps=12_000)["train"]["steps"] == 12_000
    with pytest.raises(ConfigError, match="steps must be a positive integer"):
        cell_config("copy", "cpu", steps=0)


def test_only_pairs_without_a_fitted_run_are_searched():
    runs = (_pair("NoPE", "flipflop")                                   # searched
            + _pair("NoPE", "copy", fitted=(True, True, True))           # fitted
            + _pair("NoPE", "even_pairs", fitted=(False, False, True))   # a tune run fitted
            + [_row("NoPE", "reverse", s, 1e-3, status="failed") for s in (0, 1)]
            + [{"variant": "TRA", "cell": "even_pairs", "status": "n/a", "reason": "causal"}]
            + _pair("TRA", "flipflop"))
    logs = []
    pairs = fs.unfitted_pairs(runs, ["NoPE", "TRA"], ["flipflop", "copy", "even_pairs",
                                                      "reverse"], log=logs.append)
    assert [(p["variant"], p["cell"], p["seed"]) for p in pairs] == [
        ("NoPE", "flipflop", 0), ("TRA", "flipflop", 0)]
    assert [r["lr"] for r in pairs[0]["base"]] == lr_grid("flipflop", "smoke")   # seed 0 only
    assert any("NoPE / reverse: every run failed" in ln for ln in logs)
    with pytest.raises(ConfigError, match="extends the full protocol"):
        fs.unfitted_pairs(_pair("NoPE", "copy", protocol="quick"), ["NoPE"], ["copy"])


def test_rung_rates_extend_the_grid_then_take_the_best_validation_rate():
    pair = {"variant": "NoPE", "cell": "flipflop",
            "base": _pair("NoPE", "flipflop", vals=(0.3, 0.5, 0.4))[:3]}
    assert fs.rung_rates(fit_rung("lr-wide"), pair, "cpu", []) == [2.5e-4, 4e-3]
    assert fs.rung_rates(fit_rung("steps-x2"), pair, "cpu", []) == [1e-3]
    wide = [dict(_row("NoPE", "flipflop", 0, 4e-3, val=0.9), steps=4, rung="lr-wide")]
    assert fs.rung_rates(fit_rung("steps-x2"), pair, "smoke", wide) == [4e-3]
    # a longer run's validation score is not a rate's score at the protocol's steps
    longer = [dict(wide[0], steps=8)]
    assert fs.rung_rates(fit_rung("steps-x4"), pair, "smoke", longer) == [1e-3]


def _fake_sweep(fits, calls):
    """A run_sweep that trains nothing: a run fits where ``fits(variant, cell, steps, lr)``;
    its validation score grows with the learning rate (4e-3: 0.9, above the grid's 0.5)."""
    def sweep(specs, out, **kw):
        calls.append([s.name for s in specs])
        results = {}
        for s in specs:
            t, steps = s.tags, s.config["train"]["steps"]
            ok = fits(t["variant"], t["cell"], steps, t["lr"])
            acc = 0.99 if ok else 0.3
            rows = [{"split": k, "metric": "seq_acc", "value": acc if k == "iid" else 0.5}
                    for k in ("iid", "sparse", "dense")]
            rows.append({"split": "val:iid", "metric": "seq_acc", "value": 0.5 + 100 * t["lr"]})
            results[s.name] = {"name": s.name, "tags": t, "status": "done", "rows": rows,
                               "seconds": 2.0, "pid": 0, "error": None, "traceback": None,
                               "record": {"lengen_commit": "abcdef0123"}}
        return SweepResult(specs, results, out)
    return sweep


def _fit_runs(tmp_path, pairs=(("NoPE", "flipflop"), ("RoPE", "flipflop"))):
    out = str(tmp_path / "bench")
    rows = [r for v, c in pairs for r in _pair(v, c)]
    _write(os.path.join(out, "runs.csv"), rows)
    return out


VARIANTS = [("NoPE", []), ("RoPE", ["model.posenc=rope"])]


def test_the_ladder_stops_at_the_first_fitted_rung_and_writes_fit_search_csv(tmp_path,
                                                                            monkeypatch):
    out = _fit_runs(tmp_path)
    calls = []
    # RoPE fits at twice the steps; NoPE never
    monkeypatch.setattr(fs, "run_sweep", _fake_sweep(
        lambda v, c, steps, lr: v == "RoPE" and steps >= 8, calls))
    rows = fs.run_fit_search(VARIANTS, "smoke", out, cells=["flipflop"], baselines=None,
                             log=None)
    assert calls == [
        ["NoPE--flipflop--s0--lr0.00025--steps4", "NoPE--flipflop--s0--lr0.004--steps4",
         "RoPE--flipflop--s0--lr0.00025--steps4", "RoPE--flipflop--s0--lr0.004--steps4"],
        # the best validation rate at the protocol's steps: lr-wide's 4e-3 (0.9)
        ["NoPE--flipflop--s0--lr0.004--steps8", "RoPE--flipflop--s0--lr0.004--steps8"],
        ["NoPE--flipflop--s0--lr0.004--steps16"]]                # RoPE stopped at steps-x2
    got = read_fit_search(out)
    assert [(r["variant"], r["rung"], r["steps"], r["lr"], r["fitted"]) for r in got] == [
        (r["variant"], r["rung"], r["steps"], r["lr"], r["fitted"]) for r in rows] == [
        ("NoPE", "lr-wide", 4, 2.5e-4, False), ("NoPE", "lr-wide", 4, 4e-3, False),
        ("RoPE", "lr-wide", 4, 2.5e-4, False), ("RoPE", "lr-wide", 4, 4e-3, False),
        ("NoPE", "steps-x2", 8, 4e-3, False), ("RoPE", "steps-x2", 8, 4e-3, True),
        ("NoPE", "steps-x4", 16, 4e-3, False)]
    header = next(csv.reader(open(os.path.join(out, "fit_search.csv"))))
    assert header == FIT_FIELDS
    assert {(r["seed"], r["commit"], r["bench_version"], r["scale"]) for r in got} == {
        (0, "abcdef0", VERSION, "smoke")}
    assert all(r["seen"] is not None and r["val"] is not None for r in got)
    md = open(os.path.join(out, "scorecard.md")).read()             # the card, rewritten
    assert "‡ NoPE / flipflop: not fitted at lr 0.0005, 0.001, 0.002 x 4 steps" in md
    assert "fitted at lr 0.004 x 8 steps (rung steps-x2, seed 0)" in md


def test_resume_skips_finished_rungs(tmp_path, monkeypatch):
    out = _fit_runs(tmp_path, pairs=(("NoPE", "flipflop"),))
    calls = []
    monkeypatch.setattr(fs, "run_sweep", _fake_sweep(lambda *a: False, calls))
    fs.run_fit_search(VARIANTS[:1], "smoke", out, baselines=None, log=None)
    assert len(calls) == 3
    calls.clear()
    logs = []
    fs.run_fit_search(VARIANTS[:1], "smoke", out, baselines=None, log=logs.append)
    assert calls == [] and sum("not run again" in ln for ln in logs) == 3
    # interrupted before the last rung: only that rung runs
    path = os.path.join(out, "fit_search.csv")
    kept = [r for r in read_fit_search(path) if r["rung"] != "steps-x4"]
    _write(path, kept, FIT_FIELDS)
    fs.run_fit_search(VARIANTS[:1], "smoke", out, baselines=None, log=None)
    assert calls == [["NoPE--flipflop--s0--lr0.004--steps16"]]
    assert [r["rung"] for r in read_fit_search(path)] == [
        "lr-wide", "lr-wide", "steps-x2", "steps-x4"]
    # a failed rung is run again; another variant's rows are kept
    rows = read_fit_search(path)
    rows[-1]["status"] = "failed"
    _write(path, rows + [dict(rows[0], variant="Other")], FIT_FIELDS)
    calls.clear()
    fs.run_fit_search(VARIANTS[:1], "smoke", out, baselines=None, log=None)
    assert calls == [["NoPE--flipflop--s0--lr0.004--steps16"]]
    assert [r["variant"] for r in read_fit_search(path)].count("Other") == 1


def _card_runs():
    return (_pair("NoPE", "flipflop", scale="cpu") + _pair("NoPE", "reverse", scale="cpu")
            + _pair("NoPE", "addition", scale="cpu")
            + _pair("NoPE", "copy", fitted=(True, True, True), scale="cpu"))


def _fit(cell, rung, steps, lr, fitted=False, status=None, variant="NoPE"):
    return {"variant": variant, "cell": cell, "rung": rung, "steps": steps,
            "steps_factor": steps // default_steps(cell, "cpu"), "lr": lr, "lr_factor": 1.0,
            "seed": 0, "status": status or ("ok" if fitted else "not fitted"),
            "fitted": fitted, "seen": 0.99 if fitted else 0.3, "val": 0.3, "seconds": 9.0,
            "scale": "cpu", "bench_version": VERSION, "commit": "abcdef0", "reason": ""}


def test_the_card_footnote_says_what_the_search_tried(tmp_path):
    out = tmp_path / "card"
    _write(str(out / "fit_search.csv"), [
        _fit("flipflop", "lr-wide", 2500, 2.5e-4), _fit("flipflop", "lr-wide", 2500, 4e-3),
        _fit("flipflop", "steps-x2", 5000, 1e-3), _fit("flipflop", "steps-x4", 10000, 1e-3),
        _fit("reverse", "lr-wide", 8000, 2.5e-4), _fit("reverse", "lr-wide", 8000, 4e-3),
        _fit("reverse", "steps-x2", 16000, 1e-3, fitted=True),
        _fit("addition", "lr-wide", 6000, 5e-4), _fit("addition", "lr-wide", 6000, 8e-3,
                                                     status="failed"),
        _fit("copy", "lr-wide", 4000, 2.5e-4)], FIT_FIELDS)        # copy fitted: no note
    write_card(_card_runs(), str(out), "cpu", baselines=None, log=None)
    md = (out / "scorecard.md").read_text()
    assert ("- ‡ NoPE / flipflop: not fitted at lr 0.0005, 0.001, 0.002 x 2,500 steps (the "
            "protocol), nor at lr 0.00025, 0.004 x 2,500 steps; lr 0.001 x 5,000 steps; lr "
            "0.001 x 10,000 steps (fit search, seed 0): not fitted at any budget tried.") in md
    assert ("- ‡ NoPE / reverse: not fitted at lr 0.0005, 0.001, 0.002 x 8,000 steps (the "
            "protocol), nor at lr 0.00025, 0.004 x 8,000 steps; fitted at lr 0.001 x 16,000 "
            "steps (rung steps-x2, seed 0): the cell's budget is short for NoPE; the numbers "
            "above stay the protocol's.") in md
    assert "NoPE / addition: not fitted at lr 0.001, 0.002, 0.004 x 6,000 steps (the " \
           "protocol), nor so far at lr 0.0005 x 6,000 steps (fit search, seed 0); the " \
           "search is incomplete" in md
    assert "NoPE / copy" not in md and "| NoPE | ‡ 0/2 | 10.0 1/2 | ‡ 0/2 | ‡ 0/2 |" in md
    summ = {r["cell"]: r for r in csv.DictReader(open(out / "scorecard.csv"))}
    assert list(summ["copy"]) == SUMMARY_FIELDS + ["fit_search"]
    assert summ["flipflop"]["fit_search"] == "not fitted at any rung (lr-wide, steps-x2, " \
                                             "steps-x4)"
    assert summ["reverse"]["fit_search"] == "fitted at steps-x2 (lr 0.001 x 16,000 steps)"
    assert summ["addition"]["fit_search"].startswith("incomplete")
    assert summ["copy"]["fit_search"] == ""
    assert summ["reverse"]["fit_k"] == "0"               # the card's numbers stay the protocol's
    # beside a user's card, the baselines' folder's fit_search.csv is read too
    mine = tmp_path / "mine"
    write_card([dict(r, variant="mine") for r in _pair("x", "copy", fitted=(True,) * 3,
                                                       scale="cpu")],
               str(mine), "cpu", baselines=str(out), log=None)
    assert "‡ NoPE / reverse: not fitted" in (mine / "scorecard.md").read_text()
    # a variant of ours named like a baseline never takes the baseline's search
    same = tmp_path / "same"
    write_card(_pair("NoPE", "reverse", scale="cpu"), str(same), "cpu", baselines=str(out),
               log=None)
    assert ("- ‡ NoPE / reverse: fit search not run (`lengen bench --fit-search` runs it)."
            in (same / "scorecard.md").read_text())
    # --compare reads the search beside each card (names in both tagged A: / B:)
    cmp = tmp_path / "cmp"
    compare_cards(str(same), str(out), str(cmp), log=None)
    md = (cmp / "scorecard.md").read_text()
    assert "- ‡ B:NoPE / reverse: not fitted at lr 0.0005, 0.001, 0.002 x 8,000 steps" in md
    assert "- ‡ A:NoPE / reverse: fit search not run" in md
    assert "B:NoPE / flipflop: fit search not run" not in md


def test_the_committed_card_regenerates_identically(tmp_path):
    """The committed baseline card from its runs.csv (and its fit_search.csv, once committed): the
    same scorecard.csv and scorecard.md but for the line naming the commit and the time."""
    import shutil

    src = os.path.join(ROOT, "results", "bench-cpu", f"v{VERSION}")
    fit = os.path.join(src, "fit_search.csv")
    if os.path.exists(fit):
        shutil.copy(fit, tmp_path)
    if os.path.exists(os.path.join(src, "pending.csv")):      # a card completed in parts
        shutil.copy(os.path.join(src, "pending.csv"), tmp_path)
    write_card(read_runs(os.path.join(src, "runs.csv")), str(tmp_path), "cpu", baselines=None,
               log=None)
    assert open(tmp_path / "scorecard.csv").read() == open(os.path.join(src,
                                                                      "scorecard.csv")).read()
    new, old = (open(p).read().splitlines() for p in (tmp_path / "scorecard.md",
                                                       os.path.join(src, "scorecard.md")))
    assert all(x[2].startswith(f"Battery v{VERSION}") for x in (new, old))
    assert new[:2] + new[3:] == old[:2] + old[3:]         # line 3: the commit and the time
    if not os.path.exists(fit):
        assert "Fit search" not in "\n".join(new)
        assert next(csv.reader(open(tmp_path / "scorecard.csv"))) == SUMMARY_FIELDS


def test_bad_input_is_refused_naming_the_valid_values(tmp_path, capsys, monkeypatch):
    out = _fit_runs(tmp_path, pairs=(("NoPE", "flipflop"),))
    monkeypatch.setattr(fs, "run_sweep", _fake_sweep(lambda *a: False, []))
    base = ["bench", "--fit-search", "--scale", "smoke", "--out", out]

    def err(args):
        capsys.readouterr()
        assert main(base + args) == 2
        return capsys.readouterr().err

    text = err(["--variant", "name=mine model.posenc=rope"])
    assert "no runs of 'mine' in" in text and "Valid (variants with runs there): 'NoPE'" in text
    assert "no runs of 'RoPE'" in err(["--baselines-only", "NoPE", "RoPE"])
    assert "unknown baseline" in err(["--baselines-only", "Nope"])
    assert "unknown bench cell(s) ['copyy']. Valid: flipflop" in err(
        ["--baselines-only", "NoPE", "--cells", "copyy"])
    assert "--quick and --seeds do not apply" in err(["--baselines-only", "NoPE", "--quick"])
    assert "run the bench into that folder first" in err(
        ["--baselines-only", "NoPE", "--out", str(tmp_path / "none")])
    assert "not 'cpu'" in err(["--baselines-only", "NoPE", "--scale", "cpu"])
    # a group member without runs is skipped, not an error
    assert main(base + ["--baselines-only", "classic", "--cells", "flipflop"]) == 0
    # the overrides must make the model the protocol's runs trained
    from lengen.config import resolve

    cfg = resolve(dict(cell_config("flipflop", "smoke", 0, lr=5e-4),
                       name="NoPE--flipflop--s0--lr0.0005")).config.to_dict()
    cfg["model"]["posenc"] = "rope"
    os.makedirs(os.path.join(out, "NoPE--flipflop--s0--lr0.0005"))
    json.dump(cfg, open(os.path.join(out, "NoPE--flipflop--s0--lr0.0005", "config.json"),
                        "w"))
    assert "make another model than its protocol runs" in err(["--baselines-only", "NoPE"])


def test_smoke_fit_search_from_the_cli_trains_resumes_and_estimates(tmp_path, capsys):
    out = str(tmp_path / "bench")
    _write(os.path.join(out, "runs.csv"), _pair("NoPE", "flipflop"))
    args = ["bench", "--fit-search", "--baselines-only", "NoPE", "--scale", "smoke", "--out",
            out, "--threads", "1"]
    assert main(args + ["--estimate"]) == 0
    text = capsys.readouterr().out
    assert "NoPE / flipflop:" in text and "lr-wide 2 x 4 steps" in text
    assert "steps-x4 1 x 16 steps" in text and "at most" in text and "at least" in text
    assert not os.path.exists(os.path.join(out, "fit_search.csv"))     # estimate writes none
    assert main(args) == 0
    rows = read_fit_search(out)
    assert [(r["rung"], r["lr"], r["steps"]) for r in rows][:2] == [
        ("lr-wide", 2.5e-4, 4), ("lr-wide", 4e-3, 4)]
    rungs = list(dict.fromkeys(r["rung"] for r in rows))
    # a run fitted only on the last rung tried (whichever it is at 4..16 steps)
    assert [any(r["fitted"] for r in rows if r["rung"] == n) for n in rungs][:-1] == [
        False] * (len(rungs) - 1)
    assert all(r["status"] in ("ok", "not fitted") and r["val"] is not None for r in rows)
    run = os.path.join(out, "fit-search", "NoPE--flipflop--s0--lr0.00025--steps4")
    assert os.path.exists(os.path.join(run, "val.json"))
    assert "Fit search" in open(os.path.join(out, "scorecard.md")).read()
    capsys.readouterr()
    assert main(args) == 0                                    # finished rungs are not rerun
    assert "not run again" in capsys.readouterr().out
    assert read_fit_search(out) == rows
