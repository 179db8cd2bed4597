"""NoPE: no positional encoding (Kazemnejad et al. 2023). Causal masking alone carries order."""
from lengen.posenc.base import PositionalScheme


class NoPE(PositionalScheme):
    """No positional encoding (Kazemnejad et al. 2023): every hook is the identity."""
