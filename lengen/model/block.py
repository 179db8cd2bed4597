"""A transformer block and its parts: RMSNorm, the MLP, and the block that runs attention
and the MLP around the residual stream in one of four norm placements (pre, post, pre_post,
sandwich). :class:`lengen.model.transformer.Transformer` stacks them.

``Block.forward`` also carries the rows training leaves out or shares (``keep``: the last
block's kept rows; ``pack``: the needed tokens only; ``tokens``: the first block's input as one
row per vocabulary entry); each is exact up to fp32 rounding, and tests/test_keep.py and
tests/test_token_rows.py hold them to the batch-sized forward.
"""
from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention import build_attention
from lengen.model.config import ModelConfig
from lengen.ops.glu import swiglu
from lengen.ops.linear import Linear
from lengen.ops.norm import rms_norm
from lengen.registry import construct


#: (class, name) -> answer of takes_argument; a plain dict, not functools.lru_cache, which
#: torch.compile warns about when the compiled forward (train.compile) calls through it
_TAKES: dict = {}


def takes_argument(cls, name: str) -> bool:
    """Whether ``cls.forward`` has a parameter ``name`` (per class, once)."""
    key = (cls, name)
    if key not in _TAKES:
        _TAKES[key] = name in inspect.signature(cls.forward).parameters
    return _TAKES[key]


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


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.norm_position = cfg.norm_position
        self.attn = built(f"attention kind '{cfg.attention}' (model.attention, "
                          f"model.attention_kwargs={cfg.attention_kwargs})", build_attention,
                          cfg.attention, cfg.attention_kwargs, **cfg.attention_args(layer_idx))
        self.mlp = MLP(cfg)
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        if cfg.norm_position in ("sandwich", "pre_post"):
            self.post1, self.post2 = make_norm(cfg), make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    @property
    def attn_packs(self) -> bool:
        """Built-in kinds take packed rows (lengen.attention.base); a plugin's own forward may
        not (asked of the module's class each time: it may be replaced after building)."""
        return takes_argument(type(self.attn), "pack")

    @property
    def attn_takes_tokens(self) -> bool:
        """Whether the attention module's forward takes ``tokens=`` (a
        :class:`lengen.ops.token_rows.TokenRows` in place of x; built-in kinds do), asked of its
        class as :attr:`attn_packs` is."""
        return takes_argument(type(self.attn), "tokens")

    @property
    def attn_keeps(self) -> bool:
        """Whether the attention module's forward takes ``keep=`` (the rows to return; built-in
        kinds do, lengen.attention.base), asked of its class as :attr:`attn_packs` is."""
        return takes_argument(type(self.attn), "keep")

    def query_rows(self, keep, pack, x) -> dict:
        """``{"rows": bool [B, T]}``, attention's query rows whose outputs ``keep`` (indices into
        the rows of x flattened, packed by ``pack`` or not) keeps, so that a kind that can skips
        the others (:func:`lengen.attention.base.attends_rows`); ``{}`` without ``keep`` or for
        a plugin whose ``forward`` has no ``rows``."""
        if keep is None or not takes_argument(type(self.attn), "rows"):
            return {}
        B, T = (pack.B, pack.T) if pack is not None else x.shape[:2]
        flat = keep if pack is None else pack.index.index_select(0, keep)      # into [B * T]
        rows = torch.zeros(B * T, dtype=torch.bool, device=keep.device)
        return {"rows": rows.index_fill_(0, flat, True).view(B, T)}

    def forward(self, x, pos, posenc, cache=None, key_pos=None, keep=None, pack=None,
                tokens=None):
        """x [B, T, D] -> [B, T, D]. ``pack`` (:class:`lengen.ops.packing.Packing`): x holds
        the batch's needed tokens only, [N, D], and so does the output; ``keep`` (indices into
        the rows of x flattened to [-1, D]): the output is those rows only, [K, D]. Attention
        runs over every token (all are keys); rows are dropped in it before its output
        projection (a kind whose forward takes ``keep``, as the built-in ones) or after it, so
        the MLP and the norms run on the kept rows. Every op after attention acts on each token alone, hence
        the kept rows are exactly those of the full block; a kind that can skips the other query
        rows (:meth:`query_rows`). ``tokens`` (a :class:`lengen.ops.token_rows.TokenRows`
        whose rows are x): the first block's input as one row per vocabulary entry, so the
        norm before attention and attention's q, k, v projection run per entry (a kind whose
        forward takes ``tokens``, as the built-in ones; the others get x)."""
        D = x.shape[-1]
        if tokens is not None and not (self.attn_takes_tokens
                                       and (pack is None or self.attn_packs)):
            tokens = None                  # a plugin kind without them: it gets x, as before

        def rows(h):                                                # [K, D]
            return h if keep is None else h.reshape(-1, D).index_select(0, keep)

        def attn(norm):
            """The attention sublayer on norm(x) (norm None: on x itself)."""
            # a kind that takes keep (the built-in ones) selects the kept rows itself, before
            # its output projection; the others' rows are taken from their output
            own = keep is not None and self.attn_keeps
            sel = {"keep": keep} if own else {}
            if tokens is not None:           # the first block: the norm runs per table row
                h, sel["tokens"] = None, tokens if norm is None else tokens.map(norm)
            else:
                h = x if norm is None else norm(x)
            if pack is None:
                a = self.attn(h, pos, posenc, cache=cache, key_pos=key_pos, **sel,
                              **self.query_rows(keep, None, x))
            elif self.attn_packs:
                a = self.attn(h, pos, posenc, pack=pack, **sel, **self.query_rows(keep, pack, x))
            else:                          # a kind whose forward predates packing: pad around it
                return rows(pack.pack(self.attn(pack.unpack(h), pos, posenc)))
            return a if own else rows(a)

        if self.norm_position == "pre":
            x = rows(x) + self.drop(attn(self.norm1))
            return x + self.drop(self.mlp(self.norm2(x)))
        if self.norm_position == "post":
            x = self.norm1(rows(x) + self.drop(attn(None)))
            return self.norm2(x + self.drop(self.mlp(x)))
        if self.norm_position == "pre_post":
            x = self.post1(rows(x) + self.drop(attn(self.norm1)))
            return self.post2(x + self.drop(self.mlp(self.norm2(x))))
        x = rows(x) + self.drop(self.post1(attn(self.norm1)))                   # sandwich
        return x + self.drop(self.post2(self.mlp(self.norm2(x))))
