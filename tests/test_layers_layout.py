"""Per-layer layouts (model.layers), model-level qk_norm, sliding-window / chunked masks
(issue 52 item 2). Not the import-layer test (tests/test_layers.py)."""
from __future__ import annotations

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.errors import ConfigError
from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu


def dense_reference(q, k, v, bias, *, window=None, chunk=None):
    """softmax(q k^T / sqrt(d) + bias, mask) v with the mask written out element by element."""
    T, Tk = q.shape[-2], k.shape[-2]
    off = Tk - T
    mask = torch.zeros(T, Tk, dtype=torch.bool)
    for r in range(T):
        i = off + r
        for j in range(Tk):
            ok = j <= i
            if window is not None:
                ok = ok and i - window < j
            if chunk is not None:
                ok = ok and j // chunk == i // chunk
            mask[r, j] = ok
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        s = s + bias
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


LOCAL = [dict(window=1), dict(window=7), dict(window=40), dict(chunk=1), dict(chunk=8),
         dict(chunk=50)]


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("local", LOCAL, ids=lambda d: f"{next(iter(d))}{next(iter(d.values()))}")
@pytest.mark.parametrize("with_bias", [False, True])
def test_local_masks_equal_dense_reference(T, local, with_bias):
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    bias = (torch.randn(3, T, T, generator=g, dtype=torch.float64, requires_grad=True)
            if with_bias else None)
    bias_fn = None if bias is None else (lambda s, e: bias[:, s:e])
    ref = dense_reference(q, k, v, bias, **local)
    dout = torch.randn_like(ref)
    leaves = [q, k, v] + ([bias] if with_bias else [])
    want = torch.autograd.grad(ref, leaves, dout)
    ops = {"naive": softmax_attention_naive,
           "lean16": lambda *a, **kw: softmax_attention_chunked(*a, block_size=16, **kw),
           "lean1": lambda *a, **kw: softmax_attention_chunked(*a, block_size=1, **kw),
           "fast_cpu": softmax_attention_fast_cpu}
    for name, op in ops.items():
        out = op(q, k, v, causal=True, bias_fn=bias_fn, **local)
        torch.testing.assert_close(out, ref, msg=name)
        for a, b in zip(torch.autograd.grad(out, leaves, dout), want):
            torch.testing.assert_close(a, b, msg=name)


