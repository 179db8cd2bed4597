"""Memory and threads of the tiled CPU training ops (:mod:`lengen.ops.cpu_tiles`): per-thread
scratch tiles, a pool for the buffers a forward pass keeps for its backward, and the worker
threads that run tile groups.

Why buffer reuse: allocating fresh memory costs page faults on every first touch, which on small
or virtualised machines costs as much as several passes over the data. Scratch tiles therefore
live in a per-thread workspace, and the one big tensor a fast path keeps for its backward
(softmax numerators) is taken from and given back to a small pool, so steady-state training
allocates nothing large.

Why worker threads: the tiles are many small ops. Parallelising each op over cores (ATen's
default) puts a fork/join barrier in every op, and on a busy machine every barrier waits for a
descheduled core, which made steps many times slower on a shared 2-core box (benchmarks/README.md,
"Reading the numbers"). With more than one
torch thread, :func:`run_groups` hands whole tile groups to that many worker threads instead, each
running its ops single-threaded (ATen releases the GIL inside kernels, so they run in parallel and
the Python between ops overlaps with the other workers' kernels); groups touch disjoint outputs.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import torch


class _Local(threading.local):
    def __init__(self):
        self.scratch: dict = {}
        self.pool: OrderedDict = OrderedDict()     # (size class, dtype, device) -> [tensors]
        self.pool_bytes = 0


_local = _Local()
#: most bytes the pool keeps for later reuse (per thread); beyond it the oldest are dropped
POOL_LIMIT_BYTES = 2 << 30


def scratch(name: str, shape, dtype, device) -> torch.Tensor:
    """A reusable uninitialised tensor of ``shape`` (a view of a per-thread buffer that only grows).

    Valid until the next ``scratch`` call with the same name; never hand one to autograd.
    """
    n = 1
    for d in shape:
        n *= d
    key = (name, dtype, torch.device(device))
    buf = _local.scratch.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.empty(max(n, 1), dtype=dtype, device=device)
        _local.scratch[key] = buf
    return buf[:n].view(shape)


def _size_class(n: int) -> int:
    """Round up to 1/8 steps of the next lower power of two (at most 12.5% waste)."""
    if n <= 4096:
        return 4096
    step = 1 << max(0, n.bit_length() - 4)
    return -(-n // step) * step


def pool_take(numel: int, dtype, device) -> torch.Tensor:
    """A flat uninitialised tensor of ``numel`` elements, reused from the pool when possible."""
    c = _size_class(numel)
    key = (c, dtype, torch.device(device))
    free = _local.pool.get(key)
    if free:
        t = free.pop()
        _local.pool_bytes -= t.numel() * t.element_size()
        if not free:
            del _local.pool[key]
        return t[:numel]
    return torch.empty(c, dtype=dtype, device=device)[:numel]


def pool_give(t: torch.Tensor) -> None:
    """Return a tensor from :func:`pool_take` (no other reference to it may be used afterwards)."""
    base = t._base if t._base is not None else t
    key = (base.numel(), base.dtype, base.device)
    _local.pool.setdefault(key, []).append(base)
    _local.pool.move_to_end(key)
    _local.pool_bytes += base.numel() * base.element_size()
    while _local.pool_bytes > POOL_LIMIT_BYTES and _local.pool:
        k, lst = next(iter(_local.pool.items()))
        old = lst.pop(0)
        _local.pool_bytes -= old.numel() * old.element_size()
        if not lst:
            del _local.pool[k]


def empty_cache() -> None:
    """Release this thread's workspace and pooled buffers."""
    _local.scratch.clear()
    _local.pool.clear()
    _local.pool_bytes = 0


_executor: ThreadPoolExecutor | None = None
_executor_pid = 0


def run_groups(fn, n_groups: int) -> None:
    """Call ``fn(i)`` for ``i in range(n_groups)``, shared among ``torch.get_num_threads()``
    worker threads (each set to one intra-op thread, autograd off), or in this thread when torch
    runs single-threaded. ``fn`` calls must write disjoint outputs; the first exception re-raises.
    """
    global _executor, _executor_pid
    n = min(torch.get_num_threads(), n_groups)
    if n <= 1:
        for i in range(n_groups):
            fn(i)
        return
    # a forked child inherits the executor object but not its threads: make a new one there
    if _executor is None or _executor._max_workers < n or _executor_pid != os.getpid():
        _executor = ThreadPoolExecutor(max_workers=n, thread_name_prefix="lengen-tiles")
        _executor_pid = os.getpid()
    nthreads = torch.get_num_threads()
    lock, nxt = threading.Lock(), [0]

    def worker():
        # per-thread OpenMP/MKL setting; it also sets the process default for threads started
        # later, so the caller's value is put back before returning
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                while True:
                    with lock:
                        i, nxt[0] = nxt[0], nxt[0] + 1
                    if i >= n_groups:
                        return
                    fn(i)
        finally:
            torch.set_num_threads(nthreads)

    futures = [_executor.submit(worker) for _ in range(n)]
    for f in futures:
        f.result()


def group_target() -> int:
    """``plan_tiles(min_groups=)`` for :func:`run_groups`: 4 groups per worker thread (some
    balance when a worker gets descheduled), 1 when single-threaded."""
    n = torch.get_num_threads()
    return 4 * n if n > 1 else 1


def sum_parts(parts: list):
    """The sum of per-chunk gradient accumulators (each tensor counted once: chunks that may
    share one list it repeatedly); None for an empty list or a list of None."""
    total, seen = None, set()
    for t in parts:
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        total = t if total is None else total + t
    return total


def index_chunks(n: int) -> list[tuple[int, int]]:
    """0..n-1 cut into :func:`group_target` contiguous ranges ``(start, stop)`` (fewer when n is
    small), the work items of :func:`run_groups` for the C kernels that loop over rows or
    (batch, head) pairs themselves."""
    w = max(1, min(group_target(), n))
    step = -(-n // w)
    return [(p, min(n, p + step)) for p in range(0, n, step)]
