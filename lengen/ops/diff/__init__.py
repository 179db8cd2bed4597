from lengen.ops.diff.chunked import diff_attention_chunked
from lengen.ops.diff.naive import diff_attention_naive

__all__ = ["diff_attention_naive", "diff_attention_chunked"]
