"""PaTH attention for training: the logits of :mod:`lengen.ops.path.naive` from blocks of C
tokens in the compact (UT-transform) form of the paper (Yang et al., NeurIPS 2025, Sec. 3):
inside a block, every product of consecutive transforms is one triangular solve plus matmuls,
and between blocks the queries go through one hd x hd matrix per block.

A product of the transforms of consecutive tokens a..b of one block (latest on the left) is::

    H_b ... H_a = I - W^T S W      (rows a..b of W, rows and columns a..b of S)
    S = (I + A)^{-1} diag(beta),   A = strict_lower(diag(beta) W W^T)             [C, C]

(W: the block's w_t as rows [C, hd]; S is lower triangular, and its contiguous diagonal sub-blocks
are the inverses of those of I + A, so one solve per block gives every product in it). Expanding
the logit ``z_ij = q_i^T H_i ... H_{j+1} k_j`` with it, for a query i and key j in one block::

    z_ij = q_i.k_j - sum_ab P_ia S_ab G_bj
    P = lower(Q W^T) (a <= i),   G = strict_lower(W K^T) (b > j)

and, for a key j in an earlier block J < I (I the query's block)::

    z_ij = q~_i^T M_{I-1} ... M_{J+1} k~_j
    q~ = Q - P (S W)           (q_i^T H_i ... H_{s_I}: the query carried to its block's start)
    k~ = K - (S G)^T W         (H_{e_J - 1} ... H_{j+1} k_j: the key carried to its block's end)
    M_b = I - W_b^T (S_b W_b)  (the whole block's product, hd x hd)

The products between blocks go block-diagonal by block-diagonal: at step D every query block I
meets key block I - D, then its carried queries go through M_{I-D} (nb - 1 steps of batched
matmuls). The same pieces serve the query-blocked op (:mod:`lengen.ops.path.chunked`), which runs
the sweep for a few query blocks at a time.

Sizes: the logits are [B, H, T, T] (the reference's); the carried queries autograd keeps are
[B, H, T, hd] per step, T^2 hd / C in all; no [T, T, hd] tensor. Precision: everything in at least
fp32 (autocast off inside).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

#: the token block C: T / C sweep steps, matmuls of C x C inside a block
BLOCK = 32


def blocking(T: int, block: int) -> tuple[int, int]:
    """(C, nb): nb = ceil(T / block) blocks of C = ceil(T / nb) tokens (the last one padded)."""
    nb = -(-T // max(1, int(block)))
    return -(-T // nb), nb


def to_blocks(x, C: int, nb: int, acc, front: int = 0):
    """[B, H, T, *] or [B, H, T] -> [nb, B, H, C, *] or [nb, B, H, C] in ``acc``, zero-padded
    with ``front`` rows before and the rest after (beta 0 there: H = I). Blocks first: a range
    of blocks is one contiguous batch of matrices."""
    x = x.to(acc)
    back = nb * C - front - x.shape[2]
    x = F.pad(x, (0, 0, front, back)) if x.dim() == 4 else F.pad(x, (front, back))
    return x.view(*x.shape[:2], nb, C, *x.shape[3:]).movedim(2, 0).contiguous()


def key_side(Kb, Wb, bb):
    """Per block, from keys Kb, w Wb [nb, B, H, C, hd] and beta bb [nb, B, H, C]:
    X = S W [.., C, hd], SG = S G [.., C, C], the carried keys k~ [.., C, hd] and the block
    products M [.., hd, hd] (row form: r -> r M), with one triangular solve per block."""
    C, hd = Wb.shape[-2:]
    AG = Wb @ torch.cat([Wb, Kb], -2).mT                                # [.., C, 2C]
    A, G = AG.split(C, -1)
    A, G = bb[..., :, None] * A.tril(-1), G.tril(-1)                    # G: b > j
    # (I + A) [X | SG] = diag(beta) [W | G]; unitriangular: the solver reads I on the diagonal
    Y = torch.linalg.solve_triangular(A, bb[..., None] * torch.cat([Wb, G], -1), upper=False,
                                      unitriangular=True)
    X, SG = Y.split([hd, C], -1)
    kt = Kb - SG.mT @ Wb
    M = torch.eye(hd, dtype=Wb.dtype, device=Wb.device) - Wb.mT @ X       # [.., hd, hd]
    return X, SG, kt, M


def query_side(Qb, Kb, Wb, X, SG):
    """Carried queries q~ [.., C, hd] and the logits inside each block [.., C, C] (rows: queries,
    entries j > i not meaningful) for query blocks Qb and the key side of the same blocks."""
    C = Qb.shape[-2]
    P, QK = (Qb @ torch.cat([Wb, Kb], -2).mT).split(C, -1)              # [.., C, C] each
    P = P.tril()                                                        # (a <= i)
    return Qb - P @ X, QK - P @ SG


def logit_rows(qt, intra, kt, M, I0: int, I1: int):
    """Logits of query blocks I0..I1-1 against key blocks 0..I1-1 -> [B, H, (I1-I0) C, I1 C].
    qt, intra: the query side of blocks I0..I1-1; kt, M: the key side of blocks 0..I1-2 (at
    least). Causal: keys after the query (inside its block and in later blocks) come out as
    -inf."""
    n, B, H, C, _ = qt.shape
    above = torch.ones(C, C, dtype=torch.bool, device=qt.device).triu(1)
    # the pieces, each [n_pairs, B, H, C, C]: step D = 0 (inside the blocks) first
    pieces = [intra.masked_fill(above, float("-inf"))]
    where = {(I, I): I - I0 for I in range(I0, I1)}  # (query block, key block) -> piece row
    at = n
    R, lo = qt, I0                                   # R: q~ of blocks lo..I1-1, carried so far
    for D in range(1, I1):                           # query block I meets key block I - D
        first = max(I0, D)
        R, lo = R[first - lo:], first
        pieces.append(R @ kt[first - D:I1 - D].mT)
        where.update({(I, I - D): at + I - first for I in range(first, I1)})
        at += I1 - first
        if D + 1 < I1:
            R = R @ M[first - D:I1 - D]                            # on through M_{I-D}
    pieces.append(qt.new_full((1, B, H, C, C), float("-inf")))   # the blocks after the diagonal
    idx = torch.tensor([[where.get((I, J), at) for J in range(I1)] for I in range(I0, I1)],
                       device=qt.device)                                 # [n, I1]
    Z = torch.cat(pieces)[idx]                                           # [n, I1, B, H, C, C]
    return Z.permute(2, 3, 0, 4, 1, 5).reshape(B, H, n * C, I1 * C)


def path_logits_blocked(q, k, w, beta, block=BLOCK, scale=1.0):
    """z_ij = q_i^T H_i ... H_{j+1} k_j * scale for all i, j (j > i: -inf) -> [B, H, T, T] in
    at least fp32. q, k, w: [B, H, T, hd], beta: [B, H, T]."""
    T = q.shape[-2]
    acc = torch.promote_types(q.dtype, torch.float32)
    C, nb = blocking(T, block)
    with torch.autocast(q.device.type, enabled=False):
        Qb = to_blocks(q, C, nb, acc) * scale          # z is linear in q: scaled once
        Kb, Wb, bb = (to_blocks(t, C, nb, acc) for t in (k, w, beta))
        X, SG, kt, M = key_side(Kb, Wb, bb)
        qt, intra = query_side(Qb, Kb, Wb, X, SG)
        return logit_rows(qt, intra, kt, M, 0, nb)[:, :, :T, :T]


def path_attention_blocked(q, k, v, w, beta, *, bias_fn=None, scale=None, block=BLOCK):
    """Same contract as :func:`lengen.ops.path.naive.path_attention_naive`."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    z = path_logits_blocked(q, k, w, beta, block, scale)
    if bias_fn is not None:
        z = z + bias_fn(0, T).to(z.dtype)
    return z.softmax(-1).to(v.dtype) @ v                                # causal: -inf in z
