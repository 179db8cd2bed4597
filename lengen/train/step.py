"""One training step's pieces, shared by the training loop (:mod:`lengen.train.loop`) and the
recipes' time estimates (:mod:`lengen.recipes.estimate`), so an estimate times exactly the
work a step does. The loop keeps what only it needs around them: data-parallel row slicing,
the global loss across ranks, the divergence check and the interrupt-safe phase markers."""
from __future__ import annotations

import dataclasses

import torch

from lengen.eval.metrics import restrict_to_outputs
from lengen.train.precision import autocast, compile_failure, is_compiler_error


def loss_fn(logits, batch, denom=None):
    """Mean cross-entropy over ``batch.loss_mask``; ``train`` hands it logits and targets already
    restricted to the task's output classes when the task has an ``output_slice``. ``denom``
    replaces the batch's own count of scored tokens (data-parallel ranks divide their share by
    the global batch's count)."""
    mask = batch.loss_mask
    nll = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                            batch.targets.flatten(), reduction="none")
    return (nll * mask.flatten().float()).sum() / (mask.sum().clamp_min(1) if denom is None
                                                   else denom)


def forward_loss(fwd, batch, positions, tc, device, out_slice, denom=None, loss=loss_fn):
    """The loss of ``batch``: forward through ``fwd`` (the model, DDP-wrapped or compiled) under
    ``tc.precision``'s autocast, outputs restricted to the task's ``out_slice``, ``loss`` (the
    cross-entropy over the scored tokens; divided by ``denom`` when given)."""
    keep = scored_rows(fwd, batch, tc)
    try:
        with autocast(tc.precision, device):
            if keep is None:
                out = fwd(batch.inputs, positions=positions)               # [B, T, V]
            else:
                out = fwd(batch.inputs, positions=positions, keep=keep)[None]   # [1, N, V]
    except Exception as e:
        raise compile_failure(e) if tc.compile and is_compiler_error(e) else e
    if keep is not None:            # the scored tokens as one row: the same sum, the same count
        batch = dataclasses.replace(batch, targets=batch.targets[keep][None],
                                    loss_mask=torch.ones_like(keep[keep])[None])
    logits, targets = restrict_to_outputs(out, batch.targets, out_slice, batch.loss_mask)
    scored = dataclasses.replace(batch, targets=targets)
    return loss(logits, scored) if denom is None else loss(logits, scored, denom=denom)


#: a batch scoring at most this share of its tokens asks the model for those tokens' logits only
SCORED_SHARE = 0.75


def scored_rows(fwd, batch, tc):
    """The mask of the scored tokens to hand the model as ``keep`` (bool [B, T]), or None for
    the full forward: only for a model whose class declares ``supports_keep`` (lengen's
    Transformer; a subclass whose forward drops ``keep`` sets it False; the Hugging Face
    backbone and models that do not declare it get the full forward), not
    compiled (a data-dependent row count), without dropout (the pruned rows would change how
    many random numbers dropout draws, so the run would take another random path), and when
    at most ``SCORED_SHARE`` of the tokens are scored (else the gather costs more than it saves).
    The loss is the same sum over the same tokens; only the rounding of the GEMMs over fewer
    rows can differ (tests/test_keep.py). What is not computed cannot overflow: a NaN or inf
    that only unscored tokens would have carried no longer makes the loss NaN (with the full
    forward it did, through 0 * NaN, and the loop stopped as diverged)."""
    model = getattr(fwd, "module", fwd)                     # DDP wraps the model
    if tc.compile or not getattr(type(model), "supports_keep", False):
        return None
    if getattr(getattr(model, "cfg", None), "dropout", 1.0) != 0:
        return None
    mask = batch.loss_mask
    if mask.dtype != torch.bool or mask.float().mean() > SCORED_SHARE:
        return None
    return mask


def backward_and_clip(loss, model, opt, scaler, tc):
    """Gradients of ``loss`` (scaled for fp16, then unscaled so clipping sees the true ones),
    clipped to ``tc.grad_clip``; returns the gradient norm before clipping."""
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or float("inf"))


def apply_update(opt, scaler, sched) -> None:
    """The optimizer step (skipped by the fp16 scaler when gradients overflowed) and the
    schedule's step."""
    scaler.step(opt)
    scaler.update()
    sched.step()


__all__ = ["loss_fn", "forward_loss", "scored_rows", "SCORED_SHARE",
           "backward_and_clip", "apply_update"]
