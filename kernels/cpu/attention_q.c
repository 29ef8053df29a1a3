/* attention_q.c: causal GQA attention over a contiguous cache of quantised rows (q8 / q4,
 * kernels/cpu/kvquant.h; keys and values each quantised or not, a->k_bits / a->v_bits), with
 * the same contract, shapes and score outputs as skv_attention (attention.h); skv_attention
 * and skv_attention_team come here when either is set.
 *
 * One task = one KV head and one query row (or, with colsum, one KV head and all its rows
 * in order, so colsum is race-free): key rows are dequantised 8 at a time into an fp32 tile
 * and used there by the grp = H / Hkv query heads of the KV head (8 scores per head reduced
 * together, skv_dot8_keys), then softmax per head, then value rows are dequantised 8 at a
 * time and added into each head's output 32 columns at a time, in registers over the tile. The
 * arithmetic of a task does not depend on the thread running it, so the results are the
 * same for any thread count. Reference: skv_attention_q_ref (dequantise the cache, then
 * skv_attention_ref). With a->k_norm the key rows are normalised (kvquant.h): each query
 * head's q is scaled by its KV head's sigma once, into the workspace, and dots the rows as
 * stored. Workspace per thread: grp score rows of S + 8 floats, a tile of 8 rows of d floats
 * and grp scaled query rows. */
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
    /* score rows, a tile of QT = 8 rows, the scaled queries */
    return (grp * (S + 8) + 8 * (size_t)a->d + grp * (size_t)a->d + 15) & ~(size_t)15;
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
#define QT 8   /* keys dequantised together into a tile */

static void q_rows(float *out, const float *q, const uint8_t *K, const uint8_t *V, const skv_attn_args *a, int kvh,
                   int t, float *ws) {
    const int H = a->H, d = a->d, grp = a->H / a->Hkv;
    const size_t rk = skv_attn_row_bytes(a, false), rv = skv_attn_row_bytes(a, true), S = (size_t)a->pos0 + (size_t)a->T;
    const float scale = 1.0f / sqrtf((float)d);
    float *tile = ws + (size_t)grp * (S + 8);   /* (QT, d) */
    const int n = a->pos0 + t + 1, n8 = n & ~(QT - 1);
    const float *qh = q + ((size_t)t * H + (size_t)kvh * grp) * d;   /* (grp, d) */
    if (a->k_norm && a->k_bits) {   /* q * sigma against the normalised rows */
        const float *sig = a->k_norm + ((size_t)a->Hkv + kvh) * d;
        float *qs = tile + (size_t)QT * d;
        for (int g = 0; g < grp; g++)
            for (int i = 0; i < d; i++) qs[(size_t)g * d + i] = qh[(size_t)g * d + i] * sig[i];
        qh = qs;
    }
    float *oh = out + ((size_t)t * H + (size_t)kvh * grp) * d;
    /* scores: QT keys at a time dequantised once, each head's 8 dots reduced together */
    const __m256 vsc = _mm256_set1_ps(scale);
    for (int k = 0; k < n8; k += QT) {
        for (int j = 0; j < QT; j++) load_row(tile + (size_t)j * d, K + (size_t)(k + j) * rk, d, a->k_bits, a->kv_f16);
        for (int g = 0; g < grp; g++)
            _mm256_storeu_ps(ws + (size_t)g * (S + 8) + k, _mm256_mul_ps(skv_dot8_keys(qh + (size_t)g * d, tile, false, 0, d), vsc));
    }
    for (int k = n8; k < n; k++) {
        load_row(tile, K + (size_t)k * rk, d, a->k_bits, a->kv_f16);
        for (int g = 0; g < grp; g++) ws[(size_t)g * (S + 8) + k] = dot_row(qh + (size_t)g * d, tile, d) * scale;
    }
    for (int g = 0; g < grp; g++) {
        float *p = ws + (size_t)g * (S + 8);
        const float inv = 1.0f / skv_exp_sum(p, n, skv_max_row(p, n));
        for (int k = 0; k < n; k++) p[k] *= inv;
        memset(oh + (size_t)g * d, 0, (size_t)d * sizeof(float));
    }
    /* out += p V: a tile of values dequantised once; per head 32 columns in registers over
     * the tile's keys */
    for (int k = 0; k < n; k += QT) {
        const int nk = n - k < QT ? n - k : QT;
        for (int j = 0; j < nk; j++) load_row(tile + (size_t)j * d, V + (size_t)(k + j) * rv, d, a->v_bits, a->kv_f16);
        for (int g = 0; g < grp; g++) {
            const float *p = ws + (size_t)g * (S + 8) + k;
            float *o = oh + (size_t)g * d;
            int i = 0;
            for (; i + 32 <= d; i += 32) {
                __m256 c0 = _mm256_loadu_ps(o + i), c1 = _mm256_loadu_ps(o + i + 8);
                __m256 c2 = _mm256_loadu_ps(o + i + 16), c3 = _mm256_loadu_ps(o + i + 24);
                for (int j = 0; j < nk; j++) {
                    const __m256 pk = _mm256_broadcast_ss(p + j);
                    const float *v = tile + (size_t)j * d + i;
                    c0 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(v), c0);
                    c1 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(v + 8), c1);
                    c2 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(v + 16), c2);
                    c3 = _mm256_fmadd_ps(pk, _mm256_loadu_ps(v + 24), c3);
                }
                _mm256_storeu_ps(o + i, c0); _mm256_storeu_ps(o + i + 8, c1);
                _mm256_storeu_ps(o + i + 16, c2); _mm256_storeu_ps(o + i + 24, c3);
            }
            for (; i < d; i += 8) {
                __m256 c = _mm256_loadu_ps(o + i);
                for (int j = 0; j < nk; j++) c = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_loadu_ps(tile + (size_t)j * d + i), c);
                _mm256_storeu_ps(o + i, c);
            }
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
            skv_kv_store_key(kr, a->knew + (size_t)h * d, a->k_norm, h, Hkv, d, a->k_bits, a->kv_f16);
            skv_kv_store_any(vr, a->vnew + (size_t)h * d, d, a->v_bits, a->kv_f16);
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
                if (a->k_bits) {
                    skv_kvq_dequant_row_ref(kf + row * d, kr, d, a->k_bits);
                    if (a->k_norm)   /* back to the keys as written: k = mu + sigma * row */
                        for (int i = 0; i < d; i++)
                            kf[row * d + i] = a->k_norm[(size_t)h * d + i] + a->k_norm[((size_t)a->Hkv + h) * d + i] * kf[row * d + i];
                }
                else for (int i = 0; i < d; i++) kf[row * d + i] = a->kv_f16 ? skv_f16_to_f32(((const uint16_t *)kr)[i]) : ((const float *)kr)[i];
                if (a->v_bits) skv_kvq_dequant_row_ref(vf + row * d, vr, d, a->v_bits);
                else for (int i = 0; i < d; i++) vf[row * d + i] = a->kv_f16 ? skv_f16_to_f32(((const uint16_t *)vr)[i]) : ((const float *)vr)[i];
            }
        skv_attn_args f = *a;
        f.k_bits = f.v_bits = 0;
        f.kv_f16 = false;
        f.k_norm = NULL;
        skv_attention_ref(out, q, kf, vf, &f);
    }
    free(kf);
    free(vf);
}
