/* simd_math.h: AVX2 + FMA pieces shared by the CPU kernels (internal): horizontal sums and
 * max of 8 lanes, 8 floats from an fp16 or fp32 row, exp of 8 floats, and the two halves of
 * a softmax row that the attention kernels (attention.c, compensate.c) share: the dot
 * products of one query with 8 keys, and exp-and-sum of a score row. One copy of each, so
 * the kernels that must agree bit for bit use the same instructions in the same order. */
#ifndef SKV_SIMD_MATH_H
#define SKV_SIMD_MATH_H
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>

/* horizontal sum of 8 floats / 8 int32 */
static inline float skv_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline int skv_hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
/* horizontal max of 8 floats */
static inline float skv_hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

/* 8 floats at element i of a row stored as fp16 (F16C) or fp32 */
static inline __m256 skv_load8(const void *c, bool f16, size_t i) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)c + i)))
               : _mm256_loadu_ps((const float *)c + i);
}

/* exp(x) for 8 floats, x <= 0 typical; Cephes expf polynomial on x - n ln2. */
static inline __m256 skv_exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* skv_exp8 at 16 lanes, the same polynomial (for AVX-512 kernels: callers compile with avx512f) */
static inline __attribute__((target("avx512f"))) __m512 skv_exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), _mm512_set1_ps(-87.3365f));
    const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* q . K[k + j] for j = 0..7 over d (a multiple of 8) values, rows d apart: 8 accumulators
 * over d, reduced by a transpose-add (lane j = key k + j). Unscaled. */
static inline __attribute__((always_inline)) __m256 skv_dot8_keys(const float *q, const void *K, bool f16, size_t k, int d) {
    __m256 c[8];
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) c[j] = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
        const __m256 qi = _mm256_loadu_ps(q + i);
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
            c[j] = _mm256_fmadd_ps(qi, skv_load8(K, f16, (k + (size_t)j) * (size_t)d + (size_t)i), c[j]);
    }
    __m256 t0 = _mm256_hadd_ps(c[0], c[1]), t1 = _mm256_hadd_ps(c[2], c[3]);
    __m256 t2 = _mm256_hadd_ps(c[4], c[5]), t3 = _mm256_hadd_ps(c[6], c[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* max of p[0..n-1] (8 at a time, then the tail) */
static inline float skv_max_row(const float *p, int n) {
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int k = 0;
    for (; k + 8 <= n; k += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(p + k));
    float mx = skv_hmax8(vm);
    for (; k < n; k++) mx = p[k] > mx ? p[k] : mx;
    return mx;
}

/* p[k] <- exp(p[k] - mx) for k < n (the polynomial 8 at a time, expf for the tail);
 * returns their sum */
static inline float skv_exp_sum(float *p, int n, float mx) {
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256 e = skv_exp8(_mm256_sub_ps(_mm256_loadu_ps(p + k), vmx));
        _mm256_storeu_ps(p + k, e);
        vs = _mm256_add_ps(vs, e);
    }
    float sum = skv_hsum8(vs);
    for (; k < n; k++) { p[k] = expf(p[k] - mx); sum += p[k]; }
    return sum;
}

#endif
