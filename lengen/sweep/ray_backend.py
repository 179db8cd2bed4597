"""Optional Ray backend: the same per-run function as the local backend, as Ray remote tasks.

Ray is imported only when ``backend='ray'`` is chosen. Each run is one task with ``num_cpus``
CPUs and ``num_gpus`` GPUs (defaults 1 and 0); ``max_retries=0`` because a rerun of the sweep,
not Ray, is what retries a run (it resumes from the run's checkpoint). Results are collected as
tasks finish, so the aggregate files are rewritten after every run exactly as locally. On a
cluster, ``out_dir`` must be a path every node can read and write (run directories are written by
the node that trains them).
"""
from __future__ import annotations

import traceback

from lengen.sweep.grid import failure_result


def import_ray():
    try:
        import ray  # optional dependency
    except ImportError as e:
        raise ImportError("the Ray sweep backend needs Ray: pip install 'ray[default]' "
                          "(or use backend='local', which needs nothing extra)") from e
    return ray


def run_ray(specs, out_dir: str, run_fn, opts: dict, on_result, *, address: str | None = None,
            num_cpus: float = 1, num_gpus: float = 0, max_in_flight: int | None = None) -> None:
    """Submit one Ray task per run (at most ``max_in_flight`` at once; default all) and call
    ``on_result`` with each result record as it arrives. A task that raises or whose worker
    dies is recorded as a failed run; the other runs go on."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True)
    remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=0)(run_fn)
    queue = list(specs)
    in_flight = {}
    limit = max_in_flight or len(queue) or 1
    while queue or in_flight:
        while queue and len(in_flight) < limit:
            spec = queue.pop(0)
            in_flight[remote.remote(spec, out_dir, **opts)] = spec
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            spec = in_flight.pop(ref)
            try:
                res = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - task error or lost worker: record, go on
                res = failure_result(spec, f"{type(e).__name__}: {e}", traceback.format_exc())
            on_result(res)


__all__ = ["run_ray", "import_ray"]
