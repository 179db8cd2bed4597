"""Language modelling on real text: next-token loss on every token, perplexity per evaluation length.

Training batches are windows of ``seq_len`` contiguous tokens (plus the next token as the last
target) at uniformly random offsets of the tokenized train split, drawn with the training
generator, so a fixed ``train.data_seed`` gives the same stream and resume is exact. Evaluation
splits are lengths ``len=K``: the model reads windows of ``K`` tokens of the evaluation split
(``validation`` or ``test``) in corpus order, and every scored target is counted once:

* ``eval_protocol="nonoverlapping"`` (default; the protocol of the ALiBi paper, Press et al. 2022,
  for its main results): the split is cut into consecutive windows ``[jK, jK + K)`` (targets shifted
  by one), each scored on all ``K`` targets independently. A token early in a window has little
  context, so this perplexity mixes all context lengths 1..K.
* ``eval_protocol="sliding"`` with ``stride=S <= K``: window ``j`` starts at ``jS``; the first
  window is scored on all ``K`` targets, every later window only on its last ``S`` targets (the ones
  no earlier window scored), so every target is scored exactly once and all but the first window's
  have at least ``K - S`` tokens of context. ``S = K`` is the non-overlapping protocol. Pitfalls:
  the first window's targets are scored with short contexts (implementations that drop or misalign
  it, e.g. transformers #18887, count tokens twice or not at all; here it is kept, so sliding
  perplexity over few windows is close to the non-overlapping one); and "window" vs "stride" naming
  differs between tools (here ``K`` is the model input length, ``S`` the tokens scored per window).
  No BOS token is prepended to a window (the corpus has none).

The windows depend only on the split, ``K``, the protocol and the caps, never on the evaluation
batch size or seed (``eval_batches`` reads them in order). Per length, at most
``max(max_eval_tokens, K)`` targets are scored (whole windows from the start of the split, also at
most ``n_sequences`` windows); the tail shorter than a window is dropped, so every window is
exactly ``K`` long. ``Batch.eval_mask`` / ``loss_mask`` mark the scored targets. Each evaluation
batch holds at most ``eval_batch_tokens`` tokens (at least one window), so long lengths use small
batches; with the lean attention paths of eval mode and the blocked output head of
:mod:`lengen.eval.perplexity`, memory grows linearly in ``K``.

Task kwargs: see :class:`Text`.

    lengen train task.name=text train.steps=200                  # offline, GPT-2 BPE
    lengen train task.name=text task.kwargs.corpus=wikitext-103 task.kwargs.data_dir=data/wikitext
"""
from __future__ import annotations

import numpy as np
import torch

from lengen.fileio import default_cache_dir
from lengen.tasks.base import Batch, Task
from lengen.tasks.chomsky.base import parse_split, split_name

PROTOCOLS = ("nonoverlapping", "sliding")


def _int(name: str, value, minimum: int = 1) -> int:
    """A task kwarg as an int >= minimum (YAML may hand over 1e6 as a string or a float)."""
    try:
        f = float(value)
        if not f.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"task.kwargs.{name} must be an integer, got {value!r}") from None
    if f < minimum:
        raise ValueError(f"task.kwargs.{name} must be >= {minimum}, got {value!r}")
    return int(f)


