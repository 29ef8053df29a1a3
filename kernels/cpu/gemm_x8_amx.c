/* gemm_x8_amx.c: AMX int8 micro-kernels of the multi-row kernels (gemm_x8.h) for Q4_K and
 * Q6_K: 16 activation rows x 16 weight rows a tile product (TDPBSUD / TDPBSSD, int32 C).
 *
 * A K-quant's integer part per super-block is sum_g sc_g * sum_{k in g} y_k q_k: a scale every
 * 32 (Q4_K) or 16 (Q6_K) columns, which would need a C tile store and a vector multiply per
 * group. Here the scales are folded into the weights (skv_amx_scale_tile): w = sc * q, split
 * into bytes w = lo + 256 hi, so the super-block's sum is C_lo + 256 C_hi, two products over
 * all 256 columns (4 tile products of 64 columns each) and two C stores a super-block. Exact in
 * int32, so the same integers as the VNNI chains, and the float part after it is the VNNI
 * micro-kernels' (gemm_x8_vnni.c) operation for operation: the decode kernel's bits.
 *
 * Measured (Xeon with AMX, Sapphire Rapids class VM, one thread, `bench_kernels --multirow`):
 * Q4_K 3.69-3.82 ms VNNI / 2.38-2.43 AMX, Q6_K 4.16 / 2.15. Of the AMX kernel's time the
 * products are ~45 % (each 64-column step's B tile load waits for the previous product to
 * release the register), the float part ~30 %, the tile unpack ~25 % (docs/performance.md).
 * Linux hands out the tile state only to a process that asks (arch_prctl, in cpu_caps.c). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>
#include "gemm_x8_tile.h"
#include "vecdot.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
#endif

#define KI static inline __attribute__((always_inline))
#define LD(p) _mm512_load_si512((const void *)(p))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* every tile 16 rows x 64 bytes. Static: GCC drops the stores to a local configuration that
 * only ldtilecfg reads. */
static const tile_config cfg __attribute__((aligned(64))) = {
    .palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

/* Once per thread: ldtilecfg (which also zeroes the tiles) cost ~2 % of a prefill when each
 * 16-row call loaded it. The tiles stay configured for the thread's life (the kernel then
 * saves their 8 KiB on a context switch); nothing else in the process uses them. */
void skv_amx_begin(void) {
    static _Thread_local int configured;
    if (!configured) {
        _tile_loadconfig(&cfg);
        configured = 1;
    }
}

KI __m512i bc(const void *p) {   /* 4 activation bytes to every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* ---- K-quants: the scales folded into the weights ----
 * A K-quant's integer part is sum_g sc_g * sum_{k in g} y_k q_k = sum_k y_k (sc_g(k) q_k): with
 * w = sc * q per weight (Q4_K: 0 .. 945; Q6_K: w = sc * (q - 32), its offset folded in too,
 * -4064 .. 4096) split as w = lo + 256 hi (lo the low byte, unsigned; hi = w >> 8, signed:
 * Q4_K 0 .. 3, Q6_K -16 .. 16), the super-block's sum is C_lo + 256 C_hi, two int8 products
 * over the whole 256 columns: four K = 64 tile products each, one C tile store per super-block
 * instead of one per scale group. Exact in int32. */

/* one super-block of a kpan as scaled weights (w = lo + 256 hi), chunk c of 4 weights as kpan.
 * In 16-bit lanes: the even bytes' w = (q & 255) * sc and the odd bytes' (q >> 8) * sc; lo
 * takes each w's low byte, hi its high byte (two's complement: the byte of w >> 8), all in
 * place, so no byte packing across lanes. */
void skv_amx_scale_tile(int q6, const kpan *p, apan *o) {
    const __m512i m00ff = _mm512_set1_epi16(0x00ff);
    const __m512i off = _mm512_set1_epi16(q6 ? 32 : 0);   /* Q6_K's -32 folded in as well */
    const int per = q6 ? 4 : 8;   /* chunks a scale group */
    for (int g = 0; g < 64 / per; g++) {
        const __m512i sc = LD(p->sc[g]);   /* the lane's scale in both of its words */
        const __m512i scw = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(sc, 16));
        for (int c = per * g; c < per * (g + 1); c++) {
            const __m512i q = LD(p->q[c]);
            const __m512i we = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(q, m00ff), off), scw);
            const __m512i wo = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(q, 8), off), scw);
            /* 0xE4 = (a & c) | (b & ~c): a's bits where c is set, else b's */
            _mm512_store_si512(o->lo[c], _mm512_ternarylogic_epi32(we, _mm512_slli_epi16(wo, 8), m00ff, 0xE4));
            _mm512_store_si512(o->hi[c], _mm512_ternarylogic_epi32(_mm512_srli_epi16(we, 8), wo, m00ff, 0xE4));
        }
    }
}

