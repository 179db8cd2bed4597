"""Every attention op path in bf16/fp16 against the fp64 reference (issue: FoT in half precision).

The inputs are rounded to the half dtype once; the reference runs on exactly those values in
fp64, so the only difference left is each path's own arithmetic. Before the fix, FoT's naive and
lean paths cast ``c = cumsum(log f)`` back to bf16 before ``c_i - c_j`` and were off by ~0.4 at
T = 512 and ~1.8 at T = 2048; every path must now stay at rounding level (~1e-2).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.ops.cope import cope_attention_chunked, cope_attention_naive
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.diff import diff_attention_chunked, diff_attention_naive
from lengen.ops.diff.fast_cpu import diff_attention_fast_cpu
from lengen.ops.fot import fot_attention_chunked, fot_attention_naive
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu
from lengen.ops.tra import tra_attention_chunked, tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu

PATHS = {
    "softmax": (softmax_attention_naive, softmax_attention_chunked, softmax_attention_fast_cpu),
    "fot": (fot_attention_naive, fot_attention_chunked, fot_attention_fast_cpu),
    "tra": (tra_attention_naive, tra_attention_chunked, tra_attention_fast_cpu),
    "cope": (cope_attention_naive, cope_attention_chunked, cope_attention_fast_cpu),
    "diff": (diff_attention_naive, diff_attention_chunked, diff_attention_fast_cpu),
}
OUT_TOL = 0.03       # max abs error of outputs of magnitude ~1 (bf16 spacing at 1 is 2^-7)


def make_inputs(kind, T, half, seed=0):
    """Inputs rounded to ``half``; returns a function dtype -> argument tuple."""
    g = torch.Generator().manual_seed(seed)
    B, H, hd = 1, 2, 16
    q, k = (torch.randn(B, H, T, hd, generator=g) for _ in range(2))
    # forget gates ~0.9 on average: c reaches about -0.15 * T (-300 at T = 2048)
    gate = F.logsigmoid(torch.randn(B, H, T, generator=g) + 2)
    if kind == "diff":
        v = torch.randn(B, H // 2, T, 2 * hd, generator=g)
        extra = torch.tensor(0.7)
    else:
        v = torch.randn(B, H, T, hd, generator=g)
        extra = {"fot": gate, "tra": gate, "cope": torch.randn(hd, 64, generator=g) * 0.3}.get(kind)
    rounded = [t.to(half) for t in (q, k, v)] + ([] if extra is None else [extra.to(half)])

    def args(dtype):
        return tuple(t.to(dtype).detach().requires_grad_(t.is_floating_point() and t.dim() > 0)
                     for t in rounded)
    return args


@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [1, 111, 512, 2048])
@pytest.mark.parametrize("kind", list(PATHS))
def test_outputs_match_fp64(kind, T, half):
    args = make_inputs(kind, T, half)
    ref = PATHS[kind][0](*args(torch.float64))
    for fn in PATHS[kind]:
        out = fn(*args(half))
        assert out.dtype == half
        err = (out.double() - ref).abs().max().item()
        assert err < OUT_TOL, f"{kind} {fn.__name__} {half} T={T}: max error {err:.4f}"


@pytest.mark.parametrize("kind", list(PATHS))
def test_gradients_match_fp64_bf16(kind):
    """Gradients of every input at T = 512 in bf16, relative to the fp64 gradients' scale."""
    T = 512
    args = make_inputs(kind, T, torch.bfloat16, seed=1)
    ref_in = args(torch.float64)
    out0 = PATHS[kind][0](*ref_in)
    dout = torch.randn(out0.shape, dtype=out0.dtype, generator=torch.Generator().manual_seed(1))
    refs = torch.autograd.grad((out0 * dout).sum(),
                               [t for t in ref_in if t.requires_grad])
    for fn in PATHS[kind]:
        ins = args(torch.bfloat16)
        out = fn(*ins)
        grads = torch.autograd.grad((out * dout.to(out.dtype)).sum(),
                                    [t for t in ins if t.requires_grad])
        for i, (g, r) in enumerate(zip(grads, refs)):
            rel = ((g.double() - r).norm() / r.norm().clamp_min(1e-12)).item()
            assert rel < 0.02, f"{kind} {fn.__name__} grad {i}: relative error {rel:.4f}"


def test_fot_module_bf16_keeps_gates_in_fp32():
    """The attention module hands fp32 log-forget gates to the op even in a bf16 model."""
    from lengen.attention.fot import ForgettingAttention
    from lengen.posenc import build_posenc

    torch.manual_seed(0)
    att = ForgettingAttention(d_model=32, n_heads=2, gate_bias_init=2.0)
    pe = build_posenc("nope", d_model=32, n_heads=2, head_dim=16)
    x = torch.randn(1, 1024, 32)
    pos = torch.arange(1024.0)
    att.eval()
    ref = att.double()(x.double(), pos, pe)
    out = att.to(torch.bfloat16)(x.to(torch.bfloat16), pos, pe)
    assert (out.double() - ref).abs().max().item() < 0.05
