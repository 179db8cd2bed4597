"""Model configuration (a plain dataclass; every field has a default and a comment)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

MLPS = ("swiglu", "geglu", "relu")
NORMS = ("rms", "layer")
NORM_POSITIONS = ("pre", "post", "sandwich", "pre_post")


@dataclass
class ModelConfig:
    vocab_size: int = 8
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None            # MLP hidden width; default 2 x d_model (TRA paper, for both
                                       # the linear and the gate units of a GLU)
    mlp: str = "swiglu"                # swiglu | geglu | relu
    norm: str = "rms"                  # rms | layer
    norm_position: str = "pre"         # pre: x + F(N(x)); post: N(x + F(x)); sandwich:
                                       # x + N2(F(N1(x))) (norms on a sublayer's input and
                                       # output); pre_post: N2(x + F(N1(x))) (pre-norm on the
                                       # input, post-norm on the residual sum; Zhou et al. 2024)
    final_norm: bool = True            # norm before the output head (pre-norm models need it)
    dropout: float = 0.0               # residual dropout, active only in train mode
    tie_embeddings: bool = False
    embed_scale: bool = False          # multiply token embeddings by sqrt(d_model) (Ruoss et al.)
    causal: bool = True                # False = bidirectional encoder (outputs read from placeholders)
    posenc: str = "nope"               # key of lengen.posenc.POSENCS
    posenc_kwargs: dict = field(default_factory=dict)
    attention: str = "softmax"         # key of lengen.attention.ATTENTIONS
    attention_kwargs: dict = field(default_factory=dict)
    positions: str = "identity"        # key of lengen.positions.SAMPLERS
    positions_kwargs: dict = field(default_factory=dict)
    attn_impl: str = "auto"            # auto | naive | lean (see lengen.attention.base)
    attn_block_size: int = 256         # query block of the lean path
    init_std: float = 0.02

    def __post_init__(self):
        if self.d_ff is None:
            self.d_ff = 2 * self.d_model
        for name, value, valid in (("mlp", self.mlp, MLPS), ("norm", self.norm, NORMS),
                                   ("norm_position", self.norm_position, NORM_POSITIONS)):
            if value not in valid:
                raise ValueError(f"unknown model.{name} '{value}'. Valid: {', '.join(valid)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    def to_dict(self) -> dict:
        return asdict(self)
