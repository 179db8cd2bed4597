"""Linear layers with a CPU training fast path (:mod:`lengen.ops.linear.onednn`)."""
from lengen.ops.linear.onednn import Linear, linear

__all__ = ["Linear", "linear"]
