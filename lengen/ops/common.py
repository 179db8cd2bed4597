"""Helpers shared by the attention ops."""
from __future__ import annotations

import torch


def masked_softmax(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim restricted to ``keep``; rows with nothing kept are all zero.

    Never falls back to a uniform distribution over masked keys (which for a causal model would
    leak the future). Safe for autograd: masked entries and empty rows get zero gradient, no NaN.
    """
    logits = logits.masked_fill(~keep, float("-inf"))
    m = logits.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # empty rows: any finite shift
    p = torch.exp(logits - m)                                    # exactly 0 where masked
    denom = p.sum(dim=-1, keepdim=True)
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    return p / denom


def causal_mask(tq: int, tk: int, q_offset: int, device) -> torch.Tensor:
    """[tq, tk] bool, True where key j <= query (q_offset + r)."""
    qi = torch.arange(q_offset, q_offset + tq, device=device)[:, None]
    kj = torch.arange(tk, device=device)[None, :]
    return kj <= qi


def query_blocks(T: int, block: int):
    """Yield (start, end) query-row blocks covering 0..T."""
    for s in range(0, T, block):
        yield s, min(T, s + block)
