"""The first block's input as a table with one row per vocabulary entry (lengen.ops.token_rows):
the batch-sized computation (``LENGEN_TOKEN_ROWS=0``) is the reference. Values and every
parameter's gradient must agree for each attention kind, norm position and positional scheme,
packed or not; the path must be taken where the input is a function of the token alone, and
never where it is not (positions added, dropout drawn, evaluation, a large vocabulary, a kind
whose forward has no ``tokens``)."""
from __future__ import annotations

import copy

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.model import ModelConfig, Transformer
from lengen.ops import token_rows
from lengen.ops.token_rows import TokenRows
from lengen.posenc import POSENCS
from tiny_models import nontrivial, with_attention

V, B, T = 5, 3, 13
CLOSE = dict(atol=1e-5, rtol=1e-5)     # fp32: products over V rows against B * T rows


def build(attention="softmax", posenc="rope", seed=0, dtype=torch.float32, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=2, posenc=posenc,
               attention=attention, dropout=0.0, init_std=0.3)
    cfg.update(overrides)
    return nontrivial(Transformer(ModelConfig(**cfg)), seed + 1).to(dtype)


def first_qkv_rows(model):
    """Record the rows the first block's q, k, v projection sees, per call."""
    seen = []
    model.blocks[0].attn.qkv.register_forward_hook(lambda m, a, out: seen.append(a[0].shape))
    return seen


def agree(model, monkeypatch, keep=None, close=CLOSE, expect_table=True):
    """Loss-like sums and parameter gradients with the path on and off."""
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(T, dtype=torch.float32)
    ref, fast = model, copy.deepcopy(model)
    seen = first_qkv_rows(fast)
    monkeypatch.setenv(token_rows.SWITCH, "0")
    out_ref = ref(tokens, pos, keep=keep)
    monkeypatch.setenv(token_rows.SWITCH, "1")
    out_fast = fast(tokens, pos, keep=keep)
    assert seen and (seen[0][0] == V) == expect_table, seen    # the table: V rows
    torch.testing.assert_close(out_fast, out_ref, **close)
    w = torch.randn(out_ref.shape, generator=torch.Generator().manual_seed(4),
                    dtype=out_ref.dtype)
    (out_ref * w).sum().backward()
    (out_fast * w).sum().backward()
    for (name, a), b in zip(ref.named_parameters(), fast.parameters()):
        if a.grad is None:
            assert b.grad is None or not b.grad.any(), name
            continue
        torch.testing.assert_close(b.grad, a.grad, **close, msg=name)


def test_the_rows_and_their_gradient():
    """full() is table[ids] for any shape of ids; its backward sums into the table rows."""
    table = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[0, 3, 3], [1, 0, 3]])
    rows = TokenRows(table, ids)
    assert rows.shape == (2, 3, 3)
    torch.testing.assert_close(rows.full(), table.detach()[ids])
    g = torch.randn(2, 3, 3, dtype=torch.float64)
    rows.full().backward(g)
    ref = torch.zeros(4, 3, dtype=torch.float64).index_put_((ids,), g, accumulate=True)
    torch.testing.assert_close(table.grad, ref)
    doubled = rows.map(lambda t: 2 * t)
    torch.testing.assert_close(doubled.full(), 2 * table.detach()[ids])
    assert doubled.ids is ids


@pytest.mark.parametrize("attention", sorted(a for a, c in ATTENTIONS.items()
                                              if c.supports_token_rows))  # not token mixers
def test_every_attention_kind(attention, monkeypatch):
    """A registry contract: every built-in kind takes ``tokens`` (FoT's and TRA's gates read
    the gathered rows), with the same values and gradients (n_heads 4 for Diff's head pairs)."""
    posenc = "nope" if attention in ("fot", "tra", "cope") else "rope"
    agree(build(attention, posenc, n_heads=4), monkeypatch)


@pytest.mark.parametrize("posenc", sorted(POSENCS))
def test_every_positional_scheme(posenc, monkeypatch):
    """Schemes that act inside attention keep the path; a scheme that adds to the embeddings
    makes the input depend on the position, and the batch is projected as before."""
    model = build("softmax", posenc)
    agree(model, monkeypatch, expect_table=not model.posenc.adds_embedding)


@pytest.mark.parametrize("norm_position", ["pre", "post", "pre_post", "sandwich"])
def test_every_norm_position(norm_position, monkeypatch):
    """The norm before attention runs on the table; post-norm projects the embeddings."""
    agree(build(norm_position=norm_position, posenc="t5"), monkeypatch)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("attention", ["softmax", "fot", "tra"])
def test_with_kept_rows_packed_or_not(attention, packed, monkeypatch):
    """With ``keep`` (training's scored rows) the ids are packed with the rows."""
    from lengen.ops import rows
    if not packed:
        monkeypatch.setattr(rows, "PACK_SHARE", 0.0)
    keep = torch.rand(B, T, generator=torch.Generator().manual_seed(7)) < 0.3
    keep[0, 4] = True
    keep[1, :] = False
    posenc = "nope" if attention != "softmax" else "rope"
    agree(build(attention, posenc), monkeypatch, keep=keep)


