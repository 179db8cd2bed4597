"""Memory (and work) a model needs, estimated from its config before anything is allocated, and
the "out of memory" errors that name the size that caused it.

The estimate is a deliberate *lower bound* (fp32; weights, and for training gradients and the two
AdamW moments; the activations a forward pass keeps per token and per layer; the attention score
matrices of the path that runs): a config refused by it cannot fit, while one it accepts may still
run out (allocator slack, framework buffers). It only needs the config's sizes, so an impossible
``model.d_model=1000000`` is refused in milliseconds instead of by the allocator (or by the OS
killing the process) minutes later.

    estimate_bytes(cfg.model, batch=32, length=128, training=True)
    # {'weights': ..., 'optimizer': ..., 'activations': ..., 'attention': ..., 'total': ...}
    check_fits(cfg.model, batch=32, length=128, training=True, device="cpu",
               sizes="train.batch_size=32, task length 128 tokens")
"""
from __future__ import annotations

import contextlib
import contextvars
import os

import torch

from lengen.errors import (OOM_HINT, ConfigError, is_out_of_memory,  # noqa: F401
                           out_of_memory_message)

FP32 = 4


def parameter_count(m) -> int:
    """Weights of a :class:`lengen.model.config.ModelConfig`'s transformer, without the
    positional scheme's own (small) tables: embeddings, an untied output head, and per layer the
    attention projections (qkv and output: 4 d^2) and the MLP (3 d d_ff gated, else 2 d d_ff)."""
    d, ff = int(m.d_model), int(m.d_ff or 2 * m.d_model)
    mlp = (3 if str(m.mlp).endswith("glu") else 2) * d * ff
    embed = int(m.vocab_size) * d * (1 if m.tie_embeddings else 2)
    return embed + int(m.n_layers) * (4 * d * d + mlp)


def estimate_bytes(m, *, batch: int, length: int, training: bool,
                   lean: bool | None = None, act_bytes: int = FP32,
                   logits_at_once: int | None = None) -> dict:
    """Lower-bound bytes of a forward (and, when ``training``, backward + AdamW) pass of
    ``batch`` sequences of ``length`` tokens. ``lean``: attention scores materialized one query
    block at a time (the evaluation path of ``attn_impl=auto``, and ``attn_impl=lean``); default
    from ``m.attn_impl`` and ``training``. ``act_bytes``: bytes per activation (2 under bf16 or
    fp16 autocast; weights and optimizer state stay fp32). ``logits_at_once``: the most logits
    the caller holds at once when it applies the output head in blocks (language-model
    evaluation: :func:`lengen.eval.perplexity.eval_logits_at_once`); default all
    ``batch x length x vocab_size`` of them."""
    if lean is None:
        lean = m.attn_impl == "lean" or (m.attn_impl == "auto" and not training)
    d, ff, L, H = int(m.d_model), int(m.d_ff or 2 * m.d_model), int(m.n_layers), int(m.n_heads)
    B, T = int(batch), int(length)
    params = parameter_count(m)
    out = {"weights": params * FP32, "optimizer": 3 * params * FP32 if training else 0}
    # per token: the residual stream, q/k/v and the attention output (4 d), the MLP's hidden
    # units (ff); training keeps them for the backward pass in every layer, inference only in one
    per_token = (4 * d + ff) * act_bytes
    out["activations"] = B * T * per_token * (L if training else 1)
    keys = T if not lean else min(T, int(m.attn_block_size))
    # scores and probabilities [B, H, T, keys]; training keeps one per layer for the backward
    out["attention"] = 2 * B * H * T * keys * act_bytes * (L if training else 1)
    logits = B * T * int(m.vocab_size)
    if logits_at_once is not None:
        logits = min(logits, int(logits_at_once))
    out["logits"] = logits * act_bytes * (2 if training else 1)
    out["total"] = sum(out.values())
    return out


