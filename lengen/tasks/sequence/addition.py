"""Decimal addition (Zhou et al. 2024, "Transformers Can Achieve Length Generalization But Not
Robustly"): reversed format, index hints and random-space augmentation.

An example with K = n digits (split ``len=K``): two n-digit operands (the most significant digit
is nonzero for n > 1; n = 1 allows 0..9), each written with ONE extra leading zero so that the
sum, which has at most n + 1 digits, lines up digit for digit with its operands (the paper's "an
additional zero padding to accommodate potential carry-induced extra digits"). The answer always
has n + 1 digits (a leading 0 when there is no final carry). Training draws n ~ U(1, N) per example
(N = ``max_train_length``, default 40); ``operand_lengths='independent'`` draws the two operands'
lengths separately in 1..n_max (the McLeish et al. reading; both are then padded to the longer one
plus one zero, and the split K is the longer operand's length).

Formats (``format``):

* ``reversed`` (the paper's default): both operands and the answer least-significant digit first;
* ``standard``: most-significant digit first everywhere.

Index hints (``hints=True``, the paper's default): an ordered set of 102 hint symbols; every digit
is preceded by a hint, the SAME hint for the same significance in operand 1, operand 2 and the
answer. The hints of a number are a consecutive run of the ordered set, ascending in the order the
digits are written (``hint_order='written'``, the default), as in the paper's only example (Sec.
2.2, standard format): ``42 + 39 = 81`` -> ``a4b2+a3b9=a8b1``, the first hint on the first written,
most significant, digit. lengen writes every number with its zero pad (App. B), so that example
reads ``a0b4c2+a0b3c9=a0b8c1`` here (``hint_start='first'``). The paper shows no reversed-format
example; the same rule gives the first written digit, there the least significant, the first
hint: ``a2b4c0+a9b3c0=a1b8c0``. ``hint_order='lsd_first'`` always gives the least significant
digit the first hint: the same as ``'written'`` in the reversed format, and in the standard format
hints that descend as written (``c0b4a2+c0b3a9=c0b8a1``): what lengen wrote before issue 27,
kept to rerun the runs made with it and as an ablation in which both formats label each
significance alike, so the reversed / standard comparison changes the digit order only. The run
of an example starts at a random offset s ~ U{0, .., H - (n + 1)} (``hint_start='random'``,
training and evaluation alike, as the paper's App. B.1 says: "the same hint sampling strategy is
applied to questions"); the model writes the answer's hints itself. ``hint_start='first'`` always
starts at the first symbol (what one public reimplementation does at evaluation). H is the number
of hint symbols the runs are drawn from, the first H of the ordered set (``n_hints``, default the
paper's 102: its longest test, 100 digits, plus 2; ``n_hints = max_eval_length + 2`` keeps that
relation at a smaller scale, where a run of the longest test can start at either of two symbols).
n + 1 <= H, so the longest encodable operand has H - 1 digits; asking for more is an error before
any training. The vocabulary keeps all 102 symbols whatever H is, so ids do not depend on it.

Random-space augmentation (``random_spaces=p``; Shen et al. 2023, with a dedicated blank token
``_`` instead of a space, as Zhou et al. do "to prevent automatic merging by the tokenizer"): in
the prompt, every gap between two consecutive tokens (also the one before ``=``, never before the
first token) receives k blanks with P(k >= 1) = p and P(k >= j + 1 | k >= j) = p, capped at
``max_spaces``: a geometric number of blanks. The answer never has blanks (the model must write the
clean answer). Applied to training examples; also to evaluation examples when
``random_spaces_eval=True`` (default False: the test set is the clean format).

Layout (token names; ``[SEP]`` plays the paper's ``=``)::

    reversed, hints, 42 + 39 = 81 with hints starting at 'c':
    c 2 d 4 e 0 + c 9 d 3 e 0 [SEP] c 1 d 8 e 0 <eos>
    standard, hints, the same:
    c 0 d 4 e 2 + c 0 d 3 e 9 [SEP] c 0 d 8 e 1 <eos>
    standard, no hints:   0 4 2 + 0 3 9 [SEP] 0 8 1 <eos>

Ids: <pad> 0, <eos> 1, [SEP] 2 ("="), '+' 3, '_' 4 (blank), digits 0..9 = 5..14, hints = 15..116
(102 symbols: a-z, A-Z, 24 Greek lower-case, 10 Greek upper-case, 16 punctuation marks, in that
order); vocab 117. The loss and exact match cover the answer (its hints and digits) and EOS;
``loss_on='all'`` trains on every token of the example (one reading of the paper's "causal
language modeling", App. B: the operands' hints then teach the hint order in the prompt too;
the other reading, the default, is a loss on the answer only).
"""
from __future__ import annotations