@pytest.mark.parametrize("case", ["layer norm", "tied embeddings", "encoder", "one layer"])
def test_other_model_shapes(case, monkeypatch):
    """LayerNorm runs on the table as RMSNorm does; tied embeddings get the table's gradient
    with the head's; an encoder's first block is the same; with one layer the first block is the
    last, and keeps its scored rows (packed)."""
    kw = {"layer norm": {"norm": "layer"}, "tied embeddings": {"tie_embeddings": True},
          "encoder": {"causal": False}, "one layer": {"n_layers": 1}}[case]
    keep = None
    if case == "one layer":
        keep = torch.zeros(B, T, dtype=torch.bool)
        keep[0, 5] = keep[2, 9] = True
    agree(build(**kw), monkeypatch, keep=keep)


def test_dropout_inside_the_blocks_keeps_the_path(monkeypatch):
    """Dropout after the blocks' sublayers (not on the embeddings): the path is taken, and with
    the same seed it draws the same masks over the same rows."""
    model = build(dropout=0.2, embed_dropout="with_pe", posenc="nope")
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(T, dtype=torch.float32)
    seen = first_qkv_rows(model)
    out = {}
    for on in ("0", "1"):
        monkeypatch.setenv(token_rows.SWITCH, on)
        torch.manual_seed(11)
        out[on] = model(tokens, pos)
    assert seen[1][0] == V and seen[0][:2] == (B, T)
    torch.testing.assert_close(out["1"], out["0"], **CLOSE)


def test_a_kind_with_tokens_but_without_pack_gets_x(monkeypatch):
    """A plugin kind that declares ``supports_packing = False`` (and takes token rows) is padded
    around by the block, and then handed x (the table cannot be padded)."""
    from lengen.attention.softmax import SoftmaxAttention

    class NoPack(SoftmaxAttention):
        supports_packing = False

    model = with_attention(build(), NoPack)
    keep = torch.zeros(B, T, dtype=torch.bool)
    keep[:, 6] = True                                   # packed: the rows after 6 are not needed
    agree(model, monkeypatch, keep=keep, expect_table=False)


def test_float64_and_embed_scale(monkeypatch):
    """In float64 the two paths agree to its rounding; embed_scale multiplies the table."""
    agree(build(embed_scale=True, dtype=torch.float64), monkeypatch,
          close=dict(atol=1e-12, rtol=1e-12))


@pytest.mark.parametrize("case", ["eval", "dropout", "large vocabulary", "one layer"])
def test_where_it_is_taken(case, monkeypatch):
    """Not in evaluation (its numbers stay the batch-sized ones), not with embedding dropout
    drawn, not when the vocabulary has more than half as many entries as the batch has rows;
    a one-layer model still has a first block."""
    monkeypatch.setenv(token_rows.SWITCH, "1")
    kw = {"dropout": {"dropout": 0.1, "embed_dropout": "always"},
          "large vocabulary": {"vocab_size": B * T}, "one layer": {"n_layers": 1}}.get(case, {})
    model = build(**kw)
    if case == "eval":
        model.eval()
    seen = first_qkv_rows(model)
    model(torch.randint(0, V, (B, T)), torch.arange(T, dtype=torch.float32))
    assert (seen[0][0] == V) == (case == "one layer"), seen


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv(token_rows.SWITCH, "0")
    model = build()
    seen = first_qkv_rows(model)
    model(torch.randint(0, V, (B, T)), torch.arange(T, dtype=torch.float32))
    assert seen[0][:2] == (B, T)


def test_a_kind_without_tokens_gets_the_rows(monkeypatch):
    """A plugin kind that declares ``supports_token_rows = False``: it is handed x, same
    result."""
    from lengen.attention.softmax import SoftmaxAttention

    class NoTokens(SoftmaxAttention):
        supports_token_rows = False

    model = with_attention(build(), NoTokens)
    agree(model, monkeypatch, expect_table=False)


def compile_unavailable() -> str | None:
    """Why torch.compile cannot run here (tests/test_precision.py asks the same), or None."""
    import importlib

    from lengen.errors import ConfigError
    try:
        importlib.import_module("lengen.train.precision").check_compile("cpu")
    except ConfigError as e:
        return str(e)
    return None


@pytest.mark.slow
@pytest.mark.skipif(compile_unavailable() is not None, reason=compile_unavailable() or "")
def test_under_torch_compile(monkeypatch):
    """train.compile traces the table's path (FoT: its gate reads the gathered rows too): the
    compiled forward and gradients equal eager's, and the first projection saw V rows."""
    monkeypatch.setenv(token_rows.SWITCH, "1")
    model = build("fot", "nope", n_layers=1)
    compiled_copy = copy.deepcopy(model)
    seen = first_qkv_rows(compiled_copy)
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(T, dtype=torch.float32)
    ref = model(tokens, pos)
    out = torch.compile(compiled_copy)(tokens, pos)
    assert seen and seen[0][0] == V
    torch.testing.assert_close(out, ref, **CLOSE)
    ref.square().mean().backward()
    out.square().mean().backward()
    for (name, a), b in zip(model.named_parameters(), compiled_copy.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
