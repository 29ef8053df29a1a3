/* dequant_avx2.c: AVX2 row dequantisers for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
 * Q6_K, F16, BF16 (and F32), bit-exact against skv_dequant_row (see dequant.h for the
 * per-type formula; the scalar versions in quant.c are the readable reference).
 *
 * Pattern: build the block's quants as 16 or 32 bytes (nibble unpack, high bits OR'd
 * in, offsets subtracted as int8 where the reference subtracts before converting),
 * widen 8 bytes at a time to int32, convert to float and apply the block's scale with
 * a separate multiply (and add/subtract), exactly as the scalar code rounds.
 * Rows read from mmapped files need not be aligned: all loads are unaligned. */
#include "dequant.h"
#include "quant.h"
#include "common/util.h"
#include <immintrin.h>
#include <string.h>

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 8 signed / unsigned bytes (low half of b) -> 8 floats */
static inline __m256 s8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }
static inline __m256 u8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }

/* y[0..15] = d * s8(b[0..15]) */
static inline void st16_mul(float *y, __m128i b, __m256 d) {
    _mm256_storeu_ps(y, _mm256_mul_ps(d, s8x8(b)));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, s8x8(_mm_srli_si128(b, 8))));
}
/* y[0..15] = d * u8(b[0..15]) + m */
static inline void st16_mul_add(float *y, __m128i b, __m256 d, __m256 m) {
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(d, u8x8(b)), m));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(d, u8x8(_mm_srli_si128(b, 8))), m));
}
/* y[0..15] = d * u8(b[0..15]) - m */
static inline void st16_mul_sub(float *y, __m128i b, __m256 d, __m256 m) {
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, u8x8(b)), m));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(d, u8x8(_mm_srli_si128(b, 8))), m));
}

/* 32 bits of qh -> two 16-byte vectors: byte j = 0x10 if bit j (lo: j < 16, hi: j >= 16). */
static inline void highbits16(const uint8_t *qh4, __m128i *lo, __m128i *hi) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m128i bits = _mm_set1_epi64x((long long)0x8040201008040201ULL);
    const __m128i sel_lo = _mm_set_epi64x(0x0101010101010101LL, 0);
    const __m128i sel_hi = _mm_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL);
    const __m128i x10 = _mm_set1_epi8(0x10);
    __m128i v = _mm_set1_epi32((int)qh);
    __m128i l = _mm_shuffle_epi8(v, sel_lo), h = _mm_shuffle_epi8(v, sel_hi);
    *lo = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(l, bits), bits), x10);
    *hi = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h, bits), bits), x10);
}

static void dq_q4_0(const uint8_t *p, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(15), off = _mm_set1_epi8(8);
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q4_0), y += 32) {
        __m256 d = _mm256_set1_ps(h2f(p));
        __m128i q = _mm_loadu_si128((const __m128i *)(p + 2));
        st16_mul(y, _mm_sub_epi8(_mm_and_si128(q, m4), off), d);
        st16_mul(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), off), d);
    }
}

static void dq_q4_1(const uint8_t *p, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q4_1), y += 32) {
        __m256 d = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(h2f(p + 2));
        __m128i q = _mm_loadu_si128((const __m128i *)(p + 4));
        st16_mul_add(y, _mm_and_si128(q, m4), d, m);
        st16_mul_add(y + 16, _mm_and_si128(_mm_srli_epi16(q, 4), m4), d, m);
    }
}

static void dq_q5_0(const uint8_t *p, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(15), off = _mm_set1_epi8(16);
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q5_0), y += 32) {
        __m256 d = _mm256_set1_ps(h2f(p));
        __m128i hl, hh;
        highbits16(p + 2, &hl, &hh);
        __m128i q = _mm_loadu_si128((const __m128i *)(p + 6));
        st16_mul(y, _mm_sub_epi8(_mm_or_si128(_mm_and_si128(q, m4), hl), off), d);
        st16_mul(y + 16, _mm_sub_epi8(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), hh), off), d);
    }
}

static void dq_q5_1(const uint8_t *p, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q5_1), y += 32) {
        __m256 d = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(h2f(p + 2));
        __m128i hl, hh;
        highbits16(p + 4, &hl, &hh);
        __m128i q = _mm_loadu_si128((const __m128i *)(p + 8));
        st16_mul_add(y, _mm_or_si128(_mm_and_si128(q, m4), hl), d, m);
        st16_mul_add(y + 16, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), hh), d, m);
    }
}

static void dq_q8_0(const uint8_t *p, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q8_0), y += 32) {
        __m256 d = _mm256_set1_ps(h2f(p));
        st16_mul(y, _mm_loadu_si128((const __m128i *)(p + 2)), d);
        st16_mul(y + 16, _mm_loadu_si128((const __m128i *)(p + 18)), d);
    }
}

/* The 12 packed scale bytes -> sc[0..7], m[0..7] (same unpacking as quant.c's k_scale_min). */
static inline void k_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* Q4_K (qh == NULL) and Q5_K: chunk c of 64 weights, qs[32c..32c+31]: low nibbles are
 * sub-block 2c, high nibbles 2c+1; Q5_K's 5th bit of weight 32s+l is bit s of qh[l]. */
