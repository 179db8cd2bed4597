"""Generation with an incremental KV cache against full recomputation.

* The logits of every cached step (a prefill, a multi-token chunk, then one token at a time)
  equal one full forward of the dense reference path over the whole sequence, float64, for every
  attention kind x positional scheme, with the sampler's positions, explicit fractional ``[T]``
  positions and different ``[B, T]`` rows. (A full forward equals recomputing at each step, since
  later tokens never change earlier logits: tests/test_causality.py.)
* ``generate(use_cache=True)`` equals ``generate(use_cache=False)`` token for token, with prompts
  of mixed lengths in one call, with and without EOS.
* EOS handling, sampling (seeded reproducibility, top-k), eval mode, and the input checks.
"""
from __future__ import annotations

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.model import ModelConfig, Transformer
from lengen.model.config import combines
from tiny_models import nontrivial
from lengen.posenc import POSENCS

V = 7
# every pair the config does not refuse (lengen.model.config.pair_refusal)
GRID = [(a, p) for a in ATTENTIONS for p in POSENCS if combines(ATTENTIONS[a], POSENCS[p])]
IDS = [f"{a}-{p}" for a, p in GRID]
TIGHT = dict(atol=1e-10, rtol=1e-8)


def build(attention="softmax", posenc="rope", seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=2, attention=attention,
               posenc=posenc, init_std=0.3, attn_impl="naive", attn_block_size=4)
    cfg.update(overrides)
    # zero-initialised tables and gates -> nontrivial values
    model = nontrivial(Transformer(ModelConfig(**cfg)), seed + 1)
    return model.double().eval()


def make_positions(kind, B, T):
    g = torch.Generator().manual_seed(T)
    if kind == "sampler":
        return None
    if kind == "fractional":
        return torch.arange(T, dtype=torch.float64) * 0.37 + 0.5
    # per row: fractional steps in row 0, a sorted random subset of [0, 3T) in the others
    rows = [torch.arange(T, dtype=torch.float64) * 0.61 + 1.25]
    rows += [torch.randperm(3 * T, generator=g)[:T].sort().values.double() for _ in range(B - 1)]
    return torch.stack(rows)


POSITION_KINDS = ["sampler", "fractional", "per-row"]


@pytest.mark.parametrize("pos_kind", POSITION_KINDS)
@pytest.mark.parametrize("attention,posenc", GRID, ids=IDS)
def test_cached_step_logits_equal_full_recomputation(attention, posenc, pos_kind):
    model = build(attention, posenc)
    B, T = 3, 19
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    pos = make_positions(pos_kind, B, T)
    if pos is None:
        pos = model.sample_positions(T, batch_size=B)
    with torch.no_grad():
        full = model(tokens, pos)                                   # dense reference, [B, T, V]
        cache = model.new_cache(capacity=6)                         # grows past its capacity
        steps = [(0, 6), (6, 9)] + [(t, t + 1) for t in range(9, T)]   # prefill, chunk, tokens
        got = torch.cat([model(tokens[:, s:e], pos[..., s:e], cache=cache) for s, e in steps], 1)
    assert cache.length == T
    torch.testing.assert_close(got, full, **TIGHT)


# explicit shared fractional positions are covered step by step above; here the sampler's and
# per-row ones (fractional and randomized rows), with EOS on the per-row case
@pytest.mark.parametrize("pos_kind", ["sampler", "per-row"])
@pytest.mark.parametrize("attention,posenc", GRID, ids=IDS)
def test_generate_cached_equals_recomputed(attention, posenc, pos_kind):
    model = build(attention, posenc, attn_impl="auto")              # recomputation: eval lean path
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, V, (n,), generator=g) for n in (4, 1, 6, 4)]
    n_new = 9
    pos = make_positions(pos_kind, len(prompts), 6 + n_new)
    cached = model.generate(prompts, n_new, positions=pos)
    recomputed = model.generate(prompts, n_new, positions=pos, use_cache=False)
    assert [len(x) for x in cached] == [n_new] * 4
    for a, b in zip(cached, recomputed):
        assert torch.equal(a, b)
    if pos_kind != "per-row":
        return
    # with an EOS that some rows produce: they stop (and leave the batch), the others go on
    eos = int(cached[0][2])
    cached = model.generate(prompts, n_new, eos, positions=pos)
    recomputed = model.generate(prompts, n_new, eos, positions=pos, use_cache=False)
    assert len(cached[0]) <= 3
    for a, b in zip(cached, recomputed):
        assert torch.equal(a, b)