@pytest.mark.parametrize("local", LOCAL, ids=lambda d: f"{next(iter(d))}{next(iter(d.values()))}")
def test_lean_local_mask_with_cached_offset(local):
    """Decoding rows placed after cached keys (q_offset) see the same keys as in the full call."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    full = dense_reference(q, k, v, None, **local)
    for t in (0, 5, 20, 36):
        step = softmax_attention_chunked(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1],
                                         q_offset=t, block_size=4, **local)
        torch.testing.assert_close(step, full[:, :, t:t + 1])


def small(**kw):
    base = dict(vocab_size=11, d_model=32, n_heads=4, n_layers=4)
    return ModelConfig(**{**base, **kw})


LLAMA4 = dict(posenc="rope", layers=[
    {"chunk": 5, "qk_norm": "rms", "repeat": 3},
    {"posenc": "nope", "attention_kwargs": {"logn": "llama4", "logn_floor_scale": 4}}])


@pytest.mark.parametrize("layout", [
    LLAMA4,
    dict(posenc="rope", n_layers=4, layers=[{"window": 4}, {"posenc": "nope"}]),
    dict(posenc="alibi", layers=[{"window": 3}, {"chunk": 4}, {"qk_norm": "rms"},
                                 {"attention": "fot"}]),
], ids=["llama4", "window-pattern", "mixed"])
def test_cached_decoding_equals_recomputation(layout):
    torch.manual_seed(0)
    m = Transformer(small(**layout)).double().eval()
    x = torch.randint(0, 11, (2, 17))
    pos = torch.arange(17, dtype=torch.float64)
    full = m(x, pos)
    cache = m.new_cache()
    outs = [m(x[:, :6], pos[:6], cache=cache)]
    outs += [m(x[:, t:t + 1], pos[t:t + 1], cache=cache) for t in range(6, 17)]
    torch.testing.assert_close(torch.cat(outs, 1), full)


def test_layout_builds_what_it_says():
    m = Transformer(small(**LLAMA4))
    assert [type(p).__name__ for p in m.block_posencs()] == ["RoPE"] * 3 + ["NoPE"]
    assert [(b.attn.chunk, b.attn.qk_norm, b.attn.logn.kind) for b in m.blocks] == \
        [(5, "rms", "none")] * 3 + [(None, "none", "llama4")]
    # a pattern shorter than n_layers repeats
    m8 = Transformer(small(**{**LLAMA4, "n_layers": 8}))
    assert [b.attn.chunk for b in m8.blocks] == [5, 5, 5, None] * 2
    # the layers naming one scheme share its instance, as a plain model's layers do
    assert len(m8.unique_posencs()) == 2


def test_impls_agree_in_training_on_a_windowed_model():
    """auto (training routes windowed layers to the lean op), naive and lean: same loss and
    gradients."""
    layout = dict(posenc="alibi", layers=[{"window": 5}, {"chunk": 6}])
    x = torch.randint(0, 11, (3, 29))
    grads = {}
    for impl in ("auto", "naive", "lean"):
        torch.manual_seed(0)
        m = Transformer(small(attn_impl=impl, attn_block_size=8, **layout)).double().train()
        loss = m(x, torch.arange(29.0, dtype=torch.float64)).logsumexp(-1).mean()
        loss.backward()
        grads[impl] = (loss.detach(), [p.grad for p in m.parameters()])
    for impl in ("naive", "lean"):
        torch.testing.assert_close(grads[impl][0], grads["auto"][0])
        for a, b in zip(grads[impl][1], grads["auto"][1]):
            torch.testing.assert_close(a, b)


def test_window_changes_the_output():
    torch.manual_seed(0)
    x = torch.randint(0, 11, (1, 20))
    outs = []
    for w in (None, 3):
        torch.manual_seed(0)
        outs.append(Transformer(small(posenc="rope", window=w)).eval()(x, torch.arange(20.0)))
    torch.testing.assert_close(outs[0][:, :3], outs[1][:, :3])      # rows 0..2 see all keys
    assert (outs[0][:, 3:] - outs[1][:, 3:]).abs().max() > 1e-4


QK_KINDS = [n for n, c in ATTENTIONS.items() if not c.is_token_mixer and n != "tra"]


@pytest.mark.parametrize("kind", QK_KINDS)
def test_qk_norm_makes_scores_invariant_to_q_k_scale(kind, monkeypatch):
    """With qk_norm=rms a kind's output does not change when q's and k's projections are scaled
    (the norm removes it; eps set to 0 here so that it is exact); without it, it does. So the
    norm reaches every kind's scores."""
    import lengen.attention.base as base
    rms = base.qk_rms
    monkeypatch.setattr(base, "qk_rms", lambda x: rms(x, 0.0))
    x = torch.randint(0, 11, (2, 9))
    pos = torch.arange(9.0, dtype=torch.float64)
    for norm, invariant in (("rms", True), ("none", False)):
        torch.manual_seed(0)
        m = Transformer(small(attention=kind, posenc="rope" if kind != "cope" else "nope",
                              qk_norm=norm)).double().eval()
        a = m(x, pos)
        with torch.no_grad():
            for b in m.blocks:
                b.attn.qkv.weight[:64] *= 3.0                  # the q and k rows
        b_ = m(x, pos)
        if invariant:
            torch.testing.assert_close(a, b_, atol=1e-9, rtol=1e-7)
        else:
            assert (a - b_).abs().max() > 1e-6


def test_qk_norm_equals_llama4_l2norm_after_rope():
    pytest.importorskip("transformers")
    from transformers.models.llama4.modeling_llama4 import Llama4TextL2Norm

    from lengen.attention.base import qk_rms
    x = 3 * torch.randn(2, 3, 5, 8)                         # it computes in float32
    torch.testing.assert_close(qk_rms(x), Llama4TextL2Norm(1e-6)(x))


