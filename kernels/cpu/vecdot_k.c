/* vecdot_k.c: decode dot products for the 256-wide k-quants (Q4_K, Q5_K, Q6_K) against a
 * Q8_K activation row, plus the AVX2 Q8_K activation quantiser.
 *
 * Per super-block (256 weights), activation scale dy, 16-wide sums bsums[i]:
 *   Q4_K/Q5_K: d*dy * sum_j sc_j * sum(q*qy over sub-block j)  -  dmin*dy * sum_j m_j * bs_j
 *              (8 sub-blocks of 32, 6-bit sc/m; q = nibble (| highbit<<4 for Q5_K))
 *   Q6_K:      d*dy * sum_i sc_i * (sum(q*qy over 16) - 32 * bsums[i])   (16 groups of 16)
 * Integer sums use maddubs(u8 q, s8 qy) then madd with the broadcast sub-block scale. */
#include "vecdot.h"
#include "vecdot_simd.h"

/* ---- activation quantiser: x (n) -> n/256 block_q8_K, d = amax/127, bsums per 16 ---- */
void skv_quant_q8k(const float *x, block_q8_K *dst, int64_t n) {
    const __m256 signbit = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    enum { rm = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };   /* a constant expression for clang too */
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *xb = x + b * QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < QK_K; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(signbit, _mm256_loadu_ps(xb + i)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        __m256 vid = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int g = 0; g < QK_K; g += 32) {
            __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + g), vid), rm));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + g + 8), vid), rm));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + g + 16), vid), rm));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + g + 24), vid), rm));
            dst[b].bsums[g / 16] = (int16_t)skv_hsum8i(_mm256_add_epi32(i0, i1));
            dst[b].bsums[g / 16 + 1] = (int16_t)skv_hsum8i(_mm256_add_epi32(i2, i3));
            __m256i p = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3)), perm);
            _mm256_storeu_si256((__m256i *)(dst[b].qs + g), p);
        }
        dst[b].d = amax / 127.0f;
    }
}

/* The 6-bit scale and min of sub-block j (0..7) in the 12 packed bytes q (Q4_K, Q5_K):
 *   j < 4: sc = q[j] & 63,                          m = q[j+4] & 63
 *   j >= 4: sc = (q[j+4] & 15) | (q[j-4] >> 6) << 4, m = (q[j+4] >> 4) | (q[j] >> 6) << 4
 * dot_q45_K unpacks all 16 at once (skv_kq_unpack_scales, vecdot_simd.h). */

/* Shared body of Q4_K / Q5_K: qh == NULL for Q4_K (now used for Q5_K only; Q4_K runs
 * row_q4_K below, the same arithmetic with constant scale-pick controls).
 * Per super-block: the 8 scales (as int16) are broadcast to both 128-bit lanes once and
 * each sub-block's scale is picked with one byte shuffle; the mins term
 * sum_j m_j * bsums stays a vector (madd, convert, FMA with -dmin*dy) so there is no
 * horizontal sum per super-block; one float FMA folds the integer sum. Each super-block
 * prefetches the weight stream ahead (skv_prefetch_ahead). */
static inline float dot_q45_K(int64_t n, const uint8_t *d16, const uint8_t *scales, const uint8_t *qh,
                              const uint8_t *qs, size_t stride, const block_q8_K *y) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *blk = d16 + i * stride;
        skv_prefetch_ahead(blk, stride);
        uint32_t dd;
        __builtin_memcpy(&dd, blk, 4);
        const __m128 dv = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(y[i].d)); /* d*dy, dmin*dy */
        const uint8_t *sc8 = scales + i * stride, *q = qs + i * stride;
        const int8_t *qy = y[i].qs;
        const __m128i sm16 = skv_kq_unpack_scales(sc8);   /* sc[0..7], mins[8..15] */
        /* mins: m_j paired with bsums[2j], bsums[2j+1] */
        __m128i m8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm16, 8));
        __m256i m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
        __m256i mprod = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)y[i].bsums));
        accm = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dv)), _mm256_cvtepi32_ps(mprod), accm);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm16));
        __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)(qh + i * stride)) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
            __m256i lo = _mm256_and_si256(v, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (qh) {
                __m256i bl = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one);
                __m256i bh = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
            }
            __m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_kq_pick[2 * j]));
            __m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_kq_pick[2 * j + 1]));
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(qy + 64 * j));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(qy + 64 * j + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi), acc);
    }
    return skv_hsum8(_mm256_sub_ps(acc, accm));
}

/* Q4_K, one row (the GEMV's kernel; same arithmetic and float order as dot_q45_K with
 * qh == NULL, so bit-identical to it and to vecdot_n.c's dotn_q45K): the 12 scale bytes are
 * unpacked with 32-bit masks straight into one 16-byte vector (sc[0..7], m[0..7]) broadcast
 * to both lanes; every int16 scale vector (and the mins paired with bsums) is then one byte
 * shuffle of it with a zero-extending control (q4k_pick), and the 4 sub-block pairs are
 * unrolled so the controls are constants. */
#define PK(k) { k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, \
                k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80, k, 0x80 }