def test_positions_shared_then_per_sequence_in_one_cache():
    model = build("tra", "alibi")
    tokens = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(10, dtype=torch.float64) * 0.5
    with torch.no_grad():
        full = model(tokens, pos)
        cache = model.new_cache()
        first = model(tokens[:, :6], pos[:6], cache=cache)            # shared [T] history
        rest = model(tokens[:, 6:], pos[6:].expand(2, -1), cache=cache)   # then [B, T] rows
    torch.testing.assert_close(torch.cat([first, rest], 1), full, **TIGHT)


# ---- generation semantics ------------------------------------------------------------------------
def greedy_reference(model, prompt, n_new, eos_id=None):
    """Greedy decoding written out: append the argmax of the last logits, stop after EOS."""
    seq = prompt.clone()
    out = []
    with torch.no_grad():
        for _ in range(n_new):
            nxt = int(model(seq[None])[0, -1].argmax())
            out.append(nxt)
            seq = torch.cat([seq, torch.tensor([nxt])])
            if nxt == eos_id:
                break
    return torch.tensor(out, dtype=torch.long)


def test_greedy_and_eos_against_a_written_out_loop():
    model = build("fot", "rope")
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, V, (n,), generator=g) for n in (3, 7, 1, 3, 5)]
    free = model.generate(prompts, 12)
    for p, out in zip(prompts, free):
        assert torch.equal(out, greedy_reference(model, p, 12))
    eos = int(free[1][3])                                          # produced by row 1 at step 3
    stopped = model.generate(prompts, 12, eos_id=eos)
    for p, out, full in zip(prompts, stopped, free):
        assert torch.equal(out, greedy_reference(model, p, 12, eos))
        hits = (full == eos).nonzero()
        n = int(hits[0]) + 1 if len(hits) else 12                  # up to and including EOS
        assert torch.equal(out, full[:n])
    assert len(stopped[1]) <= 4 and stopped[1][-1] == eos
    assert any(len(o) == 12 for o in stopped)                      # others went on
    # a [B, Tp] tensor of prompts is the same as the list of its rows
    batch = torch.stack([prompts[0], prompts[3]])
    for a, b in zip(model.generate(batch, 12, eos), [stopped[0], stopped[3]]):
        assert torch.equal(a, b)


