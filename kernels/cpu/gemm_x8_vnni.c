/* gemm_x8_vnni.c: the fast multi-row kernels of gemm_x8.h, AVX-512 VNNI at 512 bits (the
 * target set per function here, as in vecdot_x8_vnni.c; skv_gemm16_for picks them only
 * where skv_cpu_vnni()).
 *
 * A call covers 16 weight rows: two x8 groups (vecdot_x8.c), group 0 in the low 256 bits of
 * every vector and group 1 in the high, so each 32-bit lane is one weight row, as in the
 * decode kernels. For each block of TB activation rows and each KCOLS-column slice the two
 * groups' blocks are unpacked once into a tile (kpan / wpan below: unsigned 8-bit quants in
 * weight order, 4 weights of each row a lane, plus the rows' scales as int32 / int16 / float
 * lanes), which stays in L1 while every activation row of the block runs over it, 4 at a time
 * (micro-kernels kq4k / kq6k / k32 / kq80: dpbusd with the 4 activation bytes broadcast).
 * Float accumulators live in acc[][] between slices; each is updated block by block in the
 * decode kernel's order, so the slicing changes nothing (gemm_x8.h).
 * Q8_0: weights stored as w + 128 (unsigned) and 128 * sum(y) subtracted: the same int32.
 * Every loop over the nt activation rows is unrolled (#pragma GCC unroll 4; without it GCC kept
 * the accumulators in memory: 3x slower), and each group's stream is prefetched
 * SKV_WEIGHT_PF_BYTES ahead as the decode kernels do.
 * Speed (Zen 4 VM, one thread, 4864 x 1536, T = 256): Q4_K 112-132, Q6_K 112, Q5_0 117, Q4_1
 * 122 GOP/s, against 37-39 for the float GEMM (a loaded machine); the compute probe's int8 peak
 * there is 473 GOP/s a thread (bench/compute_probe.h).
 * With AMX (skv_gemm16_amx_for, K-quants only): the same driver and tile, TB_AMX rows a pass,
 * whole groups of 16 rows through gemm_x8_amx.c's tile products, the rest of the rows here. */
#include <immintrin.h>
#include <string.h>
#include "gemm_x8.h"
#include "gemm_x8_tile.h"
#include "cpu_caps.h"
#include "vecdot.h"
#include "vecdot_simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define KI static inline __attribute__((always_inline))
static inline void st_half(void *dst, __m256i v) { _mm256_store_si256((__m256i *)dst, v); }

/* ---- unpack: group gi (0/1) of x8 block b into tile p ---- */

static void un_q4k(const uint8_t *b, int gi, kpan *p) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15),
                  m3 = _mm256_set1_epi8(3);
    _mm256_store_ps(p->d + 8 * gi, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b)));
    _mm256_store_ps(p->dm + 8 * gi, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16))));
    const uint8_t *s = b + 32;   /* byte k of row r's 12 scale bytes at 8k + r */
    const __m256i q03 = _mm256_loadu_si256((const __m256i *)s), q47 = _mm256_loadu_si256((const __m256i *)(s + 32)),
                  q811 = _mm256_loadu_si256((const __m256i *)(s + 64));
    const __m256i top03 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q03, 6), m3), 4);
    const __m256i top47 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q47, 6), m3), 4);
    uint8_t sc[64] __attribute__((aligned(32))), mn[64] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)sc, _mm256_and_si256(q03, m63));
    _mm256_store_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(q811, m15), top03));
    _mm256_store_si256((__m256i *)mn, _mm256_and_si256(q47, m63));
    _mm256_store_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q811, 4), m15), top47));
    for (int k = 0; k < 8; k++)
        st_half(&p->sc[k][8 * gi], _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * k))));
    for (int q = 0; q < 4; q++)
        st_half(&p->pr[q][16 * gi], _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mn + 16 * q)),
                                                                         _mm_loadl_epi64((const __m128i *)(mn + 16 * q + 8)))));
    const uint8_t *qs = b + 128;
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < 8; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 256 * j + 32 * t));
            st_half(&p->q[16 * j + t][32 * gi], _mm256_and_si256(v, low4));
            st_half(&p->q[16 * j + 8 + t][32 * gi], _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
        }
}

