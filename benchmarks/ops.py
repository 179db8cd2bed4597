"""Op microbenchmarks, one harness: named ops, each a table of cases x arms, interleaved rounds.

Every op declares its cases (the shapes it is timed at) and its arms (the first is the baseline:
PyTorch's own op, or the path lengen's replaced; the others lengen's path). The harness builds
every (case, arm) callable of an op, calls each ``warmup`` times untimed, then runs ``--rounds``
rounds in which every callable runs once in turn (``_common.interleaved``): a drift of the shared
machine hits every arm alike, and each ratio is the median over rounds of the per-round ratio.
Per row it prints ms (median), ``arm / first`` (time against the case's first arm) and
``speed-up`` (first / arm). Replaces rms_norm.py, linear.py, swiglu.py, fused_rows.py,
optimizer_step.py and bias_hooks.py (``benchmarks/README.md`` gives each old command's
equivalent).

Ops (``--ops``, comma-separated; default all):

* ``rms_norm`` -- RMSNorm forward + backward. Arms: ``torch`` (``F.rms_norm``: fused forward,
  backward as separate passes), ``lengen`` (the C row kernel, ``lengen/ops/norm``). Cases: the
  residual stream of flip-flop (32 x 127 x 64), addition (32 x 68 x 64) and copy (64 x 42 x 128),
  and TRA's per-head q / k normalisation (32 x 4 x 127 x 16, no weight).
* ``linear`` -- a linear layer's forward + backward (x, weight and bias gradients). Arms:
  ``torch`` (``F.linear``, MKL's sgemm), ``lengen`` (the oneDNN training path,
  ``lengen/ops/linear``). Cases: the cpu-scale projections at 32 x 127 rows (flip-flop's q, k, v
  64 -> 192, 64 -> 64, SwiGLU's 64 -> 128 and 128 -> 64) and a wider one (256 -> 1024, with a
  bias); each again as ``... x-only`` with the weight frozen and no bias (forward and x's
  gradient only: where the two paths differ). Every callable first runs
  ``onednn.ADMIT_AFTER`` times, past oneDNN's admission rule and per-shape compile.
* ``swiglu`` -- SwiGLU's ``silu(g) * u`` forward + backward. Arms: ``torch`` (``F.silu(g) * u``),
  ``lengen`` (the C kernel, ``lengen/ops/glu``). Cases: the flip-flop MLP (32 x 127 x 128) and a
  wider one (32 x 127 x 512).
* ``fused_rows`` -- attention forward + backward, ``(op(q, k, v) * g).sum().backward()``. Arms:
  ``before`` (SDPA for ``softmax``, the tiled op with an explicit tile budget for the others),
  ``fused`` (the per-row C kernel, ``lengen/ops/fused_rows.c``: the default call). Cases: shape x
  op, shapes (B, H, T, head dim) flipflop (32, 4, 127, 16), addition (32, 4, 68, 16), copy
  (64, 4, 42, 32), hd64 (8, 4, 128, 64), T512 (4, 4, 512, 16); ops softmax (no bias), bias
  (dense [H, T, T] with a gradient), fot, tra, cope (64 position embeddings), xl
  (Transformer-XL's Toeplitz tiled form), cope_xl.
* ``adamw`` -- one AdamW step on the parameters of the recipes' cpu-scale models (flip-flop TRA,
  addition FIRE, copy RoPE) with random gradients. Arms: ``loop`` (the per-parameter loop),
  ``fused`` (torch's fused kernel, what ``lengen.train.optim.build_optimizer`` picks on CPU).
* ``bias_hooks`` -- forward + backward of the position-only bias hooks, ``scheme.bias(pos,
  pos)`` (or its pairwise ``_reference_bias``) for one sequence of 8 heads with a fixed random
  gradient into the scheme's parameters: what one attention layer pays for its bias. Cases:
  ``T=512``, ``T=2048`` (any ``T=N`` in ``--cases``). Arms ``SCHEME/POSITIONS/PATH``, the first
  ``t5/identity/fast``: schemes alibi, t5, kerple_log, fire (default L = 512, so rows past L are
  evaluated per pair), ``fire L=1e9``; positions identity (0..T-1), randomized (a sorted subset
  of [0, 4T)), fractional (0.37 k); paths fast and reference (not for T5 or ALiBi).

    python benchmarks/ops.py --ops rms_norm,linear,swiglu,adamw      # ~1 min
    python benchmarks/ops.py --ops fused_rows --cases 'flipflop*'    # one shape, every op
    python benchmarks/ops.py --ops bias_hooks --cases T=512 --rounds 5
    python benchmarks/ops.py --ops swiglu --rounds 3 --json swiglu.json
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import interleaved, lengen_revision, machine_info, machine_line  # noqa: E402


@dataclass
class Op:
    """One op's table: ``cases`` {name: what it is}, ``arms`` (the first is the baseline),
    ``make(case) -> {arm: zero-argument callable}``; ``missing()`` says why the op cannot run
    here (None when it can); ``open_cases`` a pattern of further case names ``make`` accepts."""
    what: str
    arms: tuple
    cases: dict
    make: Callable
    rounds: int = 30
    warmup: int = 1
    missing: Callable = lambda: None
    open_cases: str | None = None


# ---------------------------------------------------------------- rms_norm
RMS_SHAPES = {"flipflop": ((32, 127, 64), True), "addition": ((32, 68, 64), True),
              "copy": ((64, 42, 128), True), "tra_qk": ((32, 4, 127, 16), False)}


def _rms_missing():
    from lengen.ops.norm import rms
    return None if rms.kernels() is not None else "the C kernel is not available here"


def _rms_make(case):
    from lengen.ops.norm.rms import rms_norm

    shape, weighted = RMS_SHAPES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g).requires_grad_(True)
    w = torch.randn(shape[-1], generator=g).requires_grad_(True) if weighted else None
    dy = torch.randn(*shape, generator=g)
    return {"torch": lambda: F.rms_norm(x, (shape[-1],), w, 1e-6).backward(dy),
            "lengen": lambda: rms_norm(x, w, 1e-6).backward(dy)}


# ---------------------------------------------------------------- linear
LINEAR_ROWS = 32 * 127
#: name -> (in features, out features, bias)
LINEAR_SHAPES = {"qkv 64->192": (64, 192, False), "proj 64->64": (64, 64, False),
                 "up 64->128": (64, 128, False), "down 128->64": (128, 64, False),
                 "wide 256->1024": (256, 1024, True)}


def _linear_missing():
    from lengen.ops.linear import onednn
    return None if onednn.available() else "this PyTorch has no working oneDNN linear"


def _linear_make(case):
    from lengen.ops.linear import onednn

    name, x_only = case.removesuffix(" x-only"), case.endswith(" x-only")
    k, n, bias = LINEAR_SHAPES[name]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(LINEAR_ROWS, k, generator=gen).requires_grad_(True)
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).requires_grad_(True)
    b = torch.zeros(n).requires_grad_(True) if bias else None
    dy = torch.randn(LINEAR_ROWS, n, generator=gen)
    if x_only:                           # forward and x's gradient only: the part that differs
        w, b = w.detach(), None
    fns = {"torch": lambda: F.linear(x, w, b).backward(dy),
           "lengen": lambda: onednn.linear(x, w, b).backward(dy)}
    for fn in fns.values():              # past the admission rule and oneDNN's compile
        for _ in range(onednn.ADMIT_AFTER):
            fn()
    return fns


# ---------------------------------------------------------------- swiglu
SWIGLU_SHAPES = {"flipflop": (32, 127, 128), "wide": (32, 127, 512)}


def _swiglu_missing():
    from lengen.ops.glu import gated
    return None if gated.kernels() is not None else "the C kernel is not available here"


def _swiglu_make(case):
    from lengen.ops.glu.gated import swiglu

    shape = SWIGLU_SHAPES[case]
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(*shape, generator=gen).requires_grad_(True)
    u = torch.randn(*shape, generator=gen).requires_grad_(True)
    dh = torch.randn(*shape, generator=gen)
    return {"torch": lambda: (F.silu(g) * u).backward(dh),
            "lengen": lambda: swiglu(g, u).backward(dh)}


# ---------------------------------------------------------------- fused_rows
#: name -> (B, H, T, head dim)
FUSED_SHAPES = {"flipflop": (32, 4, 127, 16), "addition": (32, 4, 68, 16), "copy": (64, 4, 42, 32),
                "hd64": (8, 4, 128, 64), "T512": (4, 4, 512, 16)}
FUSED_OPS = ("softmax", "bias", "fot", "tra", "cope", "xl", "cope_xl")
TILED = dict(budget=1 << 18)             # the tiled ops' default budget, given explicitly


def _fused_missing():
    from lengen.ops import fused_rows
    return None if fused_rows.kernels() is not None else "the C kernel is not available here"


def _fused_inputs(B, H, T, D):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)              # noqa: E731
    x = dict(q=r(B, H, T, D), k=r(B, H, T, D), v=r(B, H, T, D), bias=0.5 * r(H, T, T),
             log_f=F.logsigmoid(r(B, H, T) + 2), log_gate=F.logsigmoid(r(B, H, T)),
             pos_emb=0.3 * r(D, 64), qv=0.3 * r(B, H, T, D), P=0.3 * r(H, 2 * T - 1, D),
             content=0.3 * r(B, H, T))
    return {n: t.requires_grad_(True) for n, t in x.items()}, r(B, H, T, D)


def _fused_make(case):
    from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu as cope
    from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu as fot
    from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu as softmax
    from lengen.ops.tile_bias import BiasHook, RelativeBias
    from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu as tra

    shape, op = case.split(" ")
    x, grad = _fused_inputs(*FUSED_SHAPES[shape])
    q, k, v, pe = x["q"], x["k"], x["v"], x["pos_emb"]
    bfn = lambda s, e: x["bias"][:, s:e]                     # noqa: E731

    def rel():                           # XL's tiled form, made anew per call as XL does
        return RelativeBias(x["qv"], x["P"], x["content"])
    xl = BiasHook(lambda s, e: rel().dense()[..., s:e, :], rel)
    calls = {                            # op -> (before, fused)
        "softmax": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    lambda: softmax(q, k, v)),
        "bias": (lambda: softmax(q, k, v, bias_fn=bfn, **TILED), lambda: softmax(q, k, v, bias_fn=bfn)),
        "fot": (lambda: fot(q, k, v, x["log_f"], **TILED), lambda: fot(q, k, v, x["log_f"])),
        "tra": (lambda: tra(q, k, v, x["log_gate"], **TILED), lambda: tra(q, k, v, x["log_gate"])),
        "cope": (lambda: cope(q, k, v, pe, **TILED), lambda: cope(q, k, v, pe)),
        "xl": (lambda: softmax(q, k, v, bias_fn=xl, **TILED), lambda: softmax(q, k, v, bias_fn=xl)),
        "cope_xl": (lambda: cope(q, k, v, pe, bias_fn=xl, **TILED),
                    lambda: cope(q, k, v, pe, bias_fn=xl)),
    }
    before, fused = calls[op]
    return {"before": lambda: (before() * grad).sum().backward(),
            "fused": lambda: (fused() * grad).sum().backward()}


# ---------------------------------------------------------------- adamw
ADAMW_MODELS = ("flipflop:TRA", "addition:fire", "copy:rope")


def _adamw_make(case):
    from roofline import build

    from lengen.train.optim import param_groups

    cfg, _, net = build(case)
    tc = cfg.train
    torch.manual_seed(0)
    for p in net.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return {arm: torch.optim.AdamW(param_groups(net, tc.weight_decay, tc.decay_all), lr=tc.lr,
                                   betas=tuple(tc.betas), eps=tc.eps, fused=fused).step
            for arm, fused in (("loop", False), ("fused", True))}


# ---------------------------------------------------------------- bias_hooks
BIAS_HEADS = 8
BIAS_SCHEMES = ("alibi", "t5", "kerple_log", "fire", "fire L=1e9")
BIAS_POSITIONS = ("identity", "randomized", "fractional")
BIAS_ARMS = tuple(f"{s}/{p}/{path}" for s in BIAS_SCHEMES for p in BIAS_POSITIONS
                  for path in (("fast",) if s in ("alibi", "t5") else ("fast", "reference")))
BIAS_ARMS = ("t5/identity/fast",) + tuple(a for a in BIAS_ARMS if a != "t5/identity/fast")


def _bias_make(case):
    from lengen.posenc import FIRE, ALiBi, KerpleLog, T5Bias
    from lengen.samplers import RandomizedSampler

    T = int(case.partition("=")[2])
    kw = dict(d_model=8 * BIAS_HEADS, n_heads=BIAS_HEADS, head_dim=8)
    torch.manual_seed(0)
    schemes = {"alibi": ALiBi(**kw), "t5": T5Bias(**kw), "kerple_log": KerpleLog(**kw),
               "fire": FIRE(**kw), "fire L=1e9": FIRE(L_init=1e9, **kw)}
    pos = {"identity": torch.arange(T, dtype=torch.float32),
           "randomized": RandomizedSampler(4 * T).sample(
               T, training=True, generator=torch.Generator().manual_seed(T)),
           "fractional": torch.arange(T, dtype=torch.float32) * 0.37}
    grad = torch.randn(BIAS_HEADS, T, T, generator=torch.Generator().manual_seed(0))

    def run(scheme, fn, p):
        scheme.zero_grad(set_to_none=True)
        b = fn(p, p)
        if b.requires_grad:              # ALiBi has no parameters: forward only
            b.backward(grad.expand_as(b))
    out = {}
    for arm in BIAS_ARMS:
        name, kind, path = arm.split("/")
        s = schemes[name]
        fn = s.bias if path == "fast" else s._reference_bias
        out[arm] = lambda s=s, fn=fn, p=pos[kind]: run(s, fn, p)
    return out


#: op name -> its table (literal registry)
OPS = {
    "rms_norm": Op("RMSNorm forward + backward", ("torch", "lengen"),
                   {n: f"{s}{'' if w else ', no weight'}" for n, (s, w) in RMS_SHAPES.items()},
                   _rms_make, missing=_rms_missing),
    "linear": Op(f"linear forward + backward ({LINEAR_ROWS} rows; x-only: weight frozen, no "
                 "bias: forward and x's gradient)", ("torch", "lengen"),
                 {f"{n}{x}": "(bias)" if b and not x else ""
                  for n, (_, _, b) in LINEAR_SHAPES.items() for x in ("", " x-only")},
                 _linear_make, missing=_linear_missing),
    "swiglu": Op("SwiGLU silu(g) * u forward + backward", ("torch", "lengen"),
                 {n: str(s) for n, s in SWIGLU_SHAPES.items()}, _swiglu_make,
                 missing=_swiglu_missing),
    "fused_rows": Op("attention forward + backward, shape (B, H, T, head dim); before = SDPA "
                     "(softmax) or the tiled op",
                     ("before", "fused"),
                     {f"{s} {o}": str(FUSED_SHAPES[s]) for s in FUSED_SHAPES
                      for o in FUSED_OPS}, _fused_make, rounds=10, warmup=2,
                     missing=_fused_missing),
    "adamw": Op("one AdamW step on the parameters of a recipe's cpu-scale model", ("loop", "fused"),
                {m: "" for m in ADAMW_MODELS}, _adamw_make),
    "bias_hooks": Op(f"bias hook forward + backward, one sequence, {BIAS_HEADS} heads", BIAS_ARMS,
                     {"T=512": "", "T=2048": ""}, _bias_make, rounds=3,
                     open_cases=r"T=[1-9][0-9]*"),
}


def select(op: str, patterns: list[str] | None) -> list[str]:
    """The op's cases matching ``patterns`` (fnmatch; all when None); a pattern that matches no
    declared case is taken as a case name when the op's ``open_cases`` accepts it."""
    spec = OPS[op]
    if not patterns:
        return list(spec.cases)
    out = [c for c in spec.cases if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    for p in patterns:
        if spec.open_cases and re.fullmatch(spec.open_cases, p) and p not in out:
            out.append(p)
    return out


def run_op(op: str, cases: list[str], rounds: int) -> list[dict]:
    """Time every (case, arm) of one op in interleaved rounds; one row per (case, arm)."""
    spec = OPS[op]
    calls = {}
    for case in cases:
        for arm, fn in spec.make(case).items():
            calls[case, arm] = fn
    for fn in calls.values():            # interleaved() adds one more untimed call
        for _ in range(spec.warmup - 1):
            fn()
    times = interleaved(calls, rounds)
    rows = []
    for case in cases:
        first = times[case, spec.arms[0]]
        for arm in spec.arms:
            t = times[case, arm]
            rows.append(dict(op=op, case=case, shape=spec.cases.get(case, ""), arm=arm,
                             ms=1e3 * statistics.median(t),
                             vs_first=statistics.median(a / b for a, b in zip(t, first)),
                             speedup=statistics.median(b / a for a, b in zip(t, first)),
                             times=t))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated ops (default all)")
    ap.add_argument("--cases", help="comma-separated case names or fnmatch patterns (default all)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="timed rounds (default: the op's own, 30; fused_rows 10; bias_hooks 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--json", help="also write setup, machine, rows and every time here")
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        raise SystemExit(f"--ops: unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
    patterns = [p for p in args.cases.split(",") if p] if args.cases else None
    torch.set_num_threads(args.threads)
    setup = dict(ops=",".join(ops), cases=args.cases or "all", rounds=args.rounds or "op default",
                 threads=args.threads, lengen=lengen_revision())
    print("op forward + backward per call; arm / first = median over rounds of (arm / first arm, "
          "same round); speed-up = median of (first arm / arm)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    rows, skipped = [], {}
    for op in ops:
        spec = OPS[op]
        why = spec.missing()
        cases = select(op, patterns)
        if why or not cases:
            skipped[op] = why or f"no case matches --cases (cases: {', '.join(spec.cases)})"
            print(f"\n{op}: skipped: {skipped[op]}")
            continue
        rounds = args.rounds or spec.rounds
        out = run_op(op, cases, rounds)
        rows += out
        print(f"\n{op}: {spec.what}; {rounds} rounds")
        print(f"| case | arm | ms | arm / {spec.arms[0]} | speed-up vs {spec.arms[0]} |")
        print("|---|---|---|---|---|")
        for r in out:
            label = f"{r['case']} {r['shape']}".strip()
            print(f"| {label} | {r['arm']} | {r['ms']:.3f} | {r['vs_first']:.2f} | "
                  f"{r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows, skipped=skipped), f,
                      indent=1)
    return rows


if __name__ == "__main__":
    main()
