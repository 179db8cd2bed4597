"""The CPU facts the fast ops' docstrings rely on, measured as ratios in one run.

The tiled CPU training ops (``lengen/ops/*/fast_cpu.py``, ``lengen/ops/cpu_tiles.py``), the C row
kernels (``lengen/ops/ckernels.py``) and the token cache (``lengen/data/token_cache.py``) were
designed around a few properties of ATen on a CPU. Their docstrings state each design choice and
point here for the number:

* ``exp2`` vs ``exp``: the tiles keep base-2 logits so the numerators are ``exp2`` (baseline: ``exp``
  on the same 262,144 floats);
* denormal numbers: ``exp`` and a product whose values are denormal fp32 numbers vs the same work
  on normal ones (why the ops clamp shifted logits above the denormal range before ``exp``);
* ATen's row ops run as scalar loops: ``cumsum``, ``gather`` and ``scatter_add_`` along the last
  dimension, in ns per element, against an elementwise ``add`` of the same size (why CoPE's row
  pass is a C kernel);
* SDPA's value width: ``F.scaled_dot_product_attention`` forward + backward with a value twice as
  wide as q and k (the unfused math path) vs q and k zero-padded to the value's width (the fused
  kernel; Diff attention's fast path pads);
* CoPE's C row kernels (``lengen/ops/cope/cope_rows.c``), forward and backward, in ns per tile
  element on warm buffers of 16 (batch, head) pairs x 64 query rows x 512 keys, 64 positions,
  against an ``add`` of the same size (what bounds CoPE's step: benchmarks/RESULTS.md,
  "Training step time");
* BLAKE2b throughput of ``lengen.fileio.file_digest`` (the token cache checksums its file at every
  start).

    python benchmarks/cpu_primitives.py --threads 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import lengen_revision, machine_line

from lengen.fileio import file_digest
from lengen.ops.cope import rows as cope_rows


def timed(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def exp_vs_exp2(repeats):
    x = torch.randn(262_144) * 10 - 20             # shifted logits: <= 0 mostly, like a tile's
    out = torch.empty_like(x)                      # preallocated: time the kernel, not the pages
    t_exp = timed(lambda: torch.exp(x, out=out), repeats)
    t_exp2 = timed(lambda: torch.exp2(x, out=out), repeats)
    return [("exp, 262,144 fp32", t_exp * 1e6, "us", 1.0),
            ("exp2, 262,144 fp32", t_exp2 * 1e6, "us", t_exp2 / t_exp)]


def denormals(repeats):
    """A tile's ``exp`` of shifted logits and the product with the values after it: arguments in
    [-10, 0] give normal results; arguments in [-100, -88] give results below fp32's smallest
    normal number (1.2e-38), i.e. denormals, as far-decayed keys would without the floor."""
    n = 1 << 20
    g = torch.Generator().manual_seed(0)
    u = torch.rand(n, generator=g)
    normal_args, denormal_args = -10 * u, -88 - 12 * u
    w, out, prod = torch.randn(n, generator=g), torch.empty(n), torch.empty(n)
    assert 0 < torch.exp(denormal_args).max() < torch.finfo(torch.float32).tiny

    def tile(args):
        torch.exp(args, out=out)
        torch.mul(out, w, out=prod)

    t_n = timed(lambda: tile(normal_args), repeats)
    t_d = timed(lambda: tile(denormal_args), repeats)
    return [("exp then product, 2^20 fp32, normal results", t_n * 1e6, "us", 1.0),
            ("exp then product, 2^20 fp32, denormal results", t_d * 1e6, "us", t_d / t_n)]


def row_ops(repeats):
    rows, T = 2048, 512                            # e.g. B*H*query rows x keys
    g = torch.Generator().manual_seed(0)
    x = torch.rand(rows, T, generator=g)
    idx = torch.randint(0, T, (rows, T), generator=g)
    out = torch.zeros(rows, T)
    n = rows * T

    def scatter():
        out.zero_()
        out.scatter_add_(-1, idx, x)

    buf = torch.empty(rows, T)
    t_add = timed(lambda: torch.add(x, x, out=buf), repeats)
    out_rows = [("add (elementwise)", t_add / n * 1e9, "ns/elem", 1.0)]
    for name, fn in (("cumsum(-1)", lambda: torch.cumsum(x, -1, out=buf)),
                     ("gather(-1)", lambda: torch.gather(x, -1, idx, out=buf)),
                     ("scatter_add_(-1) (incl. zero_)", scatter)):
        t = timed(fn, repeats)
        out_rows.append((name, t / n * 1e9, "ns/elem", t / t_add))
    return out_rows


def sdpa_value_width(repeats, T=512, B=8, H=8, hd=16):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, hd, generator=g) for _ in range(2))
    v = torch.randn(B, H, T, 2 * hd, generator=g)
    pad = (0, hd)

    def run(pad_qk):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        a, b = (F.pad(qq, pad), F.pad(kk, pad)) if pad_qk else (qq, kk)
        y = F.scaled_dot_product_attention(a, b, vv, is_causal=True, scale=hd ** -0.5)
        y.sum().backward()

    t_pad = timed(lambda: run(True), repeats)
    t_wide = timed(lambda: run(False), repeats)
    return [(f"SDPA fwd+bwd, q/k padded to v's width (T={T})", t_pad * 1e3, "ms", 1.0),
            (f"SDPA fwd+bwd, v twice as wide as q/k (T={T})", t_wide * 1e3, "ms", t_wide / t_pad)]


def cope_row_kernels(repeats, G=16, tq=64, ke=512, npos=64):
    lib = cope_rows.kernels()
    if lib is None:
        return [("cope_rows C kernels: not built here (no C compiler)", float("nan"), "-", None)]
    g = torch.Generator().manual_seed(0)
    S0 = torch.randn(G, tq, ke, generator=g)
    G0 = torch.sigmoid(torch.randn(G, tq, ke, generator=g))
    z2, b = torch.randn(G, tq, npos, generator=g), torch.randn(G, tq, npos, generator=g)
    b[..., -1] = 0                          # as the op builds b (b[npos-1] = 0): the top stretch
    S, Gp, P, dL = (torch.empty_like(S0) for _ in range(4))
    dz = torch.zeros_like(z2)
    n = S0.numel()
    cope_rows.forward(lib, S.copy_(S0), Gp.copy_(G0), P, z2, b, npos - 1)   # positions for backward
    G1 = Gp.clone()

    def kernel_time(prep, fn):
        """Median seconds of fn() alone, prep() (restoring the inputs it overwrites) untimed."""
        times = []
        for _ in range(repeats + 1):
            prep()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])

    t_fwd = kernel_time(lambda: (S.copy_(S0), Gp.copy_(G0)),
                        lambda: cope_rows.forward(lib, S, Gp, P, z2, b, npos - 1))
    t_bwd = kernel_time(lambda: dL.copy_(S0),
                        lambda: cope_rows.backward(lib, dL, G1, P, b, dz))
    buf = torch.empty_like(S0)
    t_add = timed(lambda: torch.add(S0, S0, out=buf), repeats)
    return [(f"add (elementwise), {G} x {tq} x {ke}", t_add / n * 1e9, "ns/elem", 1.0),
            ("cope_rows forward (C)", t_fwd / n * 1e9, "ns/elem", t_fwd / t_add),
            ("cope_rows backward (C)", t_bwd / n * 1e9, "ns/elem", t_bwd / t_add)]


def blake2b(repeats, mb=64):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(os.urandom(mb << 20))
        path = f.name
    try:
        t = timed(lambda: file_digest(path, "blake2b", digest_size=16), max(1, repeats // 3))
    finally:
        os.remove(path)
    return [(f"file_digest blake2b, {mb} MiB file (page cache)", mb / t, "MiB/s", None)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--repeats", type=int, default=9, help="timed calls per measurement (median)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(False)                # the default; the ops must not rely on it
    print(f"lengen {lengen_revision()}, torch {torch.__version__}, threads {args.threads}, "
          f"median of {args.repeats}")
    print(machine_line())
    print("| measurement | value | unit | ratio to the first row of its group |")
    print("|---|---|---|---|")
    for group in (exp_vs_exp2, denormals, row_ops, cope_row_kernels, sdpa_value_width, blake2b):
        for name, value, unit, ratio in group(args.repeats):
            r = "" if ratio is None else f"{ratio:.2f}"
            print(f"| {name} | {value:.3g} | {unit} | {r} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
