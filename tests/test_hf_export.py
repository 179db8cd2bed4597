"""lengen models in Hugging Face transformers (lengen.hf): every scheme x attention kind (and the
position samplers) exported as a LengenForCausalLM loads back through AutoModelForCausalLM with
lengen's logits and generations; Llama-shaped configs export as a stock LlamaForCausalLM with
equal logits (every RoPE scaling, tied or not) that loads without lengen; everything else is
refused naming what Llama cannot express. Tiny random models built here; no hub access."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: E402

import lengen  # noqa: E402
import lengen.hf  # noqa: E402
from lengen.attention import ATTENTIONS  # noqa: E402
from lengen.cli import main  # noqa: E402
from lengen.errors import ExportError  # noqa: E402
from lengen.hf import LengenForCausalLM, llama_refusals, to_hf, to_llama  # noqa: E402
from lengen.model.config import combines  # noqa: E402
from lengen.posenc import POSENCS  # noqa: E402
from lengen.samplers import SAMPLERS  # noqa: E402
from reference_loops import sampler_test_kwargs  # noqa: E402

V = 13


def tiny(**kw) -> lengen.Transformer:
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, d_model=16, n_heads=2, n_layers=2, d_ff=24)
    cfg.update(kw)
    model = lengen.Transformer(lengen.ModelConfig(**cfg)).eval()
    with torch.no_grad():                  # norms away from 1 so a dropped norm weight shows
        for name, p in model.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or "norm_f" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


def roundtrip(hf_model, tmp_path, name="out"):
    out = tmp_path / name
    hf_model.save_pretrained(out)
    assert {"config.json", "model.safetensors"} <= set(os.listdir(out))
    return AutoModelForCausalLM.from_pretrained(out).eval(), out


def tokens(T=11, B=2, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# every pair the config does not refuse (lengen.model.config.pair_refusal)
@pytest.mark.parametrize("attention,posenc", [(a, p) for p in POSENCS for a in ATTENTIONS
                                              if combines(ATTENTIONS[a], POSENCS[p])])
def test_every_scheme_and_kind_loads_with_equal_logits(posenc, attention, tmp_path):
    model = tiny(posenc=posenc, attention=attention, tie_embeddings=posenc == "rope")
    loaded, _ = roundtrip(to_hf(model), tmp_path)
    assert isinstance(loaded, LengenForCausalLM)
    x = tokens()
    with torch.no_grad():
        want = model(x)
        got = loaded(x).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # and with explicit fractional positions (HF's position_ids / lengen's positions)
    pos = torch.arange(11, dtype=torch.float32) * 0.5
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, positions=pos).logits, model(x, pos), rtol=0,
                                   atol=1e-5)


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_every_sampler_survives_export(sampler, tmp_path):
    model = tiny(posenc="rope", positions=sampler,
                 positions_kwargs=sampler_test_kwargs(sampler, vocab_size=V))
    loaded, _ = roundtrip(to_hf(model), tmp_path)
    x = tokens(T=20)
    torch.manual_seed(5)
    with torch.no_grad():
        want = model(x)
    torch.manual_seed(5)                        # a sampler drawing at evaluation draws the same
    with torch.no_grad():
        got = loaded(x).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attention,posenc", [("tra", "nope"), ("softmax", "rope"),
                                              ("fot", "alibi"), ("cope", "nope")])
def test_generate_is_lengens(attention, posenc, tmp_path):
    model = tiny(attention=attention, posenc=posenc)
    loaded, _ = roundtrip(to_hf(model), tmp_path)
    x = tokens(T=6, B=3)
    out = loaded.generate(x, max_new_tokens=5)
    want = model.generate(x, 5)
    assert out.shape == (3, 11)
    assert torch.equal(out[:, :6], x)
    assert [r.tolist() for r in out[:, 6:]] == [w.tolist() for w in want]
    # left padding (HF's convention): each row continues its own prompt
    mask = torch.ones_like(x)
    mask[0, :2] = 0
    out = loaded.generate(x, attention_mask=mask, max_new_tokens=4, pad_token_id=0)
    want = model.generate([x[0, 2:], x[1], x[2]], 4)
    assert [r.tolist() for r in out[:, 6:]] == [w.tolist() for w in want]
    with pytest.raises(ValueError, match="num_beams"):
        loaded.generate(x, max_new_tokens=2, num_beams=3)


def test_labels_give_the_shifted_loss(tmp_path):
    model = tiny(posenc="rope")
    hf = to_hf(model)
    x = tokens()
    out = hf(x, labels=x)
    want = torch.nn.functional.cross_entropy(model(x)[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, want)


ROPE_SCALINGS = [
    {},
    {"base": 500.0},
    {"scaling": "linear", "factor": 3.0},
    {"scaling": "dynamic", "factor": 4.0, "original_length": 8},
    {"scaling": "yarn", "factor": 4.0, "original_length": 8},
    {"scaling": "yarn", "factor": 4.0, "original_length": 8, "beta_fast": 8.0,
     "beta_slow": 2.0, "attention_factor": 1.3},
    {"scaling": "llama3", "factor": 4.0, "original_length": 8},
    {"scaling": "llama3", "factor": 2.0, "original_length": 6, "low_freq_factor": 2.0,
     "high_freq_factor": 3.0},
    {"scaling": "longrope", "factor": 4.0, "original_length": 8,
     "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0]},
]


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("rope", ROPE_SCALINGS, ids=lambda kw: kw.get("scaling", "none"))
def test_llama_shaped_models_export_as_stock_llama(rope, tie, tmp_path):
    model = tiny(posenc="rope", posenc_kwargs=rope, tie_embeddings=tie)
    assert llama_refusals(model) == []
    loaded, out = roundtrip(to_llama(model), tmp_path)
    assert type(loaded) is LlamaForCausalLM
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    for T in (5, 30):                           # within and past L0 (dynamic / longrope switch)
        x = tokens(T=T)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x).logits, model(x), rtol=0, atol=1e-5)


def test_stock_llama_greedy_generate_equals_lengens(tmp_path):
    model = tiny(posenc="rope", tie_embeddings=True)
    loaded, _ = roundtrip(to_llama(model), tmp_path)
    x = tokens(T=6, B=2)
    out = loaded.generate(x, max_new_tokens=6, do_sample=False, pad_token_id=0)
    want = model.generate(x, 6)
    assert [r.tolist() for r in out[:, 6:]] == [w.tolist() for w in want]


def test_stock_llama_loads_without_lengen(tmp_path):
    model = tiny(posenc="rope", posenc_kwargs={"scaling": "yarn", "factor": 2.0,
                                               "original_length": 8})
    _, out = roundtrip(to_llama(model), tmp_path)
    x = tokens(T=12)
    with torch.no_grad():
        want = model(x)
    torch.save({"x": x, "want": want}, tmp_path / "probe.pt")
    code = ("import sys; sys.modules['lengen'] = None\n"       # importing lengen would fail
            "import torch; from transformers import AutoModelForCausalLM\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}).eval()\n"
            f"p = torch.load({str(tmp_path / 'probe.pt')!r}, weights_only=True)\n"
            "with torch.no_grad(): d = (m(p['x']).logits - p['want']).abs().max().item()\n"
            "print(type(m).__name__, d)\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH="")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    name, diff = res.stdout.split()[-2:]
    assert name == "LlamaForCausalLM" and float(diff) <= 1e-5


REFUSED = [
    ({"attention": "tra", "posenc": "rope"}, "model.attention=tra"),
    ({"attention": "softmax", "posenc": "alibi"}, "model.posenc=alibi"),
    ({"posenc": "nope"}, "model.posenc=nope"),
    ({"posenc": "rope", "posenc_kwargs": {"rotary_fraction": 0.5}}, "rotary_fraction=0.5"),
    ({"posenc": "rope", "mlp": "gelu"}, "model.mlp=gelu"),
    ({"posenc": "rope", "norm": "layer"}, "model.norm=layer"),
    ({"posenc": "rope", "norm_position": "sandwich"}, "model.norm_position=sandwich"),
    ({"posenc": "rope", "final_norm": False}, "model.final_norm=false"),
    ({"posenc": "rope", "embed_scale": True}, "model.embed_scale=true"),
    ({"posenc": "rope", "causal": False}, "model.causal=false"),
    ({"posenc": "rope", "positions": "randomized", "positions_kwargs": {"max_length": 64}},
     "model.positions=randomized"),
]


@pytest.mark.parametrize("kw,match", REFUSED, ids=[m for _, m in REFUSED])
def test_llama_refuses_what_it_cannot_express(kw, match):
    model = tiny(**kw)
    with pytest.raises(ExportError, match=f"cannot be written as a stock LlamaForCausalLM.*"
                                          f"{match}.*--to hf"):
        to_llama(model)


def test_refusal_names_every_reason():
    why = llama_refusals(tiny(attention="fot", posenc="fire", mlp="relu", norm="layer"))
    assert [w.split(" ")[0] for w in why] == ["model.attention=fot", "model.posenc=fire",
                                              "model.mlp=relu", "model.norm=layer"]
    # randomized positions in their identity evaluation mode are Llama's positions
    assert llama_refusals(tiny(posenc="rope", positions="randomized",
                               positions_kwargs={"max_length": 64,
                                                 "eval_mode": "identity"})) == []


def test_cli_export_hf_and_llama(tmp_path, capsys):
    run = str(tmp_path / "run")
    common = ["task.name=copy", "task.kwargs.max_train_length=5", "model.d_model=16",
              "model.n_heads=2", "model.n_layers=1", "train.steps=2", "train.batch_size=4",
              "train.progress=false", "train.threads=1", "eval.sequences=4"]
    assert main(["train", "--run-dir", run, "model.posenc=rope", "model.attention=softmax",
                 *common]) == 0
    assert main(["export", run, str(tmp_path / "hf")]) == 0
    assert main(["export", run, str(tmp_path / "llama"), "--to", "llama"]) == 0
    cfg, _task, model = lengen.load_run(run)
    x = torch.randint(0, cfg.model.vocab_size, (2, 9))
    for name, cls in (("hf", LengenForCausalLM), ("llama", LlamaForCausalLM)):
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / name).eval()
        assert type(loaded) is cls
        with torch.no_grad():
            torch.testing.assert_close(loaded(x).logits, model(x), rtol=0, atol=1e-5)
    assert main(["export", run, str(tmp_path / "hf")]) == 2          # never overwrites
    assert "not an empty directory" in capsys.readouterr().err
    tra = str(tmp_path / "tra")
    assert main(["train", "--run-dir", tra, "model.posenc=nope", "model.attention=tra",
                 *common]) == 0
    capsys.readouterr()
    assert main(["export", tra, str(tmp_path / "tra-llama"), "--to", "llama"]) == 2
    err = capsys.readouterr().err
    assert "model.attention=tra" in err and "model.posenc=nope" in err and "--to hf" in err
    assert not os.path.exists(tmp_path / "tra-llama")
    assert main(["export", tra, str(tmp_path / "tra-hf")]) == 0


def test_import_lengen_does_not_import_transformers():
    code = ("import sys, lengen, lengen.cli, lengen.train.loop\n"
            "assert 'transformers' not in sys.modules and 'wandb' not in sys.modules\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