def test_sampling_is_reproducible_and_respects_top_k():
    model = build("tra", "t5")
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([0, 5])]

    def sample(seed, **kw):
        return model.generate(prompts, 15, temperature=2.0,
                              generator=torch.Generator().manual_seed(seed), **kw)
    a, b, c = sample(0), sample(0), sample(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
    # the cache does not change the draws: same probabilities (float64), same generator stream
    assert all(torch.equal(x, y) for x, y in zip(a, sample(0, use_cache=False)))
    # greedy is top_k = 1 at any temperature
    for x, y in zip(sample(3, top_k=1), model.generate(prompts, 15)):
        assert torch.equal(x, y)
    # top_k = 2: every drawn token is one of the two largest logits given its prefix
    for p, out in zip(prompts, sample(5, top_k=2)):
        with torch.no_grad():
            logits = model(torch.cat([p, out])[None])[0, len(p) - 1:-1]     # [n, V]
        top2 = logits.topk(2, -1).indices
        assert (top2 == out[:, None]).any(-1).all()
    # and the draws are not all greedy (temperature 2 over 15 tokens x 3 prompts)
    greedy = model.generate(prompts, 15)
    assert any(not torch.equal(x, y) for x, y in zip(sample(5, top_k=2), greedy))


def test_sampler_positions_drawn_once_in_eval_mode_from_the_generator():
    model = build("softmax", "xl", positions="randomized",
                  positions_kwargs={"max_length": 64, "eval_mode": "randomized"})
    prompts = [torch.tensor([1, 2]), torch.tensor([3, 4, 5])]

    def run(seed, **kw):
        return model.generate(prompts, 10, generator=torch.Generator().manual_seed(seed), **kw)
    assert all(torch.equal(x, y) for x, y in zip(run(0), run(0, use_cache=False)))
    # the same draw, made by hand: eval-mode sampler, T_max = longest prompt + max_new_tokens
    pos = model.sampler.sample(13, training=False, generator=torch.Generator().manual_seed(0))
    given = model.generate(prompts, 10, positions=pos)
    assert all(torch.equal(x, y) for x, y in zip(run(0), given))


def test_runs_in_eval_mode_and_restores_the_mode():
    model = build("diff", "sincos", dropout=0.5)
    prompts = [torch.tensor([1, 2, 3])]
    want = model.eval().generate(prompts, 8)
    model.train()
    got = model.generate(prompts, 8)                               # dropout would change tokens
    assert model.training
    assert torch.equal(got[0], want[0])


# ---- bad input: clear errors before any work -------------------------------------------------
@pytest.fixture
def no_forward(monkeypatch):
    """A model whose forward fails the test if it is ever called."""
    def make(**kw):
        model = build(**kw)
        monkeypatch.setattr(type(model), "forward", lambda *a, **k: pytest.fail("forward ran"))
        return model
    return make


@pytest.mark.parametrize("prompts,n_new,kw,match", [
    ([torch.tensor([1, 7])], 3, {}, r"token id 7, outside the model's vocabulary \[0, 7\)"),
    ([torch.tensor([1, 2]), torch.tensor([-1])], 3, {}, r"prompt 1 holds token id -1"),
    ([torch.tensor([1]), torch.tensor([], dtype=torch.long)], 3, {}, r"prompt 1 is empty"),
    ([torch.tensor([1])], 0, {}, r"max_new_tokens must be a positive int"),
    ([torch.tensor([1])], -2, {}, r"max_new_tokens must be a positive int"),
    ([], 3, {}, r"no prompts given"),
    (torch.tensor([1, 2]), 3, {}, r"\[B, Tp\]"),
    ([torch.tensor([[1, 2]])], 3, {}, r"prompt 0 must be a 1-D"),
    ([torch.tensor([1.0, 2.0])], 3, {}, r"integer token ids"),
    ([torch.tensor([1])], 3, {"eos_id": 9}, r"eos_id=9 is outside the vocabulary"),
    ([torch.tensor([1])], 3, {"temperature": -1.0}, r"temperature must be >= 0"),
    ([torch.tensor([1])], 3, {"temperature": 1.0, "top_k": 0}, r"top_k must be in 1..7"),
    ([torch.tensor([1, 2])], 3, {"positions": torch.arange(4.0)}, r"at least 5 columns"),
    ([torch.tensor([1]), torch.tensor([2])], 3, {"positions": torch.zeros(3, 4)},
     r"\[4\] or \[2, 4\]"),
    ([torch.tensor([1])], 3, {"positions": torch.tensor([0.0, 1.0, float("nan"), 3.0])},
     r"finite"),
])
def test_bad_requests_raise_before_any_work(no_forward, prompts, n_new, kw, match):
    model = no_forward()
    with pytest.raises(ValueError, match=match):
        model.generate(prompts, n_new, **kw)


def test_lengths_beyond_the_scheme_or_sampler_raise_before_any_work(no_forward):
    learned = no_forward(posenc="learned", posenc_kwargs={"max_positions": 10})
    with pytest.raises(ValueError, match=r"10 rows.*max_positions"):
        learned.generate([torch.tensor([1, 2, 3])], 8)            # 11 positions: 0..10
    with pytest.raises(ValueError, match=r"10 rows.*max_positions"):   # explicit positions
        learned.generate([torch.tensor([1])], 3, positions=torch.tensor([0.0, 4.0, 9.0, 9.5]))
    randomized = no_forward(positions="randomized", positions_kwargs={"max_length": 8})
    with pytest.raises(ValueError, match=r"max_length to >= 9"):
        randomized.generate([torch.tensor([1, 2, 3])], 6)
    encoder = no_forward(causal=False)
    with pytest.raises(ValueError, match=r"causal decoder"):
        encoder.generate([torch.tensor([1])], 2)


def test_learned_table_exactly_filled_works():
    model = build("softmax", "learned", posenc_kwargs={"max_positions": 10})
    out = model.generate([torch.tensor([1, 2])], 8)              # positions 0..9
    assert len(out[0]) == 8


def test_forward_with_cache_checks():
    model = build("softmax", "rope")
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), cache=cache)              # empty cache: sampler positions
        with pytest.raises(ValueError, match=r"needs the new tokens' positions"):
            model(torch.tensor([[4]]), cache=cache)
        with pytest.raises(ValueError, match=r"positions must be \[T\]"):
            model(torch.tensor([[4]]), torch.tensor([3.0, 4.0]), cache=cache)
    encoder = build("softmax", "rope", causal=False)
    with pytest.raises(ValueError, match=r"causal decoder"):
        encoder(torch.tensor([[1, 2]]), cache=encoder.new_cache())


