/* vecdot_simd.h: AVX2 pieces shared by the dot kernels (vecdot.c, vecdot_q.c, vecdot_k.c,
 * vecdot_n.c, vecdot_x8.c) and the weight-stream prefetch they use, so the one-row, four-row and N-activation kernels unpack weights with the
 * same instructions (their results must stay bit-identical to each other). Internal. */
#ifndef SKV_VECDOT_SIMD_H
#define SKV_VECDOT_SIMD_H
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include "vecdot.h"

/* Software prefetch of a decode GEMV's weight stream: the lines SKV_WEIGHT_PF_BYTES ahead of
 * the `bytes` in use, into L1. A decode GEMV streams each thread's share of a matrix once; on
 * an Intel Xeon VM (Sapphire / Emerald Rapids class, 2 vCPUs) the hardware prefetchers alone
 * kept one thread at 53-88 % of the read probe's bandwidth (bench_kernels --gemv, 8-row
 * groups, from memory); 1 KiB ahead gave 72-91 %, 4 KiB 80-96 %. In the models (make
 * bench-ab, 2 threads, decode step time against none): 1 KiB 0.84-0.88, 4 KiB 0.64 / 0.79
 * (SmolLM2 at 512 / 2048 tokens), 0.76 / 0.77 (Qwen2.5-Coder-0.5B), 0.81 / 0.82 (1.5B);
 * 2 KiB was ~10 % slower than 4 for SmolLM2, 8 KiB the same as 4, prefetcht1 ~7 % slower
 * than t0 (docs/performance.md; the runs: docs/lab/performance-notebook.md). Rows and
 * groups are contiguous, so past the end of a row or a thread's share the lines are the next
 * row's, the next share's or the next tensor's. always_inline: GCC 12 deletes calls to a non-inlined function whose only
 * statements are prefetches (attention.c's top comment). */
#define SKV_WEIGHT_PF_BYTES 4096
static inline __attribute__((always_inline)) void skv_prefetch_ahead(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + SKV_WEIGHT_PF_BYTES + o, _MM_HINT_T0);
}

/* The N-activation kernels take nt (1..SKV_DOTN_MAX) as a literal in their bodies: CALL(k)
 * for k = nt (4 for anything larger), in a function with `int nt` in scope. */
#define SKV_DISPATCH_NT(CALL)   \
    switch (nt) {               \
    case 1: CALL(1); break;     \
    case 2: CALL(2); break;     \
    case 3: CALL(3); break;     \
    default: CALL(4); break;    \
    }

/* ---- 32-wide block types (Q4_0/Q4_1/Q5_0/Q5_1, Q8 activations) ---- */

/* (dy0, s0, dy1, s1) of activation blocks y0, y1 */
static inline __m128 skv_act_pair(const skv_q8a *y0, const skv_q8a *y1) {
    __m128d lo = _mm_load_sd((const double *)(const void *)&y0->d);
    return _mm_castpd_ps(_mm_loadh_pd(lo, (const double *)(const void *)&y1->d));
}
/* the first 4 bytes of two blocks (fp16 d, m) -> (d0, m0, d1, m1); built with movd + pinsrd
 * from memory (no extra zeroing move) */
static inline __m128 skv_half2_pair(const void *b0, const void *b1) {
    int32_t u0, u1;
    __builtin_memcpy(&u0, b0, 4);
    __builtin_memcpy(&u1, b1, 4);
    return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(u0), u1, 1));
}
/* two 16-byte chunks -> (lo | hi) */
static inline __m256i skv_load2x16(const void *lo, const void *hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                   _mm_loadu_si128((const __m128i *)hi), 1);
}
/* the fifth bits of two Q5 blocks (lane 0 = block 0, lane 1 = block 1):
 * (lo, hi) = bytes 0x10 where the bit of weight j (lo: j < 16, hi: j >= 16) is set.
 * One pshufb + and + min per vector (a cmpeq form needs one more op): each lane holds qh
 * (dword 0) and qh << 4 (dword 1); output byte j takes the byte holding bit j from dword 0 if j % 8 >= 4, else
 * from dword 1 where that bit sits 4 places higher, so the tested bit is always one of
 * 0x10..0x80 (mask 0x80402010 per 4 bytes) and min(byte & mask, 0x10) is the 0x10 byte. */
