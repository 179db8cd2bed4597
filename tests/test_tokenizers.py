"""Tokenizers (GPT-2 BPE offline, bytes, chars, local BPE) and the on-disk token cache."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from lengen.data import build_tokenizer, cached_tokens
from lengen.data.corpus import FilesCorpus
from lengen.data.token_cache import cache_key, cache_paths
from lengen.data.tokenizers import GPT2_FILES, Bytes, gpt2_files
from lengen.registry import UnknownNameError

TEXT = ("The quick brown fox jumps over the lazy dog.\n"
        "Naïve café — 日本語, emoji 🙂 and tabs\tand  double  spaces.\n"
        "\n"
        "A literal <|endoftext|> stays text.\n")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def small_corpus(tmp_path, train=TEXT * 20, validation=TEXT, test=TEXT):
    return FilesCorpus({s: write(tmp_path / "corpus" / f"{s}.txt", t)
                        for s, t in (("train", train), ("validation", validation), ("test", test))})


# ---------------------------------------------------------------- GPT-2 BPE

@pytest.fixture(scope="module")
def gpt2():
    return build_tokenizer("gpt2")


def test_gpt2_known_ids_and_round_trip(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" the") == [262] and gpt2.encode("\n") == [198]
    assert gpt2.vocab_size == 50257 and gpt2.eot_id == 50256 and gpt2.dtype == np.uint16
    ids = [i for line in gpt2.encode_lines(TEXT.splitlines(keepends=True)) for i in line]
    assert gpt2.decode(ids) == TEXT
    assert 50256 not in ids                         # a literal <|endoftext|> is ordinary text


def test_gpt2_files_come_from_the_package_and_are_hash_checked(tmp_path):
    paths = gpt2_files()
    assert paths is not None and set(paths) == set(GPT2_FILES)
    d = tmp_path / "bpe"
    d.mkdir()
    for f, p in paths.items():
        shutil.copy(p, d / f)
    assert gpt2_files(str(d)) == {f: str(d / f) for f in GPT2_FILES}
    with open(d / "vocab.bpe", "a") as f:           # one changed byte is not GPT-2 any more
        f.write(" ")
    with pytest.raises(ValueError, match="sha256"):
        gpt2_files(str(d))
    os.remove(d / "vocab.bpe")
    with pytest.raises(FileNotFoundError, match="vocab.bpe"):
        build_tokenizer("gpt2", files_dir=str(d))


def test_offline_encoding_equals_tiktokens_own_gpt2(tmp_path, monkeypatch, gpt2):
    """tiktoken's registered "gpt2" encoding, fed the same files through its download cache
    (files named by the sha1 of their URL), encodes exactly like ours."""
    import hashlib

    import tiktoken

    url = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for f, p in gpt2_files().items():
        shutil.copy(p, tmp_path / hashlib.sha1((url + f).encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    official = tiktoken.get_encoding("gpt2")
    lines = TEXT.splitlines(keepends=True) + ["  indented\tcode = x[1:2]  # 'quoted' it's\n"]
    assert gpt2.encode_lines(lines) == official.encode_ordinary_batch(lines)
    assert official.n_vocab == gpt2.vocab_size


# ---------------------------------------------------------------- bytes, chars

def test_bytes_round_trip_and_specials():
    tok = build_tokenizer("bytes")
    ids = tok.encode(TEXT)
    assert ids.tolist() == list(TEXT.encode("utf-8")) and tok.decode(ids) == TEXT
    assert tok.vocab_size == 257 and tok.eot_id == 256
    assert tok.decode(list(ids) + [256]) == TEXT     # specials decode to nothing


def test_chars_alphabet_from_train_split_and_unknown_character_error(tmp_path):
    corpus = small_corpus(tmp_path, train="abc ab\nba c\n", validation="abc\ncab\nabé\n")
    tok = build_tokenizer("chars", corpus=corpus, cache_dir=str(tmp_path / "cache"))
    assert tok.alphabet == "\n abc" and tok.vocab_size == 6
    assert tok.decode(tok.encode("cab\n")) == "cab\n"
    # cached alphabet: the same tokenizer again without rescanning
    assert build_tokenizer("chars", corpus=corpus, cache_dir=str(tmp_path / "cache")).alphabet == "\n abc"
    with pytest.raises(ValueError) as e:
        cached_tokens(corpus, "validation", tok, str(tmp_path / "cache"), quiet=True)
    msg = str(e.value)
    assert "'é'" in msg and "U+00E9" in msg and "line 3, column 3" in msg
    assert corpus.files["validation"][0] in msg and "tokenizer=bytes" in msg


def test_unknown_tokenizer_and_bad_kwargs_list_the_valid_ones():
    with pytest.raises(UnknownNameError, match="bpe, bytes, chars, gpt2, hf"):
        build_tokenizer("gpt3")
    with pytest.raises(ValueError, match="files_dir"):
        build_tokenizer("gpt2", vocab_size=10)


# ---------------------------------------------------------------- local BPE

def test_local_bpe_trains_round_trips_and_is_reused(tmp_path):
    corpus = small_corpus(tmp_path)
    cache = str(tmp_path / "cache")
    tok = build_tokenizer("bpe", corpus=corpus, cache_dir=cache, vocab_size=300)
    assert 257 < tok.vocab_size <= 300 and tok.eot_id is not None
    for s in (TEXT, "unseen words: xylophone ζ\n"):   # byte-level: anything encodes
        assert tok.decode(tok.encode(s)) == s
    assert len(tok.encode(TEXT)) < len(TEXT.encode())   # merges learned from the corpus
    saved = os.listdir(os.path.join(cache, "tokenizers"))
    assert len(saved) == 1
    again = build_tokenizer("bpe", corpus=corpus, cache_dir=cache, vocab_size=300)
    assert again.identity() == tok.identity()
    # training is deterministic: a fresh training gives the same tokenizer
    fresh = build_tokenizer("bpe", corpus=corpus, cache_dir=str(tmp_path / "other"), vocab_size=300)
    assert fresh.identity() == tok.identity()
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer("bpe", corpus=corpus, cache_dir=cache, vocab_size=100)


# ---------------------------------------------------------------- the token cache

class CountingBytes(Bytes):
    def __init__(self):
        self.calls = 0

    def encode_lines(self, lines, where=None):
        self.calls += 1
        return super().encode_lines(lines, where)


def test_cache_hit_miss_and_content(tmp_path):
    corpus = small_corpus(tmp_path)
    tok = CountingBytes()
    cache = str(tmp_path / "cache")
    ids = cached_tokens(corpus, "train", tok, cache, quiet=True)
    assert isinstance(ids, np.memmap) and ids.dtype == np.uint16 and not ids.flags.writeable
    assert bytes(ids.astype(np.uint8)) == (TEXT * 20).encode()
    calls = tok.calls
    again = cached_tokens(corpus, "train", tok, cache, quiet=True)          # hit: no tokenizing
    assert tok.calls == calls and np.array_equal(again, ids)
    # a slice is a different cache entry
    part = cached_tokens(corpus, "train", tok, cache, max_chars=50, quiet=True)
    assert bytes(part.astype(np.uint8)) == (TEXT * 20)[:50].encode()
    # changing the file (size / mtime) is a miss
    time.sleep(0.01)
    write(tmp_path / "corpus" / "train.txt", "changed text\n")
    changed = cached_tokens(corpus, "train", tok, cache, quiet=True)
    assert bytes(changed.astype(np.uint8)) == b"changed text\n" and tok.calls > calls


def test_uint32_when_the_vocab_does_not_fit_16_bits():
    class Big(Bytes):
        vocab_size = 70_000
    assert Big().dtype == np.uint32 and Bytes().dtype == np.uint16


def _paths(corpus, tok, cache):
    return cache_paths(corpus, "train", tok, cache_key(corpus, "train", tok), cache)


@pytest.mark.parametrize("damage", ["no_sidecar", "truncated", "corrupt", "stale_key", "bad_json"])
def test_damaged_cache_is_rebuilt_never_read(tmp_path, damage):
    corpus = small_corpus(tmp_path)
    tok, cache = CountingBytes(), str(tmp_path / "cache")
    good = np.array(cached_tokens(corpus, "train", tok, cache, quiet=True))
    bin_path, meta_path = _paths(corpus, tok, cache)
    if damage == "no_sidecar":              # killed between renaming the ids and the sidecar
        os.remove(meta_path)
    elif damage == "truncated":
        with open(bin_path, "r+b") as f:
            f.truncate(os.path.getsize(bin_path) - 2)
    elif damage == "corrupt":               # same size, different bytes: only the checksum sees it
        with open(bin_path, "r+b") as f:
            f.seek(10)
            f.write(b"\x00\x00")
    elif damage == "stale_key":
        meta = json.load(open(meta_path))
        meta["key"]["max_chars"] = 7
        json.dump(meta, open(meta_path, "w"))
    else:
        open(meta_path, "w").write("{not json")
    calls = tok.calls
    if damage == "no_sidecar":
        ids = cached_tokens(corpus, "train", tok, cache, quiet=True)
    else:
        with pytest.warns(UserWarning, match="incomplete or corrupt"):
            ids = cached_tokens(corpus, "train", tok, cache, quiet=True)
    assert tok.calls > calls and np.array_equal(ids, good)
    assert json.load(open(meta_path))["tokens"] == len(good)


def test_writer_killed_mid_write_leaves_nothing_readable(tmp_path):
    """A real SIGKILL while the ids are being written: no sidecar, a temp file; the next call
    rebuilds (and removes the dead writer's temp file)."""
    corpus = small_corpus(tmp_path, train="line of text\n" * 2000)
    cache = str(tmp_path / "cache")
    child = textwrap.dedent(f"""
        import time
        from lengen.data import token_cache
        from lengen.data.corpus import FilesCorpus
        from lengen.data.tokenizers import Bytes
        class Slow(Bytes):
            def encode_lines(self, lines, where=None):
                time.sleep(0.05)
                return super().encode_lines(lines, where)
        token_cache.CHUNK_CHARS = 100          # many small chunks: the write takes seconds
        corpus = FilesCorpus({corpus.files!r})
        token_cache.cached_tokens(corpus, "train", Slow(), {cache!r}, quiet=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child])
    bin_path, meta_path = _paths(corpus, Bytes(), cache)
    deadline = time.time() + 60
    tmp = None
    while time.time() < deadline and proc.poll() is None:
        tmps = [f for f in os.listdir(cache) if ".bin.tmp" in f] if os.path.isdir(cache) else []
        if tmps and os.path.getsize(os.path.join(cache, tmps[0])) > 0:
            tmp = os.path.join(cache, tmps[0])
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert tmp is not None, "the writer finished before it could be killed"
    assert os.path.exists(tmp) and not os.path.exists(meta_path) and not os.path.exists(bin_path)
    ids = cached_tokens(corpus, "train", Bytes(), cache, quiet=True)
    assert bytes(ids.astype(np.uint8)) == b"line of text\n" * 2000
    assert not os.path.exists(tmp)


def test_empty_split_is_an_error(tmp_path):
    corpus = small_corpus(tmp_path)
    write(tmp_path / "corpus" / "test.txt", "\n")           # a blank line is one token of text
    assert len(cached_tokens(corpus, "test", Bytes(), str(tmp_path / "c"), quiet=True)) == 1
    corpus.files["test"] = [write(tmp_path / "corpus" / "blank.txt", "x")]
    os.truncate(corpus.files["test"][0], 0)                 # emptied after the corpus checked it
    with pytest.raises(ValueError, match="no text"):
        cached_tokens(corpus, "test", Bytes(), str(tmp_path / "c"), quiet=True)


def test_local_bpe_trains_on_the_offline_corpus(tmp_path):
    # HF tokenizers consumes the training iterator on another thread: the corpus must allow it
    from lengen.data.corpus import KJV

    tok = build_tokenizer("bpe", corpus=KJV(), cache_dir=str(tmp_path), vocab_size=512,
                          train_chars=100_000)
    text = "And God said, Let there be light: and there was light.\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) < len(text) / 2 and tok.vocab_size == 512
