"""Attention kinds; see :mod:`lengen.attention.base` for the shared call signature, and
:mod:`lengen.attention.mixer` for the token mixers (recurrences) registered beside them."""
from lengen.attention.base import Attention
from lengen.attention.cope import ContextualPositionAttention
from lengen.attention.diff import DifferentialAttention
from lengen.attention.fot import ForgettingAttention
from lengen.attention.gated_deltanet import GatedDeltaNetMixer
from lengen.attention.lstm import LSTMMixer
from lengen.attention.mamba2 import Mamba2Mixer
from lengen.attention.mixer import TokenMixer
from lengen.attention.softmax import SoftmaxAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.registry import ExtensionPoint

# Literal registry: the CLI name is the key.
ATTENTIONS: dict[str, type[Attention] | type[TokenMixer]] = {
    "softmax": SoftmaxAttention,
    "fot": ForgettingAttention,
    "tra": ThresholdRelativeAttention,
    "cope": ContextualPositionAttention,
    "diff": DifferentialAttention,
    # token mixers (lengen.attention.mixer): recurrences that read no positional scheme
    "lstm": LSTMMixer,
    "mamba2": Mamba2Mixer,
    "gated_deltanet": GatedDeltaNetMixer,
}


#: built-ins, import paths (``mypkg.attn:Mine``) and installed plugins (entry points)
ATTENTION_POINT = ExtensionPoint("attention kind", "model.attention", "lengen.attentions",
                                 ATTENTIONS, (Attention, TokenMixer))


def build_attention(name: str, **kwargs) -> Attention | TokenMixer:
    return ATTENTION_POINT.get(name)(**kwargs)
