/* safetensors.c: open, validate and memory-map one .safetensors file (see safetensors.h). */
#include "safetensors.h"
#include "common/util.h"
#include "kernels/types.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* dtype name -> element bytes and our type (-1: known but not usable as a weight). */
static const struct { const char *name; int bytes; int type; } k_dtypes[] = {
    {"F32", 4, SKV_F32}, {"F16", 2, SKV_F16}, {"BF16", 2, SKV_BF16},
    {"F64", 8, -1}, {"I64", 8, -1}, {"U64", 8, -1}, {"I32", 4, -1}, {"U32", 4, -1},
    {"I16", 2, -1}, {"U16", 2, -1}, {"I8", 1, -1}, {"U8", 1, -1}, {"BOOL", 1, -1},
    {"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},
};

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
    const safetensors_tensor *x = *(safetensors_tensor *const *)a, *y = *(safetensors_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Parse one header entry into t. data_size: bytes after the header. */
static int parse_entry(const char *path, const cJSON *e, safetensors_tensor *t,
                       const uint8_t *data, uint64_t data_size) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e)) return skv_error("%s: tensor '%s': entry is not a JSON object", path, nm);
    t->name = skv_strdup(nm);
    if (!t->name) return -1;

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt)) return skv_error("%s: tensor '%s': missing dtype", path, nm);
    int bytes = 0;
    t->type = -1;
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (!strcmp(dt->valuestring, k_dtypes[i].name)) {
            bytes = k_dtypes[i].bytes;
            t->type = k_dtypes[i].type;
        }
    if (!bytes)
        return skv_error("%s: tensor '%s': unknown dtype '%.20s' (supported: F32, F16, BF16)",
                         path, nm, dt->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(sh)) return skv_error("%s: tensor '%s': missing shape", path, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > SAFETENSORS_MAX_DIMS)
        return skv_error("%s: tensor '%s': %d dimensions (at most %d)", path, nm, nd, SAFETENSORS_MAX_DIMS);
    t->n_dims = nd;
    size_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        if (json_u64(cJSON_GetArrayItem(sh, i), &v) != 0 || v > (uint64_t)INT64_MAX)
            return skv_error("%s: tensor '%s': bad shape entry %d", path, nm, i);
        t->shape[i] = (int64_t)v;
        if (!skv_mul_ok(numel, (size_t)v, &numel))
            return skv_error("%s: tensor '%s': shape size overflows", path, nm);
    }
    size_t nbytes;
    if (!skv_mul_ok(numel, (size_t)bytes, &nbytes))
        return skv_error("%s: tensor '%s': shape size overflows", path, nm);

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        json_u64(cJSON_GetArrayItem(off, 0), &t->begin) != 0 ||
        json_u64(cJSON_GetArrayItem(off, 1), &t->end) != 0)
        return skv_error("%s: tensor '%s': data_offsets must be [begin, end] integers", path, nm);
    if (t->begin > t->end)
        return skv_error("%s: tensor '%s': data_offsets begin %llu > end %llu", path, nm,
                         (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return skv_error("%s: tensor '%s': data_offsets end %llu past end of data (%llu bytes; "
                         "file truncated?)", path, nm, (unsigned long long)t->end,
                         (unsigned long long)data_size);
    if (t->end - t->begin != nbytes)
        return skv_error("%s: tensor '%s': data_offsets span %llu bytes but shape and dtype %s "
                         "need %zu", path, nm, (unsigned long long)(t->end - t->begin), t->dtype, nbytes);
    t->nbytes = nbytes;
    t->data = data + t->begin;
    return 0;
}

safetensors_file *safetensors_open(const char *path) {
    safetensors_file *f = skv_calloc(1, sizeof *f, "safetensors_file");
    if (!f) return NULL;
    cJSON *root = NULL;
    int fd = -1;
    f->path = skv_strdup(path);
    if (!f->path) goto fail;

    fd = open(path, O_RDONLY);
    if (fd < 0) { skv_error("%s: cannot open: %s", path, strerror(errno)); goto fail; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { skv_error("%s: not a regular file", path); goto fail; }
    if (st.st_size < 8) {
        skv_error("%s: file too small (%lld bytes) for a safetensors header", path, (long long)st.st_size);
        goto fail;
    }
    f->size = (size_t)st.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        skv_error("%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;

    const uint8_t *p = f->map;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n > SAFETENSORS_MAX_HEADER) {
        skv_error("%s: header too large (%llu bytes, limit %llu): not a safetensors file?", path,
                  (unsigned long long)n, (unsigned long long)SAFETENSORS_MAX_HEADER);
        goto fail;
    }
    if (n > f->size - 8) {
        skv_error("%s: header length %llu past end of file (%zu bytes): truncated?", path,
                  (unsigned long long)n, f->size);
        goto fail;
    }
    f->data_offset = 8 + (size_t)n;
    root = cJSON_ParseWithLength((const char *)p + 8, (size_t)n);
    if (!root) { skv_error("%s: header is not valid JSON", path); goto fail; }
    if (!cJSON_IsObject(root)) { skv_error("%s: header is not a JSON object", path); goto fail; }

    size_t count = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") != 0) count++;
    f->tensors = skv_calloc(count ? count : 1, sizeof *f->tensors, "safetensors tensors");
    if (!f->tensors) goto fail;
    uint64_t data_size = f->size - f->data_offset;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        if (parse_entry(path, e, &f->tensors[f->n_tensors++], p + f->data_offset, data_size) != 0)
            goto fail;
    }
    cJSON_Delete(root);
    root = NULL;

    /* names unique (sorted for bsearch), byte ranges disjoint */
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name)) {
            skv_error("%s: tensor '%s' listed twice", path, f->tensors[i].name);
            goto fail;
        }
    if (f->n_tensors > 1) {
        safetensors_tensor **ord = skv_calloc(f->n_tensors, sizeof *ord, "safetensors order");
        if (!ord) goto fail;
        for (size_t i = 0; i < f->n_tensors; i++) ord[i] = &f->tensors[i];
        qsort(ord, f->n_tensors, sizeof *ord, cmp_begin);
        const safetensors_tensor *a = NULL; /* non-empty tensor reaching furthest so far */
        for (size_t i = 0; i < f->n_tensors; i++) {
            const safetensors_tensor *b = ord[i];
            if (!b->nbytes) continue;
            if (!a) { a = b; continue; }
            if (b->begin < a->end) {
                skv_error("%s: tensors '%s' and '%s' overlap (bytes %llu..%llu and %llu..%llu)", path,
                          a->name, b->name, (unsigned long long)a->begin, (unsigned long long)a->end,
                          (unsigned long long)b->begin, (unsigned long long)b->end);
                free(ord);
                goto fail;
            }
            if (b->end > a->end) a = b;
        }
        free(ord);
    }
    return f;

fail:
    if (root) cJSON_Delete(root);
    if (fd >= 0) close(fd);
    safetensors_close(f);
    return NULL;
}

void safetensors_close(safetensors_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    if (f->tensors)
        for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    free(f);
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    if (!f || !f->n_tensors) return NULL;
    safetensors_tensor key = {0};
    key.name = (char *)name;
    return bsearch(&key, f->tensors, f->n_tensors, sizeof key, cmp_name);
}
