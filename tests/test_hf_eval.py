"""``lengen eval --hf PATH --task NAME --out DIR`` (lengen.runs.evaluate_hf, lengen.hf.load): a
local Hugging Face checkpoint evaluated on lengen's length sweeps and perplexity protocol gives
the rows of the same weights evaluated as a lengen run; transformers' own RoPE scaling is applied
as transformers computes it; lengen samplers apply through the backbone wrapper; the checkpoint's
own tokenizer scores text; vocabularies, outputs and flags that do not fit are refused. Tiny
models trained or built here; no hub access."""
from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")
from transformers import (AutoConfig, AutoModelForCausalLM, LlamaForCausalLM,  # noqa: E402
                          PreTrainedTokenizerFast)

import lengen  # noqa: E402
from lengen.cli import main  # noqa: E402
from lengen.errors import ConfigError  # noqa: E402
from lengen.hf.load import load_checkpoint  # noqa: E402
from lengen.runs import evaluate_hf, evaluate_run  # noqa: E402
from lengen.tasks import build_task  # noqa: E402

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64}
GPT2 = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 256}
SPLITS = ["len=3", "len=8", "len=12"]
EVAL = ["--splits", *SPLITS, "--sequences", "8", "--batch-size", "4"]


def train_run(path, hf_config):
    cfg = lengen.resolve({"task": {"name": "copy"},
                          "model": {"backbone": "hf", "hf_config": hf_config},
                          "train": {"steps": 3, "batch_size": 4, "progress": False,
                                    "warmup_steps": 1},
                          "eval": {"splits": SPLITS, "sequences": 8, "batch_size": 4}})
    lengen.train(cfg, str(path), quiet=True)
    return str(path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A Llama trained 3 steps on copy as a model.backbone=hf run, exported as a stock Llama."""
    d = tmp_path_factory.mktemp("hfeval")
    run = train_run(d / "run", LLAMA)
    assert main(["export", run, str(d / "llama"), "--to", "llama"]) == 0
    return run, str(d / "llama"), d


def load(path):
    with open(path) as f:
        return json.load(f)


def rows_of(path):
    return [(r["split"], r["metric"], r["value"]) for r in load(path)]


def test_checkpoint_rows_equal_the_runs_rows(exported, tmp_path):
    run, ckpt, _ = exported
    assert isinstance(AutoModelForCausalLM.from_pretrained(ckpt), LlamaForCausalLM)
    want = [(r["split"], r["metric"], r["value"]) for r in evaluate_run(run, plot=False)]
    out = tmp_path / "out"
    assert main(["eval", "--hf", ckpt, "--task", "copy", *EVAL, "--out", str(out)]) == 0
    assert rows_of(out / "eval.json") == want
    assert (out / "eval.csv").exists() and (out / "eval.png").exists()
    row = load(out / "eval.json")[0]
    assert row["pe"] == "hf:llama" and row["run"] == "llama" and row["task"] == "copy"
    assert row["checkpoint"] == os.path.abspath(ckpt)


def test_rope_scaling_is_transformers_own(exported):
    _, ckpt, _ = exported
    scaled = load_checkpoint(ckpt, rope_scaling={"rope_type": "linear", "factor": 2})
    plain = load_checkpoint(ckpt)
    config = AutoConfig.from_pretrained(ckpt)
    config.rope_parameters = {"rope_type": "linear", "factor": 2.0,
                              "rope_theta": config.rope_parameters["rope_theta"]}
    ref = LlamaForCausalLM(config).eval()
    with torch.no_grad():                       # weights far from init so RoPE shows
        for m in (scaled.hf, plain.hf, ref):
            g = torch.Generator().manual_seed(0)
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1 if p.dim() == 1 else 0))
    x = torch.randint(0, 50, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = scaled(x)
        torch.testing.assert_close(got, ref(x).logits, rtol=0, atol=1e-5)
        # = the unscaled model at positions t / 2 (linear scaling divides positions)
        torch.testing.assert_close(got, plain(x, torch.arange(20.0) / 2), rtol=0, atol=1e-5)
        assert not torch.allclose(got, plain(x), atol=1e-3)
    with pytest.raises(ConfigError, match="rope_type one of linear, dynamic, yarn, llama3"):
        load_checkpoint(ckpt, rope_scaling={"rope_type": "ntk", "factor": 2})


def test_rope_scaling_and_positions_through_the_cli(exported, tmp_path):
    _, ckpt, _ = exported
    assert main(["eval", "--hf", ckpt, "--task", "copy", *EVAL, "--out", str(tmp_path / "a"),
                 "--rope-scaling", "{rope_type: linear, factor: 2}"]) == 0
    assert main(["eval", "--hf", ckpt, "--task", "copy", *EVAL, "--out", str(tmp_path / "b"),
                 "--positions", "interpolate"]) == 0
    rows = load(tmp_path / "b" / "eval.json")
    assert {r["positions"] for r in rows} == {"interpolate"}
    a = load(tmp_path / "a" / "eval.json")
    assert {r["rope_scaling"] for r in a} == {json.dumps({"rope_type": "linear", "factor": 2})}


def test_gpt2_backbone_exports_with_to_hf_and_refuses_fractional_positions(exported, capsys):
    _, _, d = exported
    run = train_run(d / "gpt2-run", GPT2)
    assert main(["export", run, str(d / "gpt2-llama"), "--to", "llama"]) == 2
    assert "not a Llama; export it with --to hf" in capsys.readouterr().err
    assert main(["export", run, str(d / "gpt2")]) == 0
    _, _, model = lengen.load_run(run)
    loaded = load_checkpoint(str(d / "gpt2"))
    x = torch.randint(0, model.cfg.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    with pytest.raises(ConfigError, match="--positions=warp gives fractional positions"):
        evaluate_hf(str(d / "gpt2"), "copy", str(d / "gpt2-out"), splits=SPLITS, sequences=4,
                    positions="warp")
    rows = evaluate_hf(str(d / "gpt2"), "copy", str(d / "gpt2-out"), splits=SPLITS,
                       sequences=8, batch_size=4, plot=False)
    want = evaluate_run(run, plot=False)
    assert [(r["split"], r["metric"], r["value"]) for r in rows] == \
        [(r["split"], r["metric"], r["value"]) for r in want]


def test_a_run_with_an_hf_backbone_has_no_attention_heatmap(exported, capsys):
    run, _, _ = exported
    assert main(["plot", "attention", run, "--split", "len=3"]) == 2
    assert "Hugging Face backbone" in capsys.readouterr().err


def corpus(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text("the quick brown fox jumps over the lazy dog.\n" * 100)
    return {"corpus": "files", "data_files": {s: str(f) for s in ("train", "validation", "test")},
            "seq_len": 16, "eval_lengths": [16, 32], "max_eval_tokens": 96,
            "cache_dir": str(tmp_path / "cache")}


def checkpoint_with_tokenizer(path):
    """A random tiny Llama saved with a word-level tokenizer of its own."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog.", "<unk>", "<eos>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(vocab_size=len(words), **LLAMA))
    model.save_pretrained(path)
    return model.eval(), len(words)


def test_text_perplexity_with_the_checkpoints_own_tokenizer(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    model, vocab = checkpoint_with_tokenizer(ckpt)
    kw = corpus(tmp_path)
    out = tmp_path / "out"
    assert main(["eval", "--hf", ckpt, "--task", "text", "--task-kwargs", json.dumps(kw),
                 "--out", str(out)]) == 0
    rows = load(out / "eval.json")
    assert {(r["split"], r["metric"]) for r in rows} == {
        (s, m) for s in ("len=16", "len=32") for m in ("ppl", "nll")}
    assert {r["tokenizer"] for r in rows} == {"hf"} and (out / "eval.png").exists()
    # the reference: transformers' own forward (default positions) over the same windows
    task = build_task("text", **kw, tokenizer="hf", tokenizer_kwargs={"path": ckpt})
    assert task.vocab_size == vocab
    for split in ("len=16", "len=32"):
        nll, n = 0.0, 0
        for batch in task.eval_batches(split, 1000, 4, 1234):
            with torch.no_grad():
                logits = model(batch.inputs).logits
            m = batch.eval_mask
            nll += torch.nn.functional.cross_entropy(logits[m], batch.targets[m],
                                                     reduction="sum").item()
            n += int(m.sum())
        got = {r["metric"]: r["value"] for r in rows if r["split"] == split}
        assert got["nll"] == pytest.approx(nll / n, rel=1e-5)


def test_refusals(exported, tmp_path, capsys):
    run, ckpt, _ = exported
    kw = corpus(tmp_path)
    # the checkpoint (copy's 104 ids) cannot score bytes (257 ids)
    with pytest.raises(ConfigError, match=r"uses ids 0..256, but the checkpoint .* vocabulary "
                                          r"of 104"):
        evaluate_hf(ckpt, "text", str(tmp_path / "o"), task_kwargs=dict(kw, tokenizer="bytes"))
    with pytest.raises(ConfigError, match="has no tokenizer.*--task-kwargs"):
        evaluate_hf(ckpt, "text", str(tmp_path / "o"), task_kwargs=kw)
    # never into a run's (or the checkpoint's own) folder
    with pytest.raises(ConfigError, match="would overwrite eval.json / eval.csv"):
        evaluate_hf(ckpt, "copy", run, splits=SPLITS)
    with pytest.raises(ConfigError, match="not a Hugging Face checkpoint directory"):
        evaluate_hf(str(tmp_path), "copy", str(tmp_path / "o"))
    with pytest.raises(ConfigError, match="encoder task"):
        evaluate_hf(ckpt, "parity_check", str(tmp_path / "o"))
    for argv, msg in ((["eval", "--hf", ckpt, "--out", str(tmp_path / "o")], "needs --task"),
                      (["eval", run, "--task", "copy"], "--task apply to --hf PATH only"),
                      (["eval"], "needs a RUN_DIR"),
                      (["eval", run, "--hf", ckpt, "--task", "copy", "--out", "x"],
                       "not both")):
        assert main(argv) == 2
        assert msg in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o")


def test_a_lengen_export_is_evaluated_as_its_run(tmp_path):
    """A ``lengen export --to hf`` directory (LengenForCausalLM) evaluates as the run it came
    from: the lengen Transformer inside it, with its own sampler."""
    cfg = lengen.resolve({"task": {"name": "copy"},
                          "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "posenc": "rope"},
                          "train": {"steps": 2, "batch_size": 4, "progress": False},
                          "eval": {"splits": SPLITS, "sequences": 8, "batch_size": 4}})
    run = str(tmp_path / "run")
    lengen.train(cfg, run, quiet=True)
    assert main(["export", run, str(tmp_path / "hf")]) == 0
    rows = evaluate_hf(str(tmp_path / "hf"), "copy", str(tmp_path / "out"), splits=SPLITS,
                       sequences=8, batch_size=4, plot=False)
    assert [(r["split"], r["metric"], r["value"]) for r in rows] == \
        [(r["split"], r["metric"], r["value"]) for r in evaluate_run(run, plot=False)]
    assert {r["pe"] for r in rows} == {"rope"}
    with pytest.raises(ConfigError, match="--rope-scaling applies to transformers' RoPE models"):
        load_checkpoint(str(tmp_path / "hf"), rope_scaling={"rope_type": "linear", "factor": 2})
