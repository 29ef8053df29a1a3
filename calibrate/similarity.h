/* similarity.h: head-to-head similarity metrics for calibration (method.md section 3).
 *
 * Inputs are per-head score vectors over the same n keys of one window (sinks already
 * dropped): A (na, n) for the LLM's heads, B (nb, n) for the SLM's heads, flat head index
 * layer * heads + head. Outputs are all-pairs matrices (na, nb) in double.
 * Every output element is computed by one thread in a fixed order, so results are
 * bit-for-bit reproducible regardless of the number of threads. */
#ifndef SKV_SIMILARITY_H
#define SKV_SIMILARITY_H
#include <stdbool.h>

/* Pack per-layer accumulated column sums into score vectors with the sinks dropped.
 * per_layer: [L] pointers to (H, S_cap); keys 0..T-1 valid. out: (L*H, T - sinks).
 * normalized: divide key k by the T - k query rows that could see it (causal prefill). */
int skv_sim_pack(const float *const *per_layer, int L, int H, int S_cap, int T, int sinks,
                 bool normalized, float *out);

/* Top-K key indices of x (n): largest first, ties broken towards the lower index. */
void skv_sim_topk(const float *x, int n, int K, int *idx);

/* cosine(A_i, B_j); a zero vector has cosine 0 with everything. Values clamped to [-1, 1]. */
int skv_sim_cosine(const float *A, int na, const float *B, int nb, int n, double *out);

/* Jaccard overlap |top_K(A_i) & top_K(B_j)| / |top_K(A_i) | top_K(B_j)|, K clamped to n. */
int skv_sim_jaccard(const float *A, int na, const float *B, int nb, int n, int K, double *out);

#endif
