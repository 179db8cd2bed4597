"""Carry a baseline part's finished runs from one session's machine to the next.

A part of the v3 card (``parts.csv``) runs ``lengen bench --baselines-only X --cells addition
... --out DIR``. Some parts take longer than one working session on the 2-core machine
(``parts.csv``), and a session may start on a fresh machine, so such a part is run in
segments stopped at a run boundary, and the runs a segment finished are kept here until the
part lands (its rows then live in ``runs.csv``, and its folder here is removed):

    python results/bench-cpu/v3/segment.py save DIR VARIANT --start UTC --end UTC \\
        --commit SHA --label TEXT --machine TEXT      # after a segment: keep its finished runs
    python results/bench-cpu/v3/segment.py restore DIR VARIANT   # before the next segment

``save`` copies, for every finished run of VARIANT x addition in DIR (``eval.json`` and the
bench's ``val.json`` present) not kept yet, the files the bench reads a finished run back
from -- ``config.json`` (the config it ran with), ``eval.json`` (its test rows),
``val.json`` (its held-out validation rows) -- plus ``provenance.json`` and
``metrics.jsonl`` (its record), into ``segments/VARIANT/<run name>/``, and records in
``segments/VARIANT/segment.json`` the segment (command, commit, start, end, machine) and each
run's ``config.json`` and ``eval.json`` modification times: the bench states a run's
seconds as the span between them (:func:`lengen.sweep.training_span`), which git does not
keep. The weights are not kept: a finished run whose ``val.json`` matches is read back
without them (:func:`lengen.sweep.finished_rows`, :func:`lengen.bench.run._validate`).
``save --extend`` keeps more runs of the segment kept last (the same bench, still running
when it was kept) and updates its end instead of adding a segment.

``restore`` writes those files back into DIR (refusing a run directory that exists), with
the recorded modification times, so the same command on DIR reads the runs back (cached,
not retrained) and trains only the rest. Nothing here changes a run or a row.

    python results/bench-cpu/v3/segment.py land DIR VARIANT --start UTC --end UTC \\
        --commit SHA --label TEXT --machine TEXT      # after the last segment

``land`` commits nothing; it writes the finished part into this folder for a commit: it checks
that DIR's ``runs.csv`` holds the part's five rows and, apart from them, exactly the rows of
this folder's ``runs.csv``; copies the card (``runs.csv``, ``scorecard.*``,
``curves/addition.png``, ``pending.csv``) and the five runs' ``config.json`` (as
``configs/<run>.json``); appends one ``parts.csv`` row per segment (the kept ones, then the
last, given on the command line); and removes ``segments/VARIANT``.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from lengen.fileio import save_json_atomic, write_text_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
CELL = "addition"
#: what the bench reads a finished run back from, then the run's own record
KEPT = ("config.json", "eval.json", "val.json", "provenance.json", "metrics.jsonl")
COMMAND = ("lengen bench --baselines-only {v} --cells addition --scale cpu --workers 2 "
           "--threads 1 --out DIR --baselines none")


def folder(variant: str) -> str:
    return os.path.join(HERE, "segments", variant)


def finished(run_dir: str) -> bool:
    return all(os.path.isfile(os.path.join(run_dir, f)) for f in ("eval.json", "val.json"))


def runs_in(out: str, variant: str) -> list[str]:
    prefix = f"{variant}--{CELL}--s"
    return sorted(n for n in os.listdir(out) if n.startswith(prefix)
                  and os.path.isdir(os.path.join(out, n)))


def read_manifest(variant: str) -> dict:
    path = os.path.join(folder(variant), "segment.json")
    if not os.path.exists(path):
        return {"variant": variant, "cell": CELL, "segments": [], "runs": {}}
    with open(path) as f:
        return json.load(f)


def save(out: str, variant: str, *, start: str, end: str, commit: str, label: str,
         machine: str, extend: bool = False) -> list[str]:
    """Keep the finished runs of ``variant`` in ``out`` not kept yet; return their names.
    ``extend``: the runs belong to the segment kept last (same start and commit), still
    running when it was kept; its end, label and machine note become these."""
    man = read_manifest(variant)
    if extend:
        if not man["segments"]:
            raise SystemExit(f"--extend: no segment of {variant} is kept yet")
        last = man["segments"][-1]
        if (last["start_utc"], last["lengen_commit"]) != (start, commit):
            raise SystemExit(f"--extend: the kept segment started at {last['start_utc']} at "
                             f"{last['lengen_commit']}, not {start} at {commit}")
    new = [n for n in runs_in(out, variant)
           if finished(os.path.join(out, n)) and n not in man["runs"]]
    if not new:
        raise SystemExit(f"no finished {variant} run in {out} that is not kept already")
    for name in new:
        src, dst = os.path.join(out, name), os.path.join(folder(variant), name)
        if os.path.exists(dst):
            raise SystemExit(f"{dst} exists; lengen never overwrites a kept run")
        os.makedirs(dst)
        for f in KEPT:
            if os.path.exists(os.path.join(src, f)):
                shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        t0 = os.path.getmtime(os.path.join(src, "config.json"))
        t1 = os.path.getmtime(os.path.join(src, "eval.json"))
        man["runs"][name] = {"config_mtime": t0, "eval_mtime": t1,
                             "seconds": round(t1 - t0, 1)}
    seg = {"label": label, "command": _command(variant), "lengen_commit": commit,
           "start_utc": start, "end_utc": end, "machine": machine, "runs_kept": new}
    if extend:            # the same bench invocation, kept once more after more of its runs
        seg["runs_kept"] = man["segments"][-1]["runs_kept"] + new
        man["segments"][-1] = seg
    else:
        man["segments"].append(seg)
    save_json_atomic(man, os.path.join(folder(variant), "segment.json"))
    return new


def restore(out: str, variant: str) -> list[str]:
    """Write the kept runs of ``variant`` back into ``out``; return their names."""
    man = read_manifest(variant)
    if not man["runs"]:
        raise SystemExit(f"nothing kept for {variant} in {folder(variant)}")
    for name in man["runs"]:
        if os.path.exists(os.path.join(out, name)):
            raise SystemExit(f"{os.path.join(out, name)} exists; move it away first")
    for name, times in man["runs"].items():
        src, dst = os.path.join(folder(variant), name), os.path.join(out, name)
        os.makedirs(dst)
        for f in KEPT:
            if os.path.exists(os.path.join(src, f)):
                shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        for f in ("val.json", "eval.json"):      # both at the run's end
            os.utime(os.path.join(dst, f), (times["eval_mtime"], times["eval_mtime"]))
        os.utime(os.path.join(dst, "config.json"), (times["config_mtime"],) * 2)
    return list(man["runs"])


def _rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def wall_min(start: str, end: str) -> str:
    """Minutes from ``start`` to ``end`` (ISO UTC), to 0.1 rounded half up, as parts.csv has."""
    t = [datetime.fromisoformat(x.replace("Z", "+00:00")) for x in (start, end)]
    minutes = Decimal(str((t[1] - t[0]).total_seconds())) / 60
    return str(minutes.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def land(out: str, variant: str, *, start: str, end: str, commit: str, label: str,
         machine: str) -> list[str]:
    """Write the finished part of ``variant`` from ``out`` into this folder (module docstring);
    return the paths written."""
    mine = lambda r: r["variant"] == variant and r["cell"] == CELL      # noqa: E731
    new, old = _rows(os.path.join(out, "runs.csv")), _rows(os.path.join(HERE, "runs.csv"))
    part = [r for r in new if mine(r)]
    if len(part) != 5 or {r["role"] for r in part} != {"tune", "final"}:
        raise SystemExit(f"{out}/runs.csv has {len(part)} {variant} x {CELL} rows, not the "
                         f"protocol's five (seed 0 at three rates, seeds 1 and 2)")
    if [r for r in new if not mine(r)] != [r for r in old if not mine(r)]:
        raise SystemExit(f"{out}/runs.csv differs from {HERE}/runs.csv in rows of other pairs")
    if any(r["variant"] == variant for r in _rows(os.path.join(out, "pending.csv"))):
        raise SystemExit(f"{out}/pending.csv still lists {variant}")
    names = [f"{variant}--{CELL}--s{r['seed']}--lr{r['lr']}" for r in part]
    for n in names:
        if not os.path.isfile(os.path.join(out, n, "config.json")):
            raise SystemExit(f"{os.path.join(out, n)} has no config.json")
    for n in names:
        dst = os.path.join(HERE, "configs", n + ".json")
        if os.path.exists(dst):
            raise SystemExit(f"{dst} exists; lengen never overwrites a committed config")
    written = []
    for f in ("runs.csv", "scorecard.md", "scorecard.csv", "scorecard.json", "scorecard.png",
              "pending.csv", os.path.join("curves", "addition.png")):
        if f.startswith("curves") and not os.path.exists(os.path.join(out, f)):
            continue                             # no fitted run in the cell: no curve plot
        shutil.copyfile(os.path.join(out, f), os.path.join(HERE, f))
        written.append(os.path.join(HERE, f))
    for n in names:
        dst = os.path.join(HERE, "configs", n + ".json")
        shutil.copyfile(os.path.join(out, n, "config.json"), dst)
        written.append(dst)
    man = read_manifest(variant)
    segs = man["segments"] + [{"label": label, "command": _command(variant),
                               "lengen_commit": commit, "start_utc": start, "end_utc": end,
                               "machine": machine}]
    buf = io.StringIO()
    w = csv.writer(buf)                          # parts.csv's own line ends (\r\n)
    for s in segs:
        title = f"{variant}, {CELL}" + (f" ({s['label']})" if len(segs) > 1 else "")
        w.writerow([title, s["command"], s["lengen_commit"], s["start_utc"], s["end_utc"],
                    wall_min(s["start_utc"], s["end_utc"]), s["machine"]])
    parts = os.path.join(HERE, "parts.csv")
    with open(parts, newline="") as f:
        text = f.read()
    write_text_atomic(text + buf.getvalue(), parts)
    written.append(parts)
    if os.path.isdir(folder(variant)):
        shutil.rmtree(folder(variant))
    return written


def _command(variant: str) -> str:
    return COMMAND.format(v=f"'{variant}'" if " " in variant else variant)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("save", help="keep a segment's finished runs")
    r = sub.add_parser("restore", help="write the kept runs back into a bench folder")
    ld = sub.add_parser("land", help="write the finished part into this folder")
    for q in (s, r, ld):
        q.add_argument("out", help="the bench's --out folder")
        q.add_argument("variant", help="the baseline's label, e.g. Mamba-2")
    for flag, what in (("--start", "the segment's start, UTC"), ("--end", "its end, UTC"),
                       ("--commit", "the lengen commit it ran at"),
                       ("--label", "e.g. 'first segment: seed 0 at the grid's three rates'"),
                       ("--machine", "what ran beside it, as parts.csv says")):
        s.add_argument(flag, required=True, help=what)
        ld.add_argument(flag, required=True, help=what + " (the last segment)")
    s.add_argument("--extend", action="store_true",
                   help="the runs belong to the segment kept last (the same bench, kept "
                        "again after more of its runs ended): update it, add no segment")
    a = p.parse_args()
    if a.what in ("save", "land"):
        more = {"extend": a.extend} if a.what == "save" else {}
        names = (save if a.what == "save" else land)(
            a.out, a.variant, start=a.start, end=a.end, commit=a.commit, label=a.label,
            machine=a.machine, **more)
    else:
        names = restore(a.out, a.variant)
    print(f"{a.what}: {', '.join(names)}")


if __name__ == "__main__":
    main()
