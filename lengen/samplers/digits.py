"""Token-structured positions for arithmetic: position coupling (Cho et al. 2024) and Abacus
(McLeish et al. 2024), as batch-aware position samplers.

Both papers replace the token's index by a position computed from the *digit structure* of the
sequence, so that the digits of equal significance in the two operands and in the answer are
recognisable as such whatever the length. lengen has one positional scheme per model and positions
are data, so both are samplers that turn the tokens ([B, T]) into positions ([B, T]); the scheme
that consumes them is chosen as usual:

* **Position coupling** = ``model.positions=coupling`` with ``model.posenc=learned`` (Cho et al.'s
  main setting: absolute learned embeddings of the coupled ids), or ``rope`` / ``fire`` /
  ``kerple_log`` (relative schemes on the coupled ids: ``i - j`` becomes a difference of
  significances).
* **Abacus** = ``model.positions=abacus`` with ``model.posenc=learned``: McLeish et al. add a
  learned embedding, looked up by the digit's index inside its number, to the input embeddings,
  which is exactly the learned scheme's ``embed`` hook; the attention itself has no other
  positional signal (NoPE), as in their Abacus-only models. Their Abacus + FIRE combination needs
  two schemes at once (an embedding on the Abacus ids and a bias on the token indices); lengen's
  single-scheme model does not compose that, and it is not built here.

**The digit index.** A *number* is a maximal stretch of digits, index hints and blanks (the
task's ``digit_ids``, ``hint_ids``, ``blank_ids``); every other token (``+``, ``=``/``[SEP]``,
EOS, padding, task words) is a *separator*. For token t let ``c_t`` be the number of digits of the
current number strictly before t (counted from the last separator before t). A digit's ``c`` is
its index in its number in reading order, 0-based; an index hint and a blank get the ``c`` of the
next digit (the hint labels that digit; a blank sits in front of it); a separator gets the number
of digits of the number it closes. The addition task writes every number with the same width
(n + 1 digits with the zero pad, also for operands of different lengths), so equal ``c`` means
equal significance in both formats: in the reversed format ``c`` is the significance, in the
standard format it is ``n - significance``. (Cho et al. write the operands most significant digit
first and the answer reversed; that mix is not a lengen format, and would need ``c`` counted from
the other end for the answer.)

* ``coupling`` (Cho et al. 2024, "Position Coupling: Improving Length Generalization of
  Arithmetic Transformers Using Task Structure"): **every** token gets ``s + 1 + c_t``, where
  ``s`` is the start offset. So the digits of one significance share one id across the operands
  and the answer, a hint shares its digit's id, and ``+`` / ``=`` / EOS get the id one past the
  last digit of the number they close (Cho et al.'s reference data gives ``+`` and ``=`` exactly
  that id). Training: ``s ~ U{0, .., max_position - 1 - W}`` drawn per row (the reference draws
  one start per example; ``offsets='batch'`` draws one per batch), W = the row's widest number,
  so every id stays <= ``max_position`` and ids up to ``max_position`` are all trained even with
  short training numbers: that is what lets a learned table cover test numbers longer than the
  training ones. Evaluation and generation: ``s = eval_offset`` (default 0), deterministic.
  ``max_position`` defaults to the widest number the run is checked for + 1.
* ``abacus`` (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings"):
  a digit gets ``k + 1 + c_t`` (1-based index in its number), every other token 0, hints and
  blanks included (the paper has no hints; a hint is not a digit, so it gets the non-digit id 0
  as every non-digit does in the public code; the hint/blank tokens do not break a number, which is
  what makes hints and Abacus compose). Training: one ``k ~ U{0, .., max_k}`` per batch (the
  public code draws one per forward pass; ``offsets='row'`` draws one per row); evaluation and
  generation: ``k = 0``. ``max_k`` defaults to 99, the public code's value.

Both are causal: the position of token t depends on tokens ``<= t`` only (coupling's on tokens
``< t``), so the positions of a prefix are the prefix of the positions. Evaluation is therefore
deterministic and independent of the batch, and ``Transformer.generate`` computes them step by
step from the tokens written so far (:mod:`lengen.model.generate`): a generated answer is
positioned by what the model wrote, never by the target. Called without ``tokens`` the samplers
raise a ValueError (they have nothing to compute from).

The token ids come from the task: :func:`lengen.config.check_components` calls
:meth:`DigitRunSampler.task_defaults` before building the sampler, which fills ``digit_ids``,
``hint_ids``, ``blank_ids`` and ``max_digits`` from the task's ``token_structure(splits)`` (the
addition task has one; a task without digit structure is an error there). The resolved config
holds the ids, so a run directory rebuilds the same sampler.
"""
from __future__ import annotations

import torch

from lengen.checks import Choice, Int
from lengen.samplers.base import PositionSampler

OFFSETS = ("row", "batch")


