/* vecdot_x8_kernels.h: the bodies of the 8-row group GEMV kernels (the layout and the
 * algorithm: vecdot_x8.c's top comment), included twice:
 *   vecdot_x8.c       X8_VNNI 0: AVX2 (maddubs into int16, madd into int32)
 *   vecdot_x8_vnni.c  X8_VNNI 1: compiled for AVX-512 VL/BW/VNNI, still 256-bit vectors:
 *                     dpbusd gives the same int32 sums in one instruction, and the 32
 *                     vector registers leave the compiler no spills.
 * The integer sums are exact either way and the float operations are the same, in the same
 * order, so both give the same bits (tests/test_matmul.c compares them).
 * Before including: X8_VNNI (0/1), X8_FOR (the name of the per-type table function). */
#include <string.h>
#include "vecdot.h"
#include "vecdot_simd.h"

#define X8_INLINE static inline __attribute__((always_inline))
/* Every loop over the nt activation rows carries `#pragma GCC unroll 4`: without it GCC kept
 * the per-row accumulators (lo[a], hi[a], sumi[a], ...) in memory and looped over a at run
 * time, so nt = 2..4 ran 3-5x slower per row than nt = 1 (the same bits either way). */


typedef struct {
    uint16_t d[8], dmin[8];
    uint8_t sc[12 * 8];
    uint8_t qs[4 * 8 * 8 * 4];
} block_q4_K_x8;
_Static_assert(sizeof(block_q4_K_x8) == 8 * sizeof(block_q4_K), "x8 block is 8 stored blocks");
typedef struct {
    uint16_t d[8];
    int8_t sc[16 * 8];
    uint8_t q[2 * 8 * 3 * 8 * 4];
} block_q6_K_x8;
_Static_assert(sizeof(block_q6_K_x8) == 8 * sizeof(block_q6_K), "x8 block is 8 stored blocks");

/* sum over pairs q < np of madd(sp[q], pair q of bsv): each row lane's int16 pair (sub-block
 * scale or min of sub-blocks 2q, 2q + 1) times the activation's int16 pair q of bsv (int32
 * lane q), the k-quants' per-row offset terms */
X8_INLINE __m256i x8_pair_dots(const __m256i *sp, int np, __m256i bsv) {
    __m256i sum = _mm256_setzero_si256();
    #pragma GCC unroll 8
    for (int q = 0; q < np; q++)
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(sp[q], _mm256_permutevar8x32_epi32(bsv, _mm256_set1_epi32(q))));
    return sum;
}

/* ---- Q4_K ---- */

/* 8 rows (one group, n columns) . nt Q8_K activation rows (row a at xa + a*xstride bytes)
 * -> out[8a .. 8a+7]. The weights are unpacked once for all nt rows; every activation row
 * goes through the same operations in the same order whatever nt, so the results do not
 * depend on how many rows share a call. nt is a literal at each call (1..SKV_DOTN_MAX). */
X8_INLINE void dot8n_q4_K(int nt, int64_t n, const block_q4_K_x8 *b, const uint8_t *xa, size_t xstride,
                          float *out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    (void)ones16;
    const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc[SKV_DOTN_MAX], accm[SKV_DOTN_MAX];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) acc[a] = accm[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        skv_prefetch_ahead(b, sizeof *b);
        const block_q8_K *y[SKV_DOTN_MAX];
        #pragma GCC unroll 4
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
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) sumi[a] = _mm256_setzero_si256();
        #pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            const uint8_t *q = b->qs + 256 * j;
            /* AVX2: int16 sums of 8 maddubs (2 x 15 x 127 at most each), then one madd;
             * VNNI: the same int32 sums from dpbusd directly */
            __m256i lo[SKV_DOTN_MAX], hi[SKV_DOTN_MAX];
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) lo[a] = hi[a] = _mm256_setzero_si256();
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * t));
#if X8_VNNI   /* high nibbles in place (16 x the quant, still a u8): one shift per sub-block, below */
                const __m256i l = _mm256_and_si256(v, low4), h = _mm256_andnot_si256(low4, v);
