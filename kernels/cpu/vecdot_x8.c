/* vecdot_x8.c: the 8-row interleaved decode layout (Q4_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
 * and its GEMV kernels.
 *
 * The stored layout keeps each row's blocks together, so a one-row kernel spends most of
 * its instructions on per-row work that does not scale with the bytes: unpacking each
 * super-block's 6-bit scales, picking a scale per sub-block, horizontal sums. Here the
 * rows go in groups of 8 and every 32-bit lane of a vector belongs to one row, so that
 * work is done once for 8 rows, and the integer products of a sub-block add up in int16
 * before one multiply by the 8 rows' scales.
 *
 * Group g (rows 8g .. 8g+7) takes the same bytes as those 8 stored rows, at the same
 * offset (8g rows x row bytes); block column i of the group is one x8 block of 8 stored
 * blocks' bytes, so a matrix is repacked in place (runtime/model_pack.c) and costs no
 * memory. Every quant vector of an x8 block holds 4 bytes of each row (row r at bytes
 * 4r .. 4r+3), so a maddubs with 4 activation bytes broadcast to all lanes gives each
 * row's products in that row's lane.
 *
 * Q4_K (256 weights a block):
 *   d[8], dmin[8]   the rows' fp16 scales                       32 bytes
 *   sc[12][8]       byte k of row r's packed 6-bit scales at 8k + r   96 bytes
 *   qs[4][8][8][4]  (j, t, r): row r's qs[32j + 4t .. 32j + 4t + 3]   1024 bytes
 * In qs, byte b of row r's group j holds weight b of sub-block 2j (low nibble) and weight b
 * of sub-block 2j + 1 (high nibble), as in the stored block.
 *
 * The Q4_K kernel: for each x8 block and each j, eight 32-byte vectors (t = 0..7) each hold 4
 * bytes of every row; their low nibbles times the broadcast activation bytes
 * qy[64j + 4t ..] (maddubs) add up in int16 (8 x 2 x 15 x 127 = 30480 < 32767) to one
 * vector for sub-block 2j, the high nibbles to one for 2j + 1; madd with ones and a 32-bit
 * multiply by the rows' sub-block scales give 8 int32 row sums. The mins term
 * sum_s m_s * (bsums[2s] + bsums[2s+1]) is one madd per pair of sub-blocks. Per x8 block
 * two float FMAs fold d*dy and dmin*dy. Integer sums are exact, so the result differs from
 * the stored-layout kernels only by float rounding (one conversion per super-block and
 * row instead of eight lanes). One thread, the 8960 x 1536 matrix in cache: 22 -> 36 GB/s.
 *
 * The 32-wide types (32 weights a block; fp16 d, fp16 m for Q4_1/Q5_1):
 *   Q8_0:  d[8]                          16 bytes, qs[8 t][8 r][4]: row r's qs[4t .. 4t+3]
 *   Q4_0/Q4_1/Q5_0/Q5_1: d[8] (m[8]) (qh'[4 t]) qs[4 t][8 r][4]: row r's qs[4t .. 4t+3],
 *     whose low nibbles are weights 4t .. 4t+3 and high nibbles 16+4t .. 16+4t+3.
 *     qh'[t] (64 bits, Q5 only) holds the fifth bits of vector t's bytes: the low nibble's
 *     of byte j = 8k + b (row 2k + b/4) at bit 8b + k, the high nibble's at 8b + 4 + k, so
 *     the broadcast word shifted per qword left by (4, 3, 2, 1) or right by (0, 1, 2, 3)
 *     has every byte's bit at bit 4 (as the pair-packed layout, vecdot_pack.c).
 * Their kernel: per x8 block, the int16 products of the 4 vectors add up (Q4: all 8
 * maddubs, 8 x 2 x 15 x 127 < 32767; Q5: 4 at a time), one madd gives the 8 rows' integer
 * sums, and two FMAs add d*dy * sum and the offset term (-8 d*sy, -16 d*sy, or m*sy with
 * sy = dy * sum(qy), the activation's block sum). Q8_0 weights are signed: each vector
 * goes through |w| . sign(y, w) and its own madd (two products of 128 x 127 fill int16).
 *
 * Every kernel takes 1..4 activation rows (batched decode): the weights are unpacked once
 * and each row goes through the same operations in the same order whatever their number,
 * so a row's result does not depend on its batch. The scalar reference is the stored
 * layout's: skv_x8_row gives the stored blocks back (tests compare through it). */
