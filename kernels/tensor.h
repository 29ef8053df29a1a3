/* tensor.h: what the kernels know of a weight matrix: its storage type (types.h), shape,
 * bytes and decode layouts, and the RoPE pairing the rotation kernels apply. Owned by
 * kernels/ so that kernels never include the runtime; the model loader (runtime/model/)
 * fills these structs. */
#ifndef SKV_TENSOR_H
#define SKV_TENSOR_H
#include <stdint.h>
#include "kernels/types.h"

/* RoPE pairing: ADJACENT rotates (x[2i], x[2i+1]) (GGUF llama, whose Q/K rows were permuted
 * by the converter); HALVES rotates (x[i], x[i+d/2]) (Hugging Face layout, GGUF qwen2). */
typedef enum { SKV_ROPE_ADJACENT = 0, SKV_ROPE_HALVES = 1 } skv_rope_mode;

/* A matrix is row-major [rows x cols] where cols is the input dimension (GGUF ne[0]), so
 * y = W x is a dot product per row. */
typedef struct {
    int type;          /* skv_type */
    int64_t rows, cols;
    const void *data;  /* rows * skv_row_bytes(type, cols) bytes */
    const void *pack;  /* NULL, or a copy of data with the blocks regrouped in pairs for the
                          decode GEMV (kernels/cpu/vecdot_pack.c), owned by the model */
    int x8;            /* data holds the rows in groups of 8, interleaved (vecdot_x8.c,
                          made in place by runtime/model/model_pack.c): read stored rows with
                          skv_weight_stored_rows, never data + r * row bytes */
} skv_weight;

#endif
