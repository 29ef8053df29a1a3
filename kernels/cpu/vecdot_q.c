/* vecdot_q.c: decode dot products for the 32-wide block types (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0) against a Q8 activation row (skv_q8a), plus the AVX2 activation quantiser.
 *
 * Per block b (32 weights), with activation scale dy and block sum sy = dy*sum(qy):
 *   Q4_0: dw*dy*sum(q*qy) - 8*dw*sy       (q = nibble, 0..15)
 *   Q4_1: dw*dy*sum(q*qy) + m*sy
 *   Q5_0: dw*dy*sum(q*qy) - 16*dw*sy      (q = nibble | highbit<<4, 0..31)
 *   Q5_1: dw*dy*sum(q*qy) + m*sy
 *   Q8_0: dw*dy*sum(q*qy)                 (signed: |q| . sign(qy, q))
 * The integer sum is one maddubs(u8, s8) -> madd(ones) per 32 weights. The four nibble
 * types share DOT32_BODY: two blocks per step, their scale products computed in one
 * 4-lane multiply, float vector accumulators, one horizontal sum per row. */
#include "vecdot.h"
#include "vecdot_simd.h"

/* ---- activation quantiser: x (n) -> n/32 skv_q8a blocks, d = amax/127 ---- */
void skv_quant_q8a(const float *x, skv_q8a *dst, int64_t n) {
    const __m256 signbit = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(signbit, v0), _mm256_andnot_ps(signbit, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(signbit, v2), _mm256_andnot_ps(signbit, v3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        enum { rm = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };   /* a constant expression for clang too */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), rm));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), rm));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), rm));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), rm));
        int sum = skv_hsum8i(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
        __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
        __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        _mm256_storeu_si256((__m256i *)dst[b].qs, p);
        dst[b].d = d;
        dst[b].s = d * (float)sum;
    }
}

/* 16 nibble bytes -> 32 bytes: low nibbles (weights 0..15) then high nibbles (16..31). */
static inline __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 32 bits -> 32 bytes, byte j = 0x10 if bit j is set (the fifth bit of a Q5 weight). */
static inline __m256i unpack_highbits(const uint8_t qh4[4]) {
    uint32_t qh;
    __builtin_memcpy(&qh, qh4, 4);
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL,
                                            0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* sum over 32 of u8 w * s8 y as 8 floats */
static inline __m256 dot_u8s8(__m256i w, __m256i y) {
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(p);
}

/* ---- per-pair scale arithmetic, vectorised ----
 * Two blocks per step: their fp16 scales go through one F16C convert and one multiply
 * with the activations' (d, s) pairs, giving (dw0*dy0, c0, dw1*dy1, c1) where c is the
 * block's offset term (m*s for Q4_1/Q5_1, dw*s for Q4_0/Q5_0). The c lanes accumulate
 * in a vector and are summed once at the end; the dw*dy lanes are broadcast to scale
 * the block's 8 integer partial sums (no horizontal sum per block). */

/* the fp16 d of two blocks -> (d0, d0, d1, d1); the 2 bytes after d are loaded with it
 * (every block has them) and dropped by the duplicate */
static inline __m128 half1_pair(const void *b0, const void *b1) {
    return _mm_moveldup_ps(skv_half2_pair(b0, b1));
}
static inline __m256 bcast_lane0(__m128 f) { return _mm256_broadcastss_ps(f); }
static inline __m256 bcast_lane2(__m128 f) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_set1_epi32(2));
}

/* Body shared by the four 32-wide nibble types. WQ(i) yields block i's 32 unsigned
 * quants; SC(i0, i1) the scale pair vector for blocks i0, i1; the result is
 * sum(dw*dy*sum(q*qy)) + OFF * sum(c). */