#include <string.h>
#include "vecdot.h"
#include "vecdot_simd.h"

typedef struct {
    uint16_t d[8], dmin[8];
    uint8_t sc[12 * 8];
    uint8_t qs[4 * 8 * 8 * 4];
} block_q4_K_x8;
_Static_assert(sizeof(block_q4_K_x8) == 8 * sizeof(block_q4_K), "x8 block is 8 stored blocks");

int skv_x8_supported(int type, int64_t rows, int64_t cols) {
    const bool t = type == SKV_Q4_K || type == SKV_Q8_0 || type == SKV_Q4_0 || type == SKV_Q4_1 ||
                   type == SKV_Q5_0 || type == SKV_Q5_1;
    return t && rows > 0 && rows % 8 == 0 && cols > 0 && cols % skv_type_block(type) == 0;
}

/* ---- Q4_K: 8 stored blocks <-> one x8 block ---- */

static void q4k_to_x8(const block_q4_K *const src[8], block_q4_K_x8 *dst) {
    for (int r = 0; r < 8; r++) {
        const block_q4_K *b = src[r];
        dst->d[r] = b->d;
        dst->dmin[r] = b->dmin;
        for (int k = 0; k < 12; k++) dst->sc[8 * k + r] = b->scales[k];
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++) memcpy(dst->qs + 256 * j + 32 * t + 4 * r, b->qs + 32 * j + 4 * t, 4);
    }
}

static void q4k_from_x8(const block_q4_K_x8 *src, int r, block_q4_K *b) {
    b->d = src->d[r];
    b->dmin = src->dmin[r];
    for (int k = 0; k < 12; k++) b->scales[k] = src->sc[8 * k + r];
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < 8; t++) memcpy(b->qs + 32 * j + 4 * t, src->qs + 256 * j + 32 * t + 4 * r, 4);
}

/* ---- the 32-wide types: 8 stored blocks <-> one x8 block ---- */

/* offsets in a stored block (d, m, qh, qs) and in an x8 block (m[8], qh'[4], qs); -1: none */
typedef struct { int m, qh, qs, xm, xqh, xqs; } geom32;
static geom32 geom(int type) {
    switch (type) {
    case SKV_Q8_0: return (geom32){-1, -1, 2, -1, -1, 16};
    case SKV_Q4_0: return (geom32){-1, -1, 2, -1, -1, 16};
    case SKV_Q4_1: return (geom32){2, -1, 4, 16, -1, 32};
    case SKV_Q5_0: return (geom32){-1, 2, 6, -1, 16, 48};
    default:       return (geom32){2, 4, 8, 16, 32, 64};   /* Q5_1 */
    }
}

/* the fifth bit of weight w (0..31) of a stored Q5 block's qh */
static int qbit(const uint8_t *qh, int w) { return (qh[w / 8] >> (w % 8)) & 1; }

static void b32_to_x8(int type, const uint8_t *const src[8], uint8_t *dst) {
    const geom32 g = geom(type);
    const int q8 = type == SKV_Q8_0, nt = q8 ? 8 : 4;
    if (g.xqh >= 0) memset(dst + g.xqh, 0, 32);
    for (int r = 0; r < 8; r++) {
        const uint8_t *b = src[r];
        memcpy(dst + 2 * r, b, 2);
        if (g.m >= 0) memcpy(dst + g.xm + 2 * r, b + g.m, 2);
        for (int t = 0; t < nt; t++) memcpy(dst + g.xqs + 32 * t + 4 * r, b + g.qs + 4 * t, 4);
        if (g.xqh < 0) continue;
        for (int t = 0; t < 4; t++)
            for (int bp = 0; bp < 4; bp++) {   /* byte j = 4r + bp of vector t: qword k, byte-in-qword bb */
                const int k = r / 2, bb = 4 * (r % 2) + bp;
                uint8_t *q = dst + g.xqh + 8 * t;
                q[bb] |= (uint8_t)(qbit(b + g.qh, 4 * t + bp) << k);
                q[bb] |= (uint8_t)(qbit(b + g.qh, 16 + 4 * t + bp) << (4 + k));
            }
    }
}

/* bits k, 8+k, 16+k, 24+k of w as a 4-bit number (the multiply gathers the four
 * isolated bits into bits 24..27 with no carries between the partial products) */
