"""Decoder sequence tasks: a prompt, then an answer that ends with EOS.

The task type of the two decoder papers lengen implements (Kazemnejad et al. 2023 as used by the
index-warping paper: copy / reverse / sort / summation; Zhou et al. 2024: addition). A
causal decoder reads the whole example and learns to continue the prompt with the answer. For the
copy task with K = 3 items::

    sequence    [COPY]  a  b  c  [SEP]  a  b  c  <eos>
    inputs      [COPY]  a  b  c  [SEP]  a  b  c           sequence[:-1]
    targets        a    b  c [SEP] a    b  c <eos>        sequence[1:]
    loss, eval     .    .  .   .   T    T  T   T          answer + EOS only

The loss and evaluation masks cover exactly the answer tokens and the EOS: not the prompt, not the
separator (the prompt is given, not predicted). ``loss_on='all'`` puts every real token of a
TRAINING example in the loss instead (the prompt and separator too, never the padding): plain
causal language modelling of the whole example, one reading of Zhou et al. 2024's "causal
language modeling" (App. B); evaluation still scores the answer and EOS only. So ``seq_acc``
(every scored position right) is the exact match of answer + EOS under teacher forcing, which
equals greedy-decoding exact match: greedy decoding reproduces the answer iff every answer token
(and the EOS) is the argmax given the true prefix, and an EOS at the right place stops it there.

Vocabulary layout, shared by every sequence task::

    0 <pad>    1 <eos>    2 [SEP]    3 .. 3+W-1 the task's words ([COPY])    then its symbols

``SequenceTask.vocab`` lists the names; ``decode`` / ``encode_text`` convert. Token names are for
display and for ``lengen generate --prompt``; the models see ids only.

Batches mix lengths with RIGHT padding: pad tokens sit after each row's EOS. In a causal decoder a
token never attends to later ones, so padding after the real tokens cannot change a real token's
output; the pad id is never scored (both masks are False there). Splits are test lengths
``len=K`` (K = number of items; :mod:`lengen.tasks.splits`); any K >= 1 is accepted by
``eval_batch``, the default splits are ``len=min_length`` .. ``len=max_eval_length``, seen and
unseen lengths alike (the index-warping paper tests on U(2, 5M) with training on U(2, M)). One
evaluation batch holds one length, so it has no padding.

Training data: an endless stream by default (every batch freshly sampled from the training
generator, lengths uniform in ``min_length .. max_train_length`` per example), or with
``train_size=N`` a fixed set of N examples (the papers use 100K) drawn once from ``dataset_seed``
and read in epochs, each epoch in a new order drawn from the training generator. Where the reader
is inside the epoch lives in :meth:`SequenceTask.state_dict` so a resumed run reads the same
examples in the same order.

Subclasses set ``name``, ``words``, ``symbols``, ``item_range``, ``default_max_train_length`` and
implement :meth:`SequenceTask.solve` and :meth:`SequenceTask.answer_length`; a task whose prompt is
not ``[WORD] items [SEP]`` (addition) overrides :meth:`SequenceTask.sample` and the two length
methods instead. Sampling is tensor code driven by the ``torch.Generator`` only, so a seed fixes
the batch.
"""
from __future__ import annotations

import string

import torch

from lengen.tasks.base import Batch, Task
from lengen.tasks.epochs import EpochReader
from lengen.tasks.splits import parse_split, split_name

PAD, EOS, SEP = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<eos>", "[SEP]")

#: 62 alphanumerics in rank order: digits, lower case, upper case
ALNUM = tuple(string.digits + string.ascii_lowercase + string.ascii_uppercase)
#: 100 one-character symbols: the alphanumerics, the ASCII punctuation except ' (so a prompt can
#: be single-quoted in a shell) and the brackets [ ] < > (which the special tokens' names use),
#: then eleven Greek letters
SYMBOLS_100 = (ALNUM + tuple(c for c in string.punctuation if c not in "'[]<>")
               + tuple("αβγδεζηθικλ"))
assert len(SYMBOLS_100) == len(set(SYMBOLS_100)) == 100


