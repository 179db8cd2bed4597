"""The shared loop of the CPU training paths (``ops/{softmax,tra,cope}/fast_cpu.py``): cache-sized
tiles, and one forward and one backward pass over them that every tiled op runs with its own
score function.

Why tiles: an attention step on a CPU is bound by memory traffic over [B, H, T, T] tensors, not
by arithmetic. Splitting the work into tiles of ``G`` heads x ``qb`` query rows x the ``e`` keys
those rows can see (about 1 MB each) keeps every elementwise pass in L2, and causal tiles skip the
keys right of their last row (56% of the square at ``qb = T/8``). Tiles are planned by
:func:`plan_tiles`; scratch tiles, the pool of buffers kept for backward and the worker threads
that run tile groups are in :mod:`lengen.ops.cpu_workspace`.

What the ops share (:class:`TiledAttention`): every tiled op is a softmax over keys of some logits,
so a tile's forward ends in the same unnormalised weights ``E = 2^(L - rowmax)`` (logits ``L`` in
base-2 units, see :data:`LOG2E`), their row sums ``l`` and ``E v``; the output ``E v / l`` is
divided once for all tiles. ``E`` is kept (pooled) for backward, which recomputes nothing:
``[dO, -delta] / l @ [v, 1]^T`` is ``(dP - delta) / l`` in one matmul (:func:`with_ones`), times
``E`` the logit gradient ``dL``; then ``dq = dS k``, ``dk = dS^T q``, ``dv = E^T dO / l``, where
``dS``, the gradient of the scaled score ``q.k``, is ``dL`` unless the op's score transform says
otherwise. What stays in an op: how a tile's scores become logits (masks, counts, positions), any
extra per-tile buffers, and the score transform's backward. The additive bias terms every op takes
(a dense bias, a per-key column, a relative-position table) are added and differentiated per tile
by :class:`lengen.ops.tile_bias.TileTerms`.

Keys may be stored in reverse order (CoPE: its running position sums become forward cumsums);
then a tile's ``ke`` keys are the last ``ke`` columns of the key tensors (:class:`Tile`).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from lengen.ops.cpu_workspace import (group_target, pool_give, pool_take, run_groups,
                                      scratch)

#: elements per tile (fp32: 1 MB), sized for a 1-2 MB per-core L2 cache
DEFAULT_BUDGET = 1 << 18
#: query rows per tile for long sequences (long enough for the matmuls, short enough to skip
#: most of the causally invisible keys)
DEFAULT_QBLOCK = 64
#: additive "minus infinity": keeps arithmetic finite (no inf - inf), exp() underflows to 0
BIG = 1e30
#: log2(e). Tiles keep their logits in base-2 units (natural-log logits times LOG2E, folded into
#: the matmul's alpha and the bias adds, so no extra pass) and take the softmax numerators with
#: ``exp2``: the same values (exp(x) = 2^(x log2 e)), but ATen's vectorised exp2 is cheaper than
#: its exp on x86 (measured in benchmarks/RESULTS.md, "CPU primitives"), and exp was the largest
#: elementwise cost of every tile. Rounding: the base-2 logit is formed by the same single rounding
#: as the natural one, so the weights keep fp32 accuracy (tests compare against the references).
LOG2E = 1.4426950408889634


def exp_floor(dtype) -> float:
    """Floor for shifted logits before ``exp``: weights below e^floor of their row's largest are
    raised to it (fp32: e^-60 ~ 1e-26, far under rounding). Without the floor, exp of very
    negative arguments and every later product with its result run through denormal numbers,
    which CPUs handle far more slowly (measured in benchmarks/RESULTS.md, "CPU primitives")."""
    return -60.0 if dtype == torch.float32 else -600.0


def exp2_floor(dtype) -> float:
    """:func:`exp_floor` for logits in base-2 units (see :data:`LOG2E`)."""
    return exp_floor(dtype) * LOG2E


def plan_tiles(B: int, H: int, T: int, *, causal: bool = True, budget: int | None = None,
               qblock: int | None = None, Tk: int | None = None, min_groups: int = 1):
    """Tiles as ``[((b0, b1, h0, h1), [(s, e, ke), ...]), ...]``: groups of (batch, head) pairs,
    each with its query blocks ``s..e-1`` and the keys ``0..ke-1`` they see (``ke = e`` when
    causal, ``Tk`` (default ``T``) otherwise).

    A group holds either one batch index and a head range, or a batch range and all heads, so
    ``x[b0:b1, h0:h1]`` of a contiguous [B, H, T, d] tensor flattens to 3-D without a copy.
    ``min_groups``: use smaller groups (when possible) so that there are at least this many, for
    worker threads to share.
    """
    budget = DEFAULT_BUDGET if budget is None else budget     # module defaults read at call time
    qblock = DEFAULT_QBLOCK if qblock is None else qblock
    Tk = T if Tk is None else Tk
    width = max(T, Tk)
    qb = T if T <= qblock else max(16, min(qblock, budget // width))
    g = max(1, budget // (qb * width))                          # (batch, head) pairs per tile
    g = max(1, min(g, (B * H) // max(1, min_groups)))
    if g >= H:
        gb = min(B, g // H)
        groups = [(b, min(B, b + gb), 0, H) for b in range(0, B, gb)]
    else:
        groups = [(b, b + 1, h, min(H, h + g)) for b in range(B) for h in range(0, H, g)]
    blocks = [(s, min(T, s + qb), min(T, s + qb) if causal else Tk) for s in range(0, T, qb)]
    return [(grp, blocks) for grp in groups]


def max_tile_numel(tiles) -> int:
    return max((b1 - b0) * (h1 - h0) * (e - s) * ke
               for (b0, b1, h0, h1), blocks in tiles for s, e, ke in blocks)


def group_offsets(tiles) -> list[int]:
    """Start of each group's tiles in a flat buffer holding all tiles in order (last: total)."""
    offs = [0]
    for (b0, b1, h0, h1), blocks in tiles:
        offs.append(offs[-1] + sum((b1 - b0) * (h1 - h0) * (e - s) * ke for s, e, ke in blocks))
    return offs


