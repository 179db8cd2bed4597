"""Selective attention (``selective``): the dense op against x-transformers' ``Attend(selective=
True)`` (values and gradients), the query-blocked op against the dense one (fp64, T = 1, 63,
111, with a bias and a cached offset), a hand-computed case, and cached decoding."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.ops.selective import selective_attention_chunked, selective_attention_naive
from lengen.ops.selective.chunked import selective_attention_blocks


def _qkv(T, B=2, H=3, hd=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple((2 * torch.randn(B, H, T, hd, generator=g, dtype=dtype)).requires_grad_()
                 for _ in range(3))


def _grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, g)


@pytest.mark.parametrize("T", [1, 63, 111])
def test_naive_matches_x_transformers(T):
    attend = pytest.importorskip("x_transformers.attend")
    # its default softmax runs in float32; the same softmax in the inputs' float64 instead
    ref = attend.Attend(causal=True, selective=True, custom_attn_fn=lambda s: s.softmax(-1))
    q, k, v = _qkv(T)
    want, _ = ref(q, k, v)
    got = selective_attention_naive(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for a, b in zip(_grads(got, (q, k, v)), _grads(want, (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if T > 8:        # the selection does something here (else the comparison proves little)
        plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert (plain - got).abs().max() > 1e-2


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [1, 16, 256])
@pytest.mark.parametrize("mask_bos", [False, True])
def test_chunked_matches_naive(T, block, mask_bos):
    q, k, v = _qkv(T, seed=T)
    pos = torch.arange(T, dtype=torch.float64)
    slopes = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64)[:, None, None]

    def bias_fn(s, e):                                    # ALiBi-like, [H, e - s, T]
        return -slopes * (pos[s:e, None] - pos[None, :]).abs()

    for bf in (None, bias_fn):
        want = selective_attention_naive(q, k, v, bias_fn=bf, mask_bos=mask_bos)
        got = selective_attention_chunked(q, k, v, bias_fn=bf, mask_bos=mask_bos,
                                          block_size=block)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for a, b in zip(_grads(got, (q, k, v)), _grads(want, (q, k, v))):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_blocks_with_carry_equal_the_whole():
    """Rows 40.. with the carry of rows 0..39 equal the last rows of one call."""
    q, k, v = _qkv(63)
    whole, F = selective_attention_blocks(q, k, v, block_size=7)
    _, carry = selective_attention_blocks(q[:, :, :40], k[:, :, :40], v[:, :, :40], block_size=9)
    tail, F2 = selective_attention_blocks(q[:, :, 40:], k, v, block_size=5, q_offset=40,
                                          carry=carry)
    torch.testing.assert_close(tail, whole[:, :, 40:], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(F2, F, rtol=1e-10, atol=1e-12)


def test_hand_values():
    """One head, three tokens, hd = 1, q = k = v = x: query 1 asks (ReLU of its logit to key 0)
    but key 0 is the first token, never masked; query 2 sees F = 0 from query 1 for key 1
    (self), so it equals plain attention; with mask_bos, query 2's logit to key 0 drops by
    query 1's selection z_10 = x1 x0."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 1, 3, 1)
    plain = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
    torch.testing.assert_close(selective_attention_naive(x, x, x), plain)
    z = torch.tensor([3.0, 6.0, 9.0], dtype=torch.float64)        # x2 * (x0, x1, x2)
    z = z - torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)    # F_20 = relu(x1 x0) = 2
    w = torch.softmax(z, 0)
    got = selective_attention_naive(x, x, x, mask_bos=True)
    torch.testing.assert_close(got[0, 0, 2, 0], (w * x.flatten()).sum())
    assert not math.isclose(got[0, 0, 2, 0].item(), plain[0, 0, 2, 0].item())
