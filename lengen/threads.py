"""How lengen runs torch on the CPU: the OpenMP wait policy, the intra-op thread count, and glibc's
allocator thresholds.

Why (issue 31, measured in ``benchmarks/threads.py``, tables in ``benchmarks/RESULTS.md``): at
the cpu-scale model sizes every op is small, and each op that opens an OpenMP parallel region
waits at its barrier for all of its threads. With two threads on a shared two-core machine, the
OpenMP runtime's default waiting made a demo-sized training step 7 to 20 times slower than the
best configuration. Two settings make the default safe:

* ``OMP_WAIT_POLICY=PASSIVE`` (set by :func:`set_wait_policy` when ``lengen`` is imported, unless
  the user set the variable): waiting threads sleep instead of spinning, so an idle OpenMP thread
  does not take the core a working one needs. The OpenMP runtime torch ships (libgomp) reads the
  variable once, when it is loaded, i.e. at ``import torch``: it takes effect only in a process that
  imports ``lengen`` before ``torch`` (the ``lengen`` command does; a script that imports torch
  first keeps the runtime's default, and lengen then leaves the variable unset).
* the intra-op thread count (:func:`choose_threads`): 1 for models of width ``d_model <=``
  :data:`SMALL_D_MODEL` (the cpu-scale models: issue 31 measured one thread the fastest there,
  idle or loaded, and it never waits at a barrier; on an overcommitted machine two PASSIVE
  threads can get more of the scheduler and finish sooner at about the same CPU time, see
  RESULTS.md), otherwise the count torch already has (its default: the cores, or a sweep
  worker's share).

An explicit setting always wins: ``train.threads`` (and ``lengen eval / generate --threads``), then
a process-wide count a caller gave (:func:`set_process_threads`, e.g. a sweep's ``--threads``),
then ``OMP_NUM_THREADS`` in the environment (torch already honours it).

A third setting is about memory, not threads (:func:`tune_allocator`, applied by
:func:`use_threads` when a workload runs on the CPU): glibc's malloc returns freed memory above
the top of its heap to the system once it exceeds a *trim threshold*, and serves blocks larger
than an *mmap threshold* with fresh pages. A training step of the cpu-scale models frees and
allocates the same activations every step (a few MB each), so with glibc's defaults every step
page-faults those pages in again: some 2,000 minor faults a step on the flip-flop model
(``benchmarks/allocator.py``). lengen raises both thresholds (32 MiB, glibc's largest mmap
threshold, and 256 MiB) so the memory stays with the process between steps; the process then
keeps up to 256 MiB it has freed. It is left alone where the user chose the allocator's
behaviour (``GLIBC_TUNABLES`` with a ``glibc.malloc.`` tunable, a ``MALLOC_*_`` variable,
jemalloc / tcmalloc / mimalloc in ``LD_PRELOAD``), off with ``LENGEN_MALLOC_TUNING=0``, and a
no-op where the C library is not glibc.

This module imports nothing from lengen and imports torch only inside functions, so
``lengen/__init__.py`` can call :func:`set_wait_policy` before anything imports torch.
"""
from __future__ import annotations

import os
import sys

from lengen.errors import ConfigError

#: models at most this wide train and evaluate with one intra-op thread by default
SMALL_D_MODEL = 256
WAIT_POLICY = "PASSIVE"

_process_threads = 0       # a count the process's caller chose (set_process_threads); 0 = none


