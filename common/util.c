/* util.c: error messages, checked allocation, whole-file I/O, atomic writes, half floats. */
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[1024];

int skv_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

int skv_error_prefix(const char *fmt, ...) {
    char old[sizeof g_err];
    memcpy(old, g_err, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof g_err - 2) {
        size_t used = (size_t)n;
        g_err[used++] = ':';
        g_err[used++] = ' ';
        size_t left = sizeof g_err - used - 1, ol = strlen(old);
        if (ol > left) ol = left;
        memcpy(g_err + used, old, ol);
        g_err[used + ol] = 0;
    }
    return -1;
}

const char *skv_last_error(void) { return g_err[0] ? g_err : "unknown error"; }
void skv_clear_error(void) { g_err[0] = 0; }

void *skv_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) skv_error("out of memory allocating %zu bytes (%s)", n, what ? what : "buffer");
    return p;
}

void *skv_calloc(size_t count, size_t size, const char *what) {
    size_t n;
    if (!skv_mul_ok(count, size, &n)) {
        skv_error("size overflow allocating %zu x %zu bytes (%s)", count, size, what ? what : "buffer");
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) skv_error("out of memory allocating %zu bytes (%s)", n, what ? what : "buffer");
    return p;
}

void *skv_aligned_alloc(size_t n, const char *what) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        skv_error("out of memory allocating %zu bytes (%s)", n, what ? what : "buffer");
        return NULL;
    }
    return p;
}

char *skv_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = skv_malloc(n, "string");
    if (p) memcpy(p, s, n);
    return p;
}

float **skv_rows_new(int count, size_t n, const char *what) {
    float **a = skv_calloc((size_t)count, sizeof(float *), what);
    if (!a) return NULL;
    for (int i = 0; i < count; i++) {
        a[i] = skv_calloc(n ? n : 1, sizeof(float), what);
        if (!a[i]) {
            skv_rows_free(a, i);
            return NULL;
        }
    }
    return a;
}

float **skv_rows_copy(float *const *src, int count, size_t n, const char *what) {
    if (!src) return NULL;
    float **a = skv_rows_new(count, n, what);
    if (!a) return NULL;
    for (int i = 0; i < count; i++) memcpy(a[i], src[i], n * sizeof(float));
    return a;
}

void skv_rows_free(float **a, int count) {
    if (!a) return;
    for (int i = 0; i < count; i++) free(a[i]);
    free(a);
}

char *skv_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { skv_error("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        skv_error("%s: not a regular file", path);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = skv_malloc(n + 1, path);
    if (!buf) { fclose(f); return NULL; }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf); fclose(f);
        skv_error("%s: read error", path);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int skv_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return skv_error("%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return skv_error("%s: cannot create temp file: %s", path, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd); unlink(tmp);
            return skv_error("%s: write failed: %s", path, strerror(e));
        }
        p += w; left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return skv_error("%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return skv_error("%s: rename failed: %s", path, strerror(e));
    }
    return 0;
}

double skv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* IEEE half <-> float, portable bit manipulation (exact, round-to-nearest-even). */
float skv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            man &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000 | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t skv_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
    if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000) { /* subnormal or zero in half */
        if (absx < 0x33000000) return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value / 2^-24 = m * 2^(e - 126 - 24 + 24) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float skv_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t skv_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
