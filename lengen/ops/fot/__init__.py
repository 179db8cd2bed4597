from lengen.ops.fot.chunked import fot_attention_chunked
from lengen.ops.fot.naive import fot_attention_naive

__all__ = ["fot_attention_naive", "fot_attention_chunked"]
