"""Position samplers; see :mod:`lengen.samplers.base` for what a sampler is and how training,
evaluation and generation call it. :mod:`lengen.samplers.skew` holds the skew functions of tail
warping (also read by the idealized analysis)."""
from lengen.registry import ExtensionPoint
from lengen.samplers.base import PositionSampler
from lengen.samplers.digits import AbacusSampler, CouplingSampler
from lengen.samplers.identity import IdentitySampler
from lengen.samplers.interpolate import InterpolateSampler
from lengen.samplers.label import LabelSampler
from lengen.samplers.randomized import RandomizedSampler
from lengen.samplers.warp import WarpSampler

# Literal registry: the CLI name is the key.
SAMPLERS: dict[str, type[PositionSampler]] = {
    "identity": IdentitySampler,
    "randomized": RandomizedSampler,
    "label": LabelSampler,
    "interpolate": InterpolateSampler,
    "warp": WarpSampler,
    "coupling": CouplingSampler,      # position coupling (Cho et al. 2024)
    "abacus": AbacusSampler,          # Abacus (McLeish et al. 2024)
}


#: built-ins, import paths (``mypkg.pos:Mine``) and installed plugins (entry points)
SAMPLER_POINT = ExtensionPoint("position sampler", "model.positions", "lengen.samplers", SAMPLERS,
                               PositionSampler)


def build_sampler(name: str, **kwargs) -> PositionSampler:
    return SAMPLER_POINT.get(name)(**kwargs)
