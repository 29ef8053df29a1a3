/* gguf.c: open, validate and index a GGUF v2/v3 file (little-endian), memory-mapped.
 *
 * File layout (GGUF, public format description):
 *   header   : "GGUF" magic, u32 version, u64 n_tensors, u64 n_kv
 *   kv[n_kv] : string key, u32 value type, value
 *              string = u64 length + bytes (no NUL); array = u32 elem type, u64 n, n elems
 *   tensor info[n_tensors] : string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
 *   padding to `general.alignment` (default 32), then the data section; tensor offsets are
 *   relative to its start and must be multiples of the alignment.
 *
 * Policy decided here (the contract in gguf.h relies on it):
 *   - version 1 (32-bit counts) and big-endian files are refused with a clear message;
 *   - nested arrays (array of arrays) are refused;
 *   - duplicate keys and duplicate tensor names are refused;
 *   - every ne must be >= 1 (empty tensors are refused), n_dims in 1..4, the row length
 *     ne[0] a multiple of the type's block size, and all size arithmetic overflow-checked;
 *   - bool values must be 0 or 1; keys and tensor names must be non-empty, without NUL;
 *   - a count is checked against the bytes left in the file before anything is allocated;
 *   - general.alignment may be any integer type whose value is a power of two < 2^32.
 * Tensor data pointers are aligned to the alignment (the map is page-aligned). The
 * metadata is parsed once at open (string arrays into gguf_str arrays pointing into
 * the map); tensor data pages are only touched by whoever reads them.
 * Numeric array data points into the map and may be unaligned: read it with memcpy.
 * gguf_open_memory parses a heap copy of a buffer with the same code (fuzzers, tests);
 * gguf_open_resident reads the file into huge-page memory first (the model loader). */
#include "gguf.h"
#include "common/hugemem.h"
#include "common/util.h"
#include "kernels/types.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF reader assumes a little-endian host");

static const size_t g_vsize[GGUF_VTYPE_COUNT] = {
    [GGUF_UINT8] = 1, [GGUF_INT8] = 1, [GGUF_UINT16] = 2, [GGUF_INT16] = 2,
    [GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
    [GGUF_STRING] = 0, [GGUF_ARRAY] = 0, [GGUF_UINT64] = 8, [GGUF_INT64] = 8,
    [GGUF_FLOAT64] = 8,
};

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
        "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

/* ---------------------------------------------------------------- bounded reader */

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    const char *path;
    char ctx[192];      /* what is being read, e.g. "key 'general.name': " (may be "") */
} cursor;

