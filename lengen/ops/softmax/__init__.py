from lengen.ops.softmax.chunked import softmax_attention_chunked
from lengen.ops.softmax.naive import softmax_attention_naive

__all__ = ["softmax_attention_naive", "softmax_attention_chunked"]