def tile_numel(tiles) -> int:
    return sum((b1 - b0) * (h1 - h0) * (e - s) * ke
               for (b0, b1, h0, h1), blocks in tiles for s, e, ke in blocks)


def flat(x: torch.Tensor, b0, b1, h0, h1) -> torch.Tensor:
    """x[b0:b1, h0:h1] of a contiguous [B, H, ...] tensor as [(b1-b0)*(h1-h0), ...] (a view)."""
    return x[b0:b1, h0:h1].flatten(0, 1)


_masks: dict = {}


def future_mask(tq: int, ke: int, dtype, device) -> torch.Tensor:
    """[tq, ke] additive causal mask of a tile whose query rows are the last ``tq`` of its ``ke``
    keys: ``-BIG`` where key > query, 0 elsewhere. Cached (a few KB each)."""
    key = (tq, ke, dtype, torch.device(device))
    m = _masks.get(key)
    if m is None:
        r = torch.arange(tq, device=device)[:, None] + (ke - tq)
        m = torch.zeros(tq, ke, dtype=dtype, device=device)
        m.masked_fill_(torch.arange(ke, device=device)[None, :] > r, -BIG)
        if len(_masks) > 256:
            _masks.clear()
        _masks[key] = m
    return m


def with_ones(x: torch.Tensor) -> torch.Tensor:
    """[..., d] -> [..., d + 1] with a trailing column of ones (contiguous). In backward,
    ``[dO, -delta] @ [v, 1]^T`` gives ``dO v^T - delta`` in one matmul (no separate pass)."""
    out = torch.empty(*x.shape[:-1], x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    out[..., :-1] = x
    out[..., -1] = 1
    return out


def numerators(S: torch.Tensor, m: torch.Tensor, E: torch.Tensor, floor: float) -> torch.Tensor:
    """``E = 2^(S - m)`` for base-2 logits ``S`` and row maxima ``m``, the shifted logits clamped
    to ``[floor, 0]`` first (:func:`exp2_floor`: no denormals; above 0 only off the keys a row
    attends, which the op zeroes afterwards). Returns ``E``."""
    return torch.sub(S, m, out=E).clamp_(floor, 0.0).exp2_()


class Tile(NamedTuple):
    """One tile of a :class:`TileGroup`: query rows ``s..e-1`` against ``ke`` keys, which are
    columns ``k0..k1-1`` of the key tensors (the first ``ke``, or with keys stored in reverse
    order the last ``ke``); ``shape`` = (G, e - s, ke), ``n`` its elements, ``off`` its start in
    the buffers kept for backward."""
    s: int
    e: int
    ke: int
    k0: int
    k1: int
    shape: tuple
    n: int
    off: int


class TileGroup:
    """The (batch, head) pairs ``b0..b1-1`` x ``h0..h1-1`` of one tile group; iterating gives its
    :class:`Tile` s in order. A group runs on one thread; :meth:`flat` and :meth:`scratch` cache
    what its tiles ask for again (a tile's Python costs as much as a few of its small ops)."""

    def __init__(self, plan: TiledAttention, gi: int):
        (self.b0, self.b1, self.h0, self.h1), self.blocks = plan.tiles[gi]
        self.G = (self.b1 - self.b0) * (self.h1 - self.h0)
        self.off, self.plan = plan.offsets[gi], plan
        self._flats: dict[int, torch.Tensor] = {}
        self._scratch: dict = {}

    def flat(self, x: torch.Tensor) -> torch.Tensor:
        """A contiguous [B, H, ...] tensor's [G, ...] slice of this group (a view)."""
        # keyed by id: every tensor asked for outlives the group, so an id is never reused
        f = self._flats.get(id(x))
        if f is None:
            f = self._flats[id(x)] = flat(x, self.b0, self.b1, self.h0, self.h1)
        return f

    def scratch(self, name: str, t: Tile, dtype) -> torch.Tensor:
        """A scratch tile of ``t``'s shape (per thread; valid until the next tile's call)."""
        buf = self._scratch.get((name, dtype))
        if buf is None:
            plan = self.plan
            buf = self._scratch[name, dtype] = scratch(name, (plan.nmax,), dtype, plan.device)
        return buf[:t.n].view(t.shape)

    def buffers(self, t: Tile) -> dict:
        """Tile ``t``'s per-tile buffers in forward (name -> [G, tq, ke]): kept for backward,
        or scratch."""
        kept = self.plan.kept
        if kept is not None:
            return _views(kept, t)
        return {nm: self.scratch(f"{self.plan.name}.{nm}", t, dt)
                for nm, dt in self.plan.kinds.items()}

    def __iter__(self):
        off, Tk, reverse = self.off, self.plan.Tk, self.plan.reverse
        for s, e, ke in self.blocks:
            n = self.G * (e - s) * ke
            k0 = Tk - ke if reverse else 0
            yield Tile(s, e, ke, k0, k0 + ke, (self.G, e - s, ke), n, off)
            off += n


def _views(kept: dict, t: Tile) -> dict:
    return {nm: buf[t.off:t.off + t.n].view(t.shape) for nm, buf in kept.items()}


class TiledAttention:
    """One call of a tiled op: its tiles (:func:`plan_tiles`), the per-tile buffers its forward
    keeps for backward, and the forward and backward loops every tiled op shares (module
    docstring).

    ``buffers``: name -> dtype of the per-tile buffers the op's tiles fill; ``"E"`` (the
    unnormalised weights) is required. With ``keep`` (backward will run) they are slices of flat
    pooled tensors, kept until :meth:`backward`; otherwise per-thread scratch. ``reverse``: keys
    are stored in reverse order (causal tiles only). ``name`` names the op in errors.
    """

    def __init__(self, B: int, H: int, T: int, *, Tk: int | None = None, causal: bool = True,
                 reverse: bool = False, budget: int | None = None, qblock: int | None = None,
                 buffers: dict, keep: bool, device, name: str):
        self.tiles = plan_tiles(B, H, T, causal=causal, budget=budget, qblock=qblock, Tk=Tk,
                                min_groups=group_target())
        self.offsets = group_offsets(self.tiles)
        self.nmax = max_tile_numel(self.tiles)
        self.B, self.H, self.T = B, H, T
        self.Tk = T if Tk is None else Tk
        self.reverse, self.device, self.name = reverse, torch.device(device), name
        self.kinds = dict(buffers)
        self.kept = ({nm: pool_take(self.offsets[-1], dt, device) for nm, dt in buffers.items()}
                     if keep else None)

    def run(self, fn) -> None:
        """``fn(group)`` for every :class:`TileGroup`, shared among the worker threads
        (:func:`lengen.ops.cpu_workspace.run_groups`): groups write disjoint rows."""
        run_groups(lambda gi: fn(TileGroup(self, gi)), len(self.tiles))

    def forward(self, v: torch.Tensor, tile_fn, ev: torch.Tensor, l: torch.Tensor) -> None:
        """The forward loop. ``tile_fn(group)`` returns the op's function of one tile,
        ``f(t, buffers)``, which leaves in ``buffers["E"]`` the tile's unnormalised weights
        (exactly 0 on the keys a query does not attend). Writes ``E v`` into ``ev``
        [B, H, T, dv] and the row sums into ``l`` [B, H, T, 1] (the op's tensors: their memory
        layout sets the rounding of the matmul, so each op keeps the one it was tested with)."""

        def group(g):
            tile = tile_fn(g)
            vg, evg, lg = g.flat(v), g.flat(ev), g.flat(l)
            for t in g:
                bufs = g.buffers(t)
                tile(t, bufs)
                E = bufs["E"]
                torch.sum(E, -1, keepdim=True, out=lg[:, t.s:t.e])
                torch.bmm(E, vg[:, t.k0:t.k1], out=evg[:, t.s:t.e])

        self.run(group)

    def backward(self, q, k, v, out, l, dout, scale: float, terms, *, delta=None,
                 score_grad=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The backward loop: -> (dq, dk, dv) of the scaled scores ``scale q.k`` and of ``v``
        (k, v in the stored key order). ``out``: the forward's output, ``l`` its row sums,
        ``delta`` (default ``rowsum(dout * out)``) [B, H, T, 1]. ``terms``
        (:class:`lengen.ops.tile_bias.TileTerms`) accumulates its gradients from every tile's
        logit gradient ``dL``. ``score_grad(group)``, for an op whose scores pass through a
        transform, returns ``f(t, dL, buffers) -> dS`` (it may overwrite ``dL``); without it
        ``dS = dL``. Gives the kept buffers back to the pool."""
        if self.kept is None:
            raise RuntimeError(f"{self.name} fast_cpu path: backward called twice (retain_graph "
                               f"/ double backward); use attention impl='naive' for that")
        kept, self.kept = self.kept, None
        dv_ = out.shape[-1]
        dout = dout.contiguous()
        if delta is None:
            delta = (dout * out).sum(-1, keepdim=True)                    # dO . O
        v1 = with_ones(v)
        # [dO / l, -delta / l] @ [v, 1]^T = (dO V^T - delta) / l in one matmul
        do1 = torch.cat([dout, delta.neg()], -1).div_(l)
        dq = torch.empty_like(q)                                 # every row written once below
        dk = torch.zeros_like(k)
        dv = torch.zeros(*k.shape[:-1], dv_, dtype=v.dtype, device=v.device)

        def group(g):
            qg, kg, vg, dog, dqg, dkg, dvg = (g.flat(x) for x in (q, k, v1, do1, dq, dk, dv))
            vgt, dog_v = vg.transpose(1, 2), dog[..., :dv_]
            dscore = None if score_grad is None else score_grad(g)
            for t in g:
                s, e, k0, k1 = t.s, t.e, t.k0, t.k1
                bufs = _views(kept, t)
                E = bufs["E"]
                dL = g.scratch(f"{self.name}.dL", t, E.dtype)
                torch.bmm(dog[:, s:e], vgt[:, :, k0:k1], out=dL).mul_(E)     # dlogits
                terms.grad(dL, g, t)
                dS = dL if dscore is None else dscore(t, dL, bufs)
                torch.baddbmm(dqg[:, s:e], dS, kg[:, k0:k1], beta=0, alpha=scale, out=dqg[:, s:e])
                dkg[:, k0:k1].baddbmm_(dS.transpose(1, 2), qg[:, s:e], alpha=scale)
                dvg[:, k0:k1].baddbmm_(E.transpose(1, 2), dog_v[:, s:e])

        self.run(group)
        for buf in kept.values():
            pool_give(buf)
        return dq, dk, dv