static void un_q6k(const uint8_t *b, int gi, kpan *p) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    _mm256_store_ps(p->d + 8 * gi, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b)));
    const uint8_t *sc = b + 16;   /* row r's scale of group g at 8g + r */
    for (int g = 0; g < 16; g++)
        st_half(&p->sc[g][8 * gi], _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * g))));
    for (int q = 0; q < 8; q++)
        st_half(&p->pr[q][16 * gi], _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(sc + 16 * q)),
                                                                         _mm_loadl_epi64((const __m128i *)(sc + 16 * q + 8)))));
    for (int h = 0; h < 2; h++)
        for (int u = 0; u < 8; u++) {
            const uint8_t *qv = b + 144 + 768 * h + 96 * u;
            const __m256i A = _mm256_loadu_si256((const __m256i *)qv), B = _mm256_loadu_si256((const __m256i *)(qv + 32)),
                          H = _mm256_loadu_si256((const __m256i *)(qv + 64));
            /* quants of weights 128h + 32k + 4u .. +3: chunk 32h + 8k + u */
            st_half(&p->q[32 * h + u][32 * gi], _mm256_or_si256(_mm256_and_si256(A, low4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30)));
            st_half(&p->q[32 * h + 8 + u][32 * gi], _mm256_or_si256(_mm256_and_si256(B, low4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30)));
            st_half(&p->q[32 * h + 16 + u][32 * gi],
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), low4), _mm256_and_si256(H, m30)));
            st_half(&p->q[32 * h + 24 + u][32 * gi], _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), low4),
                                                                    _mm256_and_si256(_mm256_srli_epi16(H, 2), m30)));
        }
}

/* kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1, 4 Q8_0 */
static void un_32(int kind, const uint8_t *w, int gi, wpan *p) {
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
    _mm256_store_ps(p->d + 8 * gi, dv);
    if (kind == 4) {
        const __m256i sgn = _mm256_set1_epi8((char)0x80);
        for (int t = 0; t < 8; t++) st_half(&p->q[t][32 * gi], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + 16 + 32 * t)), sgn));
        return;
    }
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    _mm256_store_ps(p->o + 8 * gi, hasm ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 16))) : dv);
    const uint8_t *qh = w + 16 + (hasm ? 16 : 0), *qs = qh + (q5 ? 32 : 0);
    const __m256i low4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    const __m256i shl = _mm256_setr_epi64x(4, 3, 2, 1), shr = _mm256_setr_epi64x(0, 1, 2, 3);
    for (int t = 0; t < 4; t++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * t));
        __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if (q5) {
            long long hb;
            memcpy(&hb, qh + 8 * t, 8);
            const __m256i h = _mm256_set1_epi64x(hb);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_sllv_epi64(h, shl), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srlv_epi64(h, shr), b4));
        }
        st_half(&p->q[t][32 * gi], lo);
        st_half(&p->q[4 + t][32 * gi], hi);
    }
}

/* ---- micro-kernels: nb tile blocks x nt (literal) activation rows ---- */

KI __m512i bc(const void *p) {   /* 4 activation bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
#define LD(p) _mm512_load_si512((const void *)(p))

KI void kq4k(int nt, int nb, const kpan *P, const uint8_t *x, size_t ab, float *acc) {
    __m512 A[4], M[4];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) { A[a] = _mm512_loadu_ps(acc + 32 * a); M[a] = _mm512_loadu_ps(acc + 32 * a + 16); }
    for (int i = 0; i < nb; i++) {
        const kpan *p = P + i;
        const block_q8_K *y[4];
        __m512i si[4];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) { y[a] = (const block_q8_K *)(const void *)(x + a * ab) + i; si[a] = _mm512_setzero_si512(); }
        #pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            __m512i lo[4], hi[4];
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) lo[a] = hi[a] = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                const __m512i wl = LD(p->q[16 * j + t]), wh = LD(p->q[16 * j + 8 + t]);
                #pragma GCC unroll 4
                for (int a = 0; a < nt; a++) {
                    lo[a] = _mm512_dpbusd_epi32(lo[a], wl, bc(y[a]->qs + 64 * j + 4 * t));
                    hi[a] = _mm512_dpbusd_epi32(hi[a], wh, bc(y[a]->qs + 64 * j + 32 + 4 * t));
                }
            }
            const __m512i s0 = LD(p->sc[2 * j]), s1 = LD(p->sc[2 * j + 1]);
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++)
                si[a] = _mm512_add_epi32(si[a], _mm512_add_epi32(_mm512_mullo_epi32(lo[a], s0), _mm512_mullo_epi32(hi[a], s1)));
        }
        const __m512 d = _mm512_load_ps(p->d), dm = _mm512_load_ps(p->dm);
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            int16_t bs[8];   /* sub-block sums of the activation: pairs of its 16-value sums */
            _mm_storeu_si128((__m128i *)bs, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[a]->bsums),
                                                          _mm_loadu_si128((const __m128i *)(y[a]->bsums + 8))));
            __m512i sm = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int q = 0; q < 4; q++) sm = _mm512_add_epi32(sm, _mm512_madd_epi16(LD(p->pr[q]), bc(bs + 2 * q)));
            const __m512 dy = _mm512_set1_ps(y[a]->d);
            A[a] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(si[a]), A[a]);
            M[a] = _mm512_fmadd_ps(_mm512_mul_ps(dm, dy), _mm512_cvtepi32_ps(sm), M[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) { _mm512_storeu_ps(acc + 32 * a, A[a]); _mm512_storeu_ps(acc + 32 * a + 16, M[a]); }
}

