/* Causal attention for CPU training (softmax, FoT, TRA and CoPE, optionally with Transformer-XL's
 * relative term), one query row at a time: scores, softmax and the value
 * product of a row in one pass over its keys, with every intermediate in L1 (bound in
 * lengen/ops/fused_rows.py). Compiled at first use by lengen/ops/ckernels.py; without a compiler
 * the ops run their tiled PyTorch path (lengen/ops/cpu_tiles.py), which the tests hold to the same
 * dense references as this kernel.
 *
 * Why: with the head dims of the cpu-scale models (16) a tile of the PyTorch path does 2 x 16 flops
 * per score it writes, and every pass (matmul, row max, exp, sum, value product) streams the
 * tile through memory again (benchmarks/RESULTS.md, "Where the step goes"). Here one (batch, head)
 * pair's q, k, v (T x D floats each) and a row of T logits stay in L1 for the whole row.
 *
 * Logits of query i, key j <= i (natural-log units; the kernel works in base 2, times log2 e, so
 * that the weights come from a polynomial 2^x):
 *   softmax:  L_ij = scale q_i . k_j  [+ col_j - col_i]  [+ bias_ij]
 *   TRA:      keys with q_i . k_j > 0 survive (TRA eqs. 4-12); Dbar_ij = survivors in j..i;
 *             L_ij = scale q_i . k_j + (Dbar_ij - 1) g_i  [+ bias_ij] on survivors, others excluded
 *             (g = log delta; the row constants -col_i and -g_i drop out of the softmax).
 *   CoPE:     s_ij = q_i . k_j, g_ij = sigmoid(scale s_ij),
 *             p_ij = min(sum_{t=j..i} g_it, npos - 1),
 *             L_ij = scale s_ij + z_i[lo] + w (z_i[lo+1] - z_i[lo])  [+ col, bias]
 *             (Golovneva et al. 2024; lo = floor p_ij, w = p_ij - lo, z_i = scale q_i . e, made
 *             here per row from the embeddings e [D, npos] as lengen/ops/cope/naive.py does for
 *             all rows; z_i[npos] is never read: w = 0 there).
 *   Relative term (Transformer-XL's (b) + (d) for evenly stepped positions, any kind):
 *             L_ij += qv_i . P[(T - 1) - i + j]  (P: [H, 2T - 1, D], lengen/ops/tile_bias.py).
 *   P_ij = 2^(min(0, max(L2_ij - m_i, FLOOR2))) / l_i, m_i the row max, l_i the row sum (the floor
 *          keeps exp out of denormals, as cpu_tiles.exp_floor); excluded keys get exactly 0; a row
 *          with no key outputs 0 (l_i = 0).
 * Forward writes out_i = sum_j P_ij v_j (0 for a query row the caller marks as not read: the
 * model's last block reads only the scored tokens) and keeps m_i, l_i and, when given a buffer
 * pw, every row's P_ij. Backward takes P from pw (a row's weights are i + 1 floats; remaking
 * them costs a pass over q . k, the relative term's pass and the exponentials; TRA and CoPE
 * still make q . k again, for the survivors' distances and for the gates and buckets), else
 * recomputes each row's logits with the same code (the same bits either way) and, with
 * dL_ij = P_ij (dO_i . v_j - dO_i . O_i):
 *   dq_i = scale sum_j dL_ij k_j,  dk_j += scale dL_ij q_i,  dv_j += P_ij dO_i,
 *   dbias_ij += dL_ij,  dcol_j += dL_ij,  dg_i = sum_j dL_ij Dbar_ij.
 * (For TRA dL is 0 off the survivors, where relu' would block it; on them relu' = 1.)
 * Relative term: dqv_i = sum_j dL_ij P[(T-1)-i+j],  dP[(T-1)-i+j] += dL_ij qv_i.
 * CoPE: dz_i[lo] += dL_ij (1 - w), dz_i[lo+1] += dL_ij w, then dq_i += scale sum_n dz_i[n] e_n
 * and de_n += scale dz_i[n] q_i; the position gradient dL_ij b_ij
 * (b = z[lo+1] - z[lo], 0 at the clamp) reaches gate t through every p_ij with j <= t, so
 * dg_it = sum_{j <= t} dL_ij b_ij (a running sum from the left), and the score gradient is
 * scale (dL_ij + dg_ij g_ij (1 - g_ij)) in place of scale dL_ij.
 *
 * Layout: q, k, dq, dk are rows of D contiguous floats, v, out, dout, dv rows of Dv (the value's
 * width: D, or 2D for differential attention's two halves) at any strides: the
 * caller's lay [8][3] gives, for each in that order, the floats between batches, heads and
 * query rows (pair p = b * H + h starts at x + b * sb + h * sh, row i at + i * st), so that the
 * heads can be read from and written into the layout of the model's projections ([B, T, 3, H,
 * D] for q, k, v and their gradients, [B, T, H, D] for out) with no copy around the kernel.
 * qv, dqv are [n, T, D], col / g /
 * m / l / dcol / dg [n, T], CoPE's e [1 or H, D, Np] (zero columns from npos to Np, a multiple
 * of 8) with its transpose eT and gradient deT [1 or H, npos, D], P / dP [H, 2T - 1, D] and
 * Pt = P transposed per head, [H, D, Up] with zero columns from 2T - 1 (Up >= T + 8, so a row's
 * vectors stay inside);
 * bias for pair p starts at bias + b * sb + h * sh (strides in floats; 0 where
 * the bias is shared) with rows of T floats, and dbias likewise with dsb, dsh. Loops over keys
 * are written 8 at a time so that the compiler keeps them in vector registers; on x86-64 the
 * exported functions also have an AVX2 + FMA build, picked at run time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LOG2E 1.4426950408889634f
#define FLOOR2 (-60.0f * LOG2E) /* cpu_tiles.exp2_floor(float32) */
#define BIG 1e30f               /* excluded keys: -BIG */
#define VL 8                    /* keys per vector step */
#define RB 4                    /* query rows per step of the backward */

/* a * b + c may be one fused multiply-add (ISO C modes turn that off by default) */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define X86_AVX2 1
#pragma GCC diagnostic ignored "-Wpsabi" /* 32-byte vectors pass only between inlined helpers */
/* GCC cannot bound a row length by T and warns that j0 could overflow near INT64_MAX */
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#define INLINE static inline __attribute__((always_inline))
/* GCC's __builtin_shuffle takes a run-time index vector (vpermps in the AVX2 build); Clang has
 * no such builtin, and its builds look CoPE's table up lane by lane */
#if defined(__GNUC__) && !defined(__clang__)
#define VAR_SHUFFLE 1
#endif

/* GCC / Clang vector extensions: 8 floats (one AVX register; two SSE registers in the default
 * build). vu: the same with 4-byte alignment, for loads and stores at any float offset, and
 * may_alias, as the compilers' own unaligned intrinsics types (reads of float arrays through it
 * stay ordered with the scalar writes around them). */
typedef float v8 __attribute__((vector_size(32)));
typedef float vu __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int32_t vui __attribute__((vector_size(32), aligned(4), may_alias));

INLINE v8 load8(const float *x) { return *(const vu *)x; }
INLINE void store8(float *x, v8 y) { *(vu *)x = y; }
INLINE v8 splat(float x) { return (v8){0} + x; } /* a broadcast */
INLINE v8 select8(v8i mask, v8 a, v8 b) { return (v8)((mask & (v8i)a) | (~mask & (v8i)b)); }

