"""Attention kinds; see :mod:`lengen.attention.base` for the shared call signature."""
from lengen.attention.base import Attention
from lengen.attention.cope import ContextualPositionAttention
from lengen.attention.diff import DifferentialAttention
from lengen.attention.fot import ForgettingAttention
from lengen.attention.softmax import SoftmaxAttention
from lengen.attention.tra import ThresholdRelativeAttention

# Literal registry: the CLI name is the key.
ATTENTIONS: dict[str, type[Attention]] = {
    "softmax": SoftmaxAttention,
    "fot": ForgettingAttention,
    "tra": ThresholdRelativeAttention,
    "cope": ContextualPositionAttention,
    "diff": DifferentialAttention,
}


def build_attention(name: str, **kwargs) -> Attention:
    from lengen.registry import lookup

    return lookup(ATTENTIONS, name, "attention kind")(**kwargs)
