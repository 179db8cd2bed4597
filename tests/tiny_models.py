"""Tiny models for tests that compare paths: ``nontrivial`` gives every parameter that its init
leaves at zero (T5 tables, gate biases, XL's content / position biases) a random value, so that
a term a path forgot would show."""
from __future__ import annotations

import torch


def nontrivial(model, seed: int = 0, scale: float = 0.3):
    """``model`` with its all-zero parameters drawn from N(0, scale^2) (generator seeded
    ``seed``); returns the model."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            if p.numel() and not p.any():
                p.copy_(scale * torch.randn(p.shape, generator=g))
    return model


def with_attention(model, cls):
    """``model`` with every block's attention replaced by a ``cls`` (a plugin kind's stand-in,
    built as the model's own: d_model and n_heads) holding the same weights; returns the model."""
    for block in model.blocks:
        own = cls(d_model=model.cfg.d_model, n_heads=model.cfg.n_heads)
        own.load_state_dict(block.attn.state_dict())
        block.attn = own
    return model
