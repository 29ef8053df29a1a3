/* gemm_x8.h: multi-row products on the 8-row group layout (vecdot_x8.c): 16 weight rows (two
 * consecutive x8 groups) against T quantised activation rows, for prefill, speculative verify
 * passes and batched decode.
 *
 * Every (weight row, activation row) result has the bits of the decode kernel
 * (skv_vec_dot8n_for) on that activation row alone: the same integer block sums (exact, int32)
 * and the same float operations in the same order per row, whatever T and the blocking. So a
 * verify row or a batched row equals a decode step, at any T.
 *
 *   skv_gemm16_for      the fast kernel (gemm_x8_vnni.c: AVX-512 VNNI, 512-bit; NULL where the
 *                       CPU lacks it or for types without the layout); weights unpacked once
 *                       per (16-row panel, 512-column slice, block of 64 activation rows)
 *                       into a cache-resident int8 tile, then reused across the rows. Where
 *                       the CPU has AMX (skv_cpu_amx) the K-quants' whole groups of 16 rows
 *                       go through AMX tile products instead (gemm_x8_amx.c), same bits
 *   skv_gemm_x8_ref     the plain scalar reference of the same arithmetic (gemm_x8_ref.c),
 *                       from the stored blocks; any number of groups
 * Activation rows: skv_vec_quant_act's format for the type (vecdot.h), row t at act + t*ab.
 * Output: y[t * ldy + r] for the rows r of the call. */
#ifndef SKV_GEMM_X8_H
#define SKV_GEMM_X8_H
#include <stddef.h>
#include <stdint.h>

/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K (the types of skv_x8_supported) */
int skv_gemm_x8_type(int type);

/* 16 rows: the x8 groups at w and at w + group_bytes (group_bytes = 8 * skv_row_bytes). */
typedef void (*skv_gemm16_fn)(int64_t cols, const void *w, size_t group_bytes, const uint8_t *act, size_t ab, int T,
                              float *y, int64_t ldy);
skv_gemm16_fn skv_gemm16_for(int type);          /* the AMX kernel where skv_cpu_amx(), else the VNNI one, else NULL */
skv_gemm16_fn skv_gemm16_vnni_for(int type);     /* call only where skv_cpu_vnni() */
skv_gemm16_fn skv_gemm16_amx_for(int type);      /* call only where skv_cpu_amx(): whole 16-row groups of
                                                    activation rows as AMX tile products, the rest as VNNI */

/* Fewest activation rows for which skv_matmul takes the multi-row kernel over the 8-row decode
 * kernel (skv_vec_dot8n, up to 4 rows a call; both give the same bits). Measured on the Zen 4
 * VM, one thread, 35840 x 1536 (31 MB, streamed), ms decode kernel / multi-row kernel:
 * Q4_K T = 4: 2.2-2.5 / 4.9-5.2, T = 16: 11.5-12.2 / 13.3-13.5, T = 32: 21-23.5 / 15-18;
 * Q6_K T = 16: 16.7 / 15.9, T = 32: 35 / 25.5; Q5_0 T = 8: 5.3 / 7.7-8.0, T = 12: 9.6-10.7 /
 * 11.3-12.9 (the decode kernel reads each weight once for 4 rows straight from its stream; the
 * multi-row kernel pays its tile's unpacking and the stores and loads through it, which only
 * many rows repay). */
int skv_gemm16_min_t(int type);

/* 8 * ngroups rows: groups g at w + g * group_bytes. */
void skv_gemm_x8_ref(int type, int64_t cols, const void *w, size_t group_bytes, int ngroups, const uint8_t *act,
                     size_t ab, int T, float *y, int64_t ldy);

#endif