int64_t fused_rows_version(void) { return 17; }

/* x rounded up to a whole number of vectors */
INLINE int64_t round_up(int64_t x) { return (x + VL - 1) / VL * VL; }

/* floats of one CoPE row table (z, its differences, dz): npos, and room for a 16-entry window
 * from its last entry */
INLINE int64_t cope_table(int64_t npos) { return (npos > 0 ? npos : 0) + 2 * VL; }

/* lane u <- x[u + n], zeros shifted in from the top (n = 1, 2, 4) */
INLINE v8 shift_down(v8 x, int n) {
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    const v8 z = splat(0.0f);
    if (n == 1) return __builtin_shufflevector(x, z, 1, 2, 3, 4, 5, 6, 7, 8);
    if (n == 2) return __builtin_shufflevector(x, z, 2, 3, 4, 5, 6, 7, 8, 8);
    return __builtin_shufflevector(x, z, 4, 5, 6, 7, 8, 8, 8, 8);
#else /* older GCC: through memory */
    float buf[2 * VL] = {0};
    store8(buf, x);
    return load8(buf + n);
#endif
}

/* lane u <- x[u - n], zeros shifted in from the bottom (n = 1, 2, 4) */
INLINE v8 shift_up(v8 x, int n) {
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    const v8 z = splat(0.0f);
    if (n == 1) return __builtin_shufflevector(z, x, 7, 8, 9, 10, 11, 12, 13, 14);
    if (n == 2) return __builtin_shufflevector(z, x, 7, 7, 8, 9, 10, 11, 12, 13);
    return __builtin_shufflevector(z, x, 7, 7, 7, 7, 8, 9, 10, 11);
#else /* older GCC: through memory */
    float buf[2 * VL] = {0};
    store8(buf + VL, x);
    return load8(buf + VL - n);
#endif
}

/* 2^x on 8 lanes, x in [FLOOR2, 0]: 2^n (n = round(x), built in the exponent bits) times the
 * degree-7 Taylor polynomial of 2^f = e^(f ln 2) on f in [-1/2, 1/2] (truncation error < 5e-9
 * relative, under fp32 rounding). */
