"""Run a sweep: in this process, in N spawned worker processes, or (``backend='ray'``) on Ray.

Every run goes through one function, :func:`run_one` (picklable, so workers and Ray tasks call
the very same code), which never raises for a run's own failure: it returns a result record.

Layout of ``out_dir``::

    out_dir/<run name>/        one run directory per grid point (config.json, metrics.jsonl,
                               checkpoints/, model.safetensors, eval.json, eval.csv)
    out_dir/<run name>/failure.json   error + traceback of the last failed attempt (removed on success)
    out_dir/results.json|.csv  every run's evaluation rows, tagged with the grid's axis labels and a
                               ``status`` column; failed runs contribute one row with status
                               ``failed`` and the error (pandas: ``pd.read_csv(out_dir/results.csv)``)
    out_dir/failures.json      [{name, error, traceback}] of this invocation's failed runs
    out_dir/sweep.json         per-run status (done | cached | failed), seconds, worker
    out_dir/provenance.csv     one row per run: name, the grid's axis labels, status, seconds and
                               the run's record (``lengen.provenance``: ``started_utc``,
                               ``lengen_commit``, ``lengen_dirty``, ``machine``; empty for a
                               run made before lengen wrote them)

All of these are rewritten atomically after every finished run, so a killed sweep leaves complete
files behind. Rerunning the same sweep skips finished runs (a readable ``eval.json`` and the same
config up to ``lengen.config.RUNTIME_KEYS``: rows are read back, nothing is recomputed), resumes
unfinished ones from their last checkpoint (``train`` does that) and retries failed ones. A
finished run whose ``eval.json`` is unreadable (truncated, corrupt) or whose evaluation settings
changed is re-evaluated from its final checkpoint without retraining; one whose training config
differs is reported as failed instead of being silently reused.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import traceback
from multiprocessing.connection import wait

import torch

from lengen.config import RESUME_IGNORED, RUNTIME_KEYS, config_diff, resolve
from lengen.errors import ArgumentError, CheckpointError, ConfigError
from lengen.fileio import make_output_dir, save_json_atomic, write_csv_atomic
from lengen.provenance import RECORD_COLUMNS, read_record
from lengen.rundir.layout import check_run_dir, read_stored_config
from lengen.runs import reevaluate
from lengen.sweep.grid import RunSpec, as_specs, failure_result
from lengen.sweep.ray_backend import import_ray, run_ray
from lengen.threads import set_process_threads
from lengen.train import train


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _read_rows(path):
    """Rows of a finished run's eval.json, or None when missing or unreadable."""
    try:
        rows = _read_json(path)
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) and all(isinstance(r, dict) for r in rows) else None


def finished_rows(cfg_dict: dict, run_dir: str):
    """``(rows, None)`` when ``run_dir`` holds this very run finished (readable eval.json, same
    config up to the runtime keys); ``(None, reason)`` otherwise, where reason says whether the
    run needs training/resuming (``"train"``), only re-evaluation (``"eval"``: evaluation settings
    changed or eval.json unreadable), or cannot be reused (any other text: the differing keys)."""
    path = os.path.join(run_dir, "eval.json")
    if not os.path.exists(path):
        return None, "train"
    stored = read_stored_config(run_dir)
    if stored is None:
        return None, "train"          # train() explains what is wrong with the directory
    diff = config_diff(stored, cfg_dict, RESUME_IGNORED)
    if diff:
        return None, f"different config ({', '.join(k for k, _, _ in diff[:6])})"
    rows = _read_rows(path)
    if rows is None or config_diff(stored, cfg_dict, RUNTIME_KEYS):
        return None, "eval"
    return rows, None


