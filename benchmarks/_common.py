"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""
from __future__ import annotations

import subprocess


def lengen_revision() -> str:
    """Short commit of the checkout the imported ``lengen`` comes from (+ '-dirty' when its
    lengen/ has uncommitted changes): a script run with another checkout on PYTHONPATH reports
    that one."""
    import pathlib

    import lengen

    root = pathlib.Path(lengen.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lengen"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    """The CPU's 'model name' from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_info() -> dict:
    """Where a benchmark ran (issue 31: ratios against an SDPA baseline moved by 30% between two
    machines with different vector units): CPU model, logical cores (and how many this process
    may use), torch version, ATen's CPU capability (the vector kernels dispatched: DEFAULT, AVX2,
    AVX512, ...; ``ATEN_CPU_CAPABILITY`` lowers it) and the OpenMP wait policy in the
    environment."""
    import os

    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable,
            "torch": torch.__version__, "cpu_capability": capability,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset")}


def machine_line(info: dict | None = None) -> str:
    """:func:`machine_info` as one line for a benchmark's output."""
    m = info or machine_info()
    cores = f"{m['cores']} cores" + (f" ({m['usable_cores']} usable)"
                                     if m["usable_cores"] != m["cores"] else "")
    return (f"machine: {m['cpu']}, {cores}, torch {m['torch']}, ATen CPU capability "
            f"{m['cpu_capability']}, OMP_WAIT_POLICY {m['omp_wait_policy']}")


def interleaved(cases: dict, repeats: int) -> dict:
    """Seconds per call of each case (a dict of zero-argument callables), ``repeats`` rounds in
    which every case runs once in turn, after one untimed call each: a drift of the machine
    then hits every case alike, and :func:`median_ratio` of two cases cancels it per round."""
    import time

    for fn in cases.values():
        fn()
    times = {c: [] for c in cases}
    for _ in range(repeats):
        for c, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[c].append(time.perf_counter() - t0)
    return times


def median_ratio(base: list, other: list) -> float:
    """The median over rounds of base / other (times from :func:`interleaved`)."""
    import statistics

    return statistics.median(a / b for a, b in zip(base, other))
