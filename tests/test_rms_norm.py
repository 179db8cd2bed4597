"""The C RMSNorm (``lengen/ops/norm/rms_rows.c``) against ``F.rms_norm`` and a float64 reference:
values and the gradients of x and the weight, with and without a weight, widths on and off its
8-wide sums, two worker threads; when it applies and when it leaves the call to F.rms_norm."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.ops.norm import rms
from lengen.ops.norm.rms import applies, rms_norm

pytestmark = pytest.mark.skipif(rms.kernels() is None, reason="no C compiler: F.rms_norm runs")


def run(fn, x, w, g):
    x = x.clone().requires_grad_(True)
    w = None if w is None else w.clone().requires_grad_(True)
    y = fn(x, w)
    y.backward(g)
    return [y.detach(), x.grad] + ([] if w is None else [w.grad])


def check(shape, weighted, seed=0, threads=None):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x, dy = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    w = torch.randn(d, generator=g) if weighted else None
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        got = run(rms_norm, x, w, dy)
    finally:
        torch.set_num_threads(before)
    ref32 = run(lambda a, b: F.rms_norm(a, (d,), b, 1e-6), x, w, dy)
    ref64 = run(lambda a, b: F.rms_norm(a, (d,), b, 1e-6), x.double(),
                None if w is None else w.double(), dy.double())
    for i, (a, b, c) in enumerate(zip(got, ref32, ref64)):
        err, err32 = (a.double() - c).abs().max().item(), (b.double() - c).abs().max().item()
        scale = max(c.abs().max().item(), 1.0)
        assert err <= max(4 * err32, 2e-6 * scale), f"{shape} item {i}: {err:.1e} vs {err32:.1e}"


@pytest.mark.parametrize("shape", [(32, 127, 64), (3, 5), (2, 4, 7, 16), (1, 1), (9, 8), (4, 130)])
@pytest.mark.parametrize("weighted", [True, False])
def test_matches_f_rms_norm(shape, weighted):
    check(shape, weighted)


def test_two_worker_threads():
    """Rows are split between workers; each adds into its own weight-gradient accumulator."""
    check((64, 33, 24), True, seed=3, threads=2)


def test_when_it_applies():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    assert applies(x, w) and applies(x, None)
    assert not applies(x.detach(), None)                         # no gradient: F.rms_norm
    with torch.no_grad():
        assert not applies(x, w)
    assert not applies(x.double(), None)
    assert not applies(x, torch.ones(4, 2))                         # not a [d] weight
    assert not applies(x, torch.ones(7))


def test_switch_and_evaluation_use_f_rms_norm(monkeypatch):
    """LENGEN_C_KERNELS=0 and inference give F.rms_norm's exact values."""
    x, w = torch.randn(5, 16), torch.randn(16)
    with torch.no_grad():
        assert torch.equal(rms_norm(x, w), F.rms_norm(x, (16,), w, 1e-6))
    monkeypatch.setenv("LENGEN_C_KERNELS", "0")
    xg = x.clone().requires_grad_(True)
    assert not applies(xg, w)
    assert torch.equal(rms_norm(xg, w), F.rms_norm(x, (16,), w, 1e-6))


def test_double_backward_raises():
    x = torch.randn(3, 8, requires_grad=True)
    y = rms_norm(x, None)
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad((y ** 2).sum(), x, create_graph=True)
