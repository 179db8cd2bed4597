"""``Transformer.forward(..., keep=)``: the logits of the kept positions only, the last block's
MLP, the final norm and the head run on those rows alone. The full forward is the reference:
values and gradients must agree for every attention kind and norm position, and training's
``forward_loss`` must give the same loss and gradients with and without it."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.errors import ArgumentError
from lengen.model import ModelConfig, Transformer
from tiny_models import nontrivial, with_attention
from lengen.ops import fused_rows, rows
from lengen.ops.packing import Packing, needed_tokens
from lengen.ops.rows import PACK_SHARE, plan_rows
from lengen.posenc import POSENCS
from lengen.tasks.base import Batch
from lengen.train.step import SCORED_SHARE, forward_loss, scored_rows

V, B, T = 7, 3, 11
CLOSE = dict(atol=1e-5, rtol=1e-5)     # fp32: only the GEMMs' row blocking differs


def build(attention="softmax", posenc="rope", seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=2, posenc=posenc,
               attention=attention, dropout=0.0, init_std=0.3)
    cfg.update(overrides)
    # zero-initialised tables and gates -> nontrivial values
    model = nontrivial(Transformer(ModelConfig(**cfg)), seed + 1)
    return model


def posenc_for(attention):
    """RoPE, or NoPE for a token mixer (it reads no scheme acting inside attention)."""
    return "rope" if ATTENTIONS[attention].uses_posenc else "nope"


def some_keep(seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(B, T, generator=g) < 0.3
    keep[0, -1] = keep[1, 0] = True        # the last and the first position are both covered
    keep[2] = False                        # and a row keeping nothing
    return keep


def agree(model, keep, **kw):
    """Values and parameter gradients of forward(keep=) against forward()[keep]."""
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(T, dtype=torch.float32)
    w = torch.randn(int(keep.sum()), V, generator=torch.Generator().manual_seed(4))
    ref, fast = model, copy.deepcopy(model)
    full = ref(tokens, pos, **kw)[keep]                             # [N, V]
    part = fast(tokens, pos, keep=keep, **kw)                      # [N, V]
    torch.testing.assert_close(part, full, **CLOSE)
    (full * w).sum().backward()
    (part * w).sum().backward()
    for (name, a), b in zip(ref.named_parameters(), fast.parameters()):
        if a.grad is None:
            assert b.grad is None or not b.grad.any(), name
            continue
        torch.testing.assert_close(b.grad, a.grad, **CLOSE, msg=name)


@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_every_attention_kind(attention):
    """A registry contract: each kind's output is one row per query, so dropping rows after it
    is exact (n_heads 4 for Diff's head pairs)."""
    agree(build(attention, posenc_for(attention), n_heads=4), some_keep())


@pytest.mark.parametrize("posenc", sorted(POSENCS))
def test_every_positional_scheme(posenc):
    """A registry contract too: rotations, biases, embeddings and XL's relative term all act on
    the padded layout, before the rows are packed or dropped."""
    agree(build("softmax", posenc=posenc), some_keep(5))


@pytest.mark.parametrize("norm_position", ["pre", "post", "pre_post", "sandwich"])
def test_every_norm_position(norm_position):
    agree(build(norm_position=norm_position, posenc="t5"), some_keep(1))


def test_encoder_and_one_layer():
    agree(build(causal=False, n_layers=1, posenc="learned"), some_keep(2))


def test_needed_tokens_and_packing():
    keep = torch.tensor([[False, True, False, False],
                         [False, False, False, False],
                         [True, False, False, True]])
    needed = needed_tokens(keep)
    assert needed.tolist() == [[True, True, False, False], [False] * 4, [True] * 4]
    pack = Packing(needed)
    x = torch.arange(3 * 4 * 2, dtype=torch.float32).view(3, 4, 2)
    assert pack.pack(x).tolist() == x[needed].tolist()
    back = pack.unpack(pack.pack(x))
    assert back[needed].tolist() == x[needed].tolist() and not back[~needed].any()
    assert pack.pack(x)[pack.rows_of(keep)].tolist() == x[keep].tolist()


def test_the_causal_model_runs_packed():
    """some_keep leaves most of its rows' ends unneeded: the blocks run on the needed tokens
    (the agreement tests above then compare the packed path with the padded one)."""
    keep = some_keep()
    pack, rows = plan_rows(keep, causal=True)
    assert pack is not None and pack.n < PACK_SHARE * keep.numel()
    assert plan_rows(keep, causal=False)[0] is None                # an encoder needs every token
    full = torch.zeros_like(keep)
    full[:, -1] = True                                             # flip-flop: the last is scored
    assert plan_rows(full, causal=True)[0] is None


def test_a_kind_without_packing_is_padded_around():
    """A plugin kind that declares ``supports_packing = False``: the block unpacks around it
    (it sees [B, T, D] rows and no packing, and returns them), same result."""
    from lengen.attention.softmax import SoftmaxAttention

    seen = []

    class Unpacked(SoftmaxAttention):
        supports_packing = False

        def forward(self, x, pos, posenc, *, plan=None, cache=None, key_pos=None):
            seen.append((len(x.shape), plan.pack, plan.keep))
            return super().forward(x, pos, posenc, plan=plan, cache=cache, key_pos=key_pos)

    keep = some_keep()
    assert plan_rows(keep, causal=True)[0] is not None                  # the model packs
    agree(with_attention(build(), Unpacked), keep)
    assert seen and all(s == (3, None, None) for s in seen)


def test_keep_everything_and_nothing():
    model = build()
    agree(model, torch.ones(B, T, dtype=torch.bool))
    out = model(torch.zeros(B, T, dtype=torch.long), keep=torch.zeros(B, T, dtype=torch.bool))
    assert out.shape == (0, V)


@pytest.mark.parametrize("keep, msg", [
    (torch.ones(B, T), "bool tensor"),
    (torch.ones(B, T + 1, dtype=torch.bool), r"\[3, 11\]"),
    ([[True] * T] * B, "list"),
])
def test_bad_keep(keep, msg):
    with pytest.raises(ArgumentError, match=msg):
        build()(torch.zeros(B, T, dtype=torch.long), keep=keep)


def test_keep_on_another_device_is_refused():
    with pytest.raises(ArgumentError, match="meta"):
        build()(torch.zeros(B, T, dtype=torch.long),
                keep=torch.ones(B, T, dtype=torch.bool, device="meta"))


def test_keep_with_cache_is_refused():
    model = build()
    with pytest.raises(ArgumentError, match="cache"):
        model(torch.zeros(B, T, dtype=torch.long), torch.arange(T, dtype=torch.float32),
              cache=model.new_cache(), keep=torch.ones(B, T, dtype=torch.bool))


@dataclasses.dataclass
class _TC:
    precision: str = "fp32"
    compile: bool = False


def a_batch(share):
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask.view(-1)[: round(share * B * T)] = True
    return Batch(inputs, targets, mask, mask.clone())


@pytest.mark.parametrize("out_slice", [None, slice(2, 6)])
def test_forward_loss_same_with_and_without_keep(out_slice):
    """Training's loss: the same value and gradients whether the model is asked for the scored
    tokens' logits only (the default for lengen's Transformer) or for all of them."""
    batch = a_batch(0.3)
    if out_slice is not None:
        batch.targets = torch.where(batch.loss_mask, 2 + batch.targets % 4, batch.targets)
    model = build(posenc="t5")
    slow = copy.deepcopy(model)
    slow.__class__ = type("FullForward", (Transformer,), {"supports_keep": False})
    pos = torch.arange(T, dtype=torch.float32)
    assert scored_rows(model, batch, _TC()) is batch.loss_mask
    assert scored_rows(slow, batch, _TC()) is None
    grads = []
    for m in (slow, model):
        loss = forward_loss(m, batch, pos, _TC(), torch.device("cpu"), out_slice)
        loss.backward()
        grads.append((loss.detach(), [p.grad for p in m.parameters()]))
    torch.testing.assert_close(grads[1][0], grads[0][0], **CLOSE)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(b, a, **CLOSE)


def test_when_training_asks_for_the_scored_rows():
    model, tc = build(), _TC()
    assert scored_rows(model, a_batch(0.3), tc) is not None
    assert scored_rows(model, a_batch(SCORED_SHARE + 0.1), tc) is None      # little to save
    assert scored_rows(model, a_batch(0.3), _TC(compile=True)) is None     # dynamic row count
    assert scored_rows(build(dropout=0.1), a_batch(0.3), tc) is None        # same random path

    class Wrapped(torch.nn.Module):                                        # DDP's .module
        def __init__(self, module):
            super().__init__()
            self.module = module
    assert scored_rows(Wrapped(model), a_batch(0.3), tc) is not None
    assert scored_rows(torch.nn.Linear(2, 2), a_batch(0.3), tc) is None    # a model without it

    class OwnForward(Transformer):                       # a subclass whose forward has no keep
        supports_keep = False

        def forward(self, tokens, positions=None):
            return super().forward(tokens, positions)
    own = OwnForward(model.cfg)
    assert scored_rows(own, a_batch(0.3), tc) is None
    forward_loss(own, a_batch(0.3), None, tc, torch.device("cpu"), None)   # trains, full forward


@pytest.mark.skipif(fused_rows.kernels() is None,
                    reason="no C compiler: the ops use their tiled path")
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("attention", ["softmax", "fot", "tra", "cope", "diff"])
def test_the_last_block_skips_the_rows_it_drops(attention, packed, monkeypatch):
    """The kinds on the C kernel get the kept tokens as its query ``rows`` in the last block
    only, packed (some_keep leaves most rows' ends unneeded) or not (no packing allowed), and
    the result stays the full forward's (``agree``)."""
    if not packed:
        monkeypatch.setattr(rows, "PACK_SHARE", 0.0)
    seen = []
    real = fused_rows._FusedRows.apply
    monkeypatch.setattr(fused_rows._FusedRows, "apply",
                        lambda *a: seen.append(a[-1]) or real(*a))
    posenc = "nope" if attention in ("fot", "tra", "cope") else "rope"
    keep = some_keep()
    assert (plan_rows(keep, causal=True)[0] is not None) == packed
    agree(build(attention, posenc), keep)
    calls = len(seen) // 2                                      # the reference ran first
    assert all(r is None for r in seen[:calls] + seen[calls:-1])
    assert torch.equal(seen[-1], keep)


def test_a_kind_without_query_rows_gets_none(monkeypatch):
    """A plugin kind that declares ``supports_query_rows = False``: the block's rows never
    reach its ``attend``, same result."""
    from lengen.attention.softmax import SoftmaxAttention

    class AllRows(SoftmaxAttention):
        supports_query_rows = False

    seen = []
    real = fused_rows._FusedRows.apply
    monkeypatch.setattr(fused_rows._FusedRows, "apply",
                        lambda *a: seen.append(a[-1]) or real(*a))
    model = with_attention(build(), AllRows)
    agree(model, some_keep())
    assert seen or fused_rows.kernels() is None                  # the C kernel ran
    assert all(r is None for r in seen)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("attention", sorted(a for a, c in ATTENTIONS.items()
                                              if c.supports_keep))      # the others: below
def test_the_last_output_projection_runs_on_the_kept_rows(attention, packed, monkeypatch):
    """Built-in kinds take ``keep`` and select the kept rows before their output projection:
    the last block's ``proj`` sees K rows (the others the full batch), and the result stays the
    full forward's (``agree``)."""
    if not packed:
        monkeypatch.setattr(rows, "PACK_SHARE", 0.0)
    posenc = "nope" if attention in ("fot", "tra", "cope") else "rope"
    model = build(attention, posenc)
    keep = some_keep()
    seen = []
    for i, block in enumerate(model.blocks):
        block.attn.proj.register_forward_hook(
            lambda m, args, out, i=i: seen.append((i, args[0].shape[0])))
    agree(model, keep)
    last = [n for i, n in seen if i == len(model.blocks) - 1]
    assert last[-1] == int(keep.sum())                  # the keep call's last block: K rows


def test_a_kind_without_keep_has_its_rows_taken_after_it():
    """A plugin kind that declares ``supports_keep = False``: it returns every row and the block
    selects the kept ones from its output, same result."""
    from lengen.attention.softmax import SoftmaxAttention

    class NoKeep(SoftmaxAttention):
        supports_keep = False

    model = with_attention(build(), NoKeep)
    seen = []
    model.blocks[-1].attn.proj.register_forward_hook(
        lambda m, args, out: seen.append(args[0].shape[0]))
    keep = some_keep()
    agree(model, keep)
    assert plan_rows(keep, causal=True)[0].n == seen[-1] > int(keep.sum())   # every packed row


def test_a_token_mixer_without_any_of_it():
    """A token mixer (a :class:`lengen.attention.mixer.TokenMixer`: every ``supports_*`` False,
    its own forward): it gets the [B, T, D] rows and an empty plan, and the model's kept logits
    are still the full forward's (here a causal mean over the keys, which has no q, k, v)."""
    from lengen.attention.mixer import TokenMixer

    class CausalMean(TokenMixer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.proj = torch.nn.Linear(self.d_model, self.d_model, bias=False)

        def forward(self, x, pos, posenc, *, plan=None, cache=None, key_pos=None):
            assert x.dim() == 3 and plan.pack is plan.keep is plan.rows is plan.tokens is None
            n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
            return self.proj(x.cumsum(1) / n)                               # [B, T, D]

    model = build()
    for block in model.blocks:
        block.attn = CausalMean(d_model=model.cfg.d_model, n_heads=model.cfg.n_heads)
    agree(model, some_keep())