def run_one(spec: RunSpec | dict, out_dir: str, *, quiet: bool = True, threads: int = 0) -> dict:
    """Train + evaluate one run in ``out_dir/<spec.name>``, or read back its finished rows.

    Returns ``{name, status, rows, seconds, error, traceback, pid}`` with status ``done`` (trained
    now), ``cached`` (already finished) or ``failed`` (exception; also written to
    ``failure.json`` in the run directory). Never raises for a failing run, except on
    KeyboardInterrupt (train() checkpoints first, then the sweep stops)."""
    if not isinstance(out_dir, (str, os.PathLike)) or not os.fspath(out_dir):
        raise ArgumentError(f"out_dir must be a folder path (a non-empty str or os.PathLike) "
                            f"that holds the sweep's run directories, got {out_dir!r}")
    if isinstance(spec, dict):
        spec = RunSpec(**spec)
    run_dir = os.path.join(out_dir, spec.name)
    fail_path = os.path.join(run_dir, "failure.json")
    t0 = time.time()
    result = {"name": spec.name, "tags": spec.tags, "rows": [], "seconds": 0.0, "pid": os.getpid(),
              "error": None, "traceback": None}
    try:
        if threads:         # explicit (a sweep's --threads): every workload of this run uses it
            set_process_threads(threads)
        cfg = resolve(spec.config)          # validated once; reevaluate / train take it
        rows, why = finished_rows(cfg.config.to_dict(), run_dir)
        if rows is not None:
            result.update(status="cached", rows=rows)
        elif why not in ("train", "eval"):
            raise ValueError(f"{run_dir} holds a finished run with a {why}; delete that "
                             f"directory or sweep into another output folder")
        else:
            rows = None
            if why == "eval":             # finished: evaluate its weights again, no training
                try:
                    rows = reevaluate(cfg, run_dir, quiet=quiet)
                except CheckpointError:
                    rows = None           # unusable weights file: train() rewrites it
            if rows is None:
                _, _, rows = train(cfg, run_dir, quiet=quiet)
            if rows is None:
                raise RuntimeError("training stopped before the last step")
            result.update(status="done", rows=rows)
        if os.path.exists(fail_path):
            os.remove(fail_path)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a failing run is recorded, the sweep goes on
        result.update(status="failed", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc())
        os.makedirs(run_dir, exist_ok=True)
        save_json_atomic({k: result[k] for k in ("name", "error", "traceback", "pid")}
                         | {"time": time.time()}, fail_path)
    result["seconds"] = time.time() - t0
    record = read_record(run_dir) or {}
    result["record"] = {k: record.get(k) for k in RECORD_COLUMNS}
    return result


def training_span(out_dir: str, names) -> float | None:
    """Seconds from the first run's start to the last run's end, read from the run directories
    (``config.json`` is written when a run starts or resumes, ``eval.json`` when it ends), so a
    report re-rendered from finished runs can still state how long training took. None if any
    run directory lacks either file."""
    starts, ends = [], []
    for name in dict.fromkeys(names):
        run_dir = os.path.join(out_dir, name)
        try:
            starts.append(os.path.getmtime(os.path.join(run_dir, "config.json")))
            ends.append(os.path.getmtime(os.path.join(run_dir, "eval.json")))
        except OSError:
            return None
    return max(ends) - min(starts) if starts else None


def default_threads(workers: int, backend: str = "local", ray_options: dict | None = None) -> int:
    """Torch threads per run when the caller gives none: the CPUs Ray reserves per task, the
    cores split between ``workers`` local processes, or 0 (torch's own choice) for one."""
    check_workers(workers)
    if backend == "ray":
        return max(1, int((ray_options or {}).get("num_cpus", 1)))
    return max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0


def check_workers(workers) -> int:
    """``workers`` must be an integer >= 1 (1 = one run after another in this process)."""
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise ArgumentError(f"workers must be an integer >= 1 (1 = one run after another in this "
                            f"process), got {type(workers).__name__} {workers!r}")
    if workers < 1:
        raise ConfigError(f"workers must be an integer >= 1 (1 = one run after another in this "
                          f"process), got {workers}; pass workers=1 or the number of processes")
    return workers


def worker_death(code: int | None) -> str:
    """Why a worker died, from its exit code (negative = killed by that signal)."""
    if code is not None and code < 0:
        return (f"worker process died (killed by signal {-code}, e.g. out of memory) while "
                f"running this run")
    # a Python error in the worker: most often a script that starts a multi-process sweep
    # without the __main__ guard, which every spawned worker then re-runs on import
    return (f"worker process died (exit code {code}) while running this run; its traceback is "
            f"on stderr. A script that calls run_sweep with workers > 1 must do so under "
            f"`if __name__ == '__main__':`")


def result_rows(result: dict) -> list[dict]:
    """Rows of one result, tagged with the axis labels (never overriding a row's own columns)."""
    if result["status"] == "failed":
        return [dict(result["tags"], run=result["name"], status="failed", error=result["error"],
                     metric=None, value=None)]
    out = []
    for r in result["rows"]:
        row = dict(r)
        for k, v in result["tags"].items():
            row.setdefault(k, v)
        row["status"] = "ok"
        out.append(row)
    return out


def write_results(out_dir: str, rows: list[dict], failures: list[dict]) -> None:
    """A sweep folder's ``results.json`` / ``results.csv`` (rows) and ``failures.json``, each
    atomically; also used by recipes that add rows after the sweep (evaluation-only columns)."""
    save_json_atomic(rows, os.path.join(out_dir, "results.json"))
    write_csv_atomic(rows, os.path.join(out_dir, "results.csv"))
    save_json_atomic(failures, os.path.join(out_dir, "failures.json"))


