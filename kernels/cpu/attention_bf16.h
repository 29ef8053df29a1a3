/* attention_bf16.h: the opt-in prefill attention in bf16 tile products (AMX-BF16), for long
 * prompts where attention is most of the time to first token.
 *
 * The default prefill attention gives every prompt row a decode step's bits (fp32 arithmetic
 * on the fp16 cache), which bounds a 4K-token prefill (docs/performance.md). This mode trades
 * those bits for speed: Q and the cached K and V rounded to bf16 (8 significand bits; an fp16
 * key has 11), Q K^T and P V as AMX tile products with fp32 accumulation, the softmax online in
 * fp32 (flash attention: no score row is kept). Results move within the tolerance that
 * tests/test_attention_bf16.c checks (against the plain reference below and the exact path).
 *
 * It takes a prefill's rows only where it can: mode SKV_PREFILL_ATTN_BF16, a CPU with AMX-BF16
 * and AVX512-BF16 (that Linux grants), an fp16 cache without quantised rows, d a multiple of
 * 32 up to 256, no colsum requested (H2O-style accumulated scores need every row's final
 * weights), and T >= SKV_ATTN_BF16_MIN_T (so speculative verify passes and batched decode rows,
 * which must equal decode steps, never take it). With lastrow requested the last row runs the
 * exact kernel. Everything else runs the exact kernel. */
#ifndef SKV_ATTENTION_BF16_H
#define SKV_ATTENTION_BF16_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/args.h"

enum { SKV_PREFILL_ATTN_EXACT = 0, SKV_PREFILL_ATTN_BF16 = 1 };
#define SKV_ATTN_BF16_MIN_T 128   /* above every verify pass (--draft K <= 63: K + 1 rows) */

/* process-wide, like the GEMM mode; default from env SKV_PREFILL_ATTN (exact | bf16) */
void skv_attention_set_prefill_mode(int mode);
int skv_attention_prefill_mode(void);
/* "exact" / "bf16"; -1 for any other name */
int skv_attention_prefill_mode_parse(const char *name);

/* rows 0 .. n-1 of this call that the bf16 kernel takes (0: none) */
int skv_attn_bf16_rows(const skv_attn_args *a);
/* workspace floats the bf16 kernel needs for a team of nth threads (0 when it takes no rows) */
size_t skv_attn_bf16_ws_floats(const skv_attn_args *a, int nth);
/* Rows 0 .. n-1 (n = skv_attn_bf16_rows(a) > 0) of out (T, H, d), inside an OpenMP parallel
 * region (every thread calls it; ends with a barrier). */
void skv_attn_bf16_team(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a,
                        int n, float *ws);
/* The plain reference of the same arithmetic: q, K, V rounded to bf16 (round to nearest even),
 * scores and softmax in fp32 over the whole row, the weights rounded to bf16 before P V, the
 * sum of the unrounded weights as the divisor. All T rows, no score outputs. */
void skv_attn_bf16_ref(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a);

#endif