static const uint8_t q4k_pick[9][32] __attribute__((aligned(32))) = {
    PK(0), PK(1), PK(2), PK(3), PK(4), PK(5), PK(6), PK(7),
    /* mins: m_j (byte 8 + j) twice, for bsums[2j], bsums[2j+1] */
    { 8, 0x80, 8, 0x80, 9, 0x80, 9, 0x80, 10, 0x80, 10, 0x80, 11, 0x80, 11, 0x80,
      12, 0x80, 12, 0x80, 13, 0x80, 13, 0x80, 14, 0x80, 14, 0x80, 15, 0x80, 15, 0x80 } };
#undef PK

/* the 12 packed scale bytes of a Q4_K/Q5_K block -> (sc[0..7], m[0..7]) in both lanes */
static inline __m256i unpack_sm(const uint8_t *sc) {
    uint32_t a, b, c;
    __builtin_memcpy(&a, sc, 4);
    __builtin_memcpy(&b, sc + 4, 4);
    __builtin_memcpy(&c, sc + 8, 4);
    const uint32_t slo = a & 0x3f3f3f3fu, shi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    const uint32_t mlo = b & 0x3f3f3f3fu, mhi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    return _mm256_broadcastsi128_si256(_mm_set_epi32((int)mhi, (int)mlo, (int)shi, (int)slo));
}

static inline __attribute__((always_inline)) float row_q4_K(int64_t nsb, const block_q4_K *b, const block_q8_K *y) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        uint32_t dd;
        __builtin_memcpy(&dd, &b[i].d, 4);
        const __m128 dv = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(y[i].d)); /* d*dy, dmin*dy */
        const __m256i sm = unpack_sm(b[i].scales);
        const __m256i mprod = _mm256_madd_epi16(_mm256_shuffle_epi8(sm, _mm256_load_si256((const __m256i *)q4k_pick[8])),
                                                _mm256_loadu_si256((const __m256i *)y[i].bsums));
        accm = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dv)), _mm256_cvtepi32_ps(mprod), accm);
        const uint8_t *q = b[i].qs;
        const int8_t *qy = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
            const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            const __m256i s0 = _mm256_shuffle_epi8(sm, _mm256_load_si256((const __m256i *)q4k_pick[2 * j]));
            const __m256i s1 = _mm256_shuffle_epi8(sm, _mm256_load_si256((const __m256i *)q4k_pick[2 * j + 1]));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(qy + 64 * j))), s0);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(qy + 64 * j + 32))), s1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi), acc);
    }
    return skv_hsum8(_mm256_sub_ps(acc, accm));
}

float skv_vec_dot_q4_K(int64_t n, const void *w, const void *xa) {
    return row_q4_K(n / QK_K, w, xa);
}

/* 4 rows `stride` bytes apart, one after another (each a sequential stream); every row
 * exactly as skv_vec_dot_q4_K. */
void skv_vec_dot4_q4_K(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    const uint8_t *wb = w;
    for (int r = 0; r < 4; r++) out[r] = row_q4_K(n / QK_K, (const block_q4_K *)(const void *)(wb + (size_t)r * stride), xa);
}

float skv_vec_dot_q5_K(int64_t n, const void *w, const void *xa) {
    const block_q5_K *b = w;
    return dot_q45_K(n, (const uint8_t *)&b[0].d, b[0].scales, b[0].qh, b[0].qs, sizeof(block_q5_K), xa);
}

/* Q6_K: per half h (128 weights) the 4 vectors of 6-bit quants are rebuilt from ql (low
 * nibbles) and qh (2 bits each, shifted into place with one shift + mask); the 16 scales
 * are sign-extended to int16 once per super-block (lane 0 = groups 0..7, lane 1 = 8..15),
 * each half's 8 go to both lanes with one vpermq, and the pair of 16-group scales of each
 * 32 weights is picked from that with one byte shuffle; the -32 offset
 * (32 * sum_g sc_g * bsums_g) stays a vector. Both halves are unrolled. Same integer sums
 * and float order as vecdot_n.c's dotn_q6K (bit-identical). */

static inline __attribute__((always_inline)) float row_q6_K(int64_t nsb, const block_q6_K *b, const block_q8_K *y) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *qy = y[i].qs;
        const __m256i scw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
        /* the -32 offset: 32 * sum_g sc_g * bsums_g, as 8 int32 lanes */
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_madd_epi16(scw, _mm256_loadu_si256((const __m256i *)y[i].bsums)), 5));
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i sc16 = h ? _mm256_permute4x64_epi64(scw, 0xee) : _mm256_permute4x64_epi64(scw, 0x44);
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            const __m256i hh = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), m30));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 2), m30));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hh, m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                               _mm256_and_si256(_mm256_srli_epi16(hh, 2), m30));
            const int8_t *yh = qy + 128 * h;
#define T6(k, q) _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(yh + 32 * (k)))), \
                                   _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_q6k_pick[k])))
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(T6(0, q0), T6(1, q1)),
                                                           _mm256_add_epi32(T6(2, q2), T6(3, q3))));
#undef T6
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return skv_hsum8(acc);
}

float skv_vec_dot_q6_K(int64_t n, const void *w, const void *xa) {
    return row_q6_K(n / QK_K, w, xa);
}

/* 4 rows `stride` bytes apart, one after another; every row exactly as skv_vec_dot_q6_K. */
void skv_vec_dot4_q6_K(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    const uint8_t *wb = w;
    for (int r = 0; r < 4; r++) out[r] = row_q6_K(n / QK_K, (const block_q6_K *)(const void *)(wb + (size_t)r * stride), xa);
}
