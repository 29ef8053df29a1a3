/* attention_q.c: causal GQA attention over a contiguous cache of quantised rows (q8 / q4,
 * kernels/cpu/kvquant.h; keys and values each quantised or not, a->k_bits / a->v_bits), with
 * the same contract, shapes and score outputs as skv_attention (attention.h); skv_attention
 * and skv_attention_team come here when either is set.
 *
 * One task = one KV head and one query row (or, with colsum, one KV head and all its rows
 * in order, so colsum is race-free): each key row is dequantised once into an fp32 buffer
 * and used there by the grp = H / Hkv query heads of the KV head (scores), then softmax per
 * head, then each value row is dequantised once and added into the grp outputs. The
 * arithmetic of a task does not depend on the thread running it, so the results are the
 * same for any thread count. Reference: skv_attention_q_ref (dequantise the cache, then
 * skv_attention_ref). Workspace per thread: grp score rows of S + 8 floats and two rows of
 * d floats. */
#include "attention.h"
#include "kvquant.h"
#include "simd_math.h"
#include "common/util.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t per_thread_floats(const skv_attn_args *a) {
    const size_t S = (size_t)a->pos0 + (size_t)a->T, grp = (size_t)(a->H / a->Hkv);
    return (grp * (S + 8) + 2 * (size_t)a->d + 15) & ~(size_t)15;
}

size_t skv_attention_q_ws_floats(const skv_attn_args *a, int nth) { return (size_t)nth * per_thread_floats(a); }

/* the d values of a K or V row as floats: quantised (bits), else fp16 / fp32 */
static inline void load_row(float *dst, const uint8_t *src, int d, int bits, bool f16) {
    if (bits) skv_kvq_dequant_row(dst, src, d, bits);
    else if (f16)
        for (int i = 0; i < d; i += 8) _mm256_storeu_ps(dst + i, skv_load8(src, true, (size_t)i));
    else memcpy(dst, src, (size_t)d * sizeof(float));
}

static inline float dot_row(const float *q, const float *k, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
    return skv_hsum8(acc);
}

/* rows t of the KV head kvh: its grp query heads' outputs and score rows */
static void q_rows(float *out, const float *q, const uint8_t *K, const uint8_t *V, const skv_attn_args *a, int kvh,
                   int t, float *ws) {
    const int H = a->H, d = a->d, grp = a->H / a->Hkv;
    const size_t rk = skv_attn_row_bytes(a, false), rv = skv_attn_row_bytes(a, true), S = (size_t)a->pos0 + (size_t)a->T;
    const float scale = 1.0f / sqrtf((float)d);
    float *kb = ws + (size_t)grp * (S + 8), *vb = kb + d;
    const int n = a->pos0 + t + 1;
    for (int k = 0; k < n; k++) {
        load_row(kb, K + (size_t)k * rk, d, a->k_bits, a->kv_f16);
        for (int g = 0; g < grp; g++)
            ws[(size_t)g * (S + 8) + k] = dot_row(q + ((size_t)t * H + kvh * grp + g) * d, kb, d) * scale;
    }
    for (int g = 0; g < grp; g++) {
        float *p = ws + (size_t)g * (S + 8);
        const float inv = 1.0f / skv_exp_sum(p, n, skv_max_row(p, n));
        for (int k = 0; k < n; k++) p[k] *= inv;
        memset(out + ((size_t)t * H + kvh * grp + g) * d, 0, (size_t)d * sizeof(float));
    }
    for (int k = 0; k < n; k++) {
        load_row(vb, V + (size_t)k * rv, d, a->v_bits, a->kv_f16);
        for (int g = 0; g < grp; g++) {
            float *o = out + ((size_t)t * H + kvh * grp + g) * d;
            const __m256 pk = _mm256_set1_ps(ws[(size_t)g * (S + 8) + k]);
            for (int i = 0; i < d; i += 8)
                _mm256_storeu_ps(o + i, _mm256_fmadd_ps(pk, _mm256_loadu_ps(vb + i), _mm256_loadu_ps(o + i)));
        }
    }
    for (int g = 0; g < grp; g++) {
        const int h = kvh * grp + g;
        const float *p = ws + (size_t)g * (S + 8);
        if (a->colsum) {
            float *cs = a->colsum + (size_t)h * a->S_cap;
            for (int k = 0; k < n; k++) cs[k] += p[k];
        }
        if (a->lastrow && t == a->T - 1) memcpy(a->lastrow + (size_t)h * a->S_cap, p, (size_t)n * sizeof(float));
    }
}

