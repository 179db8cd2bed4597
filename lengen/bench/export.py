"""``lengen bench --export DEST``: a finished bench output folder as the card folder a contributor
sends (the leaderboard path of ``results/bench-cpu/README.md``, "Contributing a variant's card").

What the folder holds, each taken from the bench's own output (nothing recomputed):

* ``runs.csv`` as the bench wrote it (one row per variant x cell x seed x rate), and
  ``fit_search.csv`` when the folder has one;
* ``configs/<run>.json``: every run's resolved config (``configs/fit-search/`` for the fit
  search's), so anyone can rerun one; a run without its ``config.json`` is an error, as the card
  could not be checked (except a run that failed, which may have stopped before writing one);
* ``provenance.csv``: per run, the lengen commit it ran at and whether that tree had uncommitted
  changes (each run's ``provenance.json``: the bench folder's ``provenance.csv`` holds only the
  last part's runs when a bench ran in parts);
* the card (``scorecard.md`` / ``.csv`` / ``.json`` / ``.png``, ``curves/``) as written;
* ``README.md``: what the files say (battery version, scale, protocol, variants, cells, seeds,
  the commits, the summed run time), with ``FILL:`` lines for what only the contributor knows
  (the command, where the scheme's code lives, the machine). ``tests/test_bench_committed.py``
  refuses a committed card that still has one.

``DEST`` must not exist or be empty: nothing is overwritten. The folder is built in a hidden
``.export-*`` folder beside ``DEST`` and moved into place when complete, so an export that
fails leaves no half card (one killed outright may leave the hidden folder behind).
"""
from __future__ import annotations

import csv
import os
import shutil
import tempfile
import time

from lengen.bench.battery import VERSION
from lengen.bench.fit_search import FIT_DIR
from lengen.bench.run import run_name
from lengen.bench.scorecard import FIT_SEARCH_CSV, read_fit_search, read_runs, runs_path
from lengen.errors import ConfigError
from lengen.provenance import read_record, short_commit

CARD_FILES = ("scorecard.md", "scorecard.csv", "scorecard.json", "scorecard.png")
#: the marker of a README line the contributor still has to write
FILL = "FILL:"
PROVENANCE_FIELDS = ("run", "lengen_commit", "lengen_dirty", "started_utc", "machine")


def _run_configs(src: str, rows: list[dict], fits: list[dict]) -> list[tuple[str, str, bool]]:
    """(run directory, path under configs/ without .json, required?) of every run the card
    names: a run that failed before it started may have no config.json, every other must."""
    runs = []
    for r in rows:
        if r.get("status") == "n/a":
            continue
        name = run_name(r["variant"], r["cell"], r["seed"], r["lr"])
        runs.append((os.path.join(src, name), name, r.get("status") != "failed"))
    for r in fits:
        name = run_name(r["variant"], r["cell"], r["seed"], r["lr"], r["steps"])
        runs.append((os.path.join(src, FIT_DIR, name), os.path.join(FIT_DIR, name),
                     r.get("status") != "failed"))
    return runs


def _provenance(run_dirs: dict[str, str]) -> list[dict]:
    """One row per run: the lengen commit it ran at and whether that tree had uncommitted
    changes, from the run's own ``provenance.json`` (the bench folder's ``provenance.csv``
    holds only the last sweep's runs when a bench ran in parts); empty where a run has none."""
    rows = []
    for name, run_dir in sorted(run_dirs.items()):
        row = dict.fromkeys(PROVENANCE_FIELDS, "")
        row["run"] = name
        p = read_record(run_dir)
        if p is not None:
            row.update(lengen_commit=str(p.get("lengen_commit") or ""),
                       lengen_dirty=str(p.get("lengen_dirty", "")),
                       started_utc=str(p.get("started_utc") or ""),
                       machine=str(p.get("machine") or ""))
        rows.append(row)
    return rows


