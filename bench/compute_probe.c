/* compute_probe.c: the arithmetic peaks of compute_probe.h. Each kind is a loop of 12
 * independent accumulator chains (enough to cover the latency of every kind on the Zen 4 and
 * Xeon VMs: 4-5 cycles at up to 2 instructions a cycle), operands in registers, so the loop
 * runs at the issue rate of that instruction and nothing else. The result of every chain is
 * summed into a volatile sink so the work cannot be removed, and the operands pass through
 * an empty asm each iteration so that no loop-invariant product is hoisted out of the loop.
 * AMX: 4 independent C tiles, each product 16 x 16 x 64 int8 from tiles already loaded, so
 * the loop runs at the tile unit's rate (skv_cpu_amx asks Linux for the tile state first). */
#include "compute_probe.h"
#include "common/util.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/gemm_x8_tile.h"
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define CHAINS 12
#define ITERS 400000L   /* x 12 instructions: ~2.4 M instructions, ~1-3 ms at 1-2 a cycle */
#define REPS_PER_RUN 2  /* ~5 ms a run */
#define RUNS 12         /* the best run counts: short runs on a shared machine, one may find the core free */

static volatile double sink;

/* fp32 FMA, 256-bit: 12 x 8 multiply-adds an iteration */
static double run_fma256(long iters) {
    __m256 acc[CHAINS];
    __m256 a = _mm256_set1_ps((float)(1e-9 * (1 + (int)sink))), b = _mm256_set1_ps(1.0f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(a), "+x"(b));
        #pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
    }
    float s[8];
    __m256 t = acc[0];
    for (int i = 1; i < CHAINS; i++) t = _mm256_add_ps(t, acc[i]);
    _mm256_storeu_ps(s, t);
    sink += s[0];
    return 2.0 * 8 * CHAINS * (double)iters;
}

__attribute__((target("avx512f"))) static double run_fma512(long iters) {
    __m512 acc[CHAINS];
    __m512 a = _mm512_set1_ps((float)(1e-9 * (1 + (int)sink))), b = _mm512_set1_ps(1.0f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        #pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
    __m512 t = acc[0];
    for (int i = 1; i < CHAINS; i++) t = _mm512_add_ps(t, acc[i]);
    sink += _mm512_reduce_add_ps(t);
    return 2.0 * 16 * CHAINS * (double)iters;
}

/* int8 on AVX2: u8 x s8 pairs summed to int16 (maddubs), pairs of int16 to int32 (madd with
 * ones), added to the int32 accumulator: 32 multiply-adds per 3 instructions. Only the add is
 * on a chain (1 cycle), so 4 chains, each with its own u operand (no product shared). */
static double run_i8_avx2(long iters) {
    __m256i a0 = _mm256_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0;   /* named: arrays stayed in memory */
    __m256i u0 = _mm256_set1_epi8((char)(3 + (int)sink)), u1 = _mm256_set1_epi8(4), u2 = _mm256_set1_epi8(5),
            u3 = _mm256_set1_epi8(6), s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (long it = 0; it < iters * (CHAINS / 4); it++) {
        __asm__ volatile("" : "+x"(u0), "+x"(u1), "+x"(u2), "+x"(u3), "+x"(s), "+x"(ones));
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(u0, s), ones));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(u1, s), ones));
        a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_maddubs_epi16(u2, s), ones));
        a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_maddubs_epi16(u3, s), ones));
    }
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    sink += _mm256_extract_epi32(t, 0);
    return 2.0 * 32 * CHAINS * (double)iters;
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) static double run_vnni256(long iters) {
    __m256i acc[CHAINS];
    __m256i u = _mm256_set1_epi8((char)(3 + (int)sink)), s = _mm256_set1_epi8(-2);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_epi32(i);
    for (long it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(u), "+x"(s));
        #pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_dpbusd_epi32(acc[i], u, s);
    }
    __m256i t = acc[0];
    for (int i = 1; i < CHAINS; i++) t = _mm256_add_epi32(t, acc[i]);
    sink += _mm256_extract_epi32(t, 0);
    return 2.0 * 32 * CHAINS * (double)iters;
}

