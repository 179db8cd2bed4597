"""PaTH attention over query blocks (equations in :mod:`lengen.ops.path.naive`), memory linear
in T: the per-block pieces of :mod:`lengen.ops.path.blocked` (the compact UT-transform form,
[B, H, T, C] in all) once, then a few query blocks at a time meet every key block before them
([B, H, ~block_size, keys] logits per pass; the sweep carries only those blocks' queries).

``q_offset`` with ``w``, ``beta`` of the new keys only: a cached decoding step, whose cached keys
were carried to the last cached token already (:func:`carry_keys`); they enter as tokens with no
transform (beta 0: H = I), and the queries as rows q_offset.. of the sequence.
"""
from __future__ import annotations

import torch

from lengen.ops.path.blocked import BLOCK, blocking, key_side, logit_rows, query_side, to_blocks


def path_attention_chunked(q, k, v, w, beta, *, bias_fn=None, scale=None, block_size=256,
                           q_offset=0, block=BLOCK):
    """q: [B, H, Tq, hd]; k, v: [B, H, Tk, hd], Tk = q_offset + Tq; w: [B, H, Tw, hd], beta:
    [B, H, Tw]: the transforms of the last Tw keys (Tw = Tk without a cache) -> [B, H, Tq, hd].
    ``block``: the transforms' token block C (at most ``block_size``); each pass takes
    ``block_size // C`` query blocks."""
    Tk = k.shape[-2]
    first = Tk - w.shape[-2]                          # keys from here on carry a transform
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    C, nb = blocking(Tk, min(block, block_size))
    per = max(1, block_size // C)                     # query blocks per pass
    I0 = q_offset // C                                # the first block with a query
    with torch.autocast(q.device.type, enabled=False):
        Kb = to_blocks(k, C, nb, acc)                                   # [nb, B, H, C, hd]
        Wb, bb = (to_blocks(t, C, nb, acc, front=first) for t in (w, beta))
        X, SG, kt, M = key_side(Kb, Wb, bb)
        Qb = to_blocks(q, C, nb - I0, acc, front=q_offset - I0 * C) * sc   # z linear in q
        qt, intra = query_side(Qb, Kb[I0:], Wb[I0:], X[I0:], SG[I0:])
    outs = []
    for a in range(I0, nb, per):
        b = min(nb, a + per)
        r0, r1 = max(a * C, q_offset), min(b * C, Tk)  # the pass's rows, keys 0..r1-1 visible
        with torch.autocast(q.device.type, enabled=False):
            z = logit_rows(qt[a - I0:b - I0], intra[a - I0:b - I0], kt, M, a, b)
            z = z[:, :, r0 - a * C:r1 - a * C, :r1]                     # [B, H, rows, r1]
        if bias_fn is not None:
            z = z + bias_fn(r0 - q_offset, r1 - q_offset)[..., :r1].to(z.dtype)
        outs.append(z.softmax(-1).to(v.dtype) @ v[:, :, :r1])          # causal: -inf in z
    return torch.cat(outs, dim=2)


def carry_keys(k, w, beta, first):
    """Keys carried to the last token: k_j -> H_{T-1} ... H_{j+1} k_j for every key j, where
    ``w``, ``beta`` are the transforms of keys first.. (the keys before ``first`` are carried to
    key first - 1 already). k: [B, H, Tk, hd] -> same shape, in k's dtype."""
    acc = torch.promote_types(k.dtype, torch.float32)
    kk, ww, bb = k.to(acc), w.to(acc), beta.to(acc)
    Tk = k.shape[-2]
    idx = torch.arange(Tk, device=k.device)
    for t in range(first, Tk):                                     # H_t on every key j < t
        wt = ww[:, :, t - first, None, :]
        upd = kk - bb[:, :, t - first, None, None] * (kk * wt).sum(-1, keepdim=True) * wt
        kk = torch.where((idx < t)[None, None, :, None], upd, kk)
    return kk.to(k.dtype)
