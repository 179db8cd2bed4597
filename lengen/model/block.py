"""A transformer block and its parts: RMSNorm, the MLP, and the block that runs attention
and the MLP around the residual stream in one of four norm placements (pre, post, pre_post,
sandwich). :class:`lengen.model.transformer.Transformer` stacks them.

``Block.forward`` also takes the model's :class:`lengen.ops.rows.RowPlan`, the rows training
leaves out or shares (the last block's kept rows, the needed tokens only, the first block's input
as one row per vocabulary entry); each is exact up to fp32 rounding, and tests/test_keep.py and
tests/test_token_rows.py hold them to the batch-sized forward. What the attention kind does not
declare it handles (its ``supports_*`` class flags), :meth:`Block.mix` does around it.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention import build_attention
from lengen.model.config import ModelConfig
from lengen.ops.glu import swiglu
from lengen.ops.linear import Linear
from lengen.ops.norm import rms_norm
from lengen.ops.rows import NO_ROWS, RowPlan
from lengen.registry import construct


def built(what: str, build, name: str, kwargs: dict, **framework):
    """``build(name, **framework, **kwargs)``, a constructor's complaint (a value the keyword
    checks cannot see, e.g. diff attention's odd n_heads; a missing package; a size that cannot
    be allocated) becoming a ConfigError that names ``what``, as in validation
    (:func:`lengen.registry.construct`). Attention layers are checked only here: validation does
    not build them."""
    return construct(functools.partial(build, name), kwargs, what=what, **framework)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        # F.rms_norm, with the backward in one C pass per row in CPU training (lengen.ops.norm)
        return rms_norm(x, self.weight, self.eps)


def make_norm(cfg: ModelConfig) -> nn.Module:
    return RMSNorm(cfg.d_model) if cfg.norm == "rms" else nn.LayerNorm(cfg.d_model)


class MLP(nn.Module):
    """SwiGLU / GeGLU (Shazeer 2020): down(act(gate(x)) * up(x)); or a plain two-layer MLP with
    biases, down(act(up(x))): ReLU (Vaswani et al. 2017) or GPT-2's GELU with the tanh
    approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Radford et al. 2019; HF's
    ``gelu_new``)."""

    PLAIN = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh")}

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.mlp
        plain = cfg.mlp in self.PLAIN
        # nn.Linear with oneDNN's CPU training path (lengen.ops.linear)
        self.up = Linear(cfg.d_model, cfg.d_ff, bias=plain)
        self.gate = None if plain else Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = Linear(cfg.d_ff, cfg.d_model, bias=plain)

    def forward(self, x):
        if self.gate is None:
            return self.down(self.PLAIN[self.kind](self.up(x)))
        if self.kind == "swiglu":           # one C pass forward and backward in CPU training
            return self.down(swiglu(self.gate(x), self.up(x)))
        return self.down(F.gelu(self.gate(x)) * self.up(x))


#: per norm position, the attention and the MLP sublayer's norms: (before the sublayer, on its
#: branch before the residual add, after the residual add); None: none there
NORMS = {"pre": (("norm1", None, None), ("norm2", None, None)),
         "post": ((None, None, "norm1"), (None, None, "norm2")),
         "pre_post": (("norm1", None, "post1"), ("norm2", None, "post2")),
         "sandwich": (("norm1", "post1", None), ("norm2", "post2", None))}


def unchanged(h):
    return h


class Block(nn.Module):
    """Attention (or another token mixer of the ``model.attention`` registry) and the MLP around
    the residual stream, with the norms of ``cfg.norm_position`` (:data:`NORMS`)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.norm_position, self.layer_idx = cfg.norm_position, layer_idx
        lc = cfg.layer_config(layer_idx)              # model.layers' overrides for this block
        key = functools.partial(cfg._layer_key, layer_idx)  # model.x, or model.layers[i].x
        self.attn = built(f"attention kind '{lc.attention}' ({key('attention')}, "
                          f"{key('attention_kwargs')}={lc.attention_kwargs})", build_attention,
                          lc.attention, lc.attention_kwargs, **cfg.attention_args(layer_idx))
        self.mlp = MLP(cfg)
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        if cfg.norm_position in ("sandwich", "pre_post"):
            self.post1, self.post2 = make_norm(cfg), make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def norms(self, sublayer: int) -> tuple:
        """The (before, branch, after) norms of sublayer 0 (attention) or 1 (the MLP)."""
        return tuple(unchanged if name is None else getattr(self, name)
                     for name in NORMS[self.norm_position][sublayer])

    def forward(self, x, pos, posenc, *, plan: RowPlan | None = None, cache=None, key_pos=None):
        """x [B, T, D] -> [B, T, D]; under a ``plan`` (:class:`lengen.ops.rows.RowPlan`) x and
        the output are the needed tokens [N, D] when it packs, and the last block returns the
        kept rows only, [K, D]. Every op after attention acts on each token alone, so the kept
        rows are exactly those of the full block. ``cache``/``key_pos``: a cached decoding step
        (:mod:`lengen.model.cache`)."""
        plan = NO_ROWS if plan is None else plan.layer(self.layer_idx)     # this block's part
        before, branch, after = self.norms(0)                              # attention
        a = self.mix(before, x, pos, posenc, plan, cache, key_pos)    # [B, T, D], [N, D], [K, D]
        x = after(plan.kept(x) + self.drop(branch(a)))
        before, branch, after = self.norms(1)                              # the MLP
        return after(x + self.drop(branch(self.mlp(before(x)))))

    def mix(self, norm, x, pos, posenc, plan: RowPlan, cache, key_pos) -> torch.Tensor:
        """The attention sublayer on ``norm(x)``: the part of ``plan`` the kind declares it
        handles (:meth:`lengen.ops.rows.RowPlan.handled_by`) goes to it, and the block does the
        rest around it: it hands x rather than the token rows, unpacks x to [B, T, D] before and
        packs the output after, and takes the kept rows from the output."""
        own = plan.handled_by(self.attn)
        h = own.tokens.map(norm) if own.tokens is not None else norm(x)   # the first block's
        pads = plan.pack is not None and own.pack is None                # norm runs per entry
        if pads:
            h = plan.pack.unpack(h)                                         # [B, T, D]
        a = self.attn(h, pos, posenc, plan=own, cache=cache, key_pos=key_pos)
        if pads:
            a = plan.pack.pack(a)                                           # [N, D]
        return a if own.keep is not None else plan.kept(a)                  # [K, D] with keep