def _readme(rows: list[dict], fits: list[dict], prov: list[dict]) -> str:
    ran = [r for r in rows if r.get("status") != "n/a"]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    scale = ", ".join(sorted({str(r.get("scale")) for r in rows}))
    protocol = ", ".join(sorted({str(r.get("protocol")) for r in rows}))
    commits = sorted({short_commit(p["lengen_commit"]) for p in prov if p["lengen_commit"]})
    dirty = sum(p["lengen_dirty"] == "True" for p in prov)
    unknown = sum(not p["lengen_commit"] for p in prov)
    minutes = sum(float(r.get("seconds") or 0) for r in ran + fits) / 60
    lines = [
        f"# Contributed card: {', '.join(variants)}",
        "",
        f"{FILL} exported with `lengen bench --export` on {time.strftime('%Y-%m-%d')}: write the "
        f"two paragraphs below that start with this mark, delete this one, then send the folder "
        f"(a pull request under `results/bench-cpu/contrib/<your-variant>/`). The rest is what "
        f"the bench's own files say.",
        "",
        f"**What:** {FILL} the scheme in a sentence, and where its code lives (a package name "
        f"and version, or `examples/plugin`-style source).",
        "",
        f"**How it was made:** {FILL} the `lengen bench` command you ran, the date, the machine "
        f"(CPU model, torch version) and the wall time.",
        "",
        f"**What the bench files say:** battery v{VERSION}, scale {scale}, protocol {protocol}"
        + (" (a quick card is shown beside the baselines, never judged against them)"
           if "quick" in protocol else "")
        + f"; variants {', '.join(f'`{v}`' for v in variants)}; cells "
          f"{', '.join(f'`{c}`' for c in cells)};",
        # pandas reads the status 'n/a' as missing: every other row is a run
        f"{len(ran)} <!-- num: csv('runs.csv').status.notna().sum() --> runs"
        + (f" and {len(fits)} <!-- num: len(csv('fit_search.csv')) --> fit-search runs"
           if fits else "")
        + f", {minutes:.1f} <!-- num: (csv('runs.csv').seconds.sum()"
        + (" + csv('fit_search.csv').seconds.sum()" if fits else "")
        + ") / 60 --> minutes of run time in all (summed over runs, so more than the wall time "
          "with several workers).",
    ]
    if commits:
        lines += ["", f"The runs ran at lengen commit {', '.join(f'`{c}`' for c in commits)} "
                      f"(`provenance.csv`, one row per run)"
                  + (f"; {dirty} <!-- num: (csv('provenance.csv').lengen_dirty == True).sum() "
                     f"--> of them from a tree with uncommitted changes, which nobody else can "
                     f"check out." if dirty else ", from a tree without uncommitted changes.")]
    if unknown:
        lines += ["", f"{FILL} the lengen commit of the "
                      f"{unknown} <!-- num: csv('provenance.csv').lengen_commit.isna().sum() --> "
                      f"run(s) whose folder has no `provenance.json`."]
    lines += [
        "",
        "**Files:** `runs.csv` (one row per run and seed, as `lengen bench` wrote it)"
        + (", `fit_search.csv` (the fit search's runs)" if fits else "")
        + ", `configs/` (each run's resolved config), `provenance.csv`, the card "
          "(`scorecard.md` / `.csv` / `.json` / `.png`, `curves/`).",
        "",
        "Lay it beside the committed baselines, or beside another card, with the same "
        f"statistics: `lengen bench --compare THIS_FOLDER results/bench-cpu/v{VERSION} "
        f"--out runs/cmp`.",
        "",
    ]
    return "\n".join(lines)


def export_card(src: str, dest: str, *, log=print) -> list[str]:
    """Write the contributable card folder ``dest`` from the bench output folder ``src``
    (module docstring). Returns the paths written, ``dest``'s README first."""
    log = log or (lambda *a, **k: None)
    rows = read_runs(src)                        # refuses rows of another battery version
    src = os.path.dirname(os.path.abspath(runs_path(src)))
    fits = read_fit_search(src)
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise ConfigError(f"--export {dest}: the folder exists and is not empty; lengen never "
                          f"overwrites files. Give a new folder")
    runs = _run_configs(src, rows, fits)
    missing = [os.path.join(d, "config.json") for d, _, need in runs
               if need and not os.path.isfile(os.path.join(d, "config.json"))]
    if missing:
        raise ConfigError(f"--export: {len(missing)} run(s) of {src} have no config.json (the "
                          f"first: {missing[0]}), so the card could not be rerun or checked. "
                          f"Export the folder the bench wrote, with its run directories (only "
                          f"a run that failed may lack one)")
    absent = [f for f in CARD_FILES if not os.path.isfile(os.path.join(src, f))]
    if absent:
        raise ConfigError(f"--export: {src} has no {', '.join(absent)}; export a folder that "
                          f"lengen bench finished (it writes the card last)")
    parent = os.path.dirname(os.path.abspath(dest)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        for f in ("runs.csv", FIT_SEARCH_CSV, *CARD_FILES):
            if os.path.isfile(os.path.join(src, f)):
                shutil.copy2(os.path.join(src, f), os.path.join(tmp, f))
        if os.path.isdir(os.path.join(src, "curves")):
            shutil.copytree(os.path.join(src, "curves"), os.path.join(tmp, "curves"))
        for run_dir, name, _ in runs:
            if os.path.isfile(os.path.join(run_dir, "config.json")):
                dst = os.path.join(tmp, "configs", name + ".json")
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(os.path.join(run_dir, "config.json"), dst)
        prov = _provenance({os.path.basename(name): d for d, name, _ in runs})
        with open(os.path.join(tmp, "provenance.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(PROVENANCE_FIELDS))
            w.writeheader()
            w.writerows(prov)
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(_readme(rows, fits, prov))
        if os.path.isdir(dest):
            os.rmdir(dest)                       # empty (checked above)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    paths = [os.path.join(dest, "README.md")] + sorted(
        os.path.join(root, f) for root, _, files in os.walk(dest) for f in files
        if f != "README.md" or root != dest)
    log(f"exported {len(runs)} run(s) of {src} into {dest}: complete the {FILL} lines of "
        f"{os.path.join(dest, 'README.md')}, then send the folder")
    return paths


__all__ = ["export_card", "FILL"]
