"""Attention kinds; see :mod:`lengen.attention.base` for the shared call signature."""
from lengen.attention.base import Attention
from lengen.attention.cope import ContextualPositionAttention
from lengen.attention.diff import DifferentialAttention
from lengen.attention.fot import ForgettingAttention
from lengen.attention.softmax import SoftmaxAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.registry import ExtensionPoint

# Literal registry: the CLI name is the key.
ATTENTIONS: dict[str, type[Attention]] = {
    "softmax": SoftmaxAttention,
    "fot": ForgettingAttention,
    "tra": ThresholdRelativeAttention,
    "cope": ContextualPositionAttention,
    "diff": DifferentialAttention,
}


#: built-ins, import paths (``mypkg.attn:Mine``) and installed plugins (entry points); a token
#: mixer that is no Attention subclass (an RNN) declares ``is_token_mixer = True`` instead
ATTENTION_POINT = ExtensionPoint("attention kind", "model.attention", "lengen.attentions",
                                 ATTENTIONS, Attention, also="is_token_mixer")


def build_attention(name: str, **kwargs) -> Attention:
    return ATTENTION_POINT.get(name)(**kwargs)
