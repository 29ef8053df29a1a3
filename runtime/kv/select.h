/* select.h: selection helpers shared by the KV policies: 1-D max pooling, reducing
 * per-query-head scores over a GQA group, per-lane score arrays; the top-k over positions
 * they all use is a kernel (kernels/cpu/topk.h, its CUDA twin kernels/cuda/topk.cu). */
#ifndef SKV_SELECT_H
#define SKV_SELECT_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/cpu/topk.h"

typedef enum { SKV_REDUCE_SUM = 0, SKV_REDUCE_MEAN = 1, SKV_REDUCE_MAX = 2 } skv_reduce;

/* out[i] = max over x[i-r .. i+r] within [0, n) (kernel 2r+1, padding r, like max_pool1d
 * with -inf padding). out and x must not alias. */
void skv_maxpool1d(float *out, const float *x, int n, int r);

/* out[k] = reduce over g rows of x (g rows with stride `stride`), k < n. */
void skv_reduce_group(float *out, const float *x, int g, size_t stride, int n, skv_reduce how);

/* Per-lane growable float arrays indexed by position (policy score state). */
typedef struct {
    int n_lanes, cap;
    float **s;           /* [n_lanes] -> (cap) */
} skv_lanescore;

int skv_lanescore_init(skv_lanescore *ls, int n_lanes);
/* Ensure capacity for positions < n; new entries are 0. -1 + error. */
int skv_lanescore_reserve(skv_lanescore *ls, int n);
int skv_lanescore_copy(skv_lanescore *dst, const skv_lanescore *src);
void skv_lanescore_free(skv_lanescore *ls);

#endif
