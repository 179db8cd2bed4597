"""FIRE and KerpleLog inside every attention kind, with positions that take each of their bias
paths (identity: Toeplitz; randomized: distance table, and FIRE rows past L per pair; fractional:
per pair): the CPU training op (``auto``, which calls ``bias_fn(0, T)`` once) and the query-blocked
op (``lean``, which calls ``bias_fn(s, e)`` per block) give the outputs and gradients of the dense
reference (``naive``)."""
from __future__ import annotations

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.model import ModelConfig, Transformer
from lengen.samplers import RandomizedSampler

T, V = 23, 6


def positions(kind):
    if kind == "identity":
        return torch.arange(T, dtype=torch.float32)
    if kind == "randomized":
        return RandomizedSampler(4 * T).sample(T, training=True,
                                               generator=torch.Generator().manual_seed(0))
    return torch.arange(T, dtype=torch.float32) * 0.37 + 0.5


def build(posenc, attention, impl):
    torch.manual_seed(0)
    kw = {"L_init": 20.0} if posenc == "fire" else {}      # randomized rows past L for FIRE
    cfg = ModelConfig(vocab_size=V, d_model=16, n_layers=2, n_heads=2, posenc=posenc,
                      posenc_kwargs=kw, attention=attention, attn_impl=impl, attn_block_size=5,
                      init_std=0.3)
    return Transformer(cfg).double()


def run(model, tokens, pos, train):
    model.train(train)
    model.zero_grad(set_to_none=True)
    out = model(tokens, positions=pos)
    (out * torch.linspace(-1, 1, V, dtype=out.dtype)).sum().backward()
    return [out.detach()] + [p.grad.clone() if p.grad is not None else None
                             for p in model.parameters()]


@pytest.mark.parametrize("kind", ["identity", "randomized", "fractional"])
@pytest.mark.parametrize("attention", [a for a, c in ATTENTIONS.items()     # not token mixers
                                       if c.uses_posenc])
@pytest.mark.parametrize("posenc", ["fire", "kerple_log"])
def test_fast_and_lean_paths_equal_the_reference(posenc, attention, kind):
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    pos = positions(kind)
    want = run(build(posenc, attention, "naive"), tokens, pos, train=True)
    for impl, train in (("auto", True), ("lean", True)):
        got = run(build(posenc, attention, impl), tokens, pos, train=train)
        for i, (a, b) in enumerate(zip(got, want)):
            if b is None:
                assert a is None
                continue
            torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7,
                                       msg=lambda m: f"{impl} tensor {i}: {m}")
    # the scheme's own parameters got gradients (the bias reached the logits)
    model = build(posenc, attention, "auto")
    run(model, tokens, pos, train=True)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.posenc.parameters())
