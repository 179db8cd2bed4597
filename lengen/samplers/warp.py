"""Head / tail position index warping in training, interpolation at evaluation: the ``warp`` sampler.

"Improving Length Generalization via Position Index Warping", Sec. 4 and 5: during training a
random part of the instances get warped positions, the rest keep ``0, 1, ..., l - 1``:

* **head warping** ("creating fractional position indices", eq. 7): ``pos(j) = alpha * j`` with
  ``0 < alpha < 1``; for tasks alpha is drawn per instance uniformly from {0.4, 0.5, 0.6, 0.7,
  0.8} (Sec. 5.1), for the language-modelling study it is fixed to 1/6 (Sec. 5.2, Table B);
* **tail warping** ("skewing positions non-linearly towards the tail", eq. 8): ``pos(j) = l *
  f_skew(j / l)`` with ``f_skew(0) = 0``, ``f_skew(1) = 1`` (:mod:`lengen.samplers.skew`: sqrt for
  tasks, the Beta(2, 5) CDF for language modelling, or a function of your own).

Each instance is head-warped with probability ``p_head``, tail-warped with probability ``p_tail``
and left alone otherwise (the paper: 15% + 15%, Sec. 5.1; Fig. 6's ``head_only`` / ``tail_only``
warp 30% with one method). At evaluation the method "uses PI" (Sec. 5.1): positions ``j * M /
L_te`` for rows longer than M, exactly as the ``interpolate`` sampler
(:mod:`lengen.samplers.interpolate`, which this class extends; the same ``train_length``,
``factor``, ``length_unit``, ``ratio`` keywords and the same reading of M and L_te).

Our readings, where the paper leaves room:

* **l is the instance's own length** in tokens (its real, unpadded model input: prompt + answer
  for a sequence task, ``Batch.lengths()``), so ``j / l`` runs over [0, 1) for every instance;
  the paper writes ``j = 0 .. L_train - 1`` with one training length. Right padding after the row
  keeps identity positions ``j`` (never seen by the row's tokens in a causal decoder; ``l *
  f(1) = l`` makes the row continue without a jump).
* **Draws**: per call (= per training batch), one uniform number per instance picks its method
  (head if ``u < p_head``, tail if ``p_head <= u < p_head + p_tail``) and one integer its alpha;
  both are drawn for every instance, from the training-positions generator, so the stream is
  reproducible from ``train.seed`` and resumes bit for bit.
* **Presets** (Fig. 6): ``preset="head_tail"`` (15% + 15%, the default), ``"head_only"`` (30%
  head), ``"tail_only"`` (30% tail); or give ``p_head`` / ``p_tail`` yourself (not both with a
  preset).
* ``eval_mode="identity"`` evaluates with positions 0..T-1 instead of PI (an ablation; the paper
  always uses PI with warping).

Bad values fail at construction with the key named: probabilities outside [0, 1] or summing above
1, alpha outside (0, 1), an ``f_skew`` that misses f(0) = 0 / f(1) = 1 or decreases somewhere on
[0, 1] (checked on a grid of 10,001 points), and evaluation interpolation without a training length.
"""
from __future__ import annotations

import numpy as np
import torch

from lengen.checks import Float
from lengen.samplers.interpolate import InterpolateSampler
from lengen.samplers.skew import resolve_skew

#: Fig. 6 of the paper: (p_head, p_tail)
PRESETS = {"head_tail": (0.15, 0.15), "head_only": (0.3, 0.0), "tail_only": (0.0, 0.3)}
#: alpha set of the algorithmic tasks (Sec. 5.1)
TASK_ALPHAS = (0.4, 0.5, 0.6, 0.7, 0.8)
EVAL_MODES = ("interpolate", "identity")