def available_bytes(device="cpu") -> int | None:
    """Memory a new allocation can get on ``device``: free CUDA memory, or the host's
    ``MemAvailable`` (Linux), else None (unknown: nothing is refused)."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except Exception:  # noqa: BLE001 - no driver, or a device torch cannot query
            return None
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**27 else f"{n / 2**20:.0f} MiB"


def _culprit(m, est: dict) -> str:
    """The settings behind the largest part of the estimate, for the message."""
    part = max(("weights", "optimizer", "activations", "attention", "logits"), key=est.get)
    n = f"{parameter_count(m):,}"
    return {"weights": f"the weights ({n} parameters: model.d_model={m.d_model}, model.n_layers="
                       f"{m.n_layers}, model.d_ff={m.d_ff}, model.vocab_size={m.vocab_size})",
            "optimizer": f"the AdamW state of {n} parameters (model.d_model={m.d_model}, "
                         f"model.n_layers={m.n_layers})",
            "activations": f"the activations, batch x length x model.d_model={m.d_model}",
            "attention": f"the attention scores, which grow with the square of the length "
                         f"(model.n_heads={m.n_heads}, model.attn_impl={m.attn_impl})",
            "logits": f"the output logits, batch x length x model.vocab_size={m.vocab_size}"}[part]


def check_fits(m, *, batch: int, length: int, training: bool, device="cpu", sizes: str = "",
               fix: str = "", lean: bool | None = None, act_bytes: int = FP32,
               weights_held: bool = False, logits_at_once: int | None = None) -> dict:
    """Raise ConfigError ("out of memory (estimated before starting)") when the lower-bound
    estimate exceeds what ``device`` has free, naming the part that dominates and its settings;
    returns the estimate. ``weights_held``: the model already sits on ``device`` (its weights
    are no longer free memory, so they are not counted again)."""
    est = estimate_bytes(m, batch=batch, length=length, training=training, lean=lean,
                         act_bytes=act_bytes, logits_at_once=logits_at_once)
    free = available_bytes(device)
    need = est["total"] - (est["weights"] if weights_held else 0)
    if free is not None and need > free:
        doing = ("building this model" if not batch else
                 f"{'training' if training else 'running'} this model at "
                 f"{sizes or f'batch {batch} x {length} tokens'}")
        raise ConfigError(
            f"out of memory (estimated before starting): {doing} needs at least "
            f"{gib(need)}{' more' if weights_held else ''} on {device}, and {gib(free)} is free; "
            f"most of it is "
            f"{_culprit(m, est)}. {fix or 'Lower that setting'}")
    return est


#: forward-pass work (FLOPs) refused on a CPU: ~1e14 is hours there (a GPU does it in seconds)
CPU_MAX_FLOPS = 1e14


def forward_flops(m, *, sequences: int, length: int) -> float:
    """Multiply-adds x 2 of forward passes over ``sequences`` inputs of ``length`` tokens: the
    weights (2 per parameter per token) and causal attention (q k^T and p v: 2 L T^2 d)."""
    T = float(length)
    attention = 2.0 * int(m.n_layers) * T * T * int(m.d_model)
    return sequences * (2.0 * parameter_count(m) * T + attention)


def check_work(m, *, sequences: int | list[int], length: int | list[int], device="cpu",
               what: str = "", fix: str = "") -> float:
    """Refuse on a CPU forward-pass work beyond :data:`CPU_MAX_FLOPS` (ConfigError naming the
    sequences and length behind it); ``length`` may list one length per group of ``sequences``
    (one per split), and ``sequences`` one count per length. Returns the estimate."""
    lengths = [length] if isinstance(length, int) else list(length)
    counts = list(sequences) if isinstance(sequences, (list, tuple)) else [sequences] * len(lengths)
    flops = sum(forward_flops(m, sequences=c, length=n) for c, n in zip(counts, lengths))
    length, sequences = max(lengths), sum(counts)
    if torch.device(device).type == "cpu" and flops > CPU_MAX_FLOPS:
        raise ConfigError(
            f"{what or 'this evaluation'} is about {flops:.1e} floating-point operations "
            f"({sequences:,} sequences of {length:,} tokens through {parameter_count(m):,} "
            f"parameters and {m.n_layers} attention layers), hours or days on a CPU; lengen "
            f"refuses more than {CPU_MAX_FLOPS:.0e} there. "
            f"{fix or 'Evaluate fewer or shorter sequences'}, or run it on a GPU (--device cuda)")
    return flops


#: the forward calls :func:`check_forward` passed inside :func:`forward_checks_once`, as
#: (config, training, device, batch, length); None outside
_PASSED: contextvars.ContextVar[list | None] = contextvars.ContextVar("lengen_forward_checks",
                                                                       default=None)


@contextlib.contextmanager
def forward_checks_once():
    """Within it, :func:`check_forward` skips a call no larger (in batch and in length) than one
    it already passed for the same config, mode and device: both estimates (memory and work)
    grow with each, so they would pass again. An evaluation runs its batches inside it
    (:func:`lengen.eval.evaluate`): the check runs once per batch shape, not once per batch.

    The free memory (:func:`available_bytes`) is not read again for a skipped call either, on
    purpose. After a call has run, much of the memory it used is still held by this process for
    the next one: PyTorch's CUDA caching allocator keeps its blocks reserved, which
    ``torch.cuda.mem_get_info`` counts as used, and on a CPU the C allocator keeps part of a freed
    heap, which ``MemAvailable`` counts as used. Comparing the same lower bound with that smaller
    figure would refuse, in the middle of an evaluation, a batch shape that has just run and
    that fits, since it reuses what the process holds. The check is a pre-flight guard against
    sizes that cannot fit, not a monitor of memory other processes take later: that shows as
    the allocator's own failure (reported by the CLI with :data:`lengen.errors.OOM_HINT`), or on
    a CPU as the kernel's OOM killer, which a check between batches would not prevent, as memory
    can run out during one. Nor is the read the cheap part to keep: the kernel builds
    /proc/meminfo on every read, which costs more than the estimate's arithmetic."""
    token = _PASSED.set([])
    try:
        yield
    finally:
        _PASSED.reset(token)


