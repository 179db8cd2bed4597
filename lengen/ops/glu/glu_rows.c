/* SwiGLU's activation (Shazeer 2020, "GLU Variants Improve Transformer") for CPU training, in one
 * pass forward and one backward over the [rows, d_ff] gate and up projections:
 *   h = silu(g) u = g s u,  s = sigmoid(g) = 1 / (1 + e^-g),
 *   dg = dh u s (1 + g (1 - s)),  du = dh g s.
 * PyTorch runs it as silu then mul forward and as two muls and silu_backward backward: five
 * passes over tensors of 2 MB each in the flip-flop cpu-scale model (benchmarks/RESULTS.md,
 * "SwiGLU"). Bound in lengen.ops.glu.gated.py; built at first use by lengen/ops/ckernels.py.
 *
 * s from e = 2^(-|g| log2 e) (a polynomial 2^x, as lengen/ops/fused_rows.c): s = 1 / (1 + e)
 * for g >= 0, e / (1 + e) otherwise, so that 1 + e never overflows. e is flushed to 0 below
 * 2^-126 (g < -87.3, where PyTorch's sigmoid is under 1e-38 too): h and du are then 0 where
 * PyTorch gives a value under 1e-36 in magnitude for finite u and dh. A NaN g gives a NaN h and dg.
 * Elements run 8 at a time (GCC / Clang vector extensions); on x86-64 the exported functions
 * also have an AVX2 + FMA build, picked at run time. */
#include <stdint.h>

int64_t glu_rows_version(void) { return 2; }

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define X86_AVX2 1
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define INLINE static inline __attribute__((always_inline))
#define VL 8

typedef float v8 __attribute__((vector_size(32)));
typedef float vu __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t v8i __attribute__((vector_size(32)));

INLINE v8 load8(const float *x) { return *(const vu *)x; }
INLINE void store8(float *x, v8 y) { *(vu *)x = y; }
INLINE v8 splat(float x) { return (v8){0} + x; }
INLINE v8 select8(v8i mask, v8 a, v8 b) { return (v8)((mask & (v8i)a) | (~mask & (v8i)b)); }

/* 2^x for x in [-126, 0]: 2^n (n = round x, in the exponent bits) times the degree-7 Taylor
 * polynomial of 2^f on f in [-1/2, 1/2] (relative error < 5e-9, under fp32 rounding) */
INLINE v8 exp2_neg8(v8 x) {
    v8 t = x + 0.5f;
    v8i n = __builtin_convertvector(t, v8i);
    n += (v8i)(__builtin_convertvector(n, v8) > t); /* true is -1: floor(t) */
    v8 f = x - __builtin_convertvector(n, v8);
    v8 p = splat(1.5252733804059841e-05f);
    p = p * f + 1.5403530393381606e-04f;
    p = p * f + 1.3333558146428443e-03f;
    p = p * f + 9.6181291076284770e-03f;
    p = p * f + 5.5504108664821580e-02f;
    p = p * f + 2.4022650695910071e-01f;
    p = p * f + 6.9314718055994531e-01f;
    p = p * f + 1.0f;
    return p * (v8)((n + 127) << 23);
}

/* sigmoid(g) on 8 lanes (header) */
INLINE v8 sigmoid8(v8 g) {
    const v8i neg = g < 0.0f;
    const v8 a = select8(neg, -g, g) * -1.4426950408889634f; /* -|g| log2 e */
    const v8i under = a < -126.0f;                            /* e below the normal floats: 0 */
    const v8 e = select8(under, splat(0.0f), exp2_neg8(select8(under, splat(-126.0f), a)));
    const v8 inv = 1.0f / (1.0f + e);
    return select8(neg, e * inv, inv);
}

INLINE float sigmoid1(float g) {
    float buf[VL] = {g};
    store8(buf, sigmoid8(load8(buf)));
    return buf[0];
}

/* elements n0..n1-1: h = g s u */
INLINE void fwd_impl(int64_t n0, int64_t n1, const float *g, const float *u, float *h) {
    int64_t i = n0;
    for (; i + VL <= n1; i += VL) {
        const v8 gv = load8(g + i);
        store8(h + i, gv * sigmoid8(gv) * load8(u + i));
    }
    for (; i < n1; i++) h[i] = g[i] * sigmoid1(g[i]) * u[i];
}

/* elements n0..n1-1: dg, du (header) */
INLINE void bwd_impl(int64_t n0, int64_t n1, const float *g, const float *u, const float *dh,
                     float *dg, float *du) {
    int64_t i = n0;
    for (; i + VL <= n1; i += VL) {
        const v8 gv = load8(g + i), s = sigmoid8(gv), d = load8(dh + i);
        store8(dg + i, d * load8(u + i) * s * (1.0f + gv * (1.0f - s)));
        store8(du + i, d * (gv * s)); /* silu(g) first, as PyTorch: dh g overflows, silu(g) does not */
    }
    for (; i < n1; i++) {
        const float s = sigmoid1(g[i]);
        dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        du[i] = dh[i] * (g[i] * s);
    }
}

static int force_baseline = 0;
void glu_rows_force_baseline(int64_t on) { force_baseline = (int)on; }

static void fwd_base(int64_t n0, int64_t n1, const float *g, const float *u, float *h) {
    fwd_impl(n0, n1, g, u, h);
}
static void bwd_base(int64_t n0, int64_t n1, const float *g, const float *u, const float *dh,
                     float *dg, float *du) {
    bwd_impl(n0, n1, g, u, dh, dg, du);
}
#ifdef X86_AVX2
__attribute__((target("avx2,fma"))) static void fwd_avx2(int64_t n0, int64_t n1, const float *g,
                                                         const float *u, float *h) {
    fwd_impl(n0, n1, g, u, h);
}
__attribute__((target("avx2,fma"))) static void bwd_avx2(int64_t n0, int64_t n1, const float *g,
                                                         const float *u, const float *dh,
                                                         float *dg, float *du) {
    bwd_impl(n0, n1, g, u, dh, dg, du);
}
static int has_avx2(void) {
    return !force_baseline && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* Forward of elements n0..n1-1 of contiguous g, u into h */
void swiglu_fwd(int64_t n0, int64_t n1, const float *g, const float *u, float *h) {
#ifdef X86_AVX2
    if (has_avx2()) {
        fwd_avx2(n0, n1, g, u, h);
        return;
    }
#endif
    fwd_base(n0, n1, g, u, h);
}

/* Backward of elements n0..n1-1: dg and du from dh */
void swiglu_bwd(int64_t n0, int64_t n1, const float *g, const float *u, const float *dh, float *dg,
                float *du) {
#ifdef X86_AVX2
    if (has_avx2()) {
        bwd_avx2(n0, n1, g, u, dh, dg, du);
        return;
    }
#endif
    bwd_base(n0, n1, g, u, dh, dg, du);
}
