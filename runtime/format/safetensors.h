/* safetensors.h: reader for one .safetensors file (header, tensor table, mmapped data).
 *
 * File layout (from the public format description):
 *   u64 little-endian N | N bytes of JSON header | data buffer
 * The header is a JSON object mapping tensor name -> {"dtype": "F32", "shape": [rows, cols],
 * "data_offsets": [begin, end]} with offsets relative to the data buffer, plus an optional
 * "__metadata__" object (string -> string) that we ignore.
 *
 * The file is memory-mapped read-only. At open time every entry is validated: dtype known,
 * shape non-negative, end - begin == numel * element size, end within the file, no two
 * tensors overlapping, header <= 100 MB. Tensors of dtypes other than F32/F16/BF16 are
 * listed with type -1 (the model loader refuses them if it needs them). */
#ifndef SKV_SAFETENSORS_H
#define SKV_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct {
    char *name;                          /* NUL-terminated copy */
    char dtype[16];                      /* as written: "F32", "BF16", "I64", ... */
    int type;                            /* SKV_F32 / SKV_F16 / SKV_BF16, or -1 if unsupported */
    int n_dims;
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* shape[0] outermost (HF [out, in] for linears) */
    uint64_t begin, end;                 /* byte range in the data buffer */
    const void *data;                    /* pointer into the map */
    size_t nbytes;
} safetensors_tensor;

typedef struct {
    char *path;
    void *map;
    size_t size;
    size_t data_offset;                  /* 8 + N */
    size_t n_tensors;
    safetensors_tensor *tensors;         /* sorted by name */
} safetensors_file;

/* Open and validate. NULL + skv_last_error() ("<path>: <problem>") on failure. */
safetensors_file *safetensors_open(const char *path);
void safetensors_close(safetensors_file *f);
/* Tensor by name, NULL if absent (no error set). */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

#endif
