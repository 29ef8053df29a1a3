/* gguf_writer.h: a small GGUF v3 writer for tests (tiny random models, corrupt files).
 *
 * Usage:
 *   gw_writer *w = gw_new();
 *   gw_add_str(w, "general.architecture", "llama");
 *   gw_add_u32(w, "llama.block_count", 2);
 *   gw_add_arr_str(w, "tokenizer.ggml.tokens", toks, n);
 *   gw_add_tensor_f32(w, "token_embd.weight", SKV_Q8_0, 2, (int64_t[]){64, 10}, data);
 *   gw_write(w, "/tmp/x.gguf");   // or gw_build() for the bytes, to corrupt them
 *   gw_free(w);
 *
 * The struct is plain on purpose: a corruption test may change header fields, a
 * tensor's type/dims/offset, or add raw kv bytes, before building. Functions return
 * 0 / -1 (error through skv_error) or NULL. */
#ifndef SKV_TEST_GGUF_WRITER_H
#define SKV_TEST_GGUF_WRITER_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "runtime/format/gguf.h"

typedef struct {
    char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;        /* skv_type; may be set to anything by corruption tests */
    uint8_t *data;        /* owned copy of the tensor bytes */
    size_t nbytes;
    uint64_t offset;      /* filled by gw_build (relative to the data section) ... */
    bool offset_fixed;    /* ... unless set: then `offset` is written as is */
} gw_tensor;

typedef struct {
    uint32_t magic;       /* default "GGUF" */
    uint32_t version;     /* default 3 */
    bool n_kv_set, n_tensors_set; /* write these counts instead of the real ones */
    uint64_t n_kv, n_tensors;
    uint32_t alignment;   /* data layout alignment; gw_set_alignment also writes the kv */
    uint8_t *kv;          /* encoded kv section */
    size_t kv_len, kv_cap;
    uint64_t kv_count;
    gw_tensor *tensors;
    size_t n_tensor, tensor_cap;
} gw_writer;

gw_writer *gw_new(void);
void gw_free(gw_writer *w);

/* Scalars. */
int gw_add_u8(gw_writer *w, const char *key, uint8_t v);
int gw_add_i8(gw_writer *w, const char *key, int8_t v);
int gw_add_u16(gw_writer *w, const char *key, uint16_t v);
int gw_add_i16(gw_writer *w, const char *key, int16_t v);
int gw_add_u32(gw_writer *w, const char *key, uint32_t v);
int gw_add_i32(gw_writer *w, const char *key, int32_t v);
int gw_add_u64(gw_writer *w, const char *key, uint64_t v);
int gw_add_i64(gw_writer *w, const char *key, int64_t v);
int gw_add_f32(gw_writer *w, const char *key, float v);
int gw_add_f64(gw_writer *w, const char *key, double v);
int gw_add_bool(gw_writer *w, const char *key, bool v);
int gw_add_str(gw_writer *w, const char *key, const char *v);
/* Arrays: numeric elements given as a C array of the matching type (bool: 1 byte each). */
int gw_add_arr(gw_writer *w, const char *key, gguf_vtype elem_type, const void *data, uint64_t n);
int gw_add_arr_str(gw_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Sets the data alignment (power of two) and writes `general.alignment` (u32). */
int gw_set_alignment(gw_writer *w, uint32_t alignment);
/* Append raw bytes to the kv section, counted as one kv (for malformed entries). */
int gw_add_raw_kv(gw_writer *w, const void *bytes, size_t n);

/* Tensors. ne[0] is the row length. gw_add_tensor copies `data` (exactly
 * skv_row_bytes(type, ne[0]) * rows bytes); gw_add_tensor_f32 quantises float rows. */
int gw_add_tensor(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                  const void *data);
int gw_add_tensor_f32(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                      const float *src);

/* Serialise. gw_build returns a heap buffer (free()) of *size bytes. */
uint8_t *gw_build(gw_writer *w, size_t *size);
int gw_write(gw_writer *w, const char *path);
/* Write raw bytes to a file (plain, not atomic). */
int gw_write_bytes(const char *path, const void *data, size_t n);

#endif
