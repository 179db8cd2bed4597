from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer

__all__ = ["ModelConfig", "Transformer"]
