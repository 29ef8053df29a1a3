/* kvquant.c: quantising and dequantising KV rows in groups of 32 (formats: kvquant.h). */
#include "kvquant.h"
#include "common/util.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

size_t skv_kvq_row_bytes(int d, int bits) {
    if (d <= 0 || d % SKV_KVQ_GROUP) return 0;
    const size_t groups = (size_t)d / SKV_KVQ_GROUP;
    return bits == 8 ? groups * (2 + SKV_KVQ_GROUP) : bits == 4 ? groups * (4 + SKV_KVQ_GROUP / 2) : 0;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

void skv_kvq_quantize_row(void *dst, const float *src, int d, int bits) {
    uint8_t *o = dst;
    for (int g0 = 0; g0 < d; g0 += SKV_KVQ_GROUP) {
        const float *x = src + g0;
        if (bits == 8) {
            float amax = 0.0f;
            for (int i = 0; i < SKV_KVQ_GROUP; i++) amax = fmaxf(amax, fabsf(x[i]));
            /* the scale as stored (fp16), so that q * s is as close to x as it can be */
            const uint16_t sh = skv_f32_to_f16(amax / 127.0f);
            const float s = skv_f16_to_f32(sh), inv = s > 0.0f ? 1.0f / s : 0.0f;
            put16(o, sh);
            int8_t *q = (int8_t *)(o + 2);
            for (int i = 0; i < SKV_KVQ_GROUP; i++) {
                float r = roundf(x[i] * inv);
                q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
            }
            o += 2 + SKV_KVQ_GROUP;
        } else {
            float mn = x[0], mx = x[0];
            for (int i = 1; i < SKV_KVQ_GROUP; i++) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
            const uint16_t mh = skv_f32_to_f16(mn);
            const float m = skv_f16_to_f32(mh);   /* may round above mn: u clamps at 0 */
            const uint16_t sh = skv_f32_to_f16((mx - m) / 15.0f);
            const float s = skv_f16_to_f32(sh), inv = s > 0.0f ? 1.0f / s : 0.0f;
            put16(o, sh);
            put16(o + 2, mh);
            uint8_t *u = o + 4;
            for (int i = 0; i < SKV_KVQ_GROUP / 2; i++) {
                float lo = roundf((x[i] - m) * inv), hi = roundf((x[i + 16] - m) * inv);
                lo = lo < 0.0f ? 0.0f : lo > 15.0f ? 15.0f : lo;
                hi = hi < 0.0f ? 0.0f : hi > 15.0f ? 15.0f : hi;
                u[i] = (uint8_t)((int)lo | ((int)hi << 4));
            }
            o += 4 + SKV_KVQ_GROUP / 2;
        }
    }
}

void skv_kvq_quantize_key(void *dst, const float *src, const float *mu, const float *sigma, int d, int bits) {
    if (!mu) {
        skv_kvq_quantize_row(dst, src, d, bits);
        return;
    }
    float x[SKV_KVQ_MAX_D];
    for (int i = 0; i < d; i++) {   /* within fp16's range, where the group scales live */
        const float v = (src[i] - mu[i]) / sigma[i];
        x[i] = v > 3e4f ? 3e4f : v < -3e4f ? -3e4f : v;
    }
    skv_kvq_quantize_row(dst, x, d, bits);
}

void skv_kvq_key_norm_fit(float *mu, float *sigma, const float *rows, int n, size_t stride, int d) {
    if (n < SKV_KVQ_NORM_MIN_ROWS) {
        for (int i = 0; i < d; i++) { mu[i] = 0.0f; sigma[i] = 1.0f; }
        return;
    }
    double mean_sigma = 0;
    for (int i = 0; i < d; i++) {
        double s = 0, ss = 0;
        for (int r = 0; r < n; r++) s += rows[(size_t)r * stride + i];
        const double m = s / n;
        for (int r = 0; r < n; r++) {
            const double x = rows[(size_t)r * stride + i] - m;
            ss += x * x;
        }
        mu[i] = (float)m;
        sigma[i] = (float)sqrt(ss / n);
        mean_sigma += sigma[i];
    }
    const float lo = (float)(1e-3 * mean_sigma / d);   /* a channel that hardly varies must not blow up */
    if (!(lo > 0.0f) || !isfinite(lo)) {               /* no spread at all (or not finite): plain rows */
        for (int i = 0; i < d; i++) { mu[i] = 0.0f; sigma[i] = 1.0f; }
        return;
    }
    for (int i = 0; i < d; i++)
        if (!(sigma[i] >= lo)) sigma[i] = lo;
}

void skv_kvq_dequant_row_ref(float *dst, const void *src, int d, int bits) {
    const uint8_t *p = src;
    for (int g0 = 0; g0 < d; g0 += SKV_KVQ_GROUP) {
        const float s = skv_f16_to_f32(get16(p));
        if (bits == 8) {
            const int8_t *q = (const int8_t *)(p + 2);
            for (int i = 0; i < SKV_KVQ_GROUP; i++) dst[g0 + i] = (float)q[i] * s;
            p += 2 + SKV_KVQ_GROUP;
        } else {
            const float m = skv_f16_to_f32(get16(p + 2));
            const uint8_t *u = p + 4;
            for (int i = 0; i < SKV_KVQ_GROUP / 2; i++) {
                dst[g0 + i] = fmaf((float)(u[i] & 15), s, m);
                dst[g0 + 16 + i] = fmaf((float)(u[i] >> 4), s, m);
            }
            p += 4 + SKV_KVQ_GROUP / 2;
        }
    }
}

/* fp16 -> fp32 of one scale with F16C (the same value as skv_f16_to_f32) */
static inline float h2f(const uint8_t *p) { return _cvtsh_ss(get16(p)); }

void skv_kvq_dequant_row(float *dst, const void *src, int d, int bits) {
    const uint8_t *p = src;
    if (bits == 8) {
        for (int g0 = 0; g0 < d; g0 += SKV_KVQ_GROUP, p += 2 + SKV_KVQ_GROUP) {
            const __m256 s = _mm256_set1_ps(h2f(p));
            for (int j = 0; j < 4; j++) {
                const __m128i q8 = _mm_loadl_epi64((const __m128i *)(p + 2 + 8 * j));
                _mm256_storeu_ps(dst + g0 + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), s));
            }
        }
    } else {
        const __m128i lo4 = _mm_set1_epi8(15);
        for (int g0 = 0; g0 < d; g0 += SKV_KVQ_GROUP, p += 4 + SKV_KVQ_GROUP / 2) {
            const __m256 s = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(h2f(p + 2));
            const __m128i b = _mm_loadu_si128((const __m128i *)(p + 4));
            const __m128i lo = _mm_and_si128(b, lo4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), lo4);
            const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(dst + g0 + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[j])), s, m));
        }
    }
}
