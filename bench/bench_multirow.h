/* bench_multirow.h: the compute-bound rows of `make bench` (issue 44): the measured arithmetic
 * peaks, prefill, speculative verify passes and batched decode, each before / after the
 * multi-row kernels (kernels/cpu/gemm_x8.h), measured back to back in one process. */
#ifndef SKV_BENCH_MULTIROW_H
#define SKV_BENCH_MULTIROW_H
#include <stdbool.h>

/* Print the compute probe's table (1 thread and `threads`); the best int8 and fp32 peaks at
 * `threads` (operations / s) go to *i8 and *f32. */
void skv_bench_peaks(int threads, double *i8, double *f32);

/* The rows, for models/qwen2.5-coder-{0.5b,1.5b}.gguf in dir (each skipped when missing).
 * long_run: also prefill at 4096 tokens (the 0.5B model only: minutes). 0, or 1 on error. */
int skv_bench_multirow(const char *dir, bool quick, bool long_run, double i8, double f32);

#endif
