"""The heads of a fused q, k, v projection, without the copy of its gradient back into place.

Attention projects x once, ``qkv = x W`` [B, T, 3 H hd], and reads q, k and v as views of it,
[B, H, T, hd] each. Written as ``qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)`` and unbound,
autograd gives the projection its gradient by stacking dq, dk and dv ([3, B, H, T, hd], one copy)
and making that contiguous again for the weight's and x's gradients (a second copy): two passes
over the [B, T, 3D] gradient per layer that do no arithmetic.

:func:`split_heads` returns the same three views. Its backward makes one [B, T, 3D] gradient:
when dq, dk and dv already are the three head slots of one [B, T, 3, H, hd] buffer in this layout
(the CPU kernel of :mod:`lengen.ops.fused_rows` writes them so), that buffer is the gradient, no
copy; otherwise each is copied into its slot of a new one (one pass, the stack's). The first
happens when the kernel's dq and dk reach it unchanged (softmax, FoT and CoPE with a scheme that
leaves q and k as they are: NoPE, ALiBi, T5, FIRE, KerpleLog ...); where q or k are made anew
(RoPE's rotation, TRA's q / k norm) their gradients are copied once, as v's is with SDPA. Only
float32 CPU tensors take this Function; elsewhere the views are plain views. The reference is
the view-and-unbind above (``tests/test_heads.py``: values, gradients, every slot missing,
``torch.func``).
"""
from __future__ import annotations

import torch


def qkv_buffer(q, k, v):
    """The [B, T, 3 H hd] tensor whose three head slots q, k, v [B, H, T, hd] are (q's heads
    first, then k's, then v's, the layout of :func:`split_heads`), or None when they are not."""
    if q is None or k is None or v is None:
        return None
    B, H, T, hd = q.shape
    st = (T * 3 * H * hd, hd, 3 * H * hd, 1)
    if not (q.stride() == k.stride() == v.stride() == st and k.shape == v.shape == q.shape
            and q.dtype == k.dtype == v.dtype and q.device == k.device == v.device):
        return None
    if not (q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()
            == v.untyped_storage().data_ptr()):
        return None
    step = H * hd * q.element_size()
    if k.data_ptr() - q.data_ptr() != step or v.data_ptr() - k.data_ptr() != step:
        return None
    return q.as_strided((B, T, 3 * H * hd), (T * 3 * H * hd, 3 * H * hd, 1))


def new_slots(B: int, H: int, T: int, hd: int, dtype=torch.float32):
    """Three empty [B, H, T, hd] tensors that are the head slots of one new [B, T, 3 H hd]
    buffer (:func:`qkv_buffer` gives it back): what a kernel writes dq, dk, dv into so that
    :func:`split_heads`' backward needs no copy."""
    return _slots(torch.empty(B, T, 3 * H * hd, dtype=dtype), H)


def _slots(qkv: torch.Tensor, n_heads: int):
    """q, k, v [B, H, T, hd] as views of ``qkv`` [B, T, 3 H hd]."""
    B, T, C = qkv.shape
    heads = qkv.view(B, T, 3, n_heads, C // (3 * n_heads))            # [B, T, 3, H, hd]
    return tuple(heads[:, :, s].transpose(1, 2) for s in range(3))


class _SplitHeads(torch.autograd.Function):
    @staticmethod
    def forward(qkv, n_heads: int):
        return _slots(qkv, n_heads)

    @staticmethod
    def setup_context(ctx, inputs, output):
        qkv, n_heads = inputs
        B, T, C = qkv.shape
        ctx.shape = (B, T, n_heads, C // (3 * n_heads))
        ctx.set_materialize_grads(False)       # a head with no gradient stays None, not zeros

    @staticmethod
    def backward(ctx, dq, dk, dv):
        B, T, H, hd = ctx.shape
        same = qkv_buffer(dq, dk, dv)
        if same is not None:
            return same, None
        like = next((g for g in (dq, dk, dv) if g is not None), None)
        if like is None:
            return None, None
        out = like.new_empty(B, T, 3, H, hd)
        for s, g in enumerate((dq, dk, dv)):
            if g is None:
                out[:, :, s].zero_()
            else:
                out[:, :, s].copy_(g.transpose(1, 2))
        return out.view(B, T, 3 * H * hd), None

    @staticmethod
    def jvp(ctx, qkv_t, _):
        return _slots(qkv_t, ctx.shape[2])


def split_heads(qkv: torch.Tensor, n_heads: int):
    """q, k, v [B, H, T, hd] as views of a fused projection ``qkv`` [B, T, 3 H hd] (q's heads
    first, then k's, then v's), with the one-pass backward of the module docstring for float32
    CPU tensors (where the fused-rows kernel can hand back the buffer); plain views elsewhere."""
    if qkv.dim() != 3 or qkv.shape[-1] % (3 * n_heads):
        raise ValueError(f"qkv must be [B, T, 3 * n_heads * head_dim] with n_heads={n_heads}, "
                         f"got {list(qkv.shape)}")
    if (torch.is_grad_enabled() and qkv.requires_grad and qkv.device.type == "cpu"
            and qkv.dtype == torch.float32):
        return _SplitHeads.apply(qkv, n_heads)
    return _slots(qkv, n_heads)
