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
 * bits in the scalar reference and the AVX2 path. Bytes of a row: skv_kvq_row_bytes.
 *
 * Key normalisation. A layer's keys share large per-channel offsets (Qwen2's key bias, outlier
 * channels) and channels of very different spread; per token, one channel then sets a group's
 * range and the 4-bit steps of the others are too coarse to rank tokens (KIVI quantises keys
 * per channel for this reason). So a quantised key cache may store, per KV head, the row
 * (k - mu) / sigma with a per-channel offset mu and scale sigma, and the attention scales the
 * query by sigma instead: q . k = (q * sigma) . ((k - mu) / sigma) + q . mu, and q . mu is
 * the same for every key of a query row, which the softmax ignores. So the probabilities are
 * those of the keys as written, up to the quantisation, whichever mu and sigma a cache uses;
 * they only have to stay fixed for the rows of the cache (a cache fits them once, on its
 * first block, skv_kvq_key_norm_fit). Values are not normalised (their error is averaged by
 * the attention weights). */
#ifndef SKV_KVQUANT_H
#define SKV_KVQUANT_H
#include <stddef.h>
#include <stdint.h>

#define SKV_KVQ_GROUP 32
/* rows a block needs for skv_kvq_key_norm_fit to fit; fewer give mu = 0, sigma = 1 */
#define SKV_KVQ_NORM_MIN_ROWS 16
/* the largest head size the key normalisation takes (its row buffer) */
#define SKV_KVQ_MAX_D 512

/* bytes of one quantised row of d values (bits 8 or 4), 0 for other bits or when d is not
 * a multiple of SKV_KVQ_GROUP */
size_t skv_kvq_row_bytes(int d, int bits);
/* dst (skv_kvq_row_bytes) <- the d values of src */
void skv_kvq_quantize_row(void *dst, const float *src, int d, int bits);
/* dst <- the d values of src normalised as (src - mu) / sigma per channel (clamped to +-3e4,
 * inside fp16's range); mu and sigma NULL: exactly skv_kvq_quantize_row (d at most
 * SKV_KVQ_MAX_D) */
void skv_kvq_quantize_key(void *dst, const float *src, const float *mu, const float *sigma, int d, int bits);
/* mu, sigma (d) <- the mean and the standard deviation of each channel over n rows of d
 * values, row r at rows + r * stride (sigma at least 1e-3 of the channels' mean sigma); n
 * below SKV_KVQ_NORM_MIN_ROWS, or rows without spread, give mu = 0 and sigma = 1 (the plain
 * rows) */
void skv_kvq_key_norm_fit(float *mu, float *sigma, const float *rows, int n, size_t stride, int d);
/* dst (d) <- the values a row stands for (AVX2) */
void skv_kvq_dequant_row(float *dst, const void *src, int d, int bits);
/* the same, one value at a time (the reference; equal bits) */
void skv_kvq_dequant_row_ref(float *dst, const void *src, int d, int bits);

#endif