def set_wait_policy(environ=None, modules=None) -> str | None:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless the variable is already set (the user's value wins)
    or torch is already imported (the runtime has read the environment; setting it then would
    only make ``os.environ`` claim a policy the process does not have). Returns the value in
    the environment (None: unset)."""
    env = os.environ if environ is None else environ
    loaded = sys.modules if modules is None else modules
    if "OMP_WAIT_POLICY" not in env and "torch" not in loaded:
        env["OMP_WAIT_POLICY"] = WAIT_POLICY
    return env.get("OMP_WAIT_POLICY")


def set_process_threads(n: int) -> None:
    """An explicit thread count for every workload this process runs from now on (a sweep's or a
    recipe's ``--threads``); ``train.threads`` in a config still wins. 0 clears it."""
    global _process_threads
    _process_threads = int(n)
    if n:
        import torch  # order: after set_wait_policy (module docstring)

        torch.set_num_threads(int(n))


def choose_threads(configured: int, d_model: int, device="cpu", environ=None) -> int:
    """The intra-op thread count for a workload on a model of width ``d_model`` on ``device``:
    ``configured`` (``train.threads`` / ``--threads``) when > 0, else the process-wide count
    (:func:`set_process_threads`), else torch's current count when ``OMP_NUM_THREADS`` is set or
    the model runs on an accelerator (the CPU then only feeds it), else 1 for
    ``d_model <= SMALL_D_MODEL``, else torch's current count."""
    import torch  # order: after set_wait_policy (module docstring)

    env = os.environ if environ is None else environ
    if configured:
        return int(configured)
    if _process_threads:
        return _process_threads
    if (env.get("OMP_NUM_THREADS") or str(device).split(":")[0] != "cpu"
            or d_model > SMALL_D_MODEL):
        return torch.get_num_threads()
    return 1


#: glibc malloc thresholds set by :func:`tune_allocator` (mallopt's M_MMAP_THRESHOLD: 32 MiB is
#: glibc's largest on 64-bit machines; M_TRIM_THRESHOLD)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3           # mallopt's parameter numbers (malloc.h)
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
_allocator_tuned: bool | None = None     # None: not tried yet in this process


def allocator_chosen_by_user(environ=None) -> str | None:
    """Why the allocator is the user's to set (the variable that says so), or None."""
    env = os.environ if environ is None else environ
    off = env.get("LENGEN_MALLOC_TUNING", "1").strip().lower()
    if off in ("0", "false", "no", "off"):
        return "LENGEN_MALLOC_TUNING"
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    for name in env:
        if name.startswith("MALLOC_") and name.endswith("_"):
            return name
    if any(lib in env.get("LD_PRELOAD", "") for lib in _OTHER_ALLOCATORS):
        return "LD_PRELOAD"
    return None


def tune_allocator(environ=None, libc=None) -> bool:
    """Raise glibc malloc's mmap and trim thresholds to :data:`MMAP_THRESHOLD` and
    :data:`TRIM_THRESHOLD` (why: module docstring), once per process. Returns whether they are
    set. Not where the user chose the allocator's behaviour (:func:`allocator_chosen_by_user`)
    or where the C library is not glibc. ``libc``: a stand-in for the C library (tests)."""
    global _allocator_tuned
    real = libc is None
    if real and _allocator_tuned is not None:
        return _allocator_tuned
    ok = False
    if allocator_chosen_by_user(environ) is None:
        if libc is None and _is_glibc():
            import ctypes

            libc = ctypes.CDLL(None)
        if libc is not None:
            # mallopt returns 1 on success; both or neither (the trim threshold alone turns
            # glibc's adaptive mmap threshold off and makes every large block a fresh mapping)
            ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                  and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    if real:
        _allocator_tuned = ok
    return ok


def _is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


#: the most torch threads lengen sets: more is a typo (``threads=100000`` made torch spawn threads
#: until a process limit killed it with a segfault); the same on every machine, so a stored
#: config is valid wherever it is read
MAX_THREADS = 1024


def check_thread_count(n, key: str = "train.threads") -> int:
    """``n`` when it is an integer in 0..MAX_THREADS, else ConfigError naming ``key``."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_THREADS:
        raise ConfigError(f"{key} must be an integer from 0 (lengen chooses) to {MAX_THREADS}, "
                         f"got {n!r}; this machine has {os.cpu_count()} CPU cores")
    return n


def use_threads(configured: int, d_model: int, device="cpu") -> int:
    """Set torch's intra-op thread count to :func:`choose_threads`'s and return it; for CPU work
    also the allocator's thresholds (:func:`tune_allocator`)."""
    import torch  # order: after set_wait_policy (module docstring)

    check_thread_count(configured, "threads")

    if str(device).split(":")[0] == "cpu":
        tune_allocator()
    n = choose_threads(configured, d_model, device)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


__all__ = ["SMALL_D_MODEL", "WAIT_POLICY", "MMAP_THRESHOLD", "TRIM_THRESHOLD",
           "MAX_THREADS", "allocator_chosen_by_user", "check_thread_count", "choose_threads", "set_process_threads", "set_wait_policy",
           "tune_allocator", "use_threads"]