def _ids(name: str, value, required: bool) -> tuple[int, ...]:
    if value is None or (not required and len(value) == 0):
        if required:
            raise ValueError(
                f"positions_kwargs.{name} is not set: this sampler needs the task's digit token "
                f"ids. lengen.resolve fills them from a task with digit structure (e.g. "
                f"task.name=addition); when building a model by hand pass "
                f"model.positions_kwargs.{name}=[...]")
        return ()
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"positions_kwargs.{name} must be a list of token ids (integers >= "
                             f"0), got {list(value)!r}")
        out.append(int(v))
    if required and not out:
        raise ValueError(f"positions_kwargs.{name} is empty; give the task's digit token ids")
    return tuple(out)


def digit_index(tokens: torch.Tensor, is_digit: torch.Tensor, in_number: torch.Tensor):
    """``c`` of every token (see the module docstring): tokens, is_digit, in_number [B, T] ->
    c [B, T] (long). Vectorised: the digits before t minus the digits before the last separator
    before t."""
    B, T = tokens.shape
    d = is_digit.long()
    before = torch.cumsum(d, 1) - d                                      # digits strictly before t
    idx = torch.arange(T, device=tokens.device).expand(B, T)
    sep_at = torch.where(~in_number, idx, torch.full_like(idx, -1))      # [B, T]
    last = torch.cummax(sep_at, 1).values                                # last separator <= t
    prev = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], 1)   # ... strictly < t
    base = torch.where(prev >= 0, before.gather(1, prev.clamp_min(0)), torch.zeros_like(before))
    return before - base


class DigitRunSampler(PositionSampler):
    """Base of the token-structured arithmetic samplers (not registered itself)."""

    per_instance = True
    random_at_eval = False
    uses_batch = True
    #: positions are a function of the tokens; ``generate`` computes them step by step
    reads_tokens = True
    integer_positions = True             # digit indices
    #: the resolve-time hook fills these keys from ``task.token_structure(splits)``
    TASK_KEYS = ("digit_ids", "hint_ids", "blank_ids", "max_digits")
    KWARG_RULES = {"max_digits": Int(min=1, optional=True), "offsets": Choice(*OFFSETS)}

    def __init__(self, digit_ids: tuple | None = None, hint_ids: tuple | None = None,
                 blank_ids: tuple | None = None, max_digits: int | None = None,
                 offsets: str = "row"):
        self.digit_ids = _ids("digit_ids", digit_ids, True)
        self.hint_ids = _ids("hint_ids", hint_ids, False)
        self.blank_ids = _ids("blank_ids", blank_ids, False)
        overlap = (set(self.digit_ids) & set(self.hint_ids + self.blank_ids)) | (
            set(self.hint_ids) & set(self.blank_ids))
        if overlap:
            raise ValueError(f"positions_kwargs: token ids {sorted(overlap)} are listed in more "
                             f"than one of digit_ids, hint_ids, blank_ids")
        if max_digits is None:
            raise ValueError("positions_kwargs.max_digits is not set: the widest number (in "
                             "digits) the model must position. lengen.resolve fills it from the "
                             "task's training and evaluation lengths")
        if isinstance(max_digits, bool) or int(max_digits) < 1:
            raise ValueError(f"positions_kwargs.max_digits must be an integer >= 1, got "
                             f"{max_digits!r}")
        if offsets not in OFFSETS:
            raise ValueError(f"unknown positions_kwargs.offsets '{offsets}'. Valid: "
                             f"{', '.join(OFFSETS)}")
        self.max_digits, self.offsets = int(max_digits), offsets
        self._digits = torch.tensor(self.digit_ids)
        self._number = torch.tensor(self.digit_ids + self.hint_ids + self.blank_ids)

    # ---- resolve-time hook ---------------------------------------------------------------------
    @classmethod
    def task_defaults(cls, kwargs: dict, task, splits=()) -> dict:
        """``kwargs`` with the keys in ``TASK_KEYS`` the user left out filled from
        ``task.token_structure(splits)``; ValueError when the task has no digit structure or a
        given ``max_digits`` is below what the task's lengths need."""
        structure = getattr(task, "token_structure", None)
        if structure is None:
            raise ValueError(
                f"model.positions={cls.registry_name} computes positions from the digits of the "
                f"sequence, and task '{task.name}' has no digit structure (no token_structure "
                f"method); use it with task.name=addition, or another model.positions")
        s = structure(splits)
        out = dict(kwargs)
        for key in cls.TASK_KEYS:
            if out.get(key) is None:
                out[key] = s[key]
        if out["max_digits"] < s["max_digits"]:
            raise ValueError(f"model.positions_kwargs.max_digits={out['max_digits']} but the "
                             f"task's lengths (training and {len(splits)} evaluation split(s)) "
                             f"have numbers of up to {s['max_digits']} digits; raise it or leave "
                             f"it out (then it is taken from the task)")
        return out

    # ---- the digit index -------------------------------------------------------------------------
    def classes(self, tokens: torch.Tensor):
        """tokens [B, T] -> (is_digit, in_number, c), each [B, T]."""
        is_digit = torch.isin(tokens, self._digits.to(tokens.device))
        in_number = torch.isin(tokens, self._number.to(tokens.device))
        return is_digit, in_number, digit_index(tokens, is_digit, in_number)

    def _need_tokens(self, tokens, length, batch_size):
        if tokens is None:
            raise ValueError(
                f"{type(self).__name__} computes positions from the tokens and was called without "
                f"them. Training and evaluation pass them; Transformer.generate computes them "
                f"step by step from the tokens written so far; elsewhere call "
                f"model(tokens) or sample(..., tokens=[B, T])")
        if tokens.dim() != 2 or tokens.shape[1] != length:
            raise ValueError(f"tokens must be [B, T] with T = {length}, got "
                             f"{list(tokens.shape)}")
        if batch_size is not None and tokens.shape[0] != batch_size:
            raise ValueError(f"tokens have {tokens.shape[0]} rows but batch_size={batch_size}")

    def _draw(self, high: torch.Tensor, generator, device) -> torch.Tensor:
        """One offset per row, uniform in 0..high[b] (inclusive; high [B] >= 0), from
        ``generator``; with ``offsets='batch'`` one uniform draw u shared by the rows (row b:
        floor(u (high[b] + 1)))."""
        gen_device = generator.device if generator is not None else "cpu"
        n = 1 if self.offsets == "batch" else high.shape[0]
        u = torch.rand(n, generator=generator, device=gen_device).to(device)
        return (u * (high + 1).to(u.dtype)).floor().long().clamp_max(high)


