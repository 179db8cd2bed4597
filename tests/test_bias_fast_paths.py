"""The fast bias paths of T5 and Transformer-XL against their pairwise definitions.

T5 buckets each distinct distance once and expands [H, n_dist] by a Toeplitz view or a gather;
XL scores each block of query rows against its window of distances. Both must give the values and
gradients of computing every (i, j) pair directly, for causal and bidirectional schemes, identity
(shifted, stepped), randomized (sparse) and fractional positions, and query chunks pos[s:e].
"""
from __future__ import annotations

import pytest
import torch

import lengen.posenc.xl as xl_module
from lengen.posenc.t5 import T5Bias, integer_progression
from lengen.posenc.xl import TransformerXLRelative
from lengen.samplers import RandomizedSampler

H, D = 3, 4


def make_pos(kind, T):
    if kind == "identity":
        return torch.arange(T, dtype=torch.float32)
    if kind == "shifted":
        return torch.arange(T, dtype=torch.float32) + 13.0
    if kind == "stepped":
        return torch.arange(T, dtype=torch.float32) * 3.0 - 7.0
    if kind == "randomized":
        return RandomizedSampler(4 * T).sample(T, training=True,
                                               generator=torch.Generator().manual_seed(T))
    if kind == "fractional":
        return torch.arange(T, dtype=torch.float32) * 0.37 + 0.5
    raise ValueError(kind)


KINDS = ["identity", "shifted", "stepped", "randomized", "fractional"]
CAUSAL = pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
# (start, end) of the query rows: all of them, a chunk, a single row (end None = T)
CHUNKS = [(0, None), (5, 17), (20, 21)]


def test_integer_progression():
    ar = torch.arange(6, dtype=torch.float32)
    assert integer_progression(ar, ar) == (0, 1)
    assert integer_progression(ar[2:4], ar) == (-2, 1)                  # pk - pq = -2 + (j - i)
    assert integer_progression(ar * 2 + 5, ar * 2 - 1) == (-6, 2)
    assert integer_progression(ar[3:4], ar + 1) == (-2, 1)              # one query: step of keys
    for pq, pk in ((ar + 0.5, ar + 0.5), (ar, ar * 2), (ar * 0, ar * 0),
                   (torch.tensor([0.0, 1.0, 3.0]), torch.tensor([0.0, 1.0, 2.0])),
                   (ar + 2.0 ** 23, ar + 2.0 ** 23)):
        assert integer_progression(pq, pk) is None, (pq, pk)


# ---- T5 ------------------------------------------------------------------------------------------
def make_t5(causal, seed=0):
    t5 = T5Bias(num_buckets=8, max_distance=12, d_model=H * D, n_heads=H, head_dim=D,
                causal=causal).double()
    with torch.no_grad():
        t5.table.weight.normal_(generator=torch.Generator().manual_seed(seed))
    return t5


def t5_value_and_grad(t5, fn, pq, pk, G):
    t5.table.weight.grad = None
    b = fn(pq, pk)
    (b * G).sum().backward()
    return b.detach(), t5.table.weight.grad.clone()