import string

import torch

from lengen.tasks.sequence.base import EOS, PAD, SEP, SequenceTask, batch_from_sequences

#: 102 ordered hint symbols
HINTS = tuple(string.ascii_lowercase + string.ascii_uppercase + "αβγδεζηθικλμνξοπρστυφχψω"
              + "ΓΔΘΛΞΠΣΦΨΩ" + "!#$%&()*,./:;?@^")
assert len(HINTS) == len(set(HINTS)) == 102

FORMATS = ("reversed", "standard")
HINT_STARTS = ("random", "first")
HINT_ORDERS = ("written", "lsd_first")
OPERAND_LENGTHS = ("equal", "independent")
PLUS, BLANK = 3, 4           # token ids of '+' and the blank '_'


def add_digits(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Digit-wise sum of [B, W] digit tensors (least significant first, the last digit of both 0)
    -> (sum digits [B, W], carry-in [B, W]: 1 where the previous position carried)."""
    W = a.shape[1]
    out = torch.empty_like(a)
    carry_in = torch.zeros_like(a)
    carry = torch.zeros(a.shape[0], dtype=torch.long)
    for i in range(W):
        carry_in[:, i] = carry
        s = a[:, i] + b[:, i] + carry
        out[:, i], carry = s % 10, s // 10
    assert not bool(carry.any()), "the padded operands must leave room for the carry"
    return out, carry_in


class Addition(SequenceTask):
    """Decimal addition with the formats of Zhou et al. 2024 (see the module docstring)."""

    name = "addition"
    words = ("+", "_")
    symbols = tuple(string.digits) + HINTS
    default_max_train_length = 40

    def __init__(self, max_train_length: int | None = None, max_eval_length: int = 100,
                 min_length: int = 1, format: str = "reversed", hints: bool = True,
                 hint_start: str = "random", hint_order: str = "written",
                 random_spaces: float = 0.0,
                 random_spaces_eval: bool = False, max_spaces: int = 4,
                 operand_lengths: str = "equal", n_hints: int = len(HINTS),
                 train_size: int | None = None, dataset_seed: int = 0,
                 loss_on: str = "answer"):
        super().__init__(min_length=min_length, max_train_length=max_train_length,
                         max_eval_length=max_eval_length, train_size=train_size,
                         dataset_seed=dataset_seed, loss_on=loss_on)
        for key, value, valid in (("format", format, FORMATS),
                                  ("hint_start", hint_start, HINT_STARTS),
                                  ("hint_order", hint_order, HINT_ORDERS),
                                  ("operand_lengths", operand_lengths, OPERAND_LENGTHS)):
            if value not in valid:
                raise ValueError(f"unknown task.kwargs.{key} '{value}' for addition. "
                                 f"Valid: {', '.join(valid)}")
        if not isinstance(hints, bool):
            raise ValueError(f"task.kwargs.hints must be true or false, got {hints!r}")
        if not 0.0 <= float(random_spaces) < 1.0:
            raise ValueError(f"task.kwargs.random_spaces is the probability of a blank in each "
                             f"gap and must be in [0, 1), got {random_spaces}")
        if int(max_spaces) < 1:
            raise ValueError(f"task.kwargs.max_spaces must be >= 1, got {max_spaces}")
        self.format, self.hints, self.hint_start = format, hints, hint_start
        self.hint_order = hint_order
        self.random_spaces, self.random_spaces_eval = float(random_spaces), bool(random_spaces_eval)
        self.max_spaces, self.operand_lengths = int(max_spaces), operand_lengths
        if (isinstance(n_hints, bool) or not isinstance(n_hints, int)
                or not 2 <= n_hints <= len(HINTS)):
            raise ValueError(f"task.kwargs.n_hints is how many of the {len(HINTS)} hint symbols "
                             f"the runs are drawn from: an integer in 2..{len(HINTS)}, got "
                             f"{n_hints!r}")
        self.n_hints = n_hints
        longest = max(self.max_train_length, self.max_eval_length)
        if hints and longest + 1 > n_hints:
            raise ValueError(
                f"with index hints an n-digit addition needs n + 1 distinct hints and there are "
                f"{n_hints} (task.kwargs.n_hints), so operands of at most {n_hints - 1} digits "
                f"can be labelled; got max(max_train_length, max_eval_length) = {longest}. Lower "
                f"task.kwargs.max_eval_length, raise task.kwargs.n_hints (at most {len(HINTS)}) "
                f"or set task.kwargs.hints=false")

    # ---- token ids ----------------------------------------------------------------------------
    @property
    def first_digit(self) -> int:
        return self.first_symbol

    @property
    def first_hint(self) -> int:
        return self.first_symbol + 10

    @property
    def digit_ids(self) -> range:
        return range(self.first_digit, self.first_digit + 10)

    def token_structure(self, splits: list[str] | None = None) -> dict:
        """The digit structure token-structured position samplers read (position coupling,
        Abacus: :mod:`lengen.samplers.digits`): the digit, index-hint and blank ids (they make
        up the numbers; every other token separates them) and ``max_digits``, the widest number
        (n + 1 digits with the zero pad) over the training lengths and ``splits`` (default: the
        task's splits)."""
        ns = [self._parse(s) for s in (self.splits() if splits is None else splits)]
        ns += [self.max_train_length]
        return {"digit_ids": list(self.digit_ids),
                "hint_ids": list(range(self.first_hint, self.first_hint + len(HINTS))),
                "blank_ids": [BLANK], "max_digits": self._width(max(ns))}

    # ---- lengths ------------------------------------------------------------------------------
    def _width(self, n: int) -> int:
        return n + 1                                    # digits per number (one zero pad)

    def answer_length(self, n):
        return self._width(n) * (2 if self.hints else 1)

    def prompt_length(self, n):
        """Prompt tokens for n digits WITHOUT random blanks (the longest with blanks is
        :meth:`max_prompt_length`)."""
        return 2 * self.answer_length(n) + 2

    def max_prompt_length(self, n: int, spaces: bool) -> int:
        base = self.prompt_length(n)
        return base + (base - 1) * self.max_spaces if spaces else base

    def input_length(self, n, spaces: bool | None = None):
        """Longest model input for n digits, with random blanks (the default when the task
        inserts any) or without."""
        spaces = self.random_spaces > 0 if spaces is None else spaces
        return self.max_prompt_length(n, spaces) + self.answer_length(n)

    def max_input_length(self, splits: list[str] | None = None) -> int:
        """Longest model input of the training lengths (with blanks, when random spaces are
        on) and of ``splits`` (with blanks only when ``random_spaces_eval``): a clean test set
        is not held to the length a blank in every gap would give it."""
        spaces = self.random_spaces > 0
        test = [self._parse(s) for s in (self.splits() if splits is None else splits)]
        return max([self.input_length(n, spaces)
                    for n in range(self.min_length, self.max_train_length + 1)]
                   + [self.input_length(n, spaces and self.random_spaces_eval) for n in test])

    # ---- sampling -----------------------------------------------------------------------------
    def sample_operands(self, n: int, batch_size: int, g: torch.Generator):
        """The two operands for K = n as digit tensors [B, n + 1], least significant first, the
        last digit always 0 (values up to 10^101 do not fit int64, so numbers are digits)."""
        W = self._width(n)

        def number(lengths):                          # lengths [B] in 1..n
            d = torch.randint(0, 10, (batch_size, W), generator=g)
            msd = torch.randint(1, 10, (batch_size,), generator=g)
            pos = torch.arange(W)[None, :]
            d = torch.where(pos < lengths[:, None] - 1, d, torch.zeros_like(d))
            top = (lengths - 1)[:, None]
            one_digit = lengths == 1                    # a 1-digit number may be 0
            msd = torch.where(one_digit, torch.randint(0, 10, (batch_size,), generator=g), msd)
            return d.scatter(1, top, msd[:, None])

        full = torch.full((batch_size,), n, dtype=torch.long)
        if self.operand_lengths == "equal":
            return number(full), number(full)
        # independent lengths in 1..n, the longer one exactly n (so the split K is the longer)
        la = torch.randint(1, n + 1, (batch_size,), generator=g)
        lb = torch.randint(1, n + 1, (batch_size,), generator=g)
        swap = torch.rand(batch_size, generator=g) < 0.5
        la = torch.where(swap, full, la)
        lb = torch.where(swap, lb, full)
        return number(la), number(lb)

    def hint_offsets(self, n: int, batch_size: int, g: torch.Generator) -> torch.Tensor:
        """[B] index (in ``HINTS``) of the first hint of each example's run: the hint of the
        first written digit (``hint_order='written'``) or of the least significant one
        (``'lsd_first'``)."""
        if self.hint_start == "first":
            return torch.zeros(batch_size, dtype=torch.long)
        return torch.randint(0, self.n_hints - self._width(n) + 1, (batch_size,), generator=g)

    def write(self, digits: torch.Tensor, hint0: torch.Tensor | None) -> torch.Tensor:
        """Digits [B, W] (least significant first) -> tokens [B, W or 2W] in the task's format,
        each digit preceded by its hint when hints are on."""
        toks = digits + self.first_digit
        W = digits.shape[1]
        if hint0 is not None:
            # [1, W]: each digit's place in the example's hint run (the digits here are least
            # significant first); in the standard format with 'written' order the most
            # significant digit, written first, takes the run's first hint
            place = torch.arange(W)[None, :]
            if self.format == "standard" and self.hint_order == "written":
                place = W - 1 - place
            hint = hint0[:, None] + place + self.first_hint
            toks = torch.stack([hint, toks], -1)          # [B, W, 2]: hint, then digit
        if self.format == "standard":
            toks = toks.flip(1)
        return toks.reshape(digits.shape[0], -1)

    def sample(self, n, batch_size, generator):
        """(prompt [B, prompt_length(n)], answer [B, answer_length(n)]) without blanks."""
        a, b = self.sample_operands(n, batch_size, generator)
        c, _ = add_digits(a, b)
        hint0 = self.hint_offsets(n, batch_size, generator) if self.hints else None
        plus = torch.full((batch_size, 1), PLUS, dtype=torch.long)
        eq = torch.full((batch_size, 1), SEP, dtype=torch.long)
        prompt = torch.cat([self.write(a, hint0), plus, self.write(b, hint0), eq], 1)
        return prompt, self.write(c, hint0)

    def insert_blanks(self, prompt: torch.Tensor, g: torch.Generator):
        """Random blanks in the gaps of ``prompt`` [B, L] -> (padded prompts [B, L'], lengths
        [B]); k blanks per gap, geometric with continuation probability p, capped."""
        B, L = prompt.shape
        p = self.random_spaces
        k = torch.zeros(B, L, dtype=torch.long)
        alive = torch.ones(B, L, dtype=torch.bool)
        alive[:, 0] = False                               # no blank before the first token
        for _ in range(self.max_spaces):
            alive &= torch.rand(B, L, generator=g) < p
            k += alive.long()
        pos = torch.cumsum(k + 1, 1) - 1                  # new index of every original token
        lengths = pos[:, -1] + 1
        out = torch.full((B, int(lengths.max())), BLANK, dtype=torch.long)
        out.scatter_(1, pos, prompt)
        return out, lengths

    def sequences_varlen(self, n: int, batch_size: int, g: torch.Generator):
        """(seq [B, S] right-padded, prompt_len [B], seq_len [B]) for n digits, with random
        blanks in the prompt."""
        prompt, answer = self.sample(n, batch_size, g)
        prompt, plen = self.insert_blanks(prompt, g)
        A = answer.shape[1]
        slen = plen + A + 1
        seq = torch.full((batch_size, int(slen.max())), PAD, dtype=torch.long)
        cols = torch.arange(seq.shape[1])[None, :]
        seq = torch.where(cols < plen[:, None], torch.nn.functional.pad(
            prompt, (0, seq.shape[1] - prompt.shape[1]), value=PAD), seq)
        idx = plen[:, None] + torch.arange(A + 1)[None, :]          # answer + EOS columns
        tail = torch.cat([answer, torch.full((batch_size, 1), EOS, dtype=torch.long)], 1)
        seq.scatter_(1, idx, tail)
        return seq, plen, slen

    def mixed_sequences(self, lengths, generator):
        # only training data is built from mixed lengths (stream and fixed set alike); the test
        # sets come from batch_for_length, blank only with random_spaces_eval
        if self.random_spaces == 0:
            return super().mixed_sequences(lengths, generator)
        B = lengths.shape[0]
        parts, width = [], 0
        for n in torch.unique(lengths).tolist():
            rows = (lengths == n).nonzero().squeeze(1)
            seq, p, s = self.sequences_varlen(n, rows.numel(), generator)
            parts.append((rows, seq, p, s))
            width = max(width, seq.shape[1])
        seq_all = torch.full((B, width), PAD, dtype=torch.long)
        plen = torch.empty(B, dtype=torch.long)
        slen = torch.empty(B, dtype=torch.long)
        for rows, seq, p, s in parts:
            seq_all[rows, :seq.shape[1]] = seq
            plen[rows], slen[rows] = p, s
        return seq_all, plen, slen

    def batch_for_length(self, n, batch_size, generator):
        if self.random_spaces > 0 and self.random_spaces_eval:
            seq, p, s = self.sequences_varlen(n, batch_size, generator)
            return batch_from_sequences(seq, p, s)
        return super().batch_for_length(n, batch_size, generator)

    # ---- reading examples back ------------------------------------------------------------------
    def read_number(self, tokens) -> int | None:
        """Tokens of one number (hints and blanks allowed) -> its value, or None if it holds
        anything but hints, blanks and digits. Used by tests and the error analysis."""
        ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        digits = []
        for t in ids:
            if t in self.digit_ids:
                digits.append(t - self.first_digit)
            elif t == BLANK or self.first_hint <= t < self.first_hint + len(HINTS):
                continue
            else:
                return None
        if not digits:
            return None
        if self.format == "reversed":
            digits = digits[::-1]
        return int("".join(map(str, digits)))

    def read_example(self, prompt, answer=None) -> dict:
        """A prompt (ids, ending in [SEP]) and optionally an answer (ids, EOS allowed) ->
        ``{a, b, sum}`` as Python ints (None where unreadable)."""
        ids = prompt.tolist() if isinstance(prompt, torch.Tensor) else list(prompt)
        if SEP in ids:
            ids = ids[:ids.index(SEP)]
        if PLUS not in ids:
            return {"a": None, "b": None, "sum": None}
        i = ids.index(PLUS)
        out = {"a": self.read_number(ids[:i]), "b": self.read_number(ids[i + 1:]), "sum": None}
        if answer is not None:
            ans = answer.tolist() if isinstance(answer, torch.Tensor) else list(answer)
            if EOS in ans:
                ans = ans[:ans.index(EOS)]
            out["sum"] = self.read_number(ans)
        return out

    def parse_prompt(self, text: str):
        """``'42 + 39'`` (plain decimal, most significant first) -> the prompt and answer ids of
        this task's format, hints starting at the first symbol (for ``lengen generate``)."""
        parts = text.replace("=", " ").split("+")
        try:
            a, b = (int(p.strip()) for p in parts)
        except ValueError:
            raise ValueError(f"addition prompts look like '42 + 39' (two non-negative decimal "
                             f"integers), got {text!r}") from None
        if a < 0 or b < 0:
            raise ValueError(f"addition takes non-negative operands, got {text!r}")
        n = max(len(str(a)), len(str(b)))
        if self.hints and n + 1 > self.n_hints:
            raise ValueError(f"with {self.n_hints} hints (task.kwargs.n_hints) the operands may "
                             f"have at most {self.n_hints - 1} digits")
        W = self._width(n)
        da, db = (torch.tensor([[int(c) for c in str(x).zfill(W)[::-1]]]) for x in (a, b))
        c, _ = add_digits(da, db)
        hint0 = torch.zeros(1, dtype=torch.long) if self.hints else None
        plus, eq = torch.tensor([[PLUS]]), torch.tensor([[SEP]])
        prompt = torch.cat([self.write(da, hint0), plus, self.write(db, hint0), eq], 1)[0]
        return prompt, torch.cat([self.write(c, hint0)[0], torch.tensor([EOS])])


__all__ = ["Addition", "HINTS", "FORMATS", "HINT_ORDERS", "add_digits"]
