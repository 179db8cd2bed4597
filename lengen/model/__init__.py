from lengen.model.config import ModelConfig
from lengen.model.hf_backbone import HFBackbone
from lengen.model.transformer import Transformer, as_model_config


def build_model(cfg: ModelConfig | dict):
    """The model of ``cfg``: lengen's :class:`Transformer`, or with ``model.backbone=hf`` a
    Hugging Face model behind the same interface (:class:`HFBackbone`)."""
    cfg = as_model_config(cfg)
    return HFBackbone(cfg) if cfg.backbone == "hf" else Transformer(cfg)


__all__ = ["ModelConfig", "Transformer", "HFBackbone", "build_model"]