static size_t left(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, size_t n, const char *what) {
    if (n > left(c))
        return skv_error("%s: %struncated: %s at offset %zu needs %zu bytes, only %zu left (file size %zu)",
                         c->path, c->ctx, what, c->pos, n, left(c), c->size);
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    size_t at = c->pos;
    if (rd_u64(c, &len, what)) return -1;
    if (len > left(c))
        return skv_error("%s: %s%s at offset %zu: string length %" PRIu64
                         " runs past end of file (%zu bytes left)", c->path, c->ctx, what, at, len, left(c));
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* A name (key or tensor name) as a NUL-terminated heap copy. */
static char *rd_name(cursor *c, const char *what) {
    gguf_str s;
    size_t at = c->pos;
    if (rd_str(c, &s, what)) return NULL;
    if (s.len == 0) {
        skv_error("%s: %s%s at offset %zu is empty", c->path, c->ctx, what, at);
        return NULL;
    }
    if (memchr(s.ptr, 0, (size_t)s.len)) {
        skv_error("%s: %s%s at offset %zu contains a NUL byte", c->path, c->ctx, what, at);
        return NULL;
    }
    char *out = skv_malloc((size_t)s.len + 1, what);
    if (!out) return NULL;
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = 0;
    return out;
}

/* ---------------------------------------------------------------- metadata */

static int read_scalar(cursor *c, gguf_kv *kv) {
    const uint8_t *q = c->p + c->pos;
    size_t n = g_vsize[kv->type];
    if (need(c, n, "value")) return -1;
    switch (kv->type) {
    case GGUF_UINT8: kv->v.u64 = q[0]; break;
    case GGUF_INT8: { int8_t x; memcpy(&x, q, 1); kv->v.i64 = x; break; }
    case GGUF_UINT16: { uint16_t x; memcpy(&x, q, 2); kv->v.u64 = x; break; }
    case GGUF_INT16: { int16_t x; memcpy(&x, q, 2); kv->v.i64 = x; break; }
    case GGUF_UINT32: { uint32_t x; memcpy(&x, q, 4); kv->v.u64 = x; break; }
    case GGUF_INT32: { int32_t x; memcpy(&x, q, 4); kv->v.i64 = x; break; }
    case GGUF_UINT64: { uint64_t x; memcpy(&x, q, 8); kv->v.u64 = x; break; }
    case GGUF_INT64: { int64_t x; memcpy(&x, q, 8); kv->v.i64 = x; break; }
    case GGUF_FLOAT32: { float x; memcpy(&x, q, 4); kv->v.f64 = x; break; }
    case GGUF_FLOAT64: { double x; memcpy(&x, q, 8); kv->v.f64 = x; break; }
    case GGUF_BOOL:
        if (q[0] > 1)
            return skv_error("%s: key '%s': bool value %u at offset %zu is not 0 or 1",
                             c->path, kv->key, q[0], c->pos);
        kv->v.b = q[0] != 0;
        break;
    default: return skv_error("%s: key '%s': internal: not a scalar type", c->path, kv->key);
    }
    c->pos += n;
    return 0;
}

static int read_array(cursor *c, gguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, "array element type")) return -1;
    if (et >= GGUF_VTYPE_COUNT)
        return skv_error("%s: key '%s': unknown array element type %u", c->path, kv->key, et);
    if (et == GGUF_ARRAY)
        return skv_error("%s: key '%s': nested arrays are not supported", c->path, kv->key);
    if (rd_u64(c, &n, "array length")) return -1;
    kv->v.arr.type = (gguf_vtype)et;
    size_t esize = et == GGUF_STRING ? 8 : g_vsize[et]; /* a string takes >= 8 bytes */
    if (n > left(c) / esize)
        return skv_error("%s: key '%s': array of %" PRIu64 " %s cannot fit in the %zu bytes left",
                         c->path, kv->key, n, gguf_vtype_name((gguf_vtype)et), left(c));
    if (et != GGUF_STRING) {
        kv->v.arr.data = c->p + c->pos;
        if (et == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->pos + i] > 1)
                    return skv_error("%s: key '%s': bool array element %" PRIu64 " is not 0 or 1",
                                     c->path, kv->key, i);
        c->pos += (size_t)(n * esize);
        kv->v.arr.n = n;
        return 0;
    }
    kv->v.arr.strs = skv_calloc((size_t)n, sizeof(gguf_str), "gguf string array");
    if (!kv->v.arr.strs) return skv_error_prefix("%s: key '%s'", c->path, kv->key);
    for (uint64_t i = 0; i < n; i++)
        if (rd_str(c, &kv->v.arr.strs[i], "array string")) return -1;
    kv->v.arr.n = n;
    return 0;
}

static int read_kv(cursor *c, gguf_kv *kv, uint64_t idx) {
    uint32_t t;
    snprintf(c->ctx, sizeof c->ctx, "kv %" PRIu64 ": ", idx);
    kv->key = rd_name(c, "key");
    if (!kv->key) return -1;
    snprintf(c->ctx, sizeof c->ctx, "key '%.160s': ", kv->key);
    if (rd_u32(c, &t, "value type")) return -1;
    if (t >= GGUF_VTYPE_COUNT)
        return skv_error("%s: key '%s': unknown value type %u", c->path, kv->key, t);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_STRING) return rd_str(c, &kv->v.str, "string value");
    if (t == GGUF_ARRAY) return read_array(c, kv);
    return read_scalar(c, kv);
}

/* ---------------------------------------------------------------- duplicates */

static int cmp_strp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* First duplicate among n names (NULL if none); O(n log n). -1 on allocation failure. */
static int find_dup(char **names, size_t n, const char **dup) {
    *dup = NULL;
    if (n < 2) return 0;
    char **s = skv_malloc(n * sizeof *s, "name index");
    if (!s) return -1;
    memcpy(s, names, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_strp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(s[i - 1], s[i]) == 0) { *dup = s[i]; break; }
    free(s);
    return 0;
}

/* ---------------------------------------------------------------- tensors */