__attribute__((target("avx512f,avx512vnni"))) static double run_vnni512(long iters) {
    __m512i acc[CHAINS];
    __m512i u = _mm512_set1_epi8((char)(3 + (int)sink)), s = _mm512_set1_epi8(-2);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++) {
        __asm__ volatile("" : "+v"(u), "+v"(s));
        #pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
    }
    __m512i t = acc[0];
    for (int i = 1; i < CHAINS; i++) t = _mm512_add_epi32(t, acc[i]);
    sink += _mm512_reduce_add_epi32(t);
    return 2.0 * 64 * CHAINS * (double)iters;
}

/* int8 AMX: tdpbssd into 4 C tiles from 2 A and 2 B tiles, 16 x 16 x 64 multiply-adds each,
 * in the kernels' tile configuration (skv_amx_begin: every tile 16 x 64 bytes, loaded once per
 * thread and kept, so the tiles are not released here) */
__attribute__((target("amx-tile,amx-int8"))) static double run_amx(long iters) {
    static const int8_t src[16 * 64] __attribute__((aligned(64))) = {1};
    int32_t out[16 * 16] __attribute__((aligned(64)));
    skv_amx_begin();
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const long n = iters / 16;   /* ~16 cycles a product: about the other kinds' run time */
    for (long it = 0; it < n; it++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    sink += out[0];
    return 2.0 * 16 * 16 * 64 * 4 * (double)n;
}

const char *skv_peak_name(skv_peak_kind k) {
    static const char *const names[SKV_PEAK_N] = {"fp32 FMA ymm", "fp32 FMA zmm", "int8 maddubs ymm (AVX2)",
                                                  "int8 dpbusd ymm (VNNI)", "int8 dpbusd zmm (VNNI)",
                                                  "int8 tdpbssd (AMX)"};
    return k < SKV_PEAK_N ? names[k] : "?";
}

int skv_peak_supported(skv_peak_kind k) {
    __builtin_cpu_init();
    switch (k) {
    case SKV_PEAK_FMA256: return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    case SKV_PEAK_FMA512: return __builtin_cpu_supports("avx512f");
    case SKV_PEAK_I8_AVX2: return __builtin_cpu_supports("avx2");
    case SKV_PEAK_I8_VNNI256: return __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case SKV_PEAK_I8_VNNI512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    case SKV_PEAK_I8_AMX: return skv_cpu_amx();
    default: return 0;
    }
}

static double run_kind(skv_peak_kind k, long iters) {
    switch (k) {
    case SKV_PEAK_FMA256: return run_fma256(iters);
    case SKV_PEAK_FMA512: return run_fma512(iters);
    case SKV_PEAK_I8_AVX2: return run_i8_avx2(iters);
    case SKV_PEAK_I8_VNNI256: return run_vnni256(iters);
    case SKV_PEAK_I8_VNNI512: return run_vnni512(iters);
    case SKV_PEAK_I8_AMX: return run_amx(iters);
    default: return 0;
    }
}

double skv_compute_peak(skv_peak_kind k, int threads) {
    if (!skv_peak_supported(k) || threads < 1) return 0;
    double best = 0;
    for (int r = 0; r < RUNS; r++) {
        double slowest = 0, ops = 0;
        #pragma omp parallel num_threads(threads) reduction(max : slowest) reduction(+ : ops)
        {
            run_kind(k, ITERS / 8);   /* warm-up: clocks and the upper half of the vector units */
            #pragma omp barrier
            const double t0 = skv_now();
            for (int i = 0; i < REPS_PER_RUN; i++) ops += run_kind(k, ITERS);
            slowest = skv_now() - t0;
        }
        if (slowest > 0 && ops / slowest > best) best = ops / slowest;
    }
    return best;
}