/* the float part of super-block i for rows a0 .. a0+3 of a unit: si[a] from its stored C rows */
KI void kq_float4(int q6, int i, int a0, const kpan *p, const int32_t (*clo)[16], const int32_t (*chi)[16],
                  const uint8_t *x, size_t ab, float *acc) {
    const __m512 d = _mm512_load_ps(p->d), dm = _mm512_load_ps(p->dm);
    #pragma GCC unroll 4
    for (int a = a0; a < a0 + 4; a++) {
        const __m512i si = _mm512_add_epi32(LD(clo[a]), _mm512_slli_epi32(LD(chi[a]), 8));
        const block_q8_K *y = (const block_q8_K *)(const void *)(x + a * ab) + i;
        const __m512 dy = _mm512_set1_ps(y->d);
        float *A = acc + 32 * a;
        if (q6) {   /* kq6k's float part: its tot = sumi - 32 * off is si, the -32 being in w */
            _mm512_storeu_ps(A, _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(si), _mm512_loadu_ps(A)));
        } else {    /* kq4k's */
            int16_t bs[8];
            _mm_storeu_si128((__m128i *)bs, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                                          _mm_loadu_si128((const __m128i *)(y->bsums + 8))));
            __m512i sm = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int q = 0; q < 4; q++) sm = _mm512_dpwssd_epi32(sm, LD(p->pr[q]), bc(bs + 2 * q));
            float *M = A + 16;
            _mm512_storeu_ps(A, _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(si), _mm512_loadu_ps(A)));
            _mm512_storeu_ps(M, _mm512_fmadd_ps(_mm512_mul_ps(dm, dy), _mm512_cvtepi32_ps(sm), _mm512_loadu_ps(M)));
        }
    }
}

/* One unit: 16 activation rows x one super-block, into C tiles (lo, hi) = (0, 1) or (2, 3)
 * through A tile 4 or 5 (tile numbers are immediates: a macro per parity); after each of its
 * 4 column steps, 4 rows of the previous unit's float part (BETWEEN(kk)), so that the tile
 * unit and the vector units work side by side. */
#define KQ_UNIT(c0, c1, ta, W, y, ab, BETWEEN)                                                      \
    do {                                                                                            \
        _tile_zero(c0);                                                                             \
        _tile_zero(c1);                                                                             \
        for (int kk = 0; kk < 4; kk++) {   /* columns 64kk .. 64kk+63: chunks 16kk .. */            \
            _tile_loadd(ta, (y) + 64 * kk, (long)(ab));                                              \
            _tile_loadd(6, (W)->lo[16 * kk], 64);                                                   \
            _tile_dpbsud(c0, ta, 6);                                                                \
            _tile_loadd(7, (W)->hi[16 * kk], 64);                                                   \
            _tile_dpbssd(c1, ta, 7);                                                                \
            BETWEEN(kk);                                                                            \
        }                                                                                           \
    } while (0)

/* units u = (row block j of 16, super-block i), j-major, software-pipelined: unit u's products
 * and C stores are issued around unit u-1's float part, which reads C rows stored a unit
 * earlier (a tile store is not forwarded to vector loads: the rows are read after it retires).
 * rows: a multiple of 16. */
void skv_amx_kq(int q6, int rows, int nb, const kpan *P, const apan *W, const uint8_t *x, size_t ab, float *acc) {
    int32_t cb[2][2][16][16] __attribute__((aligned(64)));
    const uint8_t *yq = x + offsetof(block_q8_K, qs);
    const int nu = rows / 16 * nb;
    for (int u = 0; u <= nu; u++) {
        const int v = u - 1, vj = v / nb, vi = v % nb;   /* the previous unit */
        const uint8_t *vx = x + (size_t)(16 * vj) * ab;
        float *vacc = acc + 32 * 16 * vj;
#define PREV(kk) \
    if (v >= 0) kq_float4(q6, vi, 4 * (kk), P + vi, cb[v & 1][0], cb[v & 1][1], vx, ab, vacc)
        if (u < nu) {
            const int j = u / nb, i = u % nb;
            const uint8_t *y = yq + (size_t)(16 * j) * ab + (size_t)i * sizeof(block_q8_K);
            if (u & 1) {
                KQ_UNIT(2, 3, 5, W + i, y, ab, PREV);
                _tile_stored(2, cb[1][0], 64);
                _tile_stored(3, cb[1][1], 64);
            } else {
                KQ_UNIT(0, 1, 4, W + i, y, ab, PREV);
                _tile_stored(0, cb[0][0], 64);
                _tile_stored(1, cb[0][1], 64);
            }
        } else
            for (int kk = 0; kk < 4; kk++) PREV(kk);
#undef PREV
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
