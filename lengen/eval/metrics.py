"""Masked accuracy metrics on a batch.

* whole-sequence accuracy: a sequence counts only if *every* scored position is right (the TRA
  paper's metric; a sequence with no scored position counts as correct);
* per-token accuracy over scored positions (for flip-flop: per-read accuracy; 1 - it is the
  "glitch rate" of Liu et al.);
* mean cross-entropy over scored positions (-> perplexity).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def batch_stats(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> dict:
    """logits [B, T, V], targets [B, T], mask [B, T] -> sums to be pooled across batches."""
    pred = logits.argmax(-1)
    right = (pred == targets) | ~mask
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return {"sequences": targets.shape[0],
            "sequences_correct": int(right.all(dim=1).sum()),
            "tokens": int(mask.sum()),
            "tokens_correct": int(((pred == targets) & mask).sum()),
            "nll_sum": float((nll * mask.flatten().float()).sum())}


def finalize(s: dict) -> dict:
    tokens = max(s["tokens"], 1)
    return {"seq_acc": s["sequences_correct"] / max(s["sequences"], 1),
            "token_acc": s["tokens_correct"] / tokens,
            "nll": s["nll_sum"] / tokens,
            "sequences": s["sequences"], "tokens": s["tokens"]}
