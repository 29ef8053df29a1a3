/* types.h: the weight storage types (GGML/GGUF numbering), their block layouts and the type
 * table: shared by every backend (kernels/cpu/, kernels/cuda/) and the model loader.
 *
 * Every kernel refers to these descriptions. A row of a quantised matrix is a
 * sequence of blocks; `cols` must be a multiple of the type's block size.
 * Layouts follow the GGUF file format (facts from its public description):
 *   Q4_0 : 32 weights = fp16 d, 16 bytes of 4-bit q;     w = d * (q - 8)
 *   Q4_1 : 32 weights = fp16 d, fp16 m, 16 bytes;        w = d * q + m
 *   Q5_0 : 32 weights = fp16 d, 4 bytes high bits, 16 bytes low nibbles; w = d * (q - 16)
 *   Q5_1 : 32 weights = fp16 d, fp16 m, 4 bytes qh, 16 bytes;            w = d * q + m
 *   Q8_0 : 32 weights = fp16 d, 32 int8;                 w = d * q
 *   Q4_K : 256 weights = fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins (8 sub-blocks of 32),
 *          128 bytes of nibbles;                          w = d*sc*q - dmin*m
 *   Q5_K : as Q4_K plus 32 bytes of high bits
 *   Q6_K : 256 weights = 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, fp16 d;
 *          w = d * scale * (q - 32)
 *   Q8_K : 256 weights = f32 d, 256 int8, 16 int16 block sums (activation type for k-quant dots)
 * Nibble order in Q4_0/Q4_1/Q5_x: byte j holds weight j (low nibble) and weight j+16 (high). */
#ifndef SKV_KERNEL_TYPES_H
#define SKV_KERNEL_TYPES_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum {
    SKV_F32 = 0, SKV_F16 = 1, SKV_Q4_0 = 2, SKV_Q4_1 = 3, SKV_Q5_0 = 6, SKV_Q5_1 = 7,
    SKV_Q8_0 = 8, SKV_Q8_1 = 9, SKV_Q2_K = 10, SKV_Q3_K = 11, SKV_Q4_K = 12, SKV_Q5_K = 13,
    SKV_Q6_K = 14, SKV_Q8_K = 15, SKV_BF16 = 30, SKV_TYPE_COUNT = 40
} skv_type;

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K layout");

/* Type table: name, weights per block, bytes per block. Unknown/unsupported -> false. */
bool skv_type_supported(int type);
const char *skv_type_name(int type);
int skv_type_block(int type);          /* weights per block (1 for float types) */
size_t skv_type_block_bytes(int type); /* bytes per block */
/* Bytes of a row of `n` weights; 0 (with error set) if n is not a multiple of the block
 * size or the type is unsupported. */
size_t skv_row_bytes(int type, int64_t n);

#endif
