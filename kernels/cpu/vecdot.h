/* vecdot.h: the decode-path dot products (one weight row . one activation row), AVX2.
 *
 * The activation row x (n floats) is first quantised once per matmul into the format
 * the weight type pairs with (skv_vec_act_type), then every weight row is dotted with it:
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights  . skv_q8a blocks (Q8_0 plus the block sum)
 *   Q4_K, Q5_K, Q6_K weights              . block_q8_K (quant.h, with bsums)
 *   F32, F16, BF16 weights                . the float row itself
 * Weight blocks are read as unsigned nibbles/6-bit values and the offsets (-8, -16, -32,
 * the mins) are applied through the activation block sums, so every inner product is a
 * maddubs(u8 weight, s8 activation) + madd chain. Scalar versions live next to each
 * kernel in the .c files (they document the arithmetic and are used when n is ragged). */
#ifndef SKV_VECDOT_H
#define SKV_VECDOT_H
#include <stdint.h>
#include <stddef.h>
#include "quant.h"

/* Activation block for the 32-wide types: Q8_0 with a float scale and its block sum
 * s = d * sum(qs) (exact for the integer dot: sum_i d*q_i). */
typedef struct { float d, s; int8_t qs[QK8_0]; } skv_q8a;

/* The 32-wide types' activation row of n values is nb = n/32 skv_q8a blocks followed, at
 * skv_q8a_pairs_offset(n) (a multiple of 32 bytes), by its nb/2 block pairs regrouped
 * for the 4-row kernels, built once per matmul by skv_vec_quant_act and read by every
 * row: for blocks (i, i+1) = (2p, 2p+1)
 *   ya = (qy_i[0..15], qy_{i+1}[0..15]), yb = (qy_i[16..31], qy_{i+1}[16..31]),
 *   ds = (d_i, s_i, d_{i+1}, s_{i+1}). 96 bytes, so every pair stays 32-byte aligned. */
typedef struct { int8_t ya[32], yb[32]; float ds[4], pad[4]; } skv_q8a_pair;
static inline size_t skv_q8a_pairs_offset(int64_t n) {
    return ((size_t)(n / QK8_0) * sizeof(skv_q8a) + 31) & ~(size_t)31;
}
/* blocks (n/32 of them) -> their pairs (the layout above) */
void skv_q8a_regroup(const skv_q8a *blocks, int64_t n, skv_q8a_pair *pairs);

/* How the activation is stored for a weight type: SKV_Q8_0 (as skv_q8a), SKV_Q8_K or
 * SKV_F32; -1 if the type has no fast path. */
int skv_vec_act_type(int wtype);
/* Bytes of a quantised activation row of n values for weight type wtype. */
size_t skv_vec_act_bytes(int wtype, int64_t n);
/* Quantise x (n) for weight type wtype into dst (skv_vec_act_bytes bytes). */
void skv_vec_quant_act(int wtype, const float *x, void *dst, int64_t n);

/* dot(weight row, quantised activation row) over n values. */
typedef float (*skv_vec_dot_fn)(int64_t n, const void *w, const void *xa);
/* NULL if the type has no fast path. */
skv_vec_dot_fn skv_vec_dot_for(int wtype);

/* dot of 4 weight rows (row r at w + r*stride bytes) with one activation row -> out[0..3].
 * The activation loads and scale pairs are shared by the 4 rows and the 4 horizontal
 * sums are done together, so this is the GEMV's main kernel; same results as 4 calls
 * of the 1-row dot up to float rounding. */