class SweepResult:
    """What a sweep produced: ``rows`` (every run's rows, in grid order), ``status`` (per run),
    ``failures``; ``frame()`` gives a pandas DataFrame of the rows."""

    def __init__(self, specs: list[RunSpec], results: dict[str, dict], out_dir: str):
        self.specs, self.results, self.out_dir = specs, results, out_dir
        self.rows = [r for s in specs if s.name in results for r in result_rows(results[s.name])]
        self.status = {s.name: {k: results[s.name][k] for k in ("status", "seconds", "pid", "error")}
                       for s in specs if s.name in results}
        self.failures = [{k: results[s.name][k] for k in ("name", "error", "traceback")}
                         for s in specs if s.name in results and results[s.name]["status"] == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failures and len(self.results) == len(self.specs)

    def frame(self):
        import pandas as pd  # slow import: tables only

        return pd.DataFrame(self.rows)

    def run_rows(self) -> list[dict]:
        """One row per finished or failed run (``provenance.csv``): name, tags, status, seconds and
        the run's record (start time, lengen commit, dirty state)."""
        out = []
        for s in self.specs:
            if s.name not in self.results:
                continue
            r = self.results[s.name]
            record = r.get("record") or {}
            out.append({"run": s.name, **s.tags, "status": r["status"],
                        "seconds": round(float(r.get("seconds") or 0.0), 3),
                        **{k: record.get(k) for k in RECORD_COLUMNS}})
        return out

    def write(self) -> None:
        write_results(self.out_dir, self.rows, self.failures)
        write_csv_atomic(self.run_rows(), os.path.join(self.out_dir, "provenance.csv"))
        pending = [s.name for s in self.specs if s.name not in self.results]
        save_json_atomic({"runs": self.status, "pending": pending},
                         os.path.join(self.out_dir, "sweep.json"))

    def __repr__(self) -> str:
        counts = {}
        for st in self.status.values():
            counts[st["status"]] = counts.get(st["status"], 0) + 1
        return f"SweepResult({len(self.specs)} runs: {counts})"


def run_sweep(runs, out_dir: str, *, workers: int = 1, backend: str = "local", threads: int | None = None,
              quiet: bool = True, run_fn=run_one, log=print, ray_options: dict | None = None) -> SweepResult:
    """Run every run of ``runs`` (Grid, ``{name: config}`` or RunSpecs) into ``out_dir``.

    ``workers <= 1``: one after another in this process. ``workers = N``: N spawned worker
    processes; a worker that dies (killed, out of memory) has its run recorded as failed and is
    replaced. ``threads``: every run's torch threads; default: each worker gets CPU cores // N (at
    least 1) and a run takes what :func:`lengen.threads.choose_threads` picks within that (one
    thread for a model of ``d_model <= 256`` on CPU).
    ``backend='ray'``: each run is a Ray task (``ray_options``: ``address``, ``num_cpus``,
    ``num_gpus`` per run); ``out_dir`` must then be on a file system every node sees.
    All configs are resolved before anything runs, so a typo fails at once. ``run_fn`` is the
    per-run function (default :func:`run_one`; must be importable by name for workers/Ray)."""
    if backend not in ("local", "ray"):
        raise ConfigError(f"unknown sweep backend {backend!r}. Valid: local, ray")
    out_dir = check_run_dir(out_dir, "out_dir")
    check_workers(workers)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 0):
        raise ConfigError(f"threads must be None (the default split of the cores) or an integer "
                          f">= 0 (0 = torch's own choice), got {threads!r}")
    if not callable(run_fn):
        raise ArgumentError(f"run_fn must be a function like lengen.sweep.run_one, got "
                            f"{type(run_fn).__name__}")
    if log is not None and not callable(log):
        raise ArgumentError(f"log must be a function such as print, or None, got "
                            f"{type(log).__name__}")
    if ray_options is not None and not isinstance(ray_options, dict):
        raise ArgumentError(f"ray_options must be a dict such as {{'num_cpus': 2}}, got "
                            f"{type(ray_options).__name__}")
    if backend == "ray":
        import_ray()               # a missing Ray fails before anything runs
    specs = as_specs(runs)
    # on Ray the runs' device (e.g. cuda) is on the workers, not necessarily on this driver
    here = backend != "ray"
    for s in specs:
        resolve(s.config, check_device=here)   # unknown keys / names fail before any training
    make_output_dir(out_dir)
    results: dict[str, dict] = {}
    summary = SweepResult(specs, results, out_dir)
    log = log or (lambda *a, **k: None)

    def on_result(res: dict) -> None:
        nonlocal summary
        results[res["name"]] = res
        summary = SweepResult(specs, results, out_dir)
        summary.write()
        msg = f"[{len(results)}/{len(specs)}] {res['name']}: {res['status']} ({res['seconds']:.1f}s)"
        log(msg + (f" - {res['error']}" if res["error"] else ""))

    # threads given: every run's explicit count (train.threads in a run's config still wins);
    # not given: each worker process gets its share of the cores, and each run's train() picks
    # within it (lengen.threads: one thread for a small model)
    share = default_threads(workers, backend, ray_options) if threads is None else threads
    opts = {"quiet": quiet, "threads": threads or 0}
    if backend == "ray" or workers > 1:
        # finished runs are only read back: do that here instead of starting workers for them
        todo = []
        for spec in specs:
            rows, _ = finished_rows(resolve(spec.config, check_device=here).config.to_dict(),
                                    os.path.join(out_dir, spec.name))
            if rows is not None:
                on_result(run_fn(spec, out_dir, **dict(opts, threads=0)))
            else:
                todo.append(spec)
    else:
        todo = specs
    if not todo:
        pass
    elif backend == "ray":
        run_ray(todo, out_dir, run_fn, opts, on_result, **(ray_options or {}))
    elif workers <= 1:
        for spec in todo:
            on_result(run_fn(spec, out_dir, **opts))
    else:
        run_in_workers(todo, out_dir, run_fn, opts, on_result, workers, threads=share)
    summary = SweepResult(specs, results, out_dir)
    summary.write()
    return summary