class WarpSampler(InterpolateSampler):
    """Position index warping (head: ``alpha * j``, tail: ``l * f_skew(j / l)``) on a random part
    of the training instances, position interpolation at evaluation.

    Keyword arguments: ``preset`` (head_tail | head_only | tail_only) or ``p_head`` / ``p_tail``;
    ``alphas`` (a number or a list drawn uniformly; default 0.4..0.8); ``skew`` (sqrt | beta |
    'package.module:function'), ``beta_a`` / ``beta_b`` (Beta CDF parameters, default 2, 5);
    ``eval_mode`` (interpolate | identity); and the ``interpolate`` sampler's ``train_length``,
    ``factor``, ``length_unit``, ``items_map``, ``ratio``.
    """

    registry_name = "warp"
    KWARG_RULES = {"p_head": Float(min=0, max=1, optional=True),
                   "p_tail": Float(min=0, max=1, optional=True),
                   "beta_a": Float(gt=0), "beta_b": Float(gt=0)}

    def __init__(self, preset: str | None = None, p_head: float | None = None,
                 p_tail: float | None = None, alphas: float | tuple = TASK_ALPHAS,
                 skew: str = "sqrt", beta_a: float = 2.0, beta_b: float = 5.0,
                 eval_mode: str = "interpolate", **kw):
        if eval_mode not in EVAL_MODES:
            raise ValueError(f"unknown eval_mode {eval_mode!r}; valid: {', '.join(EVAL_MODES)}")
        self.eval_mode = eval_mode
        super().__init__(**kw)
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
            if p_head is not None or p_tail is not None:
                raise ValueError(f"give either model.positions_kwargs.preset ({preset}) or "
                                 f"p_head / p_tail, not both")
            p_head, p_tail = PRESETS[preset]
        elif p_head is None and p_tail is None:
            preset = "head_tail"
            p_head, p_tail = PRESETS[preset]
        p_head = 0.0 if p_head is None else float(p_head)
        p_tail = 0.0 if p_tail is None else float(p_tail)
        for key, p in (("p_head", p_head), ("p_tail", p_tail)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"model.positions_kwargs.{key} is a probability and must be in "
                                 f"[0, 1], got {p}")
        if p_head + p_tail > 1.0 + 1e-12:
            raise ValueError(f"model.positions_kwargs.p_head + p_tail must be <= 1 (each instance "
                             f"gets at most one warp), got {p_head} + {p_tail} = "
                             f"{p_head + p_tail:g}")
        self.preset, self.p_head, self.p_tail = preset, p_head, p_tail
        values = [alphas] if isinstance(alphas, (int, float)) else list(alphas)
        if not values:
            raise ValueError("model.positions_kwargs.alphas is empty: give alpha values in (0, 1)")
        for a in values:
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 < float(a) < 1.0:
                raise ValueError(f"model.positions_kwargs.alphas: head warping needs 0 < alpha < 1 "
                                 f"(eq. 7), got {a!r}")
        self.alphas = tuple(float(a) for a in values)
        self.skew_fn, self.skew_label = resolve_skew(skew, beta_a, beta_b)

    @property
    def eval_interpolates(self) -> bool:
        return self.eval_mode == "interpolate"

    @classmethod
    def _interpolates(cls, kwargs: dict) -> bool:
        return kwargs.get("eval_mode", "interpolate") == "interpolate"

    # -- training ----------------------------------------------------------------------------------
    def draw(self, B: int, generator=None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (kind [B]: 0 none, 1 head, 2 tail; alpha [B] float64) for B instances (CPU)."""
        dev = generator.device if generator is not None else "cpu"
        u = torch.rand(B, generator=generator, device=dev, dtype=torch.float64).cpu()
        pick = torch.randint(len(self.alphas), (B,), generator=generator, device=dev).cpu()
        kind = torch.zeros(B, dtype=torch.long)
        kind[u < self.p_head] = 1
        kind[(u >= self.p_head) & (u < self.p_head + self.p_tail)] = 2
        return kind, torch.tensor(self.alphas, dtype=torch.float64)[pick]

    def tail_positions(self, length: int, l: torch.Tensor) -> torch.Tensor:
        """Eq. 8 for rows of own length ``l`` [n] (float64): ``l f(j / l)`` for j < l, identity
        ``j`` on the padding after the row -> [n, T] float64."""
        j = torch.arange(length, dtype=torch.float64)[None, :]                       # [1, T]
        l = l[:, None]                                                               # [n, 1]
        t = (j / l).clamp(max=1.0)                                                   # [n, T]
        warped = l * torch.from_numpy(np.ascontiguousarray(self.skew_fn(t.numpy())))
        return torch.where(j < l, warped, j)

    def warped(self, length: int, *, batch_size=None, lengths=None, generator=None):
        """Training positions: ``[B, T]`` when some row is warped, else ``[T]``; one row per
        instance (a single ``[T]`` row when neither ``batch_size`` nor ``lengths`` is given)."""
        L, shared = self.row_lengths(length, batch_size, lengths, "cpu")
        B = L.shape[0]
        kind, alpha = self.draw(B, generator)
        j = torch.arange(length, dtype=torch.float64)
        if not bool((kind > 0).any()):
            return j.float()
        pos = j.repeat(B, 1)                                                         # [B, T]
        head, tail = kind == 1, kind == 2
        if bool(head.any()):
            pos[head] = alpha[head][:, None] * j[None, :]                            # eq. 7
        if bool(tail.any()):
            pos[tail] = self.tail_positions(length, L[tail])                         # eq. 8
        return (pos[0] if shared else pos).float()

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        if not training:
            if self.eval_mode == "identity":
                return torch.arange(length, device=device, dtype=torch.float32)
            return self.interpolated(length, device=device, batch_size=batch_size,
                                     lengths=lengths)
        lengths = None if lengths is None else lengths.cpu()
        return self.warped(length, batch_size=batch_size, lengths=lengths,
                           generator=generator).to(device)

    # -- bounds ------------------------------------------------------------------------------------
    def train_max_position(self, length: int) -> float:
        """Largest training position for rows of real length up to ``length`` (<= M when known):
        identity reaches l - 1, head warping less, tail warping up to ``l f((l - 1) / l) < l``."""
        bound = self.train_token_bound()
        top = min(length, bound) if bound is not None else length
        best = float(max(top - 1, 0))
        if self.p_tail > 0 and top >= 1:
            l = np.arange(1, top + 1, dtype=np.float64)
            top_tail = torch.from_numpy(l * self.skew_fn((l - 1) / l)).float().max()
            best = max(best, float(top_tail))                 # as the float32 rows hold it
        return best

    def max_position(self, length):
        ev = self.eval_max_position(length) if self.eval_interpolates else float(length - 1)
        return float(max(self.train_max_position(length), ev, 0.0))

    def describe(self):
        alphas = (f"alpha {self.alphas[0]:g}" if len(self.alphas) == 1 else
                  f"alpha from {{{', '.join(f'{a:g}' for a in self.alphas)}}}")
        ev = self.describe_eval() if self.eval_interpolates else "positions 0..T-1"
        name = f"warp ({self.preset})" if self.preset else "warp"
        return (f"{name}: train: per instance {100 * self.p_head:g}% head (alpha * j, {alphas}), "
                f"{100 * self.p_tail:g}% tail (l * {self.skew_label}(j / l)), the rest 0..l-1; "
                f"eval: {ev}")


__all__ = ["WarpSampler", "PRESETS", "TASK_ALPHAS", "EVAL_MODES"]
