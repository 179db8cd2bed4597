"""The transformer: a config, blocks, and a decoder/encoder, readable top to bottom.

Single-device and free of logging or config parsing; compile, mixed precision and DDP are applied
from outside. Positions are data: ``forward`` takes an explicit positions tensor, or draws one from
the configured sampler (``lengen.positions``), so randomized / interpolated positions compose with
every scheme. The positional scheme is one module shared by all layers (a scheme built with
``per_layer=True`` gets one instance per layer instead); attention modules call its hooks (see
``lengen.posenc.base``).

Decoder (``causal=True``): next-token logits at every position. Encoder (``causal=False``):
bidirectional attention; tasks append output placeholder tokens and read logits there.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention import build_attention
from lengen.model.config import ModelConfig
from lengen.positions import build_sampler
from lengen.posenc import build_posenc


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def make_norm(cfg: ModelConfig) -> nn.Module:
    return RMSNorm(cfg.d_model) if cfg.norm == "rms" else nn.LayerNorm(cfg.d_model)


class MLP(nn.Module):
    """SwiGLU / GeGLU (Shazeer 2020): down(act(gate(x)) * up(x)); or a plain ReLU MLP."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.mlp
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.mlp == "relu")
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False) if cfg.mlp != "relu" else None
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.mlp == "relu")

    def forward(self, x):
        if self.kind == "relu":
            return self.down(F.relu(self.up(x)))
        act = F.silu if self.kind == "swiglu" else F.gelu
        return self.down(act(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.norm_position = cfg.norm_position
        self.attn = build_attention(cfg.attention, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                    causal=cfg.causal, impl=cfg.attn_impl,
                                    block_size=cfg.attn_block_size, layer_idx=layer_idx,
                                    n_layers=cfg.n_layers, **cfg.attention_kwargs)
        self.mlp = MLP(cfg)
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        if cfg.norm_position in ("sandwich", "pre_post"):
            self.post1, self.post2 = make_norm(cfg), make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, pos, posenc):
        if self.norm_position == "pre":
            x = x + self.drop(self.attn(self.norm1(x), pos, posenc))
            return x + self.drop(self.mlp(self.norm2(x)))
        if self.norm_position == "post":
            x = self.norm1(x + self.drop(self.attn(x, pos, posenc)))
            return self.norm2(x + self.drop(self.mlp(x)))
        if self.norm_position == "pre_post":
            x = self.post1(x + self.drop(self.attn(self.norm1(x), pos, posenc)))
            return self.post2(x + self.drop(self.mlp(self.norm2(x))))
        x = x + self.drop(self.post1(self.attn(self.norm1(x), pos, posenc)))      # sandwich
        return x + self.drop(self.post2(self.mlp(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        def scheme():
            return build_posenc(cfg.posenc, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                head_dim=cfg.d_model // cfg.n_heads, causal=cfg.causal,
                                **cfg.posenc_kwargs)

        self.posenc = scheme()             # layer 0's scheme; its embed hook serves the model
        # a per-layer scheme: blocks 1.. get instances of their own (None: all share self.posenc)
        self.layer_posencs = (nn.ModuleList(scheme() for _ in range(cfg.n_layers - 1))
                              if self.posenc.per_layer else None)
        self.sampler = build_sampler(cfg.positions, **cfg.positions_kwargs)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm_f = make_norm(cfg) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for block in self.blocks:
            block.attn.reset_parameters()    # kind-specific inits (gate biases) after the generic one
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    def _init(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=self.cfg.init_std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=self.cfg.init_std)

    def check_length(self, length: int) -> None:
        """Raise ValueError now if inputs of ``length`` tokens cannot be encoded (e.g. a learned
        table that is too small), instead of failing, or silently clamping, mid-training."""
        self.posenc.check_positions(self.sampler.max_position(length))

    def sample_positions(self, length: int, device=None) -> torch.Tensor:
        return self.sampler.sample(length, training=self.training, device=device)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: [B, T] int64 -> logits [B, T, V]. positions: [T] float (default: sampler)."""
        B, T = tokens.shape
        pos = self.sample_positions(T, tokens.device) if positions is None else positions
        x = self.embed(tokens)                                   # [B, T, D]
        if self.cfg.embed_scale:
            x = x * math.sqrt(self.cfg.d_model)
        x = self.drop(self.posenc.embed(x, pos))
        for block, posenc in zip(self.blocks, self.block_posencs()):
            x = block(x, pos, posenc)
        return self.head(self.norm_f(x))                         # [B, T, V]

    def block_posencs(self) -> list:
        """The positional scheme each block uses, in order."""
        if self.layer_posencs is None:
            return [self.posenc] * len(self.blocks)
        return [self.posenc, *self.layer_posencs]

    def record_attention(self, on: bool = True) -> None:
        """Make every attention layer keep its last weights ([B, H, T, T]) in ``last_weights``."""
        for block in self.blocks:
            block.attn.record_weights = on
            block.attn.last_weights = None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
