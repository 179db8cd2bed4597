"""Carry a baseline part's finished runs from one session's machine to the next.

A part of the v3 card (``results/bench-cpu/v3/parts.csv``) runs ``lengen bench --baselines-only
X --cells addition ... --out DIR``. Some parts take longer than one working session on the
2-core machine, and a session may start on a fresh machine, so such a part is run in segments
stopped at a run boundary, and the runs a segment finished are kept in
``results/bench-cpu/v3/segments/`` until the part lands (its rows then live in the card's
``runs.csv``, and its kept runs are removed). ``HERE`` below is the card's folder.

    python experiments/bench-cpu/segment.py save DIR VARIANT --start UTC --end UTC \\
        --commit SHA --label TEXT --machine TEXT      # after a segment: keep its finished runs
    python experiments/bench-cpu/segment.py restore DIR VARIANT   # before the next segment

``save`` copies, for every finished run of VARIANT x addition in DIR (``eval.json`` and the
bench's ``val.json`` present) not kept yet, the files the bench reads a finished run back from
-- ``config.json`` (the config it ran with), ``eval.json`` (its test rows), ``val.json`` (its
held-out validation rows) -- plus ``provenance.json`` and ``metrics.jsonl`` (its record), into
``segments/<VARIANT>/<run name>/`` (the bench's names: a space becomes ``_``), and records in
``segments/<VARIANT>/segment.json`` the segment (command, commit, start, end, machine) and each
run's ``config.json`` and ``eval.json`` modification times: the bench states a run's seconds as
the span between them (:func:`lengen.sweep.training_span`), which git does not keep. The weights
are not kept: a finished run whose ``val.json`` matches is read back without them
(:func:`lengen.sweep.finished_rows`, :func:`lengen.bench.run._validate`). ``save --extend``
keeps more runs of the segment kept last (the same bench, still running when it was kept) and
updates its end instead of adding a segment.

``restore`` writes those files back into DIR (refusing a run directory that exists), with the
recorded modification times, and checks that the bench of this checkout would read each one back
as it is: the stored config equals the one the battery builds now (runtime keys aside,
:func:`lengen.sweep.finished_rows`) and ``val.json`` was made by today's validation evaluation.
A run that fails either would be evaluated or trained again (its weights are not kept), so
``restore`` then removes what it wrote and says which; otherwise the same command on DIR reads
the runs back (cached, not retrained) and trains only the rest. ``restore`` changes no run and
no row.

``save --unfinished`` also keeps each run the segment stopped inside (SIGINT to the process
training it lets the step finish and saves a checkpoint; a run resumes from its checkpoint
exactly, :mod:`lengen.train.loop`): its ``config.json``, its record and its newest checkpoint
(``checkpoints/latest`` and the step folder it names), refusing one a live process still trains.
``restore`` writes it back (its checkpoint files checked against their checksums), and the bench
resumes it (a stored config the battery no longer builds makes the bench refuse the folder
before it trains anything). ``save`` refuses a run that started more than once in the segment
(the bench restarted on the folder): its span would be short. The bench counts a resumed run's
seconds from the resume on (``config.json`` is rewritten then), so ``segment.json`` keeps the
span it trained before (``config.json`` to the checkpoint) and ``land`` adds it to the run's
``seconds`` in ``runs.csv``: the one value ``land`` changes.

    python experiments/bench-cpu/segment.py land DIR VARIANT --start UTC --end UTC \\
        --commit SHA --label TEXT --machine TEXT      # after the last segment

``land`` commits nothing; it writes the finished part into the card's folder for a commit: it
checks that DIR's ``runs.csv`` holds the part's five rows and, apart from them, exactly the rows
of the card's ``runs.csv``, and that the kept runs in DIR are the ones kept (same ``eval.json``;
a resumed one: same first start, now finished); copies the card (``runs.csv``, ``scorecard.*``,
``curves/addition.png``, ``pending.csv``) and the five runs' ``config.json`` (as
``configs/<run>.json``); appends one ``parts.csv`` row per segment (the kept ones, then the
last, given on the command line); and removes ``segments/<VARIANT>``. Every check comes before
the first file is written.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import socket
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from lengen import resolve
from lengen.bench.battery import validation_config
from lengen.bench.run import BASELINES, build_specs, run_name
from lengen.fileio import save_json_atomic, write_text_atomic
from lengen.rundir.checkpoint import checkpoint_problem, latest_checkpoint
from lengen.sweep import finished_rows

BENCH_VALIDATION = "val.json"     # the bench's held-out validation rows, beside eval.json
#: the v3 card's folder: where segments are kept and parts land
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "results", "bench-cpu", "v3")
CELL = "addition"
#: what the bench reads a finished run back from, then the run's own record
KEPT = ("config.json", "eval.json", BENCH_VALIDATION, "provenance.json", "metrics.jsonl")
#: what a run stopped before its last step resumes from: its config and record, and its newest
#: checkpoint (``checkpoints/latest`` and the step folder it names)
KEPT_UNFINISHED = ("config.json", "provenance.json", "metrics.jsonl")
COMMAND = ("lengen bench --baselines-only {v} --cells addition --scale cpu --workers 2 "
           "--threads 1 --out DIR --baselines none")


def _check_variant(variant: str) -> None:
    if variant not in BASELINES:
        raise SystemExit(f"{variant!r} is not a built-in baseline; one of: "
                         f"{', '.join(BASELINES)}")


def folder(variant: str) -> str:
    """``segments/<the bench's name for the variant>`` (a space becomes ``_``)."""
    return os.path.join(HERE, "segments", run_name(variant, CELL).split("--")[0])


