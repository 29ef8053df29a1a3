/* topk.h: top-k selection over candidate positions by score (CPU reference; the device
 * twin is skv_cuda_topk in kernels/cuda/topk.cu, tested against it in tests/test_cuda.c). */
#ifndef SKV_TOPK_H
#define SKV_TOPK_H

/* Pick the k candidates with the highest score[cand[i]] (ties: the later position wins),
 * reordering cand (n entries) in place so the chosen ones are cand[0..k). Expected O(n).
 * Returns min(k, n). The chosen ones are not sorted. */
int skv_topk(const float *score, int *cand, int n, int k);
/* Sort positions ascending (small helper for deterministic outputs). */
void skv_sort_ints(int *a, int n);

#endif