INLINE v8 exp2_poly8(v8 x) {
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

/* xt [D, Tp] <- x [T, D] (rows ld floats apart) transposed, columns T..Tp-1 zero */
INLINE void transpose(const float *x, int64_t ld, float *xt, int64_t T, int64_t Tp,
                      const int64_t D) {
    for (int64_t d = 0; d < D; d++) {
        float *row = xt + d * Tp;
        for (int64_t j = 0; j < T; j++) row[j] = x[j * ld + d];
        for (int64_t j = T; j < Tp; j++) row[j] = 0.0f;
    }
}

/* s[j] = alpha a . x_j for j < len (rounded up to VL; xt: [D, Tp]) */
INLINE void dots(const float *a, const float *xt, int64_t Tp, int64_t len, float alpha, float *s,
                 const int64_t D) {
    int64_t j0 = 0;
    /* four vectors of keys at once: four independent chains of multiply-adds (one chain waits
     * for each add's latency) */
    for (; len - j0 >= 4 * VL; j0 += 4 * VL) {
        v8 c0 = splat(0.0f), c1 = c0, c2 = c0, c3 = c0;
        for (int64_t d = 0; d < D; d++) {
            const float *xr = xt + d * Tp + j0;
            const v8 ad = splat(a[d]);
            c0 += ad * load8(xr);
            c1 += ad * load8(xr + VL);
            c2 += ad * load8(xr + 2 * VL);
            c3 += ad * load8(xr + 3 * VL);
        }
        store8(s + j0, alpha * c0);
        store8(s + j0 + VL, alpha * c1);
        store8(s + j0 + 2 * VL, alpha * c2);
        store8(s + j0 + 3 * VL, alpha * c3);
    }
    for (; j0 < len; j0 += VL) { /* the last 1-3 vectors: four chains over d instead */
        v8 c0 = splat(0.0f), c1 = c0, c2 = c0, c3 = c0;
        int64_t d = 0;
        for (; d + 4 <= D; d += 4) {
            const float *xr = xt + d * Tp + j0;
            c0 += a[d] * load8(xr);
            c1 += a[d + 1] * load8(xr + Tp);
            c2 += a[d + 2] * load8(xr + 2 * Tp);
            c3 += a[d + 3] * load8(xr + 3 * Tp);
        }
        for (; d < D; d++) c0 += a[d] * load8(xt + d * Tp + j0);
        store8(s + j0, alpha * ((c0 + c1) + (c2 + c3)));
    }
}

/* y[0..D) += a x[0..D) (whole vectors when D is a multiple of VL) */
INLINE void axpy(float *y, float a, const float *x, const int64_t D) {
    if (D % VL == 0) {
        const v8 va = splat(a);
        for (int64_t d = 0; d < D; d += VL) store8(y + d, load8(y + d) + va * load8(x + d));
    } else {
        for (int64_t d = 0; d < D; d++) y[d] += a * x[d];
    }
}

/* y[0..D) = sum_{j < len} w[j] x[j, 0..D) (rows of x ld floats apart). With D a multiple of VL (at most MAXV vectors) the
 * sums stay in registers, in two chains (even and odd j): accumulating into memory would chain
 * every key through a store and a load. */
#define MAXV 8
INLINE void weighted_sum(float *y, const float *w, const float *x, int64_t ld, int64_t len,
                         const int64_t D) {
    if (D % VL == 0 && D <= MAXV * VL) {
        const int64_t nv = D / VL;
        v8 a0[MAXV], a1[MAXV];
        for (int64_t u = 0; u < nv; u++) a0[u] = a1[u] = splat(0.0f);
        int64_t j = 0;
        for (; j + 2 <= len; j += 2) {
            const v8 w0 = splat(w[j]), w1 = splat(w[j + 1]);
            const float *x0 = x + j * ld, *x1 = x0 + ld;
            for (int64_t u = 0; u < nv; u++) {
                a0[u] += w0 * load8(x0 + u * VL);
                a1[u] += w1 * load8(x1 + u * VL);
            }
        }
        if (j < len)
            for (int64_t u = 0; u < nv; u++) a0[u] += splat(w[j]) * load8(x + j * ld + u * VL);
        for (int64_t u = 0; u < nv; u++) store8(y + u * VL, a0[u] + a1[u]);
    } else {
        for (int64_t d = 0; d < D; d++) y[d] = 0.0f;
        for (int64_t j = 0; j < len; j++) axpy(y, w[j], x + j * ld, D);
    }
}

/* where the tensors of the layout (header) sit: lay[x] = {batch, head, row} strides in floats */
enum { L_Q, L_K, L_V, L_OUT, L_DOUT, L_DQ, L_DK, L_DV, L_N };

typedef struct {
    int64_t T, Tp, H;
    const int64_t (*lay)[3]; /* [L_N][3] */
    float alpha, scale; /* alpha = scale * log2 e */
    const float *bias, *col, *g;
    int64_t sb, sh;
    const float *qv, *P, *Pt; /* relative term, or NULL */
    int64_t Up;
    /* CoPE's position embeddings, or NULL: [pe_heads, D, Np] (Np >= npos rounded up to VL, zero
     * columns from npos), and transposed, peT [pe_heads, npos, D] */
    const float *pe, *peT;
    int64_t npos, Np, pe_heads;
    /* one row's scratch (Tp each): raw q . k, relative term, CoPE's gates, w, b and buckets */
    float *raw, *rel, *gate, *wv, *bv;
    int32_t *lo;
    int64_t *jtop; /* CoPE: the rightmost key of the row whose position is clamped, or -1 */
    float *zb, *bb; /* CoPE: the row's z and its differences, npos + 2 VL each (zeroed once) */
    float *dqv, *dP; /* backward: their gradients (dP: this call's accumulator) */
    float *dpeT;     /* backward: CoPE's embedding gradient, as peT (this call's accumulator) */
    float *pw;       /* each row's weights P_i0..P_ii, kept by forward for backward, or NULL */
    const uint8_t *need; /* forward: [B, T], the query rows whose outputs are read, or NULL */
    float *dzrow;    /* backward: CoPE's dz of the RB rows in hand (zero between rows) */
} Args;

/* pair p's first row of tensor t of the layout, and the floats between its rows */
INLINE int64_t pair_at(const Args *a, int t, int64_t p) {
    return (p / a->H) * a->lay[t][0] + (p % a->H) * a->lay[t][1];
}
INLINE int64_t row_step(const Args *a, int t) { return a->lay[t][2]; }

/* where row i of pair p keeps its weights in pw: the rows of a pair one after another, i + 1
 * floats each */
INLINE float *kept_row(const Args *a, int64_t p, int64_t i) {
    return a->pw + p * (a->T * (a->T + 1) / 2) + i * (i + 1) / 2;
}

/* CoPE: the head of pair p's embeddings (0 when the heads share them) */
INLINE int64_t cope_head(const Args *a, int64_t p) { return a->pe_heads > 1 ? p % a->H : 0; }

/* CoPE: the largest bucket row i can reach. Its count sums at most i + 1 gates <= 1 each; the
 * margin of 2 is for rounding. */
INLINE int64_t cope_last(const Args *a, int64_t i) { return a->npos - 1 < i + 3 ? a->npos - 1 : i + 3; }

/* CoPE: the position logits row i needs, z_i[0 .. cope_last + 1] (the table of differences
 * reads one past the last bucket), and the entries of dz it can write */
INLINE int64_t cope_reach(const Args *a, int64_t i) {
    const int64_t n = cope_last(a, i) + 2;
    return n < a->npos ? n : a->npos;
}

/* CoPE's row i (raw[j] = q_i . k_j): gates, counted positions (from the query leftwards, 8 keys
 * at a time: a suffix sum within the vector plus the keys to its right, so the additions run in
 * another order than the reference's one-by-one cumsum) and the interpolated position logit,
 * into the base-2 logits s[0..i] (none when s is NULL: backward with the weights kept);
 * keeps the gates, w, b and buckets for backward. Gates are >= 0, so once the count reaches
 * npos - 1 every key further left is clamped there too (w = 0, b = 0): from that key on the row
 * is one vectorised pass, and backward only sums its gradient into z[npos - 1]. */
INLINE void cope_row(const Args *a, int64_t p, int64_t i, const float *qi, const float *kt,
                     float *s, const int64_t D) {
    const int64_t top = a->npos - 1;
    float *raw = a->raw;
    const float ftop = (float)top;
    const float *zr = a->zb;
    const v8 zero = splat(0.0f), one = splat(1.0f), lo2 = splat(FLOOR2), sc = splat(a->scale),
             vtop = splat(ftop), al = splat(a->alpha);
    const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    v8 carry = zero;
    int64_t jt = -1;
    /* the row's tables: zb = z_i = scale q_i . e (the position logits, cope_reach entries) and
     * bb[n] = z_i[n+1] - z_i[n] (0 at the clamp), up to the largest bucket the row can reach;
     * entries past them are stale but never selected */
    {
        const int64_t nb = cope_last(a, i);
        dots(qi, a->pe + cope_head(a, p) * D * a->Np, a->Np, cope_reach(a, i), a->scale, a->zb, D);
        for (int64_t n = 0; n <= nb; n++) a->bb[n] = n < top ? zr[n + 1] - zr[n] : 0.0f;
    }
    /* Backward (no s) makes q . k here, only for the keys the row reaches before the clamp: in
     * the blocks of 4 VL keys that dots(.., i + 1, ..) uses (whole blocks from key 0, then the
     * last 1-3 vectors), so that every key gets forward's bits */
    int64_t have = 0; /* the leftmost key whose q . k is in raw (forward: all of them) */
    if (!s) {
        have = (i + 1) / (4 * VL) * (4 * VL);
        if (have < i + 1) dots(qi, kt + have, a->Tp, i + 1 - have, 1.0f, raw + have, D);
    }
    /* 8 keys at a time from the query's vector leftwards, until the count reaches the clamp */
    for (int64_t jb = i / VL * VL; jb >= 0; jb -= VL) {
        if (jb < have) {
            have -= 4 * VL;
            dots(qi, kt + have, a->Tp, 4 * VL, 1.0f, raw + have, D);
        }
        /* sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below, e = 2^(-|x| log2 e) */
        const v8 x = sc * load8(raw + jb);
        v8 t = select8(x < zero, x, -x) * LOG2E;
        t = select8(t < lo2, lo2, t);
        const v8 e = exp2_poly8(t), r = one / (one + e);
        v8 g = select8(x < zero, e * r, r);
        g = select8(lane + (int32_t)jb <= (int32_t)i, g, zero); /* keys right of the query: 0 */
        store8(a->gate + jb, g);
        /* counts: suffix sums within the vector (three shifted adds), plus the keys to its right */
        v8 c = g;
        c += shift_down(c, 1);
        c += shift_down(c, 2);
        c += shift_down(c, 4);
        c += carry;
        carry = splat(c[0]);
        const v8i clamp = ~(c < vtop); /* a NaN count too: no bucket */
        const v8 pp = select8(clamp, vtop, c);
        const v8i lo = __builtin_convertvector(pp, v8i); /* p >= 0: truncation is floor */
        const v8 w = select8(clamp, zero, pp - __builtin_convertvector(lo, v8));
        store8(a->wv + jb, w);
        *(vui *)(a->lo + jb) = lo;
#ifdef VAR_SHUFFLE
        /* the table lookups as two 16-entry permutes: no count of a vector is below lane 7's
         * (each adds non-negative gates to it, and rounding is monotone) or above it by more than
         * 8 gates plus rounding, so the buckets lie in lo[7] .. lo[7] + 9, inside the 16 table
         * entries from lo[7] - 1 (one entry of margin) */
        {
            int32_t l0 = lo[VL - 1] - 1;
            l0 = l0 < 0 ? 0 : l0;
            const v8i rel = lo - l0;
            const v8 zl = __builtin_shuffle(load8(a->zb + l0), load8(a->zb + l0 + VL), rel);
            const v8 bj = __builtin_shuffle(load8(a->bb + l0), load8(a->bb + l0 + VL), rel);
            store8(a->bv + jb, bj);
            if (s) store8(s + jb, al * load8(raw + jb) + LOG2E * (zl + w * bj));
        }
#else
        /* the table lookups lane by lane from memory (inserting lanes into a vector register one
         * at a time cost more than the rest of the row) */
        for (int64_t j = jb; j < jb + VL; j++) {
            const int32_t b0 = a->lo[j];
            const float zl = a->zb[b0], bj = a->bb[b0];
            a->bv[j] = bj;
            if (s) s[j] = a->alpha * raw[j] + LOG2E * (zl + a->wv[j] * bj);
        }
#endif
        if (clamp[0]) { /* counts grow leftwards, so clamped lanes are the lowest ones, up to
                         * rounding (a lane right of jt may round onto the clamp: row_grad's
                         * guard) */
            int u = 0;
            while (u + 1 < VL && clamp[u + 1]) u++;
            jt = jb + u < i ? jb + u : i; /* npos = 1 clamps the lanes right of the query too */
            break;
        }
    }
    *a->jtop = jt;
    if (jt >= 0 && s) { /* every key left of the vector that reached the clamp */
        const v8 zt = splat(LOG2E * zr[top]);
        for (int64_t j = 0; j < jt / VL * VL; j += VL) store8(s + j, al * load8(raw + j) + zt);
    }
}

/* TRA's row s[0..len) of scaled base-2 scores (padded with -BIG to a whole vector): the keys
 * that survive (s > 0), Dbar_ij = survivors in j..i into dbar (0 elsewhere) and, when logits,
 * s_j <- s_j + (Dbar_ij - 1) g2 on survivors and -BIG elsewhere (g2 = log delta in base 2).
 * Dbar is a suffix count, 8 keys at a time from the query leftwards (within a vector by three
 * shifted adds, then the count of the vectors to its right); the padding never survives, and
 * counts are exact in fp32. Returns the number of survivors. */
INLINE int64_t tra_row(float *s, float *dbar, int64_t len, float g2, int logits) {
    const v8 zero = splat(0.0f), one = splat(1.0f), vg = splat(g2), none = splat(-BIG);
    v8 carry = zero;
    for (int64_t j = round_up(len) - VL; j >= 0; j -= VL) {
        const v8 x = load8(s + j);
        const v8i keep = x > zero;
        v8 c = select8(keep, one, zero);
        c += shift_down(c, 1);
        c += shift_down(c, 2);
        c += shift_down(c, 4);
        c += carry;
        carry = splat(c[0]);
        const v8 db = select8(keep, c, zero);
        store8(dbar + j, db);
        if (logits) store8(s + j, select8(keep, x + (db - one) * vg, none));
    }
    return (int64_t)carry[0];
}

/* Base-2 logits of row i of pair p into s[0..i] (excluded keys: -BIG); TRA also fills dbar.
 * Returns the number of keys the row attends. */
INLINE int64_t row_logits(const Args *a, int64_t p, int64_t i, const float *qi, const float *kt,
                          float *s, float *dbar, const int64_t D) {
    const int64_t len = i + 1, T = a->T;
    if (a->pe) { /* CoPE: the gates need the raw product */
        dots(qi, kt, a->Tp, len, 1.0f, a->raw, D);
        cope_row(a, p, i, qi, kt, s, D);
    } else {
        dots(qi, kt, a->Tp, len, a->alpha, s, D);
    }
    for (int64_t j = len; j < round_up(len); j++) s[j] = -BIG; /* vector padding */
    int64_t count = len;
    if (a->g) /* TRA: survivors and their contextual distance, from the query leftwards */
        count = tra_row(s, dbar, len, a->g[p * T + i] * LOG2E, 1);
    if (a->col) {
        const float *cp = a->col + p * T, ci = cp[i];
        for (int64_t j = 0; j < len; j++) s[j] += (cp[j] - ci) * LOG2E;
    }
    if (a->bias) {
        const float *br = a->bias + (p / a->H) * a->sb + (p % a->H) * a->sh + i * T;
        for (int64_t j = 0; j < len; j++) s[j] += br[j] * LOG2E;
    }
    if (a->qv) { /* row i's keys use table rows (T-1)-i .. T-1: a column window of Pt */
        const int64_t h = p % a->H;
        dots(a->qv + (p * T + i) * D, a->Pt + h * D * a->Up + (T - 1 - i), a->Up, len, LOG2E,
             a->rel, D);
        for (int64_t j = 0; j < len; j++) s[j] += a->rel[j];
    }
    return count;
}

/* Row max of s[0..len) (padded with -BIG up to a multiple of VL by row_logits) */
INLINE float row_max(float *s, int64_t len) {
    const int64_t lenp = round_up(len);
    v8 m = splat(-BIG);
    for (int64_t j = 0; j < lenp; j += VL) {
        v8 x = load8(s + j);
        m = select8(x > m, x, m);
    }
    float r = m[0];
    for (int u = 1; u < VL; u++) r = m[u] > r ? m[u] : r;
    return r;
}

/* s[j] <- 2^(clamped s[j] - m), exactly 0 for excluded keys (s <= -BIG / 2, the padding
 * included); returns the sum over the row. */
INLINE float row_weights(float *s, int64_t len, float m) {
    const int64_t lenp = round_up(len);
    const v8 lo = splat(FLOOR2), zero = splat(0.0f), vm = splat(m), cut = splat(-0.5f * BIG);
    v8 acc = zero;
    for (int64_t j = 0; j < lenp; j += VL) {
        v8 x = load8(s + j), e = x - vm;
        e = select8(e < lo, lo, e);
        e = select8(e > zero, zero, e);
        v8 w = select8(x <= cut, zero, exp2_poly8(e));
        store8(s + j, w);
        acc += w;
    }
    float l = 0.0f;
    for (int u = 0; u < VL; u++) l += acc[u];
    return l;
}

INLINE void fwd_pairs(int64_t p0, int64_t p1, const Args *a, const float *q, const float *k,
                      const float *v, float *out, float *mrow, float *lrow, float *work,
                      const int64_t D, const int64_t DV) {
    const int64_t T = a->T, Tp = a->Tp;
    float *kt = work, *s = kt + D * Tp, *dbar = s + Tp;
    const int64_t sq = row_step(a, L_Q), sv = row_step(a, L_V), so = row_step(a, L_OUT);
    for (int64_t p = p0; p < p1; p++) {
        const float *qp = q + pair_at(a, L_Q, p), *vp = v + pair_at(a, L_V, p);
        float *op = out + pair_at(a, L_OUT, p);
        transpose(k + pair_at(a, L_K, p), row_step(a, L_K), kt, T, Tp, D);
        for (int64_t i = 0; i < T; i++) {
            float *oi = op + i * so, acc[DV];
            for (int64_t d = 0; d < DV; d++) oi[d] = 0.0f;
            const int64_t len = i + 1;
            /* a row nobody reads (need): output 0 and, as a row with no key, no gradient */
            if ((a->need && !a->need[(p / a->H) * T + i]) ||
                row_logits(a, p, i, qp + i * sq, kt, s, dbar, D) == 0) {
                mrow[p * T + i] = 0.0f;
                lrow[p * T + i] = 0.0f;
                continue;
            }
            const float m = row_max(s, len), l = row_weights(s, len, m);
            if (l == 0.0f) { /* every surviving key at -inf (a bias): no key, as the reference */
                mrow[p * T + i] = 0.0f;
                lrow[p * T + i] = 0.0f;
                continue;
            }
            weighted_sum(acc, s, vp, sv, len, DV);
            const float inv = 1.0f / l;
            if (a->pw) { /* P_ij as backward computes it, so its gradients keep their bits */
                float *pr = kept_row(a, p, i);
                for (int64_t j = 0; j < len; j++) pr[j] = s[j] * inv;
            }
            for (int64_t d = 0; d < DV; d++) oi[d] = acc[d] * inv;
            mrow[p * T + i] = m;
            lrow[p * T + i] = l;
        }
    }
}

INLINE int all_zero(const float *x, const int64_t D) {
    for (int64_t d = 0; d < D; d++)
        if (x[d] != 0.0f) return 0;
    return 1;
}

/* Backward of row i over keys 0..len-1 (len <= i + RB): its weights P into s and logit gradients
 * dL into dl (both 0 right of the query and on a row with no key), and its terms of dbias, dcol
 * and dg. Returns 0 when the row's dL is all zero without being computed (no key, or no output
 * gradient), else 1. */
INLINE int row_grad(const Args *a, int64_t p, int64_t i, int64_t len, const float *qi,
                     const float *doi, const float *oi, const float *kt, const float *vt,
                     float m, float l, float *s, float *dl, float *dbar, float *db, float *dcol,
                     float *dg, float *dn, float *dzr, const int64_t D, const int64_t DV) {
    const int64_t T = a->T, n = i + 1;
    if (dg) dg[p * T + i] = 0.0f;
    /* a row with no key (zero output, zero gradient), or one whose output gets no gradient: the
     * tokens no loss reads in the model's last block (lengen.model.transformer, keep=), 94 % of
     * a flip-flop batch; dL = P (dout . v - dout . out) is then exactly 0 for finite inputs */
    if (l == 0.0f || all_zero(doi, DV)) {
        for (int64_t j = 0; j < len; j++) s[j] = dl[j] = 0.0f;
        if (a->dqv)
            for (int64_t j = 0; j < len; j++) dn[j] = 0.0f;
        return 0;
    }
    if (a->pw) { /* the weights forward kept: no logits to make again */
        if (a->pe) /* CoPE's gradient needs the row's gates, counts and buckets */
            cope_row(a, p, i, qi, kt, NULL, D);
        if (a->g) { /* TRA's needs its survivors' distances, from the signs of q . k */
            dots(qi, kt, a->Tp, n, a->alpha, a->raw, D);
            for (int64_t j = n; j < round_up(n); j++) a->raw[j] = -BIG;
            tra_row(a->raw, dbar, n, 0.0f, 0);
        }
        memcpy(s, kept_row(a, p, i), sizeof(float) * n);
    } else {
        row_logits(a, p, i, qi, kt, s, dbar, D);
        row_weights(s, n, m);
        const float inv = 1.0f / l;
        for (int64_t j = 0; j < n; j++) s[j] *= inv; /* P_ij */
    }
    float delta = 0.0f;
    for (int64_t d = 0; d < DV; d++) delta += doi[d] * oi[d];
    dots(doi, vt, a->Tp, n, 1.0f, dl, DV);
    for (int64_t j = 0; j < n; j++) dl[j] = s[j] * (dl[j] - delta); /* dL_ij */
    for (int64_t j = n; j < len; j++) s[j] = dl[j] = 0.0f;
    if (db)
        for (int64_t j = 0; j < n; j++) db[i * T + j] += dl[j];
    if (dcol)
        for (int64_t j = 0; j < n; j++) dcol[p * T + j] += dl[j];
    if (a->dqv) { /* relative term: dqv here, the table's gradient from dn by the caller */
        const int64_t h = p % a->H, r0 = T - 1 - i, U = 2 * T - 1;
        weighted_sum(a->dqv + (p * T + i) * D, dl, a->P + (h * U + r0) * D, D, n, D);
        for (int64_t j = 0; j < len; j++) dn[j] = j < n ? dl[j] : 0.0f;
    }
    if (a->pe) { /* CoPE: position-logit gradients into dzr (the row's, zero on entry) and the
                  * gate gradients (header); dl becomes d score / scale */
        const int64_t jt = *a->jtop, top = a->npos - 1;
        /* keys at the clamp: all of their gradient goes to z[npos - 1] (8 partial sums: one
         * chain of adds would wait on each); b = 0 there, so the running position gradient is
         * still 0 and dl stays as it is */
        if (jt >= 0) {
            v8 acc8 = splat(0.0f);
            float clamped = 0.0f;
            int64_t j = 0;
            for (; j + VL <= jt + 1; j += VL) acc8 += load8(dl + j);
            for (; j <= jt; j++) clamped += dl[j];
            for (int u = 0; u < VL; u++) clamped += acc8[u];
            dzr[top] += clamped;
        }
        /* the buckets of the keys right of the clamp: dzr[lo] += d - d w, dzr[lo + 1] += d w.
         * Neighbouring keys mostly share a bucket (counts grow by a gate < 1 a key), so the
         * two entries in hand are carried in registers until the bucket changes (adding into
         * memory key by key waited on each store); every entry gets the same additions in the
         * same order. lo is below npos - 1 here but for a count that rounds onto the clamp in a
         * lane right of jtop (w = 0 there): never write past the row's entries. */
        int32_t cur = -1;
        float s_lo = 0.0f, s_hi = 0.0f; /* dzr[cur], dzr[cur + 1] */
        for (int64_t j = jt + 1; j < n; j++) {
            const float d = dl[j], w = a->wv[j];
            const int32_t lo = a->lo[j];
            if (lo != cur) {
                if (cur >= 0) {
                    dzr[cur] = s_lo;
                    if (cur < top) dzr[cur + 1] = s_hi;
                }
                s_hi = lo == cur - 1 ? s_lo : lo < top ? dzr[lo + 1] : 0.0f;
                s_lo = dzr[lo];
                cur = lo;
            }
            s_lo += d - d * w;
            if (lo < top) s_hi += d * w;
        }
        if (cur >= 0) {
            dzr[cur] = s_lo;
            if (cur < top) dzr[cur + 1] = s_hi;
        }
        /* the running position gradient from the left, 8 keys at a time (a prefix sum within
         * the vector by three shifted adds, plus the keys to its left) */
        float run = 0.0f;
        int64_t j = jt + 1;
        for (; j + VL <= n; j += VL) {
            const v8 d = load8(dl + j), gj = load8(a->gate + j);
            v8 r = d * load8(a->bv + j);
            r += shift_up(r, 1);
            r += shift_up(r, 2);
            r += shift_up(r, 4);
            r += run;
            run = r[VL - 1];
            store8(dl + j, d + r * (gj - gj * gj));
        }
        for (; j < n; j++) {
            const float d = dl[j], gj = a->gate[j];
            run += d * a->bv[j];
            dl[j] = d + run * (gj - gj * gj);
        }
    }
    if (dg) { /* sum_j dL_ij Dbar_ij, 8 partial sums (a single chain would not vectorise) */
        v8 acc8 = splat(0.0f);
        float gsum = 0.0f;
        int64_t j = 0;
        for (; j + VL <= n; j += VL) acc8 += load8(dl + j) * load8(dbar + j);
        for (; j < n; j++) gsum += dl[j] * dbar[j];
        for (int u = 0; u < VL; u++) gsum += acc8[u];
        dg[p * T + i] = gsum;
    }
    return 1;
}

/* CoPE: z_i = scale q_i . e, so a row's dz adds scale sum_n dz_n e_n to dq_i and scale q_i dz_n
 * to the embedding gradient of each bucket n; then dz's entries are zeroed for the next row. */
/* bucket n of a row's dz: its terms of dq (into acc) and of the embeddings' gradient; n zeroed */
INLINE void cope_pe_term(const Args *a, int64_t n, const float *qi, float *dzr, const float *peT,
                         float *dpeT, float *acc, const int64_t D) {
    const float dn = a->scale * dzr[n];
    dzr[n] = 0.0f;
    axpy(acc, dn, peT + n * D, D);
    axpy(dpeT + n * D, dn, qi, D);
}

INLINE void cope_pe_grad(const Args *a, int64_t p, int64_t i, const float *qi, float *dzr,
                         float *dqi, const int64_t D) {
    const int64_t h = cope_head(a, p), nd = cope_reach(a, i);
    const float *peT = a->peT + h * a->npos * D;
    float *dpeT = a->dpeT + h * a->npos * D, acc[D];
    for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
    for (int64_t n = 0; n < nd; n++) cope_pe_term(a, n, qi, dzr, peT, dpeT, acc, D);
    /* npos - 1 too when the row cannot reach it: a NaN count is taken as clamped (0 for finite
     * inputs), and must not stay in the buffer for a later row */
    if (nd < a->npos) cope_pe_term(a, a->npos - 1, qi, dzr, peT, dpeT, acc, D);
    for (int64_t d = 0; d < D; d++) dqi[d] += acc[d];
}

/* y[0..D) += sum_r a[r] x[r][0..D) over RB rows */
INLINE void axpy_rows(float *y, const float *w, const float *const *x, const int64_t D) {
    if (D % VL == 0) {
        for (int64_t d = 0; d < D; d += VL) {
            v8 acc = load8(y + d);
            for (int r = 0; r < RB; r++) acc += splat(w[r]) * load8(x[r] + d);
            store8(y + d, acc);
        }
    } else {
        for (int64_t d = 0; d < D; d++) {
            float acc = y[d];
            for (int r = 0; r < RB; r++) acc += w[r] * x[r][d];
            y[d] = acc;
        }
    }
}

/* Whether a block's RB rows of D floats fit in registers (8 vectors), as the two helpers below
 * hold them; other head dims take axpy_rows and weighted_sum. */
#define KEYS_IN_REGS(D) ((D) % VL == 0 && (D) <= 2 * VL)

/* y_j[0..D) += sum_r w[r][j] x[r][0..D) for keys j < len (rows of y ly floats apart), with the
 * RB rows x[r] held in registers: per key one read-modify-write of y_j and RB broadcasts (the
 * same additions in the same order as axpy_rows, without reloading the x rows for every key) */
INLINE void axpy_keys(float *y, int64_t ly, float *const *w, const float *const *x, int64_t len,
                      const int64_t D) {
    const int64_t nv = D / VL;
    v8 xr[RB][2];
    for (int r = 0; r < RB; r++)
        for (int64_t u = 0; u < nv; u++) xr[r][u] = load8(x[r] + u * VL);
    for (int64_t j = 0; j < len; j++) {
        float *yj = y + j * ly;
        for (int64_t u = 0; u < nv; u++) {
            v8 acc = load8(yj + u * VL);
            for (int r = 0; r < RB; r++) acc += splat(w[r][j]) * xr[r][u];
            store8(yj + u * VL, acc);
        }
    }
}

/* y_j += sum_r w[r][j] x[r] for keys j < len: axpy_keys where the RB rows fit in registers,
 * else one axpy_rows per key (the same additions in the same order either way) */
INLINE void keys_update(float *y, int64_t ly, float *const *w, const float *const *x, int64_t len,
                        const int64_t D) {
    if (KEYS_IN_REGS(D)) {
        axpy_keys(y, ly, w, x, len, D);
        return;
    }
    for (int64_t j = 0; j < len; j++) {
        float wj[RB];
        for (int r = 0; r < RB; r++) wj[r] = w[r][j];
        axpy_rows(y + j * ly, wj, x, D);
    }
}

/* CoPE's embedding terms of a block's nr rows (cope_pe_grad's, for head dims whose RB rows fit
 * in registers): the embeddings' gradient dpeT[n] += scale sum_r dz_r[n] q_r as one
 * read-modify-write per bucket for the block (keys_update), and dq_r += scale sum_n dz_r[n]
 * peT[n] with each bucket's row of peT loaded once for the block. Each sum gets the per-row
 * path's additions in its order (a row past its own reach adds exact zeros); dz zeroed. */
INLINE void cope_pe_block(const Args *a, int64_t p, int64_t i, int64_t nr, const float *const *qr,
                          float *const *dzr, float *dq, int64_t sdq, const int64_t D) {
    const int64_t h = cope_head(a, p), top = a->npos - 1, nd = cope_reach(a, i + nr - 1);
    const int64_t nv = D / VL;
    const float *peT = a->peT + h * a->npos * D;
    float *dpeT = a->dpeT + h * a->npos * D;
    for (int r = 0; r < RB; r++) /* rows past nr: zeros; a row's entries past its reach: 0 */
        for (int64_t n = 0; n < nd; n++) dzr[r][n] *= a->scale;
    keys_update(dpeT, D, dzr, qr, nd, D);
    v8 acc[RB][2];
    for (int r = 0; r < RB; r++)
        for (int64_t u = 0; u < nv; u++) acc[r][u] = splat(0.0f);
    for (int64_t n = 0; n < nd; n++) {
        for (int64_t u = 0; u < nv; u++) {
            const v8 e = load8(peT + n * D + u * VL);
            for (int r = 0; r < RB; r++) acc[r][u] += splat(dzr[r][n]) * e;
        }
    }
    if (nd < a->npos) { /* npos - 1, which no row of the block reaches (a NaN count's bucket) */
        float w[RB];
        for (int r = 0; r < RB; r++) w[r] = a->scale * dzr[r][top];
        axpy_rows(dpeT + top * D, w, qr, D);
        for (int r = 0; r < RB; r++) {
            dzr[r][top] = 0.0f;
            for (int64_t u = 0; u < nv; u++)
                acc[r][u] += splat(w[r]) * load8(peT + top * D + u * VL);
        }
    }
    for (int r = 0; r < nr; r++) {
        float *dqr = dq + (i + r) * sdq;
        for (int64_t u = 0; u < nv; u++) store8(dqr + u * VL, load8(dqr + u * VL) + acc[r][u]);
    }
    for (int r = 0; r < RB; r++)
        for (int64_t n = 0; n < nd; n++) dzr[r][n] = 0.0f;
}

/* y[r][0..D) = sum_{j < len} w[r][j] x[j, 0..D) for two rows r at once (rows of x ld floats
 * apart): each x row is loaded once for both; the even / odd chains of weighted_sum, so the
 * same bits */
INLINE void weighted_sum2(float *y0, float *y1, const float *w0, const float *w1, const float *x,
                          int64_t ld, int64_t len, const int64_t D) {
    const int64_t nv = D / VL;
    v8 a0[2][2], a1[2][2]; /* [row][vector], even and odd keys */
    for (int r = 0; r < 2; r++)
        for (int64_t u = 0; u < nv; u++) a0[r][u] = a1[r][u] = splat(0.0f);
    int64_t j = 0;
    for (; j + 2 <= len; j += 2) {
        const float *x0 = x + j * ld, *x1 = x0 + ld;
        const v8 p0 = splat(w0[j]), p1 = splat(w0[j + 1]), q0 = splat(w1[j]), q1 = splat(w1[j + 1]);
        for (int64_t u = 0; u < nv; u++) {
            const v8 e = load8(x0 + u * VL), o = load8(x1 + u * VL);
            a0[0][u] += p0 * e;
            a1[0][u] += p1 * o;
            a0[1][u] += q0 * e;
            a1[1][u] += q1 * o;
        }
    }
    if (j < len)
        for (int64_t u = 0; u < nv; u++) {
            const v8 e = load8(x + j * ld + u * VL);
            a0[0][u] += splat(w0[j]) * e;
            a0[1][u] += splat(w1[j]) * e;
        }
    for (int64_t u = 0; u < nv; u++) {
        store8(y0 + u * VL, a0[0][u] + a1[0][u]);
        store8(y1 + u * VL, a0[1][u] + a1[1][u]);
    }
}

/* Query rows go RB at a time: each key's rows of dk and dv (and the relative term's table rows)
 * are read and written once for all of them (those read-modify-writes were the largest cost of a
 * row at a time). A last block of fewer rows is filled with rows of zero weights. */
INLINE void bwd_pairs(int64_t p0, int64_t p1, const Args *a, const float *q, const float *k,
                      const float *v, const float *out, const float *dout, const float *mrow,
                      const float *lrow, float *dq, float *dk, float *dv, float *dbias,
                      int64_t dsb, int64_t dsh, float *dcol, float *dg, float *work,
                      const int64_t D, const int64_t DV) {
    const int64_t T = a->T, Tp = a->Tp, H = a->H, Tn = Tp + 2 * VL;
    const float scale = a->alpha / LOG2E;
    float *kt = work, *vt = kt + D * Tp, *dbar = vt + DV * Tp, *sr[RB], *dlr[RB], *dnr[RB],
          *dzr[RB];
    /* per row: weights, logit gradients, and the relative term's dL (VL zeros in front: the
     * table loop below reads up to RB - 1 keys left of key 0) */
    for (int r = 0; r < RB; r++) {
        sr[r] = dbar + Tp + r * Tp;
        dlr[r] = dbar + Tp + (RB + r) * Tp;
        dnr[r] = dbar + Tp + 2 * RB * Tp + r * Tn + VL;
        dzr[r] = a->dzrow + r * cope_table(a->npos);
    }
    memset(dnr[0] - VL, 0, sizeof(float) * RB * Tn);
    const int64_t sq = row_step(a, L_Q), sk = row_step(a, L_K), so = row_step(a, L_OUT),
                  sdo = row_step(a, L_DOUT), sdq = row_step(a, L_DQ), sdk = row_step(a, L_DK),
                  sdv = row_step(a, L_DV);
    for (int64_t p = p0; p < p1; p++) {
        const float *qp = q + pair_at(a, L_Q, p), *kp = k + pair_at(a, L_K, p),
                    *dop = dout + pair_at(a, L_DOUT, p), *op = out + pair_at(a, L_OUT, p);
        const float *mp = mrow + p * T, *lp = lrow + p * T;
        float *dqp = dq + pair_at(a, L_DQ, p), *dkp = dk + pair_at(a, L_DK, p),
              *dvp = dv + pair_at(a, L_DV, p);
        transpose(kp, sk, kt, T, Tp, D);
        transpose(v + pair_at(a, L_V, p), row_step(a, L_V), vt, T, Tp, DV);
        for (int64_t j = 0; j < T; j++) {
            memset(dkp + j * sdk, 0, sizeof(float) * D);
            memset(dvp + j * sdv, 0, sizeof(float) * DV);
        }
        float *db = dbias ? dbias + (p / H) * dsb + (p % H) * dsh : NULL;
        for (int64_t i = 0; i < T; i += RB) {
            const int64_t nr = T - i < RB ? T - i : RB, len = i + nr;
            const float *qr[RB], *dor[RB], *qvr[RB];
            int live = 0;
            /* one call site for every row: the compiler inlines row_grad (and the row logits in
             * it) once per head dim (the build time grew with each call site) */
            for (int r = 0; r < RB; r++) {
                const int64_t ir = r < nr ? i + r : i; /* rows past T: row i with zero weights */
                qr[r] = qp + ir * sq;
                dor[r] = dop + ir * sdo;
                qvr[r] = a->qv ? a->qv + (p * T + ir) * D : NULL;
                if (r < nr) {
                    live |= row_grad(a, p, ir, len, qr[r], dor[r], op + ir * so, kt, vt, mp[ir],
                                     lp[ir], sr[r], dlr[r], dbar, db, dcol, dg, dnr[r], dzr[r], D,
                                     DV);
                } else {
                    for (int64_t j = 0; j < i + RB; j++) sr[r][j] = dlr[r][j] = dnr[r][j] = 0.0f;
                }
            }
            if (!live) {
                /* no row of the block has a gradient (in the model's last block most rows: the
                 * tokens no loss reads): for finite inputs dk, dv and the table get exactly
                 * nothing from it, and dq is 0 */
                for (int64_t r = 0; r < nr; r++) memset(dqp + (i + r) * sdq, 0, sizeof(float) * D);
                continue;
            }
            if (a->dqv) {
                /* the table's gradient: row i + r reads table row (T-1-i) + (j - r) for key j, so
                 * table row (T-1-i) + m takes key m + r of each row r, all in one
                 * read-modify-write (as dk and dv below): keys_update over the table rows
                 * m = 1 - nr .. i (from 1 - nr: the table rows read stay inside the table), row
                 * r's weights dn_r read from m + r (dn's zeros in front cover m + r < 0) */
                const int64_t U = 2 * T - 1;
                float *dPh = a->dP + (p % H) * U * D + (T - 1 - i) * D, *wm[RB];
                for (int r = 0; r < RB; r++) wm[r] = dnr[r] + (1 - nr) + r;
                keys_update(dPh + (1 - nr) * D, D, wm, qvr, i + nr, D);
            }
            for (int r = 0; r < RB; r++) /* now the gradient of the score q . k */
                for (int64_t j = 0; j < len; j++) dlr[r][j] *= scale;
            keys_update(dkp, sdk, dlr, qr, len, D);
            keys_update(dvp, sdv, sr, dor, len, DV);
            int64_t r = 0;
            if (KEYS_IN_REGS(D))
                for (; r + 2 <= nr; r += 2)
                    weighted_sum2(dqp + (i + r) * sdq, dqp + (i + r + 1) * sdq, dlr[r], dlr[r + 1],
                                  kp, sk, len, D);
            for (; r < nr; r++) weighted_sum(dqp + (i + r) * sdq, dlr[r], kp, sk, len, D);
            if (a->pe && KEYS_IN_REGS(D))
                cope_pe_block(a, p, i, nr, qr, dzr, dqp, sdq, D);
            else if (a->pe)
                for (r = 0; r < nr; r++)
                    cope_pe_grad(a, p, i + r, qr[r], dzr[r], dqp + (i + r) * sdq, D);
        }
    }
}

/* The head dims the models use get a copy with D (and the value's width DV) known at compile time
 * (unrolled vector loops): DV = D, and DV = 2D at head dim 16 (differential attention's value at
 * the cpu-scale models' head dim); any other pair runs the copy with both read at run time. */
#define DISPATCH(CALL)                                                                             \
    if (DV == D && D == 8) CALL(8, 8);                                                             \
    else if (DV == D && D == 16) CALL(16, 16);                                                     \
    else if (DV == D && D == 32) CALL(32, 32);                                                     \
    else if (DV == D && D == 64) CALL(64, 64);                                                     \
    else if (DV == 32 && D == 16) CALL(16, 32);                                                    \
    else CALL(D, DV);

/* The exported functions run one of two builds of the same code: AVX2 + FMA where the CPU has
 * them (checked at run time, so the cached library also runs on older x86-64), else the
 * compiler's baseline. */
#define FWD_ARGS                                                                                   \
    int64_t p0, int64_t p1, int64_t T, int64_t D, int64_t DV, int64_t H, double scale,           \
        const float *q,                                                                            \
        const float *k, const float *v, const float *bias, int64_t sb, int64_t sh,                 \
        const float *col, const float *g, const float *qv, const float *P, const float *Pt,       \
        int64_t Up, const float *pe, const float *peT, int64_t npos, int64_t Np,                \
        int64_t pe_heads, const int64_t *lay, float *out, float *mrow, float *lrow, float *pw,   \
        const uint8_t *need
#define FWD_CALL                                                                                   \
    p0, p1, T, D, DV, H, scale, q, k, v, bias, sb, sh, col, g, qv, P, Pt, Up, pe, peT, npos, Np,   \
        pe_heads, lay, out, mrow, lrow, pw, need
#define BWD_ARGS                                                                                   \
    int64_t p0, int64_t p1, int64_t T, int64_t D, int64_t DV, int64_t H, double scale,           \
        const float *q,                                                                            \
        const float *k, const float *v, const float *bias, int64_t sb, int64_t sh,                 \
        const float *col, const float *g, const float *qv, const float *P, const float *Pt,       \
        int64_t Up, const float *pe, const float *peT, int64_t npos, int64_t Np,                \
        int64_t pe_heads, const int64_t *lay, const float *out, const float *dout,                \
        const float *mrow, const float *lrow, float *dq, float *dk, float *dv, float *dbias,      \
        int64_t dsb, int64_t dsh, float *dcol, float *dg, float *dqv, float *dP, float *dpeT,    \
        float *pw
#define BWD_CALL                                                                                   \
    p0, p1, T, D, DV, H, scale, q, k, v, bias, sb, sh, col, g, qv, P, Pt, Up, pe, peT, npos, Np,   \
        pe_heads, lay, out, dout, mrow, lrow, dq, dk, dv, dbias, dsb, dsh, dcol, dg, dqv, dP,     \
        dpeT, pw

/* The row scratch of Args (6 Tp + 2 floats and CoPE's two tables) from work; after make_args */
INLINE void row_scratch(Args *a, float *work) {
    a->raw = work;
    a->rel = work + a->Tp;
    a->gate = work + 2 * a->Tp;
    a->wv = work + 3 * a->Tp;
    a->bv = work + 4 * a->Tp;
    a->lo = (int32_t *)(work + 5 * a->Tp);
    a->jtop = (int64_t *)(work + 6 * a->Tp);
    a->zb = work + 6 * a->Tp + 2;
    a->bb = a->zb + cope_table(a->npos);
    memset(a->zb, 0, sizeof(float) * 2 * cope_table(a->npos));
}

INLINE Args make_args(int64_t T, int64_t H, double scale, const float *bias, int64_t sb,
                      int64_t sh, const float *col, const float *g, const float *qv,
                      const float *P, const float *Pt, int64_t Up, const float *pe,
                      const float *peT, int64_t npos, int64_t Np, int64_t pe_heads,
                      const int64_t *lay) {
    Args a = {0};
    a.lay = (const int64_t(*)[3])lay;
    a.T = T;
    a.Tp = round_up(T);
    a.H = H;
    a.alpha = (float)(scale * 1.4426950408889634);
    a.scale = (float)scale;
    a.bias = bias;
    a.col = col;
    a.g = g;
    a.sb = sb;
    a.sh = sh;
    a.qv = qv;
    a.P = P;
    a.Pt = Pt;
    a.Up = Up;
    a.pe = pe;
    a.peT = peT;
    a.npos = pe ? npos : 0;
    a.Np = Np;
    a.pe_heads = pe_heads;
    return a;
}

INLINE int64_t fwd_impl(FWD_ARGS) {
    const int64_t Tp = round_up(T);
    float *work = malloc(sizeof(float) * (D * Tp + 8 * Tp + 2 + 2 * cope_table(npos)));
    if (!work) return 1;
    Args a = make_args(T, H, scale, bias, sb, sh, col, g, qv, P, Pt, Up, pe, peT, npos, Np,
                       pe_heads, lay);
    row_scratch(&a, work + D * Tp + 2 * Tp);
    a.pw = pw;
    a.need = need;
#define FWD(DD, DVV) fwd_pairs(p0, p1, &a, q, k, v, out, mrow, lrow, work, DD, DVV)
    DISPATCH(FWD)
#undef FWD
    free(work);
    return 0;
}

INLINE int64_t bwd_impl(BWD_ARGS) {
    const int64_t Tp = round_up(T);
    /* kt, vt; dbar; RB rows of weights, logit gradients and (padded) dn; row scratch; tables */
    const int64_t rows = (1 + 2 * RB) * Tp + RB * (Tp + 2 * VL);
    float *work = malloc(sizeof(float) * ((D + DV) * Tp + rows + 6 * Tp + 2 +
                                          (2 + RB) * cope_table(npos)));
    if (!work) return 1;
    Args a = make_args(T, H, scale, bias, sb, sh, col, g, qv, P, Pt, Up, pe, peT, npos, Np,
                       pe_heads, lay);
    row_scratch(&a, work + (D + DV) * Tp + rows);
    a.dqv = qv ? dqv : NULL;
    a.dP = qv ? dP : NULL;
    a.dpeT = pe ? dpeT : NULL;
    a.pw = pw;
    a.dzrow = a.bb + cope_table(a.npos); /* RB rows of dz */
    memset(a.dzrow, 0, sizeof(float) * RB * cope_table(a.npos));
#define BWD(DD, DVV)                                                                               \
    bwd_pairs(p0, p1, &a, q, k, v, out, dout, mrow, lrow, dq, dk, dv, dbias, dsb, dsh, dcol, dg,  \
              work, DD, DVV)
    DISPATCH(BWD)
#undef BWD
    free(work);
    return 0;
}

/* tests run the baseline build on AVX2 machines too */
static int force_baseline = 0;
void fused_rows_force_baseline(int64_t on) { force_baseline = (int)on; }

static int64_t fwd_base(FWD_ARGS) { return fwd_impl(FWD_CALL); }
static int64_t bwd_base(BWD_ARGS) { return bwd_impl(BWD_CALL); }
#ifdef X86_AVX2
__attribute__((target("avx2,fma"))) static int64_t fwd_avx2(FWD_ARGS) { return fwd_impl(FWD_CALL); }
__attribute__((target("avx2,fma"))) static int64_t bwd_avx2(BWD_ARGS) { return bwd_impl(BWD_CALL); }
static int has_avx2(void) {
    return !force_baseline && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* Forward of pairs p0..p1-1. Returns 0, or 1 when its scratch cannot be allocated (nothing
 * written). */
int64_t fused_rows_fwd(FWD_ARGS) {
#ifdef X86_AVX2
    if (has_avx2()) return fwd_avx2(FWD_CALL);
#endif
    return fwd_base(FWD_CALL);
}

/* Backward of pairs p0..p1-1: writes dq, dk, dv (and dg) of those pairs, adds into dbias and dcol
 * (which the caller zeroes). Returns 0, or 1 when its scratch cannot be allocated (nothing
 * written). */
int64_t fused_rows_bwd(BWD_ARGS) {
#ifdef X86_AVX2
    if (has_avx2()) return bwd_avx2(BWD_CALL);
#endif
    return bwd_base(BWD_CALL);
}