def _int_kwarg(key: str, value, *, minimum: int | None = None, allow_none: bool = False):
    """Validate one task kwarg: an int (not a bool), at least ``minimum``; error names the key."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"task.kwargs.{key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"task.kwargs.{key} must be >= {minimum}, got {value}")
    return value


#: what the training loss covers (``loss_on``): the answer and EOS, or every real token
LOSS_ON = ("answer", "all")


def batch_from_sequences(seq: torch.Tensor, prompt_len: torch.Tensor,
                         seq_len: torch.Tensor, loss_on: str = "answer") -> Batch:
    """Right-padded sequences -> next-token Batch scoring answer + EOS.

    seq [B, S] (PAD after each row's EOS), prompt_len [B] (tokens up to and including the
    separator), seq_len [B] (prompt + answer + EOS). Target column t holds sequence token t+1, so
    the answer and EOS (sequence tokens prompt_len .. seq_len-1) are target columns
    prompt_len-1 .. seq_len-2: the eval mask, and the loss mask unless ``loss_on='all'``, where
    the loss covers target columns 0 .. seq_len-2 (every token after the first, not the padding).
    """
    inputs, targets = seq[:, :-1], seq[:, 1:]                   # [B, S-1]
    t = torch.arange(seq.shape[1] - 1, device=seq.device)       # [S-1]
    real = t < seq_len[:, None] - 1                             # [B, S-1]
    mask = (t >= prompt_len[:, None] - 1) & real                # [B, S-1]
    if loss_on not in LOSS_ON:
        raise ValueError(f"unknown loss_on '{loss_on}'. Valid: {', '.join(LOSS_ON)}")
    return Batch(inputs, targets, real if loss_on == "all" else mask, mask.clone())


def prompts_and_answers(batch: Batch) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split a sequence-task batch into what generation needs, row by row: the prompt (tokens up
    to and including the separator) and the target answer followed by EOS, as 1-D LongTensors.
    Works on any batch of :class:`SequenceTask` (also after ``Batch.to``), since the eval mask
    marks exactly the answer + EOS targets."""
    prompts, answers = [], []
    for b in range(batch.inputs.shape[0]):
        m = batch.eval_mask[b]                                  # [T]
        if not bool(m.any()):
            raise ValueError(f"row {b} has no scored answer; not a sequence-task batch")
        t0 = int(m.long().argmax())                             # first answer target column
        prompts.append(batch.inputs[b, :t0 + 1])                # sequence[:t0 + 1], ends in SEP
        answers.append(batch.targets[b][m])
    return prompts, answers


def seeded_eval_batches(task: Task, split: str, n_sequences: int, batch_size: int, seed: int):
    """The evaluation batches of ``split`` for an int ``seed``, exactly as
    :func:`lengen.eval.evaluate.evaluate_split` draws them (``Task.eval_batches``), so
    teacher-forced and generated exact match score the same sequences."""
    return task.eval_batches(split, n_sequences, batch_size, seed)


