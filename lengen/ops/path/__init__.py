from lengen.ops.path.chunked import path_attention_chunked
from lengen.ops.path.naive import path_attention_naive

__all__ = ["path_attention_naive", "path_attention_chunked"]