static int read_tensor_info(cursor *c, gguf_tensor *t, uint64_t idx) {
    uint32_t nd, type;
    snprintf(c->ctx, sizeof c->ctx, "tensor %" PRIu64 ": ", idx);
    t->name = rd_name(c, "tensor name");
    if (!t->name) return -1;
    snprintf(c->ctx, sizeof c->ctx, "tensor '%.160s': ", t->name);
    if (rd_u32(c, &nd, "tensor n_dims")) return -1;
    if (nd < 1 || nd > 4)
        return skv_error("%s: tensor '%s': n_dims %u is not in 1..4", c->path, t->name, nd);
    t->n_dims = (int)nd;
    for (int i = 0; i < 4; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t ne;
        if (rd_u64(c, &ne, "tensor dimension")) return -1;
        if (ne < 1 || ne > (uint64_t)INT64_MAX)
            return skv_error("%s: tensor '%s': dimension %u has size %" PRIu64 " (must be 1..2^63-1)",
                             c->path, t->name, i, ne);
        t->ne[i] = (int64_t)ne;
    }
    if (rd_u32(c, &type, "tensor type")) return -1;
    if (!skv_type_supported((int)type))
        return skv_error("%s: tensor '%s': unsupported tensor type %s (%u)", c->path, t->name,
                         skv_type_name((int)type), type);
    t->type = (int)type;
    if (rd_u64(c, &t->offset, "tensor offset")) return -1;
    return 0;
}

/* Sizes, alignment and range of one tensor's data; sets data and nbytes. */
static int place_tensor(gguf_file *f, gguf_tensor *t) {
    size_t row = skv_row_bytes(t->type, t->ne[0]);
    if (row == 0) return skv_error_prefix("%s: tensor '%s'", f->path, t->name);
    size_t rows = 1, nel = (size_t)t->ne[0], nbytes;
    for (int i = 1; i < 4; i++)
        if (!skv_mul_ok(rows, (size_t)t->ne[i], &rows) || !skv_mul_ok(nel, (size_t)t->ne[i], &nel) ||
            nel > (size_t)INT64_MAX)
            return skv_error("%s: tensor '%s': element count %lld x %lld x %lld x %lld overflows",
                             f->path, t->name, (long long)t->ne[0], (long long)t->ne[1],
                             (long long)t->ne[2], (long long)t->ne[3]);
    if (!skv_mul_ok(row, rows, &nbytes))
        return skv_error("%s: tensor '%s': byte size (%zu bytes x %zu rows) overflows", f->path,
                         t->name, row, rows);
    if (t->offset % f->alignment != 0)
        return skv_error("%s: tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %zu",
                         f->path, t->name, t->offset, f->alignment);
    size_t start, end;
    if (t->offset > SIZE_MAX || !skv_add_ok(f->data_offset, (size_t)t->offset, &start) ||
        !skv_add_ok(start, nbytes, &end) || end > f->size)
        return skv_error("%s: tensor '%s' data [offset %" PRIu64 ", %zu bytes] runs past end of file (size %zu)",
                         f->path, t->name, t->offset, nbytes, f->size);
    t->nbytes = nbytes;
    t->data = (const uint8_t *)f->map + start;
    return 0;
}

/* ---------------------------------------------------------------- open / close */

