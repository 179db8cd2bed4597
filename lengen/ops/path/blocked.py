"""PaTH attention for training: the dense logits of :mod:`lengen.ops.path.naive` in blocks of C
tokens, so the Python loop runs ~3C + T/C steps instead of T (equations in ``naive``).

With the tokens cut into blocks of C (the last one padded with identity transforms), the product
between key j in block J and query i in block I > J splits into three parts::

    z_ij = [q_i^T H_i ... H_{s_I}] [M_{I-1} ... M_{J+1}] [H_{e_J - 1} ... H_{j+1} k_j]
    M_b  = H_{e_b - 1} ... H_{s_b}                          (the hd x hd product of block b)

(s_b, e_b: the first and one-past-last token of block b). The query part and the key part are
scans of C steps inside every block at once, the M_b a scan of C rank-one updates; the products
between blocks go block-diagonal by block-diagonal (T/C steps), and the pairs inside one block
are a scan over its keys as in the reference. Memory is the reference's ([B, H, T, T] logits):
a training path; evaluation uses the query-blocked op.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _householder(x, w, beta):
    """H x for row vectors x [..., n, hd], w [..., 1, hd], beta [..., 1, 1]."""
    return x - beta * (x * w).sum(-1, keepdim=True) * w


def path_logits_blocked(q, k, w, beta, block=32):
    """z_ij = q_i^T H_i ... H_{j+1} k_j for all i, j (j > i: not meaningful) -> [B, H, T, T] in
    at least fp32. q, k, w: [B, H, T, hd], beta: [B, H, T]."""
    B, H, T, hd = q.shape
    acc = torch.promote_types(q.dtype, torch.float32)
    C = max(1, min(block, T))
    nb = -(-T // C)
    pad = nb * C - T

    def blocks(x):                                    # [B, H, T, *] -> [B, H, nb, C, *]
        x = F.pad(x.to(acc), (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x.to(acc), (0, pad))
        return x.view(B, H, nb, C, *x.shape[3:])

    qb, kb, wb, bb = blocks(q), blocks(k), blocks(w), blocks(beta)   # padding: beta 0 -> H = I
    loc = torch.arange(C, device=q.device)
    # keys carried to their block's end: H_{e-1} ... H_{j+1} k_j
    kt = kb
    for t in range(1, C):
        upd = _householder(kt, wb[..., t, None, :], bb[..., t, None, None])
        kt = torch.where((loc < t)[:, None], upd, kt)
    # queries carried to their block's start: H_s ... H_i q_i (row form q_i^T H_i ... H_s)
    qt = qb
    for t in range(C - 1, -1, -1):
        upd = _householder(qt, wb[..., t, None, :], bb[..., t, None, None])
        qt = torch.where((loc >= t)[:, None], upd, qt)
    # block products M_b = H_{e-1} ... H_s, for row vectors: r M_b
    M = torch.eye(hd, dtype=acc, device=q.device).expand(B, H, nb, hd, hd)
    for t in range(C):                                # M <- H_t M (ascending t)
        wt, bt = wb[..., t, :], bb[..., t]
        M = M - bt[..., None, None] * wt[..., :, None] * (wt[..., None, :] @ M)
    Z = q.new_zeros(B, H, nb, nb, C, C, dtype=acc)
    # inside a block: scan its keys from the last, carrying the rows i >= j
    u = qb
    diag = []
    for j in range(C - 1, -1, -1):
        diag.append((u * kb[..., j, None, :]).sum(-1))                  # [B, H, nb, C]
        upd = _householder(u, wb[..., j, None, :], bb[..., j, None, None])
        u = torch.where((loc >= j)[:, None], upd, u)
    idx = torch.arange(nb, device=q.device)
    Z[:, :, idx, idx] = torch.stack(diag[::-1], dim=-1)                 # [B, H, nb, C, C]
    # between blocks: diagonal D of the block grid, R_I = q~_I M_{I-1} ... M_{I-D+1}
    R = qt[:, :, 1:]
    for D in range(1, nb):
        I = idx[D:]
        Z[:, :, I, I - D] = R @ kt[:, :, :nb - D].transpose(-1, -2)     # [B, H, nb-D, C, C]
        if D + 1 < nb:
            R = R[:, :, 1:] @ M[:, :, 1:nb - D]
    Z = Z.permute(0, 1, 2, 4, 3, 5).reshape(B, H, nb * C, nb * C)
    return Z[:, :, :T, :T]


def path_attention_blocked(q, k, v, w, beta, *, bias_fn=None, scale=None, block=32):
    """Same contract as :func:`lengen.ops.path.naive.path_attention_naive`."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    z = path_logits_blocked(q, k, w, beta, block) * scale
    if bias_fn is not None:
        z = z + bias_fn(0, T).to(z.dtype)
    keep = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return z.masked_fill(~keep, float("-inf")).softmax(-1).to(v.dtype) @ v
