/* read_probe.c: the streaming read bandwidth probe shared by the benchmarks (read_probe.h). */
#include "read_probe.h"
#include "../runtime/hugemem.h"
#include "../runtime/util.h"
#include <immintrin.h>
#include <omp.h>
#include <stddef.h>

#define PROBE_FLOATS ((size_t)1 << 28)   /* 256 Mi floats = 1 GiB */
static float *probe_buf;

double skv_read_probe(int passes) {
    const size_t n = PROBE_FLOATS;
    if (!probe_buf) {
        probe_buf = skv_huge_alloc(n * sizeof(float), "bandwidth buffer");
        if (!probe_buf) return 0;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) probe_buf[i] = (float)(i & 7);
    }
    const float *buf = probe_buf;
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < passes; r++) {
        double t0 = skv_now();
        float tot = 0;
        #pragma omp parallel reduction(+ : tot)
        {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            #pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += 32) {
                a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
                a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
                a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
                a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
            }
            float v[8];
            _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (int j = 0; j < 8; j++) tot += v[j];
        }
        double dt = skv_now() - t0;
        sink += tot;
        double bw = n * sizeof(float) / dt;
        if (bw > best) best = bw;
    }
    (void)sink;
    return best;
}
