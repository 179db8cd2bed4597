"""Forward + backward time of the position-only bias hooks (ALiBi, T5, KerpleLog, FIRE) and of
the pairwise references of the fast paths, as ratios to T5 with identity positions measured in the
same round.

Each case calls ``scheme.bias(pos, pos)`` (or ``_reference_bias``) for one sequence of length T
with shared positions and back-propagates a fixed random gradient into the scheme's parameters,
i.e. the cost one attention layer pays for its bias. Position kinds: ``identity`` (0..T-1),
``randomized`` (a sorted random subset of [0, 4T), the randomized sampler), ``fractional``
(0.37 k). FIRE is measured with its default L = 512, so at T > 512 the rows past L are evaluated
per pair; ``fire L=1e9`` keeps every row within L. Repeats are interleaved and each ratio is taken
against the baseline of the same round; the median over rounds is reported.

    python benchmarks/bias_hooks.py                        # T = 512 and 2048, 8 heads
    python benchmarks/bias_hooks.py --T 300 600 --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from lengen.posenc import ALiBi, FIRE, KerpleLog, T5Bias
from lengen.samplers import RandomizedSampler

try:                                     # run as a script from the repository root
    from _common import lengen_revision, machine_info, machine_line
except ImportError:                      # pragma: no cover
    from benchmarks._common import lengen_revision, machine_info, machine_line


def schemes(H):
    kw = dict(d_model=8 * H, n_heads=H, head_dim=8)
    torch.manual_seed(0)
    return {"alibi": ALiBi(**kw), "t5": T5Bias(**kw), "kerple_log": KerpleLog(**kw),
            "fire": FIRE(**kw), "fire L=1e9": FIRE(L_init=1e9, **kw)}


def positions(kind, T):
    if kind == "identity":
        return torch.arange(T, dtype=torch.float32)
    if kind == "randomized":
        return RandomizedSampler(4 * T).sample(T, training=True,
                                               generator=torch.Generator().manual_seed(T))
    return torch.arange(T, dtype=torch.float32) * 0.37


def cases(H):
    out = []
    for name, scheme in schemes(H).items():
        for kind in ("identity", "randomized", "fractional"):
            out.append((name, kind, "fast", scheme, scheme.bias))
            ref = getattr(scheme, "_reference_bias", None)
            if ref is not None and name != "t5":
                out.append((name, kind, "reference", scheme, ref))
    return out


def run(fn, scheme, pos, grad):
    scheme.zero_grad(set_to_none=True)
    b = fn(pos, pos)
    if b.requires_grad:
        b.backward(grad.expand_as(b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    H = args.heads
    rows = []
    print(f"bias hook fwd+bwd, ratio = median over rounds of (case / t5 identity, same round); "
          f"heads={H}, threads={torch.get_num_threads()}, torch={torch.__version__}, "
          f"lengen={lengen_revision()}")
    print(machine_line(), flush=True)
    for T in args.T:
        grad = torch.randn(H, T, T, generator=torch.Generator().manual_seed(0))
        todo = cases(H)
        pos = {k: positions(k, T) for k in ("identity", "randomized", "fractional")}
        base_key = ("t5", "identity", "fast")
        times = {c[:3]: [] for c in todo}
        for c in todo:                                        # warm-up
            run(c[4], c[3], pos[c[1]], grad)
        for _ in range(args.repeats):
            for name, kind, path, scheme, fn in todo:
                t0 = time.perf_counter()
                run(fn, scheme, pos[kind], grad)
                times[(name, kind, path)].append(time.perf_counter() - t0)
        base = times[base_key]
        print(f"\nT = {T} (baseline {1e3 * statistics.median(base):.1f} ms)")
        print(f"{'scheme':<12} {'positions':<11} {'path':<10} {'ms':>8} {'ratio':>7}")
        for (name, kind, path), ts in times.items():
            ratio = statistics.median(t / b for t, b in zip(ts, base))
            rows.append(dict(T=T, scheme=name, positions=kind, path=path,
                             ms=1e3 * statistics.median(ts), ratio=ratio))
            print(f"{name:<12} {kind:<11} {path:<10} {1e3 * statistics.median(ts):8.1f} "
                  f"{ratio:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine_info(), lengen=lengen_revision(), rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    main()
