"""The C SwiGLU activation (``lengen/ops/glu/glu_rows.c``) against ``F.silu(g) * u`` in float32
and float64: values and both gradients, sizes on and off its 8-wide steps, large, tiny and
non-finite gates, both builds (AVX2 and the baseline), two worker threads, non-contiguous
inputs; when it applies and when it leaves the call to PyTorch."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.ops.glu import gated as mod
from lengen.ops.glu.gated import applies, swiglu

pytestmark = pytest.mark.skipif(mod.kernels() is None, reason="no C compiler: PyTorch runs")


def torch_swiglu(g, u):
    return F.silu(g) * u


def run(fn, g, u, dh):
    g, u = g.clone().requires_grad_(True), u.clone().requires_grad_(True)
    h = fn(g, u)
    h.backward(dh)
    return [h.detach(), g.grad, u.grad]


def check(g, u, dh, what):
    """Each output within 4x float32 PyTorch's own distance from float64, or 2e-6 of its scale."""
    got = run(swiglu, g, u, dh)
    ref32 = run(torch_swiglu, g, u, dh)
    ref64 = run(torch_swiglu, g.double(), u.double(), dh.double())
    for i, (a, b, c) in enumerate(zip(got, ref32, ref64)):
        assert torch.equal(torch.isnan(a), torch.isnan(c)), f"{what} item {i}: NaNs differ"
        m = torch.isfinite(c)
        err = (a.double() - c)[m].abs().max().item()
        err32 = (b.double() - c)[m].abs().max().item()
        scale = max(c[m].abs().max().item(), 1.0)
        assert err <= max(4 * err32, 2e-6 * scale), f"{what} item {i}: {err:.1e} vs {err32:.1e}"


def inputs(shape, seed=0, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    return [spread * torch.randn(*shape, generator=gen), torch.randn(*shape, generator=gen),
            torch.randn(*shape, generator=gen)]


@pytest.mark.parametrize("shape", [(32, 127, 128), (3, 5), (1, 1), (9, 8), (4, 130), (7, 3, 17)])
@pytest.mark.parametrize("baseline", [False, True])
def test_matches_pytorch(shape, baseline):
    lib = mod.kernels()
    lib.glu_rows_force_baseline(int(baseline))
    try:
        check(*inputs(shape, seed=len(shape)), f"{shape} baseline={baseline}")
    finally:
        lib.glu_rows_force_baseline(0)


def test_extreme_and_non_finite_gates():
    """Gates far in both tails (the sigmoid's 0 and 1, e floored at 2^-126), around zero, and
    NaN (NaN out, as PyTorch) in the vector body and the scalar tail."""
    g, u, dh = inputs((3, 21), seed=4)
    g[0, :12] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 88.0, -88.0, 200.0, -200.0,
                              3e38, -3e38])
    g[1, 3] = g[2, 20] = float("nan")
    check(g, u, dh, "extreme gates")


def test_two_worker_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check(*inputs((64, 33, 24), seed=3), "two threads")
    finally:
        torch.set_num_threads(before)


def test_non_contiguous_inputs():
    g, u, dh = inputs((16, 80), seed=5)
    check(g[:, ::2].t(), u[:, 1::2].t(), dh[:, ::2].t(), "strided and transposed")


def test_overflowing_upstream_gradient_as_pytorch():
    """dh g overflows where silu(g) is 0: du must be 0 (PyTorch: dh * silu(g)), not NaN."""
    g = torch.tensor([-3e38, -1e30, -200.0] * 3)
    dh = torch.tensor([2.0, 1e10, 2e36] * 3)
    u = torch.ones(9)
    got, want = run(swiglu, g, u, dh), run(torch_swiglu, g, u, dh)
    assert torch.equal(got[2], want[2])


def test_when_it_applies():
    g, u = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    assert applies(g, u) and applies(g.detach(), u.requires_grad_(True))
    assert not applies(g.detach(), u.detach())                   # no gradient: PyTorch
    with torch.no_grad():
        assert not applies(g, u)
    assert not applies(g.double(), u.double())
    assert not applies(g, torch.randn(1, 8))                     # broadcasting: PyTorch


def test_switch_and_evaluation_use_pytorch(monkeypatch):
    """LENGEN_C_KERNELS=0 and inference give PyTorch's exact values."""
    g, u = torch.randn(5, 16), torch.randn(5, 16)
    with torch.no_grad():
        assert torch.equal(swiglu(g, u), torch_swiglu(g, u))
    monkeypatch.setenv("LENGEN_C_KERNELS", "0")
    gg = g.clone().requires_grad_(True)
    assert not applies(gg, u)
    assert torch.equal(swiglu(gg, u), torch_swiglu(g, u))


def test_double_backward_raises():
    g, u = torch.randn(3, 8, requires_grad=True), torch.randn(3, 8)
    h = swiglu(g, u)
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad((h ** 2).sum(), g, create_graph=True)


def test_model_trains_through_it_and_matches_pytorch_path(monkeypatch):
    """A SwiGLU transformer's training forward takes the kernel once per block, and its loss
    and gradients match the same model with C kernels off (PyTorch's silu and mul)."""
    import copy

    from lengen.model import ModelConfig, Transformer
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=9, d_model=16, n_layers=2, n_heads=2, d_ff=24,
                                    mlp="swiglu", dropout=0.0))
    other = copy.deepcopy(model)
    tokens = torch.randint(0, 9, (3, 10), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(10, dtype=torch.float32)
    calls = []
    real = mod._SwiGLU.apply
    monkeypatch.setattr(mod._SwiGLU, "apply", lambda *a: calls.append(1) or real(*a))
    model(tokens, pos).square().mean().backward()
    assert len(calls) == 2
    monkeypatch.setenv("LENGEN_C_KERNELS", "0")
    other(tokens, pos).square().mean().backward()
    assert len(calls) == 2
    for (name, a), b in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5, msg=name)