@pytest.mark.parametrize("bad, says", [
    (dict(layers=[{"windw": 3}]), "model.layers[0].windw"),
    (dict(layers=[{"window": 0}]), "model.layers[0].window"),
    (dict(layers=[{"chunk": 2}, {"window": 2, "chunk": 2}]), "model.layers[1].window"),
    (dict(layers=[{"repeat": 3}]), "neither equals nor divides"),
    (dict(attention="lstm", qk_norm="rms"), "model.qk_norm=rms"),
    (dict(attention="tra", qk_norm="rms"), "TRA normalises"),
    (dict(layers=[{"window": 3}, {"attention": "fot", "window": 3}]),
     "model.layers[1].window=3: attention kind 'fot'"),
    (dict(causal=False, window=3), "causal"),
    (dict(layers=[{"posenc": "learned"}, {"posenc": "rope"}]), "adds to the embeddings"),
    (dict(layers=[{"posenc_kwargs": {"bse": 3}}]), "model.layers[0].posenc_kwargs"),
    (dict(layers=[{"attention": "nosuch"}]), "nosuch"),
    (dict(causal=False, n_layers=2, layers=[{}, {"attention": "tra"}]),
     "model.layers[1].attention='tra' is defined only for causal decoders"),
])
def test_bad_layouts_are_refused(bad, says):
    with pytest.raises(ConfigError, match=None) as e:
        Transformer(small(**bad))
    assert says in str(e.value), str(e.value)


def llama4_model(**over):
    from lengen.model.presets import preset
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=13, **{**preset("llama4-irope")["model"], **over}))
    with torch.no_grad():                  # sharper attention, so every mask and scale shows
        for b in m.blocks:
            b.attn.qkv.weight.mul_(10)
    return m.eval()


def test_llama4_preset_generates_with_a_cache_equal_to_recomputation():
    m = llama4_model()
    prompts = [torch.randint(0, 13, (n,)) for n in (3, 20)]
    cached = m.generate(prompts, 30)
    plain = m.generate(prompts, 30, use_cache=False)
    for a, b in zip(cached, plain):
        assert torch.equal(a, b)


def test_llama4_export_equals_the_stock_class():
    """The stock transformers Llama4ForCausalLM (no lengen code) gives lengen's logits, past the
    chunk (16) and the temperature floor_scale (16) so that both act."""
    pytest.importorskip("transformers")
    from lengen.hf.llama4 import to_llama4
    m = llama4_model()
    hf = to_llama4(m)
    assert type(hf).__name__ == "Llama4ForCausalLM"
    assert hf.config.no_rope_layers == [1, 1, 1, 0] and hf.config.attention_chunk_size == 16
    assert hf.config.use_qk_norm and hf.config.attn_temperature_tuning
    x = torch.randint(0, 13, (2, 45))
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, m(x, torch.arange(45.0)), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("over, says", [
    (dict(layers=[{"window": 16, "qk_norm": "rms", "repeat": 3}, {"posenc": "nope"}]),
     "model.layers[0].window=16"),
    (dict(layers=[{"chunk": 16, "repeat": 3},
                  {"posenc": "nope", "attention_kwargs": {"logn": "ssmax"}}]),
     "temperature tuning"),
    (dict(layers=[{"chunk": 16, "attention_kwargs": {"logn": "llama4"}, "repeat": 3},
                  {"posenc": "nope"}]), "on a RoPE layer"),
    (dict(layers=[{"chunk": 16}, {"chunk": 8}, {"chunk": 16}, {"posenc": "nope"}]),
     "chunk sizes"),
    (dict(layers=[{"posenc": "alibi"}]), "model.layers[0].posenc=alibi"),
])
def test_llama4_export_refuses_what_llama4_cannot_express(over, says):
    pytest.importorskip("transformers")
    from lengen.errors import ExportError
    from lengen.hf.llama4 import to_llama4
    with pytest.raises(ExportError) as e:
        to_llama4(llama4_model(**over))
    assert says in str(e.value), str(e.value)


def test_llama_export_refuses_a_layout():
    pytest.importorskip("transformers")
    from lengen.errors import ExportError
    from lengen.hf.export import to_llama
    with pytest.raises(ExportError, match="model.layers"):
        to_llama(llama4_model())


