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
 *
 * The top stretch. Gates are >= 0, so once a row's position reaches top = npos - 1 it stays there
 * for the rest of the row (CoPE clamps positions; at T >> npos most of a long row is past it).
 * There w = 0 and, with b[top] = 0 as the op builds b, the forward is S <- log2e S + z2[top]
 * (no running sum, no lookup: a loop the compiler vectorises) and the backward leaves dL as it
 * is and needs only the plain sum of dL for z'[top]. Both kernels take that path only where
 * b[top] == 0 (the general per-column loop otherwise) and give the same numbers as the loop on
 * finite inputs, up to the sign of a zero. A row with a NaN or infinite score or logit gradient
 * (its output or gradient is not finite either way) may get other positions and other non-finite
 * dz buckets than the loop would give it. The
 * backward finds the stretch by bisection on the (monotone) positions and sums four rows'
 * stretches side by side: one row's sum is a chain of dependent additions, four are independent.
 */
#include <stdint.h>
#include <stdlib.h>

#define NR 4                   /* rows whose top-stretch sums the backward runs side by side */

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
        const int clamps = bb[top] == 0;     /* b[npos-1] = 0, as the op builds it: see the tail */ \
        for (; c < ke; ++c) {                                                                     \
            const T gate = gp[c];                                                                 \
            acc += gate;                                                                          \
            T pc = (T)acc;                                                                        \
            if (!(pc >= 0)) pc = 0;          /* NaN scores: index stays in range, NaN stays in s */ \
            if (pc >= tp) {                                                                       \
                if (clamps) break;           /* the rest of the row sits at the top position */   \
                pc = tp;                                                                          \
            }                                                                                     \
            const int64_t lo = (int64_t)pc;                                                       \
            const T w = pc - (T)lo;                                                               \
            s[c] = l2 * (s[c] + w * bb[lo]) + zz[lo];                                             \
            p[c] = pc;                                                                            \
            gp[c] = gate - gate * gate;                                                           \
        }                                                                                         \
        /* Gates are >= 0, so the running sum never falls back below the top once it reaches   */ \
        /* it: there lo = top and w = 0, the logit is the score plus z'[top], and the loop      */ \
        /* needs neither the sum nor a lookup (vectorised). A NaN gate here would have sent     */ \
        /* the row's later positions to 0; its score is NaN, so the row's output is NaN either  */ \
        /* way. */                                                                                \
        const T zt = zz[top];                                                                     \
        for (; c < ke; ++c) {                                                                     \
            const T gate = gp[c];                                                                 \
            s[c] = l2 * s[c] + zt;                                                                \
            p[c] = tp;                                                                            \
            gp[c] = gate - gate * gate;                                                           \
        }                                                                                         \
    }                                                                                             \
}                                                                                                 \
                                                                                                  \
