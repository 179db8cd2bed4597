"""Host-side code and the dot-product helper shared by the Triton TRA and FoT kernels
(``lengen/ops/tra/triton.py``, ``lengen/ops/fot/triton.py``): the public entry's checks
(:func:`entry_checks`), the launch configuration (block size, grid, warps, dot precision:
:func:`launch_config`, :func:`launch`), and what every forward and backward does around its
kernels (:func:`forward_tensors`, :func:`backward_tensors`). Both ops launch one program per
(query or key block of BLOCK rows, batch x head) over contiguous [B, H, T, hd] tensors; what
stays in an op file is its kernels, what they save and the gradient of its gate.
Importing this module imports triton; ``lengen.ops`` never does so by itself."""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

MAX_HEAD_DIM = 128
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def mm(a, b, PREC: tl.constexpr):
    """tl.dot with fp32 accumulation. PREC "ieee": full fp32 products for fp32 inputs (not TF32);
    "upcast": operands converted to fp32 first (exact for bf16), because Triton's CPU
    interpreter multiplies the raw uint16 bit patterns of bf16 dot operands
    (triton-lang/triton#11584); "native": the input dtype's tensor-core path."""
    if PREC == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif PREC == "ieee":
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


def interpreted(kernel) -> bool:
    """True when ``kernel`` runs under Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return type(kernel).__name__ == "InterpretedFunction"


def launch_config(hd: int, block_size, device, dtype) -> tuple[int, int, int]:
    block_d = max(16, triton.next_power_of_2(hd))
    if block_size is None:
        # fp32 tiles take twice the shared memory (the fp32 backward at 64x64, hd 64, already
        # needs 128 KiB on sm_90), so they get 32-row tiles; the interpreter also uses 32
        block_size = 64 if device.type == "cuda" and dtype != torch.float32 else 32
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size}")
    num_warps = 4 if block_d <= 64 else 8
    return block_size, block_d, num_warps


def check_inputs(q, k, v, gate, gate_name, kernel):
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must all be [B, H, T, hd]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if gate.shape != q.shape[:3]:
        raise ValueError(f"{gate_name} must be [B, H, T] = {tuple(q.shape[:3])}, "
                         f"got {tuple(gate.shape)}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"Triton kernels take float16/bfloat16/float32 q, k, v of one dtype; got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    if gate.dtype not in DTYPES:
        raise TypeError(f"{gate_name} must be float16/bfloat16/float32, got {gate.dtype}")
    if q.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"head dim {q.shape[-1]} > {MAX_HEAD_DIM} is not supported by the Triton "
                         f"kernels; use the chunked op")
    devs = {t.device for t in (q, k, v, gate)}
    if len(devs) != 1:
        raise ValueError(f"all inputs must be on one device, got {devs}")
    if q.device.type == "cpu" and not interpreted(kernel):
        raise RuntimeError("Triton kernels on CPU tensors need the interpreter: set "
                           "TRITON_INTERPRET=1 before triton is first imported")


def dot_precision(dtype, interpreted: bool) -> str:
    if dtype == torch.float32:
        return "ieee"   # full fp32 products, as the fp32 reference computes them (TF32 would not)
    return "upcast" if interpreted and dtype == torch.bfloat16 else "native"


class Launch(NamedTuple):
    """How an op's kernels are launched for one call: the grid (blocks of BLOCK rows x B*H) and
    the meta-parameters every kernel takes."""
    grid: tuple
    meta: dict


def launch(q: torch.Tensor, block_size, kernel) -> Launch:
    """The launch of ``kernel``'s op for q [B, H, T, hd] (``block_size``: see
    :func:`launch_config`)."""
    B, H, T, hd = q.shape
    blk, block_d, num_warps = launch_config(hd, block_size, q.device, q.dtype)
    prec = dot_precision(q.dtype, interpreted(kernel))
    return Launch((triton.cdiv(T, blk), B * H), {"HD": hd, "BLOCK": blk, "BLOCK_D": block_d,
                                                 "PREC": prec, "num_warps": num_warps})


def run(kernel, cfg: Launch, *args) -> None:
    """``kernel`` over ``cfg``'s grid (nothing for T = 0: an empty grid)."""
    if cfg.grid[0] > 0:
        kernel[cfg.grid](*args, **cfg.meta)


def forward_tensors(q, k, v):
    """-> contiguous q, k, v, the output o (q's shape and dtype) and the per-row base-2
    log-sum-exp [B, H, T] in fp32, which the forward saves for the backward."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    return q, k, v, torch.empty_like(q), lse


def backward_tensors(do, q, o):
    """-> the upstream gradient, contiguous in q's dtype, and ``delta = rowsum(dO * O)``
    [B, H, T] in fp32 (from the rounded output, as in FlashAttention-2)."""
    do = do.contiguous().to(q.dtype)
    return do, (do.float() * o.float()).sum(-1)


def entry_checks(name: str, q, k, v, gate, gate_name: str, kernel, bias_fn, scale) -> float:
    """The checks of a public ``<name>_attention_triton`` call (no ``bias_fn``; inputs as
    :func:`check_inputs` wants them); returns the scale (default hd^-0.5)."""
    if bias_fn is not None:
        raise NotImplementedError(f"{name}_attention_triton does not support bias_fn (positional "
                                  f"biases); use {name}_attention_chunked or "
                                  f"{name}_attention_naive")
    check_inputs(q, k, v, gate, gate_name, kernel)
    return q.shape[-1] ** -0.5 if scale is None else float(scale)
