/* kvquant.h: quantised rows of a contiguous KV cache (the SLM's cache, which only ranks
 * tokens and so needs far less precision than generation does).
 *
 * A row is one token's K (or V) for one KV head: d values (d a multiple of 32), stored as
 * d / 32 groups of 32 consecutive values, each group with its own scale(s), in place:
 *   q8  (8 bits)  per group: fp16 scale s, int8 q[32];          x = s * q       34 bytes
 *                 s = max|x| / 127, q = round(x / s)   (symmetric, as llama.cpp's q8_0)
 *   q4  (4 bits)  per group: fp16 scale s, fp16 min m, 16 bytes; x = m + s * u  20 bytes
 *                 u in 0..15, s = (max - min) / 15, u = round((x - m) / s) (asymmetric,
 *                 as KIVI's groups); byte i holds u[i] in its low nibble and u[16 + i] in
 *                 its high nibble
 * Per token and group (not per channel as KIVI quantises keys): every row stands alone, so
 * a row is written once when its token arrives, a fork copies rows, and speculative
 * decoding's rollback just forgets rows; no window of unquantised recent tokens is needed.
 * The dequantised value is exactly (float)q * s (q8) or fmaf((float)u, s, m) (q4), the same
 * bits in the scalar reference and the AVX2 path. Bytes of a row: skv_kvq_row_bytes. */
#ifndef SKV_KVQUANT_H
#define SKV_KVQUANT_H
#include <stddef.h>
#include <stdint.h>

#define SKV_KVQ_GROUP 32

/* bytes of one quantised row of d values (bits 8 or 4), 0 for other bits or when d is not
 * a multiple of SKV_KVQ_GROUP */
size_t skv_kvq_row_bytes(int d, int bits);
/* dst (skv_kvq_row_bytes) <- the d values of src */
void skv_kvq_quantize_row(void *dst, const float *src, int d, int bits);
/* dst (d) <- the values a row stands for (AVX2) */
void skv_kvq_dequant_row(float *dst, const void *src, int d, int bits);
/* the same, one value at a time (the reference; equal bits) */
void skv_kvq_dequant_row_ref(float *dst, const void *src, int d, int bits);

#endif
