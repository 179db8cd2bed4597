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


def local_mask(tq: int, tk: int, q_offset: int, device, *, window: int | None = None,
               chunk: int | None = None, k_offset: int = 0) -> torch.Tensor:
    """[tq, tk] bool for queries q_offset.. and keys k_offset..: True where key j <= query i and,
    with ``window``, i - window < j (sliding window); with ``chunk``, j // chunk == i // chunk
    (Llama 4's chunked attention, ``attention_chunk_size``)."""
    qi = torch.arange(q_offset, q_offset + tq, device=device)[:, None]
    kj = torch.arange(k_offset, k_offset + tk, device=device)[None, :]
    m = kj <= qi
    if window is not None:
        m = m & (kj > qi - window)
    if chunk is not None:
        m = m & (torch.div(kj, chunk, rounding_mode="floor")
                 == torch.div(qi, chunk, rounding_mode="floor"))
    return m


def first_key(q_start: int, *, window: int | None = None, chunk: int | None = None) -> int:
    """The first key a query at ``q_start`` (or any later one) can see under the local mask."""
    if window is not None:
        return max(0, q_start - window + 1)
    if chunk is not None:
        return (q_start // chunk) * chunk
    return 0


def query_blocks(T: int, block: int):
    """Yield (start, end) query-row blocks covering 0..T."""
    for s in range(0, T, block):
        yield s, min(T, s + block)
