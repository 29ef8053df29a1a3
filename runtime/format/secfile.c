/* secfile.c: write and validate the checksummed zstd section container (see secfile.h). */
#include "secfile.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define FIXED_BYTES 40
#define TABLE_ENTRY 40
#define MAX_HEADER (64ull << 20)
#define MAX_USIZE (1ull << 36)
#define ZSTD_MAX_RATIO 32768ull   /* uncompressed bytes per stored byte, upper bound */

uint64_t skv_fnv1a64(const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

void skv_sec_id_str(uint32_t id, char out[5]) {
    for (int i = 0; i < 4; i++) {
        char c = (char)(id >> (8 * i));
        out[i] = (c >= 32 && c < 127) ? c : '?';
    }
    out[4] = 0;
}

int skv_secfile_write(const char *path, const char magic[8], uint32_t version, const char *header_json,
                      const skv_section *secs, int n, int zlevel) {
    if (n < 0 || n > SKV_SECFILE_MAX_SECTIONS) return skv_error("%s: too many sections (%d)", path, n);
    size_t hl = strlen(header_json);
    void **cbuf = skv_calloc((size_t)(n ? n : 1), sizeof *cbuf, "section buffers");
    size_t *csz = skv_calloc((size_t)(n ? n : 1), sizeof *csz, "section sizes");
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    uint8_t *out = NULL;
    int rc = -1;
    if (!cbuf || !csz || !cc) { if (!cc) skv_error("%s: cannot create zstd context", path); goto done; }
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, zlevel);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t total = FIXED_BYTES + hl + (size_t)n * TABLE_ENTRY;
    for (int i = 0; i < n; i++) {
        size_t bound = ZSTD_compressBound(secs[i].size);
        cbuf[i] = skv_malloc(bound, "compressed section");
        if (!cbuf[i]) goto done;
        ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
        size_t r = ZSTD_compress2(cc, cbuf[i], bound, secs[i].data, secs[i].size);
        if (ZSTD_isError(r)) { skv_error("%s: zstd compression failed: %s", path, ZSTD_getErrorName(r)); goto done; }
        csz[i] = r;
        if (!skv_add_ok(total, r, &total)) { skv_error("%s: file size overflow", path); goto done; }
    }
    out = skv_malloc(total, path);
    if (!out) goto done;
    memcpy(out, magic, 8);
    put32(out + 8, version);
    put32(out + 12, (uint32_t)n);
    put64(out + 16, hl);
    put64(out + 24, skv_fnv1a64(header_json, hl));
    memcpy(out + FIXED_BYTES, header_json, hl);
    uint8_t *tab = out + FIXED_BYTES + hl, *dat = tab + (size_t)n * TABLE_ENTRY;
    for (int i = 0; i < n; i++) {
        uint8_t *e = tab + (size_t)i * TABLE_ENTRY;
        put32(e, secs[i].id);
        put32(e + 4, 1);
        put64(e + 8, secs[i].size);
        put64(e + 16, csz[i]);
        put64(e + 24, skv_fnv1a64(cbuf[i], csz[i]));
        put64(e + 32, skv_fnv1a64(secs[i].data, secs[i].size));
        memcpy(dat, cbuf[i], csz[i]);
        dat += csz[i];
    }
    put64(out + 32, skv_fnv1a64(tab, (size_t)n * TABLE_ENTRY));
    rc = skv_write_file_atomic(path, out, total);
done:
    if (cbuf) for (int i = 0; i < n; i++) free(cbuf[i]);
    free(cbuf); free(csz); free(out);
    ZSTD_freeCCtx(cc);
    return rc;
}

void skv_secfile_free(skv_secfile *f) {
    if (!f) return;
    if (f->secs) for (int i = 0; i < f->n; i++) free(f->secs[i].data);
    free(f->secs);
    free(f->header);
    free(f);
}

