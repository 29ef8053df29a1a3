/* fuzz_secfile.h: turning fuzz input into a section-container file (runtime/format/secfile.h) for
 * the calibration and profile targets. Every byte of a real file is covered by a checksum,
 * so raw mutations would almost never get past the checksums; two modes get deeper:
 *
 *   byte 0 even (raw):  the rest is the file; the fixed header's JSON and table checksums
 *                       and each section's stored/uncompressed checksums are recomputed
 *                       (where the lengths allow) before the reader sees it;
 *   byte 0 odd (built): the rest is "<header JSON> NUL { u32 id, u32 len, len bytes }*";
 *                       the container is written by skv_secfile_write (zstd), so the
 *                       fuzzer controls the uncompressed section contents directly. */
#ifndef SKV_FUZZ_SECFILE_H
#define SKV_FUZZ_SECFILE_H
#include "fuzz_common.h"
#include "runtime/format/secfile.h"
#include <zstd.h>

#define FZ_FIXED 40
#define FZ_ENTRY 40

static uint64_t fz_get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t fz_get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void fz_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Recompute the checksums of a container in place, as far as its lengths are consistent. */
static void fz_repair(uint8_t *b, size_t len) {
    if (len < FZ_FIXED) return;
    uint32_t n = fz_get32(b + 12);
    uint64_t hl = fz_get64(b + 16);
    if (n > SKV_SECFILE_MAX_SECTIONS || hl > len - FZ_FIXED) return;
    fz_put64(b + 24, skv_fnv1a64(b + FZ_FIXED, (size_t)hl));
    size_t tab = FZ_FIXED + (size_t)hl;
    if ((size_t)n * FZ_ENTRY > len - tab) return;
    size_t dat = tab + (size_t)n * FZ_ENTRY;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = b + tab + (size_t)i * FZ_ENTRY;
        uint64_t cs = fz_get64(e + 16), us = fz_get64(e + 8);
        if (cs > len - dat) break;
        fz_put64(e + 24, skv_fnv1a64(b + dat, (size_t)cs));
        unsigned long long fcs = ZSTD_getFrameContentSize(b + dat, (size_t)cs);
        if (fcs == us && us <= (1u << 24)) {
            void *u = malloc(us ? (size_t)us : 1);
            if (u) {
                size_t r = ZSTD_decompress(u, (size_t)us, b + dat, (size_t)cs);
                if (!ZSTD_isError(r) && r == us) fz_put64(e + 32, skv_fnv1a64(u, (size_t)us));
                free(u);
            }
        }
        dat += (size_t)cs;
    }
    fz_put64(b + 32, skv_fnv1a64(b + tab, (size_t)n * FZ_ENTRY));
}

/* Write the fuzz input as a container file named `name`; returns its path. */
static const char *fz_make_file(const char *name, const char magic[8], uint32_t version,
                                const uint8_t *data, size_t size) {
    if (size == 0) return fuzz_write(name, "", 0);
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (!(data[0] & 1)) {
        uint8_t *b = malloc(n ? n : 1);
        if (!b) abort();
        memcpy(b, p, n);
        fz_repair(b, n);
        const char *path = fuzz_write(name, b, n);
        free(b);
        return path;
    }
    const uint8_t *nul = memchr(p, 0, n);
    size_t hl = nul ? (size_t)(nul - p) : n;
    char *hdr = malloc(hl + 1);
    if (!hdr) abort();
    memcpy(hdr, p, hl);
    hdr[hl] = 0;
    skv_section secs[SKV_SECFILE_MAX_SECTIONS];
    int ns = 0;
    size_t at = nul ? hl + 1 : n;
    while (ns < SKV_SECFILE_MAX_SECTIONS && n - at >= 8) {
        uint32_t id = fz_get32(p + at), sl = fz_get32(p + at + 4);
        at += 8;
        if (sl > n - at) sl = (uint32_t)(n - at);
        secs[ns].id = id;
        secs[ns].data = (void *)(p + at);
        secs[ns].size = sl;
        ns++;
        at += sl;
    }
    const char *path = fuzz_path(name);
    if (skv_secfile_write(path, magic, version, hdr, secs, ns, 1) != 0) {
        fprintf(stderr, "fuzz: skv_secfile_write failed: %s\n", skv_last_error());
        abort();
    }
    free(hdr);
    return path;
}

#endif
