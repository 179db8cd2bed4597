"""Mixed precision (``train.precision``) and ``torch.compile`` (``train.compile``), applied to the
training step from outside the model.

``train.precision``:

* ``fp32`` (default): no autocast.
* ``bf16``: the forward pass runs under ``torch.autocast(device_type, torch.bfloat16)``; weights,
  gradients and optimizer state stay fp32; the loss is computed in fp32 (the logits are cast up).
  No loss scaling: bf16 has fp32's exponent range.
* ``fp16``: the same with ``torch.float16`` plus a ``torch.amp.GradScaler`` (dynamic loss scaling:
  a step whose gradients overflow is skipped and the scale halved). The scaler's state is saved in
  checkpoints, so a resume is exact. CPU autocast supports fp16 in the torch versions lengen
  accepts (>= 2.4, checked at validation with a one-op probe); it is slow on CPUs without fp16
  arithmetic and is there for parity with GPUs, bf16 is the CPU choice.

Each precision is checked when the config is validated on the machine that trains (the device
type must offer autocast in that dtype; bf16 on a CUDA GPU must support it), so an impossible
choice fails before any work with the fix in the message. Evaluation (periodic and final) runs in
fp32 on the fp32 weights, so evaluation rows are comparable across precisions; the attention ops
are tested correct in bf16 by ``tests/test_half_precision.py``.

``train.compile=true`` wraps the training forward in ``torch.compile`` (after DDP, when
data-parallel). The uncompiled module is what is checkpointed (no ``_orig_mod.`` prefixes),
evaluated and returned, so runs trained with and without compile are interchangeable; it is a
runtime key (``lengen.config.RUNTIME_KEYS``), like the device, and may change on resume.
Availability (TorchDynamo on this Python; a C++ compiler for the CPU backend, Triton for CUDA) is
checked at validation; a compiler failure at the first step is reported as a config error naming
``train.compile``. Measured on a 2-core CPU in ``benchmarks/RESULTS.md`` (bf16 and compile are
not free wins there).
"""
from __future__ import annotations

import contextlib
import os
import shutil

import torch

from lengen.errors import ConfigError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str, device: str, key: str = "train.precision") -> None:
    """Raise a ConfigError now if ``precision`` cannot run on ``device`` (which exists)."""
    dtype = DTYPES[precision]
    if dtype is None:
        return
    dev = torch.device(device)
    fix = f"set {key}=fp32" + (" or bf16" if precision == "fp16" else "")
    if not torch.amp.is_autocast_available(dev.type):
        raise ConfigError(f"{key}={precision}: torch {torch.__version__} has no autocast for "
                          f"device type '{dev.type}'; {fix}")
    if dev.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"{key}=bf16: this GPU does not support bfloat16; set {key}=fp16 "
                          f"(with loss scaling) or fp32")
    try:                    # one tiny op: some device types accept autocast but not every dtype
        with torch.autocast(dev.type, dtype=dtype):
            out = torch.nn.functional.linear(torch.ones(2, 2, device=dev),
                                             torch.ones(2, 2, device=dev))
        ok = out.dtype == dtype
    except (RuntimeError, ValueError, TypeError) as e:
        raise ConfigError(f"{key}={precision}: autocast to {dtype} fails on {dev.type} with torch "
                          f"{torch.__version__} ({type(e).__name__}: {e}); {fix}") from None
    if not ok:
        raise ConfigError(f"{key}={precision}: autocast on {dev.type} does not compute in {dtype} "
                          f"with torch {torch.__version__}; {fix}")


def check_runtime(tc) -> None:
    """What only the training machine can tell (``tc``: a TrainConfig): the device exists, the
    precision runs on it, the compiler is there. Called when a config is resolved and again
    when training starts."""
    from lengen.checks import check_device_available

    check_device_available(tc.device, "train.device")
    check_precision(tc.precision, tc.device)
    if tc.compile:
        check_compile(tc.device)


def autocast(precision: str, device: torch.device):
    """Context for the training forward pass."""
    dtype = DTYPES[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device):
    """``torch.amp.GradScaler`` for fp16; for fp32 / bf16 a disabled one, which passes the loss
    and the optimizer step through unchanged and has an empty state."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def _cpp_compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx) or (cxx if os.path.isfile(cxx) else None)
    return next((p for p in map(shutil.which, ("g++", "c++", "clang++")) if p), None)


def check_compile(device: str, key: str = "train.compile") -> None:
    """Raise a ConfigError now if ``torch.compile`` cannot work here for ``device``."""
    fix = f"set {key}=false"
    try:
        import torch._dynamo as dynamo
    except ImportError as e:           # pragma: no cover - every supported torch has it
        raise ConfigError(f"{key}=true: torch {torch.__version__} has no TorchDynamo ({e}); "
                          f"{fix}") from None
    if not dynamo.is_dynamo_supported():
        import sys

        raise ConfigError(f"{key}=true: torch.compile is not supported by torch "
                          f"{torch.__version__} on Python {sys.version.split()[0]} / "
                          f"{sys.platform}; {fix}, or use a torch build that supports it")
    dev = torch.device(device)
    if dev.type == "cpu" and _cpp_compiler() is None:
        raise ConfigError(f"{key}=true on cpu needs a C++ compiler for torch.compile's CPU backend "
                          f"(none of $CXX, g++, c++, clang++ found); install one (e.g. apt-get "
                          f"install g++) or {fix}")
    if dev.type == "cuda":
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            raise ConfigError(f"{key}=true on cuda needs Triton (pip install triton, or "
                              f"'lengen[triton]'); {fix}")


def compile_model(module: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(module)``; the caller keeps the uncompiled module for checkpoints."""
    return torch.compile(module)


def is_compiler_error(e: BaseException) -> bool:
    """Whether ``e`` comes from torch.compile's machinery (Dynamo, Inductor, a backend) rather
    than from the model's own code."""
    mod = type(e).__module__ or ""
    return mod.startswith(("torch._dynamo", "torch._inductor", "torch._subclasses"))


def compile_failure(e: BaseException) -> ConfigError:
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return ConfigError(f"train.compile=true: torch.compile failed on the first training step "
                       f"({type(e).__name__}: {first}); set train.compile=false to train eagerly "
                       f"(rerun with --debug for the compiler's traceback)")


__all__ = ["DTYPES", "check_precision", "check_runtime", "autocast", "grad_scaler", "check_compile",
           "compile_model", "is_compiler_error", "compile_failure"]
