"""Stick-breaking attention (``stickbreaking``): the query-blocked op against the dense reference
(fp64, T = 1, 63, 111, values and gradients, with a bias, both options, a cached offset) and
hand-computed weights straight from the paper's equations."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.ops.stickbreaking import (stickbreaking_attention_chunked,
                                      stickbreaking_attention_naive)


def _qkv(T, B=2, H=3, hd=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple((2 * torch.randn(B, H, T, hd, generator=g, dtype=dtype)).requires_grad_()
                 for _ in range(3))


def _grads(out, inputs, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, g)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [1, 16, 256])
@pytest.mark.parametrize("opts", [{}, {"attend_current": True}, {"remainder": "none"}])
def test_chunked_matches_naive(T, block, opts):
    q, k, v = _qkv(T, seed=T)
    pos = torch.arange(T, dtype=torch.float64)
    slopes = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64)[:, None, None]

    def bias_fn(s, e):
        return -slopes * (pos[s:e, None] - pos[None, :]).abs()

    for bf in (None, bias_fn):
        want = stickbreaking_attention_naive(q, k, v, bias_fn=bf, **opts)
        got = stickbreaking_attention_chunked(q, k, v, bias_fn=bf, block_size=block, **opts)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for a, b in zip(_grads(got, (q, k, v)), _grads(want, (q, k, v))):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_cached_offset_equals_the_whole():
    q, k, v = _qkv(40)
    whole = stickbreaking_attention_chunked(q, k, v, block_size=7)
    tail = stickbreaking_attention_chunked(q[:, :, 25:], k, v, block_size=4, q_offset=25)
    torch.testing.assert_close(tail, whole[:, :, 25:], rtol=1e-12, atol=1e-12)


def _sig(x):
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize("op", [stickbreaking_attention_naive, stickbreaking_attention_chunked])
def test_hand_values(op):
    """q = k = v = x = (1, 2, 3), hd = 1 (scale 1). Query 2: key 1 takes sigmoid(6), key 0
    sigmoid(3) of the rest; the remainder goes to token 2's own value."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 1, 3, 1)
    out = op(x, x, x).flatten().tolist()
    a21 = _sig(6)
    a20 = _sig(3) * (1 - _sig(6))
    want2 = a21 * 2 + a20 * 1 + (1 - a21 - a20) * 3
    want1 = _sig(2) * 1 + (1 - _sig(2)) * 2
    assert out == pytest.approx([1.0, want1, want2], abs=1e-12)
    w = stickbreaking_attention_naive(x, x, x, return_weights=True)[1][0, 0]
    assert w[2].tolist() == pytest.approx([a20, a21, 0.0], abs=1e-12)
    none = op(x, x, x, remainder="none").flatten().tolist()
    assert none == pytest.approx([0.0, _sig(2), a21 * 2 + a20], abs=1e-12)
    cur = op(x, x, x, attend_current=True).flatten().tolist()     # token 2 itself first
    a22 = _sig(9)
    b21, b20 = _sig(6) * (1 - a22), _sig(3) * (1 - _sig(6)) * (1 - a22)
    assert cur[2] == pytest.approx(a22 * 3 + b21 * 2 + b20 + (1 - a22 - b21 - b20) * 3,
                                   abs=1e-12)


def test_float32_cumulative_sums_stay_close_to_float64():
    """The blocked op forms sum_{k > j} log(1 - beta) as row total minus a cumulative sum; in
    float32 at T = 1024 its outputs stay within 1e-4 of the float64 reference."""
    q, k, v = (t.detach() for t in _qkv(1024, B=1, H=2, hd=16, seed=3))
    want = stickbreaking_attention_naive(q, k, v)
    got = stickbreaking_attention_chunked(q.float(), k.float(), v.float(), block_size=300)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-4)
