"""Normalisation ops (:mod:`lengen.ops.norm.rms`): RMSNorm with a CPU fast path, and the
weightless q/k RMS norm in plain torch."""
from lengen.ops.norm.rms import qk_rms, rms_norm

__all__ = ["qk_rms", "rms_norm"]