#define DOT32_BODY(BT, WQ, SC, OFF)                                                          \
    const BT *b = w;                                                                       \
    const skv_q8a *y = xa;                                                                 \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                         \
    __m128 accc = _mm_setzero_ps();                                                        \
    const int64_t nb = n / 32;                                                             \
    int64_t i = 0;                                                                         \
    for (; i + 1 < nb; i += 2) {                                                           \
        __m128 f = _mm_mul_ps(SC(i, i + 1), skv_act_pair(y + i, y + i + 1));                                     \
        accc = _mm_add_ps(accc, f);                                                        \
        __m256 p0 = dot_u8s8(WQ(i), _mm256_loadu_si256((const __m256i *)y[i].qs));         \
        __m256 p1 = dot_u8s8(WQ(i + 1), _mm256_loadu_si256((const __m256i *)y[i + 1].qs)); \
        acc0 = _mm256_fmadd_ps(bcast_lane0(f), p0, acc0);                                  \
        acc1 = _mm256_fmadd_ps(bcast_lane2(f), p1, acc1);                                  \
    }                                                                                      \
    float c = _mm_cvtss_f32(_mm_shuffle_ps(accc, accc, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(accc, accc, 3)); \
    float s = skv_hsum8(_mm256_add_ps(acc0, acc1));                                        \
    if (i < nb) { /* odd block count: the last block alone */                              \
        __m128 f = _mm_mul_ps(SC(i, i), skv_act_pair(y + i, y + i));                           \
        s += _mm_cvtss_f32(f) *                                                            \
             skv_hsum8(dot_u8s8(WQ(i), _mm256_loadu_si256((const __m256i *)y[i].qs)));     \
        c += _mm_cvtss_f32(_mm_shuffle_ps(f, f, 3));                                       \
    }                                                                                      \
    return s + (OFF) * c;

#define Q4_WQ(i) unpack_nibbles(b[i].qs)
#define Q5_WQ(i) _mm256_or_si256(unpack_nibbles(b[i].qs), unpack_highbits(b[i].qh))
#define SC_D(i0, i1) half1_pair(&b[i0].d, &b[i1].d)
#define SC_DM(i0, i1) skv_half2_pair(&b[i0].d, &b[i1].d)

float skv_vec_dot_q4_0(int64_t n, const void *w, const void *xa) { DOT32_BODY(block_q4_0, Q4_WQ, SC_D, -8.0f) }
float skv_vec_dot_q4_1(int64_t n, const void *w, const void *xa) { DOT32_BODY(block_q4_1, Q4_WQ, SC_DM, 1.0f) }
float skv_vec_dot_q5_0(int64_t n, const void *w, const void *xa) { DOT32_BODY(block_q5_0, Q5_WQ, SC_D, -16.0f) }
float skv_vec_dot_q5_1(int64_t n, const void *w, const void *xa) { DOT32_BODY(block_q5_1, Q5_WQ, SC_DM, 1.0f) }

/* ---- 4-row kernels: y[r] = dot(weight row r, x) for 4 rows `stride` bytes apart ----
 * The activation pair of blocks (i, i+1) is loaded once and shared by the 4 rows; the
 * two blocks of a row are handled in one 256-bit vector: lane 0 = block i, lane 1 =
 * block i+1. Their 16 nibble bytes go into the two lanes (one load + one insert), so
 * `v & 15` holds both blocks' weights 0..15 and `(v >> 4) & 15` their weights 16..31;
 * the activation halves are regrouped the same way (ya = qy[0..15] of both blocks,
 * yb = qy[16..31]). The two maddubs results are added as int16 (|.| <= 2*2*31*127,
 * no overflow), one madd, one convert, one FMA with the per-lane scale
 * (dw0*dy0 x4 | dw1*dy1 x4) per pair. The 4 rows' vectors are reduced together at the end.
 * At one thread the loop is bound by the vector ports (mostly the shuffle ones), not by
 * memory; two things keep it short (together ~13% faster for Q5_0, ~16% for Q4_1; the
 * results are bit-identical, only integer unpacking and loads changed):
 *   - the activation comes regrouped in pairs (skv_q8a_pair, vecdot.h), built once per
 *     matmul by skv_vec_quant_act (it was once per 4-row call, before that once per row);
 *   - the Q5 fifth bits come from skv_highbits_pair (vecdot_simd.h), one instruction
 *     per 32 weights cheaper than the cmpeq form. */

/* The pairs part of the activation (vecdot.h): two 256-bit loads, two lane permutes. */
void skv_q8a_regroup(const skv_q8a *y, int64_t n, skv_q8a_pair *pairs) {
    for (int64_t p = 0; p < n / QK8_0 / 2; p++) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[2 * p].qs);
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)y[2 * p + 1].qs);
        _mm256_storeu_si256((__m256i *)pairs[p].ya, _mm256_permute2x128_si256(y0, y1, 0x20));
        _mm256_storeu_si256((__m256i *)pairs[p].yb, _mm256_permute2x128_si256(y0, y1, 0x31));
        _mm_storeu_ps(pairs[p].ds, skv_act_pair(y + 2 * p, y + 2 * p + 1));
        _mm_storeu_ps(pairs[p].pad, _mm_setzero_ps());
    }
}

