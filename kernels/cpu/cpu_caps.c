/* cpu_caps.c: the CPU feature check behind the kernels' optional AVX-512 variants. The build
 * requires AVX2/FMA/F16C (the baseline every kernel has); a variant runs only where the CPU
 * reports its extensions, and SKV_CPU=avx2 keeps the baseline (to compare the two). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_caps.h"

static bool detect_vnni(void) {
    const char *e = getenv("SKV_CPU");
    if (e && *e && strcmp(e, "auto") != 0) {
        if (strcmp(e, "avx2") == 0) return false;
        fprintf(stderr, "smallkv: SKV_CPU=%s is not one of auto, avx2; using auto\n", e);
    }
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

bool skv_cpu_vnni(void) {
    static int cached = -1;   /* every thread computes the same value: a race only repeats it */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = detect_vnni();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
