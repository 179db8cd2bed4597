"""Masked accuracy metrics on a batch.

* whole-sequence accuracy: a sequence counts only if *every* scored position is right (the TRA
  paper's metric; a sequence with no scored position counts as correct);
* per-token accuracy over scored positions (for flip-flop: per-read accuracy; 1 - it is the
  "glitch rate" of Liu et al.);
* mean cross-entropy over scored positions (-> perplexity).

Tasks whose answers live in a known id range (``task.output_slice``, the Chomsky tasks' output
classes) are scored as in the reference code, whose output layer has one unit per output class:
:func:`restrict_to_outputs` keeps only those logits, so argmax and cross-entropy range over the
output classes alone, and shifts the targets to match.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


IGNORE = -100    # F.cross_entropy's default ignore_index: targets never scored


def restrict_to_outputs(logits: torch.Tensor, targets: torch.Tensor, output_slice: slice | None,
                        mask: torch.Tensor | None = None):
    """``(logits[..., output_slice], targets - output_slice.start)``; ``output_slice=None`` returns
    the inputs unchanged. Targets outside the slice (input and placeholder positions, never
    scored) become ``IGNORE``; one of them under ``mask`` is an error rather than a silent miss."""
    if output_slice is None:
        return logits, targets
    start, stop = output_slice.start, output_slice.stop
    inside = (targets >= start) & (targets < stop)
    if mask is not None and bool((mask & ~inside).any()):
        raise ValueError(f"a scored target lies outside the task's output classes "
                         f"[{start}, {stop})")
    return logits[..., start:stop], torch.where(inside, targets - start, IGNORE)


def batch_stats(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> dict:
    """logits [B, T, V], targets [B, T], mask [B, T] -> sums to be pooled across batches."""
    pred = logits.argmax(-1)
    right = (pred == targets) | ~mask
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return {"sequences": targets.shape[0],
            "sequences_correct": int(right.all(dim=1).sum()),
            "tokens": int(mask.sum()),
            "tokens_correct": int(((pred == targets) & mask).sum()),
            "nll_sum": float((nll.double() * mask.flatten().double()).sum())}


def finalize(s: dict) -> dict:
    tokens = max(s["tokens"], 1)
    return {"seq_acc": s["sequences_correct"] / max(s["sequences"], 1),
            "token_acc": s["tokens_correct"] / tokens,
            "nll": s["nll_sum"] / tokens,
            "sequences": s["sequences"], "tokens": s["tokens"]}