# ---- the query-blocked ops with q_offset against the dense references ------------------------
def op_inputs(T, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)       # noqa: E731
    return dict(q=r(2, 4, T, 8), k=r(2, 4, T, 8), v=r(2, 4, T, 8),
                gate=torch.nn.functional.logsigmoid(r(2, 4, T)), bias=r(2, 4, T, T), pe=r(8, 12))


def op_pairs():
    """name -> (naive(x, bias_fn), chunked(x, bias_fn, rows from o, block)) on the same inputs."""
    from lengen.ops.cope import cope_attention_chunked, cope_attention_naive
    from lengen.ops.diff import diff_attention_chunked, diff_attention_naive
    from lengen.ops.fot import fot_attention_naive
    from lengen.ops.fot.chunked import cumulative_log_forget, fot_attention_blocks
    from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
    from lengen.ops.tra import tra_attention_chunked, tra_attention_naive

    def carried_c(log_f, o):
        """c of keys 0..o-1 as a cache holds it, continued over the new rows o.. as a step does."""
        before = cumulative_log_forget(log_f[..., :o])
        return torch.cat([before, cumulative_log_forget(log_f[..., o:], before)], -1)

    def v2(x):                                                 # diff's [B, H/2, T, 2hd] values
        B, H, T, d = x["v"].shape
        return x["v"].view(B, H // 2, 2, T, d).transpose(2, 3).reshape(B, H // 2, T, 2 * d)
    return {
        "softmax": (lambda x, bf: softmax_attention_naive(x["q"], x["k"], x["v"], bias_fn=bf),
                    lambda x, bf, o, blk: softmax_attention_chunked(
                        x["q"][:, :, o:], x["k"], x["v"], bias_fn=bf, block_size=blk, q_offset=o)),
        "tra": (lambda x, bf: tra_attention_naive(x["q"], x["k"], x["v"], x["gate"], bias_fn=bf),
                lambda x, bf, o, blk: tra_attention_chunked(
                    x["q"][:, :, o:], x["k"], x["v"], x["gate"][..., o:], bias_fn=bf,
                    block_size=blk, q_offset=o)),
        "fot": (lambda x, bf: fot_attention_naive(x["q"], x["k"], x["v"], x["gate"], bias_fn=bf),
                lambda x, bf, o, blk: fot_attention_blocks(
                    x["q"][:, :, o:], x["k"], x["v"], carried_c(x["gate"], o), bias_fn=bf,
                    block_size=blk, q_offset=o)),
        "cope": (lambda x, bf: cope_attention_naive(x["q"], x["k"], x["v"], x["pe"], bias_fn=bf),
                 lambda x, bf, o, blk: cope_attention_chunked(
                     x["q"][:, :, o:], x["k"], x["v"], x["pe"], bias_fn=bf, block_size=blk,
                     q_offset=o)),
        "diff": (lambda x, bf: diff_attention_naive(x["q"], x["k"], v2(x), torch.tensor(0.3),
                                                    bias_fn=bf),
                 lambda x, bf, o, blk: diff_attention_chunked(
                     x["q"][:, :, o:], x["k"], v2(x), torch.tensor(0.3), bias_fn=bf,
                     block_size=blk, q_offset=o)),
    }


@pytest.mark.parametrize("name", ["softmax", "tra", "fot", "cope", "diff"])
@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("bias", ["none", "shared", "per-sequence"])
def test_ops_with_q_offset_equal_the_reference_rows(name, T, bias):
    naive, chunked = op_pairs()[name]
    x = op_inputs(T)
    full_bias = {"none": None, "shared": x["bias"][0], "per-sequence": x["bias"]}[bias]
    ref = naive(x, None if full_bias is None else (lambda s, e: full_bias[..., s:e, :]))
    for o in sorted({0, T // 2, T - 1}):
        bf = None if full_bias is None else (lambda s, e, o=o: full_bias[..., o + s:o + e, :])
        for blk in (7, 256):
            torch.testing.assert_close(chunked(x, bf, o, blk), ref[:, :, o:], **TIGHT)
