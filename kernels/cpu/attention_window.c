/* attention_window.c: causal attention limited to a sliding window (Mistral, Gemma 3's local
 * layers), on top of skv_attention: the rows whose window still starts at key 0 run as one
 * block, each later row alone over its window (the cache pointers moved to the window's first
 * key). Used by the forward pass's own cache (runtime/engine/forward.c) and the compressed-cache
 * session's exact prefill (runtime/session/session.c). */
#include "attention.h"
#include <stdint.h>
#include <string.h>

/* Causal attention over a contiguous cache, limited to a sliding window
 * (key k visible to the query at p when p - window < k <= p). The rows that see the whole
 * prefix run as one block; each later row runs alone over its window (the cache pointers
 * moved to the window's first key; colsum / lastrow at their positions, the last row's
 * entries before its window zero). */
void skv_attention_window(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a0, int window) {
    const int T = a0->T, H = a0->H, d = a0->d;
    if (!window || a0->pos0 + T <= window) { skv_attention(out, q, kc, vc, a0); return; }
    int t0 = 0;
    if (a0->pos0 < window) {   /* rows at positions < window see keys from 0 */
        skv_attn_args a = *a0;
        a.T = t0 = window - a0->pos0;
        a.lastrow = NULL;
        skv_attention(out, q, kc, vc, &a);
    }
    const size_t rk = skv_attn_row_bytes(a0, false), rv = skv_attn_row_bytes(a0, true);
    for (int t = t0; t < T; t++) {
        const int p = a0->pos0 + t, start = p - window + 1;
        skv_attn_args a = *a0;
        a.T = 1;
        a.pos0 = p - start;
        a.colsum = a0->colsum ? a0->colsum + start : NULL;
        a.lastrow = a0->lastrow && t == T - 1 ? a0->lastrow + start : NULL;
        if (a.lastrow)
            for (int h = 0; h < H; h++) memset(a0->lastrow + (size_t)h * a0->S_cap, 0, (size_t)start * sizeof(float));
        skv_attention(out + (size_t)t * H * d, q + (size_t)t * H * d, (const uint8_t *)kc + (size_t)start * rk,
                      (const uint8_t *)vc + (size_t)start * rv, &a);
    }
}

