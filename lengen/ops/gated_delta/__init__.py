from lengen.ops.gated_delta.chunked import gated_delta_chunked
from lengen.ops.gated_delta.naive import gated_delta_naive

__all__ = ["gated_delta_naive", "gated_delta_chunked"]
