"""Token mixers (lengen.attention.mixer): each fast path against its reference (values and
gradients, fp64, T = 1, 63, 111), Gated DeltaNet's recurrence against flash-linear-attention's
``naive_recurrent_gated_delta_rule`` where that package is installed, hand-computed values,
cached decoding against recomputation, the configuration rules (no scheme acting inside
attention, causal only) and training with kept / packed rows."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from lengen.attention import ATTENTIONS
from lengen.attention.mixer import TokenMixer
from lengen.errors import ConfigError
from lengen.model import ModelConfig, Transformer
from lengen.model.cache import LayerCache
from lengen.ops.gated_delta import gated_delta_chunked, gated_delta_naive
from lengen.ops.lstm import lstm_naive
from lengen.ops.mamba2 import ssd_chunked, ssd_naive
from lengen.ops.short_conv import causal_conv, causal_conv_naive

MIXERS = sorted(n for n, c in ATTENTIONS.items() if c.is_token_mixer)
LENGTHS = (1, 63, 111)
F64 = torch.float64
TIGHT = dict(atol=1e-10, rtol=1e-8)


def randn(*shape, g, requires_grad=True):
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(requires_grad)


def assert_same(fn_a, fn_b, inputs, what):
    """Equal outputs and equal gradients w.r.t. every input (a random weighting of all outputs)."""
    out_a, out_b = fn_a(*inputs), fn_b(*inputs)
    g = torch.Generator().manual_seed(9)
    ws = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in out_a]
    for a, b in zip(out_a, out_b):
        torch.testing.assert_close(b, a, **TIGHT, msg=lambda m: f"{what} values: {m}")
    ga = torch.autograd.grad(sum((o * w).sum() for o, w in zip(out_a, ws)), inputs)
    gb = torch.autograd.grad(sum((o * w).sum() for o, w in zip(out_b, ws)), inputs)
    for i, (a, b) in enumerate(zip(ga, gb)):
        torch.testing.assert_close(b, a, **TIGHT, msg=lambda m: f"{what} grad {i}: {m}")


def test_the_mixers_are_registered():
    assert MIXERS == ["gated_deltanet", "lstm", "mamba2"]
    for name in MIXERS:
        cls = ATTENTIONS[name]
        assert issubclass(cls, TokenMixer) and cls.requires_causal and not cls.uses_posenc


# ---- ops: fast path == reference ---------------------------------------------------------------

@pytest.mark.parametrize("T", LENGTHS)
def test_short_conv_equals_its_sum(T):
    g = torch.Generator().manual_seed(T)
    x, w, b, s = randn(2, T, 5, g=g), randn(5, 4, g=g), randn(5, g=g), randn(2, 3, 5, g=g)
    assert_same(lambda *a: causal_conv_naive(*a), lambda *a: causal_conv(*a), (x, w, b, s),
                "conv")
    # no state = zeros before the first token; the returned window is the last K - 1 inputs
    y, state = causal_conv(x, w, b)
    torch.testing.assert_close(y[:, 0], b + w[:, -1] * x[:, 0])
    torch.testing.assert_close(state[:, -min(T, 3):], x[:, -min(T, 3):])


@pytest.mark.parametrize("T", LENGTHS)
def test_lstm_module_equals_the_step_recurrence(T):
    g = torch.Generator().manual_seed(T)
    D = 6
    lstm = torch.nn.LSTM(D, D, batch_first=True).double()
    x, h0, c0 = randn(3, T, D, g=g), randn(3, D, g=g), randn(3, D, g=g)
    params = (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)

    def fast(x, h0, c0):
        y, (h, c) = lstm(x, (h0[None], c0[None]))
        return y, h[0], c[0]

    def ref(x, h0, c0):
        y, (h, c) = lstm_naive(x, *params, h0, c0)
        return y, h, c

    assert_same(ref, fast, (x, h0, c0), "lstm")


def test_lstm_step_by_hand():
    """One step from zero state with every weight 0 and the biases of i, f, g, o: c = i * g."""
    H = 2
    b_ih = torch.tensor([0.5, 0.5, 9.0, 9.0, 1.0, 1.0, -1.0, -1.0], dtype=F64)   # i, f, g, o
    y, (h, c) = lstm_naive(torch.zeros(1, 1, 3, dtype=F64), torch.zeros(4 * H, 3, dtype=F64),
                           torch.zeros(4 * H, H, dtype=F64), b_ih, torch.zeros(4 * H, dtype=F64))
    want_c = torch.sigmoid(torch.tensor(0.5)) * torch.tanh(torch.tensor(1.0))
    torch.testing.assert_close(c, torch.full((1, H), float(want_c), dtype=F64))
    torch.testing.assert_close(h, torch.sigmoid(torch.tensor(-1.0, dtype=F64)) * torch.tanh(c))


def ssd_inputs(T, g, G=2, H=4):
    x, Bm, Cm = randn(2, T, H, 3, g=g), randn(2, T, G, 5, g=g), randn(2, T, G, 5, g=g)
    dt = torch.rand(2, T, H, generator=g, dtype=F64).requires_grad_()
    A = (-0.2 - torch.rand(H, generator=g, dtype=F64)).requires_grad_()
    return x, dt, A, Bm, Cm, randn(2, H, 3, 5, g=g)


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("T", LENGTHS)
def test_ssd_chunked_equals_the_recurrence(T, chunk):
    ins = ssd_inputs(T, torch.Generator().manual_seed(T))
    assert_same(ssd_naive, lambda *a: ssd_chunked(*a, chunk=chunk), ins, "ssd")
    # without an entering state too
    assert_same(lambda *a: ssd_naive(*a), lambda *a: ssd_chunked(*a, chunk=chunk), ins[:5],
                "ssd, zero state")


def test_ssd_by_hand():
    """One head, P = N = 1: h1 = dt1 x1 B1, h2 = exp(dt2 A) h1 + dt2 x2 B2, y = h C."""
    x = torch.tensor([2.0, 3.0], dtype=F64).view(1, 2, 1, 1)
    dt = torch.tensor([0.5, 0.25], dtype=F64).view(1, 2, 1)
    A = torch.tensor([-2.0], dtype=F64)
    B = torch.tensor([1.0, 4.0], dtype=F64).view(1, 2, 1, 1)
    C = torch.tensor([3.0, -1.0], dtype=F64).view(1, 2, 1, 1)
    h1 = 0.5 * 2.0 * 1.0
    h2 = torch.exp(torch.tensor(-0.5, dtype=F64)) * h1 + 0.25 * 3.0 * 4.0
    for fn in (ssd_naive, ssd_chunked):
        y, h = fn(x, dt, A, B, C)
        torch.testing.assert_close(y.flatten(), torch.stack([torch.tensor(3.0 * h1, dtype=F64),
                                                             -h2]))
        torch.testing.assert_close(h.flatten(), h2.view(1))


def gdn_inputs(T, g, H=3, K=4, V=6):
    q = F.normalize(torch.randn(2, T, H, K, generator=g, dtype=F64), dim=-1).requires_grad_()
    k = F.normalize(torch.randn(2, T, H, K, generator=g, dtype=F64), dim=-1).requires_grad_()
    v = randn(2, T, H, V, g=g)
    log_alpha = (-torch.rand(2, T, H, generator=g, dtype=F64)).requires_grad_()
    beta = torch.rand(2, T, H, generator=g, dtype=F64).requires_grad_()
    return q, k, v, log_alpha, beta, randn(2, H, K, V, g=g)


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("T", LENGTHS)
def test_gated_delta_chunked_equals_the_recurrence(T, chunk):
    ins = gdn_inputs(T, torch.Generator().manual_seed(T))
    assert_same(gated_delta_naive, lambda *a: gated_delta_chunked(*a, chunk=chunk), ins, "gdn")


def test_gated_delta_by_hand():
    """K = V = 1, k = q = 1: S1 = b1 v1; S2 = a2 S1 + b2 (v2 - a2 S1); o = S (scale 1)."""
    one = torch.ones(1, 2, 1, 1, dtype=F64)
    v = torch.tensor([2.0, 5.0], dtype=F64).view(1, 2, 1, 1)
    a2 = 0.5
    g = torch.tensor([0.0, a2], dtype=F64).log().view(1, 2, 1).nan_to_num(neginf=-1e3)
    g[0, 0, 0] = 0.0
    beta = torch.tensor([0.25, 0.75], dtype=F64).view(1, 2, 1)
    s1 = 0.25 * 2.0
    s2 = a2 * s1 + 0.75 * (5.0 - a2 * s1)
    for fn in (gated_delta_naive, gated_delta_chunked):
        o, S = fn(one, one, v, g, beta, scale=1.0)
        torch.testing.assert_close(o.flatten(), torch.tensor([s1, s2], dtype=F64))


@pytest.mark.parametrize("T", LENGTHS)
def test_gated_delta_equals_flash_linear_attention(T):
    """An independent reference: fla's pure-PyTorch recurrence (computes in fp32)."""
    fla = pytest.importorskip("fla.ops.gated_delta_rule.naive")
    q, k, v, log_alpha, beta, S0 = gdn_inputs(T, torch.Generator().manual_seed(T))
    for fn in (gated_delta_naive, gated_delta_chunked):
        o, S = fn(q, k, v, log_alpha, beta, S0)
        o_ref, S_ref = fla.naive_recurrent_gated_delta_rule(
            q, k, v, beta, log_alpha, initial_state=S0, output_final_state=True)
        torch.testing.assert_close(o, o_ref.to(F64), atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(S, S_ref.to(F64), atol=2e-5, rtol=1e-5)
        w = torch.randn(o.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
        ga = torch.autograd.grad((o * w).sum() + S.sum(), (q, k, v, log_alpha, beta, S0))
        gb = torch.autograd.grad((o_ref * w).sum() + S_ref.sum(), (q, k, v, log_alpha, beta, S0))
        for a, b in zip(ga, gb):
            torch.testing.assert_close(a, b.to(F64), atol=1e-4, rtol=1e-4)


def test_mamba2_layer_equals_flash_linear_attention():
    """An independent reference for the whole layer: fla's ``Mamba2`` on its PyTorch path (the
    chunked scan of ``torch_forward``; its Triton SiLU and gated norm swapped for fla's own
    PyTorch ones, which upcast to fp32: hence the fp32 tolerance), with our weights."""
    pytest.importorskip("fla.layers.mamba2")
    from fla.layers.mamba2 import Mamba2
    from fla.modules.norm.layernorm_gated import rms_norm_ref

    torch.manual_seed(0)
    ref = Mamba2(num_heads=3, head_dim=8, hidden_size=12, state_size=5, expand=2, n_groups=1,
                 chunk_size=16).double()
    norm = ref.norm
    norm.forward = lambda x, z=None: rms_norm_ref(x, norm.weight, None, z=z, eps=norm.eps,
                                                  group_size=norm.group_size,
                                                  norm_before_gate=norm.norm_before_gate)
    ref.act = F.silu
    for impl in ("naive", "lean"):
        ours = ATTENTIONS["mamba2"](d_model=12, n_heads=3, d_state=5, impl=impl,
                                    block_size=16).double()
        with torch.no_grad():
            for mine, theirs in ((ours.in_proj.weight, ref.in_proj.weight),
                                 (ours.out_proj.weight, ref.out_proj.weight),
                                 (ours.conv_weight, ref.conv1d.weight[:, 0]),
                                 (ours.conv_bias, ref.conv1d.bias), (ours.dt_bias, ref.dt_bias),
                                 (ours.A_log, ref.A_log), (ours.D, ref.D),
                                 (ours.norm_weight, ref.norm.weight)):
                mine.copy_(theirs)
        for T in (1, 37):
            x = torch.randn(2, T, 12, generator=torch.Generator().manual_seed(T), dtype=F64)
            torch.testing.assert_close(ours(x), ref(x)[0], atol=1e-6, rtol=1e-6)


# ---- layers: fast == reference; cached decoding == recomputation ---------------------------------

def layer(name, impl, seed=0, **kw):
    torch.manual_seed(seed)
    m = ATTENTIONS[name](d_model=12, n_heads=3, impl=impl, block_size=16, **kw).double()
    with torch.no_grad():                              # the projections: a larger random init
        for p in m.parameters():
            if p.dim() == 2 and "conv" not in next(n for n, q in m.named_parameters() if q is p):
                p.normal_(0, 0.4)
    return m


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("name", MIXERS)
def test_layer_fast_path_equals_reference(name, T):
    naive = layer(name, "naive")
    lean = copy.deepcopy(naive)
    lean.impl = "lean"
    x = randn(2, T, 12, g=torch.Generator().manual_seed(T))
    y_ref, y_fast = naive(x, None, None), lean(x, None, None)
    torch.testing.assert_close(y_fast, y_ref, **TIGHT)
    w = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
    (y_ref * w).sum().backward()
    (y_fast * w).sum().backward()
    for (n, a), b in zip(naive.named_parameters(), lean.parameters()):
        # every parameter is used (the decay only acts on a state: from the second token)
        assert a.grad is not None and (T == 1 or a.grad.abs().sum() > 0), n
        torch.testing.assert_close(b.grad, a.grad, **TIGHT, msg=lambda m: f"{name}.{n}: {m}")


@pytest.mark.parametrize("impl", ["naive", "lean"])
@pytest.mark.parametrize("name", MIXERS)
def test_cached_calls_equal_one_call(name, impl):
    """Prefill 5 tokens, then 1, 1 and 4: the outputs of the whole sequence in one call; after
    dropping a batch row (cache.select) the others go on as alone."""
    m = layer(name, impl).eval()
    x = torch.randn(3, 11, 12, generator=torch.Generator().manual_seed(0), dtype=F64)
    with torch.no_grad():
        full = m(x, None, None)
        cache, outs, t = LayerCache(), [], 0
        for n in (5, 1, 1, 4):
            outs.append(m(x[:, t:t + n], None, None, cache=cache,
                          key_pos=torch.arange(t + n, dtype=F64)))
            t += n
        torch.testing.assert_close(torch.cat(outs, dim=1), full, **TIGHT)
        cache = LayerCache()
        m(x[:, :6], None, None, cache=cache)
        cache.select(torch.tensor([2, 0]))
        rest = m(x[[2, 0], 6:], None, None, cache=cache)
        torch.testing.assert_close(rest, full[[2, 0], 6:], **TIGHT)
        with pytest.raises(ValueError, match="recurrent state"):    # a fresh cache mid-sequence
            m(x[:, 5:6], None, None, cache=LayerCache(), key_pos=torch.arange(6.0))


@pytest.mark.parametrize("name", MIXERS)
def test_model_generates_with_the_state_as_it_recomputes(name):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=7, d_model=16, n_layers=2, n_heads=2,
                                    attention=name, init_std=0.3)).double().eval()
    prompts = [torch.randint(0, 7, (n,), generator=torch.Generator().manual_seed(n))
               for n in (1, 3, 7)]
    cached = model.generate(prompts, 10, eos_id=3, use_cache=True)
    full = model.generate(prompts, 10, eos_id=3, use_cache=False)
    assert [c.tolist() for c in cached] == [f.tolist() for f in full]
    pos = torch.arange(9, dtype=F64)
    x = torch.randint(0, 7, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(x[:, :4], pos[:4], cache=cache)]
        steps += [model(x[:, i:i + 1], pos[i:i + 1], cache=cache) for i in range(4, 9)]
        torch.testing.assert_close(torch.cat(steps, dim=1), model(x, pos), **TIGHT)


