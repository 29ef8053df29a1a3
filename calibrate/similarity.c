/* similarity.c: all-pairs cosine (normalised rows, one dot product per pair) and top-K
 * Jaccard (K-bit sets per head, popcount of the intersection) between two head sets. */
#include "similarity.h"
#include "common/util.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int skv_sim_pack(const float *const *per_layer, int L, int H, int S_cap, int T, int sinks,
                 bool normalized, float *out) {
    if (L <= 0 || H <= 0 || T > S_cap || sinks < 0 || sinks >= T)
        return skv_error("similarity: bad pack shape (L=%d H=%d T=%d S_cap=%d sinks=%d)", L, H, T, S_cap, sinks);
    int n = T - sinks;
    for (int l = 0; l < L; l++) {
        if (!per_layer[l]) return skv_error("similarity: layer %d has no column sums", l);
        for (int h = 0; h < H; h++) {
            const float *src = per_layer[l] + (size_t)h * S_cap;   /* (S_cap) */
            float *dst = out + ((size_t)l * H + h) * n;             /* (n) */
            for (int k = 0; k < n; k++) {
                int key = sinks + k;
                dst[k] = normalized ? src[key] / (float)(T - key) : src[key];
            }
        }
    }
    return 0;
}

static int check_finite(const float *x, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (!isfinite(x[i])) return skv_error("similarity: non-finite score at element %zu", i);
    return 0;
}

/* rows of X (m, n) scaled to unit length in double; zero rows stay zero. */
static double *unit_rows(const float *X, int m, int n) {
    double *U = skv_malloc((size_t)m * n * sizeof(double), "unit rows");
    if (!U) return NULL;
    for (int i = 0; i < m; i++) {
        const float *x = X + (size_t)i * n;
        double s = 0;
        for (int k = 0; k < n; k++) s += (double)x[k] * x[k];
        double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;
        for (int k = 0; k < n; k++) U[(size_t)i * n + k] = x[k] * inv;
    }
    return U;
}

int skv_sim_cosine(const float *A, int na, const float *B, int nb, int n, double *out) {
    if (na <= 0 || nb <= 0 || n <= 0) return skv_error("similarity: empty cosine input");
    if (check_finite(A, (size_t)na * n) || check_finite(B, (size_t)nb * n)) return -1;
    double *UA = unit_rows(A, na, n), *UB = unit_rows(B, nb, n);
    if (!UA || !UB) { free(UA); free(UB); return -1; }
    /* out (na, nb) = UA (na, n) @ UB^T (n, nb) */
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < na; i++) {
        const double *a = UA + (size_t)i * n;
        for (int j = 0; j < nb; j++) {
            const double *b = UB + (size_t)j * n;
            /* four partial sums in a fixed order: vectorisable, still bit-reproducible */
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int k = 0;
            for (; k + 4 <= n; k += 4) {
                s0 += a[k] * b[k]; s1 += a[k + 1] * b[k + 1];
                s2 += a[k + 2] * b[k + 2]; s3 += a[k + 3] * b[k + 3];
            }
            for (; k < n; k++) s0 += a[k] * b[k];
            double s = (s0 + s1) + (s2 + s3);
            out[(size_t)i * nb + j] = s > 1 ? 1 : (s < -1 ? -1 : s);
        }
    }
    free(UA); free(UB);
    return 0;
}

typedef struct { float v; int i; } kv_pair;

static int cmp_desc(const void *pa, const void *pb) {
    const kv_pair *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

void skv_sim_topk(const float *x, int n, int K, int *idx) {
    kv_pair *p = malloc((size_t)n * sizeof *p);
    if (!p) {  /* tiny fallback: selection without a buffer */
        for (int r = 0; r < K; r++) {
            int best = -1;
            for (int k = 0; k < n; k++) {
                int used = 0;
                for (int q = 0; q < r; q++) used |= idx[q] == k;
                if (!used && (best < 0 || x[k] > x[best])) best = k;
            }
            idx[r] = best;
        }
        return;
    }
    for (int k = 0; k < n; k++) { p[k].v = x[k]; p[k].i = k; }
    qsort(p, (size_t)n, sizeof *p, cmp_desc);
    for (int r = 0; r < K; r++) idx[r] = p[r].i;
    free(p);
}

/* K-bit sets, words per head = ceil(n / 64): (m, words) */
static uint64_t *topk_bits(const float *X, int m, int n, int K, int words) {
    uint64_t *bits = skv_calloc((size_t)m * words, sizeof(uint64_t), "top-K bitsets");
    int *idx = skv_malloc((size_t)K * sizeof(int), "top-K indices");
    if (!bits || !idx) { free(bits); free(idx); return NULL; }
    for (int i = 0; i < m; i++) {
        skv_sim_topk(X + (size_t)i * n, n, K, idx);
        for (int r = 0; r < K; r++) bits[(size_t)i * words + idx[r] / 64] |= 1ull << (idx[r] % 64);
    }
    free(idx);
    return bits;
}

int skv_sim_jaccard(const float *A, int na, const float *B, int nb, int n, int K, double *out) {
    if (na <= 0 || nb <= 0 || n <= 0 || K <= 0) return skv_error("similarity: empty jaccard input (K=%d, n=%d)", K, n);
    if (check_finite(A, (size_t)na * n) || check_finite(B, (size_t)nb * n)) return -1;
    if (K > n) K = n;
    int words = (n + 63) / 64;
    uint64_t *BA = topk_bits(A, na, n, K, words), *BB = topk_bits(B, nb, n, K, words);
    if (!BA || !BB) { free(BA); free(BB); return -1; }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < na; i++) {
        for (int j = 0; j < nb; j++) {
            int inter = 0;
            for (int w = 0; w < words; w++)
                inter += __builtin_popcountll(BA[(size_t)i * words + w] & BB[(size_t)j * words + w]);
            out[(size_t)i * nb + j] = (double)inter / (double)(2 * K - inter);
        }
    }
    free(BA); free(BB);
    return 0;
}
