/* bootstrap.c: percentile bootstrap of a weighted mean (bootstrap.h). */
#include "bootstrap.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>

void skv_wilson_ci(int k, int n, double *lo, double *hi) {
    if (n < 1) { *lo = 0; *hi = 1; return; }
    const double z = 1.959963984540054, p = (double)k / n, z2n = z * z / n;
    const double c = (p + z2n / 2) / (1 + z2n), h = z * sqrt(p * (1 - p) / n + z2n / (4.0 * n)) / (1 + z2n);
    *lo = c - h < 0 ? 0 : c - h;
    *hi = c + h > 1 ? 1 : c + h;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double wmean(const double *x, const double *w, const int *idx, int n) {
    double sx = 0, sw = 0;
    for (int i = 0; i < n; i++) {
        const int k = idx ? idx[i] : i;
        const double wk = w ? w[k] : 1;
        sx += wk * x[k];
        sw += wk;
    }
    return sw > 0 ? sx / sw : 0;
}

int skv_bootstrap_ci(const double *x, const double *w, int n, int reps, double alpha, uint64_t seed,
                     double *lo, double *hi) {
    if (!x || n < 0 || reps < 10 || !(alpha > 0 && alpha < 1) || !lo || !hi)
        return skv_error("bootstrap: bad arguments (n %d, reps %d, alpha %g)", n, reps, alpha);
    if (n < 2) {
        *lo = *hi = n ? x[0] : 0;
        return 0;
    }
    double *est = skv_malloc((size_t)reps * sizeof(double), "bootstrap replicates");
    int *idx = skv_malloc((size_t)n * sizeof(int), "bootstrap draw");
    if (!est || !idx) { free(est); free(idx); return -1; }
    uint64_t s = seed;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n; i++) idx[i] = (int)(splitmix(&s) % (uint64_t)n);
        est[r] = wmean(x, w, idx, n);
    }
    qsort(est, (size_t)reps, sizeof(double), cmp_double);
    /* the alpha/2 and 1 - alpha/2 quantiles (nearest rank) */
    int a = (int)(alpha / 2 * reps), b = (int)((1 - alpha / 2) * reps);
    if (b >= reps) b = reps - 1;
    *lo = est[a];
    *hi = est[b];
    free(est);
    free(idx);
    return 0;
}
