"""Position interpolation per test length: the ``interpolate`` sampler.

Position interpolation (PI; Chen et al. 2023) scales test positions down to the range seen in
training, eq. 5 of "Improving Length Generalization via Position Index Warping"::

    pos(i) = i * (training input length) / (test input length),    i = 0 .. L_test - 1

PI was proposed for a fixed training and test length; for tasks whose lengths vary the
index-warping paper (Sec. 5.1) "adapt[s] the interpolation ratio to M / L_te for each test input
length L_te (> M) where M denotes the maximum training input length", with no fine-tuning. This
sampler does exactly that, per row of the batch (``[B, T]`` positions), deterministically:

* **training**: positions ``0 .. T-1`` (identity);
* **evaluation / generation**: row b of real length ``L_b`` gets ``j * M / L_b`` when
  ``L_b > M``, and ``0 .. L_b - 1`` otherwise (seen lengths are untouched). ``factor=F`` instead
  divides every evaluation position by a fixed F (PI at one fixed ratio, e.g. a language model
  trained at 512 and tested at 2048: F = 4).

**What L_te and M count (our reading, stated because the paper does not say).** ``length_unit=
"tokens"`` (default): both are lengths of what the model reads, in tokens -- for a decoder
sequence task the prompt *and* the answer (``Batch.lengths()``, e.g. ``2K + 2`` tokens for copy
with K items) -- and M is the longest training input, ``task.train_input_length()``. This maps
every test position into the trained range [0, M) (the purpose of PI) whatever the task's layout,
and it is the only reading that exists for a language model. ``length_unit="items"``: the paper's
literal numbers, M = the longest training item count (M = 20 for copy / reverse, 8 for sort /
summation: its U(2, M)) and L_te = the row's item count, i.e. the *input* (prompt) length without
the answer; the row's K is read from its token length through the task's affine length map
``tokens = a K + b`` (``items_map = [a, b]``, filled in from the task). For copy the two ratios are
``(M + 1) / (K + 1)`` and ``M / K``. ``ratio="last_index"`` uses ``(M - 1) / (L_te - 1)``
instead (the last test index lands on the last training index; the idealized analysis's
``pi_ratio`` option).

**M must be known.** Built through a config (``lengen train``, ``lengen.resolve``), ``train_length``
is filled in from the task (:meth:`InterpolateSampler.task_defaults`: the task's
``train_input_length()``, or ``train_lengths()`` for items) and saved in the run's config.json;
a task that does not know its training length is an error naming ``train_length`` and
``factor``. Built by hand, give ``train_length`` or ``factor``.

Generation without explicit positions hands the sampler the lengths the rows can reach, prompt +
``max_new_tokens``; :mod:`lengen.eval.generation` passes the teacher-forced positions instead, so
generated and teacher-forced exact match use the same positions.
"""
from __future__ import annotations

import torch

from lengen.checks import Float, Int
from lengen.samplers.base import PositionSampler
from lengen.tasks.base import task_train_length

UNITS = ("tokens", "items")
RATIOS = ("length", "last_index")


def task_items_map(task, *, max_items: int = 200) -> tuple[int, int]:
    """``(a, b)`` with ``tokens = a * K + b`` for a row of K items of ``task`` (checked for K =
    1..max_items), or ValueError when the task has no such affine map."""
    fn = getattr(task, "model_length", None) or getattr(task, "input_length", None)
    if fn is None or not hasattr(task, "train_lengths"):
        raise ValueError(f"length_unit=items needs a task with item counts (copy, reverse, sort, "
                         f"summation ...); task {getattr(task, 'name', task)!r} has none; use "
                         f"length_unit=tokens")
    lengths = [fn(k) for k in range(1, max_items + 1)]
    a, b = lengths[1] - lengths[0], lengths[0] - (lengths[1] - lengths[0])
    if a <= 0 or any(n != a * k + b for k, n in zip(range(1, max_items + 1), lengths)):
        raise ValueError(f"length_unit=items needs a task whose input has a*K + b tokens for K "
                         f"items; task {task.name!r} does not (e.g. variable-width numbers); use "
                         f"length_unit=tokens")
    return int(a), int(b)