class SequenceTask(Task):
    """Base class of decoder prompt -> answer tasks (see the module docstring)."""

    causal = True
    #: the per-length metric length sweeps score these tasks by (exact match of answer + EOS)
    score_metric = "seq_acc"
    #: the task's word tokens (placed after [SEP] in the vocabulary), e.g. ("[COPY]",)
    words: tuple[str, ...] = ()
    #: the task's symbols in id order (ids ``first_symbol ..``)
    symbols: tuple[str, ...] = ()
    #: prompt items are drawn uniformly from symbols ``item_range[0] .. item_range[1] - 1``
    item_range: tuple[int, int] = (0, 0)
    #: M, the longest training length of the paper's protocol (train U(2, M), test U(2, 5M))
    default_max_train_length: int = 20

    def __init__(self, min_length: int = 2, max_train_length: int | None = None,
                 max_eval_length: int | None = None, train_size: int | None = None,
                 dataset_seed: int = 0, loss_on: str = "answer"):
        self.min_length = _int_kwarg("min_length", min_length, minimum=1)
        M = self.default_max_train_length if max_train_length is None else max_train_length
        self.max_train_length = _int_kwarg("max_train_length", M, minimum=self.min_length)
        E = 5 * self.max_train_length if max_eval_length is None else max_eval_length
        self.max_eval_length = _int_kwarg("max_eval_length", E, minimum=self.max_train_length)
        self.train_size = _int_kwarg("train_size", train_size, minimum=1, allow_none=True)
        self.dataset_seed = _int_kwarg("dataset_seed", dataset_seed)
        if loss_on not in LOSS_ON:
            raise ValueError(f"unknown task.kwargs.loss_on '{loss_on}' for {self.name}. Valid: "
                             f"{', '.join(LOSS_ON)} (the training loss on the answer and EOS, "
                             f"or on every token of the example)")
        self.loss_on = loss_on
        self._data = None            # the fixed training set, built on first use
        self._reader = None if self.train_size is None else EpochReader(self.train_size)

    # ---- vocabulary -------------------------------------------------------------------------
    @property
    def vocab(self) -> tuple[str, ...]:
        return SPECIAL_TOKENS + tuple(self.words) + tuple(self.symbols)

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.words) + len(self.symbols)

    @property
    def first_symbol(self) -> int:
        """Token id of symbol 0."""
        return len(SPECIAL_TOKENS) + len(self.words)

    def word_id(self, i: int = 0) -> int:
        return len(SPECIAL_TOKENS) + i

    def decode(self, ids) -> str:
        """Token ids -> space-separated names (``[COPY] a b c [SEP]``)."""
        vocab = self.vocab
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return " ".join(vocab[i] if 0 <= i < len(vocab) else f"<{i}?>" for i in ids)

    def encode_text(self, text: str) -> torch.Tensor:
        """Space-separated token names -> ids [L]; an unknown name is a ValueError."""
        index = {name: i for i, name in enumerate(self.vocab)}
        ids = []
        for name in text.split():
            if name not in index:
                shown = " ".join(self.vocab[:12])
                raise ValueError(f"unknown token '{name}' for task {self.name}; its vocabulary "
                                 f"is: {shown} ... ({self.vocab_size} tokens, separated by "
                                 f"spaces)")
            ids.append(index[name])
        return torch.tensor(ids, dtype=torch.long)

    # ---- the task (subclasses) --------------------------------------------------------------
    def solve(self, items: torch.Tensor) -> torch.Tensor:
        """items [B, n] symbol indices -> answer [B, answer_length(n)] symbol indices."""
        raise NotImplementedError

    def answer_length(self, n: int) -> int:
        """Answer tokens (without EOS) for n items."""
        raise NotImplementedError

    def prompt_length(self, n: int) -> int:
        """Prompt tokens for n items: the task word, the items, the separator."""
        return n + 2

    def sample_items(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """[B, n] symbol indices, i.i.d. uniform over ``item_range`` (as the reference data)."""
        lo, hi = self.item_range
        return torch.randint(lo, hi, (batch_size, n), generator=generator)

    def encode(self, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """items [B, n] symbol indices -> (prompt [B, n+2], answer [B, A]) token ids:
        ``[WORD] items [SEP]`` and the solved answer (EOS is appended by the caller)."""
        B = items.shape[0]
        word = torch.full((B, 1), self.word_id(0), dtype=torch.long)
        sep = torch.full((B, 1), SEP, dtype=torch.long)
        prompt = torch.cat([word, items + self.first_symbol, sep], 1)
        return prompt, self.solve(items) + self.first_symbol

    def sample(self, n: int, batch_size: int, generator: torch.Generator):
        """(prompt [B, prompt_length(n)], answer [B, answer_length(n)]) token ids for n items."""
        return self.encode(self.sample_items(n, batch_size, generator))

    # ---- lengths ----------------------------------------------------------------------------
    def sequence_length(self, n: int) -> int:
        """prompt + answer + EOS for n items."""
        return self.prompt_length(n) + self.answer_length(n) + 1

    def input_length(self, n: int) -> int:
        """Model input length for n items: the sequence minus its final EOS (which is only ever
        predicted, never read). Generation feeds at most this many tokens."""
        return self.sequence_length(n) - 1

    def train_input_length(self) -> int:
        """Longest training model input in tokens (prompt + answer of the longest training
        length): M of position interpolation in tokens."""
        return max(self.input_length(n) for n in range(self.min_length, self.max_train_length + 1))

    def train_lengths(self) -> tuple[int, int]:
        """The training range of K (inclusive): shade it in accuracy-vs-length plots."""
        return self.min_length, self.max_train_length

    def _parse(self, split: str) -> int:
        return parse_split(split, what=f"sequence tasks such as {self.name}",
                           unit="the number of items")

    def splits(self) -> list[str]:
        return [split_name(k) for k in range(self.min_length, self.max_eval_length + 1)]

    def check_split(self, split: str) -> None:
        self._parse(split)

    def max_input_length(self, splits: list[str] | None = None) -> int:
        """Longest model input (prompt + answer) of the training lengths and of ``splits``
        (default: the task's splits), so ``model.check_length`` rejects what it cannot encode
        before any training."""
        lengths = [self._parse(s) for s in (self.splits() if splits is None else splits)]
        lengths += range(self.min_length, self.max_train_length + 1)
        return max(self.input_length(n) for n in lengths)

    # ---- batches ----------------------------------------------------------------------------
    def sequences(self, n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """[B, sequence_length(n)]: prompt, answer, EOS (no padding: one length)."""
        if n < 1:
            raise ValueError(f"the number of items must be >= 1, got {n}")
        prompt, answer = self.sample(n, batch_size, generator)
        assert prompt.shape == (batch_size, self.prompt_length(n)), (self.name, n, prompt.shape)
        assert answer.shape == (batch_size, self.answer_length(n)), (self.name, n, answer.shape)
        eos = torch.full((batch_size, 1), EOS, dtype=torch.long)
        return torch.cat([prompt, answer, eos], 1)

    def mixed_sequences(self, lengths: torch.Tensor, generator: torch.Generator):
        """One example per entry of ``lengths`` [B] (numbers of items), right-padded ->
        (seq [B, S_max], prompt_len [B], seq_len [B]); rows keep the order of ``lengths``.
        Examples of one length are sampled together, shortest length first."""
        B = lengths.shape[0]
        distinct = torch.unique(lengths).tolist()              # sorted ascending
        prompt_len = torch.empty(B, dtype=torch.long)
        seq_len = torch.empty(B, dtype=torch.long)
        seq = torch.full((B, max(self.sequence_length(n) for n in distinct)), PAD,
                         dtype=torch.long)
        for n in distinct:
            rows = (lengths == n).nonzero().squeeze(1)
            s = self.sequences(n, rows.numel(), generator)
            seq[rows, :s.shape[1]] = s
            prompt_len[rows], seq_len[rows] = self.prompt_length(n), s.shape[1]
        return seq, prompt_len, seq_len

    def batch_for_length(self, n: int, batch_size: int, generator: torch.Generator) -> Batch:
        s = self.sequences(n, batch_size, generator)
        full = torch.full((batch_size,), s.shape[1], dtype=torch.long)
        return batch_from_sequences(s, torch.full_like(full, self.prompt_length(n)), full)

    def sample_train_lengths(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """[B] numbers of items, i.i.d. uniform in min_length .. max_train_length."""
        return torch.randint(self.min_length, self.max_train_length + 1, (batch_size,),
                             generator=generator)

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        if self.train_size is None:
            seq, p, s = self.mixed_sequences(self.sample_train_lengths(batch_size, generator),
                                             generator)
            return batch_from_sequences(seq, p, s, self.loss_on)
        idx = self._reader.next_indices(batch_size, generator)
        seq, p, s = self.train_set()
        s = s[idx].long()
        return batch_from_sequences(seq[idx, :int(s.max())].long(), p[idx].long(), s,
                                    self.loss_on)

    def eval_batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        return self.batch_for_length(self._parse(split), batch_size, generator)

    def examples(self, split: str, n_sequences: int, seed: int, batch_size: int = 64):
        """The first ``n_sequences`` evaluation examples of ``split`` for ``seed`` (the ones
        :func:`lengen.eval.evaluate` scores) as ``(prompts, answers)``: lists of 1-D LongTensors,
        each prompt ending in [SEP], each answer ending in EOS."""
        self.check_split(split)
        prompts, answers = [], []
        for batch in seeded_eval_batches(self, split, n_sequences, batch_size, seed):
            p, a = prompts_and_answers(batch)
            prompts += p
            answers += a
        return prompts, answers

    # ---- user prompts (lengen generate --prompt) ----------------------------------------------
    def parse_prompt(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``'a b c'`` or ``'[COPY] a b c [SEP]'`` -> (prompt ids, answer ids + EOS)."""
        ids = self.encode_text(text)
        if ids.numel() and int(ids[0]) == self.word_id(0):
            if ids.numel() < 2 or int(ids[-1]) != SEP:
                word = self.vocab[self.word_id(0)]
                raise ValueError(f"a full prompt must end with [SEP], e.g. '{word} a b [SEP]'; "
                                 f"or give the items only")
            ids = ids[1:-1]
        lo, hi = self.item_range
        items = ids - self.first_symbol
        bad = [self.vocab[int(i)] for i, v in zip(ids, items) if not lo <= int(v) < hi]
        if bad or not ids.numel():
            allowed = " ".join(self.symbols[lo:hi][:20])
            raise ValueError(f"task {self.name} takes prompt items from: {allowed}"
                             f"{' ...' if hi - lo > 20 else ''}; got "
                             f"{' '.join(bad) if bad else 'no items'}")
        prompt, answer = self.encode(items[None])
        return prompt[0], torch.cat([answer[0], torch.tensor([EOS])])

    # ---- the fixed training set, read in epochs -------------------------------------------------
    def train_set(self):
        """(seq [N, S_max], prompt_len [N], seq_len [N]) of the fixed training set (built once
        from ``dataset_seed``: lengths uniform in the training range, items uniform), stored in
        int16/int32 to keep 100K examples small."""
        if self.train_size is None:
            raise ValueError(f"task {self.name} streams its training data; set "
                             f"task.kwargs.train_size=N for a fixed training set")
        if self._data is None:
            g = torch.Generator().manual_seed(self.dataset_seed)
            seq, p, s = self.mixed_sequences(self.sample_train_lengths(self.train_size, g), g)
            dtype = torch.int16 if self.vocab_size < 2 ** 15 else torch.int32
            self._data = (seq.to(dtype), p.to(torch.int32), s.to(torch.int32))
        return self._data

    @property
    def epoch(self) -> int:
        """Epochs of the fixed training set started so far (0 before the first batch)."""
        return 0 if self._reader is None else self._reader.epoch

    def state_dict(self) -> dict:
        """Reading position in the fixed training set (:class:`lengen.tasks.epochs.EpochReader`),
        ``{}`` for a streamed task, whose data state is the training generator alone. Plain
        ints, JSON-safe."""
        if self._reader is None:
            return {}
        return {"train_size": self.train_size, "dataset_seed": self.dataset_seed,
                **self._reader.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; ``{}`` (nothing saved) means the start of the first epoch.
        A state from a different training set is an error, not a silent restart."""
        if not state:
            if self._reader is not None:
                self._reader.reset()
            return
        if self._reader is None:
            raise ValueError(f"task state {state} is for a fixed training set but task "
                             f"{self.name} streams its data (task.kwargs.train_size is unset)")
        mine = (self.train_size, self.dataset_seed)
        theirs = (state.get("train_size"), state.get("dataset_seed"))
        if mine != theirs:
            raise ValueError(f"task state is for a training set with (train_size, dataset_seed) "
                             f"= {theirs}, this task has {mine}")
        self._reader.load_state_dict(state)


__all__ = ["PAD", "EOS", "SEP", "SPECIAL_TOKENS", "ALNUM", "SYMBOLS_100", "SequenceTask",
           "batch_from_sequences", "prompts_and_answers", "seeded_eval_batches"]
