"""What only the machine that trains can tell, checked when a config is validated (before any
work) and again when training starts: the device exists, ``train.precision`` runs on it (autocast
in that dtype, probed with one tiny op), and ``torch.compile`` can work here (TorchDynamo for this
Python; a C++ compiler for the CPU backend, Triton for CUDA). Applying precision and compile to a
training step is :mod:`lengen.train.precision`; this module sits below the config layer so that
validation does not import the training loop's modules.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import warnings

import torch

from lengen.checks import check_device_available
from lengen.errors import ConfigError, LengenWarning

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
    check_device_available(tc.device, "train.device")
    check_precision(tc.precision, tc.device)
    if tc.compile:
        check_compile(tc.device)




def _cpp_compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx) or (cxx if os.path.isfile(cxx) else None)
    return next((p for p in map(shutil.which, ("g++", "c++", "clang++")) if p), None)


def check_compile(device: str, key: str = "train.compile") -> None:
    """Raise a ConfigError now if ``torch.compile`` cannot work here for ``device``."""
    fix = f"set {key}=false"
    try:
        import torch._dynamo as dynamo  # slow import: compiling only
    except ImportError as e:           # pragma: no cover - every supported torch has it
        raise ConfigError(f"{key}=true: torch {torch.__version__} has no TorchDynamo ({e}); "
                          f"{fix}") from None
    if not dynamo.is_dynamo_supported():
        raise ConfigError(f"{key}=true: torch.compile is not supported by torch "
                          f"{torch.__version__} on Python {sys.version.split()[0]} / "
                          f"{sys.platform}; {fix}, or use a torch build that supports it")
    dev = torch.device(device)
    if dev.type == "cpu" and _cpp_compiler() is None:
        raise ConfigError(f"{key}=true on cpu needs a C++ compiler for torch.compile's CPU backend "
                          f"(none of $CXX, g++, c++, clang++ found); install one (e.g. apt-get "
                          f"install g++) or {fix}")
    if dev.type == "cpu":
        warnings.warn(f"{key}=true on cpu: under torch.compile lengen's CPU kernels step aside (they "
                      f"keep Python state a compiled graph would recompile on) and the compiler "
                      f"traces the reference attention ops, which is usually slower than the "
                      f"eager CPU path; compiling pays on cuda", LengenWarning, stacklevel=2)
    if dev.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            raise ConfigError(f"{key}=true on cuda needs Triton (pip install triton, or "
                              f"'lengen[triton]'); {fix}")


__all__ = ["DTYPES", "check_precision", "check_compile", "check_runtime"]
