"""Normalisation ops with a CPU fast path (:mod:`lengen.ops.norm.rms`)."""
from lengen.ops.norm.rms import rms_norm

__all__ = ["rms_norm"]
