"""PaTH attention (``path``): the dense op against flash-linear-attention's pure-PyTorch
``naive_path_attn`` (its chunked UT-transform form, float32) and against explicit Householder
matrix products (fp64); the blocked training op and the query-blocked op (both the compact
UT-transform form) against the dense one (fp64, T = 1, 63, 111, blocks that do not divide T,
values and the gradients of q, k, v, w, beta) and against fla's; cached steps (carried keys)
against the whole sequence; the blocked forms under bf16 autocast."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.ops.path import path_attention_chunked, path_attention_naive
from lengen.ops.path.blocked import path_attention_blocked
from lengen.ops.path.chunked import carry_keys


def _inputs(T, B=2, H=2, hd=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, hd, generator=g, dtype=dtype) for _ in range(3))
    w = F.normalize(torch.randn(B, H, T, hd, generator=g, dtype=dtype), dim=-1)
    beta = 2 * torch.rand(B, H, T, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v, w, beta)]


def _grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    got = torch.autograd.grad(out, inputs, g, allow_unused=True)
    return [torch.zeros_like(t) if d is None else d for t, d in zip(inputs, got)]   # T = 1


@pytest.mark.parametrize("T", [1, 63, 111])
def test_naive_matches_fla(T):
    naive = pytest.importorskip("fla.ops.path_attn.naive")
    q, k, v, w, beta = (t.detach().float().requires_grad_() for t in _inputs(T))
    tr = lambda t: t.transpose(1, 2)                             # [B, H, T, *] -> [B, T, H, *]
    g = torch.zeros(2, T, 2)
    want = tr(naive.naive_path_attn(tr(q), tr(k), tr(v), tr(w), tr(beta), g, scale=8 ** -0.5,
                                    chunk_size=16))
    got = path_attention_naive(q, k, v, w, beta)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in zip(_grads(got, (q, k, v, w, beta)), _grads(want, (q, k, v, w, beta))):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_naive_matches_explicit_products():
    """z_ij = q_i^T H_i ... H_{j+1} k_j / sqrt(hd) with H_t = I - beta_t w_t w_t^T as matrices."""
    T, hd = 13, 8
    q, k, v, w, beta = (t.detach() for t in _inputs(T, hd=hd))
    z = torch.full((2, 2, T, T), float("-inf"), dtype=torch.float64)
    eye = torch.eye(hd, dtype=torch.float64)
    for i in range(T):
        P = eye.expand(2, 2, hd, hd).clone()                       # H_i ... H_{j+1}
        for j in range(i, -1, -1):
            z[:, :, i, j] = (q[:, :, i, None, :] @ P @ k[:, :, j, :, None])[..., 0, 0]
            Hj = eye - beta[:, :, j, None, None] * w[:, :, j, :, None] * w[:, :, j, None, :]
            P = P @ Hj
    want = (z * hd ** -0.5).softmax(-1) @ v
    torch.testing.assert_close(path_attention_naive(q, k, v, w, beta), want, rtol=1e-12,
                               atol=1e-12)
    # the transforms matter (else the comparison proves little)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (plain - want).abs().max() > 1e-2


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block_size,block", [(5, 32), (16, 32), (256, 32), (40, 7), (256, 64),
                                              (100, 1)])
def test_chunked_matches_naive(T, block_size, block):
    """block_size: query rows per pass; block: the transforms' token block (5 / 7 do not
    divide 63 or 111; 40 / 7 and 100 / 1: several blocks per pass)."""
    ins = _inputs(T, seed=T)
    pos = torch.arange(T, dtype=torch.float64)

    def bias_fn(s, e):
        return -0.3 * (pos[s:e, None] - pos[None, :]).abs()

    for bf in (None, bias_fn):
        want = path_attention_naive(*ins, bias_fn=bf)
        got = path_attention_chunked(*ins, bias_fn=bf, block_size=block_size, block=block)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for a, b in zip(_grads(got, ins), _grads(want, ins)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("block_size,block", [(4, 32), (256, 32), (9, 3), (256, 20)])
def test_cached_steps_equal_the_whole(block_size, block):
    """Rows 20.. against keys carried to token 19 equal the last rows of one call, and so does
    one row at a time (decoding: keys carried to the token before it)."""
    q, k, v, w, beta = (t.detach() for t in _inputs(31))
    whole = path_attention_naive(q, k, v, w, beta)
    pk = carry_keys(k[:, :, :20], w[:, :, :20], beta[:, :, :20], 0)
    keys = torch.cat([pk, k[:, :, 20:]], 2)
    tail = path_attention_chunked(q[:, :, 20:], keys, v, w[:, :, 20:], beta[:, :, 20:],
                                  block_size=block_size, block=block, q_offset=20)
    torch.testing.assert_close(tail, whole[:, :, 20:], rtol=1e-12, atol=1e-12)
    for t in (1, 20, 30):
        pk = carry_keys(k[:, :, :t], w[:, :, :t], beta[:, :, :t], 0)
        keys = torch.cat([pk, k[:, :, t:t + 1]], 2)
        row = path_attention_chunked(q[:, :, t:t + 1], keys, v[:, :, :t + 1], w[:, :, t:t + 1],
                                     beta[:, :, t:t + 1], block_size=block_size, block=block,
                                     q_offset=t)
        torch.testing.assert_close(row, whole[:, :, t:t + 1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [1, 5, 16, 200])
def test_blocked_training_op_matches_naive(T, block):
    ins = _inputs(T, seed=T + 1)
    pos = torch.arange(T, dtype=torch.float64)

    def bias_fn(s, e):
        return -0.3 * (pos[s:e, None] - pos[None, :]).abs()

    for bf in (None, bias_fn):
        want = path_attention_naive(*ins, bias_fn=bf)
        got = path_attention_blocked(*ins, bias_fn=bf, block=block)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for a, b in zip(_grads(got, ins), _grads(want, ins)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("op", ["blocked", "chunked"])
def test_blocked_forms_match_fla(T, op):
    """float32 against fla's chunked UT form (chunk 16), values and gradients."""
    naive = pytest.importorskip("fla.ops.path_attn.naive")
    q, k, v, w, beta = (t.detach().float().requires_grad_() for t in _inputs(T, seed=5))
    tr = lambda t: t.transpose(1, 2)
    want = tr(naive.naive_path_attn(tr(q), tr(k), tr(v), tr(w), tr(beta), torch.zeros(2, T, 2),
                                    scale=8 ** -0.5, chunk_size=16))
    got = (path_attention_blocked(q, k, v, w, beta, block=24) if op == "blocked" else
           path_attention_chunked(q, k, v, w, beta, block_size=48, block=24))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in zip(_grads(got, (q, k, v, w, beta)), _grads(want, (q, k, v, w, beta))):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("op", ["blocked", "chunked"])
def test_blocked_forms_keep_fp32_under_autocast(op):
    """Under CPU bf16 autocast the transforms and logits stay in fp32 (their matmuls would
    round to bf16): with v = I the output is the attention weights, and only their own rounding
    to bf16 is left (at most 2^-9 for weights <= 1; bf16 logits: ~0.015 here)."""
    q, k, _, w, beta = (t.detach().float() for t in _inputs(111, seed=2))
    q = 3 * q                                         # logits of a few units
    eye = torch.eye(111).expand(2, 2, 111, 111)
    ref = path_attention_naive(*(t.double() for t in (q, k, eye, w, beta)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = (path_attention_blocked(q, k, eye, w, beta, block=16) if op == "blocked" else
               path_attention_chunked(q, k, eye, w, beta, block_size=32, block=16))
    assert got.dtype == torch.bfloat16
    err = (got.double() - ref).abs().max().item()
    assert err <= 2 ** -8, err