#else
                const __m256i l = _mm256_and_si256(v, low4), h = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#endif
                #pragma GCC unroll 4
                for (int a = 0; a < nt; a++) {
                    int32_t ya, yb;
                    memcpy(&ya, y[a]->qs + 64 * j + 4 * t, 4);
                    memcpy(&yb, y[a]->qs + 64 * j + 32 + 4 * t, 4);
#if X8_VNNI
                    lo[a] = _mm256_dpbusd_epi32(lo[a], l, _mm256_set1_epi32(ya));
                    hi[a] = _mm256_dpbusd_epi32(hi[a], h, _mm256_set1_epi32(yb));
#else
                    lo[a] = _mm256_add_epi16(lo[a], _mm256_maddubs_epi16(l, _mm256_set1_epi32(ya)));
                    hi[a] = _mm256_add_epi16(hi[a], _mm256_maddubs_epi16(h, _mm256_set1_epi32(yb)));
#endif
                }
            }
#if X8_VNNI
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) hi[a] = _mm256_srai_epi32(hi[a], 4);   /* exact: a multiple of 16 */
#else
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) {
                lo[a] = _mm256_madd_epi16(lo[a], ones16);
                hi[a] = _mm256_madd_epi16(hi[a], ones16);
            }
#endif
            const __m256i s0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j)));
            const __m256i s1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8)));
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++)
                sumi[a] = _mm256_add_epi32(sumi[a], _mm256_add_epi32(_mm256_mullo_epi32(lo[a], s0), _mm256_mullo_epi32(hi[a], s1)));
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
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            const __m256i bsv = _mm256_castsi128_si256(_mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[a]->bsums),
                                                                      _mm_loadu_si128((const __m128i *)(y[a]->bsums + 8))));
            const __m256i summ = x8_pair_dots(mp, 4, bsv);
            const __m256 dy = _mm256_set1_ps(y[a]->d);
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dvr, dy), _mm256_cvtepi32_ps(sumi[a]), acc[a]);
            accm[a] = _mm256_fmadd_ps(_mm256_mul_ps(dmr, dy), _mm256_cvtepi32_ps(summ), accm[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, _mm256_sub_ps(acc[a], accm[a]));
}

/* ---- Q6_K ---- */

/* 8 rows (one group, n columns) . nt Q8_K activation rows -> out[8a .. 8a+7], as
 * dot8n_q4_K. Per (h, k, j): the 16 weights 128h + 32k + 16j .. +15 (group 8h + 2k + j) are
 * the 4 vectors u = 4j .. 4j + 3 of quants k; AVX2 sums each pair of maddubs in int16
 * (2 x 2 x 63 x 127 = 32004 < 32767) and madds the two pairs, VNNI dpbusds the four: the
 * same int32 group sums, times the rows' group scales. */
X8_INLINE void dot8n_q6_K(int nt, int64_t n, const block_q6_K_x8 *b, const uint8_t *xa, size_t xstride, float *out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), ones16 = _mm256_set1_epi16(1);
    (void)ones16;
    __m256 acc[SKV_DOTN_MAX];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) acc[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++) {
        skv_prefetch_ahead(b, sizeof *b);
        const block_q8_K *y[SKV_DOTN_MAX];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) y[a] = (const block_q8_K *)(const void *)(xa + a * xstride) + i;
        __m256i sumi[SKV_DOTN_MAX];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) sumi[a] = _mm256_setzero_si256();
        #pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            #pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                __m256i g[SKV_DOTN_MAX][4];   /* [a][k]: int32 sums of group 8h + 2k + j */
#if !X8_VNNI
                __m256i p[SKV_DOTN_MAX][4];   /* int16: one pair of u's */
