"""The incremental key/value cache of a decoder: plain tensors, one set per layer.

A decoding step runs only the new tokens through the model. Each attention layer appends its new
keys and values (after q/k normalisation and RoPE rotation, so cached keys are never rotated
again) to its :class:`LayerCache` and attends from the new query rows to every cached key; the
model appends the new tokens' positions once to :attr:`KVCache.positions`, which bias schemes
(ALiBi, T5, Transformer-XL) read for the key side. Attention kinds keep what their step needs
beside k and v under their own names (FoT: its cumulative log-forget ``c``, so a new row gets
``c_i - c_j`` against every cached key). Token mixers (:mod:`lengen.attention.mixer`) keep a
fixed-size recurrent state instead, replaced at every call (:meth:`LayerCache.put`).

A sliding-window layer (``window`` W, :mod:`lengen.attention.base`) keeps only the last W of its
keys and values: after a step has attended, :meth:`LayerCache.trim` drops the older ones (a query
i sees keys i - W < j <= i, so no later query reads them), and the layer's buffers are sized for
2W tokens, so a long generation holds O(W) per windowed layer instead of O(T). A chunked layer
(``chunk`` C, Llama 4's chunked attention: query i sees keys C * (i // C) <= j <= i) keeps only
the keys of the current chunk: after a step that leaves n tokens seen it keeps the last n mod C
(everything is dropped at a chunk boundary), so it holds fewer than C between steps, in buffers
sized for C tokens. What it drops is a whole number of chunks, so a key's index among the held
keys lies in the same chunk as its index in the sequence and the ops' chunk mask, which counts
from the first key handed in, is unchanged. :attr:`LayerCache.dropped` counts what was dropped;
the positions stay whole (other layers and the schemes' biases read them, RoPE-rotated keys
carry theirs), and the layer reads the last ``length`` of them.

Storage: every cached tensor has its time axis at dim 2 (``[B, H, T, ...]``; positions: their last
dim) and lives in a buffer with spare room that doubles when full, so appending a token copies only
that token, and the tensors handed to the ops are views of the filled part (a trimmed buffer's live part starts later; the next append
that does not fit moves it back to the start of the buffer once as many entries were trimmed
as it holds, else doubles the buffer). :meth:`KVCache.select`
keeps a subset of the batch rows in every buffer (one ``index_select`` each), e.g. to drop
sequences that have finished.

Usage (what :func:`lengen.model.generate.generate` does)::

    cache = model.new_cache(capacity=T_total)
    logits = model(prompt, pos[..., :Tp], cache=cache)           # prefill: [B, Tp, V]
    logits = model(next_token, pos[..., Tp:Tp + 1], cache=cache)  # one step: [B, 1, V]
"""
from __future__ import annotations

import torch