class CouplingSampler(DigitRunSampler):
    """Position coupling (Cho et al. 2024): every token gets s + 1 + its digit index, so digits
    of equal significance share one id; random start s per row in training, s = eval_offset at
    evaluation (see the module docstring)."""

    registry_name = "coupling"
    KWARG_RULES = {"max_position": Int(min=2, optional=True), "eval_offset": Int(min=0)}

    def __init__(self, *, max_position: int | None = None, eval_offset: int = 0,
                 offsets: str = "row", **kw):
        super().__init__(offsets=offsets, **kw)
        self.eval_offset = int(eval_offset)
        #: largest id in training (Cho et al.'s max_pos); kwarg ``max_position``
        self.top = self.max_digits + 1 if max_position is None else int(max_position)
        if self.top < self.max_digits + 1:
            raise ValueError(f"positions_kwargs.max_position={self.top} leaves no id for "
                             f"the separator after a {self.max_digits}-digit number; it must be "
                             f">= max_digits + 1 = {self.max_digits + 1}")

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        self._need_tokens(tokens, length, batch_size)
        is_digit, _, c = self.classes(tokens)                              # [B, T]
        if not training:
            s = torch.full((tokens.shape[0],), self.eval_offset, device=tokens.device)
        else:
            width = (c + is_digit.long()).max(1).values     # widest number of each row [B]
            high = self.top - 1 - width
            if bool((high < 0).any()):
                raise ValueError(f"a training row has a {int(width.max())}-digit number but "
                                 f"positions_kwargs.max_position={self.top}; raise it "
                                 f"to >= {int(width.max()) + 1}")
            s = self._draw(high, generator, tokens.device)
        pos = s[:, None] + 1 + c                                           # [B, T]
        return pos.to(device=device if device is not None else tokens.device,
                      dtype=torch.float32)

    def max_position(self, length):
        return float(max(self.top, self.eval_offset + self.max_digits + 1))

    def describe(self):
        return (f"coupling: s + 1 + digit index (equal significance -> equal id); train: s per "
                f"{self.offsets} in 0..{self.top} - 1 - width; eval: s = "
                f"{self.eval_offset}")


class AbacusSampler(DigitRunSampler):
    """Abacus positions (McLeish et al. 2024): a digit gets k + its 1-based index in its number,
    every other token 0; one random k in 0..max_k per batch in training, k = 0 at evaluation (see
    the module docstring)."""

    registry_name = "abacus"
    KWARG_RULES = {"max_k": Int(min=0)}

    def __init__(self, *, max_k: int = 99, offsets: str = "batch", **kw):
        super().__init__(offsets=offsets, **kw)
        self.max_k = int(max_k)

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        self._need_tokens(tokens, length, batch_size)
        is_digit, _, c = self.classes(tokens)
        B = tokens.shape[0]
        if training and self.max_k > 0:
            k = self._draw(torch.full((B,), self.max_k, device=tokens.device), generator,
                           tokens.device)
        else:
            k = torch.zeros(B, dtype=torch.long, device=tokens.device)
        pos = torch.where(is_digit, k[:, None] + 1 + c, torch.zeros_like(c))   # [B, T]
        return pos.to(device=device if device is not None else tokens.device,
                      dtype=torch.float32)

    def max_position(self, length):
        return float(self.max_k + self.max_digits)

    def describe(self):
        return (f"abacus: digits k + 1-based index in their number, other tokens 0; train: k in "
                f"0..{self.max_k} per {self.offsets}; eval: k = 0")


__all__ = ["CouplingSampler", "AbacusSampler", "DigitRunSampler", "digit_index"]
