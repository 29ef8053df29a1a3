/* util.h: error reporting, checked allocation, checked size arithmetic, file helpers.
 *
 * Convention for the whole library: a function that can fail returns NULL or -1 and
 * records a human-readable message with skv_error(); callers print skv_last_error().
 * Messages name the file and the problem ("model.gguf: tensor 'blk.0.attn_q.weight':
 * data offset past end of file"). The message buffer is thread-local. */
#ifndef SKV_UTIL_H
#define SKV_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#if defined(__GNUC__)
#define SKV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SKV_PRINTF(a, b)
#endif

/* Record an error message (printf-style); always returns -1 for `return skv_error(...)`. */
int skv_error(const char *fmt, ...) SKV_PRINTF(1, 2);
/* Prefix the current message: "prefix: old message". Returns -1. */
int skv_error_prefix(const char *fmt, ...) SKV_PRINTF(1, 2);
const char *skv_last_error(void);
void skv_clear_error(void);

/* Allocation that records "out of memory allocating N bytes (what)" and returns NULL. */
void *skv_malloc(size_t n, const char *what);
void *skv_calloc(size_t count, size_t size, const char *what);
void *skv_aligned_alloc(size_t n, const char *what);   /* 64-byte aligned, free with free() */
char *skv_strdup(const char *s);
/* `count` zeroed rows of n floats (at least one each); NULL + error. Free with skv_rows_free. */
float **skv_rows_new(int count, size_t n, const char *what);
/* A copy of count rows of n floats; NULL (no error) when src is NULL, NULL + error when out
 * of memory. */
float **skv_rows_copy(float *const *src, int count, size_t n, const char *what);
void skv_rows_free(float **a, int count);

/* Overflow-checked arithmetic: return false on overflow. */
static inline bool skv_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool skv_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Read a whole file into a NUL-terminated heap buffer. NULL + error on failure. */
char *skv_read_file(const char *path, size_t *len);
/* Write a file atomically: write PATH.tmp.PID, fsync, rename over PATH. -1 + error. */
int skv_write_file_atomic(const char *path, const void *data, size_t len);

/* Monotonic wall-clock seconds. */
double skv_now(void);

/* fp16 / bf16 <-> fp32 conversion (F16C used where compiled in). */
float skv_f16_to_f32(uint16_t h);
uint16_t skv_f32_to_f16(float f);
float skv_bf16_to_f32(uint16_t h);
uint16_t skv_f32_to_bf16(float f);

#endif