class _Growing:
    """A tensor growing along ``dim``, kept in a buffer with spare room (doubled when full);
    :meth:`trim` drops its oldest entries (the live part is ``start .. start + n``)."""

    def __init__(self, x: torch.Tensor, dim: int, capacity: int):
        self.dim = dim % x.dim()
        shape = list(x.shape)
        shape[self.dim] = max(capacity, x.shape[self.dim], 1)
        self.buf = x.new_empty(shape)
        self.start = self.n = 0
        self.append(x)

    def view(self) -> torch.Tensor:
        return self.buf.narrow(self.dim, self.start, self.n)

    def append(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[self.dim]
        size = self.buf.shape[self.dim]
        if self.start + self.n + t > size:
            # no room after the live part: move it to the start of this buffer when it and the
            # new entries fit there and at least as many entries were trimmed off the front as
            # it holds (so source and target do not overlap, and each entry is moved at most
            # once per entry trimmed: O(1) per token), else into a buffer twice as big
            if self.n + t <= size and self.start >= self.n:
                buf = self.buf
            else:
                shape = list(self.buf.shape)
                shape[self.dim] = max(2 * size, self.n + t)
                buf = self.buf.new_empty(shape)
            buf.narrow(self.dim, 0, self.n).copy_(self.view())
            self.buf, self.start = buf, 0
        self.buf.narrow(self.dim, self.start + self.n, t).copy_(x)
        self.n += t
        return self.view()

    def trim(self, keep: int) -> int:
        """Keep the last ``keep`` entries; returns how many were dropped."""
        drop = max(0, self.n - keep)
        self.start += drop
        self.n -= drop
        if self.n == 0:                 # nothing live: the next append starts at the front
            self.start = 0
        return drop

    def select(self, index: torch.Tensor) -> None:
        self.buf = self.buf.index_select(0, index.to(self.buf.device))


class LayerCache:
    """One attention layer's cached tensors by name (``k``, ``v`` and kind-specific state), each
    ``[B, H, T, ...]`` along dim 2. ``window`` (a sliding-window layer's W): the buffers hold
    room for 2W tokens (not ``capacity``), as the layer keeps only its last W (:meth:`trim`).
    ``chunk`` (a chunked layer's C): room for C tokens, as the layer keeps only the keys of the
    current chunk (fewer than C after each step, none at a chunk boundary)."""

    def __init__(self, capacity: int = 0, window: int | None = None, chunk: int | None = None):
        self.window, self.chunk = window, chunk
        room = chunk if chunk is not None else None if window is None else 2 * window
        self.capacity = capacity if room is None else min(capacity or room, room)
        self.dropped = 0                              # tokens trimmed off the front so far
        self._items: dict[str, _Growing] = {}
        self._state: dict[str, torch.Tensor] = {}     # put(): replaced, not grown

    def length(self, name: str = "k") -> int:
        """How many tokens ``name`` holds now (after :meth:`trim`, fewer than were appended:
        ``length + dropped`` were)."""
        item = self._items.get(name)
        return 0 if item is None else item.n

    def trim(self, keep: int) -> None:
        """Keep only the last ``keep`` tokens of every appended tensor (a sliding-window or
        chunked layer's keys and values after a step: no later query reads the older ones)."""
        drops = {item.trim(keep) for item in self._items.values()}
        if len(drops) > 1:
            raise ValueError(f"cached tensors of one layer hold different lengths: "
                             f"{ {n: i.n for n, i in self._items.items()} }")
        self.dropped += drops.pop() if drops else 0

    def get(self, name: str) -> torch.Tensor | None:
        """The cached ``name`` tensor so far (appended, or last put), or None before the first."""
        if name in self._state:
            return self._state[name]
        item = self._items.get(name)
        return None if item is None else item.view()

    def put(self, name: str, x: torch.Tensor) -> None:
        """Keep ``x`` ([B, ...], batch first) under ``name`` in place of what was there: a token
        mixer's recurrent state, whose size does not grow with the tokens."""
        if name in self._items:
            raise ValueError(f"cache '{name}' is appended to; put() keeps another name")
        self._state[name] = x

    def append(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Append ``x`` ([B, H, t, ...]) along dim 2; returns everything cached under ``name``."""
        item = self._items.get(name)
        if item is None:
            self._items[name] = item = _Growing(x, 2, self.capacity)
            return item.view()
        if x.shape[:2] != item.buf.shape[:2] or x.shape[3:] != item.buf.shape[3:]:
            raise ValueError(f"cache '{name}' holds [B, H, T, ...] = {tuple(item.view().shape)}; "
                             f"cannot append {tuple(x.shape)} (same batch, heads and width "
                             f"needed; start a new cache for a new batch)")
        return item.append(x)

    def select(self, index: torch.Tensor) -> None:
        for item in self._items.values():
            item.select(index)
        for name, x in self._state.items():
            self._state[name] = x.index_select(0, index.to(x.device))


class KVCache:
    """The cache of a whole decoder: one :class:`LayerCache` per layer plus the positions of every
    cached token (``[Tc]`` shared by the batch, or ``[B, Tc]``). ``length`` is the number of
    tokens cached per sequence. ``windows``: each layer's sliding window (None: every key kept),
    whose layer keeps only its last W keys and values; ``chunks``: each layer's chunk (None: not
    chunked), whose layer keeps only the keys of its current chunk."""

    def __init__(self, n_layers: int, capacity: int = 0, windows=None, chunks=None):
        self.capacity = int(capacity)
        windows = [None] * n_layers if windows is None else list(windows)
        chunks = [None] * n_layers if chunks is None else list(chunks)
        for name, per_layer in (("windows", windows), ("chunks", chunks)):
            if len(per_layer) != n_layers:
                raise ValueError(f"{name}: one per layer ({n_layers}), got {len(per_layer)}")
        self.layers = [LayerCache(self.capacity, w, c) for w, c in zip(windows, chunks)]
        self._pos: _Growing | None = None

    @property
    def length(self) -> int:
        return 0 if self._pos is None else self._pos.n

    @property
    def positions(self) -> torch.Tensor | None:
        return None if self._pos is None else self._pos.view()

    def extend_positions(self, pos: torch.Tensor) -> torch.Tensor:
        """Append the new tokens' positions ([t] or [B, t]); returns those of every cached key,
        [Tc + t] or [B, Tc + t] (a shared history becomes per sequence once a step is)."""
        if self._pos is None:
            self._pos = _Growing(pos, -1, self.capacity)
            return self._pos.view()
        old = self._pos.view()
        if old.dim() == 1 and pos.dim() == 2:            # shared so far, per sequence from now on
            self._pos = _Growing(old.expand(pos.shape[0], -1), -1, self.capacity)
        elif old.dim() == 2 and pos.dim() == 1:
            pos = pos.expand(old.shape[0], -1)
        elif old.dim() == 2 and pos.shape[0] != old.shape[0]:
            raise ValueError(f"cached positions have {old.shape[0]} rows, new ones {pos.shape[0]}")
        return self._pos.append(pos.to(old.dtype))

    def select(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (LongTensor) of every cached tensor, in that order."""
        for layer in self.layers:
            layer.select(index)
        if self._pos is not None and self._pos.buf.dim() == 2:
            self._pos.select(index)
