"""What a training run carries from step to step besides the weights, and what a checkpoint saves
of it: the optimizer and its schedule, the fp16 loss scaler, the data and positions generators,
the task's reading state, and the RNG streams (one per data-parallel rank). Resuming restores all
of it, so an interrupted run continues exactly as the uninterrupted one would have.
"""
from __future__ import annotations

import torch

from lengen.tasks.base import block_seed
from lengen.train import distributed
from lengen.train.optim import build_optimizer, build_scheduler, load_optimizer_state
from lengen.train.precision import grad_scaler


def positions_generator(seed: int) -> torch.Generator:
    """The training-positions stream: its own generator, derived from ``train.seed``."""
    return torch.Generator().manual_seed(block_seed(seed, "train", 0, "positions"))


class TrainingState:
    """The optimizer, schedule, loss scaler and generators of one run (``tc``: its TrainConfig;
    ``d``: its data-parallel context; ``device``: where the model is)."""

    def __init__(self, model, task, tc, d, device: torch.device):
        self.task, self.tc, self.d, self.device = task, tc, d, device
        self.opt = build_optimizer(model, tc)
        self.sched = build_scheduler(self.opt, tc)
        self.scaler = grad_scaler(tc.precision, device)
        self.data_gen = torch.Generator().manual_seed(tc.data_seed)
        self.pos_gen = positions_generator(tc.seed)
        self.cuda = device.type == "cuda"

    # ---- RNG streams ---------------------------------------------------------------------------
    def rank_rng(self) -> dict:
        """This rank's dropout streams (gathered from every rank when a checkpoint is saved)."""
        return {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(self.device) if self.cuda else None}

    def boundary(self) -> tuple:
        """The generators at a step boundary, to roll back to if the step is interrupted."""
        return (torch.get_rng_state(), self.data_gen.get_state(), self.pos_gen.get_state(),
                self.task.state_dict(),
                torch.cuda.get_rng_state(self.device) if self.cuda else None)

    def rollback(self, snapshot: tuple) -> None:
        torch.set_rng_state(snapshot[0])
        self.data_gen.set_state(snapshot[1])
        self.pos_gen.set_state(snapshot[2])
        self.task.load_state_dict(snapshot[3])
        if snapshot[4] is not None:
            torch.cuda.set_rng_state(snapshot[4], self.device)

    # ---- checkpoints ---------------------------------------------------------------------------
    def to_dict(self, ranks) -> dict:
        """The checkpoint's training state (``ranks``: every rank's :meth:`rank_rng`, in rank
        order, when data-parallel)."""
        state = {"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                 "torch_rng": torch.get_rng_state(), "data_rng": self.data_gen.get_state(),
                 "positions_rng": self.pos_gen.get_state(), "task": self.task.state_dict(),
                 "world_size": self.d.world_size}
        if self.tc.precision == "fp16":
            state["scaler"] = self.scaler.state_dict()
        if self.d.active:
            state["rank_rng"] = ranks          # every rank's dropout stream, in rank order
        elif self.cuda:
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return state

    def load(self, state: dict, log=print) -> int:
        """Restore a checkpoint's training state (weights apart); returns its step. A run saved
        by another number of processes keeps data, positions, optimizer and schedule exactly;
        ranks it did not have get fresh dropout streams (``log`` says so on the main rank)."""
        d, tc = self.d, self.tc
        step = int(state["step"])
        load_optimizer_state(self.opt, state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.data_gen.set_state(state["data_rng"])
        if "positions_rng" in state:      # checkpoints before the positions stream had none
            self.pos_gen.set_state(state["positions_rng"])
        self.task.load_state_dict(state.get("task") or {})
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        saved_world, ranks = int(state.get("world_size", 1)), state.get("rank_rng")
        if ranks and (saved_world == d.world_size or d.rank == 0):
            mine = ranks[d.rank]
            torch.set_rng_state(mine["torch"])
            if self.cuda and mine["cuda"] is not None:
                torch.cuda.set_rng_state(mine["cuda"], self.device)
        elif d.rank == 0:
            torch.set_rng_state(state["torch_rng"])
            cuda_rng = state.get("cuda_rng")
            if (cuda_rng is not None and self.cuda
                    and len(cuda_rng) == torch.cuda.device_count()):
                torch.cuda.set_rng_state_all(cuda_rng)
        else:                              # a rank the saved run did not have
            torch.manual_seed(distributed.rank_seed(tc.seed, d.rank, step))
        if saved_world != d.world_size and d.is_main:
            log(f"lengen: resuming a run saved by {saved_world} process(es) with "
                f"{d.world_size}: data, positions, weights, optimizer and schedule continue "
                f"exactly (train.batch_size={tc.batch_size} is the global batch); the dropout "
                f"streams of ranks 1.. are re-seeded and gradients are summed in another order, "
                f"so the run equals the uninterrupted one within float rounding when "
                f"model.dropout=0")
        return step


__all__ = ["TrainingState", "positions_generator"]