# ---- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("posenc", ["rope", "alibi", "t5", "xl", "fire", "kerple_log"])
def test_a_scheme_acting_inside_attention_is_refused(posenc):
    with pytest.raises(ConfigError, match=r"model.posenc='%s'.*nope, learned, sincos" % posenc):
        ModelConfig(vocab_size=7, d_model=16, n_heads=2, attention="lstm",
                    posenc=posenc).registry_parts()


@pytest.mark.parametrize("posenc", ["nope", "learned", "sincos"])
def test_schemes_outside_attention_combine(posenc):
    model = Transformer(ModelConfig(vocab_size=7, d_model=16, n_heads=2, n_layers=1,
                                    attention="mamba2", posenc=posenc))
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, 7)


def test_an_encoder_is_refused_and_bad_kwargs_are_named():
    import lengen
    with pytest.raises(ConfigError, match="causal"):
        lengen.resolve({"model": {"attention": "gated_deltanet", "causal": False},
                        "task": {"name": "parity_check"}})
    with pytest.raises(ConfigError, match="n_groups=3 must divide model.n_heads=4"):
        Transformer(ModelConfig(vocab_size=7, d_model=16, n_heads=4, attention="mamba2",
                                attention_kwargs={"n_groups": 3}))
    with pytest.raises(ConfigError, match="d_statee.*d_state"):
        lengen.resolve({"model": {"attention": "mamba2", "attention_kwargs": {"d_statee": 4}},
                        "task": {"name": "flipflop"}})