typedef void (*skv_vec_dot4_fn)(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
/* NULL if the type has no 4-row kernel (the GEMV then uses the 1-row dot). */
skv_vec_dot4_fn skv_vec_dot4_for(int wtype);

/* One weight row against nt = 1..SKV_DOTN_MAX activation rows (row t at xa + t*xstride
 * bytes) -> out[0..nt-1]; each weight block is unpacked once for all nt rows (vecdot_n.c).
 * Same results as nt calls of the 1-row dot up to float rounding. */
#define SKV_DOTN_MAX 4
typedef void (*skv_vec_dotn_fn)(int64_t n, const void *w, const void *xa, size_t xstride, int nt, float *out);
/* NULL if the type has no multi-activation kernel (the float types). */
skv_vec_dotn_fn skv_vec_dotn_for(int wtype);

/* The pair-packed decode copy of the 32-wide nibble types (vecdot_pack.c): same bytes
 * per row as the stored blocks, rows regrouped block pair by block pair. */
int skv_pack_supported(int type, int64_t cols);   /* Q4_0/Q4_1/Q5_0/Q5_1 with cols % 64 == 0 */
/* rows x cols weights (stored blocks) -> the packed layout, rows * skv_row_bytes bytes */
void skv_pack_rows(int type, const void *src, void *dst, int64_t rows, int64_t cols);
/* 4-row kernel over packed rows; bit-identical to skv_vec_dot4_for(type) on the stored
 * rows. NULL for other types. */
skv_vec_dot4_fn skv_vec_dot4_packed_for(int type);

/* The 8-row interleaved layout (vecdot_x8.c): rows in groups of 8, each group the same
 * bytes as its 8 stored rows at the same offset, so a matrix is repacked in place. Q4_K,
 * Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (rows % 8 == 0, cols a multiple of the block). */
int skv_x8_supported(int type, int64_t rows, int64_t cols);
/* 8 stored rows (src, 8 * skv_row_bytes) -> one x8 group at dst (distinct buffers) */
void skv_x8_pack_group(int type, const void *src, void *dst, int64_t cols);
/* row r (0..7) of an x8 group, blocks b0 .. b0+nb-1 -> dst as stored blocks */
void skv_x8_row(int type, const void *group, int r, int64_t b0, int64_t nb, void *dst);
/* dots of the 8 rows of one x8 group (n columns) with nt = 1..SKV_DOTN_MAX activation
 * rows (row a at xa + a*xstride bytes) -> out[8a .. 8a+7]; the weights are unpacked once for
 * all nt rows and each row's result does not depend on nt. The same integer sums as the
 * stored-layout kernels, float rounding apart. */
typedef void (*skv_vec_dot8n_fn)(int64_t n, const void *w, const void *xa, size_t xstride, int nt, float *out);
skv_vec_dot8n_fn skv_vec_dot8n_for(int type);   /* NULL for types without the layout */
/* the two builds of the kernels (vecdot_x8_kernels.h), same bits: AVX2, and AVX-512 VNNI
 * (call only where skv_cpu_vnni()); skv_vec_dot8n_for picks one */
skv_vec_dot8n_fn skv_vec_dot8n_avx2_for(int type);
skv_vec_dot8n_fn skv_vec_dot8n_vnni_for(int type);

/* Activation quantisers (AVX2). */
void skv_quant_q8a(const float *x, skv_q8a *dst, int64_t n);
void skv_quant_q8k(const float *x, block_q8_K *dst, int64_t n);

/* Per-family kernels (vecdot_q.c, vecdot_k.c, vecdot_f.c). */
float skv_vec_dot_q4_0(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q4_1(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q5_0(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q5_1(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q8_0(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q4_K(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q5_K(int64_t n, const void *w, const void *xa);
float skv_vec_dot_q6_K(int64_t n, const void *w, const void *xa);
void skv_vec_dot4_q4_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q4_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q5_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q5_1(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q8_0(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q4_K(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
void skv_vec_dot4_q6_K(int64_t n, const void *w, size_t stride, const void *xa, float out[4]);
float skv_vec_dot_f32(int64_t n, const void *w, const void *xa);
float skv_vec_dot_f16(int64_t n, const void *w, const void *xa);
float skv_vec_dot_bf16(int64_t n, const void *w, const void *xa);

#include "simd_math.h"   /* skv_hsum8, skv_hsum8i */
static inline float skv_h2f(uint16_t h) { return _cvtsh_ss(h); }

#endif
