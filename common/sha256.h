/* sha256.h: SHA-256 (FIPS 180-4), streaming and one-shot, plus a file hasher.
 * Used for corpus and weight fingerprints in calibration files and profiles. */
#ifndef SKV_SHA256_H
#define SKV_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t nbytes;      /* message length so far */
    uint8_t buf[64];      /* pending partial block */
    size_t nbuf;
} skv_sha256_ctx;

void skv_sha256_init(skv_sha256_ctx *c);
void skv_sha256_update(skv_sha256_ctx *c, const void *data, size_t len);
void skv_sha256_final(skv_sha256_ctx *c, uint8_t out[32]);
void skv_sha256(const void *data, size_t len, uint8_t out[32]);
/* 64 lowercase hex digits + NUL. */
void skv_sha256_hex(const uint8_t digest[32], char hex[65]);
/* Hash a whole file (streamed). -1 + error if it cannot be read. */
int skv_sha256_file(const char *path, char hex[65]);

#endif