def _worker_main(conn, run_fn, threads: int) -> None:
    """Worker process loop: receive (spec, out_dir, opts), send back the result; None stops."""
    if threads:
        torch.set_num_threads(threads)
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            spec, out_dir, opts = msg
            conn.send(run_fn(spec, out_dir, **opts))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        # Ctrl-C reaches every process of the foreground group: train() has saved a checkpoint
        # before re-raising, so just leave. EOF / broken pipe: the parent is gone.
        return


def run_in_workers(specs: list[RunSpec], out_dir: str, run_fn, opts: dict, on_result,
                   workers: int, threads: int | None = None) -> None:
    """Hand runs one at a time to ``workers`` spawned processes (the parent always knows which
    run each worker holds, so a worker that dies is charged to exactly that run). Each worker
    starts with ``threads`` torch threads (default ``opts['threads']``; 0 = torch's default)."""
    ctx = mp.get_context("spawn")
    pending = list(specs)
    slots: list[dict] = []       # {proc, conn, spec or None}

    start_threads = opts.get("threads", 0) if threads is None else threads

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, run_fn, start_threads), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "spec": None}

    try:
        for _ in range(min(workers, len(pending))):
            slots.append(start())
        while True:
            for slot in slots:
                if slot["spec"] is None and pending:
                    slot["spec"] = pending.pop(0)
                    slot["conn"].send((slot["spec"], out_dir, opts))
            busy = [s for s in slots if s["spec"] is not None]
            if not busy:
                break
            ready = wait([s["conn"] for s in busy] + [s["proc"].sentinel for s in busy])
            for slot in busy:
                res = None
                if slot["conn"] in ready or slot["proc"].sentinel in ready:
                    try:
                        if slot["conn"].poll():
                            res = slot["conn"].recv()
                    except (EOFError, OSError):
                        res = None
                        slot["proc"].join(timeout=2)    # pipe closed: the process is exiting
                    if res is None and slot["proc"].is_alive():
                        continue
                    if res is None:      # the worker died holding this run
                        res = failure_result(slot["spec"], worker_death(slot["proc"].exitcode))
                        slot["conn"].close()
                        slots.remove(slot)
                        if pending:
                            slots.append(start())
                    slot["spec"] = None
                    on_result(res)
    finally:
        for slot in slots:
            try:
                slot["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for slot in slots:
            slot["proc"].join(timeout=5)
            if slot["proc"].is_alive():
                slot["proc"].terminate()
                slot["proc"].join(timeout=5)


def collect(out_dir: str) -> list[dict]:
    """Rows of every finished run directory directly under ``out_dir`` (no training), for
    looking at a sweep that is still running or was run elsewhere."""
    rows = []
    for name in sorted(os.listdir(out_dir)):
        found = _read_rows(os.path.join(out_dir, name, "eval.json"))
        if found is not None:
            rows += [dict(r, status="ok") for r in found]
    return rows


__all__ = ["check_workers", "run_sweep", "run_one", "collect", "SweepResult", "result_rows", "failure_result",
           "write_results"]
