"""``x W^T + b`` whose training forward and input gradient run through oneDNN on CPU.

Why: on CPU, PyTorch computes float32 ``F.linear`` and its input gradient with MKL's sgemm. For
the projections of the cpu-scale models (a few thousand rows, 64-256 features, one thread)
oneDNN's matmul, which ships inside PyTorch's x86 builds, computes the forward and the input
gradient faster at most of these shapes (``benchmarks/ops.py --ops linear``, numbers in
``benchmarks/RESULTS.md``); the weight gradient stays with PyTorch's ``mm``, the faster of the
two there. The libraries may sum a product in different orders, so the two agree to fp32
rounding (``tests/test_linear.py`` holds both to ``F.linear`` and to a float64 reference, values
and gradients).

:func:`linear` takes the oneDNN path (:func:`applies`) for float32 CPU tensors when a gradient is
needed, the input has at least :data:`MIN_ROWS` rows, no CPU autocast is on, and the op is
there and gives ``F.linear``'s values on a probe at first use; otherwise, evaluation and bf16
training included, it is ``F.linear`` itself, so evaluated numbers do not change. ``LENGEN_ONEDNN_LINEAR=0`` (or
``LENGEN_C_KERNELS=0``, the switch for all of lengen's CPU fast paths) turns it off, and so does
``torch.compile``.

oneDNN compiles a primitive for each shape it meets (a JIT compile) and keeps a bounded
cache of them, so a run whose row counts vary from step to step (packed batches: the number of
needed tokens changes with every batch) could compile at every call. A shape takes this path
from its :data:`ADMIT_AFTER`-th call on (a fixed batch shape: from the first steps; a row count
seen fewer times: never), at most :data:`MAX_SHAPES` distinct shapes per process, and calls are
counted for the first :data:`COUNTED` shapes only; the others use ``F.linear``. :class:`Linear` is ``nn.Linear`` with this forward: the same
parameters, state dict and initialisation.
"""
from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import nn

from lengen.ops import ckernels
from lengen.ops.ckernels import env_on, refuse_double_backward

#: fewer rows than this stay with F.linear: below it the call's fixed cost is most of the time
MIN_ROWS = 1024
#: distinct (rows, in, out, bias) shapes that may take the oneDNN path in one process (oneDNN's
#: primitive cache holds 1024 by default; each shape makes two: forward and input gradient)
MAX_SHAPES = 256
#: a shape takes the oneDNN path from its ADMIT_AFTER-th call on (calls counted for up to
#: COUNTED shapes; later new ones are never admitted)
ADMIT_AFTER = 3
COUNTED = 4096

_lock = threading.Lock()
_probe: bool | None = None
_shapes: set = set()
_calls: dict = {}


def _dense(x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x2 [M, K] @ w [N, K]^T (+ b [N]) through oneDNN -> [M, N]."""
    return torch.ops.mkldnn._linear_pointwise(x2, w, b, "none", [], "")


def enabled() -> bool:
    return env_on("LENGEN_ONEDNN_LINEAR") and ckernels.enabled()


def available() -> bool:
    """Whether this PyTorch has oneDNN's linear and it gives F.linear's values on a probe
    (checked once per process; an error or a mismatch means no)."""
    global _probe
    if _probe is None:
        with _lock:
            if _probe is None:
                _probe = _check()
    return _probe


def _check() -> bool:
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        g = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(*s, generator=g) for s in ((37, 24), (40, 24), (40,)))
        dy = torch.randn(37, 40, generator=g)
        with torch.no_grad():
            ok = (torch.allclose(_dense(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
                  and torch.allclose(_dense(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
                  and torch.allclose(_dense(dy, w.t(), None), dy @ w, rtol=1e-5, atol=1e-5))
        return bool(ok)
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return False


def _admit(shape: tuple) -> bool:
    """Whether ``shape`` takes the oneDNN path now (the module docstring's rule)."""
    if shape in _shapes:
        return True
    with _lock:
        n = _calls.get(shape, 0) + 1
        if n >= ADMIT_AFTER and len(_shapes) < MAX_SHAPES:
            _shapes.add(shape)
            _calls.pop(shape, None)
            return True
        if shape in _calls or len(_calls) < COUNTED:
            _calls[shape] = n
    return False


def applies(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> bool:
    """Whether :func:`linear` takes the oneDNN path for these inputs (cheapest checks first:
    this runs at every projection of a training step)."""
    if not (torch.is_grad_enabled() and x.dtype == torch.float32 and x.device.type == "cpu"
            and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad))
            and x.dim() >= 2 and w.dim() == 2):
        return False
    K, N = w.shape[1], w.shape[0]
    rows = x.numel() // K if x.shape[-1] == K and K > 0 else 0
    if (rows < MIN_ROWS or N == 0 or w.dtype != torch.float32 or w.device.type != "cpu"
            or (b is not None and (b.dtype != torch.float32 or b.device.type != "cpu"
                                   or tuple(b.shape) != (N,)))):
        return False
    # under autocast (train.precision=bf16) F.linear runs in the low precision; keep it
    return (not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()
            and enabled() and available() and _admit((rows, K, N, b is not None)))


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()                        # [M, K]
        y = _dense(x2, w.contiguous(), None if b is None else b.contiguous())  # [M, N]
        ctx.save_for_backward(x2, w)
        ctx.x_shape = x.shape
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        refuse_double_backward("lengen's oneDNN linear",
                               "set LENGEN_ONEDNN_LINEAR=0 for that")
        x2, w = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()                      # [M, N]
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _dense(dy2, w.t(), None).view(ctx.x_shape)                  # dy W: [M, K]
        if ctx.needs_input_grad[1]:
            dw = dy2.t().mm(x2)                                              # [N, K], as autograd
        if ctx.needs_input_grad[2]:                                          # False without b
            db = dy2.sum(0)
        return dx, dw, db


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, w, b)``, through oneDNN where :func:`applies`."""
    if applies(x, w, b):
        return _Linear.apply(x, w, b)
    return F.linear(x, w, b)


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear` (same parameters and state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
