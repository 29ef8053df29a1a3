/* select.c: top-k, pooling, group reduction and per-lane score arrays (see select.h). */
#include "select.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a ranks before b: higher score, then later position */
static inline bool before(const float *s, int a, int b) {
    return s[a] > s[b] || (s[a] == s[b] && a > b);
}

static inline void swp(int *a, int i, int j) { int t = a[i]; a[i] = a[j]; a[j] = t; }

int skv_topk(const float *score, int *cand, int n, int k) {
    if (k <= 0) return 0;
    if (k >= n) return n;
    /* quickselect: afterwards cand[0..k) are the k best */
    int lo = 0, hi = n - 1;
    unsigned seed = 2463534242u ^ (unsigned)n;
    while (lo < hi) {
        seed ^= seed << 13; seed ^= seed >> 17; seed ^= seed << 5;
        int piv = cand[lo + (int)(seed % (unsigned)(hi - lo + 1))];
        /* three-way partition: [lo, lt) before piv, [lt, gt] == piv, (gt, hi] after */
        int lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            if (cand[i] == piv) i++;
            else if (before(score, cand[i], piv)) swp(cand, lt++, i++);
            else swp(cand, i, gt--);
        }
        /* piv sits in [lt, gt] (it is unique, so lt == gt) */
        if (k <= lt) hi = lt - 1;
        else if (k > gt + 1) lo = gt + 1;
        else break;
    }
    return k;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
void skv_sort_ints(int *a, int n) { if (n > 1) qsort(a, (size_t)n, sizeof(int), cmp_int); }

void skv_maxpool1d(float *out, const float *x, int n, int r) {
    for (int i = 0; i < n; i++) {
        int a = i - r < 0 ? 0 : i - r, b = i + r >= n ? n - 1 : i + r;
        float m = -INFINITY;
        for (int j = a; j <= b; j++) m = x[j] > m ? x[j] : m;
        out[i] = m;
    }
}

void skv_reduce_group(float *out, const float *x, int g, size_t stride, int n, skv_reduce how) {
    for (int k = 0; k < n; k++) out[k] = x[k];
    for (int h = 1; h < g; h++) {
        const float *row = x + (size_t)h * stride;
        if (how == SKV_REDUCE_MAX)
            for (int k = 0; k < n; k++) out[k] = row[k] > out[k] ? row[k] : out[k];
        else
            for (int k = 0; k < n; k++) out[k] += row[k];
    }
    if (how == SKV_REDUCE_MEAN && g > 1)
        for (int k = 0; k < n; k++) out[k] /= (float)g;
}

int skv_lanescore_init(skv_lanescore *ls, int n_lanes) {
    memset(ls, 0, sizeof *ls);
    ls->s = skv_calloc((size_t)n_lanes, sizeof(float *), "lane scores");
    if (!ls->s) return -1;
    ls->n_lanes = n_lanes;
    return 0;
}

int skv_lanescore_reserve(skv_lanescore *ls, int n) {
    if (n <= ls->cap) return 0;
    int cap = ls->cap ? ls->cap : 256;
    while (cap < n) cap *= 2;
    for (int j = 0; j < ls->n_lanes; j++) {
        float *p = realloc(ls->s[j], (size_t)cap * sizeof(float));
        if (!p) return skv_error("out of memory growing lane scores to %d positions", cap);
        memset(p + ls->cap, 0, (size_t)(cap - ls->cap) * sizeof(float));
        ls->s[j] = p;
    }
    ls->cap = cap;
    return 0;
}

int skv_lanescore_copy(skv_lanescore *dst, const skv_lanescore *src) {
    if (skv_lanescore_init(dst, src->n_lanes)) return -1;
    if (skv_lanescore_reserve(dst, src->cap)) { skv_lanescore_free(dst); return -1; }
    for (int j = 0; j < src->n_lanes; j++)
        if (src->cap) memcpy(dst->s[j], src->s[j], (size_t)src->cap * sizeof(float));
    return 0;
}

void skv_lanescore_free(skv_lanescore *ls) {
    if (ls->s)
        for (int j = 0; j < ls->n_lanes; j++) free(ls->s[j]);
    free(ls->s);
    memset(ls, 0, sizeof *ls);
}