def check_forward(m, *, batch: int, length: int, training: bool, device="cpu") -> None:
    """The up-front bound for one forward call on ``batch`` x ``length`` tokens (the Python API's
    ``Transformer.forward`` on millions of tokens): refused, with a ConfigError naming the size,
    when its memory estimate (:func:`check_fits`; the weights already sit on ``device``) cannot
    fit, or when on a CPU its work exceeds :data:`CPU_MAX_FLOPS` (:func:`check_work`). Costs
    microseconds plus one read of /proc/meminfo; meant for ``forward`` when it checks its inputs
    (``check_inputs``), and skipped inside :func:`forward_checks_once` for a call no larger than
    one already passed (free memory not re-read either; why: see there)."""
    passed, where = _PASSED.get(), (training, str(device))
    if passed is not None and any(c is m and w == where and batch <= b and length <= n
                                  for c, w, b, n in passed):
        return
    sizes = f"inputs of batch {batch} x {length} tokens"
    check_fits(m, batch=batch, length=length, training=training, device=device,
               weights_held=True, sizes=sizes,
               fix="Pass fewer or shorter sequences per call (split the batch)")
    check_work(m, sequences=batch, length=length, device=device,
               what=f"one forward call on {sizes}",
               fix="Pass fewer or shorter sequences per call")
    if passed is not None:
        passed.append((m, where, batch, length))


__all__ = ["parameter_count", "estimate_bytes", "available_bytes", "check_fits", "forward_flops",
           "check_forward", "forward_checks_once", "check_work", "CPU_MAX_FLOPS",
           "is_out_of_memory", "out_of_memory_message", "OOM_HINT"]
