"""The text task and its corpora: WikiText layouts (Parquet, raw), the offline KJV corpus, training
windows, in-order evaluation windows, bad input, and a short training run that learns."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import lengen
from lengen.data.corpus import KJV, FilesCorpus, WikiText, WikiText2, load_corpus
from lengen.registry import UnknownNameError
from lengen.tasks import build_task
from lengen.tasks.text import eval_windows

ROWS = {  # hub-style rows: a line keeps its newline, a blank line is ""
    "train": [" = Valkyria = \n", "", " Senjo no Valkyria 3 is a game . \n", "", " = = Plot = = \n",
              " It is set in 1935 . \n"] * 3,
    "validation": [" = Tower Building = \n", "", " The building is tall . \n"],
    "test": [" = Robert Boulter = \n", "", " He is an actor . \n", ""],
}


def raw_text(rows):
    return "".join(r if r.endswith("\n") else r + "\n" for r in rows)


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": rows}), str(path))


@pytest.fixture
def parquet_dir(tmp_path):
    d = tmp_path / "hub" / "wikitext-103-raw-v1"
    half = len(ROWS["train"]) // 2
    write_parquet(d / "train-00000-of-00002.parquet", ROWS["train"][:half])
    write_parquet(d / "train-00001-of-00002.parquet", ROWS["train"][half:])
    write_parquet(d / "validation-00000-of-00001.parquet", ROWS["validation"])
    write_parquet(d / "test-00000-of-00001.parquet", ROWS["test"])
    return tmp_path / "hub"


@pytest.fixture
def raw_dir(tmp_path):
    d = tmp_path / "zip" / "wikitext-103-raw"
    d.mkdir(parents=True)
    for split, name in WikiText.RAW.items():
        (d / name).write_text(raw_text(ROWS[split]), encoding="utf-8")
    return tmp_path / "zip"


def split_text(corpus, split):
    return "".join(line for _, _, line in corpus.lines(split))


# ---------------------------------------------------------------- corpora

def test_wikitext_parquet_and_raw_layouts_give_the_same_text(parquet_dir, raw_dir):
    pq_corpus = load_corpus("wikitext-103", data_dir=str(parquet_dir))
    raw_corpus = load_corpus("wikitext-103", data_dir=str(raw_dir))
    assert len(pq_corpus.files["train"]) == 2                 # both shards, in order
    for split in ("train", "validation", "test"):
        assert split_text(pq_corpus, split) == raw_text(ROWS[split]) == split_text(raw_corpus, split)
    # the config directory itself works too, and line numbers count rows per file
    direct = WikiText(str(parquet_dir / "wikitext-103-raw-v1"))
    lines = list(direct.lines("validation"))
    assert [n for _, n, _ in lines] == [1, 2, 3] and lines[1][2] == "\n"
    assert pq_corpus.identity("train") != raw_corpus.identity("train")


def test_wikitext_bad_input(tmp_path, parquet_dir):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        WikiText(str(tmp_path / "nowhere"))
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "wiki.train.raw").write_text("x\n")
    with pytest.raises(FileNotFoundError, match=r"wiki\.valid\.raw.*datasets"):
        WikiText(str(tmp_path / "partial"))
    with pytest.raises(FileNotFoundError, match="wikitext-2-raw-v1"):
        WikiText2(str(parquet_dir))                           # 103's files are not wikitext-2's
    empty = parquet_dir / "wikitext-103-raw-v1" / "test-00000-of-00001.parquet"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        WikiText(str(parquet_dir))
    write_parquet(empty, [])
    with pytest.raises(ValueError, match="no rows"):
        list(WikiText(str(parquet_dir)).lines("test"))


def test_files_corpus_and_registry_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FilesCorpus({"train": str(tmp_path / "missing.txt")})
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(ValueError, match="is empty"):
        FilesCorpus({"train": str(tmp_path / "e.txt")})
    with pytest.raises(UnknownNameError, match="files, kjv, wikitext-103, wikitext-2"):
        load_corpus("wikitext-104")
    with pytest.raises(ValueError, match="does not take data_dir"):
        load_corpus("kjv", data_dir="x")


def test_kjv_split_is_deterministic_disjoint_and_clean():
    corpus = KJV()
    chapters = list(corpus.chapters())
    assert len(chapters) == 1189 and chapters[0][1:3] == ("Genesis", 1)
    splits = [corpus.split_of(i) for i, *_ in chapters]
    counts = {s: splits.count(s) for s in ("train", "validation", "test")}
    assert counts == {"train": 959, "validation": 115, "test": 115}      # 238 blocks
    # held-out passages are 5 consecutive chapters: blocks 8 and 9 of every 10
    assert splits[35:50] == ["train"] * 5 + ["validation"] * 5 + ["test"] * 5
    val = split_text(corpus, "validation")
    assert val.startswith("Genesis 41\n\n") and "Genesis 45\n" in val and "Genesis 46\n" not in val
    assert not re.search(r"\d+:\d+", val)                   # verse numbers removed
    assert corpus.identity("train")["render"] == 1 and corpus.identity("test")["split"] == "test"


# ---------------------------------------------------------------- the task

@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("token-cache"))


def kjv_task(cache, **kw):
    args = dict(tokenizer="bytes", seq_len=32, max_chars=60_000, cache_dir=cache)
    return build_task("text", **dict(args, **kw))


def test_train_batches_are_contiguous_windows_from_the_generator(cache):
    task = kjv_task(cache)
    assert task.vocab_size == 257 and task.causal and task.evaluation == "perplexity"
    b = task.train_batch(6, torch.Generator().manual_seed(3))
    assert b.inputs.shape == b.targets.shape == (6, 32) and b.loss_mask.all() and b.eval_mask.all()
    starts = torch.randint(0, len(task.train_ids) - 32, (6,), generator=torch.Generator().manual_seed(3))
    ids = torch.from_numpy(np.asarray(task.train_ids, dtype=np.int64))
    for row, s in enumerate(starts.tolist()):
        assert torch.equal(b.inputs[row], ids[s:s + 32]) and torch.equal(b.targets[row], ids[s + 1:s + 33])
    again = task.train_batch(6, torch.Generator().manual_seed(3))
    assert torch.equal(again.inputs, b.inputs)


def test_splits_lengths_and_max_input_length(cache):
    task = kjv_task(cache)
    assert task.splits() == ["len=32", "len=64", "len=128", "len=256", "len=512", "len=1024"]
    assert task.max_input_length() == 1024 and task.max_input_length(["len=8"]) == 32
    with pytest.raises(ValueError, match="evaluation splits are lengths"):
        task.check_split("iid")


def concat(batches):
    return [torch.cat(t) for t in zip(*((b.inputs, b.targets, b.eval_mask) for b in batches))]


@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_eval_windows_do_not_depend_on_batching_or_seed(cache, protocol):
    kw = dict(eval_protocol="sliding", stride=8) if protocol == "sliding" else {}
    task = kjv_task(cache, max_eval_tokens=700, **kw)
    ref = concat(task.eval_batches("len=64", 100, 1, 0))
    for bs, seed, batch_tokens in ((7, 0, 16384), (100, 5, 16384), (100, 0, 128)):
        task.eval_batch_tokens = batch_tokens                # 128 tokens: 2 windows per batch
        got = concat(task.eval_batches("len=64", 100, bs, seed))
        assert all(torch.equal(a, b) for a, b in zip(got, ref))
    task.eval_batch_tokens = 128
    assert max(b.inputs.shape[0] for b in task.eval_batches("len=64", 100, 100, 0)) == 2
    # windows are consecutive corpus slices: window w starts at w * stride
    ids = torch.from_numpy(np.asarray(task.eval_ids, dtype=np.int64))
    S = 8 if protocol == "sliding" else 64
    for w in (0, 1, len(ref[0]) - 1):
        assert torch.equal(ref[0][w], ids[w * S:w * S + 64])


@pytest.mark.parametrize("n_tokens, K, S", [(1000, 64, 64), (1000, 64, 16), (1000, 64, 1),
                                            (65, 64, 7), (977, 100, 33), (64, 64, 64)])
def test_sliding_scores_every_target_exactly_once(n_tokens, K, S):
    starts, score_from = eval_windows(n_tokens, K, S)
    counts = np.zeros(n_tokens, dtype=int)
    for s, f in zip(starts, score_from):
        counts[s + 1 + np.arange(f, K)] += 1                 # absolute index of each scored target
    assert counts.max(initial=0) <= 1
    scored = np.flatnonzero(counts)
    if len(starts):
        assert counts[0] == 0 and scored[0] == 1 and np.all(np.diff(scored) == 1)
        assert starts[-1] + K + 1 <= n_tokens < starts[-1] + S + K + 1 or S == K
    else:
        assert n_tokens < K + 1
    if S == K:       # stride = window: the non-overlapping protocol
        nonover = eval_windows(n_tokens, K)
        assert np.array_equal(nonover[0], starts) and np.array_equal(nonover[1], score_from)
        assert len(starts) == (n_tokens - 1) // K


def test_eval_caps(cache):
    task = kjv_task(cache, max_eval_tokens=1000)
    starts, _ = task.eval_plan("len=128")
    assert len(starts) == 7                                  # 7 x 128 = 896 <= 1000
    assert len(task.eval_plan("len=128", n_sequences=3)[0]) == 3
    assert len(task.eval_plan("len=1024")[0]) == 1           # at least one window
    slide = kjv_task(cache, max_eval_tokens=1000, eval_protocol="sliding", stride=32)
    starts, score_from = slide.eval_plan("len=128")
    assert len(starts) == 28 and 128 + 32 * 27 == 992
    assert sum(128 - f for f in score_from) == 992


def test_bad_input_fails_before_training(cache, tmp_path):
    (tmp_path / "tiny.txt").write_text("abc\n")
    files = {s: str(tmp_path / "tiny.txt") for s in ("train", "validation", "test")}
    with pytest.raises(ValueError, match="fewer than one training window"):
        build_task("text", corpus="files", data_files=files, tokenizer="bytes", seq_len=128,
                   cache_dir=cache)
    with pytest.raises(ValueError, match=r"too few for one window of len=1000000"):
        kjv_task(cache, eval_lengths=[64, 10 ** 6])
    with pytest.raises(ValueError, match="unknown task.kwargs.eval_protocol"):
        kjv_task(cache, eval_protocol="strided")
    with pytest.raises(ValueError, match="needs task.kwargs.stride"):
        kjv_task(cache, eval_protocol="sliding")
    with pytest.raises(ValueError, match=r"stride=40 must be in \[1, 32\]"):
        kjv_task(cache, eval_protocol="sliding", stride=40)
    with pytest.raises(ValueError, match="sliding only"):
        kjv_task(cache, stride=8)
    with pytest.raises(UnknownNameError, match="Valid tokenizers: bpe, bytes, chars, gpt2, hf"):
        kjv_task(cache, tokenizer="gpt-2")
    with pytest.raises(ValueError, match="no split 'dev'"):
        kjv_task(cache, eval_split="dev")
    with pytest.raises(ValueError, match="seq_len must be an integer, got 'long'"):
        kjv_task(cache, seq_len="long")
    with pytest.raises(ValueError, match="eval_lengths must be >= 1"):
        kjv_task(cache, eval_lengths=[64, 0])
    assert kjv_task(cache, max_chars="6e4").max_chars == 60_000   # YAML reads 6e4 as a string


def text_cfg(cache, **overrides):
    # d_ff 512: the thresholds below were calibrated with this width (it was the default before
    # d_ff followed d_model; 2 x 64 learns too slowly in 20 steps for them)
    cfg = {"model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 512},
           "task": {"name": "text", "kwargs": {"tokenizer": "bytes", "seq_len": 64,
                                               "max_chars": 300_000, "cache_dir": cache,
                                               "eval_lengths": [64, 256], "max_eval_tokens": 2048}},
           "train": {"steps": 20, "batch_size": 32, "lr": 1e-2, "warmup_steps": 5,
                     "progress": False, "log_every": 1},
           "eval": {"batch_size": 8}}
    for k, v in overrides.items():
        section, key = k.split(".", 1)
        cfg[section][key] = v
    return lengen.resolve(cfg).config


def test_learned_table_too_short_for_the_eval_lengths(cache):
    # len=256 is an eval length: rejected while resolving the config, before any training
    with pytest.raises(ValueError, match="learned positional table has 128 rows"):
        text_cfg(cache, **{"model.posenc": "learned", "model.posenc_kwargs": {"max_positions": 128}})


def test_thirty_steps_learn_the_offline_corpus(tmp_path, cache):
    """Bytes of the KJV: uniform guessing is ln 257 = 5.55 nats; the byte unigram entropy of the
    training slice is 3.02 nats (bigram: 2.22), so a model that ignores its context cannot get
    below ~3.0. 30 steps must bring the training loss (mean of the last 3) below 2.9 and the
    validation perplexity at the training length below 18; an untrained model is at ~257.
    Margins measured over seeds 0-7 at 1 and 2 torch threads (tests/margins.py,
    tests/data/margins.jsonl): loss 2.41-2.75, perplexity 11.1-14.9 (seed 0: 2.41 / 11.1).
    At 20 steps two of the eight seeds missed the old 2.8 / 15."""
    import json

    model, task, rows = lengen.train(text_cfg(cache, **{"train.steps": 30}),
                                     str(tmp_path / "run"), quiet=True)
    losses = [json.loads(x)["loss"] for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(losses) == 30 and losses[0] > 5.0
    assert sum(losses[-3:]) / 3 < 2.9
    ppl = {r["length"]: r["value"] for r in rows if r["metric"] == "ppl"}
    assert set(ppl) == {64, 256} and ppl[64] < 18
    assert {r["metric"] for r in rows} == {"ppl", "nll"}
    r = rows[0]
    assert r["task"] == "text" and r["corpus"] == "kjv" and r["tokenizer"] == "bytes"
    assert r["protocol"] == "nonoverlapping" and r["train_length"] == 64 and r["step"] == 30


def test_default_text_task_trains_with_gpt2_bpe(tmp_path, cache):
    """`lengen train task.name=text` path: the defaults (kjv, gpt2) on a slice, two steps."""
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                          "task": {"name": "text", "kwargs": {"max_chars": 40_000, "cache_dir": cache,
                                                              "eval_lengths": [128, 512],
                                                              "max_eval_tokens": 512}},
                          "train": {"steps": 2, "batch_size": 2, "progress": False}})
    model, task, rows = lengen.train(cfg, str(tmp_path / "run"), quiet=True)
    assert task.tokenizer.name == "gpt2" and model.cfg.vocab_size == 50257
    assert task.seq_len == 128 and task.corpus.name == "kjv"
    assert [(r["split"], r["metric"]) for r in rows] == [
        ("len=128", "ppl"), ("len=128", "nll"), ("len=512", "ppl"), ("len=512", "nll")]
    assert all(r["tokens"] == 512 for r in rows)


def test_captions_say_when_the_corpus_is_a_stand_in(cache, parquet_dir):
    cap = kjv_task(cache).caption()
    assert "stand-in for WikiText-103" in cap and "bytes tokenizer (257 ids)" in cap
    assert "validation split, non-overlapping windows" in cap
    assert load_corpus("wikitext-103", data_dir=str(parquet_dir)).caption() == "WikiText-103 (raw)"