void skv_attention_q_team(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws) {
    const int T = a->T, Hkv = a->Hkv, d = a->d;
    const size_t rk = skv_attn_row_bytes(a, false), rv = skv_attn_row_bytes(a, true);
    const size_t head_k = (size_t)a->S_cap * rk, head_v = (size_t)a->S_cap * rv;
    if (a->knew) {
        #pragma omp single
        for (int h = 0; h < Hkv; h++) {
            uint8_t *kr = (uint8_t *)kc + (size_t)h * head_k + (size_t)a->pos0 * rk;
            uint8_t *vr = (uint8_t *)vc + (size_t)h * head_v + (size_t)a->pos0 * rv;
            if (a->k_bits) skv_kvq_quantize_row(kr, a->knew + (size_t)h * d, d, a->k_bits);
            else skv_kv_store(kr, a->kv_f16, 0, a->knew + (size_t)h * d, d);
            if (a->v_bits) skv_kvq_quantize_row(vr, a->vnew + (size_t)h * d, d, a->v_bits);
            else skv_kv_store(vr, a->kv_f16, 0, a->vnew + (size_t)h * d, d);
        }
    }
    float *mine = ws + (size_t)omp_get_thread_num() * per_thread_floats(a);
    const bool whole = a->colsum != NULL;   /* a KV head's rows in order on one thread */
    const int64_t tasks = whole ? Hkv : (int64_t)Hkv * T;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int kvh = (int)(whole ? task : task / T);
        const int tb = whole ? 0 : (int)(task % T), te = whole ? T : tb + 1;
        const uint8_t *K = (const uint8_t *)kc + (size_t)kvh * head_k, *V = (const uint8_t *)vc + (size_t)kvh * head_v;
        for (int t = tb; t < te; t++) q_rows(out, q, K, V, a, kvh, t, mine);
    }
}

void skv_attention_q_ref(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a) {
    const int d = a->d, n = a->pos0 + a->T;
    const size_t rk = skv_attn_row_bytes(a, false), rv = skv_attn_row_bytes(a, true);
    float *kf = skv_malloc((size_t)a->Hkv * a->S_cap * d * sizeof(float), "dequantised keys");
    float *vf = skv_malloc((size_t)a->Hkv * a->S_cap * d * sizeof(float), "dequantised values");
    if (kf && vf) {
        for (int h = 0; h < a->Hkv; h++)
            for (int k = 0; k < n; k++) {
                const size_t row = (size_t)h * a->S_cap + k;
                const uint8_t *kr = (const uint8_t *)kc + row * rk, *vr = (const uint8_t *)vc + row * rv;
                if (a->k_bits) skv_kvq_dequant_row_ref(kf + row * d, kr, d, a->k_bits);
                else for (int i = 0; i < d; i++) kf[row * d + i] = a->kv_f16 ? skv_f16_to_f32(((const uint16_t *)kr)[i]) : ((const float *)kr)[i];
                if (a->v_bits) skv_kvq_dequant_row_ref(vf + row * d, vr, d, a->v_bits);
                else for (int i = 0; i < d; i++) vf[row * d + i] = a->kv_f16 ? skv_f16_to_f32(((const uint16_t *)vr)[i]) : ((const float *)vr)[i];
            }
        skv_attn_args f = *a;
        f.k_bits = f.v_bits = 0;
        f.kv_f16 = false;
        skv_attention_ref(out, q, kf, vf, &f);
    }
    free(kf);
    free(vf);
}
