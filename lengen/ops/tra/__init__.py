from lengen.ops.tra.chunked import tra_attention_chunked
from lengen.ops.tra.naive import tra_attention_naive

__all__ = ["tra_attention_naive", "tra_attention_chunked"]
