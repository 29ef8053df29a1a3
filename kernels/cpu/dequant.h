/* dequant.h: AVX2 row dequantisers (weights -> float), bit-exact twins of the scalar
 * reference skv_dequant_row (quant.c). Used to fill the prefill GEMM's packed weight
 * panels and by skv_weight_row (embedding lookup).
 *
 * Every type evaluates the same float expression as quant.c in the same order (no FMA
 * contraction), so the output is identical bit for bit:
 *   Q4_0 d*(q-8)   Q4_1 d*q + m   Q5_0 d*(q-16)   Q5_1 d*q + m   Q8_0 d*q
 *   Q4_K/Q5_K (d*sc)*q - dmin*m   Q6_K (d*sc)*(q-32)   F16 (F16C)   BF16 (<< 16)   F32 copy */
#ifndef SKV_DEQUANT_H
#define SKV_DEQUANT_H
#include <stdint.h>

/* One row of n weights of `type` -> dst (n floats). Types without an AVX2 path, and
 * invalid n, go to skv_dequant_row (which records the error and fills NaN). */
void skv_dequant_row_avx2(int type, const void *src, float *dst, int64_t n);

#endif
