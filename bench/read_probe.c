/* read_probe.c: the streaming read bandwidth probe shared by the benchmarks (read_probe.h). */
#include "read_probe.h"
#include "common/hugemem.h"
#include "common/util.h"
#include "kernels/cpu/vecdot_simd.h"
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stddef.h>

#define PROBE_FLOATS ((size_t)1 << 28)   /* 256 Mi floats = 1 GiB */
static float *probe_buf;

/* One pass: every thread sums its static share with four 256-bit loads an iteration; pf:
 * also prefetch each iteration's 128 bytes ahead as the decode GEMV kernels do
 * (skv_prefetch_ahead). Returns bytes per second. */
static double probe_pass(const float *buf, size_t n, bool pf, volatile float *sink) {
    const double t0 = skv_now();
    float tot = 0;
    #pragma omp parallel reduction(+ : tot)
    {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        #pragma omp for schedule(static)
        for (size_t i = 0; i < n; i += 32) {
            if (pf) skv_prefetch_ahead(buf + i, 128);
            a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
            a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
            a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
        }
        float v[8];
        _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (int j = 0; j < 8; j++) tot += v[j];
    }
    const double dt = skv_now() - t0;
    *sink += tot;
    return n * sizeof(float) / dt;
}

double skv_read_probe(int passes) {
    const size_t n = PROBE_FLOATS;
    if (!probe_buf) {
        probe_buf = skv_huge_alloc(n * sizeof(float), "bandwidth buffer");
        if (!probe_buf) return 0;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) probe_buf[i] = (float)(i & 7);
    }
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < passes; r++) {
        const double bw = probe_pass(probe_buf, n, r % 2 == 1, &sink);
        if (bw > best) best = bw;
    }
    return best;
}
