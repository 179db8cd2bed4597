"""Every C kernel against its fallback, end to end: one small training step of a model whose
forward and backward go through all the kernels lengen ships (RMSNorm, SwiGLU, the fused
attention rows, CoPE's rows) gives the same loss and gradients with the kernels, with
``LENGEN_C_KERNELS=0``, with no compiler and with a compiler that fails. Uses the ordinary kernel
cache, so the kernels other tests built are reused."""
from __future__ import annotations

import warnings

import pytest
import torch

from lengen.model import ModelConfig, Transformer
from lengen.ops import ckernels


def step():
    """Loss and every gradient of one forward / backward (float32, causal, CPU)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=11, d_model=32, n_layers=2, n_heads=2,
                                    mlp="swiglu", norm="rms", attention="cope",
                                    attention_kwargs={"npos": 9}, attn_block_size=16))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 11, (3, 45), generator=g)
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(ckernels, "_noted", True)          # no "compiling" note in the output
    monkeypatch.delenv("LENGEN_C_KERNELS", raising=False)
    monkeypatch.delenv("LENGEN_FUSED_ROWS", raising=False)
    ckernels.reset()
    yield monkeypatch
    ckernels.reset()


needs_compiler = pytest.mark.skipif(ckernels.compiler() is None,
                                    reason="no C compiler: no kernel to compare")


def kernels_used() -> set[str]:
    return {name for name, lib in ckernels._loaded.items() if lib is not None}


@needs_compiler
def test_the_steps_exercise_every_kernel(fresh):
    """With the fused attention rows (the default) and without them (CoPE's tiled path and its
    row kernel), the two steps below run every C file lengen ships."""
    step()
    used = kernels_used()
    fresh.setenv("LENGEN_FUSED_ROWS", "0")
    step()
    assert used | kernels_used() == {str(s) for s in ckernels.sources()}


@needs_compiler
@pytest.mark.parametrize("fused", ["fused_rows", "tiled"])
@pytest.mark.parametrize("fallback", ["switched_off", "no_compiler", "failed_build"])
def test_every_kernel_gives_the_fallbacks_numbers(fresh, fallback, fused, tmp_path):
    if fused == "tiled":
        fresh.setenv("LENGEN_FUSED_ROWS", "0")
    loss_c, grads_c = step()
    assert len(kernels_used()) >= 3                              # the kernels did run
    ckernels.reset()
    if fallback == "switched_off":
        fresh.setenv("LENGEN_C_KERNELS", "0")
    else:
        fresh.setenv("CC", "/nonexistent/cc" if fallback == "no_compiler" else "false")
        fresh.setenv("LENGEN_CACHE_DIR", str(tmp_path))           # nothing cached there
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # "unavailable": expected
        loss_t, grads_t = step()
    assert not kernels_used()                                    # no kernel ran
    torch.testing.assert_close(loss_t, loss_c, atol=1e-6, rtol=1e-5)
    for name in grads_c:
        torch.testing.assert_close(grads_t[name], grads_c[name], atol=1e-6, rtol=1e-4, msg=name)
