/* read_probe.h: this machine's streaming read bandwidth, the denominator of the decode bound
 * that `make bench` (bench.c) and bench_kernels report against. */
#ifndef SKV_READ_PROBE_H
#define SKV_READ_PROBE_H

/* Bytes per second: every OpenMP thread sums its static share of a 1 GiB huge-page buffer
 * (common/hugemem.h, like the weights and KV caches the decode reads, so both pay the same
 * address translation) with four 256-bit loads an iteration; the best of `passes` passes,
 * which alternate between plain loads and loads with a software prefetch 4 KiB ahead (as
 * the decode GEMV kernels prefetch: on an Intel Xeon VM the prefetching pass reads 5-20 %
 * more, so the bound is set by the faster of the two). The buffer is made on the first
 * call and kept for later probes. 0 when out of memory. */
double skv_read_probe(int passes);

#endif
