/* gguf.h: reader for GGUF v2/v3 model files (metadata, tensor table, tensor data).
 *
 * The whole file is memory-mapped read-only (gguf_open) or read into huge-page memory
 * (gguf_open_resident, the model loader's choice); either way `map` holds the file's bytes
 * and strings and tensor data point into it. Every offset and size is validated at open
 * time, so later accessors never read outside the map. Errors go through skv_error() and name the file and the problem. */
#ifndef SKV_GGUF_H
#define SKV_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3, GGUF_UINT32 = 4,
    GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9,
    GGUF_UINT64 = 10, GGUF_INT64 = 11, GGUF_FLOAT64 = 12, GGUF_VTYPE_COUNT
} gguf_vtype;

typedef struct { const char *ptr; uint64_t len; } gguf_str; /* not NUL-terminated */

typedef struct {
    char *key;             /* NUL-terminated copy */
    gguf_vtype type;
    union {
        uint64_t u64; int64_t i64; double f64; bool b; gguf_str str;
        struct {
            gguf_vtype type;   /* element type (never ARRAY: nested arrays are refused at open) */
            uint64_t n;
            const void *data;  /* numeric: raw little-endian elements in the map (may be
                                * unaligned: read with memcpy) */
            gguf_str *strs;    /* string arrays: n entries (heap array pointing into the map) */
        } arr;
    } v;
} gguf_kv;

typedef struct {
    char *name;            /* NUL-terminated copy */
    int n_dims;
    int64_t ne[4];         /* ne[0] = innermost (row length); unused dims = 1 */
    int type;              /* skv_type */
    uint64_t offset;       /* relative to the data section */
    const void *data;      /* pointer into the map */
    size_t nbytes;
} gguf_tensor;

typedef struct {
    char *path;
    void *map;
    size_t size;
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    size_t alignment;
    size_t data_offset;
    bool heap_map;         /* map is a heap copy (gguf_open_memory), freed with free() */
    bool resident;         /* map holds the file read into memory (gguf_open_resident),
                              freed with skv_huge_free */
} gguf_file;

/* Open and validate, the file memory-mapped (pages read on first touch, shared with the page
 * cache). NULL with skv_last_error() on failure. */
gguf_file *gguf_open(const char *path);
/* The same with the whole file read into anonymous memory backed by huge pages
 * (common/hugemem.h): what the model loader uses for weights a decode step sweeps. */
gguf_file *gguf_open_resident(const char *path);
/* The same from bytes in memory (copied into a 64-byte-aligned heap buffer, so tensor data
 * is aligned to min(general.alignment, 64)); `name` stands for the path in messages
 * (NULL: "<memory>"). Used by the fuzzers and tests. NULL with skv_last_error(). */
gguf_file *gguf_open_memory(const void *data, size_t size, const char *name);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: 0 on success, -1 (error names file and key) when missing or the wrong
 * type. Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);  /* f32 or f64 */
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* String value as a fresh NUL-terminated heap copy. */
char *gguf_get_str(const gguf_file *f, const char *key);
/* Array of the given element type; returns NULL if missing or of another type. */
const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type);

const char *gguf_vtype_name(gguf_vtype t);

#endif