int64_t cope_rows_bwd_##SUF(T *dL, const T *G, const T *P, int64_t R, int64_t tq, int64_t ke,     \
                            const T *b, T *dz, int64_t zg, int64_t zr, int64_t npos) {            \
    /* per row of a group of NR: last1[n], last2[n], the running sums q1, q2 (below) at the    */ \
    /* leftmost column of bucket n */                                                             \
    double *scratch = (double *)malloc(sizeof(double) * (size_t)(2 * NR * (npos + 1)));          \
    if (!scratch) return 1;                     /* nothing written: the caller raises */         \
    const T tp = (T)(npos - 1);                                                                   \
    for (int64_t r0 = 0; r0 < R; r0 += NR) {                                                      \
        const int nr = R - r0 < NR ? (int)(R - r0) : NR;                                          \
        int64_t c0[NR], ct[NR], m = ke;                                                           \
        double top1[NR];                                                                          \
        for (int i = 0; i < nr; ++i) {                                                            \
            const int64_t ri = r0 + i, g = ri / tq, r = ri % tq;                                  \
            const T *p = P + ri * ke;                                                             \
            c0[i] = tq - 1 - r;                                                                   \
            /* ct: the first column of the row's right end at the top position (ke: none). p is */ \
            /* the forward's running sum, monotone, so a bisection finds it. Only where         */ \
            /* b[top] = 0, as the op builds b (the forward's fast tail has the same test).      */ \
            int64_t lo = c0[i] < ke ? c0[i] : ke, hi = ke;     /* c0 >= 0: r < tq */              \
            if (b[g * zg + r * zr + npos - 1] == 0) {                                             \
                while (lo < hi) {                                                                 \
                    const int64_t mid = lo + (hi - lo) / 2;                                       \
                    if (p[mid] >= tp) hi = mid; else lo = mid + 1;                                \
                }                                                                                 \
            } else {                                                                              \
                lo = ke;                                                                          \
            }                                                                                     \
            ct[i] = lo;                                                                           \
            if (ke - lo < m) m = ke - lo;                                                         \
            top1[i] = 0.0;                                                                        \
        }                                                                                         \
        /* On that stretch w = 0 and b[lo] = 0: q1 (below) is the plain sum of d from the      */ \
        /* right, q2 and acc stay 0 and d is left as it is. A row's sum is a chain of dependent  */ \
        /* additions, so the group's rows are summed side by side over the m columns they all   */ \
        /* have there (each row in its own order: the same sums as one row at a time).          */ \
        if (nr == NR) {                                                                           \
            const T *d0 = dL + r0 * ke, *d1 = d0 + ke, *d2 = d1 + ke, *d3 = d2 + ke;              \
            for (int64_t c = ke - 1; c >= ke - m; --c) {                                          \
                top1[0] += (double)d0[c];                                                         \
                top1[1] += (double)d1[c];                                                         \
                top1[2] += (double)d2[c];                                                         \
                top1[3] += (double)d3[c];                                                         \
            }                                                                                     \
        } else {                                                                                  \
            m = 0;                                                                                \
        }                                                                                         \
        for (int i = 0; i < nr; ++i) {                                                            \
            const int64_t ri = r0 + i, g = ri / tq, r = ri % tq;                                  \
            T *d = dL + ri * ke, *dzr = dz + g * zg + r * zr;                                     \
            const T *gp = G + ri * ke, *p = P + ri * ke, *bb = b + g * zg + r * zr;               \
            double *last1 = scratch + 2 * i * (npos + 1), *last2 = last1 + npos + 1;              \
            /* Positions only rise along a row, so the last column's bucket lo_max is the       */ \
            /* highest it reaches: buckets above get nothing but lo_max + 1's w-share, and only  */ \
            /* 0..K = lo_max + 2 are kept (a short row touches few of the npos buckets).         */ \
            int64_t lo_max = -1;                                                                  \
            if (ct[i] < ke) lo_max = npos - 1;                                                    \
            else if (ke - 1 >= c0[i]) {                                                           \
                lo_max = (int64_t)p[ke - 1];                                                      \
                if (lo_max < 0 || lo_max >= npos) lo_max = lo_max < 0 ? 0 : npos - 1;             \
            }                                                                                     \
            const int64_t K = lo_max + 2 < npos ? lo_max + 2 : npos;                              \
            for (int64_t n = 0; n <= K; ++n) last1[n] = last2[n] = -1.0 / 0.0;    /* unvisited */ \
            double acc = 0.0, q1 = top1[i], q2 = 0.0;                                             \
            int64_t c = ke - 1 - m;                                                               \
            for (; c >= ct[i]; --c) q1 += (double)d[c];    /* the rest of the top stretch */      \
            if (ct[i] < ke) { last1[npos - 1] = q1; last2[npos - 1] = q2; }                       \
            /* Buckets are contiguous runs of columns (p is monotone), so a bucket's sum is the  */ \
            /* running sum at its leftmost column minus that at the next bucket's leftmost      */ \
            /* column: plain stores per column instead of read-modify-writes that chain through */ \
            /* memory. Future columns (c < c0) have d = 0 and G = 0: nothing to do there.        */ \
            for (; c >= c0[i] && c >= 0; --c) {                                                   \
                const T dc = d[c], pc = p[c];                                                     \
                int64_t lo = (int64_t)pc;                                                         \
                if (lo < 0 || lo >= npos) lo = lo < 0 ? 0 : npos - 1;   /* never out of range */  \
                const T w = pc - (T)lo;                                                           \
                q1 += (double)(dc - dc * w);              /* weight of z'[lo]     */              \
                q2 += (double)(dc * w);                   /* weight of z'[lo + 1] */              \
                last1[lo] = q1;                                                                   \
                last2[lo] = q2;                                                                   \
                acc += (double)(dc * bb[lo]);                                                     \
                d[c] = (T)acc * gp[c] + dc;                                                       \
            }                                                                                     \
            /* unvisited buckets hold the value of the next visited one above (empty: 0) */       \
            /* (a row with a NaN score, positions not monotone, may store above K: never read) */ \
            double n1 = 0.0, n2 = 0.0, prev2 = 0.0;                                               \
            for (int64_t n = K; n >= 0; --n) {                                                    \
                if (last1[n] == -1.0 / 0.0) { last1[n] = n1; last2[n] = n2; }                     \
                n1 = last1[n]; n2 = last2[n];                                                     \
            }                                                                                     \
            for (int64_t n = 0; n < K; ++n) {                                                     \
                const double a = last1[n] - last1[n + 1], bw = last2[n] - last2[n + 1];           \
                dzr[n] += (T)(a + prev2);                 /* d z'[n] = sum_lo=n d (1 - w)  */      \
                prev2 = bw;                               /*        + sum_lo=n-1 d w       */      \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    free(scratch);                                                                                \
    return 0;                                                                                     \
}

DEFINE_COPE_ROWS(float, f32)
DEFINE_COPE_ROWS(double, f64)

/* ABI check for the loader: bump when a signature above changes. */
int64_t cope_rows_version(void) { return 3; }