static int parse(gguf_file *f) {
    cursor c = { f->map, f->size, 0, f->path, "" };
    uint32_t magic, version;
    if (f->size < 4 || memcmp(f->map, "GGUF", 4) != 0) {
        if (f->size < 4) return skv_error("%s: not a GGUF file (only %zu bytes)", f->path, f->size);
        memcpy(&magic, f->map, 4);
        return skv_error("%s: not a GGUF file (bad magic 0x%08x, expected \"GGUF\")", f->path, magic);
    }
    c.pos = 4;
    if (rd_u32(&c, &version, "version")) return -1;
    if (version == 1)
        return skv_error("%s: GGUF version 1 is not supported (only versions 2 and 3)", f->path);
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0 && (version == 0x02000000u || version == 0x03000000u))
            return skv_error("%s: big-endian GGUF files are not supported", f->path);
        return skv_error("%s: unsupported GGUF version %u (only versions 2 and 3)", f->path, version);
    }
    f->version = version;
    uint64_t n_tensors, n_kv;
    if (rd_u64(&c, &n_tensors, "tensor count") || rd_u64(&c, &n_kv, "kv count")) return -1;
    /* Smallest possible kv: 8 (key length) + 4 (type) + 1 (u8 value); tensor info:
     * 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset). */
    if (n_kv > left(&c) / 13)
        return skv_error("%s: kv count %" PRIu64 " cannot fit in the remaining %zu bytes", f->path,
                         n_kv, left(&c));
    if (n_tensors > left(&c) / 32)
        return skv_error("%s: tensor count %" PRIu64 " cannot fit in the remaining %zu bytes",
                         f->path, n_tensors, left(&c));

    f->kv = skv_calloc((size_t)n_kv, sizeof(gguf_kv), "gguf kv table");
    if (!f->kv) return skv_error_prefix("%s", f->path);
    f->n_kv = n_kv;
    for (uint64_t i = 0; i < n_kv; i++)
        if (read_kv(&c, &f->kv[i], i)) return -1;
    c.ctx[0] = 0;
    {
        char **keys = skv_malloc((size_t)n_kv * sizeof(char *) + 1, "key index");
        if (!keys) return -1;
        for (uint64_t i = 0; i < n_kv; i++) keys[i] = f->kv[i].key;
        const char *dup;
        int rc = find_dup(keys, (size_t)n_kv, &dup);
        if (rc == 0 && dup) rc = skv_error("%s: duplicate key '%s'", f->path, dup);
        free(keys);
        if (rc) return -1;
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        uint32_t a = 0;
        if (gguf_get_u32(f, "general.alignment", &a)) return -1;
        if (a == 0 || (a & (a - 1)) != 0)
            return skv_error("%s: general.alignment %u is not a power of two", f->path, a);
        f->alignment = a;
    }

    f->tensors = skv_calloc((size_t)n_tensors, sizeof(gguf_tensor), "gguf tensor table");
    if (!f->tensors) return skv_error_prefix("%s", f->path);
    f->n_tensors = n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++)
        if (read_tensor_info(&c, &f->tensors[i], i)) return -1;
    c.ctx[0] = 0;

    size_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    if (!skv_add_ok(c.pos, pad, &f->data_offset)) return skv_error("%s: data offset overflows", f->path);
    if (n_tensors > 0 && f->data_offset > f->size)
        return skv_error("%s: truncated: data section would start at offset %zu, past end of file (size %zu)",
                         f->path, f->data_offset, f->size);
    for (uint64_t i = 0; i < n_tensors; i++)
        if (place_tensor(f, &f->tensors[i])) return -1;
    {
        char **names = skv_malloc((size_t)n_tensors * sizeof(char *) + 1, "tensor name index");
        if (!names) return -1;
        for (uint64_t i = 0; i < n_tensors; i++) names[i] = f->tensors[i].name;
        const char *dup;
        int rc = find_dup(names, (size_t)n_tensors, &dup);
        if (rc == 0 && dup) rc = skv_error("%s: duplicate tensor name '%s'", f->path, dup);
        free(names);
        if (rc) return -1;
    }
    return 0;
}

/* size bytes of fd into a fresh huge-page buffer; NULL + error naming path */
static void *read_resident(int fd, size_t size, const char *path) {
    uint8_t *buf = skv_huge_alloc(size, "model file in memory");
    if (!buf) {
        char why[256];
        snprintf(why, sizeof why, "%s", skv_last_error());
        skv_error("%s: cannot read %zu bytes into memory (SKV_MMAP=1 maps the file instead): %s", path, size, why);
        return NULL;
    }
    size_t got = 0;
    while (got < size) {
        const size_t want = size - got < ((size_t)64 << 20) ? size - got : ((size_t)64 << 20);
        const ssize_t r = pread(fd, buf + got, want, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            skv_error("%s: read failed at byte %zu of %zu: %s", path, got, size, r < 0 ? strerror(errno) : "file shrank");
            skv_huge_free(buf, size);
            return NULL;
        }
        got += (size_t)r;
    }
    return buf;
}

static gguf_file *open_file(const char *path, bool resident) {
    gguf_file *f = skv_calloc(1, sizeof *f, "gguf_file");
    if (!f) return NULL;
    f->path = skv_strdup(path);
    if (!f->path) { free(f); return NULL; }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        skv_error("%s: cannot open: %s", path, strerror(errno));
        gguf_close(f);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        skv_error("%s: not a regular file", path);
        close(fd);
        gguf_close(f);
        return NULL;
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) { /* mmap refuses empty files; parse() handles all other sizes */
        skv_error("%s: not a GGUF file (empty)", path);
        close(fd);
        gguf_close(f);
        return NULL;
    }
    void *map;
    if (resident) {
        map = read_resident(fd, f->size, path);
        close(fd);
        if (!map) { gguf_close(f); return NULL; }
        f->resident = true;
    } else {
        map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            skv_error("%s: mmap of %zu bytes failed: %s", path, f->size, strerror(errno));
            gguf_close(f);
            return NULL;
        }
    }
    f->map = map;
    if (parse(f) != 0) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path) { return open_file(path, false); }
