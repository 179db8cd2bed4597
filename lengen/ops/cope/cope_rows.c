/* CoPE's per-row position logic for the tiled CPU op (lengen/ops/cope/fast_cpu.py, bound in
 * lengen/ops/cope/rows.py), in one pass per row. Compiled at first use by lengen/ops/ckernels.py;
 * the op falls back to the same maths in PyTorch ops when no C compiler is present (tested equal).
 *
 * A tile holds R = G * tq query rows of ke keys in reversed key order: column c of row r (query
 * s + r of its block) is key e - 1 - c, so keys right of the query are the leading columns
 * c < c0 = tq - 1 - r and the contextual position p_c = sum_{c' <= c} g_c' is a forward running
 * sum (it equals the reference's sum over t = j..i of the gates). Future columns get gate 0.
 *
 * forward, per row:   g_c = G[c] (sigmoid of the scaled score, from PyTorch's vectorised sigmoid)
 *   p  = min(sum_{c' <= c} g, npos - 1) (summed in double and rounded, as ATen's cumsum does)
 *   lo = trunc(p), w = p - lo
 *   S[c] <- log2e * (S[c] + w * b[lo]) + z2[lo]     base-2 logit (z2 = z' log2 e, b = z'[n+1]-z'[n])
 *   P[c] <- p, G[c] <- g (1 - g)                     kept for backward
 *
 * backward (returns 0, or 1 when its scratch cannot be allocated and nothing was written),
 * per row, from the right:   d = dL[c] (natural-log logit gradient)
 *   dz[lo] += d (1 - w); dz[lo + 1] += d w            z' interpolation weights (w = 0 at lo = top),
 *                                                     summed per bucket from running sums
 *   acc += d b[lo]                                    sum over c' >= c of d p_c' = d g_c
 *   dL[c] <- acc * G[c] + d                           gradient of the scaled score
 *
 * These replace a cumsum, a float->int64 copy, frac and two gathers (forward) and two scatter_adds
 * and a cumsum (backward), which ATen runs as scalar loops at 1-7 ns per element.
 */
#include <stdint.h>
#include <stdlib.h>

#define DEFINE_COPE_ROWS(T, SUF)                                                                  \
void cope_rows_fwd_##SUF(T *S, T *G, T *P, int64_t R, int64_t tq, int64_t ke, const T *z2,        \
                         const T *b, int64_t zg, int64_t zr, int64_t top, double log2e) {         \
    const T l2 = (T)log2e, tp = (T)top;                                                           \
    for (int64_t ri = 0; ri < R; ++ri) {                                                          \
        const int64_t g = ri / tq, r = ri % tq, c0 = tq - 1 - r;                                  \
        T *s = S + ri * ke, *gp = G + ri * ke, *p = P + ri * ke;                                  \
        const T *zz = z2 + g * zg + r * zr, *bb = b + g * zg + r * zr;                            \
        const T z0 = zz[0];                                                                       \
        int64_t c = 0;                                                                            \
        for (; c < c0 && c < ke; ++c) {              /* future keys: gate 0, position 0 */        \
            s[c] = l2 * s[c] + z0;                                                                \
            gp[c] = 0;                                                                            \
            p[c] = 0;                                                                             \
        }                                                                                         \
        double acc = 0.0;                                                                         \
        for (; c < ke; ++c) {                                                                     \
            const T gate = gp[c];                                                                 \
            acc += gate;                                                                          \
            T pc = (T)acc;                                                                        \
            if (!(pc >= 0)) pc = 0;          /* NaN scores: index stays in range, NaN stays in s */ \
            if (pc > tp) pc = tp;                                                                 \
            const int64_t lo = (int64_t)pc;                                                       \
            const T w = pc - (T)lo;                                                               \
            s[c] = l2 * (s[c] + w * bb[lo]) + zz[lo];                                             \
            p[c] = pc;                                                                            \
            gp[c] = gate - gate * gate;                                                           \
        }                                                                                         \
    }                                                                                             \
}                                                                                                 \
                                                                                                  \
int64_t cope_rows_bwd_##SUF(T *dL, const T *G, const T *P, int64_t R, int64_t tq, int64_t ke,     \
                            const T *b, T *dz, int64_t zg, int64_t zr, int64_t npos) {            \
    /* last1[n], last2[n]: the running sums q1, q2 (below) at the leftmost column of bucket n */   \
    double *last1 = (double *)malloc(sizeof(double) * (size_t)(2 * (npos + 1)));                  \
    if (!last1) return 1;                       /* nothing written: the caller raises */         \
    double *last2 = last1 + npos + 1;                                                             \
    for (int64_t ri = 0; ri < R; ++ri) {                                                          \
        const int64_t g = ri / tq, r = ri % tq, c0 = tq - 1 - r;                                  \
        T *d = dL + ri * ke, *dzr = dz + g * zg + r * zr;                                         \
        const T *gp = G + ri * ke, *p = P + ri * ke, *bb = b + g * zg + r * zr;                   \
        for (int64_t n = 0; n <= npos; ++n) last1[n] = last2[n] = -1.0 / 0.0;   /* unvisited */   \
        double acc = 0.0, q1 = 0.0, q2 = 0.0;                                                     \
        /* Buckets are contiguous runs of columns (p is monotone), so a bucket's sum is the      */ \
        /* running sum at its leftmost column minus that at the next bucket's leftmost column:   */ \
        /* plain stores per column instead of read-modify-writes that chain through memory.      */ \
        /* Future columns (c < c0) have d = 0 and G = 0: nothing to do there.                    */ \
        for (int64_t c = ke - 1; c >= c0 && c >= 0; --c) {                                        \
            const T dc = d[c], pc = p[c];                                                         \
            int64_t lo = (int64_t)pc;                                                             \
            if (lo < 0 || lo >= npos) lo = lo < 0 ? 0 : npos - 1;       /* never out of range */  \
            const T w = pc - (T)lo;                                                               \
            q1 += (double)(dc - dc * w);                  /* weight of z'[lo]     */              \
            q2 += (double)(dc * w);                       /* weight of z'[lo + 1] */              \
            last1[lo] = q1;                                                                       \
            last2[lo] = q2;                                                                       \
            acc += (double)(dc * bb[lo]);                                                         \
            d[c] = (T)acc * gp[c] + dc;                                                           \
        }                                                                                         \
        /* unvisited buckets hold the value of the next visited one above (empty: difference 0) */ \
        double n1 = 0.0, n2 = 0.0, prev2 = 0.0;                                                   \
        for (int64_t n = npos; n >= 0; --n) {                                                     \
            if (last1[n] == -1.0 / 0.0) { last1[n] = n1; last2[n] = n2; }                          \
            n1 = last1[n]; n2 = last2[n];                                                         \
        }                                                                                         \
        for (int64_t n = 0; n < npos; ++n) {                                                      \
            const double a = last1[n] - last1[n + 1], bw = last2[n] - last2[n + 1];               \
            dzr[n] += (T)(a + prev2);                     /* d z'[n] = sum_lo=n d (1 - w)  */      \
            prev2 = bw;                                   /*        + sum_lo=n-1 d w       */      \
        }                                                                                         \
    }                                                                                             \
    free(last1);                                                                                  \
    return 0;                                                                                     \
}

DEFINE_COPE_ROWS(float, f32)
DEFINE_COPE_ROWS(double, f64)

/* ABI check for the loader: bump when a signature above changes. */
int64_t cope_rows_version(void) { return 2; }
