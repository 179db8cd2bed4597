"""Causality where TRA keeps no key for some queries: every positional scheme with a TRA layer
built so that whole rows are empty stays causal and finite, with finite gradients.

Causality and path agreement of every scheme x attention kind (x sampler) are contracts
(:mod:`lengen.contracts`), run on every registry entry by tests/test_contracts.py.
"""
from __future__ import annotations

import pytest
import torch

from lengen.model import ModelConfig, Transformer
from tiny_models import nontrivial
from lengen.posenc import POSENCS

V, T = 5, 12
EXACT = dict(atol=1e-6, rtol=0)       # masked futures contribute exact zeros; allow BLAS rounding


def build(posenc, attention, seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=2, posenc=posenc, attention=attention,
               dropout=0.0, init_std=0.3, attn_block_size=5)   # block 5: T=12 spans 3 blocks
    cfg.update(overrides)
    # zero-initialised tables and gates -> nontrivial values
    model = nontrivial(Transformer(ModelConfig(**cfg)), seed + 1)
    return model


# ---- TRA with query rows that keep no key ----------------------------------------------------
def tra_with_empty_rows(posenc):
    """A TRA model whose first layer has score S_ij = -c * s_i * s_j with s = +1 for tokens 0-2
    and -1 for tokens 3-4: a query keeps exactly the keys of the other group, so every row of a
    single-group prefix has no surviving key."""
    model = build(posenc, "tra")
    attn = model.blocks[0].attn
    d, hd = attn.d_model, attn.head_dim
    c = hd // 2 - 1          # RoPE's lowest-frequency channel pair: nearly unrotated over T=12
    with torch.no_grad():
        model.embed.weight[:, 0] = torch.tensor([5.0, 5.0, 5.0, -5.0, -5.0])  # sign of feature 0
        attn.qkv.weight[: 2 * d] = 0.0
        for h in range(attn.n_heads):
            attn.qkv.weight[h * hd + c, 0] = -1.0          # q_i = -x_i[0] e_c
            attn.qkv.weight[d + h * hd + c, 0] = 1.0       # k_j = +x_j[0] e_c
    return model


PREFIX = [0, 1, 2, 0, 1]        # rows 0..4 see only group-A keys -> empty; later rows are not


def empty_row_tokens(t, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, V, (2, T), generator=g)
    a[:, : len(PREFIX)] = torch.tensor(PREFIX)
    a[:, len(PREFIX)] = 3                                  # group B arrives at position 5
    b = a.clone()
    b[:, t + 1:] = (a[:, t + 1:] + torch.randint(1, V, (2, T - t - 1), generator=g)) % V
    return a, b


# PoPE's scores are sums of positive magnitudes (softplus) times cosines: the sign construction
# of tra_with_empty_rows cannot empty a row there
@pytest.mark.parametrize("posenc", [p for p in POSENCS if p != "pope"])
def test_tra_empty_rows_stay_causal_and_finite(posenc):
    model = tra_with_empty_rows(posenc)
    a, _ = empty_row_tokens(T - 2, 0)
    # the construction really produces empty rows (and only where intended)
    model.eval().record_attention(True)
    with torch.no_grad():
        model(a)
    rowsum = model.blocks[0].attn.last_weights.sum(-1)     # [B, H, T]
    model.record_attention(False)
    n = len(PREFIX)
    assert torch.equal(rowsum[..., :n], torch.zeros_like(rowsum[..., :n]))
    torch.testing.assert_close(rowsum[..., n:], torch.ones_like(rowsum[..., n:]))
    for mode in ("train", "eval"):
        model.train(mode == "train")
        for t in (2, n - 1, n, T - 2):                      # inside, at the end of, after the prefix
            x, y = empty_row_tokens(t, seed=t)
            with torch.no_grad():
                lx, ly = model(x), model(y)
            assert torch.isfinite(lx).all() and torch.isfinite(ly).all()
            torch.testing.assert_close(lx[:, : t + 1], ly[:, : t + 1], **EXACT)
    # gradients through empty rows are finite
    model.train()
    model.zero_grad()
    model(a).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
