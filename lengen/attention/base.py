"""Shared attention plumbing: projections, head split, positional hooks, the rows a training
forward leaves out, path selection.

Every attention kind has the same call signature ``forward(x, pos, posenc, *, plan=None,
cache=None, key_pos=None) -> [B, T, D]`` and calls the positional scheme's hooks the same way
(``rotate`` on q/k, ``bias`` on the logits), so the model never branches on which scheme or kind
is active. Positions are ``[T]`` or ``[B, T]``. A kind subclasses :class:`Attention` and either
declares its ops (``ops = Ops(naive=..., lean=..., fast_cpu=..., triton=...)``,
:class:`lengen.ops.select.Ops`) with its own inputs to them (:meth:`Attention.op_args`), or
overrides ``attend`` and, for cached decoding (``forward(..., cache=, key_pos=)``, see
:mod:`lengen.model.cache`), ``attend_cached``: the same maths through the kind's query-blocked
op with the new rows placed after the cached keys (``q_offset``), whatever ``impl`` says.

Path selection (``impl``, in :meth:`Attention.attend`): ``naive`` always uses the dense reference
op, ``lean`` always the query-blocked op, ``auto`` (default) trains with the fastest op tested
equal to the reference for the device (:meth:`Attention.training_op`: tiled CPU ops in
``ops/<op>/fast_cpu.py``; fused Triton kernels on CUDA where a kind has them) and uses the
memory-lean op in eval mode, so evaluation memory grows linearly in T. Recording weights
(``record_weights``) uses the dense reference.

Training's row savings (:class:`lengen.ops.rows.RowPlan`) reach ``forward`` as ``plan``; a kind
declares which it handles with class flags (all True here: :meth:`Attention.forward` does them
around ``attend``), and the block does the others around the kind
(:meth:`lengen.model.block.Block.mix`).
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from lengen.attention.scaling import LOGN_KINDS, LogLengthScaling
from lengen.checks import Bool, Choice, Float
from lengen.ops.heads import split_heads
from lengen.ops.linear import Linear
from lengen.ops.norm import qk_rms
from lengen.ops.rows import NO_ROWS, RowPlan
from lengen.ops.select import Ops
from lengen.ops.tile_bias import BiasHook
from lengen.ops.token_rows import TokenRows

IMPLS = ("auto", "naive", "lean")
QK_NORMS = ("none", "rms")                   # = lengen.model.config.QK_NORMS
QK_NORM_PLACES = ("after_rope", "before_rope")


class Attention(nn.Module):
    #: the kind's ops (lengen.ops.select.Ops), which the default attend and attend_cached use
    ops: Ops | None = None
    #: kinds whose definition needs a causal window (TRA, FoT) set this to True
    requires_causal = False
    #: ``attend`` reads the layer input x (FoT's and TRA's gates); a kind that does not sets
    #: False, so packed training need not unpack x for it (it then gets None)
    reads_x = True
    #: what of the model's row plan (lengen.ops.rows.RowPlan) forward handles itself; the block
    #: does what a kind sets False around it (Block.mix): ``supports_packing``, packed rows
    #: [N, D] (else x is unpacked to [B, T, D] and the output packed); ``supports_token_rows``,
    #: x as a TokenRows table (else the rows); ``supports_keep``, plan.keep (else the kept rows
    #: are taken from the output); ``supports_query_rows``, plan.rows for attend (else None)
    supports_packing = True
    supports_token_rows = True
    supports_keep = True
    supports_query_rows = True
    #: q and k may be wider than the head (a scheme with ``qk_width_factor`` > 1, PoPE); kinds
    #: whose maths needs head-wide q/k set False (lengen.attention.wide_qk_refusal)
    supports_wide_qk = True
    #: reads the positional scheme's hooks (a token mixer, lengen.attention.mixer, does not)
    uses_posenc = True
    #: derived, never set: a layer has queries and keys exactly when it reads the scheme
    is_token_mixer = not uses_posenc
    #: the kind's ops take ``window`` / ``chunk`` (sliding-window and chunked local masks,
    #: :func:`lengen.ops.common.local_mask`) through :meth:`local_args`; others refuse them
    supports_window = False

    #: checks of the options every kind takes (log-length scaling, lengen.attention.scaling)
    KWARG_RULES = {"logn": Choice(*LOGN_KINDS), "logn_s": Float(), "logn_learn_s": Bool(),
                   "logn_floor_scale": Float(gt=0), "logn_attn_scale": Float()}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.is_token_mixer = not cls.uses_posenc     # derived again for every subclass

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, impl: str = "auto",
                 block_size: int = 256, layer_idx: int = 0, n_layers: int = 1,
                 logn: str = "none", logn_s: float = 0.43, logn_learn_s: bool = True,
                 logn_floor_scale: float = 8192.0, logn_attn_scale: float = 0.1,
                 window: int | None = None, chunk: int | None = None, qk_norm: str = "none",
                 qk_norm_position: str = "after_rope"):
        super().__init__()
        if (window is not None or chunk is not None) and not self.supports_window:
            raise ValueError(f"attention '{type(self).__name__}' has no sliding-window or chunked "
                             f"mask (window={window}, chunk={chunk})")
        if (window is not None or chunk is not None) and not causal:
            raise ValueError("window / chunk masks need causal attention")
        if qk_norm not in QK_NORMS or qk_norm_position not in QK_NORM_PLACES:
            raise ValueError(f"qk_norm must be one of {', '.join(QK_NORMS)} and qk_norm_position "
                             f"one of {', '.join(QK_NORM_PLACES)}, got {qk_norm!r}, "
                             f"{qk_norm_position!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if impl not in IMPLS:
            raise ValueError(f"unknown attention impl '{impl}'. Valid: {', '.join(IMPLS)}")
        if self.ops is None and type(self).attend is Attention.attend:
            raise TypeError(f"attention '{type(self).__name__}' needs its ops (a class attribute "
                            f"ops = Ops(naive=..., lean=...), lengen.ops.select) or its own "
                            f"attend(q, k, v, x, bias_fn, rows=None)")
        if self.requires_causal and not causal:
            raise ValueError(f"attention '{type(self).__name__}' is defined only for causal "
                             f"(decoder) models")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal, self.impl, self.block_size = causal, impl, block_size
        self.layer_idx, self.n_layers = layer_idx, n_layers
        self.window, self.chunk = window, chunk
        self.qk_norm, self.qk_norm_position = qk_norm, qk_norm_position
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

    def forward(self, x, pos: torch.Tensor, posenc, *, plan: RowPlan | None = None, cache=None,
                key_pos: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, D], pos: [T] or [B, T] -> [B, T, D]. With ``cache`` (a
        :class:`lengen.model.cache.LayerCache`) x holds only the new tokens, ``key_pos`` the
        positions of every key (cached and new) and the step attends to the cached keys too.

        ``plan`` (a :class:`lengen.ops.rows.RowPlan`, the part of the model's plan this kind
        handles: :meth:`lengen.ops.rows.RowPlan.handled_by`): with ``plan.pack`` (a causal
        batch's :class:`~lengen.ops.packing.Packing`) x is [N, D], the tokens that matter, and so
        is the output: the projections run on those rows, the attention itself on the padded
        layout (zeros at the left-out tokens, after every kept one in its row, so no kept query
        sees them). ``plan.rows`` (bool [B, T]): the query rows whose outputs the caller reads,
        handed to ``attend``, which may skip the others (the C kernel does). ``plan.keep`` (int
        [K], indices into the output's rows flattened, [B * T] or packed [N]): return those rows
        only, [K, D], selected before the output projection, which then runs on them alone (the
        model's last block). x may be a :class:`lengen.ops.token_rows.TokenRows` (the model's
        first block in training: the input rows as a table with one row per vocabulary entry),
        so that the q, k, v projection runs once per entry and is gathered."""
        plan = NO_ROWS if plan is None else plan
        if isinstance(x, TokenRows):
            # a row per vocabulary entry, projected once, then gathered into the batch's rows
            qkv = x.map(self.qkv).full()                            # [B, T, 3D] or [N, 3D]
            x = x.full() if self.reads_x else None                  # FoT's / TRA's gates
        else:
            qkv = self.qkv(x)                                       # [B, T, 3D] or [N, 3D]
        pack = plan.pack
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
        q, k = self.norm_qk(q, k, "before_rope")
        q, k = posenc.rotate(q, k, pos)
        q, k = self.norm_qk(q, k, "after_rope")
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
            y = self.attend(q, k, v, x, bias_fn, rows=plan.rows)            # [B, H, T, hd]
        y = y.transpose(1, 2).reshape(B, T, self.d_model)                   # [B, T, D]
        if pack is not None:
            y = pack.pack(y)                                                # [N, D]
        return self.proj(plan.kept(y))                                      # [K, D] with keep

    def decode(self, q, k, v, x, posenc, pos, key_pos, cache):
        """A cached step: append the new keys/values, then attend from the new query rows (the
        last ``T`` keys) to every cached key with the kind's query-blocked op (``q_offset``).
        A sliding-window layer (``window`` W) then trims its cache to the last W keys and
        values (:meth:`lengen.model.cache.LayerCache.trim`; query i sees only i - W < j <= i,
        so no later query reads the dropped ones): the step attends to the kept keys (those the
        window lets it see, and the earlier ones of a multi-token step), with their positions
        ``key_pos[..., -kept:]``. A chunked layer (``chunk`` C; query i sees only
        C * (i // C) <= j <= i) trims to the keys of the chunk the next token falls in, the last
        n mod C of the n tokens seen (none at a chunk boundary): a whole number of chunks is
        dropped, so the op's chunk mask, which counts key indices from the first key handed in,
        puts every held key and new row in the chunk it has in the sequence. Attention weights
        are not recorded here."""
        if not self.causal:
            raise ValueError("a KV cache needs causal attention (causal=True): an encoder's "
                             "earlier outputs depend on later tokens")
        offset = key_pos.shape[-1] - q.shape[-2]               # tokens cached before this step
        if cache.length("k") + cache.dropped != offset:
            raise ValueError(f"layer cache holds {cache.length('k') + cache.dropped} tokens but "
                             f"the positions say {offset}; use one cache per sequence batch, fed "
                             f"every step")
        k_all = cache.append("k", k)                  # [B, H, kept + T, hd], kept <= offset
        v_all = cache.append("v", self.value_heads(v))
        held = k_all.shape[-2]
        key_pos = key_pos[..., key_pos.shape[-1] - held:]      # the held keys' positions
        bias_fn = ((lambda s, e: posenc.bias(pos[..., s:e], key_pos, q[:, :, s:e], k_all))
                   if posenc.has_bias else None)
        y = self.attend_cached(q, k_all, v_all, x, bias_fn, held - q.shape[-2], cache)
        if self.chunk is not None:           # whole chunks only (see above), window or not
            cache.trim((offset + q.shape[-2]) % self.chunk)
        elif self.window is not None:
            cache.trim(self.window)
        return y

    def value_heads(self, v):
        """The value layout the kind attends with, which the cache keeps (Diff pairs heads into
        [B, H/2, T, 2hd]; the others use v as it is)."""
        return v

    def reset_parameters(self) -> None:
        """Kind-specific initialisation, run after the model's generic init (override)."""

    def prepare_qk(self, q, k):
        """Hook for per-kind q/k transforms applied before positional rotation (e.g. q/k norm)."""
        return q, k

    def norm_qk(self, q, k, place: str):
        """Model-level q/k norm (``model.qk_norm``) at ``place`` (``before_rope`` /
        ``after_rope``), for every kind: ``rms`` is x * rsqrt(mean(x^2) + 1e-6) over each head's
        q and k, no weight (Llama 4's ``Llama4TextL2Norm``; Dehghani et al. 2023 with the
        weight left out). Identity for ``none`` or the other place."""
        if self.qk_norm == "none" or place != self.qk_norm_position:
            return q, k
        return qk_rms(q), qk_rms(k)

    def local_args(self) -> dict:
        """``window`` / ``chunk`` for the kind's ops, only those set (kinds with
        ``supports_window`` add this to :meth:`op_args`)."""
        return {k: v for k, v in (("window", self.window), ("chunk", self.chunk))
                if v is not None}

    def op_args(self, q, x) -> tuple[tuple, dict]:
        """The kind's own inputs to its ops after q, k, v: (positional, keyword), e.g. FoT's
        log forget gates [B, H, T] from x (``((log_f,), {})``); none by default."""
        return (), {}

    def attend(self, q, k, v, x, bias_fn, rows=None):
        """[B, H, T, hd] from q, k, v [B, H, T, hd] (x: the layer input, for kinds with gates,
        None when ``reads_x`` is False and the rows are packed) through the declared ``ops``:
        recording weights -> ``naive`` with the weights kept in ``last_weights``;
        ``impl='naive'`` -> ``naive``; ``impl='lean'`` or evaluation -> ``lean``; training with
        ``impl='auto'`` -> :meth:`training_op`. ``rows`` (bool [B, T] or None): the query rows
        whose outputs are read; the others may come out as anything."""
        args, kw = self.op_args(q, x)
        if self.record_weights:
            return self._keep(self.ops.naive(q, k, v, *args, bias_fn=bias_fn,
                                             return_weights=True, **kw))
        if self.impl == "naive":
            op = self.ops.naive
        elif self.use_lean():
            op = functools.partial(self.ops.lean, block_size=self.block_size)
        else:
            op = self.training_op(q, k, v, bias_fn, rows)
        return op(q, k, v, *args, bias_fn=bias_fn, **kw)

    def training_op(self, q, k, v, bias_fn, rows):
        """The op ``impl='auto'`` trains with: by default the device rules of
        :meth:`lengen.ops.select.Ops.training` over the declared ops (``rows`` bound to the CPU
        op); a kind with other rules overrides this."""
        return self.ops.training(q, bias_fn, rows)

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        """Attention of the new rows q ([B, H, T, hd], keys q_offset.. of k) over all of k, v:
        the declared ``lean`` op with the new rows after the cached keys. A kind that carries
        running state in the layer cache (FoT's cumulative log-forget) overrides this."""
        if self.ops is None:
            raise NotImplementedError(f"attention '{type(self).__name__}' declares no ops: "
                                      f"implement attend_cached for cached decoding")
        args, kw = self.op_args(q, x)
        return self.ops.lean(q, k, v, *args, bias_fn=bias_fn, block_size=self.block_size,
                             q_offset=q_offset, **kw)

    def _keep(self, out):
        """Record weights from a naive op called with return_weights=True."""
        out, w = out
        self.last_weights = w.detach()
        return out