def test_a_chomsky_task_runs_causally_with_a_mixer():
    import lengen
    from lengen.model.presets import preset
    cfg = lengen.resolve({"model": {"attention": "lstm", "causal": True, "d_model": 16,
                                    "n_heads": 2}, "task": {"name": "parity_check"}})
    assert cfg.config.model.causal
    with pytest.raises(ConfigError, match="needs model.causal=true"):     # a decoder task
        lengen.resolve({"model": {"causal": False}, "task": {"name": "copy"}})
    # the Chomsky paper's LSTM baseline: one LSTM layer of hidden size 256
    cfg = lengen.resolve(dict(preset("deletang2023-lstm"), task={"name": "parity_check"}))
    lstm = Transformer(cfg.config.model).blocks[0].attn.lstm
    assert (lstm.hidden_size, lstm.num_layers) == (256, 1)


@pytest.mark.parametrize("name", MIXERS)
def test_a_mixer_trains_and_is_evaluated_on_a_chomsky_task(name, tmp_path):
    """A causal mixer on an encoder (Chomsky) task trains and is scored end to end: the answer
    sits at placeholders after the whole input, so evaluation accepts the causal reading (it
    refused it once, after training had run); the scores are read at the unseen lengths."""
    import json

    import lengen
    from lengen.eval.evaluate import evaluate
    from lengen.rundir.load import prepare
    from lengen.train import train

    c = lengen.resolve({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "attention": name,
                  "causal": True},
        "task": {"name": "even_pairs", "kwargs": {"max_train_length": 6,
                                                  "max_eval_length": 9}},
        "train": {"steps": 2, "batch_size": 4, "log_every": 1, "progress": False,
                  "threads": 1},
        "eval": {"sequences": 4, "batch_size": 4, "splits": ["len=7", "len=9"]}})
    train(c, str(tmp_path), quiet=True)
    with open(tmp_path / "eval.json") as f:
        rows = json.load(f)
    assert {r["split"] for r in rows} >= {"len=7", "len=9"}
    task, model = prepare(c)
    assert evaluate(model, task, ["len=8"], n_sequences=4, batch_size=4)
    # a decoder task still refuses an encoder: an encoder would see the answer it is scored on
    copy_task, _ = prepare(lengen.resolve({"model": {"d_model": 16, "n_heads": 2},
                                           "task": {"name": "copy"}}))
    encoder = Transformer(ModelConfig(vocab_size=copy_task.vocab_size, d_model=16, n_heads=2,
                                      causal=False))
    with pytest.raises(ConfigError, match="needs a causal decoder"):
        evaluate(encoder, copy_task, ["len=5"], n_sequences=2, batch_size=2)


