"""Host-side helpers and the dot-product helper shared by the Triton TRA and FoT kernels
(``lengen/ops/tra/triton.py``, ``lengen/ops/fot/triton.py``): input checks, launch configuration,
dot precision. Importing this module imports triton; ``lengen.ops`` never does so by itself."""
from __future__ import annotations

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
