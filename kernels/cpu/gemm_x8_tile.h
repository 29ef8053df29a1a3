/* gemm_x8_tile.h: the weight tile of the multi-row kernels (gemm_x8.h), shared by the AVX-512
 * VNNI kernels (gemm_x8_vnni.c, which unpacks it) and the AMX micro-kernels
 * (gemm_x8_amx.c, which read it as B tiles). 16 weight rows a tile: lane n of every 64-byte
 * row is weight row n (x8 group 0 in lanes 0-7, group 1 in 8-15). */
#ifndef SKV_GEMM_X8_TILE_H
#define SKV_GEMM_X8_TILE_H
#include <stddef.h>
#include <stdint.h>

#define TB 64         /* activation rows per tile pass (VNNI) */
#define TB_AMX 128    /* ... with AMX tile products (one thread, 1536 x 1536 Q4_K, T = 256:
                         TB 64 / 128 / 256 = 3.3 / 2.7 / 4.9 ms) */
#define KCOLS 512     /* columns per tile: 2 K-quant super-blocks or 16 blocks of 32 */

/* tile of one K-quant super-block (16 rows): q chunk c = weights 4c .. 4c+3 of each row, so
 * q[c0 .. c0+k/4-1] is an AMX B tile (k/4 rows of 16 lanes x 4 bytes) for weights 4c0 .. 4c0+k-1 */
typedef struct {
    uint8_t q[64][64];
    int32_t sc[16][16];   /* Q4_K: sub-block s < 8 scales; Q6_K: group g scales */
    int16_t pr[8][32];    /* lane pairs: Q4_K (m_2p, m_2p+1), p < 4; Q6_K (sc_2q, sc_2q+1) */
    float d[16], dm[16];  /* d, and Q4_K's dmin */
} kpan;
/* tile of one 32-wide block (16 rows), q as in kpan */
typedef struct {
    uint8_t q[8][64];
    float d[16], o[16];   /* d; the offset factor's scale: m (Q4_1/Q5_1) or d */
} wpan;
typedef union { kpan k[KCOLS / 256]; wpan w[KCOLS / 32]; } tile_buf;

/* a K-quant super-block's weights with the scales folded in (gemm_x8_amx.c): w = sc * q
 * (Q6_K: sc * (q - 32)) = lo + 256 hi, chunk c of 4 weights as in kpan */
typedef struct {
    uint8_t lo[64][64];
    int8_t hi[64][64];
} apan;

/* AMX micro-kernels of the K-quants (gemm_x8_amx.c; call only where skv_cpu_amx(), after
 * skv_amx_begin on the calling thread). */
void skv_amx_begin(void);   /* the tile configuration (once per thread) */
/* p's weights with the scales folded in */
void skv_amx_scale_tile(int q6, const kpan *p, apan *o);
/* rows (a multiple of 16) activation rows against nb super-blocks: row a at x + a*ab (x at the
 * tile's first block), P the blocks' kpan tiles (scales, sums), W the same blocks from
 * skv_amx_scale_tile; acc updated exactly as the VNNI micro-kernels do (row a: acc[32a ..
 * 32a+15] the sums, acc[32a+16 ..] Q4_K's min sums). */
void skv_amx_kq(int q6, int rows, int nb, const kpan *P, const apan *W, const uint8_t *x, size_t ab, float *acc);

#endif