static inline void skv_highbits_pair(const uint8_t *qh0, const uint8_t *qh1, __m256i *lo, __m256i *hi) {
    uint32_t u0, u1;
    __builtin_memcpy(&u0, qh0, 4);
    __builtin_memcpy(&u1, qh1, 4);
    __m256i v = _mm256_blend_epi32(_mm256_set1_epi32((int)u0), _mm256_set1_epi32((int)u1), 0xf0);
    v = _mm256_sllv_epi32(v, _mm256_setr_epi32(0, 4, 0, 0, 0, 4, 0, 0));
    const __m256i shlo = _mm256_setr_epi64x(0x0000000004040404LL, 0x0101010105050505LL,
                                            0x0000000004040404LL, 0x0101010105050505LL);
    const __m256i shhi = _mm256_setr_epi64x(0x0202020206060606LL, 0x0303030307070707LL,
                                            0x0202020206060606LL, 0x0303030307070707LL);
    const __m256i bits = _mm256_set1_epi32((int)0x80402010u);
    const __m256i b4 = _mm256_set1_epi8(0x10);
    *lo = _mm256_min_epu8(_mm256_and_si256(_mm256_shuffle_epi8(v, shlo), bits), b4);
    *hi = _mm256_min_epu8(_mm256_and_si256(_mm256_shuffle_epi8(v, shhi), bits), b4);
}

/* The quants of two consecutive 32-wide blocks b0, b1 (qs at byte qoff; for Q5 kinds the
 * fifth bits at qoff - 4): lo = weights 0..15 of each block (lane 0 = b0, lane 1 = b1),
 * hi = weights 16..31, unsigned (0..15, or 0..31 with q5). */
static inline __attribute__((always_inline)) void skv_quants_pair32(int q5, const uint8_t *b0, const uint8_t *b1,
                                                                    size_t qoff, __m256i *lo, __m256i *hi) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i v = skv_load2x16(b0 + qoff, b1 + qoff);
    *lo = _mm256_and_si256(v, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if (q5) {
        __m256i hl, hh;
        skv_highbits_pair(b0 + qoff - 4, b1 + qoff - 4, &hl, &hh);
        *lo = _mm256_or_si256(*lo, hl);
        *hi = _mm256_or_si256(*hi, hh);
    }
}

/* ---- the 4-row / 4-activation kernels' final reduction ---- */

/* (hsum a0, hsum a1, hsum a2, hsum a3) */
static inline __m128 skv_hsum4x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
/* the 32-wide nibble types' 4 results: row sums a (8 lanes each) + off * the offset terms,
 * lanes 1 and 3 of each c; off = -8 (Q4_0), -16 (Q5_0), 1 (Q4_1, Q5_1: the min) */
static inline __m128 skv_rows4_32(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m128 c0, __m128 c1, __m128 c2,
                                  __m128 c3, float off) {
    const __m128 c = _mm_hadd_ps(_mm_shuffle_ps(c0, c1, 0xdd), _mm_shuffle_ps(c2, c3, 0xdd));
    return _mm_fmadd_ps(_mm_set1_ps(off), c, skv_hsum4x8(a0, a1, a2, a3));
}
/* off of skv_rows4_32 for kind 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1 */
static inline float skv_off32(int kind) { return kind == 0 ? -8.0f : kind == 2 ? -16.0f : 1.0f; }

/* ---- k-quants ---- */

/* The 12 packed 6-bit scale/min bytes of a Q4_K / Q5_K super-block -> 16 bytes:
 * sc[0..7] in bytes 0..7, m[0..7] in bytes 8..15. */
static inline __m128i skv_kq_unpack_scales(const uint8_t *sc12) {
    uint32_t u[4];
    __builtin_memcpy(u, sc12, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mlo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mlo;
    u[0] &= 0x3f3f3f3fu;
    return _mm_loadu_si128((const __m128i *)u);
}

/* Byte-shuffle controls on 16-bit scales broadcast to both lanes:
 * skv_kq_pick[k]  int16 lane k in every int16 (Q4_K / Q5_K sub-block k's scale);
 * skv_q6k_pick[k] int16 lanes 2k (low 128 bits) and 2k+1 (high 128 bits) (Q6_K: the two
 *                 16-weight groups of 32 weights). */
#define SKV_PICK1(k) { 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
                       2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
                       2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
                       2*(k), 2*(k)+1 }
#define SKV_PICK2(k) { 4*(k), 4*(k)+1, 4*(k), 4*(k)+1, 4*(k), 4*(k)+1, 4*(k), 4*(k)+1, \
                       4*(k), 4*(k)+1, 4*(k), 4*(k)+1, 4*(k), 4*(k)+1, 4*(k), 4*(k)+1, \
                       4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3, \
                       4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3, 4*(k)+2, 4*(k)+3 }
static const uint8_t skv_kq_pick[8][32] __attribute__((aligned(32))) = {
    SKV_PICK1(0), SKV_PICK1(1), SKV_PICK1(2), SKV_PICK1(3), SKV_PICK1(4), SKV_PICK1(5), SKV_PICK1(6), SKV_PICK1(7)};
static const uint8_t skv_q6k_pick[4][32] __attribute__((aligned(32))) = {
    SKV_PICK2(0), SKV_PICK2(1), SKV_PICK2(2), SKV_PICK2(3)};
#undef SKV_PICK1
#undef SKV_PICK2

#endif
