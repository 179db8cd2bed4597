from lengen.ops.stickbreaking.chunked import stickbreaking_attention_chunked
from lengen.ops.stickbreaking.naive import stickbreaking_attention_naive

__all__ = ["stickbreaking_attention_naive", "stickbreaking_attention_chunked"]
