/* cpu_probe.c: the shared-core check of the benchmarks (cpu_probe.h). */
#include "cpu_probe.h"
#include "common/util.h"
#include <omp.h>
#include <stdint.h>

#define PROBE_ADDS 20000000L   /* ~5 ms at 4 GHz: one add a cycle, each waits for the last */

static void add_chain(void) {
    uint64_t x = 0;
    for (long i = 0; i < PROBE_ADDS; i++) __asm__ volatile("add $1, %0" : "+r"(x));
}

double skv_parallel_probe(void) {
    double alone = 1e30, together = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = skv_now();
        add_chain();
        const double dt = skv_now() - t0;
        if (dt < alone) alone = dt;
    }
    for (int r = 0; r < 3; r++) {
        double slowest = 0;
        #pragma omp parallel reduction(max : slowest)
        {
            #pragma omp barrier
            const double t0 = skv_now();
            add_chain();
            slowest = skv_now() - t0;
        }
        if (slowest < together) together = slowest;
    }
    return alone / together;
}
