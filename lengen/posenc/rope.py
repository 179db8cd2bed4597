"""Rotary position embedding (RoPE; Su et al. 2021). Options: a rotary fraction and named
scalings (linear, dynamic NTK, YaRN, Llama 3.1, LongRoPE).

Rotates each pair of query/key channels by angle ``pos * theta_i``, ``theta_i = base^(-2i/d)``,
so the score q_i.k_j depends only on ``pos_i - pos_j`` (eq. 2 of the index-warping paper). Pairs
are the two halves of the rotated channels (the GPT-NeoX / Llama layout). Fractional positions
are allowed (position interpolation, index warping), shared ``[T]`` or per sequence ``[B, T]``
(each row rotates its own sequence's q and k).

Options (``model.posenc_kwargs``):

* ``rotary_fraction`` (default 1.0 = the paper's formula over the whole head): rotate only the
  first ``d`` channels of each head, d = the largest even number <= fraction x head dim, and pass
  the rest through unrotated; the frequencies are then ``base^(-2i/d)`` over the rotated channels
  (Hugging Face's ``partial_rotary_factor``). Kazemnejad et al. (2023), whose tasks the
  index-warping paper uses, rotate 25% (rotate-every-two layout; the layout is a fixed channel
  permutation, which the learned projections absorb).
* ``scaling`` = ``none`` (default) | ``linear`` | ``dynamic`` | ``yarn`` | ``llama3`` |
  ``longrope`` with ``factor`` (s >= 1), ``original_length`` (L0, for dynamic / yarn / llama3 /
  longrope: filled in from the task's longest training input by a config), ``beta_fast`` /
  ``beta_slow`` (YaRN, 32 / 1), ``low_freq_factor`` / ``high_freq_factor`` (Llama 3.1, 1 / 4),
  ``short_factor`` / ``long_factor`` (LongRoPE's per-pair rescale lists, rotated dim / 2 numbers
  each) and ``attention_factor`` (the multiplier of cos / sin of YaRN, default 0.1 ln(s) + 1, and
  LongRoPE, default sqrt(1 + ln s / ln L0)). Each scaling accepts only its own options
  (``SCALING_KWARGS``). The formulas, and what the current length means for dynamic NTK and
  LongRoPE (also in cached decoding), are in :mod:`lengen.posenc.rope_scaling`.
"""
from __future__ import annotations

import torch

from lengen.checks import Float, Int, Seq
from lengen.posenc.base import PositionalScheme
from lengen.posenc.rope_scaling import (SCALINGS, dynamic_base, inv_freq, llama3_inv_freq,
                                        longrope_attention_factor, longrope_inv_freq,
                                        yarn_attention_factor, yarn_inv_freq)
