/* vecdot_pack.c: the decode copy of the 32-wide nibble types (Q4_0, Q4_1, Q5_0, Q5_1)
 * with each row's blocks regrouped in pairs, and its 4-row GEMV kernels.
 *
 * A row of nb blocks (nb even) becomes nb/2 pairs of the same total size; pair p holds
 * blocks i = 2p and i+1:
 *   hdr   the two blocks' fp16 headers side by side: (d_i, d_i+1) for Q4_0/Q5_0,
 *         (d_i, m_i, d_i+1, m_i+1) for Q4_1/Q5_1: one F16C convert gives the scales
 *   qh'   (Q5 only) the 64 fifth bits, reordered (below)
 *   qs    qs_i (16 bytes) then qs_i+1: one 256-bit load gives both blocks' nibbles
 * Q4_0 36, Q4_1 40, Q5_0 44, Q5_1 48 bytes per pair, exactly two blocks' worth.
 *
 * The kernels compute what dot4_32 (vecdot_q.c) computes, bit for bit: the same integer
 * products and the same float operations in the same order; only the loads and the
 * unpacking of the fifth bits differ. The vector `lo` holds, at byte j = 8k + b
 * (qword k, byte b), weight 8(k%2) + b of block k/2 (lanes: block i, block i+1), and
 * `hi` weight 16 + 8(k%2) + b. qh' broadcast to the four qwords and shifted left by
 * (4, 3, 2, 1) (lo) or right by (0, 1, 2, 3) (hi) puts the right bit at bit 4 of every
 * byte when qh' bit 8b + k holds lo's bit and bit 8b + 4 + k hi's bit: one broadcast, two
 * variable shifts and two ands per 64 weights, against two broadcasts, a blend, a shift,
 * two shuffles, two ands and two mins for the stored order (skv_highbits_pair). One
 * thread, L3-resident 4864 x 896 Q5_0: 17.5 -> 24.3 GB/s.
 *
 * The copy costs memory (the model keeps the stored blocks for prefill and the other
 * paths), so runtime/model/model.c makes it only for the matrices the decode GEMV reads. */
#include <string.h>
#include "vecdot.h"
#include "vecdot_simd.h"

int skv_pack_supported(int type, int64_t cols) {
    const int nibble = type == SKV_Q4_0 || type == SKV_Q4_1 || type == SKV_Q5_0 || type == SKV_Q5_1;
    return nibble && cols > 0 && cols % 64 == 0;
}

/* bytes of the block header (fp16 d, or d and m), offsets of qh and qs in a block */
static void layout(int type, size_t *bsz, size_t *hdr, size_t *qh, size_t *qs) {
    const int q5 = type == SKV_Q5_0 || type == SKV_Q5_1, hasm = type == SKV_Q4_1 || type == SKV_Q5_1;
    *hdr = hasm ? 4 : 2;
    *qh = *hdr;
    *qs = *hdr + (q5 ? 4 : 0);
    *bsz = *qs + 16;
}

/* the two blocks' 32-bit fifth-bit masks -> qh' (order above) */
static uint64_t pack_highbits(uint32_t h0, uint32_t h1) {
    uint64_t q = 0;
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 8; b++) {
            const uint32_t h = k < 2 ? h0 : h1;
            const int w = 8 * (k % 2) + b;
            q |= (uint64_t)((h >> w) & 1u) << (8 * b + k);
            q |= (uint64_t)((h >> (w + 16)) & 1u) << (8 * b + 4 + k);
        }
    return q;
}

void skv_pack_rows(int type, const void *src, void *dst, int64_t rows, int64_t cols) {
    size_t bsz, hdr, qh, qs;
    layout(type, &bsz, &hdr, &qh, &qs);
    const int q5 = qs > qh;
    const int64_t nb = cols / 32;
    const uint8_t *s = src;
    uint8_t *o = dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < nb / 2; p++) {
            const uint8_t *b0 = s + (size_t)(r * nb + 2 * p) * bsz, *b1 = b0 + bsz;
            memcpy(o, b0, hdr);
            memcpy(o + hdr, b1, hdr);
            o += 2 * hdr;
            if (q5) {
                uint32_t h0, h1;
                memcpy(&h0, b0 + qh, 4);
                memcpy(&h1, b1 + qh, 4);
                const uint64_t q = pack_highbits(h0, h1);
                memcpy(o, &q, 8);
                o += 8;
            }
            memcpy(o, b0 + qs, 16);
            memcpy(o + 16, b1 + qs, 16);
            o += 32;
        }
}

