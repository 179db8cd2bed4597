from lengen.model.config import ModelConfig
from lengen.model.hf_backbone import HFBackbone
from lengen.model.transformer import Transformer, as_model_config


def build_model(cfg: ModelConfig | dict, *, posenc=None, sampler=None):
    """The model of ``cfg``: lengen's :class:`Transformer`, or with ``model.backbone=hf`` a
    Hugging Face model behind the same interface (:class:`HFBackbone`). ``posenc`` / ``sampler``:
    instances validation already built for ``cfg`` (:class:`lengen.config.Resolved`), used
    instead of building new ones (an HF backbone has no lengen scheme: it takes the sampler)."""
    cfg = as_model_config(cfg)
    if cfg.backbone == "hf":
        return HFBackbone(cfg, sampler=sampler)
    return Transformer(cfg, posenc=posenc, sampler=sampler)


__all__ = ["ModelConfig", "Transformer", "HFBackbone", "build_model"]