gguf_file *gguf_open_resident(const char *path) { return open_file(path, true); }

gguf_file *gguf_open_memory(const void *data, size_t size, const char *name) {
    if (!name) name = "<memory>";
    gguf_file *f = skv_calloc(1, sizeof *f, "gguf_file");
    if (!f) return NULL;
    f->path = skv_strdup(name);
    if (!f->path) { free(f); return NULL; }
    if (size == 0 || !data) {
        skv_error("%s: not a GGUF file (empty)", name);
        gguf_close(f);
        return NULL;
    }
    /* an exact-size heap copy: the sanitizers then catch any read past the end */
    void *copy = skv_aligned_alloc(size, "gguf memory copy");
    if (!copy) { skv_error_prefix("%s", name); gguf_close(f); return NULL; }
    memcpy(copy, data, size);
    f->map = copy;
    f->size = size;
    f->heap_map = true;
    if (parse(f) != 0) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            if (f->kv[i].type == GGUF_ARRAY) free(f->kv[i].v.arr.strs);
        }
    free(f->kv);
    if (f->tensors)
        for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map && f->heap_map) free(f->map);
    else if (f->map && f->resident) skv_huge_free(f->map, f->size);
    else if (f->map) munmap(f->map, f->size);
    free(f->path);
    free(f);
}

/* ---------------------------------------------------------------- lookup */

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name && strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static const gguf_kv *find_or_err(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) skv_error("%s: key '%s' not found", f->path, key);
    return kv;
}

static bool is_signed_int(gguf_vtype t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}
static bool is_unsigned_int(gguf_vtype t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

/* Integer value as (negative?, magnitude-or-value); -1 if not an integer. */
static int int_value(const gguf_file *f, const char *key, bool *neg, uint64_t *u, int64_t *s) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (is_unsigned_int(kv->type)) {
        *neg = false; *u = kv->v.u64;
        *s = kv->v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)kv->v.u64;
        return 0;
    }
    if (is_signed_int(kv->type)) {
        *neg = kv->v.i64 < 0; *s = kv->v.i64;
        *u = kv->v.i64 < 0 ? 0 : (uint64_t)kv->v.i64;
        return 0;
    }
    return skv_error("%s: key '%s' is %s, expected an integer", f->path, key, gguf_vtype_name(kv->type));
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    bool neg = false; uint64_t u = 0; int64_t s = 0;
    if (int_value(f, key, &neg, &u, &s)) return -1;
    if (neg) return skv_error("%s: key '%s' is negative (%lld)", f->path, key, (long long)s);
    *out = u;
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t u = 0;
    if (gguf_get_u64(f, key, &u)) return -1;
    if (u > UINT32_MAX) return skv_error("%s: key '%s' value %" PRIu64 " does not fit in 32 bits", f->path, key, u);
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    bool neg = false; uint64_t u = 0; int64_t s = 0;
    if (int_value(f, key, &neg, &u, &s)) return -1;
    if (!neg && u > (uint64_t)INT64_MAX)
        return skv_error("%s: key '%s' value %" PRIu64 " does not fit in int64", f->path, key, u);
    *out = s;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)
        return skv_error("%s: key '%s' is %s, expected a float", f->path, key, gguf_vtype_name(kv->type));
    *out = (float)kv->v.f64;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL)
        return skv_error("%s: key '%s' is %s, expected a bool", f->path, key, gguf_vtype_name(kv->type));
    *out = kv->v.b;
    return 0;
}

char *gguf_get_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return NULL;
    if (kv->type != GGUF_STRING) {
        skv_error("%s: key '%s' is %s, expected a string", f->path, key, gguf_vtype_name(kv->type));
        return NULL;
    }
    char *s = skv_malloc((size_t)kv->v.str.len + 1, key);
    if (!s) return NULL;
    memcpy(s, kv->v.str.ptr, (size_t)kv->v.str.len);
    s[kv->v.str.len] = 0;
    return s;
}

const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return NULL;
    if (kv->type != GGUF_ARRAY || kv->v.arr.type != elem_type) {
        skv_error("%s: key '%s' is %s%s%s, expected an array of %s", f->path, key,
                  gguf_vtype_name(kv->type), kv->type == GGUF_ARRAY ? " of " : "",
                  kv->type == GGUF_ARRAY ? gguf_vtype_name(kv->v.arr.type) : "",
                  gguf_vtype_name(elem_type));
        return NULL;
    }
    return kv;
}
