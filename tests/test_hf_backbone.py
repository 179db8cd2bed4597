"""Hugging Face models as lengen backbones (model.backbone=hf, lengen.model.hf_backbone): built
from a config, the same logits as the transformers model itself, lengen's (fractional, per-row)
positions reaching Llama's rotary embedding, KV-cache decoding equal to recomputation, GPT-2's
learned table refusing positions it has no row for, training / evaluation / generation / exact
resume through lengen's own loop, and clear errors for what does not apply. Tiny models (hidden
32, 2 layers) built here; no hub access."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

import lengen  # noqa: E402
from lengen.errors import ConfigError  # noqa: E402
from lengen.model import HFBackbone, ModelConfig  # noqa: E402
from lengen.rundir.checkpoint import latest_checkpoint  # noqa: E402
from lengen.rundir.load import prepare  # noqa: E402
from lengen.samplers import SAMPLERS  # noqa: E402
from reference_loops import sampler_test_kwargs  # noqa: E402

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64}
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 256}
V = 13
SPLITS = ["len=3", "len=8", "len=12"]


def model(hf_config=LLAMA, **kw) -> HFBackbone:
    torch.manual_seed(0)
    m = HFBackbone(ModelConfig(vocab_size=V, backbone="hf", hf_config=hf_config, **kw)).eval()
    with torch.no_grad():       # weights far from init's 0.02, so positions move the logits
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1 if p.dim() == 1 else 0))
    return m


def cfg(task="copy", hf_config=LLAMA, model_kw=None, task_kw=None, steps=3, **train_kw):
    return lengen.resolve({
        "task": {"name": task, "kwargs": task_kw or {}},
        "model": {"backbone": "hf", "hf_config": hf_config, **(model_kw or {})},
        "train": {"steps": steps, "batch_size": 4, "progress": False, "log_every": 1,
                  "warmup_steps": 1, **train_kw},
        "eval": {"sequences": 8, "batch_size": 4,
                 **({"splits": SPLITS} if task in ("copy", "reverse", "sort") else {})}}).config


def tokens(B=2, T=11, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# -- building ----------------------------------------------------------------------------------
@pytest.mark.parametrize("hf_config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_built_from_the_config_with_sizes_and_vocab_filled_in(hf_config):
    c = cfg(hf_config=hf_config)
    task, m = prepare(c)
    assert isinstance(m, HFBackbone) and m.hf.config.model_type == hf_config["model_type"]
    assert m.hf.config.vocab_size == task.vocab_size == c.model.vocab_size
    assert (c.model.d_model, c.model.n_layers, c.model.n_heads) == (32, 2, 2)
    assert c.model.d_ff == (64 if hf_config is LLAMA else 128)          # GPT-2: 4 x n_embd
    # the resolved config records hf_config, so the run rebuilds from config.json
    again = lengen.resolve(c.to_dict()).config
    assert again.to_dict() == c.to_dict() and again.model.hf_config == hf_config
    _, m2 = prepare(again)
    for (k, a), (k2, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert k == k2 and torch.equal(a, b)                            # seeded init


@pytest.mark.parametrize("hf_config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_logits_equal_the_hf_models_own(hf_config):
    m, x = model(hf_config), tokens()
    with torch.no_grad():
        want = m.hf(x).logits                    # transformers' own default positions 0..T-1
        torch.testing.assert_close(m(x), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(m(x, torch.arange(11.0)), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(m(x, torch.arange(11).expand(2, -1)), want, rtol=0,
                                   atol=1e-6)


def test_fractional_positions_reach_llamas_rotation():
    """Positions t / 2 through the backbone == transformers' own linear RoPE scaling (factor 2:
    inverse frequencies halved) at positions t, with the same weights: the float positions reach
    the rotation unrounded, end to end."""
    m, x = model(), tokens(T=16)
    scaled_cfg = AutoConfig.for_model(vocab_size=V, **LLAMA, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    scaled = AutoModelForCausalLM.from_config(scaled_cfg).eval()
    scaled.load_state_dict(m.hf.state_dict())
    with torch.no_grad():
        got = m(x, torch.arange(16.0) / 2)
        torch.testing.assert_close(got, scaled(x).logits, rtol=0, atol=1e-5)
        assert not torch.allclose(got, m(x), atol=1e-3)           # positions do matter


@pytest.mark.parametrize("hf_config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_positions_that_do_not_step_by_one_stay_one_causal_sequence(hf_config):
    """Without lengen's all-ones attention mask, transformers reads position ids that do not step
    by 1 as packed sequences and masks between them: per-row randomized positions must give each
    row what it gives alone, and a later token must not change earlier logits."""
    m, x = model(hf_config), tokens(B=3, T=12)
    g = torch.Generator().manual_seed(3)
    pos = torch.stack([torch.randperm(60, generator=g)[:12].sort().values for _ in range(3)])
    pos = pos.float() if hf_config is GPT2 else pos.float() + 0.25 * torch.rand(3, 12, generator=g)
    with torch.no_grad():
        full = m(x, pos)
        for b in range(3):
            torch.testing.assert_close(full[b:b + 1], m(x[b:b + 1], pos[b]), rtol=0, atol=1e-5)
        y = x.clone()
        y[:, 7:] = (y[:, 7:] + 1) % V
        torch.testing.assert_close(m(y, pos)[:, :7], full[:, :7], rtol=0, atol=1e-5)
        # and the packing transformers infers without a mask (and without a cache) does change
        # the numbers
        hf_alone = m.hf(input_ids=x, position_ids=pos.round().long() if hf_config is GPT2
                        else pos, use_cache=False).logits
        assert not torch.allclose(hf_alone, full, atol=1e-4)


# -- decoding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("hf_config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_cached_steps_equal_recomputation(hf_config):
    m, x = model(hf_config), tokens(B=2, T=10)
    pos = torch.tensor([[0, 2, 3, 7, 9, 10, 14, 15, 20, 21], [1, 2, 4, 5, 6, 9, 11, 12, 13, 30]])
    pos = pos.float() if hf_config is GPT2 else pos * 0.7
    with torch.no_grad():
        full = m(x, pos)
        cache = m.new_cache(10)
        steps = [m(x[:, :6], pos[:, :6], cache=cache)]
        for t in range(6, 10):
            steps.append(m(x[:, t:t + 1], pos[:, t:t + 1], cache=cache))
        assert cache.length == 10
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("hf_config,positions,kwargs", [
    (LLAMA, "identity", {}), (LLAMA, "randomized", {"max_length": 64}),
    (GPT2, "randomized", {"max_length": 64})], ids=["llama", "llama-randomized", "gpt2-randomized"])
def test_greedy_generation_with_the_cache_equals_recomputation(hf_config, positions, kwargs):
    m = model(hf_config, positions=positions, positions_kwargs=kwargs)
    prompts = [tokens(B=1, T=n, seed=n)[0] for n in (3, 5, 5, 8)]
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    cached = m.generate(prompts, 6, eos_id=0, generator=g1)
    recomputed = m.generate(prompts, 6, eos_id=0, generator=g2, use_cache=False)
    assert [c.tolist() for c in cached] == [r.tolist() for r in recomputed]
    # explicit per-row positions [B, T] (fractional for Llama), rows dropped at EOS on the way
    pos = torch.sort(torch.rand(4, 14, generator=torch.Generator().manual_seed(1)) * 40).values
    pos = pos.round() if hf_config is GPT2 else pos
    a = m.generate(prompts, 6, eos_id=3, positions=pos)
    b = m.generate(prompts, 6, eos_id=3, positions=pos, use_cache=False)
    assert [x.tolist() for x in a] == [y.tolist() for y in b]


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("positions", ["interpolate", "warp"])
def test_gpt2_refuses_fractional_samplers_before_training(positions):
    with pytest.raises(ConfigError, match=rf"model.positions={positions} gives fractional "
                                          rf"positions.*learned table.*0..255"):
        cfg(hf_config=GPT2, model_kw={"positions": positions})


def test_gpt2_refuses_fractional_or_out_of_range_positions_in_forward():
    m, x = model(GPT2), tokens(T=4)
    with pytest.raises(ConfigError, match="integer positions.*0.5"):
        m(x, torch.tensor([0, 0.5, 1, 2]))
    with pytest.raises(ConfigError, match=r"n_positions=256: positions 0..255"):
        m(x, torch.tensor([0.0, 1, 2, 256]))
    with pytest.raises(ConfigError, match="n_positions=256"):
        cfg(hf_config=GPT2, model_kw={"positions": "randomized",
                                      "positions_kwargs": {"max_length": 300}})
    with pytest.raises(ConfigError, match="model.positions=warp gives fractional"):
        HFBackbone(ModelConfig(vocab_size=V, backbone="hf", hf_config=GPT2, positions="warp",
                               positions_kwargs={"train_length": 8}))


@pytest.mark.parametrize("model_kw,match", [
    ({"posenc": "rope"}, r"model.posenc='rope' does not apply with model.backbone=hf"),
    ({"attention": "tra", "dropout": 0.1}, r"model.dropout=0.1, model.attention='tra' do not "),
    ({"hf_config": dict(LLAMA, hiden_size=8)}, "hf_config.hiden_size.*Did you mean 'hidden_size'"),
    ({"hf_config": dict(LLAMA, vocab_size=50)}, r"model.hf_config.vocab_size.*model.vocab_size"),
    ({"hf_config": dict(LLAMA, model_type="bert")}, r"model_type must be one of llama, gpt2"),
    ({"hf_config": {"hidden_size": 8}}, r"model_type must be one of"),
    ({"d_model": 64}, r"model.d_model=64 disagrees with model.hf_config \(which gives 32\)"),
])
def test_what_does_not_apply_is_refused(model_kw, match):
    kw = dict({"hf_config": LLAMA}, **model_kw)
    with pytest.raises(ConfigError, match=match):
        cfg(hf_config=kw.pop("hf_config"), model_kw=kw)


def test_hf_config_needs_backbone_hf_and_encoder_tasks_are_refused():
    with pytest.raises(ConfigError, match="model.hf_config applies only with model.backbone=hf"):
        lengen.resolve({"model": {"hf_config": LLAMA}})
    with pytest.raises(ConfigError, match="encoder task.*AutoModelForCausalLM"):
        cfg(task="parity_check")


def test_lengen_imports_without_transformers_and_says_what_to_install():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import lengen\n"
            "from lengen.errors import ConfigError\n"
            "try:\n"
            "    lengen.resolve({'task': {'name': 'copy'}, 'model': {'backbone': 'hf', "
            "'hf_config': {'model_type': 'llama'}}})\n"
            "except ConfigError as e:\n"
            "    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr
    assert 'ERR model.backbone=hf needs Hugging Face transformers: pip install "lengen[hf]"' \
        in out.stdout
    probe = "import sys, lengen, lengen.model; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("name", [n for n, c in SAMPLERS.items() if c.integer_positions])
def test_samplers_declared_integer_give_integers(name):
    """What lets a sampler index GPT-2's table (integer_positions) is true of what it returns."""
    s = SAMPLERS[name](**sampler_test_kwargs(name, vocab_size=V))
    x = tokens(B=3, T=20)
    for training in (True, False):
        pos = s.sample(20, training=training, batch_size=3, generator=torch.Generator(),
                       lengths=torch.full((3,), 20), tokens=x)
        assert torch.equal(pos, pos.round()), (name, training)