# ---- training with kept / packed rows, and half precision ----------------------------------

@pytest.mark.parametrize("name", MIXERS)
def test_trains_with_kept_and_packed_rows(name, tmp_path, monkeypatch):
    """A few steps of a decoder task that scores few tokens: training hands the model ``keep``
    and the block packs the needed tokens (the mixer gets them padded: the block's fallback);
    forward(keep=) equals the full forward's rows, values and gradients."""
    import lengen
    from lengen.model import transformer
    from lengen.train import train

    seen = []

    def plan(keep, causal):
        out = plan_rows(keep, causal)
        seen.append(out[0] is not None)                    # packed
        return out

    plan_rows = transformer.plan_rows
    monkeypatch.setattr(transformer, "plan_rows", plan)
    c = lengen.resolve({
        "model": {"d_model": 16, "n_layers": 2, "n_heads": 2, "attention": name},
        "task": {"name": "copy"},
        "train": {"steps": 3, "batch_size": 4, "log_every": 1, "progress": False, "threads": 1,
                  "precision": "bf16"},
        "eval": {"sequences": 4, "batch_size": 4, "splits": ["len=5"]}})
    train(c, str(tmp_path), quiet=True)
    assert seen and any(seen), seen            # keep was handed on, and some batches packed

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=7, d_model=16, n_layers=2, n_heads=2,
                                    attention=name, init_std=0.3))
    tokens = torch.randint(0, 7, (3, 11), generator=torch.Generator().manual_seed(3))
    keep = torch.zeros(3, 11, dtype=torch.bool)
    keep[0, 2] = keep[1, 5] = keep[1, 6] = True            # short rows: packed
    assert plan_rows(keep, True)[0] is not None
    ref, fast = model, copy.deepcopy(model)
    full = ref(tokens)[keep]
    part = fast(tokens, keep=keep)
    torch.testing.assert_close(part, full, atol=1e-5, rtol=1e-5)
    full.square().sum().backward()
    part.square().sum().backward()
    for (n, a), b in zip(ref.named_parameters(), fast.parameters()):
        # packed and padded rows sum in another order (other shapes), and the order also moves
        # with the CPU's vector width: float32 round-off then scales with the gradient's size
        # (|grad| up to ~80 here at init_std 0.3), so the tolerance does too. A packing bug
        # moves gradients by their own size, far above it.
        scale = max(1.0, a.grad.abs().max().item())
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5 * scale, rtol=1e-5,
                                   msg=lambda m: f"{n}: {m}")


def test_is_token_mixer_follows_uses_posenc_in_subclasses():
    from lengen.attention import ATTENTIONS

    class NoScheme(ATTENTIONS["softmax"]):
        uses_posenc = False

    assert NoScheme.is_token_mixer and not ATTENTIONS["softmax"].is_token_mixer
    assert ATTENTIONS["lstm"].is_token_mixer
