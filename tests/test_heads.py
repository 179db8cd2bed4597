"""``lengen.ops.heads.split_heads`` against the view-and-unbind it replaces: the same views, the
same gradients, whichever heads get one, and no copy when the three gradients already are the
slots of one buffer (as the fused-rows kernel writes them)."""
from __future__ import annotations

import pytest
import torch

from lengen.ops import heads
from lengen.ops.heads import split_heads

B, T, H, HD = 2, 7, 3, 8


def reference(qkv):
    return qkv.view(B, T, 3, H, HD).permute(2, 0, 3, 1, 4).unbind(0)


def leaf(seed=0):
    return torch.randn(B, T, 3 * H * HD, generator=torch.Generator().manual_seed(seed),
                       requires_grad=True)


@pytest.mark.parametrize("used", ["qkv", "qk", "qv", "kv", "q", "v"])
def test_values_and_gradients_match_unbind(used):
    """Any subset of the heads reaching the loss (the others get no gradient: zeros)."""
    w = [torch.randn(B, H, T, HD, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    got, want = leaf(), leaf()
    outs = split_heads(got, H)
    refs = reference(want)
    for a, b in zip(outs, refs):
        assert a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)
    pick = ["qkv".index(c) for c in used]
    sum((outs[i] * w[i]).sum() for i in pick).backward()
    sum((refs[i] * w[i]).sum() for i in pick).backward()
    assert torch.equal(got.grad, want.grad)


def test_gradients_that_are_one_buffer_pass_without_copy(monkeypatch):
    """dq, dk, dv written as the slots of one [B, T, 3, H, hd] buffer: that buffer is the
    gradient (same memory), and its values are the reference's."""
    buf = torch.randn(B, T, 3, H, HD)
    slots = tuple(buf[:, :, s].transpose(1, 2) for s in range(3))

    class Ident(torch.autograd.Function):                  # hands back the slot views as grads
        @staticmethod
        def forward(ctx, q, k, v):
            return q.clone(), k.clone(), v.clone()

        @staticmethod
        def backward(ctx, *_):
            return slots

    seen = []
    real = heads.qkv_buffer
    monkeypatch.setattr(heads, "qkv_buffer", lambda *a: seen.append(real(*a)) or seen[-1])
    x = leaf()
    q, k, v = Ident.apply(*split_heads(x, H))
    (q.sum() + k.sum() + v.sum()).backward()
    assert seen[0] is not None and seen[0].data_ptr() == buf.data_ptr()
    assert torch.equal(x.grad, buf.reshape(B, T, -1))


def test_slots_out_of_order_are_copied_into_place():
    """Slot-shaped gradients that are not q, k, v in that order are not taken as the buffer."""
    buf = torch.randn(B, T, 3, H, HD)
    dq, dk, dv = (buf[:, :, s].transpose(1, 2) for s in (1, 0, 2))
    assert heads.qkv_buffer(dq, dk, dv) is None
    got = heads._SplitHeads.backward(type("C", (), {"shape": (B, T, H, HD)})(), dq, dk, dv)[0]
    want = torch.stack([dq, dk, dv]).permute(1, 3, 0, 2, 4).reshape(B, T, -1)
    assert torch.equal(got, want)


def test_without_grad_the_same_views():
    x = leaf().detach()
    for a, b in zip(split_heads(x, H), reference(x)):
        assert a.data_ptr() == b.data_ptr() and a.stride() == b.stride()


def test_bad_width_is_refused():
    with pytest.raises(ValueError, match="3 \\* n_heads"):
        split_heads(torch.zeros(B, T, 3 * H * HD + 1), H)


def test_functional_transforms_as_unbind():
    """torch.func.grad and forward-mode jvp see the same function as the view-and-unbind."""
    from torch.func import grad, jvp
    x, t = leaf().detach(), leaf(1).detach()

    def loss(split):
        return lambda y: sum((a * (i + 1)).square().sum() for i, a in enumerate(split(y)))

    ours, ref = loss(lambda y: split_heads(y, H)), loss(reference)
    torch.testing.assert_close(grad(ours)(x), grad(ref)(x))
    torch.testing.assert_close(jvp(ours, (x,), (t,))[1], jvp(ref, (x,), (t,))[1])


def test_plain_views_off_cpu_float32():
    """Other dtypes (and devices) get the plain views: the kernel never hands back slots there."""
    x = leaf().detach().double().requires_grad_(True)
    q, k, v = split_heads(x, H)
    assert q.grad_fn is not None and "SplitHeads" not in type(q.grad_fn).__name__
