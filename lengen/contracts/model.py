"""Contracts every positional scheme, attention kind and position sampler keeps inside a model.

Each contract builds a tiny model around the entry under test (with a partner of each other
kind: a scheme is run with every built-in attention kind, an attention kind with every built-in
scheme, a sampler with RoPE and softmax) and raises :class:`Failure` with the reason when the
entry breaks it. The test suite's registry grids (``tests/test_contracts.py``) and ``lengen
check`` call these same functions, so a built-in, a new file or a plugin is held to one
standard.

* ``causal``: in a decoder, outputs at positions <= t never depend on tokens after t, on the
  training path and on the evaluation path (and the later outputs do depend on them, so the
  check is not vacuous).
* ``paths_agree``: the evaluation path (query-blocked ``lean`` ops) equals the training reference
  (``naive``) on the same weights.
* ``batched_positions``: ``[B, T]`` positions with equal rows give the ``[T]`` result, logits and
  every parameter gradient, in float64, for fractional positions.
* ``dtype``: in a float64 model, every hook the entry has returns float64 (a hard-coded float32
  bias or embedding silently drops precision, and under half precision breaks the other way).
* ``generation``: greedy decoding with the incremental KV cache equals decoding by recomputing
  the whole sequence at every step, token for token, for prompts of mixed lengths.
* ``bad_kwargs``: an unknown keyword argument for the entry is refused before anything is built,
  naming the key and the valid ones.
"""
from __future__ import annotations

import torch

from lengen.config import resolve
from lengen.errors import ConfigError
from lengen.model import ModelConfig, Transformer

V = 7          # vocabulary of the toy models
T = 12         # sequence length of the toy models (3 query blocks of 5)


class Failure(AssertionError):
    """A contract the entry does not keep; the message says which and why."""


class Skip(Exception):
    """A contract that does not apply to this entry (the message says why)."""


def sampler_kwargs(name: str, vocab_size: int = V) -> dict:
    """Keyword arguments that build sampler ``name`` in a toy model over ``vocab_size`` ids:
    randomized ranges of 64; the interpolating ones (interpolate, warp) need M, the training
    length (10 tokens, so 20-token inputs are interpolated at evaluation); the token-structured
    ones (coupling, abacus) take the two highest ids as digits. Plugins get none."""
    if name == "identity":
        return {}
    if name in ("interpolate", "warp"):
        return {"train_length": 10}
    if name in ("coupling", "abacus"):
        return {"digit_ids": [vocab_size - 2, vocab_size - 1], "max_digits": 64}
    if name in ("randomized", "label"):
        return {"max_length": 64}
    return {}


def build(posenc="nope", attention="softmax", positions="identity", *, seed=0, causal=True,
          dtype=torch.float32, n_layers=2, **overrides) -> Transformer:
    """A tiny model (d_model 16, 2 heads, block size 5) whose zero-initialised tables and gates
    are replaced by random values, so every hook and gate changes the output."""
    torch.manual_seed(seed)
    n_layers = max(n_layers, len(overrides.get("layers", ())))   # every layer of a layout
    cfg = dict(vocab_size=V, d_model=16, n_layers=n_layers, n_heads=2, posenc=posenc,
               attention=attention, positions=positions, causal=causal, dropout=0.0,
               init_std=0.3, attn_block_size=5,
               positions_kwargs=overrides.pop("positions_kwargs", sampler_kwargs(positions)))
    cfg.update(overrides)
    model = Transformer(ModelConfig(**cfg))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for p in model.parameters():
            if p.numel() and not p.any():
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(dtype)


def _close(a, b, what, atol, rtol=0.0):
    if a.shape != b.shape:
        raise Failure(f"{what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}")
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise Failure(f"{what}: non-finite values")
    err = (a - b).abs().max().item() if a.numel() else 0.0
    if not torch.allclose(a, b, atol=atol, rtol=rtol):
        raise Failure(f"{what}: max difference {err:.3g} (tolerance {atol:g})")


def positions_for(model, tokens, seed=0):
    """The sampler's positions for ``tokens`` [B, T] (train or eval behaviour by the model's
    mode), drawn from a generator seeded with ``seed``: two calls with the same seed give the
    same draw, so a random sampler does not make two forwards differ."""
    B, n = tokens.shape
    return model.sample_positions(n, batch_size=B, generator=torch.Generator().manual_seed(seed),
                                  tokens=tokens, lengths=torch.full((B,), n))


# ---- the contracts ----------------------------------------------------------------------------

def causal(**combo) -> None:
    model = build(**combo)
    if not model.cfg.causal:
        raise Skip("an encoder is bidirectional by definition")
    g = torch.Generator().manual_seed(0)
    for mode in ("train", "eval"):
        model.train(mode == "train")
        for t in (0, 4, T - 2):
            a = torch.randint(0, V, (2, T), generator=g)
            b = a.clone()
            b[:, t + 1:] = (a[:, t + 1:] + torch.randint(1, V, (2, T - t - 1), generator=g)) % V
            with torch.no_grad():
                la = model(a, positions=positions_for(model, a))
                lb = model(b, positions=positions_for(model, b))
            _close(la[:, : t + 1], lb[:, : t + 1],
                   f"{mode} mode: logits at positions <= {t} changed with tokens after {t}", 1e-6,
                   1e-5)
            if (la[:, t + 1:] - lb[:, t + 1:]).abs().max() <= 1e-4:
                raise Failure(f"{mode} mode: tokens after {t} do not reach later outputs (the "
                              f"causality check would be vacuous)")