# -- through lengen's training loop, evaluation, generation and resume ----------------------------
@pytest.mark.parametrize("hf_config,positions", [(LLAMA, "warp"), (GPT2, "identity")],
                         ids=["llama-warp", "gpt2"])
def test_trains_evaluates_and_generates_on_copy(hf_config, positions, tmp_path):
    from lengen.eval.generation import run_generate
    from lengen.runs import evaluate_run, reevaluate

    run = str(tmp_path / "run")
    c = cfg(hf_config=hf_config, model_kw={"positions": positions})
    m, _, rows = lengen.train(c, run, quiet=True)
    assert isinstance(m, HFBackbone)
    assert {r["split"] for r in rows} == set(SPLITS)
    assert {r["metric"] for r in rows} >= {"seq_acc", "token_acc", "nll"}
    assert {r["pe"] for r in rows} == {f"hf:{hf_config['model_type']}"}
    again = evaluate_run(run, plot=False)
    assert [(r["split"], r["metric"], r["value"]) for r in again] == \
        [(r["split"], r["metric"], r["value"]) for r in rows]
    text = run_generate(run, split="len=3", n=2)
    assert "copy: len=3" in text and "/2 right" in text
    # a sweep re-evaluating the finished run with other evaluation settings (no retraining)
    c.eval.sequences = 4
    fewer = reevaluate(c, run)
    assert {r["sequences"] for r in fewer} == {4} and {r["split"] for r in fewer} == set(SPLITS)


