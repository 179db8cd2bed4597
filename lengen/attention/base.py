"""Shared attention plumbing: projections, head split, positional hooks, path selection.

Every attention kind has the same call signature ``forward(x, pos, posenc) -> [B, T, D]`` and
calls the positional scheme's hooks the same way (``rotate`` on q/k, ``bias`` on the logits), so
the model never branches on which scheme or kind is active. Positions are ``[T]`` or ``[B, T]``.
Subclasses implement ``attend`` and, for cached decoding (``forward(..., cache=, key_pos=)``, see
:mod:`lengen.model.cache`), ``attend_cached``: the same maths through the kind's query-blocked op
with the new rows placed after the cached keys (``q_offset``), whatever ``impl`` says.

Path selection (``impl``): ``naive`` always uses the dense reference op, ``lean`` always the
query-blocked op, ``auto`` (default) trains with the fastest op tested equal to the reference for
the device (tiled CPU ops in ``ops/<op>/fast_cpu.py``; fused Triton kernels on CUDA where a kind
has them) and uses the memory-lean op in eval mode, so evaluation memory grows linearly in T.
"""
from __future__ import annotations

import functools
import inspect

import torch
from torch import nn

from lengen.attention.scaling import LOGN_KINDS, LogLengthScaling
from lengen.checks import Bool, Choice, Float
from lengen.ops.heads import split_heads
from lengen.ops.linear import Linear
from lengen.ops.tile_bias import BiasHook
from lengen.ops.token_rows import TokenRows

IMPLS = ("auto", "naive", "lean")


def attends_rows(attn) -> bool:
    """Whether ``attn.attend`` takes ``rows=`` (the query rows whose outputs are read): the
    built-in kinds do; a plugin's own ``attend`` need not (asked of the module's class)."""
    return _attend_takes_rows(type(attn))


@functools.lru_cache(maxsize=None)
def _attend_takes_rows(cls) -> bool:
    return "rows" in inspect.signature(cls.attend).parameters


