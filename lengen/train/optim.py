"""Optimizer and learning-rate schedule.

AdamW with decoupled weight decay applied only to matrices of linear layers by default: norms,
biases, embeddings and positional tables are not decayed unless ``decay_all`` is set (the usual
GPT practice). Schedule: linear warmup from 0 to ``lr`` over ``warmup_steps`` then cosine decay to
``lr * min_lr_frac`` at the last step (or constant).
"""
from __future__ import annotations

import math

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float, decay_all: bool = False):
    decay, no_decay = [], []
    # a model may say which its matrices are (a Hugging Face backbone: GPT-2's Conv1D too)
    own = getattr(model, "linear_weights", None)
    linear_weights = ({id(w) for w in own()} if own is not None else
                      {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)})
    # positional schemes' parameters are tables and scalars like the embeddings, also when held
    # in an nn.Linear (Transformer-XL's W_r): never decayed unless decay_all
    schemes = model.unique_posencs() if hasattr(model, "unique_posencs") else []
    linear_weights -= {id(p) for s in schemes for p in s.parameters()}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if decay_all or id(p) in linear_weights else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def fused_on_cpu(params) -> bool:
    """Whether the optimizer runs torch's fused kernel: every parameter a float32 CPU tensor.
    The default for CPU tensors is a loop of about ten ops per parameter (each a pass over it
    and a dispatch); the fused kernel does one pass per tensor, with the same update to fp32
    rounding (tests/test_optim.py). CUDA keeps torch's own default (foreach)."""
    params = list(params)
    return bool(params) and all(p.device.type == "cpu" and p.dtype == torch.float32
                                for p in params)


def build_optimizer(model: nn.Module, tc) -> torch.optim.Optimizer:
    fused = fused_on_cpu(model.parameters()) or None
    if tc.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=tc.lr, betas=tuple(tc.betas), eps=tc.eps,
                                fused=fused)
    return torch.optim.AdamW(param_groups(model, tc.weight_decay, tc.decay_all), lr=tc.lr,
                             betas=tuple(tc.betas), eps=tc.eps, fused=fused)


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    """``opt.load_state_dict(state)``, keeping how ``opt`` steps: torch copies every param
    group's settings from the checkpoint, ``fused`` and ``foreach`` included, so a run saved by
    another lengen version or on another device would step with the saved implementation (and a
    fused optimizer restored as the loop fails under fp16's GradScaler). The values are the
    checkpoint's; the implementation is the one :func:`build_optimizer` chose here."""
    keep = {k: opt.defaults.get(k) for k in ("fused", "foreach")}
    opt.load_state_dict(state)
    for group in opt.param_groups:
        group.update(keep)


def lr_factor(step: int, *, total: int, warmup: int, min_frac: float, schedule: str) -> float:
    """Multiplier of the base lr at ``step`` (0-based step about to be taken)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(opt, tc) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, total=tc.steps, warmup=tc.warmup_steps,
                                 min_frac=tc.min_lr_frac, schedule=tc.schedule))
