"""Data-parallel training with ``torchrun`` (torch.distributed DDP), applied from outside the model.

Launch::

    torchrun --nproc_per_node 4 -m lengen train --run-dir runs/x train.batch_size=128 ...
    torchrun --nproc_per_node 4 $(which lengen) train ...          # the same thing

``lengen train`` (and :func:`lengen.train`) turn data-parallel on by themselves when the
environment is a torchrun job with ``WORLD_SIZE > 1`` (``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT`` set by the launcher), or when the caller already initialised a default process
group of more than one process. There is no flag: the launcher decides, and the same command line
runs on one process without it. ``WORLD_SIZE=1`` is a plain single-process run.

Decisions (README "Data-parallel training" says the same for users):

* **Backend**: gloo when ``train.device=cpu``, NCCL when ``train.device=cuda`` (rank r takes
  ``cuda:LOCAL_RANK``); nothing else changes. An explicit ``cuda:K`` is refused when several
  processes would share that one GPU.
* **Batch**: ``train.batch_size`` is the *global* batch; each of the N ranks computes on
  ``batch_size / N`` rows, so a config means the same run at every world size (the learning rate
  needs no rescaling). It must be divisible by N (checked before anything starts).
* **Data**: every rank draws the whole global batch from the one data generator seeded by
  ``train.data_seed`` (and the positions for it from the one positions generator), then keeps rows
  ``[r B/N, (r+1) B/N)``. Drawing is cheap next to a training step (``benchmarks/RESULTS.md`` measures the
  data paths), and it buys three things a
  per-rank generator seeded by (data_seed, r) cannot: the N-process run *is* the one-process run
  on the same global batches (tested equal within fp32 rounding, gradients included); the data and
  positions generator states are identical on every rank, so the ones rank 0 saves are right for
  all ranks; and resuming with a different number of processes continues the very same data
  stream. Per-sequence positions (``[B, T]``, batch-aware samplers) are drawn for the global batch
  and sliced with it, so they are exactly the single-process ones; the padded length T is the
  global batch's.
* **Loss**: each rank's loss is its rows' summed token loss divided by the token count of the
  *global* batch, times N; DDP averages gradients over ranks, so the gradient is exactly that of
  the global mean loss (ranks may hold different token counts). The logged loss and the NaN check
  use the all-reduced global loss, so every rank stops at the same step.
* **Dropout**: torch's global RNG (dropout) is per rank: rank 0 continues the stream a
  single-process run uses, rank r > 0 is seeded from (train.seed, r). Checkpoints hold every
  rank's RNG state, so a resume at the same world size is bit-exact.
* **Files**: rank 0 alone takes the run-directory lock, checks and moves old runs, reads and
  writes checkpoints, metrics, ``config.json``, the final weights and the evaluation rows; errors it
  meets there are relayed, so every rank fails with the same message (a held lock included).
  Resuming, rank 0 loads the newest usable checkpoint and broadcasts the training state; DDP
  broadcasts its weights when it wraps the model, so the other ranks never read the run directory
  (it need not be on a shared file system).
* **Evaluation**: on rank 0, on the unwrapped model; the others wait in the next step's collective
  (periodic evaluation; keep ``train.eval_sequences`` small enough to finish within the process
  group timeout, :data:`TIMEOUT`) or return once training is done (final evaluation).
* **Resume across a changed world size** works: the global batch, the data and positions streams,
  the weights, optimizer and schedule continue exactly. What cannot carry over is the per-rank
  dropout stream and float rounding (gradients are summed in another order): rank 0 keeps its
  saved RNG, new ranks are seeded from (train.seed, rank, step), and a note says so. With dropout
  0 the continued run equals the uninterrupted one within float rounding.
* **Ctrl-C**: torchrun forwards one SIGINT to every worker; the ranks agree on it in the per-step
  all-reduce and all stop at the same step boundary with a checkpoint. An exception in the middle
  of a step (a second Ctrl-C, a crash) saves nothing; the last checkpoint is kept.
"""
from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from lengen.errors import ConfigError, LengenError
from lengen.tasks.base import block_seed

#: process-group timeout: how long ranks wait in a collective (e.g. for rank 0's periodic
#: evaluation or a checkpoint write) before failing
TIMEOUT = datetime.timedelta(minutes=60)
_ENV = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def env_world_size() -> int:
    """World size of a torchrun job from the environment (1 outside one)."""
    raw = os.environ.get("WORLD_SIZE")
    if raw is None:
        return 1
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"the environment variable WORLD_SIZE={raw!r} is not an integer; launch "
                          f"with torchrun --nproc_per_node N, or unset WORLD_SIZE") from None
    return max(n, 1)


@dataclass
class Dist:
    """This process's place in a data-parallel job (world_size 1: a plain run, no-ops)."""
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    owns_group: bool = False      # initialised here, so destroyed here

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rows(self, batch_size: int) -> tuple[int, int]:
        """This rank's rows ``[start, stop)`` of a global batch."""
        per = batch_size // self.world_size
        return self.rank * per, (self.rank + 1) * per

    def close(self) -> None:
        if self.owns_group and torch.distributed.is_initialized():
            # DDP's reducer holds the group; if a reference cycle keeps it alive past
            # destroy_process_group, the gloo group's worker threads are torn down at interpreter
            # exit instead, which can abort the process ("terminate called without an active
            # exception", seen once in ~10 runs of test_ddp's torchrun resume): free it first
            gc.collect()
            torch.distributed.destroy_process_group()
        self.owns_group = False


