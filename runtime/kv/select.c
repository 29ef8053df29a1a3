/* select.c: pooling, group reduction and per-lane score arrays (see select.h). */
#include "select.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
