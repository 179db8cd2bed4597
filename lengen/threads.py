"""How lengen runs torch on CPU threads: the OpenMP wait policy and the intra-op thread count.

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

This module imports nothing from lengen and imports torch only inside functions, so
``lengen/__init__.py`` can call :func:`set_wait_policy` before anything imports torch.
"""
from __future__ import annotations

import os
import sys

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


def use_threads(configured: int, d_model: int, device="cpu") -> int:
    """Set torch's intra-op thread count to :func:`choose_threads`'s and return it."""
    import torch  # order: after set_wait_policy (module docstring)

    n = choose_threads(configured, d_model, device)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


__all__ = ["SMALL_D_MODEL", "WAIT_POLICY", "choose_threads", "set_process_threads",
           "set_wait_policy", "use_threads"]
