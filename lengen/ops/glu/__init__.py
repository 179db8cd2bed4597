"""Gated linear unit activations with a CPU fast path (:mod:`lengen.ops.glu.gated`)."""
from lengen.ops.glu.gated import swiglu

__all__ = ["swiglu"]
