/* secfile.h: the checksummed section container shared by calibration files and profiles.
 *
 * Layout (all integers little-endian):
 *   0   magic[8]            e.g. "SKVCALIB", "SKVPROF\0"
 *   8   u32 version
 *   12  u32 n_sections      (<= SKV_SECFILE_MAX_SECTIONS)
 *   16  u64 header_len      bytes of UTF-8 JSON that follow (<= 64 MiB)
 *   24  u64 header_fnv      FNV-1a 64 of the JSON bytes
 *   32  u64 table_fnv       FNV-1a 64 of the section table
 *   40  header JSON (header_len bytes, no NUL)
 *   ..  section table: n_sections x 40 bytes
 *         u32 id (four ASCII chars, first char in the lowest byte), u32 codec (1 = zstd),
 *         u64 usize (uncompressed bytes), u64 csize (stored bytes),
 *         u64 cfnv (FNV-1a 64 of the stored bytes), u64 ufnv (of the uncompressed bytes)
 *   ..  section payloads, in table order, each one zstd frame (with zstd's own checksum)
 * The file ends exactly after the last payload; anything else is refused.
 * Every byte is covered by a length check or a checksum, so any truncation or single
 * flipped byte is detected and reported with the region it hit. */
#ifndef SKV_SECFILE_H
#define SKV_SECFILE_H
#include <stddef.h>
#include <stdint.h>

#define SKV_SECFILE_MAX_SECTIONS 64
#define SKV_SEC_ID(a, b, c, d) \
    ((uint32_t)(uint8_t)(a) | (uint32_t)(uint8_t)(b) << 8 | (uint32_t)(uint8_t)(c) << 16 | (uint32_t)(uint8_t)(d) << 24)

typedef struct {
    uint32_t id;
    void *data;       /* owned (for read files); borrowed for writing */
    size_t size;
} skv_section;

typedef struct {
    uint32_t version;
    char *header;     /* NUL-terminated JSON text */
    size_t header_len;
    int n;
    skv_section *secs;
} skv_secfile;

uint64_t skv_fnv1a64(const void *data, size_t len);

/* Compress the sections (zstd level zlevel) and write the container atomically. */
int skv_secfile_write(const char *path, const char magic[8], uint32_t version, const char *header_json,
                      const skv_section *secs, int n, int zlevel);

/* Read and validate everything (magic, version == want_version, sizes, checksums,
 * decompression). `what` names the kind of file in messages ("calibration file").
 * NULL + error naming the path and the damaged region. */
skv_secfile *skv_secfile_read(const char *path, const char magic[8], uint32_t want_version, const char *what);
/* The section with this id, or NULL + error "<path>: missing section 'XXXX'". */
const skv_section *skv_secfile_get(const skv_secfile *f, uint32_t id, const char *path);
void skv_secfile_free(skv_secfile *f);
/* "SUMS" style printable id. */
void skv_sec_id_str(uint32_t id, char out[5]);

#endif
