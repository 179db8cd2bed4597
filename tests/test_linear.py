"""lengen's linear (``lengen/ops/linear/onednn.py``): the oneDNN training path against
``F.linear`` in float32 and a float64 reference (values, input, weight and bias gradients; 2-d
and 3-d inputs; with and without bias); when it applies and when it leaves the call to PyTorch
(evaluation, few rows, the switch off, a failed probe, the bound on shapes); ``Linear`` is an
``nn.Linear`` with the same state dict."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lengen.ops.linear import Linear, linear
from lengen.ops.linear import onednn as mod

needs_onednn = pytest.mark.skipif(not mod.available(), reason="no oneDNN linear in this torch")


@pytest.fixture
def fresh_shapes(monkeypatch):
    """Process-fresh shape counts, every shape admitted at its first call (the admission rule
    has its own test), so tests do not depend on the shapes other tests met."""
    monkeypatch.setattr(mod, "_shapes", set())
    monkeypatch.setattr(mod, "_calls", {})
    monkeypatch.setattr(mod, "ADMIT_AFTER", 1)
    for var in ("LENGEN_ONEDNN_LINEAR", "LENGEN_C_KERNELS"):      # the switches on
        monkeypatch.delenv(var, raising=False)


def run(fn, x, w, b, dy):
    x, w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    b = None if b is None else b.clone().requires_grad_(True)
    y = fn(x, w, b)
    y.backward(dy)
    return [y.detach(), x.grad, w.grad] + ([] if b is None else [b.grad])


def inputs(rows, k, n, bias, seed=0, lead=()):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, rows, k, generator=g)
    w = torch.randn(n, k, generator=g) / k ** 0.5
    b = torch.randn(n, generator=g) if bias else None
    dy = torch.randn(*lead, rows, n, generator=g)
    return x, w, b, dy


@needs_onednn
@pytest.mark.parametrize("rows,k,n", [(4064, 64, 192), (1024, 128, 64), (2000, 17, 5),
                                      (1500, 256, 1000)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_f_linear_and_float64(rows, k, n, bias, fresh_shapes):
    x, w, b, dy = inputs(rows, k, n, bias, seed=rows + n)
    assert mod.applies(x.requires_grad_(True), w, b)
    x = x.detach()
    got = run(linear, x, w, b, dy)
    ref32 = run(F.linear, x, w, b, dy)
    ref64 = run(F.linear, x.double(), w.double(), None if b is None else b.double(),
                dy.double())
    for i, (a, r, c) in enumerate(zip(got, ref32, ref64)):
        err = (a.double() - c).abs().max().item()
        err32 = (r.double() - c).abs().max().item()
        scale = max(c.abs().max().item(), 1.0)
        assert err <= max(4 * err32, 1e-6 * scale), f"item {i}: {err:.1e} vs {err32:.1e}"
    # the weight gradient is PyTorch's own mm, called as autograd calls it: the same bits
    assert torch.equal(got[2], ref32[2])


@needs_onednn
def test_3d_input_and_frozen_weight(fresh_shapes):
    x, w, b, dy = inputs(127, 64, 96, True, lead=(16,))
    xg = x.clone().requires_grad_(True)
    assert mod.applies(xg, w, b)
    y = linear(xg, w, b)                      # only x needs a gradient
    y.backward(dy)
    ref = x.clone().requires_grad_(True)
    F.linear(ref, w, b).backward(dy)
    assert y.shape == (16, 127, 96)
    torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xg.grad, ref.grad, rtol=1e-5, atol=1e-5)


def test_leaves_it_to_pytorch(monkeypatch, fresh_shapes):
    """No gradient, evaluation, few rows, float64, the switches off: F.linear itself."""
    x, w, b, _ = inputs(2048, 32, 16, True)
    wg = w.clone().requires_grad_(True)
    assert mod.applies(x, wg, b) == mod.available()                   # the positive control
    assert not mod.applies(x, w, b)                                   # nothing needs a gradient
    with torch.no_grad():
        assert not mod.applies(x, wg, b)
    assert not mod.applies(x[: mod.MIN_ROWS - 1], wg, b)              # too few rows
    assert not mod.applies(x.double(), wg.double(), b.double())
    for var in ("LENGEN_ONEDNN_LINEAR", "LENGEN_C_KERNELS"):
        monkeypatch.setenv(var, "0")
        assert not mod.applies(x, wg, b)
        monkeypatch.delenv(var)
    with torch.no_grad():
        assert torch.equal(linear(x, w, b), F.linear(x, w, b))


def test_failed_probe_means_pytorch(monkeypatch, fresh_shapes):
    """A PyTorch without the op (or one whose op disagrees) runs F.linear."""
    def missing(*a):
        raise RuntimeError("no such op")
    monkeypatch.setattr(mod, "_dense", missing)
    monkeypatch.setattr(mod, "_probe", None)
    assert not mod.available()
    x, w, b, dy = inputs(2048, 32, 16, True)
    got = run(linear, x, w, b, dy)
    ref = run(F.linear, x, w, b, dy)
    assert all(torch.equal(a, r) for a, r in zip(got, ref))
    monkeypatch.setattr(mod, "_dense", lambda x2, w, b: F.linear(x2, w, b) + 1.0)
    monkeypatch.setattr(mod, "_probe", None)
    assert not mod.available()


@needs_onednn
def test_admission_of_shapes(monkeypatch, fresh_shapes):
    """A shape takes the path from its ADMIT_AFTER-th call on; past MAX_SHAPES admitted shapes
    a new one stays with F.linear, and past COUNTED counted ones a new one is not counted."""
    monkeypatch.setattr(mod, "ADMIT_AFTER", 3)
    monkeypatch.setattr(mod, "MAX_SHAPES", 2)
    monkeypatch.setattr(mod, "COUNTED", 4)
    w = torch.randn(8, 4, requires_grad=True)
    xs = [torch.randn(mod.MIN_ROWS + i, 4) for i in range(5)]
    assert [mod.applies(xs[0], w, None) for _ in range(4)] == [False, False, True, True]
    assert [mod.applies(xs[1], w, None) for _ in range(3)] == [False, False, True]
    assert [mod.applies(xs[2], w, None) for _ in range(4)] == [False] * 4     # two admitted
    assert mod.applies(xs[0], w, None)
    assert not mod.applies(xs[3], w, None) and not mod.applies(xs[4], w, None)
    assert set(mod._calls) == {(mod.MIN_ROWS + i, 4, 8, False) for i in (2, 3, 4)}
    monkeypatch.setattr(mod, "_calls", {(i, 1, 1, False): 1 for i in range(4)})
    assert not mod.applies(xs[4], w, None) and len(mod._calls) == 4              # not counted


@needs_onednn
def test_no_double_backward(fresh_shapes):
    x, w, _, _ = inputs(1024, 8, 4, False)
    x.requires_grad_(True)
    y = linear(x, w.requires_grad_(True))
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad((y * y).sum(), x, create_graph=True)


def test_linear_module_is_nn_linear():
    torch.manual_seed(0)
    ours = Linear(6, 5)
    torch.manual_seed(0)
    theirs = nn.Linear(6, 5)
    assert isinstance(ours, nn.Linear)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(),
                                                 theirs.state_dict().values()))
    x = torch.randn(3, 6)
    assert torch.equal(ours(x), theirs(x))                            # no gradient: F.linear


@needs_onednn
def test_autocast_keeps_f_linear(fresh_shapes):
    """bf16 training (CPU autocast) gets F.linear's low-precision product, not an fp32 one."""
    x, w, b, _ = inputs(1024, 16, 8, True)
    x.requires_grad_(True)
    assert mod.applies(x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not mod.applies(x, w, b)
        y, ref = linear(x, w, b), F.linear(x, w, b)
    assert y.dtype == ref.dtype == torch.bfloat16 and torch.equal(y, ref)