/* Rows longer than ACT_PAIRS pairs are read in chunks of that many pairs, the 4 rows one
 * after another per chunk, so the chunk's pairs (12 KiB) stay in L1 for the 4 rows. */
#define ACT_PAIRS 128

/* One row's pair loop over np pairs: acc (8 lanes) += dw*dy*sum(q*qy), accc (lanes 1, 3)
 * += offset terms; acc/accc carry on from the previous chunk. */
static inline __attribute__((always_inline)) void row32(int kind, size_t bsz, int64_t np, const uint8_t *w,
                                                        const skv_q8a_pair *a, __m256 *accp, __m128 *acccp) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i dup02 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t qoff = q5 ? (hasm ? 8 : 6) : (hasm ? 4 : 2);   /* offset of qs in the block */
    __m256 acc = *accp;
    __m128 accc = *acccp;
    for (int64_t p = 0; p < np; p++) {
        const uint8_t *b0 = w + (size_t)(2 * p) * bsz, *b1 = b0 + bsz;
        __m256i lo, hi;
        skv_quants_pair32(q5, b0, b1, qoff, &lo, &hi);
        __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a[p].ya)),
                                       _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)a[p].yb)));
        __m256 pf = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        __m128 sc = skv_half2_pair(b0, b1);
        if (!hasm) sc = _mm_moveldup_ps(sc);
        __m128 f = _mm_mul_ps(sc, _mm_loadu_ps(a[p].ds));   /* (dw0*dy0, c0, dw1*dy1, c1) */
        accc = _mm_add_ps(accc, f);
        acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), dup02), pf, acc);
    }
    *accp = acc;
    *acccp = accc;
}

/* kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1 (a literal at every call, so the branches fold).
 * Rows are read one after another (each row a sequential stream, which the hardware
 * prefetchers follow; interleaving the 4 rows block by block measured 2-3x slower from
 * DRAM; rows longer than ACT_PAIRS pairs are read in chunks of that many pairs); the 4
 * results are reduced together. */
static inline __attribute__((always_inline)) void dot4_32(int kind, size_t bsz, int64_t n, const uint8_t *w,
                                                          size_t stride, const skv_q8a *y, float out[4]) {
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t qoff = q5 ? (hasm ? 8 : 6) : (hasm ? 4 : 2);
    const int64_t nb = n / 32, npair = nb / 2;
    const skv_q8a_pair *pairs = (const skv_q8a_pair *)(const void *)((const uint8_t *)y + skv_q8a_pairs_offset(n));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m128 c0 = _mm_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t p0 = 0; p0 < npair; p0 += ACT_PAIRS) {
        const int64_t np = npair - p0 < ACT_PAIRS ? npair - p0 : ACT_PAIRS;
        const uint8_t *wp = w + (size_t)(2 * p0) * bsz;
        const skv_q8a_pair *a = pairs + p0;
        row32(kind, bsz, np, wp, a, &a0, &c0);
        row32(kind, bsz, np, wp + stride, a, &a1, &c1);
        row32(kind, bsz, np, wp + 2 * stride, a, &a2, &c2);
        row32(kind, bsz, np, wp + 3 * stride, a, &a3, &c3);
    }
    const float off = skv_off32(kind);
    _mm_storeu_ps(out, skv_rows4_32(a0, a1, a2, a3, c0, c1, c2, c3, off));
    if (nb & 1) {   /* odd block count: the last block row by row */
        const int64_t i = nb - 1;
        for (int r = 0; r < 4; r++) {
            const uint8_t *b0 = w + (size_t)r * stride + (size_t)i * bsz;
            __m256i q = unpack_nibbles(b0 + qoff);
            if (q5) q = _mm256_or_si256(q, unpack_highbits(b0 + qoff - 4));
            __m128 f = _mm_mul_ps(hasm ? skv_half2_pair(b0, b0) : half1_pair(b0, b0), skv_act_pair(y + i, y + i));
            out[r] += _mm_cvtss_f32(f) * skv_hsum8(dot_u8s8(q, _mm256_loadu_si256((const __m256i *)y[i].qs))) +
                      off * _mm_cvtss_f32(_mm_shuffle_ps(f, f, 1));
        }
    }
}