#endif
                #pragma GCC unroll 4
                for (int uu = 0; uu < 4; uu++) {
                    const int u = 4 * j + uu;
                    const uint8_t *qv = b->q + 768 * h + 96 * u;
                    const __m256i A = _mm256_loadu_si256((const __m256i *)qv);
                    const __m256i B = _mm256_loadu_si256((const __m256i *)(qv + 32));
                    const __m256i H = _mm256_loadu_si256((const __m256i *)(qv + 64));
                    __m256i q[4];
                    q[0] = _mm256_or_si256(_mm256_and_si256(A, low4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
                    q[1] = _mm256_or_si256(_mm256_and_si256(B, low4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
                    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), low4), _mm256_and_si256(H, m30));
                    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
                    #pragma GCC unroll 4
                    for (int a = 0; a < nt; a++) {
                        #pragma GCC unroll 4
                        for (int k = 0; k < 4; k++) {
                            int32_t yv;
                            memcpy(&yv, y[a]->qs + 128 * h + 32 * k + 4 * u, 4);
#if X8_VNNI
                            const __m256i prev = uu == 0 ? _mm256_setzero_si256() : g[a][k];
                            g[a][k] = _mm256_dpbusd_epi32(prev, q[k], _mm256_set1_epi32(yv));
#else
                            const __m256i m = _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(yv));
                            if (uu % 2 == 0) p[a][k] = m;
                            else {
                                const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(p[a][k], m), ones16);
                                g[a][k] = uu == 1 ? s : _mm256_add_epi32(g[a][k], s);
                            }
#endif
                        }
                    }
                }
                #pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->sc + 8 * (8 * h + 2 * k + j))));
                    #pragma GCC unroll 4
                    for (int a = 0; a < nt; a++) sumi[a] = _mm256_add_epi32(sumi[a], _mm256_mullo_epi32(g[a][k], sc));
                }
            }
        }
        /* the -32 offset: per pair of groups p, lanes (sc_2p, sc_2p+1) of each row times the
         * activation's (bsums_2p, bsums_2p+1) */
        __m256i sp[8];
        #pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            sp[q] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(b->sc + 16 * q)),
                                                           _mm_loadl_epi64((const __m128i *)(b->sc + 16 * q + 8))));
        const __m256 dvr = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            const __m256i bsv = _mm256_loadu_si256((const __m256i *)y[a]->bsums);
            const __m256i off = x8_pair_dots(sp, 8, bsv);
            const __m256i tot = _mm256_sub_epi32(sumi[a], _mm256_slli_epi32(off, 5));
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dvr, _mm256_set1_ps(y[a]->d)), _mm256_cvtepi32_ps(tot), acc[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, acc[a]);
}

/* ---- the 32-wide types ---- */

/* 8 rows (one group, n columns) . nt skv_q8a activation rows -> out[8a .. 8a+7], as
 * dot8n_q4_K; kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1; nt and kind literals at each call. */
X8_INLINE void dot8n_32(int kind, int nt, int64_t n, const uint8_t *w, const uint8_t *xa, size_t xstride,
                        float *out) {
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t xqs = 16 + (hasm ? 16 : 0) + (q5 ? 32 : 0), bsz = xqs + 128;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1), b4 = _mm256_set1_epi8(0x10);
    (void)ones16;
    const __m256i shl = _mm256_setr_epi64x(4, 3, 2, 1), shr = _mm256_setr_epi64x(0, 1, 2, 3);
    __m256 acc[SKV_DOTN_MAX], acco[SKV_DOTN_MAX];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) acc[a] = acco[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, w += bsz) {
        skv_prefetch_ahead(w, bsz);
        const uint8_t *qs = w + xqs, *qh = w + 16 + (hasm ? 16 : 0);
        __m256i lo[4], hi[4];
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * t));
            lo[t] = _mm256_and_si256(v, low4);
            /* VNNI, Q4: high nibbles in place (16 x the quant), the sum shifted back once */
            hi[t] = X8_VNNI && !q5 ? _mm256_andnot_si256(low4, v) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
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
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
            __m256i isum;
#if X8_VNNI   /* two dpbusd chains (low and high nibbles): the same int32 sums */
            __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                int32_t ya, yb;
                memcpy(&ya, y->qs + 4 * t, 4);
                memcpy(&yb, y->qs + 16 + 4 * t, 4);
                i0 = _mm256_dpbusd_epi32(i0, lo[t], _mm256_set1_epi32(ya));
                i1 = _mm256_dpbusd_epi32(i1, hi[t], _mm256_set1_epi32(yb));
            }
            isum = _mm256_add_epi32(i0, q5 ? i1 : _mm256_srai_epi32(i1, 4));   /* exact: a multiple of 16 */
