/* cpu_caps.c: the CPU feature check behind the kernels' optional AVX-512 and AMX variants. The
 * build requires AVX2/FMA/F16C (the baseline every kernel has); a variant runs only where the
 * CPU (and for AMX the kernel) grants its extensions, and SKV_CPU pins a lower level (avx2,
 * vnni) to compare them. */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "cpu_caps.h"

/* fn's value, computed on the first call and kept in *cache (-1: not yet). Every thread
 * computes the same value, so a race only repeats the detection: asking cpuid is a VM exit,
 * the SKV_CPU warning prints once, and granting the AMX permission twice is harmless. */
static int cached(int *cache, int (*fn)(void)) {
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) {
        v = fn();
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* SKV_CPU: 0 avx2, 1 vnni, 2 auto (everything the machine has) */
static int read_level(void) {
    const char *e = getenv("SKV_CPU");
    if (!e || !*e || strcmp(e, "auto") == 0) return 2;
    if (strcmp(e, "avx2") == 0) return 0;
    if (strcmp(e, "vnni") == 0) return 1;
    fprintf(stderr, "smallkv: SKV_CPU=%s is not one of auto, vnni, avx2; using auto\n", e);
    return 2;
}

static int cpu_level(void) {
    static int cache = -1;
    return cached(&cache, read_level);
}

static int detect_vnni(void) {
    if (cpu_level() < 1) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

bool skv_cpu_vnni(void) {
    static int cache = -1;
    return cached(&cache, detect_vnni);
}

/* AMX: cpuid leaf 7 EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), XCR0 bits 17-18 (the OS saves
 * the tile state), and Linux's per-process permission for that state (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16+): without it the first tile instruction
 * faults. The AMX kernels also run VNNI code, so VNNI is required too. */
static int detect_amx(void) {
    if (cpu_level() < 2 || !skv_cpu_vnni()) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;   /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo >> 17 & 3) != 3) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false;
#endif
}

bool skv_cpu_amx(void) {
    static int cache = -1;
    return cached(&cache, detect_amx);
}

static int detect_amx_bf16(void) {
    if (!skv_cpu_amx()) return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1)) return false;   /* AMX-BF16 */
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);                /* AVX512-BF16 */
}

bool skv_cpu_amx_bf16(void) {
    static int cache = -1;
    return cached(&cache, detect_amx_bf16);
}
