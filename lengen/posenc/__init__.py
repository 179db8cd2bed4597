"""Positional schemes; see :mod:`lengen.posenc.base` for the hook interface."""
from lengen.posenc.alibi import ALiBi
from lengen.posenc.base import PositionalScheme
from lengen.posenc.fire import FIRE
from lengen.posenc.kerple_log import KerpleLog
from lengen.posenc.learned import LearnedAbsolute
from lengen.posenc.nope import NoPE
from lengen.posenc.pope import PoPE
from lengen.posenc.prope import PRoPE
from lengen.posenc.rope import RoPE
from lengen.posenc.sincos import SinCos
from lengen.posenc.t5 import T5Bias
from lengen.posenc.xl import TransformerXLRelative
from lengen.registry import ExtensionPoint

# Literal registry: the CLI name is the key.
POSENCS: dict[str, type[PositionalScheme]] = {
    "nope": NoPE,
    "learned": LearnedAbsolute,
    "sincos": SinCos,
    "rope": RoPE,
    "alibi": ALiBi,
    "t5": T5Bias,
    "xl": TransformerXLRelative,
    "kerple_log": KerpleLog,
    "fire": FIRE,
    "prope": PRoPE,
    "pope": PoPE,
}


#: built-ins, import paths (``mypkg.pe:Slopes``) and installed plugins (entry points)
POSENC_POINT = ExtensionPoint("positional scheme", "model.posenc", "lengen.posencs", POSENCS,
                              PositionalScheme)


def build_posenc(name: str, **kwargs) -> PositionalScheme:
    return POSENC_POINT.get(name)(**kwargs)
