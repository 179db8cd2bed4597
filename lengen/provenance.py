"""What made a run: the lengen source it ran, whether that source had uncommitted edits, and
when it started (issue 54 item 5: a rule must provably come before the runs it governs).

* :func:`source_commit`: ``git rev-parse HEAD`` of the lengen source tree when lengen runs from
  a git checkout, else ``"version <X>"`` (the installed package's version).
* :func:`source_dirty`: whether ``git status --porcelain`` of that checkout is non-empty; None
  when lengen does not run from a checkout (an installed package has no working tree).
* :func:`machine`: the hardware and PyTorch that did the arithmetic (the CPU, the vector
  instruction set PyTorch's CPU kernels dispatched to, the thread count, the GPU when the
  process uses one, the torch version). PyTorch does not promise the same floating-point
  results on another CPU, GPU, torch build or thread count, and a small model's training can
  amplify such a difference into another outcome, so expect a run to repeat exactly only where
  all of these are the same.
* :func:`run_record`: the commit, whether it was dirty, the machine and the start time as UTC
  ISO 8601, as one dict: what ``train`` writes to ``RUN_DIR/provenance.json`` and a sweep
  copies into its ``provenance.csv``.

``RUN_DIR/provenance.json``::

    {"started_utc": "2026-11-29T05:10:00+00:00",   # the start of the training that made the
     "lengen_commit": "270d4f1...",                 #   weights (a restart from step 0 resets it)
     "lengen_dirty": false,
     "machine": "AMD EPYC (cpu family 26, model 2, stepping 1); cpu kernels AVX512; 1 threads;
                 torch 2.13.0+cpu",
     "starts": [{"started_utc": ..., "step": 0, "lengen_commit": ..., "lengen_dirty": ...},
                {"started_utc": ..., "step": 4000, ...}]}     # every start and resume

The first start's commit and machine are the run's; a resume under another commit or on another
machine is listed in ``starts``.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import subprocess

#: the file a run directory keeps its record in
RECORD_NAME = "provenance.json"
#: the columns a sweep's provenance.csv gets from each run's record
RECORD_COLUMNS = ("started_utc", "lengen_commit", "lengen_dirty", "machine")
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def utc_now() -> str:
    """Now, as UTC ISO 8601 to the second (``2026-11-29T05:10:00+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def git(root: str, *args: str, check: bool = False, timeout: float = 30) -> str | None:
    """The output of ``git -C root args`` (``timeout`` seconds at most); None when git fails or
    is missing, or with ``check`` the error raised instead (``subprocess.CalledProcessError``,
    ``OSError``)."""
    try:
        r = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                           timeout=timeout, check=check)
    except (OSError, subprocess.SubprocessError):
        if check:
            raise
        return None
    return r.stdout if r.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def is_checkout(root: str = SOURCE_ROOT) -> bool:
    """Is ``root`` the top of a git working tree (not merely a folder inside another repo's)?"""
    top = git(root, "rev-parse", "--show-toplevel")
    return top is not None and os.path.realpath(top.strip()) == os.path.realpath(root)


def package_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("lengen")
    except (ImportError, PackageNotFoundError):
        return "unknown"


@functools.lru_cache(maxsize=None)
def source_commit(root: str = SOURCE_ROOT) -> str:
    """The commit lengen runs from (full hash), or ``'version X'`` when not a git checkout.
    Cached per process: the commit does not change under a running process."""
    if is_checkout(root):
        head = git(root, "rev-parse", "HEAD")
        if head and head.strip():
            return head.strip()
    return f"version {package_version()}"


def short_commit(commit: str) -> str:
    """A commit as cards and tables print it: the short hash, or ``'version X'`` as it is."""
    return commit if commit.startswith("version") else commit[:7]


def source_dirty(root: str = SOURCE_ROOT) -> bool | None:
    """Does the checkout have uncommitted changes (``git status --porcelain`` non-empty)? None
    when lengen does not run from a checkout. Not cached: a file may be edited mid-sweep."""
    if not is_checkout(root):
        return None
    out = git(root, "status", "--porcelain")
    return None if out is None else bool(out.strip())


@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:
    """The CPU as Linux's ``/proc/cpuinfo`` names it (model name, and family / model / stepping,
    which tell apart CPUs that share a marketing name); else ``platform.processor()``. Read
    once per process: the CPU does not change under it."""
    import platform
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                                   # the first processor only
                key, _, value = line.partition(":")
                info.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine() or "unknown cpu"
    ids = [f"{k} {info[k]}" for k in ("cpu family", "model", "stepping") if k in info]
    return f"{name} ({', '.join(ids)})" if ids else name


def machine() -> str:
    """What did the arithmetic, as one line: ``'<cpu> ; cpu kernels <ISA>; <n> threads[; gpu
    <name>]; torch <version>'``. The ISA is ``torch.backends.cpu.get_cpu_capability()`` (e.g.
    AVX512, AVX2); the thread count is torch's at the call; a GPU is named only when this
    process has already initialised CUDA (a CPU run is not made to touch the GPU)."""
    import torch
    parts = [_cpu_model()]
    try:
        parts.append(f"cpu kernels {torch.backends.cpu.get_cpu_capability()}")
    except (AttributeError, RuntimeError):
        pass
    parts.append(f"{torch.get_num_threads()} threads")
    try:
        if torch.cuda.is_initialized():
            parts.append(f"gpu {torch.cuda.get_device_name(torch.cuda.current_device())}")
    except (AttributeError, RuntimeError, AssertionError):
        pass
    parts.append(f"torch {torch.__version__}")
    return "; ".join(parts)


def run_record(root: str = SOURCE_ROOT, started: str | None = None) -> dict:
    """``{started_utc, lengen_commit, lengen_dirty, machine}`` for a run starting now (or at
    ``started``)."""
    return {"started_utc": started or utc_now(), "lengen_commit": source_commit(root),
            "lengen_dirty": source_dirty(root), "machine": machine()}


def read_record(run_dir: str) -> dict | None:
    """The run directory's record, or None when it has none (a run made before lengen wrote
    one) or it is unreadable."""
    try:
        with open(os.path.join(run_dir, RECORD_NAME)) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def start_record(run_dir: str, step: int, root: str = SOURCE_ROOT) -> dict:
    """The record for a training (re)starting at ``step`` in ``run_dir``: a fresh start (step 0,
    or no earlier record) begins a new record; a resume keeps the first start and appends this
    one to ``starts``. Returns the dict to write to ``RUN_DIR/provenance.json``."""
    now = run_record(root)
    old = read_record(run_dir) if step else None
    entry = dict(now, step=int(step))
    if old is None or not isinstance(old.get("starts"), list):
        return dict(now, starts=[entry])
    return dict(old, starts=old["starts"] + [entry])


__all__ = ["RECORD_NAME", "RECORD_COLUMNS", "utc_now", "git", "is_checkout", "package_version",
           "source_commit", "short_commit", "source_dirty", "machine", "run_record", "read_record",
           "start_record"]
