from lengen.ops.selective.chunked import selective_attention_chunked
from lengen.ops.selective.naive import selective_attention_naive

__all__ = ["selective_attention_naive", "selective_attention_chunked"]