class InterpolateSampler(PositionSampler):
    """Position interpolation per test length (Chen et al. 2023, as the index-warping paper adapts
    it): identity in training; at evaluation row b gets ``j * M / L_b`` when ``L_b > M``.

    Keyword arguments: ``train_length`` (M; filled in from the task by a config), ``factor`` (a
    fixed PI factor instead of M / L), ``length_unit`` ("tokens" | "items"), ``items_map`` ([a, b],
    items only; filled in from the task), ``ratio`` ("length": M / L; "last_index": (M-1) / (L-1)).
    """

    registry_name = "interpolate"
    per_instance = True
    uses_batch = True
    random_at_eval = False
    KWARG_RULES = {"train_length": Int(min=1, optional=True),
                   "factor": Float(min=1, optional=True)}

    def __init__(self, train_length: int | None = None, factor: float | None = None,
                 length_unit: str = "tokens", items_map: tuple | None = None,
                 ratio: str = "length"):
        if length_unit not in UNITS:
            raise ValueError(f"unknown length_unit {length_unit!r}; valid: {', '.join(UNITS)}")
        if ratio not in RATIOS:
            raise ValueError(f"unknown ratio {ratio!r}; valid: {', '.join(RATIOS)}")
        if train_length is not None and factor is not None:
            raise ValueError("give either model.positions_kwargs.train_length (M: PI ratio M / L "
                             "per test length) or factor (one fixed PI factor), not both")
        if train_length is not None and (isinstance(train_length, bool)
                                         or int(train_length) != train_length
                                         or int(train_length) < 1):
            raise ValueError(f"train_length must be an integer >= 1, got {train_length!r}")
        if factor is not None and not float(factor) >= 1:
            raise ValueError(f"factor must be >= 1 (positions are divided by it), got {factor!r}")
        self.train_length = None if train_length is None else int(train_length)
        self.factor = None if factor is None else float(factor)
        self.length_unit, self.ratio = length_unit, ratio
        self.items_map = None
        if items_map is not None:
            if (isinstance(items_map, (str, bytes)) or not hasattr(items_map, "__len__")
                    or len(items_map) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in items_map)):
                raise ValueError(f"model.positions_kwargs.items_map must be two integers [a, b] "
                                 f"(a row of K items has a*K + b tokens), got {items_map!r}")
            a, b = (int(x) for x in items_map)
            if a < 1:
                raise ValueError(f"items_map [a, b] needs a >= 1 (tokens per item), got {a}")
            self.items_map = (a, b)
        if self.eval_interpolates and self.train_length is None and self.factor is None:
            raise ValueError(
                f"{self.registry_name} interpolates evaluation positions by M / L_te and needs M, "
                f"the longest training length: set model.positions_kwargs.train_length=M "
                f"(length_unit={length_unit}) or a fixed model.positions_kwargs.factor=F. Through "
                f"a config (lengen train) M is read from the task when the task knows it")
        if length_unit == "items" and self.factor is None and self.items_map is None \
                and self.eval_interpolates:
            raise ValueError("length_unit=items needs model.positions_kwargs.items_map=[a, b] "
                             "(a row of K items has a*K + b tokens); a config fills it in from "
                             "the task")

    @property
    def eval_interpolates(self) -> bool:
        """True when evaluation positions are interpolated (always, for this sampler)."""
        return True

    @classmethod
    def _interpolates(cls, kwargs: dict) -> bool:
        return True

    # -- the task hook (lengen.config.check_components) ------------------------------------------
    @classmethod
    def task_defaults(cls, kwargs: dict, task, splits=()) -> dict:
        """Fill in what the task knows: ``train_length`` (M) and, for items, ``items_map``.
        Explicit values win. ValueError when M is needed and the task does not know it."""
        kw = dict(kwargs)
        if kw.get("factor") is not None or not cls._interpolates(kw):
            return kw
        if kw.get("length_unit", "tokens") == "items":
            if kw.get("items_map") is None:
                kw["items_map"] = list(task_items_map(task))
            if kw.get("train_length") is None:
                kw["train_length"] = int(task.train_lengths()[1])
            return kw
        if kw.get("train_length") is None:
            M = task_train_length(task)
            if M is None:
                raise ValueError(f"interpolation needs M, the longest training length, and task "
                                 f"{getattr(task, 'name', task)!r} does not say it; set "
                                 f"model.positions_kwargs.train_length=M (tokens) or "
                                 f"model.positions_kwargs.factor=F")
            kw["train_length"] = int(M)
        return kw

    # -- the maths ---------------------------------------------------------------------------------
    def _in_unit(self, L: torch.Tensor) -> torch.Tensor:
        """Row lengths in tokens (float64) -> in ``length_unit``."""
        if self.length_unit == "tokens":
            return L
        a, b = self.items_map
        return (L - b) / a

    def scales(self, L: torch.Tensor) -> torch.Tensor:
        """Row lengths in tokens [B] (float64) -> the factor each row's positions are multiplied
        by at evaluation [B] (1 where the row is not longer than M)."""
        if self.factor is not None:
            return torch.full_like(L, 1.0 / self.factor)
        n, M = self._in_unit(L), float(self.train_length)
        r = M / n if self.ratio == "length" else (M - 1) / (n - 1).clamp_min(1e-12)
        return torch.where(n > M, r, torch.ones_like(r))

    @staticmethod
    def row_lengths(length: int, batch_size, lengths, device) -> tuple[torch.Tensor, bool]:
        """(real row lengths as float64 [B], shared): every row ``length`` long when not given;
        ``shared`` (and a single row) when neither ``lengths`` nor ``batch_size`` is given."""
        if lengths is not None:
            return lengths.to(device=device, dtype=torch.float64).reshape(-1), False
        n, shared = (1, True) if batch_size is None else (batch_size, False)
        return torch.full((n,), float(length), dtype=torch.float64, device=device), shared

    def interpolated(self, length: int, *, device=None, batch_size=None, lengths=None):
        """Evaluation positions: ``[T]`` when every row is identity-mapped (or no batch was
        given), else ``[B, T]``."""
        L, shared = self.row_lengths(length, batch_size, lengths, device)
        j = torch.arange(length, dtype=torch.float64, device=device)                  # [T]
        s = self.scales(L)                                                            # [B]
        if bool((s == 1).all()):
            return j.float()
        pos = j[None, :] * s[:, None]                                                 # [B, T]
        return (pos[0] if shared else pos).float()

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        if training:
            return torch.arange(length, device=device, dtype=torch.float32)
        return self.interpolated(length, device=device, batch_size=batch_size, lengths=lengths)

    # -- bounds ------------------------------------------------------------------------------------
    def train_token_bound(self) -> int | None:
        """Longest training input in tokens when known (training never exceeds M)."""
        if self.train_length is None:
            return None
        if self.length_unit == "tokens":
            return self.train_length
        if self.items_map is None:
            return None
        a, b = self.items_map
        return a * self.train_length + b

    def eval_max_position(self, length: int) -> float:
        """Largest evaluation position over rows of real length 1..length."""
        L = torch.arange(1, length + 1, dtype=torch.float64)
        # the very float32 values :meth:`interpolated` returns (float64 products, rounded)
        return float(((L - 1) * self.scales(L)).float().max()) if length else 0.0

    def max_position(self, length):
        bound = self.train_token_bound()
        train = (min(length, bound) if bound is not None else length) - 1
        return float(max(train, self.eval_max_position(length), 0))

    def describe_eval(self) -> str:
        if self.factor is not None:
            return f"positions j / {self.factor:g} (PI, fixed factor)"
        unit = "tokens" if self.length_unit == "tokens" else "items"
        r = "M / L" if self.ratio == "length" else "(M - 1) / (L - 1)"
        return (f"rows longer than M = {self.train_length} {unit} get j * {r} (PI per length), "
                f"others 0..L-1")

    def describe(self):
        return f"interpolate: train: positions 0..T-1; eval: {self.describe_eval()}"


__all__ = ["InterpolateSampler", "UNITS", "RATIOS", "task_items_map"]