def training_device(device: str, dist_world: int, local_rank: int) -> torch.device:
    """The device this rank trains on: ``cuda`` -> ``cuda:LOCAL_RANK`` in a multi-process job."""
    dev = torch.device(device)
    if dist_world > 1 and dev.type == "cuda":
        if dev.index is not None:
            raise ConfigError(f"train.device={device} names one GPU, but the {dist_world} "
                              f"processes of this torchrun job need one each; set "
                              f"train.device=cuda (rank r then uses cuda:LOCAL_RANK)")
        return torch.device("cuda", local_rank)
    return dev


def setup(tc) -> Dist:
    """Join (or start) the process group when this is a multi-process job; check the config
    against it first (global batch divisible by the world size, one device type gloo or NCCL can
    serve), so a bad config fails on every rank before any file is touched."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
        local = int(os.environ.get("LOCAL_RANK", rank))
        owns = False
    else:
        world = env_world_size()
        if world == 1:
            return Dist()
        missing = [k for k in _ENV if k not in os.environ]
        if missing:
            raise ConfigError(f"WORLD_SIZE={world} is set but {', '.join(missing)} is not: start "
                              f"data-parallel training with torchrun --nproc_per_node N -m lengen "
                              f"train ..., or unset WORLD_SIZE for a single process")
        rank, local, owns = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), True
        if not dist.is_available():
            raise ConfigError("this torch build has no torch.distributed; run a single process "
                              "(without torchrun) or install a torch build with distributed "
                              "support")
    if world == 1:
        return Dist()
    check_world(tc, world)
    dev = training_device(tc.device, world, local)
    if owns:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=TIMEOUT)
    elif dev.type == "cuda":
        torch.cuda.set_device(dev)
    return Dist(world, rank, local, owns)


def check_world(tc, world: int) -> None:
    """Config checks that depend on the number of processes."""
    dev = torch.device(tc.device)
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"train.device={tc.device}: data-parallel training runs on cpu (gloo) or "
                          f"cuda (NCCL); use one of those, or run a single process")
    if tc.batch_size % world:
        lower = tc.batch_size - tc.batch_size % world
        raise ConfigError(f"train.batch_size={tc.batch_size} is the global batch, split evenly "
                          f"over the {world} processes of this torchrun job; choose a multiple "
                          f"of {world} (e.g. {lower or world} or {lower + world}), or another "
                          f"--nproc_per_node")


def _collective_device(device: torch.device) -> torch.device:
    """Where object collectives stage their bytes: the GPU under NCCL, else the CPU (gloo)."""
    return device if device.type == "cuda" else torch.device("cpu")


def on_main(d: Dist, fn, device: torch.device | None = None):
    """Run ``fn()`` on rank 0 only; every rank returns its result (broadcast: must pickle) or
    raises its error. An error rank 0 meets (a held lock, a run with another config) is raised
    on the other ranks too, as the same class with the same message when that class is one of
    lengen's, so they all fail cleanly instead of waiting in the next collective."""
    if not d.active:
        return fn()
    box = [None]
    error = None
    if d.is_main:
        try:
            box[0] = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - relayed, then re-raised below
            error = e
            box[0] = ("error", type(e), str(e))
    torch.distributed.broadcast_object_list(box, src=0, device=_collective_device(
        device or torch.device("cpu")))
    if error is not None:
        raise error
    if box[0][0] == "error":
        _, cls, msg = box[0]
        if isinstance(cls, type) and issubclass(cls, LengenError):
            raise cls(msg)
        raise RuntimeError(f"rank 0 failed ({cls.__name__}: {msg})")
    return box[0][1]


def gather(d: Dist, obj) -> list:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not d.active:
        return [obj]
    out = [None] * d.world_size
    torch.distributed.all_gather_object(out, obj)
    return out


def agree(d: Dist, loss: torch.Tensor, stop: bool) -> tuple[torch.Tensor, bool]:
    """One all-reduce per step: (global loss, whether any rank was asked to stop). ``loss`` is
    this rank's share (see the module docstring: the shares sum to N x the global loss)."""
    if not d.active:
        return loss.detach(), stop
    vec = torch.stack([loss.detach().float(), torch.tensor(float(stop), device=loss.device)])
    torch.distributed.all_reduce(vec)
    return vec[0] / d.world_size, bool(vec[1] > 0)


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """torch's global RNG seed (dropout) of rank > 0 at ``step`` (0: the start of a run)."""
    return block_seed(seed, "train" if not step else f"train@{step}", rank, "dropout")


def wrap(model: torch.nn.Module, d: Dist, device: torch.device) -> torch.nn.Module:
    """The module the training step calls: DDP around ``model`` in a multi-process job (which
    broadcasts rank 0's weights and buffers to every rank), else ``model`` itself."""
    if not d.active:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids)


__all__ = ["Dist", "setup", "on_main", "gather", "agree", "wrap",
           "rank_seed", "check_world", "training_device", "env_world_size", "TIMEOUT"]