def finished(run_dir: str) -> bool:
    return all(os.path.isfile(os.path.join(run_dir, f))
               for f in ("config.json", "eval.json", BENCH_VALIDATION))


def runs_in(out: str, variant: str) -> list[str]:
    prefix = run_name(variant, CELL) + "--s"
    return sorted(n for n in os.listdir(out) if n.startswith(prefix)
                  and os.path.isdir(os.path.join(out, n)))


def read_manifest(variant: str) -> dict:
    path = os.path.join(folder(variant), "segment.json")
    if not os.path.exists(path):
        return {"variant": variant, "cell": CELL, "segments": [], "runs": {}}
    with open(path) as f:
        return json.load(f)


def wall_min(start: str, end: str) -> str:
    """Minutes from ``start`` to ``end`` (ISO UTC), to 0.1 rounded half up, as parts.csv has."""
    try:
        t = [datetime.fromisoformat(x.replace("Z", "+00:00")) for x in (start, end)]
    except (AttributeError, ValueError):
        raise SystemExit(f"start and end must be ISO UTC times such as 2026-12-02T09:18:56Z, "
                         f"got {start!r} and {end!r}") from None
    if t[1] < t[0]:
        raise SystemExit(f"the end {end} is before the start {start}")
    minutes = Decimal(str((t[1] - t[0]).total_seconds())) / 60
    return str(minutes.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _command(variant: str) -> str:
    return COMMAND.format(v=f"'{variant}'" if " " in variant else variant)


def _still_training(run_dir: str) -> bool:
    """Whether the run directory's lock names a live process on this machine."""
    try:
        with open(os.path.join(run_dir, ".lock")) as f:
            words = f.read().split()
        pid, host = int(words[1]), words[3].rstrip(",")      # "pid N on HOST, training ..."
    except (OSError, ValueError, IndexError):
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _step(run_dir: str) -> int:
    with open(os.path.join(latest_checkpoint(run_dir), "meta.json")) as f:
        return int(json.load(f)["step"])


def _provenance(run_dir: str) -> dict:
    """The run's provenance record (first start, and every start or resume), {} if unreadable."""
    try:
        with open(os.path.join(run_dir, "provenance.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _starts(run_dir: str) -> int:
    """How many times the run started or resumed."""
    return len(_provenance(run_dir).get("starts") or [])


def _span_problem(src: str, name: str, old: dict, end_file: str) -> str | None:
    """Why the span from ``config.json`` (written at the run's last start) to ``end_file``
    would not be all the run trained in this segment, or None."""
    ran = _starts(src) - old.get("starts", 0)
    if ran != 1:
        return (f"{name} started {ran} times in this segment (provenance.json); the bench "
                f"counts its seconds from the last start only, so they would be short")
    t0 = os.stat(os.path.join(src, "config.json")).st_mtime_ns
    if os.stat(end_file).st_mtime_ns < t0:
        return f"{name}: {os.path.basename(end_file)} is older than config.json"
    return None


def _keep_unfinished(src: str, dst: str) -> dict:
    """Copy an unfinished run's config, record and newest checkpoint; its times."""
    ck = latest_checkpoint(src)
    os.makedirs(os.path.join(dst, "checkpoints"))
    for f in KEPT_UNFINISHED:
        if os.path.exists(os.path.join(src, f)):
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
    shutil.copytree(ck, os.path.join(dst, "checkpoints", os.path.basename(ck)))
    with open(os.path.join(dst, "checkpoints", "latest"), "w") as f:
        f.write(os.path.basename(ck))
    t0 = os.stat(os.path.join(src, "config.json")).st_mtime_ns
    t1 = os.stat(os.path.join(ck, "meta.json")).st_mtime_ns
    return {"unfinished": True, "step": _step(src), "starts": _starts(src),
            "config_mtime_ns": t0, "checkpoint_mtime_ns": t1,
            "seconds": round((t1 - t0) / 1e9, 1)}


def save(out: str, variant: str, *, start: str, end: str, commit: str, label: str,
         machine: str, extend: bool = False, unfinished: bool = False) -> list[str]:
    """Keep the finished runs of ``variant`` in ``out`` not kept yet; return their names.
    ``extend``: the runs belong to the segment kept last (same start and commit), still
    running when it was kept; its end, label and machine note become these. ``unfinished``:
    also keep each run stopped before its last step (no process training it) from its newest
    checkpoint, to be resumed (module docstring)."""
    _check_variant(variant)
    wall_min(start, end)                         # refuse a malformed time before writing
    man = read_manifest(variant)
    if extend:
        if not man["segments"]:
            raise SystemExit(f"--extend: no segment of {variant} is kept yet")
        last = man["segments"][-1]
        if (last["start_utc"], last["lengen_commit"]) != (start, commit):
            raise SystemExit(f"--extend: the kept segment started at {last['start_utc']} at "
                             f"{last['lengen_commit']}, not {start} at {commit}")
    was_unfinished = {n for n, r in man["runs"].items() if r.get("unfinished")}
    names = runs_in(out, variant)
    new = [n for n in names if finished(os.path.join(out, n))
           and (n not in man["runs"] or n in was_unfinished)]
    stopped = []
    if unfinished:
        stopped = [n for n in names if not finished(os.path.join(out, n))
                   and latest_checkpoint(os.path.join(out, n)) is not None
                   and not (n in was_unfinished and _step(os.path.join(out, n))
                            == man["runs"][n]["step"])]     # restored, not trained since
        busy = [n for n in stopped if _still_training(os.path.join(out, n))]
        if busy:
            raise SystemExit(f"{', '.join(busy)}: a process still trains it; stop the bench "
                             f"first (Ctrl-C saves a checkpoint)")
    if not new and not stopped:
        raise SystemExit(f"no finished {variant} run in {out} that is not kept already"
                         + ("" if unfinished else " (--unfinished keeps a stopped one)"))
    for name in new + stopped:
        if os.path.exists(os.path.join(folder(variant), name)) and name not in was_unfinished:
            raise SystemExit(f"{os.path.join(folder(variant), name)} exists; lengen never "
                             f"overwrites a kept run")
        src = os.path.join(out, name)
        ck = latest_checkpoint(src) if name in stopped else None
        if ck is not None and checkpoint_problem(ck, deep=True):
            raise SystemExit(f"{name}: its newest checkpoint fails its checksums "
                             f"({checkpoint_problem(ck, deep=True)}); resume it first")
        why = _span_problem(src, name, man["runs"].get(name, {}),
                            os.path.join(ck, "meta.json") if ck else
                            os.path.join(src, "eval.json"))
        if why:
            raise SystemExit(why)
    for name in new + stopped:
        src, dst = os.path.join(out, name), os.path.join(folder(variant), name)
        old = man["runs"].get(name, {}) if name in was_unfinished else {}
        # trained in earlier segments: the bench counts only the span since the last resume
        before = old.get("seconds_before", 0.0) + old.get("seconds", 0.0)
        into = dst + ".new" if old else dst   # resumed since: the newer state replaces the old
        if name in stopped:
            man["runs"][name] = _keep_unfinished(src, into)
        else:
            os.makedirs(into)
            for f in KEPT:
                if os.path.exists(os.path.join(src, f)):
                    shutil.copyfile(os.path.join(src, f), os.path.join(into, f))
            t0 = os.stat(os.path.join(src, "config.json")).st_mtime_ns
            t1 = os.stat(os.path.join(src, "eval.json")).st_mtime_ns
            man["runs"][name] = {"starts": _starts(src), "config_mtime_ns": t0,
                                 "eval_mtime_ns": t1, "seconds": round((t1 - t0) / 1e9, 1)}
        if old:
            shutil.rmtree(dst)
            os.rename(into, dst)
        if before:
            man["runs"][name]["seconds_before"] = round(before, 1)
    kept = new + stopped
    seg = {"label": label, "command": _command(variant), "lengen_commit": commit,
           "start_utc": start, "end_utc": end, "machine": machine, "runs_kept": kept}
    if extend:            # the same bench invocation, kept once more after more of its runs
        seg["runs_kept"] = list(dict.fromkeys(man["segments"][-1]["runs_kept"] + kept))
        man["segments"][-1] = seg
    else:
        man["segments"].append(seg)
    save_json_atomic(man, os.path.join(folder(variant), "segment.json"))
    return kept


def why_not_read_back(run_dir: str, variant: str, scale: str) -> str | None:
    """Why the bench of this checkout would not read the finished run in ``run_dir`` back as
    it is (None: it would): its stored config or its validation key is not today's."""
    m = re.search(r"--s(\d+)--lr(.+)$", os.path.basename(run_dir))
    if not m:
        return "not a bench run name"
    specs, _ = build_specs([(variant, BASELINES[variant])], scale, cells=[CELL],
                           seeds=[int(m.group(1))], lrs={CELL: [float(m.group(2))]})
    if len(specs) != 1 or specs[0].name != os.path.basename(run_dir):
        return "the bench builds no run of this name"
    spec = specs[0]
    if finished_rows(resolve(spec.config).config.to_dict(), run_dir)[0] is None:
        return "its config or test rows are not what the bench would read back"
    vconf = validation_config(CELL, spec.config, scale)
    with open(os.path.join(run_dir, BENCH_VALIDATION)) as f:
        if json.load(f).get("key") != {"eval": vconf.get("eval"), "task": vconf.get("task")}:
            return "its validation rows come from another validation evaluation"
    return None


def restore(out: str, variant: str, scale: str = "cpu") -> list[str]:
    """Write the kept runs of ``variant`` back into ``out`` and check that the bench reads
    each one back (module docstring); return their names."""
    _check_variant(variant)
    man = read_manifest(variant)
    if not man["runs"]:
        raise SystemExit(f"nothing kept for {variant} in {folder(variant)}")
    for name in man["runs"]:
        if os.path.exists(os.path.join(out, name)):
            raise SystemExit(f"{os.path.join(out, name)} exists; move it away first")
    written = []
    try:
        for name, times in man["runs"].items():
            src, dst = os.path.join(folder(variant), name), os.path.join(out, name)
            if times.get("unfinished"):      # resumed by the bench from its checkpoint
                shutil.copytree(src, dst)
                written.append(dst)
                continue
            os.makedirs(dst)
            written.append(dst)
            for f in KEPT:
                if os.path.exists(os.path.join(src, f)):
                    shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
            for f in (BENCH_VALIDATION, "eval.json"):       # both at the run's end
                os.utime(os.path.join(dst, f), ns=(times["eval_mtime_ns"],) * 2)
            os.utime(os.path.join(dst, "config.json"), ns=(times["config_mtime_ns"],) * 2)
        bad = {n: why for n, r in man["runs"].items() if not r.get("unfinished")
               and (why := why_not_read_back(os.path.join(out, n), variant, scale))}
        bad.update({n: f"its checkpoint is unusable ({why})" for n, r in man["runs"].items()
                    if r.get("unfinished") and (why := checkpoint_problem(
                        latest_checkpoint(os.path.join(out, n)) or out, deep=True))})
    except BaseException:
        for d in written:
            shutil.rmtree(d, ignore_errors=True)
        raise
    if bad:
        for d in written:
            shutil.rmtree(d, ignore_errors=True)
        raise SystemExit("the bench of this checkout would not read these kept runs back "
                         "(their weights are not kept, so it would train them again); "
                         "nothing restored: " + "; ".join(f"{n}: {w}" for n, w in bad.items()))
    return list(man["runs"])


def _rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def land(out: str, variant: str, *, start: str, end: str, commit: str, label: str,
         machine: str) -> list[str]:
    """Write the finished part of ``variant`` from ``out`` into this folder (module docstring);
    return the paths written."""
    _check_variant(variant)
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
    names = [run_name(variant, CELL, int(r["seed"]), float(r["lr"])) for r in part]
    for n in names:
        if not os.path.isfile(os.path.join(out, n, "config.json")):
            raise SystemExit(f"{os.path.join(out, n)} has no config.json")
        if os.path.exists(os.path.join(HERE, "configs", n + ".json")):
            raise SystemExit(f"{os.path.join(HERE, 'configs', n + '.json')} exists; lengen "
                             f"never overwrites a committed config")
    man = read_manifest(variant)
    for n, kept in man["runs"].items():
        if kept.get("unfinished"):           # resumed from its kept checkpoint: the same start
            same = _provenance(os.path.join(folder(variant), n)).get("started_utc") == \
                _provenance(os.path.join(out, n)).get("started_utc") \
                and finished(os.path.join(out, n))
        else:
            with open(os.path.join(folder(variant), n, "eval.json"), "rb") as a, \
                    open(os.path.join(out, n, "eval.json"), "rb") as b:
                same = a.read() == b.read()
        if not same:
            raise SystemExit(f"{os.path.join(out, n)} is not the run kept in "
                             f"{folder(variant)}, finished")
    for n in names:                              # each run's seconds: one span of the bench's
        k = man["runs"].get(n)
        # trained here: one start; read back: none more; resumed here: one more
        want = 1 if k is None else k.get("starts", 1) + (1 if k.get("unfinished") else 0)
        if _starts(os.path.join(out, n)) != want:
            raise SystemExit(f"{n} started {_starts(os.path.join(out, n))} times, not {want} "
                             f"(provenance.json): the bench restarted on it, and its seconds "
                             f"would count from the last start only")
    # a run resumed in a later segment: the bench's seconds count from the last resume only
    # (config.json is rewritten then), so the spans kept from earlier segments are added
    extra = {n: k.get("seconds_before", 0.0) + (k["seconds"] if k.get("unfinished") else 0.0)
             for n, k in man["runs"].items()}
    runs_text = None
    if any(extra.values()):
        for r, n in zip(part, names):
            if extra.get(n):
                r["seconds"] = str(round(float(r["seconds"]) + extra[n], 1))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(new[0]))      # the bench's own \r\n
        w.writeheader()
        w.writerows(new)
        runs_text = buf.getvalue()
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
    written = []                                 # every check above: now write
    for f in ("runs.csv", "scorecard.md", "scorecard.csv", "scorecard.json", "scorecard.png",
              "pending.csv", os.path.join("curves", "addition.png")):
        if f.startswith("curves") and not os.path.exists(os.path.join(out, f)):
            continue                             # no fitted run in the cell: no curve plot
        if f == "runs.csv" and runs_text is not None:
            write_text_atomic(runs_text, os.path.join(HERE, f))
            written.append(os.path.join(HERE, f))
            continue
        shutil.copyfile(os.path.join(out, f), os.path.join(HERE, f))
        written.append(os.path.join(HERE, f))
    for n in names:
        dst = os.path.join(HERE, "configs", n + ".json")
        shutil.copyfile(os.path.join(out, n, "config.json"), dst)
        written.append(dst)
    write_text_atomic(text + buf.getvalue(), parts)
    written.append(parts)
    if os.path.isdir(folder(variant)):
        shutil.rmtree(folder(variant))
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("save", help="keep a segment's finished runs")
    r = sub.add_parser("restore", help="write the kept runs back into a bench folder")
    ld = sub.add_parser("land", help="write the finished part into this folder")
    for q in (s, r, ld):
        q.add_argument("out", help="the bench's --out folder")
        q.add_argument("variant", help="the baseline's label, e.g. Mamba-2 or 'Gated DeltaNet'")
    for flag, what in (("--start", "the segment's start, UTC"), ("--end", "its end, UTC"),
                       ("--commit", "the lengen commit it ran at"),
                       ("--label", "e.g. 'first segment: seed 0 at the grid's three rates'"),
                       ("--machine", "what ran beside it, as parts.csv says")):
        s.add_argument(flag, required=True, help=what)
        ld.add_argument(flag, required=True, help=what + " (the last segment)")
    s.add_argument("--unfinished", action="store_true",
                   help="also keep each run stopped before its last step (Ctrl-C saved a "
                        "checkpoint) from its newest checkpoint; the bench resumes it")
    s.add_argument("--extend", action="store_true",
                   help="the runs belong to the segment kept last (the same bench, kept "
                        "again after more of its runs ended): update it, add no segment")
    r.add_argument("--scale", default="cpu", help="the bench's --scale (default cpu)")
    a = p.parse_args()
    if a.what == "save":
        names = save(a.out, a.variant, start=a.start, end=a.end, commit=a.commit,
                     label=a.label, machine=a.machine, extend=a.extend,
                     unfinished=a.unfinished)
    elif a.what == "land":
        names = land(a.out, a.variant, start=a.start, end=a.end, commit=a.commit,
                     label=a.label, machine=a.machine)
    else:
        names = restore(a.out, a.variant, a.scale)
    print(f"{a.what}: {', '.join(names)}")


if __name__ == "__main__":
    main()