KI void kq6k(int nt, int nb, const kpan *P, const uint8_t *x, size_t ab, float *acc) {
    __m512 A[4];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) A[a] = _mm512_loadu_ps(acc + 32 * a);
    for (int i = 0; i < nb; i++) {
        const kpan *p = P + i;
        const block_q8_K *y[4];
        __m512i si[4];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) { y[a] = (const block_q8_K *)(const void *)(x + a * ab) + i; si[a] = _mm512_setzero_si512(); }
        #pragma GCC unroll 1
        for (int g = 0; g < 16; g += 2) {   /* two groups of 16 weights at a time: 2 chains a row */
            __m512i g0[4], g1[4];
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) g0[a] = g1[a] = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m512i w0 = LD(p->q[4 * g + u]), w1 = LD(p->q[4 * g + 4 + u]);
                #pragma GCC unroll 4
                for (int a = 0; a < nt; a++) {
                    g0[a] = _mm512_dpbusd_epi32(g0[a], w0, bc(y[a]->qs + 16 * g + 4 * u));
                    g1[a] = _mm512_dpbusd_epi32(g1[a], w1, bc(y[a]->qs + 16 * g + 16 + 4 * u));
                }
            }
            const __m512i s0 = LD(p->sc[g]), s1 = LD(p->sc[g + 1]);
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++)
                si[a] = _mm512_add_epi32(si[a], _mm512_add_epi32(_mm512_mullo_epi32(g0[a], s0), _mm512_mullo_epi32(g1[a], s1)));
        }
        const __m512 d = _mm512_load_ps(p->d);
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            __m512i off = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int q = 0; q < 8; q++) off = _mm512_add_epi32(off, _mm512_madd_epi16(LD(p->pr[q]), bc(y[a]->bsums + 2 * q)));
            const __m512i tot = _mm512_sub_epi32(si[a], _mm512_slli_epi32(off, 5));
            A[a] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y[a]->d)), _mm512_cvtepi32_ps(tot), A[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm512_storeu_ps(acc + 32 * a, A[a]);
}

/* Q4_0/Q4_1/Q5_0/Q5_1: acc[a] = (A, O) */
KI void k32(int nt, int nb, const wpan *P, const uint8_t *x, size_t ab, float *acc) {
    __m512 A[4], O[4];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) { A[a] = _mm512_loadu_ps(acc + 32 * a); O[a] = _mm512_loadu_ps(acc + 32 * a + 16); }
    for (int i = 0; i < nb; i++) {
        const wpan *p = P + i;
        __m512i i0[4], i1[4];
        const skv_q8a *y[4];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) { y[a] = (const skv_q8a *)(const void *)(x + a * ab) + i; i0[a] = i1[a] = _mm512_setzero_si512(); }
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i wl = LD(p->q[t]), wh = LD(p->q[4 + t]);
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) {
                i0[a] = _mm512_dpbusd_epi32(i0[a], wl, bc(y[a]->qs + 4 * t));
                i1[a] = _mm512_dpbusd_epi32(i1[a], wh, bc(y[a]->qs + 16 + 4 * t));
            }
        }
        const __m512 d = _mm512_load_ps(p->d), o = _mm512_load_ps(p->o);
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            A[a] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y[a]->d)), _mm512_cvtepi32_ps(_mm512_add_epi32(i0[a], i1[a])), A[a]);
            O[a] = _mm512_fmadd_ps(o, _mm512_set1_ps(y[a]->s), O[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) { _mm512_storeu_ps(acc + 32 * a, A[a]); _mm512_storeu_ps(acc + 32 * a + 16, O[a]); }
}

