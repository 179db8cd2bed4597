"""Per-sequence positions ``[B, T]`` on every positional scheme x attention kind x path.

For each combination, in a tiny float64 model (one layer):

* ``[B, T]`` with equal rows gives the ``[T]`` result: logits and every parameter gradient, for an
  integer progression (where T5 / Transformer-XL take their shared-position fast paths and the
  per-sequence input takes the general ones) and for fractional or randomized positions;
* different rows give, per row, what running that row alone with its own ``[T]`` positions
  gives (logits), and the batch's gradients are the sum of the rows' gradients (so a
  ``[B, H, T, T]`` bias gradient is reduced correctly on every path);
* rows are independent: changing row 1's positions leaves row 0's logits unchanged (and, for
  schemes that read positions, does change row 1's);
* causality holds with ``[B, T]`` positions.

Paths: ``naive`` (dense references), ``lean`` (query-blocked ops, eval mode), ``fast`` (training
on CPU with ``impl=auto``: the tiled ``fast_cpu`` ops, SDPA where there is no bias) and
``triton`` (the fused TRA / FoT kernels under Triton's CPU interpreter, float32, schemes without
a bias: positions never enter the kernels, RoPE rotates q and k before them). Encoders
(``causal=False``) for the kinds defined without a causal window (softmax, diff), including
ALiBi's encoder-asymmetric variant. T = 1, 63, 111.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")     # before triton is first imported (as there)

import pytest  # noqa: E402
import torch  # noqa: E402

from lengen.attention import ATTENTIONS  # noqa: E402
from lengen.model import ModelConfig, Transformer  # noqa: E402
from lengen.model.config import combines  # noqa: E402
from lengen.posenc import POSENCS  # noqa: E402

V = 7
# scheme id -> (posenc, posenc_kwargs); xl's table and trig paths forced as well as its auto choice
SCHEMES = {
    "nope": ("nope", {}), "learned": ("learned", {}), "sincos": ("sincos", {}),
    "rope": ("rope", {}), "alibi": ("alibi", {}), "t5": ("t5", {}), "xl": ("xl", {}),
    "xl-table": ("xl", {"path": "table"}), "xl-trig": ("xl", {"path": "trig"}),
}
ENCODER_SCHEMES = dict(SCHEMES, **{"alibi-asym": ("alibi", {"encoder_asymmetric": True})})
ENCODER_KINDS = [a for a, cls in ATTENTIONS.items() if not cls.requires_causal]
PATHS = ("naive", "lean", "fast")
BIAS_FREE = ("nope", "learned", "sincos", "rope")
TRITON_KINDS = ("tra", "fot")

# a token mixer runs only with the schemes acting outside attention (lengen.model.config.combines)
CONFIGS = ([(s, a, True) for a in ATTENTIONS for s in SCHEMES
            if combines(ATTENTIONS[a], POSENCS[SCHEMES[s][0]])]
           + [(s, a, False) for a in ENCODER_KINDS for s in ENCODER_SCHEMES])
# xl's forced table / trig paths change only how the hook computes its [B, H, tq, Tk] bias, which
# every op path then consumes alike: they run on the naive path, xl's auto choice on all paths
GRID = [(s, a, c, p) for s, a, c in CONFIGS for p in PATHS
        if p == "naive" or s not in ("xl-table", "xl-trig")]
IDS = [f"{s}-{a}-{'dec' if c else 'enc'}-{p}" for s, a, c, p in GRID]
LENGTHS = (1, 63, 111)
# the interpreter runs a kernel ~100x slower than the CPU ops: RoPE (the one bias-free scheme that
# changes q and k) at the odd lengths, the embedding schemes at one length spanning two tiles
TRITON_GRID = ([("rope", a, T) for a in TRITON_KINDS for T in (1, 63)]
               + [(s, a, 17) for a in TRITON_KINDS for s in BIAS_FREE if s != "rope"])


def build(scheme, attention, causal, path, seed=0):
    posenc, kw = ENCODER_SCHEMES[scheme]
    impl = {"naive": "naive", "lean": "lean"}.get(path, "auto")
    torch.manual_seed(seed)
    # one layer: every hook and op runs once per layer with the same positions, so a second
    # layer would repeat the same checks at twice the cost of this large grid
    model = Transformer(ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2,
                                    posenc=posenc, posenc_kwargs=dict(kw), attention=attention,
                                    causal=causal, attn_impl=impl, attn_block_size=16,
                                    init_std=0.3))
    with torch.no_grad():                 # zero-initialised tables and gates -> nontrivial values
        g = torch.Generator().manual_seed(seed + 1)
        for p in model.parameters():
            if p.numel() and not p.any():
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    model = model.float() if path == "triton" else model.double()
    return model.train(path in ("fast", "triton"))


@pytest.fixture
def triton_op(monkeypatch):
    """For the triton path: make impl='auto' train with the fused kernels on CPU tensors; returns
    the list that every kernel call appends to (so a test can see the kernels ran)."""
    calls = []

    def use(attention):
        pytest.importorskip("triton")
        import importlib

        kernel = getattr(importlib.import_module(f"lengen.ops.{attention}.triton"),
                         f"{attention}_attention_triton")

        def counted(*args, **kw):
            calls.append(attention)
            return kernel(*args, **kw)
        monkeypatch.setattr(ATTENTIONS[attention], "training_op",
                            lambda self, q, k, v, bias_fn, rows: counted)
        return calls
    return use


def tolerance(path):
    return dict(atol=1e-5, rtol=1e-4) if path == "triton" else dict(atol=1e-10, rtol=1e-8)


def positions(kind, T, dtype):
    """Row a: an integer progression (shifted identity); rows b: fractional or randomized."""
    if kind == "integer":
        p = torch.arange(T, dtype=torch.float64) + 3.0
    elif kind == "fractional":
        p = torch.arange(T, dtype=torch.float64) * 0.37 + 0.5
    else:                                  # randomized: a sorted subset of [0, 4T)
        g = torch.Generator().manual_seed(T)
        p = torch.randperm(4 * T, generator=g)[:T].sort().values.double()
    return p.to(dtype)


def second_kind(scheme, T):
    # xl's table path refuses fractional distances (tested in test_xl); T = 1 has no distances
    return "randomized" if scheme == "xl-table" or T == 111 else "fractional"


def run(model, tokens, pos, weight):
    """Logits and the gradient of every parameter for the loss sum(logits * weight)."""
    model.zero_grad(set_to_none=True)
    logits = model(tokens, pos)
    (logits * weight).sum().backward()
    grads = {n: (torch.zeros_like(p) if p.grad is None else p.grad.clone())
             for n, p in model.named_parameters()}
    return logits.detach(), grads


def assert_same(a, b, tol, what):
    (la, ga), (lb, gb) = a, b
    torch.testing.assert_close(la, lb, **tol, msg=lambda m: f"{what} logits: {m}")
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], **tol, msg=lambda m: f"{what} grad {n}: {m}")


def setup(scheme, attention, causal, path, T, triton_op=None):
    if path == "triton":
        triton_op(attention)
    model = build(scheme, attention, causal, path)
    dtype = next(model.parameters()).dtype
    g = torch.Generator().manual_seed(100 + T)
    tokens = torch.randint(0, V, (2, T), generator=g)
    weight = torch.randn(2, T, V, generator=g, dtype=torch.float64).to(dtype)
    pos_a = positions("integer", T, dtype)
    pos_b = positions(second_kind(scheme, T), T, dtype)
    return model, tokens, weight, pos_a, pos_b


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("scheme,attention,causal,path", GRID, ids=IDS)
def test_per_sequence_positions(scheme, attention, causal, path, T):
    check_per_sequence_positions(*setup(scheme, attention, causal, path, T), scheme, path)


@pytest.mark.parametrize("scheme,attention,T", TRITON_GRID)
def test_triton_path_per_sequence_positions(scheme, attention, T, triton_op):
    calls = triton_op(attention)
    model, tokens, weight, pos_a, pos_b = setup(scheme, attention, True, "triton", T, triton_op)
    check_per_sequence_positions(model, tokens, weight, pos_a, pos_b, scheme, "triton",
                                 both_kinds=False)
    assert calls, "the Triton kernels were not used"
    if T > 1:
        check_causal(model, tokens, torch.stack([pos_b, pos_a]), T // 2, "triton")


def check_per_sequence_positions(model, tokens, weight, pos_a, pos_b, scheme, path,
                                 both_kinds=True):
    T = tokens.shape[1]
    tol = tolerance(path)
    # [B, T] with equal rows == [T]: logits and every gradient
    for name, pos in (("a", pos_a), ("b", pos_b))[not both_kinds:]:
        assert_same(run(model, tokens, pos.expand(2, T).clone(), weight),
                    run(model, tokens, pos, weight), tol,
                    f"[B, T] with equal rows vs [T] (positions {name})")

    # different rows == each row alone with its own [T] positions; the loss sums over rows, so
    # the batch's gradients are the sum of the rows' gradients
    both = run(model, tokens, torch.stack([pos_a, pos_b]), weight)
    rows = [run(model, tokens[r:r + 1], p, weight[r:r + 1]) for r, p in enumerate((pos_a, pos_b))]
    want = (torch.cat([rows[0][0], rows[1][0]]),
            {n: rows[0][1][n] + rows[1][1][n] for n in rows[0][1]})
    assert_same(both, want, tol, "per-row positions vs each row alone")

    # rows are independent: other positions for row 1 leave row 0 alone
    with torch.no_grad():
        moved = model(tokens, torch.stack([pos_a, pos_b * 2.0 + 1.0]))
    torch.testing.assert_close(moved[0], both[0][0], **tol)
    if scheme != "nope" and T > 1:        # ... and do reach row 1 (the check is not vacuous)
        assert (moved[1] - both[0][1]).abs().max() > 1e-6


@pytest.mark.parametrize("scheme,attention,causal,path",
                         [g for g in GRID if g[2]], ids=[i for g, i in zip(GRID, IDS) if g[2]])
def test_causal_with_per_row_positions(scheme, attention, causal, path):
    model, tokens, _, pos_a, pos_b = setup(scheme, attention, causal, path, 24)
    check_causal(model, tokens, torch.stack([pos_b, pos_a]), 13, path)


def check_causal(model, tokens, pos, t, path):
    """Tokens after t changed: logits up to t unchanged, later ones changed."""
    T = tokens.shape[1]
    other = tokens.clone()
    other[:, t + 1:] = (tokens[:, t + 1:] + 1 + torch.randint(0, V - 1, (2, T - t - 1))) % V
    with torch.no_grad():
        a, b = model(tokens, pos), model(other, pos)
    torch.testing.assert_close(a[:, :t + 1], b[:, :t + 1], rtol=0,
                               atol=1e-6 if path == "triton" else 1e-12)
    assert (a[:, t + 1:] - b[:, t + 1:]).abs().max() > 1e-4