@CAUSAL
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_t5_matches_pairwise_lookup(causal, kind, chunk):
    T = 40
    pos = make_pos(kind, T)
    pq = pos[chunk[0]:chunk[1] or T]
    t5 = make_t5(causal)
    G = torch.randn(H, pq.numel(), T, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    b, g = t5_value_and_grad(t5, t5.bias, pq, pos, G)
    rb, rg = t5_value_and_grad(t5, t5._reference_bias, pq, pos, G)
    assert b.shape == (H, pq.numel(), T)
    torch.testing.assert_close(b, rb, rtol=0, atol=0)
    torch.testing.assert_close(g, rg, rtol=1e-12, atol=1e-12)
    assert g.abs().sum() > 0


def test_t5_fast_paths_are_taken(monkeypatch):
    t5 = make_t5(True)
    monkeypatch.setattr(T5Bias, "_reference_bias", lambda *a: pytest.fail("pairwise path used"))
    for kind in ("identity", "stepped", "randomized", "fractional"):
        pos = make_pos(kind, 30)
        t5.bias(pos, pos)
    # integer steps: no [Tq, Tk] index at all
    monkeypatch.setattr(T5Bias, "_distance_index", lambda *a: pytest.fail("index built"))
    pos = make_pos("shifted", 30)
    t5.bias(pos[4:9], pos)


@CAUSAL
@pytest.mark.parametrize("chunk", CHUNKS)
def test_t5_per_sequence_positions_match_pairwise_rows(causal, chunk):
    """[B, T] positions (no shared progression: the gather fallback) against the pairwise lookup
    of each row: values and the table gradient. Row 0 is the identity, whose [T] bias uses the
    Toeplitz view: the same values."""
    T = 40
    pos = torch.stack([make_pos(k, T) for k in ("identity", "randomized", "fractional")])
    pq = pos[:, chunk[0]:chunk[1] or T]
    t5 = make_t5(causal)
    G = torch.randn(3, H, pq.shape[-1], T, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(2))
    b, g = t5_value_and_grad(t5, t5.bias, pq, pos, G)
    assert b.shape == (3, H, pq.shape[-1], T)
    rows = [t5_value_and_grad(t5, t5._reference_bias, pq[r], pos[r], G[r]) for r in range(3)]
    torch.testing.assert_close(b, torch.stack([rb for rb, _ in rows]), rtol=0, atol=0)
    torch.testing.assert_close(g, sum(rg for _, rg in rows), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b[0], t5.bias(pq[0], pos[0]).detach(), rtol=0, atol=0)


def test_t5_wide_distances_fall_back_to_pairs():
    t5 = make_t5(False)
    pos = torch.tensor([0.0, 1000.0, 3.0])                # 2001 distances > 9 pairs
    torch.testing.assert_close(t5.bias(pos, pos), t5._reference_bias(pos, pos), rtol=0, atol=0)


def test_t5_index_cache_follows_the_positions():
    t5 = make_t5(False)
    g = torch.Generator().manual_seed(3)
    pos = make_pos("randomized", 25)
    first = t5.bias(pos, pos)
    for _ in range(3):       # new positions of the same shape, then the same tensor edited in place
        other = RandomizedSampler(200).sample(25, training=True, generator=g)
        torch.testing.assert_close(t5.bias(other, other), t5._reference_bias(other, other),
                                   rtol=0, atol=0)
    pos2 = pos.clone()
    t5.bias(pos2, pos2)
    pos2[3] += 1.0
    torch.testing.assert_close(t5.bias(pos2, pos2), t5._reference_bias(pos2, pos2), rtol=0, atol=0)
    torch.testing.assert_close(t5.bias(pos, pos), first, rtol=0, atol=0)


# ---- Transformer-XL ------------------------------------------------------------------------------
RD = 6


def make_xl(causal, path, seed=0):
    xl = TransformerXLRelative(d_model=H * D, n_heads=H, head_dim=D, causal=causal, rel_dim=RD,
                               path=path).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in (xl.u, xl.v, xl.w_r.weight):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return xl


def xl_pairwise(xl, pos_q, pos_k, q, k):
    """(u.k_j + (q_i + v).W_r R(pos_i - pos_j)) / sqrt(hd), every pair evaluated directly."""
    rel = pos_q.double()[:, None] - pos_k.double()[None, :]                  # [tq, Tk]
    freqs = xl.base ** (-torch.arange(0, RD, 2, dtype=torch.float64) / RD)
    ang = rel[..., None] * freqs
    R = torch.cat([ang.sin(), ang.cos()], -1)                                # [tq, Tk, RD]
    wr = (R @ xl.w_r.weight.T).view(*rel.shape, H, D)                        # [tq, Tk, H, hd]
    qv = q + xl.v[None, :, None, :]
    pos_term = torch.einsum("bhid,ijhd->bhij", qv, wr)
    content = (k * xl.u[None, :, None, :]).sum(-1)[:, :, None, :]
    return (content + pos_term) / D ** 0.5


def xl_value_and_grads(xl, fn, pq, pk, q, k, G):
    q, k = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    params = dict(u=xl.u, v=xl.v, w_r=xl.w_r.weight)
    for p in params.values():
        p.grad = None
    b = fn(pq, pk, q, k)
    (b * G).sum().backward()
    grads = {n: p.grad.clone() for n, p in params.items()}
    grads.update(q=q.grad, k=k.grad)
    return b.detach(), grads


def check_xl(xl, pq, pk, seed=0, grad="random"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, H, pq.numel(), D, generator=g, dtype=torch.float64)
    k = torch.randn(2, H, pk.numel(), D, generator=g, dtype=torch.float64)
    if grad == "random":
        G = torch.randn(2, H, pq.numel(), pk.numel(), generator=g, dtype=torch.float64)
    else:                                           # expanded (stride-0) upstream gradient
        G = torch.ones(()).double().expand(2, H, pq.numel(), pk.numel())
    b, grads = xl_value_and_grads(xl, xl.bias, pq, pk, q, k, G)
    rb, rgrads = xl_value_and_grads(xl, lambda *a: xl_pairwise(xl, *a), pq, pk, q, k, G)
    tol = dict(rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(b, rb, **tol)
    for n in rgrads:
        torch.testing.assert_close(grads[n], rgrads[n], **tol, msg=lambda m: f"grad {n}: {m}")
        assert grads[n].abs().sum() > 0, n


# the table path needs integer distances (its refusal of fractional ones is tested in test_xl)
PATH_KINDS = [(p, k) for p in ("auto", "table", "trig") for k in KINDS
              if not (p == "table" and k == "fractional")]


@CAUSAL
@pytest.mark.parametrize("path,kind", PATH_KINDS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_xl_matches_pairwise(causal, path, kind, chunk):
    T = 37
    pos = make_pos(kind, T)
    check_xl(make_xl(causal, path), pos[chunk[0]:chunk[1] or T], pos)


@pytest.mark.parametrize("rows", [1, 5, 8, 64])
@pytest.mark.parametrize("kind", ["identity", "stepped", "randomized"])
@pytest.mark.parametrize("grad", ["random", "expanded"])
def test_xl_table_blocks(monkeypatch, rows, kind, grad):
    # blocks of query rows, a partial last block, one block bigger than the queries
    monkeypatch.setattr(xl_module, "table_block_rows", lambda qv: rows)
    pos = make_pos(kind, 29)
    check_xl(make_xl(False, "table"), pos, pos, grad=grad)
    check_xl(make_xl(True, "table"), pos[3:22], pos, grad=grad)


def test_xl_identity_positions_use_the_strided_table(monkeypatch):
    seen = []
    orig = TransformerXLRelative.position_term_table
    monkeypatch.setattr(TransformerXLRelative, "position_term_table",
                        lambda self, qv, idx, *a: seen.append(idx is None) or orig(self, qv, idx, *a))
    xl = make_xl(True, "table")
    q = torch.randn(1, H, 20, D, dtype=torch.float64)
    for kind in ("identity", "shifted", "randomized"):
        pos = make_pos(kind, 20)
        xl.bias(pos, pos, q, q)
    assert seen == [True, True, False]


@CAUSAL
@pytest.mark.parametrize("path", ["auto", "table", "trig"])
@pytest.mark.parametrize("chunk", CHUNKS)
def test_xl_per_sequence_positions_match_pairwise_rows(causal, path, chunk):
    """[B, T] positions (the gathered table or the trig path) against the pairwise definition of
    each row, values and every gradient; one query side shared with per-sequence keys too."""
    T = 37
    kinds = ("identity", "randomized", "stepped") if path == "table" else \
        ("identity", "randomized", "fractional")
    pos = torch.stack([make_pos(k, T) for k in kinds])
    xl = make_xl(causal, path)
    g = torch.Generator().manual_seed(5)
    for pq in (pos[:, chunk[0]:chunk[1] or T], pos[0, chunk[0]:chunk[1] or T]):
        tq = pq.shape[-1]
        q = torch.randn(3, H, tq, D, generator=g, dtype=torch.float64)
        k = torch.randn(3, H, T, D, generator=g, dtype=torch.float64)
        G = torch.randn(3, H, tq, T, generator=g, dtype=torch.float64)

        def pairwise_rows(pq_, pk_, q_, k_):
            rows = [xl_pairwise(xl, pq_[r] if pq_.dim() == 2 else pq_, pk_[r], q_[r:r + 1],
                                k_[r:r + 1]) for r in range(3)]
            return torch.cat(rows)
        b, grads = xl_value_and_grads(xl, xl.bias, pq, pos, q, k, G)
        rb, rgrads = xl_value_and_grads(xl, pairwise_rows, pq, pos, q, k, G)
        tol = dict(rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b, rb, **tol)
        for n in rgrads:
            torch.testing.assert_close(grads[n], rgrads[n], **tol, msg=lambda m: f"grad {n}: {m}")
