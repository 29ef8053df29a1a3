/* attention.h: causal GQA attention over a contiguous KV cache, with the per-head
 * score outputs that calibration, H2O and SmallKV need.
 *
 *   q      (T, H, d)        queries of this block, already rotated
 *   kc, vc (Hkv, S_cap, d)  cache for one layer, fp32 or fp16 (kv_f16), or quantised rows
 *                           (k_bits / v_bits 8 or 4: skv_attn_row_bytes each), keys rotated;
 *                           keys 0 .. pos0+T-1 are valid (this block's K/V already written)
 *   out    (T, H, d)
 * Query row t sits at position pos0 + t and sees keys 0 .. pos0 + t.
 * Optional score outputs (NULL to skip), per query head h over keys k < pos0 + T:
 *   colsum  (H, S_cap): colsum[h][k] += sum over this block's rows t of A[t][k]
 *   lastrow (H, S_cap): lastrow[h][k] = A[T-1][k]   (the last query's attention row)
 * The kernel never materialises the (T x S) matrix for all heads at once. */
#ifndef SKV_ATTENTION_H
#define SKV_ATTENTION_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/args.h"


void skv_attention(float *out, const float *q, const void *kc, const void *vc,
                   const skv_attn_args *a);
void skv_attention_ref(float *out, const float *q, const void *kc, const void *vc,
                       const skv_attn_args *a);

/* skv_attention with a sliding window (attention_window.c): the query at position p sees keys
 * p - window < k <= p (window 0: all, exactly skv_attention). colsum / lastrow as there, at
 * their positions; lastrow entries before the last row's window are zero. */
void skv_attention_window(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a,
                          int window);

/* skv_attention inside an enclosing OpenMP parallel region: every thread of the team calls
 * it with the same arguments (q may be each thread's own copy of the same values), ws
 * included: one workspace shared by the team, of skv_attention_ws_floats(a, team size)
 * floats, 32-byte aligned. The work is shared by orphaned `omp for` loops that end in
 * barriers. Same results, bit for bit, as skv_attention. */
void skv_attention_team(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws);
/* Store d floats of src at element offset off of a cache (fp16 when f16, else fp32). */
void skv_kv_store(void *cache, bool f16, size_t off, const float *src, int d);
/* Store one cache row of d values at row: quantised to bits (8 / 4, kvquant.h), else fp16 /
 * fp32 as f16 says. */
void skv_kv_store_any(void *row, const float *src, int d, int bits, bool f16);
/* The same for a key row of KV head h with the layer's key normalisation norm (2, Hkv, d:
 * mu, then sigma; kvquant.h), which applies to quantised rows only; norm NULL: skv_kv_store_any */
void skv_kv_store_key(void *row, const float *src, const float *norm, int h, int Hkv, int d, int bits, bool f16);

/* Bytes of one K (v false) or V (v true) cache row, one token of one KV head. */
size_t skv_attn_row_bytes(const skv_attn_args *a, bool v);
/* Over a quantised cache (attention_q.c; skv_attention and skv_attention_team dispatch
 * there): the team form, its workspace, and the reference (dequantise, then
 * skv_attention_ref). */
void skv_attention_q_team(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws);
size_t skv_attention_q_ws_floats(const skv_attn_args *a, int nth);
void skv_attention_q_ref(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a);

/* Workspace floats for one call with nth threads; depends on T, H, d and pos0 + T only
 * (so a size computed with pos0 + T = S_cap serves every call up to that length). */
size_t skv_attention_ws_floats(const skv_attn_args *a, int nth);

#endif