def eval_windows(n_tokens: int, length: int, stride: int | None = None,
                 max_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Windows over a split of ``n_tokens`` tokens ``x``: window ``w`` reads
    ``x[starts[w] : starts[w] + length]`` and is scored on targets ``x[starts[w] + 1 + c]`` for
    columns ``c >= score_from[w]``. ``stride=None`` = non-overlapping. -> ``(starts, score_from)``,
    int64 ``[W]``; ``W`` is every whole window, or the first ``max_windows``."""
    if length < 1:
        raise ValueError(f"evaluation length must be >= 1, got {length}")
    S = length if stride is None else int(stride)
    if not 1 <= S <= length:
        raise ValueError(f"stride must be in [1, {length}] for length {length}, got {stride}")
    # the last window must have its K targets: start + K + 1 <= n_tokens
    n = 0 if n_tokens < length + 1 else (n_tokens - 1 - length) // S + 1
    if max_windows is not None:
        n = min(n, max(int(max_windows), 0))
    starts = np.arange(n, dtype=np.int64) * S
    score_from = np.full(n, length - S, dtype=np.int64)
    score_from[:1] = 0                      # the first window scores all of its targets
    return starts, score_from


class Text(Task):
    """Next-token language modelling on a tokenized corpus; splits ``len=K`` (module docstring).

    Task kwargs (``task.kwargs.*``):

    * ``corpus``: ``kjv`` (offline default: a stand-in for WikiText-103, see
      :mod:`lengen.data.corpus`), ``wikitext-103``, ``wikitext-2``, ``files``; ``data_dir`` (WikiText
      files) or ``data_files`` (``files``: ``{train: PATH, validation: PATH, test: PATH}``).
    * ``tokenizer``: ``gpt2`` (default; tiktoken, offline), ``bytes``, ``chars``, ``bpe`` (trained
      locally); ``tokenizer_kwargs`` (e.g. ``{vocab_size: 4096}`` for ``bpe``). ``vocab_size`` of the
      task (and so of the model) comes from the tokenizer.
    * ``seq_len`` (128): training window, in tokens (model input length).
    * ``eval_lengths``: default ``seq_len * [1, 2, 4, 8, 16, 32]``; ``eval_split`` (``validation``).
    * ``eval_protocol`` (``nonoverlapping`` | ``sliding``) and ``stride`` (sliding only): see the
      module docstring. ``max_eval_tokens`` (32768): at most this many scored targets per length.
    * ``eval_batch_tokens`` (16384): tokens per evaluation forward pass.
    * ``max_chars``: keep only the first characters of each split (quick runs and tests).
    * ``cache_dir``: where tokenized splits are cached (default ``~/.cache/lengen``, see
      :mod:`lengen.data.token_cache`).
    """
    name = "text"
    causal = True
    #: evaluation routes to lengen.eval.perplexity (rows 'ppl' and 'nll' per length)
    evaluation = "perplexity"

    def __init__(self, corpus: str = "kjv", tokenizer: str = "gpt2", seq_len: int = 128,
                 eval_lengths: list | None = None, eval_split: str = "validation",
                 eval_protocol: str = "nonoverlapping", stride: int | None = None,
                 max_eval_tokens: int = 32768, eval_batch_tokens: int = 16384,
                 max_chars: int | None = None, cache_dir: str | None = None,
                 data_dir: str | None = None, data_files: dict | None = None,
                 tokenizer_kwargs: dict | None = None):
        # start-up: lengen.data loads only for text runs
        from lengen.data import build_tokenizer, cached_tokens, load_corpus

        self.seq_len = _int("seq_len", seq_len)
        lengths = ([self.seq_len * m for m in (1, 2, 4, 8, 16, 32)] if eval_lengths is None
                   else eval_lengths)
        if isinstance(lengths, (int, float, str)) or not lengths:
            raise ValueError(f"task.kwargs.eval_lengths must be a non-empty list of ints, "
                             f"got {eval_lengths!r}")
        self.eval_lengths = [_int("eval_lengths", k) for k in lengths]
        if eval_protocol not in PROTOCOLS:
            raise ValueError(f"unknown task.kwargs.eval_protocol '{eval_protocol}'. "
                             f"Valid: {', '.join(PROTOCOLS)}")
        self.eval_protocol = eval_protocol
        if eval_protocol == "sliding":
            if stride is None:
                raise ValueError("eval_protocol=sliding needs task.kwargs.stride (targets scored per "
                                 "window after the first, <= every evaluation length), e.g. stride=64")
            self.stride = _int("stride", stride)
            self._check_stride(self.stride, self.eval_lengths)
        elif stride is not None:
            raise ValueError("task.kwargs.stride applies to eval_protocol=sliding only")
        else:
            self.stride = None
        self.max_eval_tokens = _int("max_eval_tokens", max_eval_tokens)
        self.eval_batch_tokens = _int("eval_batch_tokens", eval_batch_tokens)
        max_chars = None if max_chars is None else _int("max_chars", max_chars)

        corpus_kwargs = {k: v for k, v in (("data_dir", data_dir), ("data_files", data_files))
                         if v is not None}
        self.corpus = load_corpus(corpus, **corpus_kwargs)
        self.corpus.check_split(eval_split)
        self.eval_split = eval_split
        self.cache_dir = cache_dir
        self.max_chars = max_chars
        self.tokenizer = build_tokenizer(tokenizer, corpus=self.corpus, cache_dir=self._cache_dir(),
                                         **(tokenizer_kwargs or {}))
        self.vocab_size = self.tokenizer.vocab_size
        load = lambda split: cached_tokens(self.corpus, split, self.tokenizer, self._cache_dir(),
                                           max_chars=max_chars)
        self.train_ids = load("train")
        if len(self.train_ids) < self.seq_len + 1:
            raise ValueError(f"the train split of {self.corpus.describe()} has {len(self.train_ids):,} "
                             f"tokens, fewer than one training window (seq_len + 1 = "
                             f"{self.seq_len + 1}); lower task.kwargs.seq_len or use more text "
                             f"(max_chars={max_chars})")
        self.eval_ids = load(eval_split)
        for k in self.eval_lengths:
            self._check_length(k)

    def _cache_dir(self):
        return self.cache_dir or default_cache_dir()

    @staticmethod
    def _check_stride(stride, lengths):
        if stride < 1 or stride > min(lengths):
            raise ValueError(f"task.kwargs.stride={stride} must be in [1, {min(lengths)}] (the "
                             f"shortest evaluation length)")

    def _check_length(self, k: int) -> None:
        if len(self.eval_ids) < k + 1:
            raise ValueError(f"the {self.eval_split} split of {self.corpus.describe()} has "
                             f"{len(self.eval_ids):,} tokens, too few for one window of len={k} "
                             f"(needs {k + 1}); drop that length (task.kwargs.eval_lengths) or use "
                             f"more text (max_chars={self.max_chars})")

    # ------------------------------------------------------------------ interface

    def splits(self):
        return [split_name(k) for k in self.eval_lengths]

    def length_of(self, split: str) -> int:
        try:
            return parse_split(split)
        except ValueError:
            raise ValueError(f"bad split '{split}' for task text: evaluation splits are lengths "
                             f"'len=K' (model input length in tokens), e.g. "
                             f"'len={self.seq_len}'") from None

    def check_split(self, split: str) -> None:
        k = self.length_of(split)
        self._check_length(k)
        if self.stride is not None:
            self._check_stride(self.stride, [k])

    def train_input_length(self) -> int:
        """Training windows have ``seq_len`` tokens."""
        return self.seq_len

    def max_input_length(self, splits=None):
        lengths = [self.length_of(s) for s in (self.splits() if splits is None else splits)]
        return max([self.seq_len] + lengths)

    def _windows(self, starts: np.ndarray, length: int, ids) -> torch.Tensor:
        idx = starts[:, None] + np.arange(length + 1)          # [B, K + 1]
        return torch.from_numpy(np.asarray(ids[idx], dtype=np.int64))

    def train_batch(self, batch_size, generator):
        T = self.seq_len
        starts = torch.randint(0, len(self.train_ids) - T, (batch_size,), generator=generator)
        seq = self._windows(starts.numpy(), T, self.train_ids)  # [B, T + 1]
        mask = torch.ones(batch_size, T, dtype=torch.bool)
        return Batch(seq[:, :-1], seq[:, 1:], mask, mask)

    def eval_batch(self, split, batch_size, generator):
        """Windows at random offsets of the evaluation split, every target scored (a quick look;
        reported evaluation reads windows in order, see :meth:`eval_batches`)."""
        self.check_split(split)
        k = self.length_of(split)
        starts = torch.randint(0, len(self.eval_ids) - k, (batch_size,), generator=generator)
        seq = self._windows(starts.numpy(), k, self.eval_ids)
        mask = torch.ones(batch_size, k, dtype=torch.bool)
        return Batch(seq[:, :-1], seq[:, 1:], mask, mask)

    def eval_plan(self, split: str, n_sequences: int | None = None):
        """``(starts, score_from)`` of the windows evaluated for ``split`` (see module doc)."""
        self.check_split(split)
        k = self.length_of(split)
        s = self.stride or k
        cap = max(self.max_eval_tokens, k)
        by_tokens = 1 + (cap - k) // s                # the first window scores k, later ones s
        limit = by_tokens if n_sequences is None else min(by_tokens, int(n_sequences))
        return eval_windows(len(self.eval_ids), k, self.stride, limit)

    def eval_batches(self, split, n_sequences, batch_size, seed=None):
        """Consecutive windows of the evaluation split, in order; ``seed`` is unused (the data is
        the corpus), and batching never changes which windows or targets are scored."""
        k = self.length_of(split)
        starts, score_from = self.eval_plan(split, n_sequences)
        rows = max(1, min(int(batch_size), self.eval_batch_tokens // k))
        cols = torch.arange(k)
        for s in range(0, len(starts), rows):
            seq = self._windows(starts[s:s + rows], k, self.eval_ids)          # [b, K + 1]
            mask = cols[None, :] >= torch.from_numpy(score_from[s:s + rows])[:, None]
            yield Batch(seq[:, :-1], seq[:, 1:], mask, mask)

    def eval_info(self) -> dict:
        """Columns added to every evaluation row (what was evaluated, how)."""
        return {"corpus": self.corpus.name, "tokenizer": self.tokenizer.name,
                "eval_split": self.eval_split, "protocol": self.eval_protocol,
                "stride": self.stride, "train_length": self.seq_len}

    def describe(self) -> str:
        return f"{self.corpus.describe()}, tokenizer {self.tokenizer.name}"

    def caption(self) -> str:
        """For table and figure captions: corpus (saying when it is a stand-in), tokenizer,
        evaluation split and protocol."""
        protocol = ("non-overlapping windows" if self.stride is None
                    else f"sliding windows, stride {self.stride}")
        return (f"{self.corpus.caption()}; {self.tokenizer.name} tokenizer "
                f"({self.vocab_size:,} ids); {self.eval_split} split, {protocol}")