static uint32_t gather4(uint32_t w, int k) { return (((w >> k) & 0x01010101u) * 0x01020408u) >> 24 & 15u; }

static void b32_from_x8(int type, const uint8_t *src, int r, uint8_t *b) {
    const geom32 g = geom(type);
    const int q8 = type == SKV_Q8_0, nt = q8 ? 8 : 4;
    memcpy(b, src + 2 * r, 2);
    if (g.m >= 0) memcpy(b + g.m, src + g.xm + 2 * r, 2);
    for (int t = 0; t < nt; t++) memcpy(b + g.qs + 4 * t, src + g.xqs + 32 * t + 4 * r, 4);
    if (g.xqh < 0) return;
    /* row r's 4 bytes of qh'[t] are bytes 4 (r % 2) .. +3 of the word: weight 4t + bp's bit
     * at bit k of byte bp, weight 16 + 4t + bp's at bit 4 + k (k = r / 2) */
    const int k = r / 2;
    uint32_t qh = 0;
    for (int t = 0; t < 4; t++) {
        uint32_t w;
        memcpy(&w, src + g.xqh + 8 * t + 4 * (r % 2), 4);
        qh |= gather4(w, k) << (4 * t) | gather4(w, 4 + k) << (16 + 4 * t);
    }
    const uint8_t q4[4] = {(uint8_t)qh, (uint8_t)(qh >> 8), (uint8_t)(qh >> 16), (uint8_t)(qh >> 24)};
    memcpy(b + g.qh, q4, 4);
}

void skv_x8_pack_group(int type, const void *src, void *dst, int64_t cols) {
    const int64_t nb = cols / skv_type_block(type);
    const size_t bs = skv_type_block_bytes(type);
    const uint8_t *rows = src;
    uint8_t *out = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *col[8];
        for (int r = 0; r < 8; r++) col[r] = rows + ((size_t)r * (size_t)nb + (size_t)i) * bs;
        if (type == SKV_Q4_K) q4k_to_x8((const block_q4_K *const *)(const void *)col, (block_q4_K_x8 *)(void *)(out + i * 8 * bs));
        else b32_to_x8(type, col, out + i * 8 * bs);
    }
}

void skv_x8_row(int type, const void *group, int r, int64_t b0, int64_t nb, void *dst) {
    const size_t bs = skv_type_block_bytes(type);
    const uint8_t *g = group;
    uint8_t *out = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *x = g + (size_t)(b0 + i) * 8 * bs;
        if (type == SKV_Q4_K) q4k_from_x8((const block_q4_K_x8 *)(const void *)x, r, (block_q4_K *)(void *)(out + i * bs));
        else b32_from_x8(type, x, r, out + i * bs);
    }
}

/* ---- Q4_K ---- */

/* 8 rows (one group, n columns) . nt Q8_K activation rows (row a at xa + a*xstride bytes)
 * -> out[8a .. 8a+7]. The weights are unpacked once for all nt rows; every activation row
 * goes through the same operations in the same order whatever nt, so the results do not
 * depend on how many rows share a call. nt is a literal at each call (1..SKV_DOTN_MAX). */
