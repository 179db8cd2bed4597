/* RMSNorm (Zhang & Sennrich 2019) for CPU training, one row at a time: y = x r w with
 * r = 1 / sqrt(mean(x^2) + eps) over the row's d features (w optional), and its backward in one
 * pass per row:
 *   g = dy w,  xh = x r,  dx = r (g - xh mean(g xh)),  dw += dy xh.
 * torch.nn.functional.rms_norm runs its backward as five or six separate elementwise and
 * reduction passes (pow, mean, rsqrt, mul ...), each over the whole [rows, d] tensor
 * (benchmarks/RESULTS.md, "RMSNorm"); here a row (d floats) stays in L1. Bound in
 * lengen/ops/norm/rms.py; built at first use by lengen/ops/ckernels.py. Rows are contiguous,
 * d floats each. Sums over a row run in 8 partial sums (one chain would not vectorise). */
#include <math.h>
#include <stdint.h>

int64_t rms_rows_version(void) { return 1; }

#define VL 8

/* sum_k a[k] b[k] over k < d */
static inline float dot(const float *a, const float *b, int64_t d) {
    float acc[VL] = {0};
    int64_t k = 0;
    for (; k + VL <= d; k += VL)
        for (int u = 0; u < VL; u++) acc[u] += a[k + u] * b[k + u];
    float s = 0.0f;
    for (; k < d; k++) s += a[k] * b[k];
    for (int u = 0; u < VL; u++) s += acc[u];
    return s;
}

/* Rows r0..r1-1: y and the kept r (rstd) per row */
void rms_rows_fwd(int64_t r0, int64_t r1, int64_t d, const float *x, const float *w, double eps,
                  float *y, float *rstd) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        const float rs = (float)(1.0 / sqrt((double)dot(xr, xr, d) / (double)d + eps));
        rstd[r] = rs;
        if (w)
            for (int64_t k = 0; k < d; k++) yr[k] = xr[k] * rs * w[k];
        else
            for (int64_t k = 0; k < d; k++) yr[k] = xr[k] * rs;
    }
}

/* Rows r0..r1-1: dx, and dw (d floats, this call's own accumulator, may be NULL) += dy xh */
void rms_rows_bwd(int64_t r0, int64_t r1, int64_t d, const float *x, const float *w,
                  const float *rstd, const float *dy, float *dx, float *dw) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * d, *gr = dy + r * d;
        float *dxr = dx + r * d;
        const float rs = rstd[r];
        float c;
        if (w) {
            float acc[VL] = {0}, s = 0.0f;
            int64_t k = 0;
            for (; k + VL <= d; k += VL)
                for (int u = 0; u < VL; u++) acc[u] += gr[k + u] * w[k + u] * xr[k + u];
            for (; k < d; k++) s += gr[k] * w[k] * xr[k];
            for (int u = 0; u < VL; u++) s += acc[u];
            c = s * rs * rs / (float)d; /* dx = r g - x r c, c = r^2 mean(g x) */
            for (k = 0; k < d; k++) dxr[k] = rs * (gr[k] * w[k]) - xr[k] * (rs * c);
        } else {
            c = dot(gr, xr, d) * rs * rs / (float)d;
            for (int64_t k = 0; k < d; k++) dxr[k] = rs * gr[k] - xr[k] * (rs * c);
        }
        if (dw)
            for (int64_t k = 0; k < d; k++) dw[k] += gr[k] * (xr[k] * rs);
    }
}
