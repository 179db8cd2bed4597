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