KI void kq80(int nt, int nb, const wpan *P, const uint8_t *x, size_t ab, float *acc) {
    __m512 A[4];
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) A[a] = _mm512_loadu_ps(acc + 32 * a);
    const __m256i sgn = _mm256_set1_epi8((char)0x80);
    for (int i = 0; i < nb; i++) {
        const wpan *p = P + i;
        __m512i i0[4], i1[4];
        const skv_q8a *y[4];
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) { y[a] = (const skv_q8a *)(const void *)(x + a * ab) + i; i0[a] = i1[a] = _mm512_setzero_si512(); }
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i w0 = LD(p->q[t]), w1 = LD(p->q[4 + t]);
            #pragma GCC unroll 4
            for (int a = 0; a < nt; a++) {
                i0[a] = _mm512_dpbusd_epi32(i0[a], w0, bc(y[a]->qs + 4 * t));
                i1[a] = _mm512_dpbusd_epi32(i1[a], w1, bc(y[a]->qs + 16 + 4 * t));
            }
        }
        const __m512 d = _mm512_load_ps(p->d);
        #pragma GCC unroll 4
        for (int a = 0; a < nt; a++) {
            /* 128 * sum(y): sad of y + 128 against 0 gives 4 sums of 8 (y + 128) */
            const __m256i s4 = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[a]->qs), sgn), _mm256_setzero_si256());
            const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
            const int32_t ysum = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 128 * 32;
            const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(i0[a], i1[a]), _mm512_set1_epi32(128 * ysum));
            A[a] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y[a]->d)), _mm512_cvtepi32_ps(isum), A[a]);
        }
    }
    #pragma GCC unroll 4
    for (int a = 0; a < nt; a++) _mm512_storeu_ps(acc + 32 * a, A[a]);
}

/* ---- driver ---- */

enum { K_Q4K, K_Q6K, K_Q40, K_Q41, K_Q50, K_Q51, K_Q80 };

