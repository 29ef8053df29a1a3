/* quant.h: the scalar reference (de)quantisers of the CPU backend, one row at a time; the
 * types and block layouts they read are in kernels/types.h. */
#ifndef SKV_QUANT_H
#define SKV_QUANT_H
#include "kernels/types.h"

/* Scalar reference dequantisers: one row of n weights -> float. */
void skv_dequant_row(int type, const void *src, float *dst, int64_t n);

/* Scalar reference quantisers (used by tests and by the activation path):
 * float row -> blocks. Implemented for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K, F16, BF16, F32
 * (k-quant weight quantisers are optional and may be simple, tests build k-quant blocks).
 * quant.c also has simple Q4_K, Q5_K, Q6_K quantisers (max-based scales, for tests). */
void skv_quant_row(int type, const float *src, void *dst, int64_t n);

#endif