static inline void dq_q45_K_block(const uint8_t *dp, const uint8_t *scales, const uint8_t *qh,
                                  const uint8_t *qs, float *y) {
    const __m128i m4 = _mm_set1_epi8(15), one = _mm_set1_epi8(1);
    float d = h2f(dp), dmin = h2f(dp + 2);
    uint8_t sc[8], m[8];
    k_scales(scales, sc, m);
    for (int c = 0; c < 4; c++) {
        __m256 d0 = _mm256_set1_ps(d * (float)sc[2 * c]), m0 = _mm256_set1_ps(dmin * (float)m[2 * c]);
        __m256 d1 = _mm256_set1_ps(d * (float)sc[2 * c + 1]), m1 = _mm256_set1_ps(dmin * (float)m[2 * c + 1]);
        const __m128i sh0 = _mm_cvtsi32_si128(2 * c), sh1 = _mm_cvtsi32_si128(2 * c + 1);
        for (int h = 0; h < 2; h++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(qs + 32 * c + 16 * h));
            __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
            if (qh) {
                __m128i hb = _mm_loadu_si128((const __m128i *)(qh + 16 * h));
                lo = _mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(hb, sh0), one), 4));
                hi = _mm_or_si128(hi, _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(hb, sh1), one), 4));
            }
            st16_mul_sub(y + 64 * c + 16 * h, lo, d0, m0);
            st16_mul_sub(y + 64 * c + 32 + 16 * h, hi, d1, m1);
        }
    }
}

static void dq_q4_K(const uint8_t *p, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q4_K), y += QK_K)
        dq_q45_K_block(p, p + offsetof(block_q4_K, scales), NULL, p + offsetof(block_q4_K, qs), y);
}

static void dq_q5_K(const uint8_t *p, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q5_K), y += QK_K)
        dq_q45_K_block(p, p + offsetof(block_q5_K, scales), p + offsetof(block_q5_K, qh),
                       p + offsetof(block_q5_K, qs), y);
}

/* Q6_K: half h (128 weights) uses ql[64h..], qh[32h..]; for l < 32 the four quants are
 * ql[l] low | qh bits 0-1, ql[l+32] low | bits 2-3, ql[l] high | bits 4-5,
 * ql[l+32] high | bits 6-7 (weights l, l+32, l+64, l+96); weight i uses scales[i/16]. */
static void dq_q6_K(const uint8_t *p, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3), off = _mm_set1_epi8(32);
    for (int64_t i = 0; i < nb; i++, p += sizeof(block_q6_K), y += QK_K) {
        const uint8_t *ql = p + offsetof(block_q6_K, ql), *qhp = p + offsetof(block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(p + offsetof(block_q6_K, scales));
        float d = h2f(p + offsetof(block_q6_K, d));
        for (int h = 0; h < 2; h++) {
            float *yh = y + 128 * h;
            for (int l = 0; l < 32; l += 16) {
                __m128i L0 = _mm_loadu_si128((const __m128i *)(ql + 64 * h + l));
                __m128i L1 = _mm_loadu_si128((const __m128i *)(ql + 64 * h + 32 + l));
                __m128i H = _mm_loadu_si128((const __m128i *)(qhp + 32 * h + l));
                __m128i q[4];
                q[0] = _mm_or_si128(_mm_and_si128(L0, m4), _mm_slli_epi16(_mm_and_si128(H, m3), 4));
                q[1] = _mm_or_si128(_mm_and_si128(L1, m4), _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 2), m3), 4));
                q[2] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(L0, 4), m4),
                                    _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 4), m3), 4));
                q[3] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(L1, 4), m4),
                                    _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(H, 6), m3), 4));
                for (int k = 0; k < 4; k++) {
                    __m256 s = _mm256_set1_ps(d * (float)sc[8 * h + 2 * k + l / 16]);
                    st16_mul(yh + 32 * k + l, _mm_sub_epi8(q[k], off), s);
                }
            }
        }
    }
}

static void dq_f16(const uint8_t *p, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = skv_f16_to_f32(h);
    }
}

static void dq_bf16(const uint8_t *p, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_slli_epi32(v, 16));
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = skv_bf16_to_f32(h);
    }
}

void skv_dequant_row_avx2(int type, const void *src, float *dst, int64_t n) {
    const int blk = skv_type_block(type);
    if (blk <= 0 || n <= 0 || n % blk != 0) { skv_dequant_row(type, src, dst, n); return; }
    const uint8_t *p = src;
    const int64_t nb = n / blk;
    switch (type) {
    case SKV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case SKV_F16: dq_f16(p, dst, n); break;
    case SKV_BF16: dq_bf16(p, dst, n); break;
    case SKV_Q4_0: dq_q4_0(p, dst, nb); break;
    case SKV_Q4_1: dq_q4_1(p, dst, nb); break;
    case SKV_Q5_0: dq_q5_0(p, dst, nb); break;
    case SKV_Q5_1: dq_q5_1(p, dst, nb); break;
    case SKV_Q8_0: dq_q8_0(p, dst, nb); break;
    case SKV_Q4_K: dq_q4_K(p, dst, nb); break;
    case SKV_Q5_K: dq_q5_K(p, dst, nb); break;
    case SKV_Q6_K: dq_q6_K(p, dst, nb); break;
    default: skv_dequant_row(type, src, dst, n); break;
    }
}