#else
            __m256i p[4];
            #pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                int32_t ya, yb;
                memcpy(&ya, y->qs + 4 * t, 4);
                memcpy(&yb, y->qs + 16 + 4 * t, 4);
                p[t] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[t], _mm256_set1_epi32(ya)),
                                        _mm256_maddubs_epi16(hi[t], _mm256_set1_epi32(yb)));
            }
            if (q5)   /* 4 products of 31 x 127 x 2 at most per int16 before the madd */
                isum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), ones16),
                                        _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), ones16));
            else
                isum = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])), ones16);
#endif
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(y->d)), _mm256_cvtepi32_ps(isum), acc[a]);
            acco[a] = _mm256_fmadd_ps(ov, _mm256_set1_ps(y->s), acco[a]);
        }
    }
    const __m256 off = _mm256_set1_ps(kind == 0 ? -8.0f : kind == 2 ? -16.0f : 1.0f);
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, _mm256_fmadd_ps(off, acco[a], acc[a]));
}

/* Q8_0: signed weights, |w| . sign(y, w) per vector (a weight of -128 included), one madd
 * each (two products of 128 x 127 fill an int16) */
X8_INLINE void dot8n_q8_0(int nt, int64_t n, const uint8_t *w, const uint8_t *xa, size_t xstride, float *out) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    (void)ones16;   /* VNNI: dpbusd adds the pairs itself */
    __m256 acc[SKV_DOTN_MAX];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) acc[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, w += 272) {
        skv_prefetch_ahead(w, 272);
        __m256i s[SKV_DOTN_MAX];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) s[a] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * t));
            const __m256i av = _mm256_abs_epi8(v);
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) {
                const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
                int32_t ya;
                memcpy(&ya, y->qs + 4 * t, 4);
#if X8_VNNI
                s[a] = _mm256_dpbusd_epi32(s[a], av, _mm256_sign_epi8(_mm256_set1_epi32(ya), v));
#else
                s[a] = _mm256_add_epi32(s[a], _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(_mm256_set1_epi32(ya), v)),
                                                                ones16));
#endif
            }
        }
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            const skv_q8a *y = (const skv_q8a *)(const void *)(xa + a * xstride) + i;
            acc[a] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(y->d)), _mm256_cvtepi32_ps(s[a]), acc[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm256_storeu_ps(out + 8 * a, acc[a]);
}

/* one entry per type: nt dispatched to the literal-nt bodies */
#define DOT8N(name, body)                                                                              \
    static void name(int64_t n, const void *w, const void *xa, size_t xstride, int nt, float *out) { \
        const uint8_t *x = xa;                                                                         \
        SKV_DISPATCH_NT(body)                                                                                \
    }
#define B_Q4K(k) dot8n_q4_K(k, n, w, x, xstride, out)
#define B_Q6K(k) dot8n_q6_K(k, n, w, x, xstride, out)
#define B_Q80(k) dot8n_q8_0(k, n, w, x, xstride, out)
#define B_Q40(k) dot8n_32(0, k, n, w, x, xstride, out)
#define B_Q41(k) dot8n_32(1, k, n, w, x, xstride, out)
#define B_Q50(k) dot8n_32(2, k, n, w, x, xstride, out)
#define B_Q51(k) dot8n_32(3, k, n, w, x, xstride, out)
DOT8N(dot8_q4_K, B_Q4K)
DOT8N(dot8_q6_K, B_Q6K)
DOT8N(dot8_q8_0, B_Q80)
DOT8N(dot8_q4_0, B_Q40)
DOT8N(dot8_q4_1, B_Q41)
DOT8N(dot8_q5_0, B_Q50)
DOT8N(dot8_q5_1, B_Q51)

skv_vec_dot8n_fn X8_FOR(int type) {
    switch (type) {
    case SKV_Q4_K: return dot8_q4_K;
    case SKV_Q6_K: return dot8_q6_K;
    case SKV_Q8_0: return dot8_q8_0;
    case SKV_Q4_0: return dot8_q4_0;
    case SKV_Q4_1: return dot8_q4_1;
    case SKV_Q5_0: return dot8_q5_0;
    case SKV_Q5_1: return dot8_q5_1;
    default: return NULL;
    }
}
