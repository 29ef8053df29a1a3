/* matmul.h: weight x activation products for every storage type (CPU, OpenMP + AVX2).
 *
 *   y (T, rows) = x (T, cols) @ W^T        W: [rows x cols] in its storage type
 *
 * T = 1 is the decode GEMV (memory bound: activations quantised to Q8_0/Q8_K and
 * integer dot products against the quantised rows); T > 1 is prefill (compute bound:
 * tiles of W dequantised once and reused across the T rows). skv_matmul_ref is the
 * plain scalar reference every fast path is tested against. */
#ifndef SKV_MATMUL_H
#define SKV_MATMUL_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/tensor.h"

void skv_matmul(float *y, const float *x, const skv_weight *W, int T);
void skv_matmul_ref(float *y, const float *x, const skv_weight *W, int T);

/* ys[i] (T, Ws[i]->rows) = x (T, cols) @ Ws[i]^T for n <= 8 matrices with the same cols
 * (q/k/v, gate/up): on the decode path x is quantised once per activation format and all
 * matrices run in one parallel region; otherwise n skv_matmul calls. */
void skv_matmul_multi(float *const *ys, const skv_weight *const *Ws, int n, const float *x, int T);

/* ---- decode GEMV (T = 1) inside an enclosing OpenMP parallel region ----
 * skv_gemv_team_ok: whether all n <= 8 matrices (same cols) take the T = 1 GEMV path (and
 * the reference is not forced). skv_gemv_act_bytes: size of the buffer `act` below.
 * skv_gemv_team: ys[i] (rows_i) = x (cols) @ Ws[i]^T; every thread of the team calls it with
 * the same arguments except act (its own buffer): the thread quantises x into act, then
 * computes the row chunks in its share of the bytes (an even split by weight bytes) and
 * waits at a barrier. Bit-identical to
 * skv_matmul / skv_matmul_multi at T = 1. */
int skv_gemv_team_ok(const skv_weight *const *Ws, int n);
size_t skv_gemv_act_bytes(const skv_weight *const *Ws, int n);
void skv_gemv_team(float *const *ys, const skv_weight *const *Ws, int n, const float *x, uint8_t *act);
/* The gate / up pair of an MLP (the same shape): g = x @ Wg^T, u = x @ Wu^T, then h =
 * skv_swiglu(g, u) (h may be g), called like skv_gemv_team. A thread takes each of its row
 * chunks in both matrices and applies SwiGLU to it, so each element is computed once in
 * the team and the caller needs no barrier before using h. Bit-identical to the two
 * GEMVs followed by skv_swiglu. (The pair must pass skv_gemv_team_ok.) */
void skv_gemv_team_swiglu(float *h, float *g, float *u, const skv_weight *Wg, const skv_weight *Wu, const float *x,
                          uint8_t *act);

/* Force (1) or release (0) the reference path in skv_matmul; default: env SKV_MATMUL_REF. */
void skv_matmul_set_ref(int on);

/* Smallest T for which skv_matmul uses the prefill GEMM (float tiles) for this type;
 * smaller T uses the per-row decode dots (Q8 activations). */
int skv_matmul_gemm_min_t(int type);

/* Which kernels multi-row products take on a matrix in 8-row groups (W->x8) of a type with the
 * multi-row kernel (gemm_x8.h; AVX-512 VNNI CPUs; elsewhere the 8-row decode kernel stands in
 * for it, with the same bits):
 *   SKV_GEMM_DECODE_ROWS  T < skv_matmul_gemm_min_t: the 8-row decode kernel, up to 4 activation
 *                         rows a call; larger T: the float GEMM
 *   SKV_GEMM_MULTIROW     T < threshold: the 16-row multi-row kernel from skv_gemm16_min_t rows,
 *                         which gives the same bits; larger T: the float GEMM (dequantised
 *                         weights times float activations: what prefill ran before int8)
 *   SKV_GEMM_INT8_ALL     (default) the int8 kernels at every T, prefill included: each row of a
 *                         prefill gets the bits of a decode step (activations quantised per
 *                         block as a decode step does, as llama.cpp's CPU path does too), and
 *                         prefill runs 2.5-2.9x faster than the float GEMM (docs/performance.md).
 *                         Perplexity moves by 0.2-0.8 % against the float GEMM (the same doc).
 * Matrices without 8-row groups (types without the layout, read-only mappings) keep the float
 * GEMM at large T in every mode.
 * Env SKV_GEMM_MODE=0/1/2, or skv_matmul_set_gemm_mode (eval --gemm, benchmarks, tests). */
enum { SKV_GEMM_DECODE_ROWS = 0, SKV_GEMM_MULTIROW = 1, SKV_GEMM_INT8_ALL = 2 };
void skv_matmul_set_gemm_mode(int mode);
int skv_matmul_gemm_mode(void);

/* Gather one row of W as floats (embedding lookup). */
void skv_weight_row(const skv_weight *W, int64_t row, float *out);

#endif