static inline __attribute__((always_inline)) void dot8n_q4_K(int nt, int64_t n, const block_q4_K_x8 *b,
                                                             const uint8_t *xa, size_t xstride, float *out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc[SKV_DOTN_MAX], accm[SKV_DOTN_MAX];
    for (int a = 0; a < nt; a++) acc[a] = accm[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        const block_q8_K *y[SKV_DOTN_MAX];
        for (int a = 0; a < nt; a++) y[a] = (const block_q8_K *)(const void *)(xa + a * xstride) + i;
        /* the 8 rows' 6-bit scales and mins, [sub-block s][row r] bytes:
         *   s < 4:  sc = q[s] & 63,                          m = q[s+4] & 63
         *   s >= 4: sc = (q[s+4] & 15) | (q[s-4] >> 6) << 4, m = (q[s+4] >> 4) | (q[s] >> 6) << 4 */
        const __m256i q03 = _mm256_loadu_si256((const __m256i *)b->sc);
        const __m256i q47 = _mm256_loadu_si256((const __m256i *)(b->sc + 32));
        const __m256i q811 = _mm256_loadu_si256((const __m256i *)(b->sc + 64));
        const __m256i top03 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q03, 6), m3), 4);
        const __m256i top47 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q47, 6), m3), 4);
        uint8_t sc[64] __attribute__((aligned(32))), mn[64] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sc, _mm256_and_si256(q03, m63));
        _mm256_store_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(q811, m15), top03));
        _mm256_store_si256((__m256i *)mn, _mm256_and_si256(q47, m63));
        _mm256_store_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q811, 4), m15), top47));

        __m256i sumi[SKV_DOTN_MAX];
        for (int a = 0; a < nt; a++) sumi[a] = _mm256_setzero_si256();
        #pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            const uint8_t *q = b->qs + 256 * j;
            __m256i lo[SKV_DOTN_MAX], hi[SKV_DOTN_MAX];   /* int16: 8 maddubs of 2 x 15 x 127 at most */
            for (int a = 0; a < nt; a++) lo[a] = hi[a] = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * t));
                const __m256i l = _mm256_and_si256(v, low4), h = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                for (int a = 0; a < nt; a++) {
                    int32_t ya, yb;
                    memcpy(&ya, y[a]->qs + 64 * j + 4 * t, 4);
                    memcpy(&yb, y[a]->qs + 64 * j + 32 + 4 * t, 4);
                    lo[a] = _mm256_add_epi16(lo[a], _mm256_maddubs_epi16(l, _mm256_set1_epi32(ya)));
                    hi[a] = _mm256_add_epi16(hi[a], _mm256_maddubs_epi16(h, _mm256_set1_epi32(yb)));
                }
            }
            const __m256i s0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j)));
            const __m256i s1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8)));
            for (int a = 0; a < nt; a++)
                sumi[a] = _mm256_add_epi32(sumi[a], _mm256_add_epi32(_mm256_mullo_epi32(_mm256_madd_epi16(lo[a], ones16), s0),
                                                                     _mm256_mullo_epi32(_mm256_madd_epi16(hi[a], ones16), s1)));
        }
        /* mins: per pair of sub-blocks p, lanes (m_2p, m_2p+1) of each row times the
         * activation's sub-block sums (bs_2p, bs_2p+1) (bsums in pairs) */
        __m256i mp[4];
        #pragma GCC unroll 4
        for (int p = 0; p < 4; p++)
            mp[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mn + 16 * p)),
                                                           _mm_loadl_epi64((const __m128i *)(mn + 16 * p + 8))));
        const __m256 dvr = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dmr = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin));
        for (int a = 0; a < nt; a++) {
            const __m256i bsv = _mm256_castsi128_si256(_mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[a]->bsums),
                                                                      _mm_loadu_si128((const __m128i *)(y[a]->bsums + 8))));
            __m256i summ = _mm256_setzero_si256();
            #pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                summ = _mm256_add_epi32(summ, _mm256_madd_epi16(mp[p], _mm256_permutevar8x32_epi32(bsv, _mm256_set1_epi32(p))));
            const __m256 dy = _mm256_set1_ps(y[a]->d);
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dvr, dy), _mm256_cvtepi32_ps(sumi[a]), acc[a]);
            accm[a] = _mm256_fmadd_ps(_mm256_mul_ps(dmr, dy), _mm256_cvtepi32_ps(summ), accm[a]);
        }
    }
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, _mm256_sub_ps(acc[a], accm[a]));
}

/* ---- the 32-wide types ---- */

/* 8 rows (one group, n columns) . nt skv_q8a activation rows -> out[8a .. 8a+7], as
 * dot8n_q4_K; kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1; nt and kind literals at each call. */
