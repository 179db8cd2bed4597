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
from lengen.attention.path import PaTHAttention
from lengen.attention.selective import SelectiveAttention
from lengen.attention.softmax import SoftmaxAttention
from lengen.attention.stickbreaking import StickBreakingAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.registry import ExtensionPoint

# Literal registry: the CLI name is the key.
ATTENTIONS: dict[str, type[Attention] | type[TokenMixer]] = {
    "softmax": SoftmaxAttention,
    "fot": ForgettingAttention,
    "tra": ThresholdRelativeAttention,
    "cope": ContextualPositionAttention,
    "diff": DifferentialAttention,
    "selective": SelectiveAttention,
    "stickbreaking": StickBreakingAttention,
    "path": PaTHAttention,
    # token mixers (lengen.attention.mixer): recurrences that read no positional scheme
    "lstm": LSTMMixer,
    "mamba2": Mamba2Mixer,
    "gated_deltanet": GatedDeltaNetMixer,
}


#: built-ins, import paths (``mypkg.attn:Mine``) and installed plugins (entry points): an
#: Attention subclass, or a TokenMixer subclass (a layer with no queries and keys, e.g. an RNN);
#: either base gives the class the ``supports_*`` flags the block reads
ATTENTION_POINT = ExtensionPoint("attention kind", "model.attention", "lengen.attentions",
                                 ATTENTIONS, (Attention, TokenMixer))


def wide_qk_refusal(posenc_cls, attention_cls, posenc_name: str, attention_name: str):
    """Why attention kind ``attention_cls`` cannot run with scheme ``posenc_cls``, or None: a
    scheme whose ``rotate`` widens q/k (``qk_width_factor`` > 1, PoPE) with a kind that needs q's
    width to be the head's (``supports_wide_qk = False``: CoPE's position table, Diff's paired
    heads)."""
    factor = posenc_cls.qk_width_factor
    if factor == 1 or attention_cls.supports_wide_qk:
        return None
    ok = sorted(n for n, c in ATTENTIONS.items() if c.supports_wide_qk)
    return (f"positional scheme '{posenc_name}' (model.posenc) makes q and k {factor}x as wide as "
            f"the head, and attention kind '{attention_name}' (model.attention) needs them as "
            f"wide as the head; use model.attention one of {', '.join(ok)}, or another "
            f"model.posenc")


def build_attention(name: str, **kwargs) -> Attention | TokenMixer:
    return ATTENTION_POINT.get(name)(**kwargs)
