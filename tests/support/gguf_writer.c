/* gguf_writer.c: serialise metadata and tensors into a GGUF v3 byte image (tests only).
 * Layout mirrors runtime/format/gguf.c's description: header, kv section, tensor infos,
 * padding to the alignment, data section with each tensor aligned. */
#include "gguf_writer.h"
#include "common/util.h"
#include "kernels/cpu/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

gw_writer *gw_new(void) {
    gw_writer *w = skv_calloc(1, sizeof *w, "gguf writer");
    if (!w) return NULL;
    memcpy(&w->magic, "GGUF", 4);
    w->version = 3;
    w->alignment = 32;
    return w;
}

void gw_free(gw_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensor; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->kv);
    free(w);
}

/* ---------------------------------------------------------------- kv encoding */

static int put(gw_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 256;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) return skv_error("gguf writer: out of memory");
        w->kv = nb;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int put_u32(gw_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(gw_writer *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(gw_writer *w, const char *s) {
    uint64_t n = strlen(s);
    return put_u64(w, n) || put(w, s, (size_t)n) ? -1 : 0;
}

static int scalar(gw_writer *w, const char *key, gguf_vtype t, const void *v, size_t n) {
    if (put_str(w, key) || put_u32(w, (uint32_t)t) || put(w, v, n)) return -1;
    w->kv_count++;
    return 0;
}

int gw_add_u8(gw_writer *w, const char *k, uint8_t v) { return scalar(w, k, GGUF_UINT8, &v, 1); }
int gw_add_i8(gw_writer *w, const char *k, int8_t v) { return scalar(w, k, GGUF_INT8, &v, 1); }
int gw_add_u16(gw_writer *w, const char *k, uint16_t v) { return scalar(w, k, GGUF_UINT16, &v, 2); }
int gw_add_i16(gw_writer *w, const char *k, int16_t v) { return scalar(w, k, GGUF_INT16, &v, 2); }
int gw_add_u32(gw_writer *w, const char *k, uint32_t v) { return scalar(w, k, GGUF_UINT32, &v, 4); }
int gw_add_i32(gw_writer *w, const char *k, int32_t v) { return scalar(w, k, GGUF_INT32, &v, 4); }
int gw_add_u64(gw_writer *w, const char *k, uint64_t v) { return scalar(w, k, GGUF_UINT64, &v, 8); }
int gw_add_i64(gw_writer *w, const char *k, int64_t v) { return scalar(w, k, GGUF_INT64, &v, 8); }
int gw_add_f32(gw_writer *w, const char *k, float v) { return scalar(w, k, GGUF_FLOAT32, &v, 4); }
int gw_add_f64(gw_writer *w, const char *k, double v) { return scalar(w, k, GGUF_FLOAT64, &v, 8); }
int gw_add_bool(gw_writer *w, const char *k, bool v) {
    uint8_t b = v ? 1 : 0;
    return scalar(w, k, GGUF_BOOL, &b, 1);
}

int gw_add_str(gw_writer *w, const char *key, const char *v) {
    if (put_str(w, key) || put_u32(w, GGUF_STRING) || put_str(w, v)) return -1;
    w->kv_count++;
    return 0;
}

static size_t elem_size(gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

int gw_add_arr(gw_writer *w, const char *key, gguf_vtype et, const void *data, uint64_t n) {
    size_t es = elem_size(et);
    if (!es) return skv_error("gguf writer: key '%s': %s is not a numeric element type", key,
                              gguf_vtype_name(et));
    if (put_str(w, key) || put_u32(w, GGUF_ARRAY) || put_u32(w, (uint32_t)et) || put_u64(w, n) ||
        put(w, data, (size_t)n * es))
        return -1;
    w->kv_count++;
    return 0;
}

int gw_add_arr_str(gw_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (put_str(w, key) || put_u32(w, GGUF_ARRAY) || put_u32(w, GGUF_STRING) || put_u64(w, n))
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (put_str(w, strs[i])) return -1;
    w->kv_count++;
    return 0;
}

int gw_set_alignment(gw_writer *w, uint32_t a) {
    if (a == 0 || (a & (a - 1))) return skv_error("gguf writer: alignment %u is not a power of two", a);
    w->alignment = a;
    return gw_add_u32(w, "general.alignment", a);
}

int gw_add_raw_kv(gw_writer *w, const void *bytes, size_t n) {
    if (put(w, bytes, n)) return -1;
    w->kv_count++;
    return 0;
}

/* ---------------------------------------------------------------- tensors */

static size_t tensor_bytes(int type, int n_dims, const int64_t *ne) {
    size_t row = skv_row_bytes(type, ne[0]), rows = 1;
    for (int i = 1; i < n_dims; i++) rows *= (size_t)ne[i];
    return row * rows;
}

int gw_add_tensor(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                  const void *data) {
    if (n_dims < 1 || n_dims > 4) return skv_error("gguf writer: tensor '%s': bad n_dims %d", name, n_dims);
    size_t nbytes = tensor_bytes(type, n_dims, ne);
    if (!nbytes) return skv_error_prefix("gguf writer: tensor '%s'", name);
    if (w->n_tensor == w->tensor_cap) {
        size_t cap = w->tensor_cap ? 2 * w->tensor_cap : 8;
        gw_tensor *nt = realloc(w->tensors, cap * sizeof *nt);
        if (!nt) return skv_error("gguf writer: out of memory");
        w->tensors = nt;
        w->tensor_cap = cap;
    }
    gw_tensor *t = &w->tensors[w->n_tensor];
    memset(t, 0, sizeof *t);
    t->name = skv_strdup(name);
    t->data = skv_malloc(nbytes, name);
    if (!t->name || !t->data) { free(t->name); free(t->data); return -1; }
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
    t->n_dims = (uint32_t)n_dims;
    for (int i = 0; i < 4; i++) t->ne[i] = i < n_dims ? (uint64_t)ne[i] : 1;
    t->type = (uint32_t)type;
    w->n_tensor++;
    return 0;
}

int gw_add_tensor_f32(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                      const float *src) {
    size_t row = skv_row_bytes(type, ne[0]);
    if (!row) return skv_error_prefix("gguf writer: tensor '%s'", name);
    size_t rows = 1;
    for (int i = 1; i < n_dims; i++) rows *= (size_t)ne[i];
    uint8_t *buf = skv_malloc(row * rows, name);
    if (!buf) return -1;
    for (size_t r = 0; r < rows; r++) skv_quant_row(type, src + r * (size_t)ne[0], buf + r * row, ne[0]);
    int rc = gw_add_tensor(w, name, type, n_dims, ne, buf);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- output */

typedef struct { uint8_t *p; size_t len, cap; } bytes;

static int b_put(bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n) cap *= 2;
        uint8_t *nb = realloc(b->p, cap);
        if (!nb) return skv_error("gguf writer: out of memory");
        b->p = nb;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int b_pad(bytes *b, size_t align) {
    static const uint8_t zero[256];
    while (b->len % align) {
        size_t n = align - b->len % align;
        if (b_put(b, zero, n < sizeof zero ? n : sizeof zero)) return -1;
    }
    return 0;
}

uint8_t *gw_build(gw_writer *w, size_t *size) {
    bytes b = { 0 };
    size_t align = w->alignment ? w->alignment : 32;
    /* Assign data offsets (each tensor aligned) unless fixed by the test. */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensor; i++) {
        gw_tensor *t = &w->tensors[i];
        off = (off + align - 1) / align * align;
        if (!t->offset_fixed) t->offset = off;
        off += t->nbytes;
    }
    uint64_t n_t = w->n_tensors_set ? w->n_tensors : w->n_tensor;
    uint64_t n_kv = w->n_kv_set ? w->n_kv : w->kv_count;
    int rc = b_put(&b, &w->magic, 4) || b_put(&b, &w->version, 4) || b_put(&b, &n_t, 8) ||
             b_put(&b, &n_kv, 8) || b_put(&b, w->kv, w->kv_len);
    for (size_t i = 0; !rc && i < w->n_tensor; i++) {
        gw_tensor *t = &w->tensors[i];
        uint64_t nl = strlen(t->name);
        rc = b_put(&b, &nl, 8) || b_put(&b, t->name, (size_t)nl) || b_put(&b, &t->n_dims, 4);
        for (uint32_t d = 0; !rc && d < t->n_dims && d < 4; d++) rc = b_put(&b, &t->ne[d], 8);
        rc = rc || b_put(&b, &t->type, 4) || b_put(&b, &t->offset, 8);
    }
    /* Data section: starts aligned, so aligning the file position aligns the offsets. */
    for (size_t i = 0; !rc && i < w->n_tensor; i++)
        rc = b_pad(&b, align) || b_put(&b, w->tensors[i].data, w->tensors[i].nbytes);
    if (!rc && w->n_tensor == 0) rc = b_pad(&b, align);
    if (rc) { free(b.p); return NULL; }
    *size = b.len;
    return b.p;
}

int gw_write_bytes(const char *path, const void *data, size_t n) {
    /* A fresh inode each time: truncating a file that was just mmapped is slow here
     * (tests rewrite the same path hundreds of times). */
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f) return skv_error("%s: cannot create", path);
    size_t wr = n ? fwrite(data, 1, n, f) : 0;
    if (fclose(f) != 0 || wr != n) return skv_error("%s: write failed", path);
    return 0;
}

int gw_write(gw_writer *w, const char *path) {
    size_t n;
    uint8_t *buf = gw_build(w, &n);
    if (!buf) return -1;
    int rc = gw_write_bytes(path, buf, n);
    free(buf);
    return rc;
}