/* One row's pair loop (row32 of vecdot_q.c on the packed layout); kind: 0 Q4_0, 1 Q4_1,
 * 2 Q5_0, 3 Q5_1, a literal at every call. */
static inline __attribute__((always_inline)) void rowp(int kind, int64_t np, const uint8_t *w, const skv_q8a_pair *a,
                                                       __m256 *accp, __m128 *acccp) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), b4 = _mm256_set1_epi8(0x10);
    const __m256i shl = _mm256_setr_epi64x(4, 3, 2, 1), shr = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i dup02 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t hdr2 = hasm ? 8 : 4, qso = hdr2 + (q5 ? 8 : 0), psz = qso + 32;
    __m256 acc = *accp;
    __m128 accc = *acccp;
    for (int64_t p = 0; p < np; p++) {
        const uint8_t *b = w + (size_t)p * psz;
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b + qso));
        __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if (q5) {
            long long qh;
            memcpy(&qh, b + hdr2, 8);
            const __m256i h = _mm256_set1_epi64x(qh);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_sllv_epi64(h, shl), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srlv_epi64(h, shr), b4));
        }
        __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a[p].ya)),
                                       _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)a[p].yb)));
        __m256 pf = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        __m128 sc;
        if (hasm) {   /* (d0, m0, d1, m1) */
            sc = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)b));
        } else {      /* (d0, d1) -> (d0, d0, d1, d1) */
            int32_t u;
            memcpy(&u, b, 4);
            const __m128 h = _mm_cvtph_ps(_mm_cvtsi32_si128(u));
            sc = _mm_unpacklo_ps(h, h);
        }
        __m128 f = _mm_mul_ps(sc, _mm_loadu_ps(a[p].ds));   /* (dw0*dy0, c0, dw1*dy1, c1) */
        accc = _mm_add_ps(accc, f);
        acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), dup02), pf, acc);
    }
    *accp = acc;
    *acccp = accc;
}

/* 4 packed rows `stride` bytes apart, read one after another per chunk of PACK_PAIRS pairs
 * (as dot4_32); n a multiple of 64. */
#define PACK_PAIRS 128
static inline __attribute__((always_inline)) void dot4p(int kind, int64_t n, const uint8_t *w, size_t stride,
                                                        const void *xa, float out[4]) {
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t psz = (hasm ? 8 : 4) + (q5 ? 8 : 0) + 32;
    const int64_t npair = n / 64;
    const skv_q8a_pair *pairs = (const skv_q8a_pair *)(const void *)((const uint8_t *)xa + skv_q8a_pairs_offset(n));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m128 c0 = _mm_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t p0 = 0; p0 < npair; p0 += PACK_PAIRS) {
        const int64_t np = npair - p0 < PACK_PAIRS ? npair - p0 : PACK_PAIRS;
        const uint8_t *wp = w + (size_t)p0 * psz;
        const skv_q8a_pair *a = pairs + p0;
        rowp(kind, np, wp, a, &a0, &c0);
        rowp(kind, np, wp + stride, a, &a1, &c1);
        rowp(kind, np, wp + 2 * stride, a, &a2, &c2);
        rowp(kind, np, wp + 3 * stride, a, &a3, &c3);
    }
    _mm_storeu_ps(out, skv_rows4_32(a0, a1, a2, a3, c0, c1, c2, c3, skv_off32(kind)));
}

static void dot4p_q4_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) { dot4p(0, n, w, stride, xa, out); }
static void dot4p_q4_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) { dot4p(1, n, w, stride, xa, out); }
static void dot4p_q5_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) { dot4p(2, n, w, stride, xa, out); }
static void dot4p_q5_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]) { dot4p(3, n, w, stride, xa, out); }

skv_vec_dot4_fn skv_vec_dot4_packed_for(int type) {
    switch (type) {
    case SKV_Q4_0: return dot4p_q4_0;
    case SKV_Q4_1: return dot4p_q4_1;
    case SKV_Q5_0: return dot4p_q5_0;
    case SKV_Q5_1: return dot4p_q5_1;
    default: return NULL;
    }
}
