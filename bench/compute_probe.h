/* compute_probe.h: this machine's measured arithmetic peaks, the denominator of the prefill
 * (compute-bound) figures of `make bench`, as read_probe.h is the decode's. */
#ifndef SKV_COMPUTE_PROBE_H
#define SKV_COMPUTE_PROBE_H

/* One peak: operations per second (a multiply-add counts 2) of `threads` threads each
 * running independent register-resident chains of one instruction kind. */
typedef enum {
    SKV_PEAK_FMA256,    /* fp32 vfmadd231ps ymm (AVX2 + FMA; the prefill float GEMM's)   */
    SKV_PEAK_FMA512,    /* fp32 vfmadd231ps zmm (AVX-512F)                                */
    SKV_PEAK_I8_AVX2,   /* int8 vpmaddubsw + vpmaddwd + vpaddd ymm (the AVX2 int8 dot)    */
    SKV_PEAK_I8_VNNI256,/* int8 vpdpbusd ymm (AVX-512 VNNI, VL)                           */
    SKV_PEAK_I8_VNNI512,/* int8 vpdpbusd zmm                                              */
    SKV_PEAK_I8_AMX,    /* int8 tdpbssd, 16 x 16 x 64 tiles (AMX, where the OS grants it)     */
    SKV_PEAK_N
} skv_peak_kind;

/* "fp32 FMA ymm" etc. */
const char *skv_peak_name(skv_peak_kind k);
/* Whether this CPU runs kind k (cpuid through the compiler's builtins; AMX: skv_cpu_amx). */
int skv_peak_supported(skv_peak_kind k);
/* Best of 12 runs of ~5 ms; 0 when the kind is not supported. */
double skv_compute_peak(skv_peak_kind k, int threads);

#endif