@pytest.mark.parametrize("hf_config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_resume_reproduces_uninterrupted_training(hf_config, tmp_path):
    # GPT-2's dropout (0.1 by default) draws from torch's RNG: every stream must be restored
    c = cfg(hf_config=hf_config, steps=6)
    lengen.train(c, str(tmp_path / "a"), quiet=True)
    _, _, partial = lengen.train(c, str(tmp_path / "b"), stop_at=3, quiet=True)
    assert partial is None and latest_checkpoint(str(tmp_path / "b")).endswith("step_0000003")
    lengen.train(c, str(tmp_path / "b"), quiet=True)
    wa = load_file(str(tmp_path / "a" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


@pytest.mark.parametrize("task,task_kw", [("flipflop", {}), ("addition", {}), ("text", None)])
def test_other_tasks_build_and_train_two_steps(task, task_kw, tmp_path):
    if task == "text":
        f = tmp_path / "corpus.txt"
        f.write_text("the quick brown fox jumps over the lazy dog. " * 200)
        task_kw = {"corpus": "files", "data_files": {s: str(f) for s in
                                                     ("train", "validation", "test")},
                   "tokenizer": "bytes", "seq_len": 32, "eval_lengths": [32, 64],
                   "max_eval_tokens": 128, "cache_dir": str(tmp_path / "cache")}
    m, _, rows = lengen.train(cfg(task=task, task_kw=task_kw, steps=2),
                              str(tmp_path / "run"), quiet=True)
    assert isinstance(m, HFBackbone) and rows
    if task == "text":
        from lengen.runs import evaluate_run

        assert {r["metric"] for r in rows} == {"ppl", "nll"}
        assert {r["length"] for r in rows} == {32, 64}
        # lengen eval RUN draws perplexity vs length for a text run (not an accuracy plot)
        again = evaluate_run(str(tmp_path / "run"))
        assert [r["value"] for r in again] == [r["value"] for r in rows]
        assert (tmp_path / "run" / "reeval.png").exists()
