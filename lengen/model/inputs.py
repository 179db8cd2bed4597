"""The checks of a model call's inputs: token ids, positions and the ``keep`` mask (shapes and
types here; values, in one device sync, by :func:`input_problem`). Shared by lengen's
:class:`~lengen.model.transformer.Transformer` and the Hugging Face backbone."""
from __future__ import annotations

import torch

from lengen.errors import ArgumentError, ConfigError


def check_keep(keep, B: int, T: int, cache, device) -> None:
    """``forward(..., keep=)`` takes a bool mask of the tokens' shape, and no cache (cached
    decoding wants every new token's logits)."""
    if (not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool
            or tuple(keep.shape) != (B, T)):
        got = (f"{keep.dtype} {list(keep.shape)}" if isinstance(keep, torch.Tensor)
               else type(keep).__name__)
        raise ArgumentError(f"keep must be a bool tensor [B, T] = [{B}, {T}], got {got}")
    if keep.device != device:
        raise ArgumentError(f"keep is on {keep.device}, the tokens on {device}")
    if cache is not None:
        raise ArgumentError("keep cannot be combined with a KV cache")


def check_positions(positions: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """Explicit positions for tokens [B, T] must be [T] (shared) or [B, T] (per sequence)."""
    if not isinstance(positions, torch.Tensor):
        raise ArgumentError(f"positions must be a tensor, [T] or [B, T], got "
                            f"{type(positions).__name__}")
    if tuple(positions.shape) not in ((T,), (B, T)):
        raise ConfigError(f"positions must be [T] = [{T}] (shared by the batch) or [B, T] = "
                          f"[{B}, {T}] (one row per sequence) for tokens [{B}, {T}]; got "
                          f"{list(positions.shape)}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise ConfigError(f"positions must be real numbers, got dtype {positions.dtype}")
    if not positions.is_floating_point():
        positions = positions.float()                      # integer positions are fine as data
    return positions


def check_tokens(tokens) -> None:
    """Token ids must be a [B, T] integer tensor (its values are checked in forward)."""
    if not isinstance(tokens, torch.Tensor):
        raise ArgumentError(f"tokens must be a [B, T] tensor of integer token ids, got "
                            f"{type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ConfigError(f"tokens must be [B, T] (a batch of sequences), got shape "
                          f"{list(tokens.shape)}; add a batch dimension with tokens[None]")
    if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
        raise ConfigError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")


def input_problem(tokens: torch.Tensor, pos: torch.Tensor | None, vocab_size: int) -> str | None:
    """What is wrong with the values of ``tokens`` (ids outside [0, vocab_size)) and ``pos``
    (non-finite), or None. One device sync: the checks are reduced to one flag first, and the
    details are looked up only when something is wrong."""
    if tokens.numel() == 0:
        return None
    lo, hi = torch.aminmax(tokens)
    bad = (lo < 0) | (hi >= vocab_size)
    if pos is not None:
        bad = bad | ~torch.isfinite(pos).all()
    if not bool(bad):                                               # the one sync
        return None
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= vocab_size:
        return (f"token id {lo if lo < 0 else hi} is outside the model's vocabulary [0, "
                f"{vocab_size}) (model.vocab_size={vocab_size}); encode inputs with the task's "
                f"vocabulary, or build the model with a model.vocab_size that covers them")
    bad_pos = pos[~torch.isfinite(pos)]
    return (f"positions must be finite, got {float(bad_pos[0])} ({bad_pos.numel()} non-finite "
            f"value(s)); pass real-valued positions (NaN and infinities encode nothing)")


__all__ = ["check_keep", "check_positions", "check_tokens", "input_problem"]
