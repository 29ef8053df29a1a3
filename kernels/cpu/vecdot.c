/* vecdot.c: the per-type table of decode dot products and activation formats, and the
 * float-weight dots (F32, F16 via F16C, BF16). n is a multiple of 8 for the float dots'
 * vector part; a scalar tail handles the rest. */
#include "vecdot.h"
#include "vecdot_simd.h"

int skv_vec_act_type(int wtype) {
    switch (wtype) {
    case SKV_Q4_0: case SKV_Q4_1: case SKV_Q5_0: case SKV_Q5_1: case SKV_Q8_0: return SKV_Q8_0;
    case SKV_Q4_K: case SKV_Q5_K: case SKV_Q6_K: return SKV_Q8_K;
    case SKV_F32: case SKV_F16: case SKV_BF16: return SKV_F32;
    default: return -1;
    }
}

size_t skv_vec_act_bytes(int wtype, int64_t n) {
    switch (skv_vec_act_type(wtype)) {
    case SKV_Q8_0: return skv_q8a_pairs_offset(n) + (size_t)(n / QK8_0 / 2) * sizeof(skv_q8a_pair);
    case SKV_Q8_K: return (size_t)(n / QK_K) * sizeof(block_q8_K);
    case SKV_F32: return (size_t)n * sizeof(float);
    default: return 0;
    }
}

void skv_vec_quant_act(int wtype, const float *x, void *dst, int64_t n) {
    switch (skv_vec_act_type(wtype)) {
    case SKV_Q8_0:
        skv_quant_q8a(x, dst, n);
        skv_q8a_regroup(dst, n, (skv_q8a_pair *)(void *)((uint8_t *)dst + skv_q8a_pairs_offset(n)));
        break;
    case SKV_Q8_K: skv_quant_q8k(x, dst, n); break;
    case SKV_F32: __builtin_memcpy(dst, x, (size_t)n * sizeof(float)); break;
    default: break;
    }
}

skv_vec_dot_fn skv_vec_dot_for(int wtype) {
    switch (wtype) {
    case SKV_Q4_0: return skv_vec_dot_q4_0;
    case SKV_Q4_1: return skv_vec_dot_q4_1;
    case SKV_Q5_0: return skv_vec_dot_q5_0;
    case SKV_Q5_1: return skv_vec_dot_q5_1;
    case SKV_Q8_0: return skv_vec_dot_q8_0;
    case SKV_Q4_K: return skv_vec_dot_q4_K;
    case SKV_Q5_K: return skv_vec_dot_q5_K;
    case SKV_Q6_K: return skv_vec_dot_q6_K;
    case SKV_F32: return skv_vec_dot_f32;
    case SKV_F16: return skv_vec_dot_f16;
    case SKV_BF16: return skv_vec_dot_bf16;
    default: return NULL;
    }
}

skv_vec_dot4_fn skv_vec_dot4_for(int wtype) {
    switch (wtype) {
    case SKV_Q4_0: return skv_vec_dot4_q4_0;
    case SKV_Q4_1: return skv_vec_dot4_q4_1;
    case SKV_Q5_0: return skv_vec_dot4_q5_0;
    case SKV_Q5_1: return skv_vec_dot4_q5_1;
    case SKV_Q8_0: return skv_vec_dot4_q8_0;
    case SKV_Q4_K: return skv_vec_dot4_q4_K;
    case SKV_Q6_K: return skv_vec_dot4_q6_K;
    default: return NULL;
    }
}

/* The float rows' dots prefetch their weight stream ahead (skv_prefetch_ahead, one line
 * per 64 bytes of weights). */
float skv_vec_dot_f32(int64_t n, const void *w, const void *xa) {
    const float *a = w, *x = xa;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        skv_prefetch_ahead(a + i, 64);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float s = skv_hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * x[i];
    return s;
}

float skv_vec_dot_f16(int64_t n, const void *w, const void *xa) {
    const uint16_t *a = w;
    const float *x = xa;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (i % 32 == 0) skv_prefetch_ahead(a + i, 64);
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))), _mm256_loadu_ps(x + i), s0);
    float s = skv_hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += skv_h2f(a[i]) * x[i];
    return s;
}

static inline __m256 bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

float skv_vec_dot_bf16(int64_t n, const void *w, const void *xa) {
    const uint16_t *a = w;
    const float *x = xa;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();   /* two chains, as f16 */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (i % 32 == 0) skv_prefetch_ahead(a + i, 64);
        s0 = _mm256_fmadd_ps(bf16x8(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(bf16x8(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(bf16x8(a + i), _mm256_loadu_ps(x + i), s0);
    float s = skv_hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        uint32_t bits = (uint32_t)a[i] << 16;
        float f;
        __builtin_memcpy(&f, &bits, 4);
        s += f * x[i];
    }
    return s;
}
