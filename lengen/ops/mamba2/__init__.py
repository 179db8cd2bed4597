from lengen.ops.mamba2.chunked import ssd_chunked
from lengen.ops.mamba2.naive import ssd_naive

__all__ = ["ssd_naive", "ssd_chunked"]