skv_secfile *skv_secfile_read(const char *path, const char magic[8], uint32_t want_version, const char *what) {
    size_t len = 0;
    uint8_t *buf = (uint8_t *)skv_read_file(path, &len);
    if (!buf) return NULL;
    skv_secfile *f = NULL;
    if (len < FIXED_BYTES) {
        if (len >= 8 && memcmp(buf, magic, 8) != 0) skv_error("%s: not a smallkv %s (bad magic)", path, what);
        else skv_error("%s: truncated %s (%zu bytes, shorter than the %d-byte fixed header)", path, what, len, FIXED_BYTES);
        goto fail;
    }
    if (memcmp(buf, magic, 8) != 0) { skv_error("%s: not a smallkv %s (bad magic)", path, what); goto fail; }
    uint32_t version = get32(buf + 8);
    if (version != want_version) {
        skv_error("%s: %s format version %u, this build reads version %u", path, what, version, want_version);
        goto fail;
    }
    uint32_t n = get32(buf + 12);
    uint64_t hl = get64(buf + 16);
    if (n > SKV_SECFILE_MAX_SECTIONS) { skv_error("%s: corrupted %s: section count %u out of range", path, what, n); goto fail; }
    if (hl > MAX_HEADER) { skv_error("%s: corrupted %s: header length %llu out of range", path, what, (unsigned long long)hl); goto fail; }
    size_t tab_off = FIXED_BYTES + (size_t)hl, data_off = tab_off + (size_t)n * TABLE_ENTRY;
    if (len < data_off) {
        skv_error("%s: truncated %s (%zu bytes; header and section table need %zu)", path, what, len, data_off);
        goto fail;
    }
    if (skv_fnv1a64(buf + FIXED_BYTES, (size_t)hl) != get64(buf + 24)) {
        skv_error("%s: corrupted %s: JSON header checksum mismatch", path, what);
        goto fail;
    }
    if (skv_fnv1a64(buf + tab_off, (size_t)n * TABLE_ENTRY) != get64(buf + 32)) {
        skv_error("%s: corrupted %s: section table checksum mismatch", path, what);
        goto fail;
    }
    /* sizes: the file must end exactly after the last payload */
    size_t end = data_off;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = buf + tab_off + (size_t)i * TABLE_ENTRY;
        uint64_t cs = get64(e + 16), us = get64(e + 8);
        /* zstd expands at most 32768:1 (an RLE block: 4 bytes -> 128 KiB), so a larger claimed
         * size is a lie; refusing it here keeps a tiny file from making us allocate gigabytes */
        if (get32(e + 4) != 1 || us > MAX_USIZE || cs > MAX_USIZE || us > cs * ZSTD_MAX_RATIO ||
            !skv_add_ok(end, (size_t)cs, &end)) {
            skv_error("%s: corrupted %s: section %u has a bad table entry", path, what, i);
            goto fail;
        }
    }
    if (len < end) { skv_error("%s: truncated %s (%zu bytes, sections need %zu)", path, what, len, end); goto fail; }
    if (len > end) { skv_error("%s: corrupted %s: %zu unexpected bytes after the last section", path, what, len - end); goto fail; }

    f = skv_calloc(1, sizeof *f, "secfile");
    if (!f) goto fail;
    f->version = version;
    f->header_len = (size_t)hl;
    f->header = skv_malloc((size_t)hl + 1, "header");
    f->secs = skv_calloc(n ? n : 1, sizeof *f->secs, "sections");
    if (!f->header || !f->secs) goto fail;
    memcpy(f->header, buf + FIXED_BYTES, (size_t)hl);
    f->header[hl] = 0;
    if (memchr(f->header, 0, (size_t)hl)) { skv_error("%s: corrupted %s: NUL byte in JSON header", path, what); goto fail; }
    f->n = (int)n;
    const uint8_t *dat = buf + data_off;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = buf + tab_off + (size_t)i * TABLE_ENTRY;
        uint32_t id = get32(e);
        size_t us = (size_t)get64(e + 8), cs = (size_t)get64(e + 16);
        char ids[5];
        skv_sec_id_str(id, ids);
        f->secs[i].id = id;
        if (skv_fnv1a64(dat, cs) != get64(e + 24)) {
            skv_error("%s: corrupted %s: section '%s' checksum mismatch", path, what, ids);
            goto fail;
        }
        unsigned long long fcs = ZSTD_getFrameContentSize(dat, cs);
        if (fcs != us) {
            skv_error("%s: corrupted %s: section '%s' zstd frame size does not match the table", path, what, ids);
            goto fail;
        }
        f->secs[i].data = skv_malloc(us, "section");
        if (!f->secs[i].data) goto fail;
        size_t r = ZSTD_decompress(f->secs[i].data, us, dat, cs);
        if (ZSTD_isError(r) || r != us) {
            skv_error("%s: corrupted %s: section '%s' does not decompress (%s)", path, what, ids,
                      ZSTD_isError(r) ? ZSTD_getErrorName(r) : "size mismatch");
            goto fail;
        }
        if (skv_fnv1a64(f->secs[i].data, us) != get64(e + 32)) {
            skv_error("%s: corrupted %s: section '%s' payload checksum mismatch", path, what, ids);
            goto fail;
        }
        f->secs[i].size = us;
        dat += cs;
    }
    free(buf);
    return f;
fail:
    free(buf);
    skv_secfile_free(f);
    return NULL;
}

const skv_section *skv_secfile_get(const skv_secfile *f, uint32_t id, const char *path) {
    for (int i = 0; i < f->n; i++)
        if (f->secs[i].id == id) return &f->secs[i];
    char ids[5];
    skv_sec_id_str(id, ids);
    skv_error("%s: missing section '%s'", path, ids);
    return NULL;
}
