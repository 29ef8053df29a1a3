/* vecdot_x8_vnni.c: the 8-row group GEMV kernels (vecdot_x8_kernels.h) compiled for AVX-512
 * VL/BW/VNNI at 256-bit width; skv_vec_dot8n_for (vecdot_x8.c) picks them when
 * skv_cpu_vnni() says the CPU has them. The target is set per function here, not by the
 * build's flags, so nothing else is compiled for AVX-512 and the headers' inline helpers
 * stay AVX2 (they inline into these functions). */
#include <immintrin.h>
#include <string.h>
#include "vecdot.h"
#include "vecdot_simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define X8_VNNI 1
#define X8_FOR skv_vec_dot8n_vnni_for
#include "vecdot_x8_kernels.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