class Attention(nn.Module):
    #: kinds whose definition needs a causal window (TRA, FoT) set this to True
    requires_causal = False
    #: ``attend`` reads the layer input x (FoT's and TRA's gates); a kind that does not sets
    #: False, so packed training need not unpack x for it (it then gets None)
    reads_x = True

    #: checks of the options every kind takes (log-length scaling, lengen.attention.scaling)
    KWARG_RULES = {"logn": Choice(*LOGN_KINDS), "logn_s": Float(), "logn_learn_s": Bool(),
                   "logn_floor_scale": Float(gt=0), "logn_attn_scale": Float()}

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, impl: str = "auto",
                 block_size: int = 256, layer_idx: int = 0, n_layers: int = 1,
                 logn: str = "none", logn_s: float = 0.43, logn_learn_s: bool = True,
                 logn_floor_scale: float = 8192.0, logn_attn_scale: float = 0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if impl not in IMPLS:
            raise ValueError(f"unknown attention impl '{impl}'. Valid: {', '.join(IMPLS)}")
        if self.requires_causal and not causal:
            raise ValueError(f"attention '{type(self).__name__}' is defined only for causal "
                             f"(decoder) models")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal, self.impl, self.block_size = causal, impl, block_size
        self.layer_idx, self.n_layers = layer_idx, n_layers
        # nn.Linear with oneDNN's CPU training path (lengen.ops.linear)
        self.qkv = Linear(d_model, 3 * d_model, bias=False)
        self.proj = Linear(d_model, d_model, bias=False)
        self.last_weights: torch.Tensor | None = None  # filled when record_weights is on
        self.record_weights = False
        # log-length query scaling (SSMax / Llama 4 temperature tuning; identity for 'none')
        self.logn = LogLengthScaling(logn, n_heads=n_heads, causal=causal, s=logn_s,
                                     learn_s=logn_learn_s, floor_scale=logn_floor_scale,
                                     attn_scale=logn_attn_scale)

    def use_lean(self) -> bool:
        return self.impl == "lean" or (self.impl == "auto" and not self.training)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, posenc, *, cache=None,
                key_pos: torch.Tensor | None = None, pack=None,
                rows: torch.Tensor | None = None,
                keep: torch.Tensor | None = None,
                tokens: TokenRows | None = None) -> torch.Tensor:
        """x: [B, T, D], pos: [T] or [B, T] -> [B, T, D]. With ``cache`` (a
        :class:`lengen.model.cache.LayerCache`) x holds only the new tokens, ``key_pos`` the
        positions of every key (cached and new) and the step attends to the cached keys too.
        With ``pack`` (a :class:`lengen.ops.packing.Packing` of a causal batch) x is [N, D],
        the tokens that matter, and so is the output: the projections run on those rows, the
        attention itself on the padded layout (zeros at the left-out tokens, after every kept
        one in its row, so no kept query sees them). ``rows`` (bool [B, T]): the query rows whose
        outputs the caller reads; the others may come out as anything (a kind whose ``attend``
        takes ``rows``, :func:`attends_rows`, gets it; the C kernel skips them). ``keep`` (int
        [K], indices into the output's rows flattened, [B * T] or packed [N]): return those
        rows only, [K, D], selected before the output projection, which then runs on them
        alone (the model's last block: :meth:`lengen.model.block.Block.forward`).
        ``tokens`` (a :class:`lengen.ops.token_rows.TokenRows`, in place of ``x``): the input
        rows as a table with one row per vocabulary entry (the model's first block in
        training), so that the q, k, v projection runs once per entry and is gathered."""
        if tokens is not None:
            # a row per vocabulary entry, projected once, then gathered into the batch's rows
            qkv = tokens.map(self.qkv).full()                       # [B, T, 3D] or [N, 3D]
            x = tokens.full() if self.reads_x else None             # FoT's / TRA's gates
        else:
            qkv = self.qkv(x)                                       # [B, T, 3D] or [N, 3D]
        if pack is None:
            B, T, _ = qkv.shape
        else:
            B, T = pack.B, pack.T
            qkv = pack.unpack(qkv)                                          # [B, T, 3D]
            x = pack.unpack(x) if self.reads_x else None       # [B, T, D]: FoT's / TRA's gates
        # q, k, v: [B, H, T, hd], views of qkv (the fused kernel writes their gradients into
        # one [B, T, 3D] buffer, which split_heads hands to the projection without a copy when
        # nothing between made new q, k; else one copy into place, where unbind made two)
        q, k, v = split_heads(qkv, self.n_heads)
        q, k = self.prepare_qk(q, k)
        q, k = posenc.rotate(q, k, pos)
        q = self.logn(q, pos if key_pos is None else key_pos)     # log-length scaling, if set
        if cache is not None:
            y = self.decode(q, k, v, x, posenc, pos, key_pos, cache)
        else:
            # bias for query rows s..e-1: blocked paths never build the full [.., T, T] bias
            # (pos: [T] or [B, T]; the bias is then [H, tq, T] or [B, H, tq, T])
            # (a BiasHook: the tiled CPU ops may ask the scheme for a per-tile form instead)
            bias_fn = (BiasHook(lambda s, e: posenc.bias(pos[..., s:e], pos, q[:, :, s:e], k),
                                lambda: posenc.tiled_bias(pos, q, k))
                       if posenc.has_bias else None)
            skip = {} if rows is None or not attends_rows(self) else {"rows": rows}
            y = self.attend(q, k, v, x, bias_fn, **skip)                    # [B, H, T, hd]
        y = y.transpose(1, 2).reshape(B, T, self.d_model)                   # [B, T, D]
        if pack is not None:
            y = pack.pack(y)                                                # [N, D]
        if keep is not None:
            y = y.reshape(-1, self.d_model).index_select(0, keep)           # [K, D]
        return self.proj(y)

    def decode(self, q, k, v, x, posenc, pos, key_pos, cache):
        """A cached step: append the new keys/values, then attend from the new query rows (the
        last ``T`` keys) to every cached key with the kind's query-blocked op (``q_offset``).
        Attention weights are not recorded here."""
        offset = key_pos.shape[-1] - q.shape[-2]               # tokens cached before this step
        if cache.length("k") != offset:
            raise ValueError(f"layer cache holds {cache.length('k')} tokens but the positions say "
                             f"{offset}; use one cache per sequence batch, fed every step")
        k_all = cache.append("k", k)                           # [B, H, offset + T, hd]
        v_all = cache.append("v", self.value_heads(v))
        bias_fn = ((lambda s, e: posenc.bias(pos[..., s:e], key_pos, q[:, :, s:e], k_all))
                   if posenc.has_bias else None)
        return self.attend_cached(q, k_all, v_all, x, bias_fn, offset, cache)

    def value_heads(self, v):
        """The value layout the kind attends with, which the cache keeps (Diff pairs heads into
        [B, H/2, T, 2hd]; the others use v as it is)."""
        return v

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        """Attention of the new rows q ([B, H, T, hd], keys q_offset.. of k) over all of k, v."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Kind-specific initialisation, run after the model's generic init (override)."""

    def prepare_qk(self, q, k):
        """Hook for per-kind q/k transforms applied before positional rotation (e.g. q/k norm)."""
        return q, k

    def attend(self, q, k, v, x, bias_fn):
        """[B, H, T, hd] from q, k, v [B, H, T, hd] (x: the layer input, for kinds with gates).
        A kind may also take ``rows=None`` (see :meth:`forward`) and skip the query rows it
        leaves out."""
        raise NotImplementedError

    def _keep(self, out):
        """Record weights from a naive op called with return_weights=True."""
        out, w = out
        self.last_weights = w.detach()
        return out