KI void gemm16(int kind, int amx, int64_t cols, const uint8_t *w, size_t gb, const uint8_t *act, size_t ab, int T,
               float *y, int64_t ldy) {
    const int kq = kind == K_Q4K || kind == K_Q6K;
    const int bw = kq ? 256 : 32;                            /* weights a block */
    const size_t xbs = kq ? (kind == K_Q4K ? 1152 : 1680)    /* bytes of an x8 block */
                          : kind == K_Q80 ? 272 : (size_t)(16 + (kind == K_Q41 || kind == K_Q51 ? 16 : 0) +
                                                           (kind >= K_Q50 && kind <= K_Q51 ? 32 : 0) + 128);
    const size_t yb = kq ? sizeof(block_q8_K) : sizeof(skv_q8a);   /* activation bytes a block */
    const int64_t nbt = cols / bw, nbk = KCOLS / bw;
    tile_buf tile __attribute__((aligned(64)));
    apan scaled[KCOLS / 256] __attribute__((aligned(64)));   /* the AMX K-quant path's weights */
    float acc[TB_AMX * 32] __attribute__((aligned(64)));
    amx = amx && kq && T >= 16;   /* AMX: the K-quants' tiles, and 16 rows or more to make a tile product */
    const int tb = amx ? TB_AMX : TB;
    if (amx) skv_amx_begin();
    for (int t0 = 0; t0 < T; t0 += tb) {
        const int tn = T - t0 < tb ? T - t0 : tb;
        memset(acc, 0, sizeof(float) * 32 * (size_t)tn);
        for (int64_t b0 = 0; b0 < nbt; b0 += nbk) {
            const int nb = (int)(nbt - b0 < nbk ? nbt - b0 : nbk);
            for (int gi = 0; gi < 2; gi++) {
                /* the decode kernels' software prefetch, SKV_WEIGHT_PF_BYTES ahead on each group's
                 * stream: without it a slice's two streams waited on memory (3-6x slower than the
                 * decode kernel on weights in DRAM at T = 3-8) */
                if (t0 == 0) skv_prefetch_ahead(w + gi * gb + (size_t)b0 * xbs, (size_t)nb * xbs);
                for (int i = 0; i < nb; i++) {
                    const uint8_t *b = w + gi * gb + (size_t)(b0 + i) * xbs;
                    if (kind == K_Q4K) un_q4k(b, gi, &tile.k[i]);
                    else if (kind == K_Q6K) un_q6k(b, gi, &tile.k[i]);
                    else un_32(kind - K_Q40, b, gi, &tile.w[i]);
                }
            }
            const uint8_t *x = act + (size_t)t0 * ab + (size_t)b0 * yb;
            int a0 = 0;
            if (amx && tn >= 16) {   /* whole groups of 16 rows as AMX tile products, the rest below */
                for (int i = 0; i < nb; i++) skv_amx_scale_tile(kind == K_Q6K, &tile.k[i], &scaled[i]);
                a0 = tn / 16 * 16;
                skv_amx_kq(kind == K_Q6K, a0, nb, tile.k, scaled, x, ab, acc);
            }
            for (; a0 < tn; a0 += 4) {
                const int nt = tn - a0 < 4 ? tn - a0 : 4;
                const uint8_t *xa = x + (size_t)a0 * ab;
                float *ac = acc + 32 * a0;
#define RUN(NT)                                                        \
    do {                                                               \
        if (kind == K_Q4K) kq4k(NT, nb, tile.k, xa, ab, ac);          \
        else if (kind == K_Q6K) kq6k(NT, nb, tile.k, xa, ab, ac);     \
        else if (kind == K_Q80) kq80(NT, nb, tile.w, xa, ab, ac);     \
        else k32(NT, nb, tile.w, xa, ab, ac);                         \
    } while (0)
                switch (nt) {
                case 4: RUN(4); break;
                case 3: RUN(3); break;
                case 2: RUN(2); break;
                default: RUN(1); break;
                }
#undef RUN
            }
        }
        const float off = kind == K_Q40 ? -8.0f : kind == K_Q50 ? -16.0f : 1.0f;
        for (int a = 0; a < tn; a++) {
            const __m512 A = _mm512_load_ps(acc + 32 * a), B = _mm512_load_ps(acc + 32 * a + 16);
            __m512 o = A;
            if (kind == K_Q4K) o = _mm512_sub_ps(A, B);
            else if (kind != K_Q6K && kind != K_Q80) o = _mm512_fmadd_ps(_mm512_set1_ps(off), B, A);
            _mm512_storeu_ps(y + (size_t)(t0 + a) * ldy, o);
        }
    }
}

#define G16(name, kind, amx)                                                                                      \
    static void name(int64_t cols, const void *w, size_t gb, const uint8_t *act, size_t ab, int T, float *y,     \
                     int64_t ldy) {                                                                               \
        gemm16(kind, amx, cols, w, gb, act, ab, T, y, ldy);                                                       \
    }
G16(g16_q4k, K_Q4K, 0)
G16(g16_q6k, K_Q6K, 0)
G16(g16_q40, K_Q40, 0)
G16(g16_q41, K_Q41, 0)
G16(g16_q50, K_Q50, 0)
G16(g16_q51, K_Q51, 0)
G16(g16_q80, K_Q80, 0)
G16(a16_q4k, K_Q4K, 1)
G16(a16_q6k, K_Q6K, 1)

skv_gemm16_fn skv_gemm16_vnni_for(int type) {
    switch (type) {
    case SKV_Q4_K: return g16_q4k;
    case SKV_Q6_K: return g16_q6k;
    case SKV_Q4_0: return g16_q40;
    case SKV_Q4_1: return g16_q41;
    case SKV_Q5_0: return g16_q50;
    case SKV_Q5_1: return g16_q51;
    case SKV_Q8_0: return g16_q80;
    default: return NULL;
    }
}

/* AMX for the K-quants; the 32-wide types keep the VNNI kernel: their float scale every 32
 * columns needs a C tile store per block, which made the AMX kernel no faster (Q5_0 1.09x) or
 * slower (Q8_0 0.8x) than VNNI (one thread, 1536 x 1536, T = 256) */
skv_gemm16_fn skv_gemm16_amx_for(int type) {
    switch (type) {
    case SKV_Q4_K: return a16_q4k;
    case SKV_Q6_K: return a16_q6k;
    default: return skv_gemm16_vnni_for(type);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

skv_gemm16_fn skv_gemm16_for(int type) {
    return skv_cpu_amx() ? skv_gemm16_amx_for(type) : skv_cpu_vnni() ? skv_gemm16_vnni_for(type) : NULL;
}