from lengen.tasks.base import task_train_length


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, d]; cos/sin: [T, d] or [B, 1, T, d]."""
    return x * cos + rotate_half(x) * sin


#: the posenc_kwargs each scaling reads (besides base / rotary_fraction); any other scaling option
#: set is refused, naming these
SCALING_KWARGS = {
    "none": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_length"),
    "yarn": ("factor", "original_length", "beta_fast", "beta_slow", "attention_factor"),
    "llama3": ("factor", "original_length", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_length", "factor", "attention_factor"),
}
#: scalings whose formulas need the original context length L0
NEEDS_L0 = ("dynamic", "yarn", "llama3", "longrope")


class RoPE(PositionalScheme):
    KWARG_RULES = {"base": Float(gt=0), "rotary_fraction": Float(gt=0, max=1),
                   "factor": Float(min=1, optional=True),
                   "original_length": Int(min=1, optional=True),
                   "beta_fast": Float(gt=0, optional=True), "beta_slow": Float(gt=0, optional=True),
                   "attention_factor": Float(gt=0, optional=True),
                   "low_freq_factor": Float(gt=0, optional=True),
                   "high_freq_factor": Float(gt=0, optional=True),
                   "short_factor": Seq(Float(gt=0), min_len=1, optional=True),
                   "long_factor": Seq(Float(gt=0), min_len=1, optional=True)}

    def __init__(self, *, base: float = 10000.0, rotary_fraction: float = 1.0,
                 scaling: str = "none", factor: float | None = None,
                 original_length: int | None = None, beta_fast: float | None = None,
                 beta_slow: float | None = None, attention_factor: float | None = None,
                 low_freq_factor: float | None = None, high_freq_factor: float | None = None,
                 short_factor: list | None = None, long_factor: list | None = None, **kw):
        super().__init__(**kw)
        if not 0 < rotary_fraction <= 1:
            raise ValueError(f"posenc_kwargs.rotary_fraction must be in (0, 1], got "
                             f"{rotary_fraction}")
        if rotary_fraction == 1 and self.head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got head_dim={self.head_dim} "
                             f"(d_model / n_heads); change d_model or n_heads")
        rot = int(self.head_dim * rotary_fraction)
        rot -= rot % 2
        if rot < 2:
            raise ValueError(f"posenc_kwargs.rotary_fraction={rotary_fraction} rotates "
                             f"{rotary_fraction} x head_dim {self.head_dim} < 2 channels; raise "
                             f"it (at least 2 / head_dim)")
        if scaling not in SCALINGS:
            raise ValueError(f"unknown posenc_kwargs.scaling {scaling!r}; valid: "
                             f"{', '.join(SCALINGS)}")
        given = {"factor": factor, "original_length": original_length, "beta_fast": beta_fast,
                 "beta_slow": beta_slow, "attention_factor": attention_factor,
                 "low_freq_factor": low_freq_factor, "high_freq_factor": high_freq_factor,
                 "short_factor": short_factor, "long_factor": long_factor}
        for key, value in given.items():
            if value is not None and key not in SCALING_KWARGS[scaling]:
                users = [s for s, keys in SCALING_KWARGS.items() if key in keys]
                if scaling == "none":
                    if key == "factor" and value == 1:
                        continue                   # the identity: harmless, accepted as before
                    raise ValueError(f"posenc_kwargs.{key}={value} needs a scaling: set "
                                     f"posenc_kwargs.scaling to one that takes {key} "
                                     f"({', '.join(users)}) or remove {key}")
                takes = ", ".join(SCALING_KWARGS[scaling])
                raise ValueError(f"posenc_kwargs.{key} is not an option of scaling={scaling} "
                                 f"(it is one of scaling {' / '.join(users)}): set "
                                 f"posenc_kwargs.scaling to one of those or remove {key}; "
                                 f"scaling={scaling} takes {takes}")
        factor = 1.0 if factor is None else factor
        if factor < 1:
            raise ValueError(f"posenc_kwargs.factor must be >= 1, got {factor}")
        if scaling in NEEDS_L0 and original_length is None:
            raise ValueError(f"posenc_kwargs.scaling={scaling} needs the original context length: "
                             f"set posenc_kwargs.original_length=L0 (through a config it is read "
                             f"from the task's longest training input)")
        if scaling == "dynamic" and rot <= 2:
            raise ValueError("dynamic NTK scaling needs more than 2 rotated channels (d / (d - 2))")
        beta_fast = 32.0 if beta_fast is None else beta_fast
        beta_slow = 1.0 if beta_slow is None else beta_slow
        if scaling == "yarn" and not beta_fast > beta_slow:
            raise ValueError(f"posenc_kwargs.beta_fast ({beta_fast}) must exceed beta_slow "
                             f"({beta_slow})")
        low_freq_factor = 1.0 if low_freq_factor is None else low_freq_factor
        high_freq_factor = 4.0 if high_freq_factor is None else high_freq_factor
        if scaling == "llama3" and not high_freq_factor > low_freq_factor:
            raise ValueError(f"posenc_kwargs.high_freq_factor ({high_freq_factor}) must exceed "
                             f"low_freq_factor ({low_freq_factor}) (Llama 3.1: 4 and 1)")
        if scaling == "longrope":
            for key, lam in (("short_factor", short_factor), ("long_factor", long_factor)):
                if lam is None:
                    raise ValueError(f"posenc_kwargs.scaling=longrope needs posenc_kwargs.{key}: "
                                     f"a list of {rot // 2} rescale factors, one per rotated pair")
                if len(lam) != rot // 2 or not all(float(x) > 0 for x in lam):
                    raise ValueError(f"posenc_kwargs.{key} must be {rot // 2} numbers > 0 (one "
                                     f"per rotated pair: rotated dim {rot} / 2), got {len(lam)}")
        self.rot_dim, self.rotary_fraction, self.base = rot, float(rotary_fraction), float(base)
        self.scaling, self.factor = scaling, float(factor)
        self.original_length = None if original_length is None else int(original_length)
        if scaling == "none":         # the original float32 computation, bit for bit
            inv = base ** (-torch.arange(0, rot, 2, dtype=torch.float32) / rot)
        elif scaling == "linear":
            inv = (inv_freq(rot, base) / factor).float()
        elif scaling == "yarn":
            inv = yarn_inv_freq(rot, base, factor, self.original_length, beta_fast,
                                beta_slow).float()
        elif scaling == "llama3":
            inv = llama3_inv_freq(rot, base, factor, self.original_length, low_freq_factor,
                                  high_freq_factor).float()
        elif scaling == "longrope":   # short factors up to L0; the long ones: frequencies()
            inv = longrope_inv_freq(rot, base, short_factor).float()
            self.register_buffer("long_inv_freq", longrope_inv_freq(rot, base, long_factor)
                                 .float(), persistent=False)
        else:                         # dynamic: the plain frequencies up to L0
            inv = inv_freq(rot, base).float()
        self.register_buffer("inv_freq", inv, persistent=False)
        if attention_factor is not None:
            self.mscale = float(attention_factor)
        elif scaling == "yarn":
            self.mscale = yarn_attention_factor(factor)
        elif scaling == "longrope":
            self.mscale = longrope_attention_factor(factor, self.original_length)
        else:
            self.mscale = 1.0

    @classmethod
    def task_defaults(cls, kwargs: dict, task, splits=()) -> dict:
        """Dynamic NTK, YaRN, Llama 3.1 and LongRoPE: ``original_length`` defaults to the task's
        longest training input (tokens)."""
        kw = dict(kwargs)
        if kw.get("scaling", "none") in NEEDS_L0 and kw.get("original_length") is None:
            L0 = task_train_length(task)
            if L0 is None:
                raise ValueError(f"scaling={kw['scaling']} needs posenc_kwargs.original_length "
                                 f"and task {getattr(task, 'name', task)!r} does not say its "
                                 f"training length; set it")
            kw["original_length"] = int(L0)
        return kw

    def frequencies(self, pos: torch.Tensor) -> torch.Tensor:
        """The rotation frequencies [d/2] (float32) for a call with positions ``pos``."""
        if self.scaling not in ("dynamic", "longrope") or pos.numel() == 0:
            return self.inv_freq
        length = float(pos.max()) + 1.0          # L: see rope_scaling.dynamic_base
        if length <= self.original_length:
            return self.inv_freq
        if self.scaling == "longrope":
            return self.long_inv_freq
        b = dynamic_base(self.base, self.factor, length, self.original_length, self.rot_dim)
        return inv_freq(self.rot_dim, b).to(device=self.inv_freq.device, dtype=torch.float32)

    def cos_sin(self, pos: torch.Tensor, dtype):
        """pos [T] -> cos, sin [T, d]; pos [B, T] -> [B, 1, T, d] (broadcast over heads); d =
        the rotated channels. YaRN's attention factor multiplies both."""
        ang = pos.float()[..., None] * self.frequencies(pos)   # [(B,) T, d/2]
        ang = torch.cat([ang, ang], dim=-1)                    # [(B,) T, d]
        if self.per_sequence(pos):
            ang = ang.unsqueeze(1)                             # [B, 1, T, d]
        cos, sin = ang.cos(), ang.sin()
        if self.mscale != 1.0:
            cos, sin = cos * self.mscale, sin * self.mscale
        return cos.to(dtype), sin.to(dtype)

    def rotate(self, q, k, pos):
        cos, sin = self.cos_sin(pos, q.dtype)
        d = self.rot_dim
        if d == self.head_dim:
            return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return (torch.cat([apply_rotary(q[..., :d], cos, sin), q[..., d:]], dim=-1),
                torch.cat([apply_rotary(k[..., :d], cos, sin), k[..., d:]], dim=-1))