def test_hf_export_of_a_layout_round_trips(tmp_path):
    """--to hf (LengenForCausalLM) carries model.layers in its config: saved, loaded, same
    logits."""
    pytest.importorskip("transformers")
    import lengen.hf  # noqa: F401  registers the class with AutoModelForCausalLM
    from transformers import AutoModelForCausalLM

    from lengen.hf.export import to_hf
    m = llama4_model(layers=[{"window": 5, "qk_norm": "rms"}, {"posenc": "nope"}])
    to_hf(m).save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    x = torch.randint(0, 13, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(back(x).logits, m(x, torch.arange(30.0)))


def test_llama4_preset_trains_through_the_run_loop(tmp_path):
    """The preset resolves as a config file's model section and lengen.train runs it (a few
    steps on copy), writing a run that loads back to the same layout."""
    import lengen
    from lengen.model.presets import preset
    cfg = preset("llama4-irope")
    cfg["task"] = {"name": "copy"}
    cfg["train"] = {"steps": 4, "batch_size": 4, "ckpt_every": 4, "tensorboard": False}
    cfg["eval"] = {"sequences": 2}
    lengen.train(cfg, str(tmp_path / "run"))
    _cfg, _task, model = lengen.load_run(str(tmp_path / "run"))
    assert [b.attn.chunk for b in model.blocks] == [16, 16, 16, None]
    assert model.blocks[3].attn.logn.kind == "llama4"


@pytest.mark.parametrize("posenc", ["nope", "rope", "alibi", "t5", "xl", "kerple_log", "fire",
                                    "pope", "learned"])
@pytest.mark.parametrize("window", [1, 3, 8])
def test_a_windowed_layer_keeps_only_its_window_in_the_cache(posenc, window):
    """Cached decoding of a sliding-window layer keeps only its last ``window`` keys and values
    (issue 52: KV cache trimmed to the window), and still equals recomputation: prefills longer
    and shorter than the window, then one token at a time, with a full layer beside it (which
    keeps every key). Positions are per sequence and start at 3, so a bias reading key indices
    instead of key positions would differ."""
    torch.manual_seed(window)
    m = Transformer(small(posenc=posenc, n_layers=2,
                          layers=[{"window": window}, {}])).double().eval()
    x = torch.randint(0, 11, (2, 23))
    pos = (torch.arange(23, dtype=torch.float64) + 3).expand(2, -1).contiguous()
    pos[1] += 2
    full = m(x, pos)
    for prefill in (1, window, 9):
        cache = m.new_cache(capacity=23)
        outs = [m(x[:, :prefill], pos[:, :prefill], cache=cache)]
        held = [cache.layers[0].length("k")]
        for t in range(prefill, 23):
            outs.append(m(x[:, t:t + 1], pos[:, t:t + 1], cache=cache))
            held.append(cache.layers[0].length("k"))
            assert cache.layers[0].get("v").shape[2] == held[-1]
        torch.testing.assert_close(torch.cat(outs, 1), full)
        assert max(held) <= window and held[-1] == window
        assert cache.layers[0].length("k") + cache.layers[0].dropped == 23
        assert cache.layers[1].length("k") == 23 and cache.layers[1].dropped == 0
        buf = cache.layers[0]._items["k"].buf
        assert buf.shape[2] <= max(2 * window, prefill)          # O(window) memory


def test_a_trimmed_cache_keeps_the_selected_rows():
    torch.manual_seed(0)
    m = Transformer(small(posenc="alibi", n_layers=1, window=2)).double().eval()
    x = torch.randint(0, 11, (3, 12))
    pos = torch.arange(12, dtype=torch.float64)
    full = m(x, pos)
    cache = m.new_cache()
    m(x[:, :5], pos[:5], cache=cache)
    cache.select(torch.tensor([2, 0]))
    outs = [m(x[[2, 0], t:t + 1], pos[t:t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(outs, 1), full[[2, 0], 5:])
    assert cache.layers[0].length("k") == 2 and cache.layers[0].dropped == 10


def test_a_windowed_model_generates_with_a_trimmed_cache_equal_to_recomputation():
    torch.manual_seed(1)
    m = Transformer(small(posenc="alibi", layers=[{"window": 4}, {"window": 2}, {}, {}])).eval()
    prompts = [torch.randint(0, 11, (n,)) for n in (1, 3, 9)]
    cached = m.generate(prompts, 25)
    plain = m.generate(prompts, 25, use_cache=False)
    for a, b in zip(cached, plain):
        assert torch.equal(a, b)


@pytest.mark.parametrize("posenc", ["nope", "rope", "alibi", "t5", "xl", "kerple_log", "fire",
                                    "pope", "learned"])
@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_a_chunked_layer_keeps_only_its_current_chunk_in_the_cache(posenc, chunk):
    """Cached decoding of a chunked layer keeps only the keys of its current chunk (issue 52:
    the last n mod C of the n tokens seen, none at a boundary), and still equals recomputation
    (logits, and greedy generation with the cache against without): prefills shorter than,
    equal to and longer than the chunk, then one token at a time, with a full layer beside it.
    Positions are per sequence and start at 3 (and 5), so a scheme reading the held keys'
    indices instead of their positions, or a chunk mask counted from the held keys without
    whole chunks dropped, would differ."""
    torch.manual_seed(chunk)
    m = Transformer(small(posenc=posenc, n_layers=2,
                          layers=[{"chunk": chunk}, {}])).double().eval()
    with torch.no_grad():                  # sharper attention, so a wrong mask shows
        for b in m.blocks:
            b.attn.qkv.weight.mul_(4)
    x = torch.randint(0, 11, (2, 23))
    pos = (torch.arange(23, dtype=torch.float64) + 3).expand(2, -1).contiguous()
    pos[1] += 2
    full = m(x, pos)
    for prefill in (1, chunk, 9):
        cache = m.new_cache(capacity=23)
        outs = [m(x[:, :prefill], pos[:, :prefill], cache=cache)]
        held = [cache.layers[0].length("k")]
        for t in range(prefill, 23):
            outs.append(m(x[:, t:t + 1], pos[:, t:t + 1], cache=cache))
            held.append(cache.layers[0].length("k"))
            assert cache.layers[0].get("v").shape[2] == held[-1]
        torch.testing.assert_close(torch.cat(outs, 1), full)
        assert held == [n % chunk for n in range(prefill, 24)]      # never above the chunk
        assert cache.layers[0].length("k") + cache.layers[0].dropped == 23
        assert cache.layers[1].length("k") == 23 and cache.layers[1].dropped == 0
        buf = cache.layers[0]._items["k"].buf
        assert buf.shape[2] <= max(chunk, prefill)                  # O(chunk) memory
    prompts = [x[0, :n] for n in (1, chunk, 9)]
    gen_pos = torch.arange(40, dtype=torch.float64) + 3
    cached = m.generate(prompts, 20, positions=gen_pos)
    plain = m.generate(prompts, 20, positions=gen_pos, use_cache=False)
    for a, b in zip(cached, plain):
        assert torch.equal(a, b)


def test_the_llama4_preset_caches_only_the_current_chunk_of_its_chunked_layers():
    """llama4-irope (chunked RoPE layers 0-2, a NoPE global layer 3): step-by-step cached logits
    equal recomputation over three chunk boundaries, each chunked layer holds only the keys of
    the current chunk (fewer than ``chunk``), the global layer every key."""
    m = llama4_model().double()
    chunk = m.blocks[0].attn.chunk
    T = 3 * chunk + 5
    x = torch.randint(0, 13, (2, T))
    pos = torch.arange(T, dtype=torch.float64)
    full = m(x, pos)
    cache = m.new_cache()
    outs = [m(x[:, :7], pos[:7], cache=cache)]
    for t in range(7, T):
        outs.append(m(x[:, t:t + 1], pos[t:t + 1], cache=cache))
        for i, layer in enumerate(cache.layers):
            want = (t + 1) % chunk if i < 3 else t + 1
            assert layer.length("k") == want and layer.length("v") == want, (i, t)
    torch.testing.assert_close(torch.cat(outs, 1), full)
    assert [b.attn.chunk for b in m.blocks] == [chunk] * 3 + [None]
