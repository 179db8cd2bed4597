from lengen.ops.cope.chunked import cope_attention_chunked
from lengen.ops.cope.naive import cope_attention_naive

__all__ = ["cope_attention_naive", "cope_attention_chunked"]