void skv_vec_dot4_q4_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    dot4_32(0, sizeof(block_q4_0), n, w, stride, xa, out);
}
void skv_vec_dot4_q4_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    dot4_32(1, sizeof(block_q4_1), n, w, stride, xa, out);
}
void skv_vec_dot4_q5_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    dot4_32(2, sizeof(block_q5_0), n, w, stride, xa, out);
}
void skv_vec_dot4_q5_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    dot4_32(3, sizeof(block_q5_1), n, w, stride, xa, out);
}

/* Q8_0, 4 rows: per block one sign-trick maddubs per row, the pair's two scales from one
 * F16C convert (as half1_pair), activation loads shared. */
/* Q8_0, 4 rows (read one after another, as dot4_32): per pair of blocks the two scales
 * come from one F16C convert (as half1_pair); the 4 results are reduced together. */
static inline __attribute__((always_inline)) __m256 row_q8_0(int64_t nb, const block_q8_0 *b, const skv_q8a *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs), y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
        __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs), q1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(y0, q0)), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q1, q1), _mm256_sign_epi8(y1, q1)), ones);
        __m128 f = _mm_mul_ps(half1_pair(&b[i].d, &b[i + 1].d), skv_act_pair(y + i, y + i + 1));   /* (dw0*dy0, ., dw1*dy1, .) */
        acc0 = _mm256_fmadd_ps(bcast_lane0(f), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(bcast_lane2(f), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p0 = dot_u8s8(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(y0, q0));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y[i].d), p0, acc0);
    }
    return _mm256_add_ps(acc0, acc1);
}

void skv_vec_dot4_q8_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) {
    const uint8_t *wb = w;
    const skv_q8a *y = xa;
    const int64_t nb = n / QK8_0;
    __m256 a0 = row_q8_0(nb, (const block_q8_0 *)(const void *)wb, y);
    __m256 a1 = row_q8_0(nb, (const block_q8_0 *)(const void *)(wb + stride), y);
    __m256 a2 = row_q8_0(nb, (const block_q8_0 *)(const void *)(wb + 2 * stride), y);
    __m256 a3 = row_q8_0(nb, (const block_q8_0 *)(const void *)(wb + 3 * stride), y);
    _mm_storeu_ps(out, skv_hsum4x8(a0, a1, a2, a3));
}

float skv_vec_dot_q8_0(int64_t n, const void *w, const void *xa) {
    const block_q8_0 *b = w;
    const skv_q8a *y = xa;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t nb = n / QK8_0, i = 0;
    for (; i + 1 < nb; i += 2) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i q1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
        __m256 p0 = dot_u8s8(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(y0, q0));
        __m256 p1 = dot_u8s8(_mm256_sign_epi8(q1, q1), _mm256_sign_epi8(y1, q1));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y[i].d), p0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i + 1].d) * y[i + 1].d), p1, acc1);
    }
    for (; i < nb; i++) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 p0 = dot_u8s8(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(y0, q0));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y[i].d), p0, acc0);
    }
    return skv_hsum8(_mm256_add_ps(acc0, acc1));
}