def paths_agree(**combo) -> None:
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(5))
    model = build(**combo).eval()                # impl=auto: train -> reference, eval -> lean
    pos = positions_for(model, tokens)           # the same positions on both paths
    with torch.no_grad():
        eval_logits = model(tokens, positions=pos)
        train_logits = model.train()(tokens, positions=pos)
    _close(eval_logits, train_logits, "evaluation path vs training path", 1e-5, 1e-5)
    naive, lean = build(**combo, attn_impl="naive"), build(**combo, attn_impl="lean")
    lean.load_state_dict(naive.state_dict())
    with torch.no_grad():
        _close(lean.eval()(tokens, positions=pos), naive.eval()(tokens, positions=pos),
               "lean vs naive ops", 1e-5, 1e-5)


def batched_positions(**combo) -> None:
    tokens = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(7))
    pos = torch.arange(T, dtype=torch.float64) * 0.37 + 0.5                     # [T]
    results = []
    for p in (pos, pos.expand(3, T)):                                           # [T], [B, T]
        model = build(**combo, dtype=torch.float64, n_layers=1, attn_impl="naive").train()
        try:
            logits = model(tokens, positions=p)
        except (ValueError, ConfigError) as e:
            raise Skip(f"fractional positions refused: {e}") from None
        logits.square().sum().backward()
        results.append((logits.detach(), {n: q.grad for n, q in model.named_parameters()
                                          if q.grad is not None}))
    (l1, g1), (l2, g2) = results
    _close(l2, l1, "[B, T] positions with equal rows vs [T]: logits", 1e-10, 1e-8)
    if set(g1) != set(g2):
        raise Failure(f"[B, T] vs [T]: different parameters get gradients: "
                      f"{sorted(set(g1) ^ set(g2))}")
    for n in g1:
        _close(g2[n], g1[n], f"[B, T] vs [T]: gradient of {n}", 1e-10, 1e-8)


def dtype(**combo) -> None:
    model = build(**combo, dtype=torch.float64).eval()
    seen = []

    def watch(module, _inputs, out):
        for o in (out if isinstance(out, tuple) else (out,)):
            if torch.is_tensor(o) and o.is_floating_point():
                seen.append((type(module).__name__, o.dtype))

    pe = model.posenc
    pos = torch.arange(T, dtype=torch.float64)
    q = k = torch.randn(1, 2, T, 8, dtype=torch.float64)
    with torch.no_grad():
        hooks = {"bias": lambda: pe.bias(pos, pos, q, k),
                 "embed": lambda: pe.embed(torch.zeros(1, T, 16, dtype=torch.float64), pos),
                 "rotate": lambda: pe.rotate(q, k, pos)}
        for hook, call in hooks.items():
            out = call()
            for o in (out if isinstance(out, tuple) else (out,)):
                if torch.is_tensor(o) and o.dtype != torch.float64:
                    raise Failure(f"positional hook '{hook}' of {type(pe).__name__} returns "
                                  f"{o.dtype} in a float64 model; compute in the input's dtype")
        handles = [m.register_forward_hook(watch) for m in model.modules()]
        try:
            logits = model(torch.randint(0, V, (2, T)))
        finally:
            for h in handles:
                h.remove()
    if logits.dtype != torch.float64:
        raise Failure(f"a float64 model returns {logits.dtype} logits")
    low = sorted({name for name, dt in seen if dt != torch.float64})
    if low:
        raise Failure(f"in a float64 model these modules return lower-precision tensors: "
                      f"{', '.join(low)}")


def generation(**combo) -> None:
    model = build(**combo, dtype=torch.float64).eval()
    if not model.cfg.causal:
        raise Skip("an encoder does not generate")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, V, (n,), generator=g) for n in (1, 4, 4, 9)]
    with torch.no_grad():       # a sampler random at evaluation draws the same from each seed
        cached = model.generate(prompts, 8, use_cache=True,
                                generator=torch.Generator().manual_seed(1))
        full = model.generate(prompts, 8, use_cache=False,
                              generator=torch.Generator().manual_seed(1))
    for i, (c, f) in enumerate(zip(cached, full)):
        if c.tolist() != f.tolist():
            raise Failure(f"prompt {i}: KV-cache decoding {c.tolist()} != recomputation "
                          f"{f.tolist()}")


def bad_kwargs(section: str, **combo) -> None:
    model = {"posenc": combo.get("posenc", "nope"), "attention": combo.get("attention", "softmax"),
             "positions": combo.get("positions", "identity"), "d_model": 16, "n_heads": 2,
             "n_layers": 1, f"{section}_kwargs": {"no_such_argument_xyz": 1}}
    try:
        resolve({"model": model, "task": {"name": "copy"}})
    except ConfigError as e:
        msg = str(e)
        if "no_such_argument_xyz" not in msg or f"model.{section}_kwargs" not in msg:
            raise Failure(f"the refusal of an unknown model.{section}_kwargs key does not name "
                          f"it: {msg}") from None
        return
    raise Failure(f"an unknown model.{section}_kwargs key was accepted")


#: contract name -> function(**combo); ``bad_kwargs`` also takes the kwargs section
MODEL_CONTRACTS = {
    "causal": causal,
    "paths_agree": paths_agree,
    "batched_positions": batched_positions,
    "dtype": dtype,
    "generation": generation,
    "bad_kwargs": bad_kwargs,
}