static inline __attribute__((always_inline)) void dot8n_32(int kind, int nt, int64_t n, const uint8_t *w,
                                                           const uint8_t *xa, size_t xstride, float *out) {
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t xqs = 16 + (hasm ? 16 : 0) + (q5 ? 32 : 0), bsz = xqs + 128;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1), b4 = _mm256_set1_epi8(0x10);
    const __m256i shl = _mm256_setr_epi64x(4, 3, 2, 1), shr = _mm256_setr_epi64x(0, 1, 2, 3);
    __m256 acc[SKV_DOTN_MAX], acco[SKV_DOTN_MAX];
    for (int a = 0; a < nt; a++) acc[a] = acco[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, w += bsz) {
        const uint8_t *qs = w + xqs, *qh = w + 16 + (hasm ? 16 : 0);
        __m256i lo[4], hi[4];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * t));
            lo[t] = _mm256_and_si256(v, low4);
            hi[t] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (q5) {
                long long hb;
                memcpy(&hb, qh + 8 * t, 8);
                const __m256i h = _mm256_set1_epi64x(hb);
                lo[t] = _mm256_or_si256(lo[t], _mm256_and_si256(_mm256_sllv_epi64(h, shl), b4));
                hi[t] = _mm256_or_si256(hi[t], _mm256_and_si256(_mm256_srlv_epi64(h, shr), b4));
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        const __m256 ov = hasm ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 16))) : dv;
        for (int a = 0; a < nt; a++) {
            const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
            __m256i p[4];
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                int32_t ya, yb;
                memcpy(&ya, y->qs + 4 * t, 4);
                memcpy(&yb, y->qs + 16 + 4 * t, 4);
                p[t] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[t], _mm256_set1_epi32(ya)),
                                        _mm256_maddubs_epi16(hi[t], _mm256_set1_epi32(yb)));
            }
            __m256i isum;
            if (q5)   /* 4 products of 31 x 127 x 2 at most per int16 before the madd */
                isum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), ones16),
                                        _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), ones16));
            else
                isum = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])), ones16);
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(y->d)), _mm256_cvtepi32_ps(isum), acc[a]);
            acco[a] = _mm256_fmadd_ps(ov, _mm256_set1_ps(y->s), acco[a]);
        }
    }
    const __m256 off = _mm256_set1_ps(kind == 0 ? -8.0f : kind == 2 ? -16.0f : 1.0f);
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, _mm256_fmadd_ps(off, acco[a], acc[a]));
}

/* Q8_0: signed weights, |w| . sign(y, w) per vector (a weight of -128 included), one madd
 * each (two products of 128 x 127 fill an int16) */
static inline __attribute__((always_inline)) void dot8n_q8_0(int nt, int64_t n, const uint8_t *w, const uint8_t *xa,
                                                             size_t xstride, float *out) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[SKV_DOTN_MAX];
    for (int a = 0; a < nt; a++) acc[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, w += 272) {
        __m256i s[SKV_DOTN_MAX];
        for (int a = 0; a < nt; a++) s[a] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * t));
            const __m256i av = _mm256_abs_epi8(v);
            for (int a = 0; a < nt; a++) {
                const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
                int32_t ya;
                memcpy(&ya, y->qs + 4 * t, 4);
                s[a] = _mm256_add_epi32(s[a], _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(_mm256_set1_epi32(ya), v)),
                                                                ones16));
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        for (int a = 0; a < nt; a++) {
            const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(y->d)), _mm256_cvtepi32_ps(s[a]), acc[a]);
        }
    }
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, acc[a]);
}

/* one entry per type: nt dispatched to the literal-nt bodies */
#define DOT8N(name, body)                                                                              \
    static void name(int64_t n, const void *w, const void *xa, size_t xstride, int nt, float *out) { \
        const uint8_t *x = xa;                                                                         \
        SKV_DISPATCH_NT(body)                                                                                \
    }
#define B_Q4K(k) dot8n_q4_K(k, n, w, x, xstride, out)
#define B_Q80(k) dot8n_q8_0(k, n, w, x, xstride, out)
#define B_Q40(k) dot8n_32(0, k, n, w, x, xstride, out)
#define B_Q41(k) dot8n_32(1, k, n, w, x, xstride, out)
#define B_Q50(k) dot8n_32(2, k, n, w, x, xstride, out)
#define B_Q51(k) dot8n_32(3, k, n, w, x, xstride, out)
DOT8N(dot8_q4_K, B_Q4K)
DOT8N(dot8_q8_0, B_Q80)
DOT8N(dot8_q4_0, B_Q40)
DOT8N(dot8_q4_1, B_Q41)
DOT8N(dot8_q5_0, B_Q50)
DOT8N(dot8_q5_1, B_Q51)

skv_vec_dot8n_fn skv_vec_dot8n_for(int type) {
    switch (type) {
    case SKV_Q4_K: return dot8_q4_K;
    case SKV_Q8_0: return dot8_q8_0;
    case SKV_Q4_0: return dot8_q4_0;
    case SKV_Q4_1: return dot8_q4_1;
    case SKV_Q5_0: return dot8_q5_0;
    case SKV_Q5_1: return dot8_q5_1;
    default: return NULL;
    }
}
