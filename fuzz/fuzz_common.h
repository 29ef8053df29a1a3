/* fuzz_common.h: helpers shared by the libFuzzer targets in fuzz/ (header-only, each target
 * is one translation unit): a per-process scratch directory for readers that take a path,
 * writing the fuzz input there, and a check that every failure left an error message.
 *
 * Readers must return NULL/-1 with a message on bad input and never crash; the sanitizers
 * (ASan + UBSan, built with -fno-sanitize-recover) turn any memory error into a crash. */
#ifndef SKV_FUZZ_COMMON_H
#define SKV_FUZZ_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <ftw.h>
#include "common/util.h"

static char g_fuzz_dir[128];

static int fuzz_rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p) == 0 ? 0 : 0;
}
static void fuzz_cleanup(void) {
    if (g_fuzz_dir[0]) nftw(g_fuzz_dir, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A scratch directory (tmpfs when available), made once per process, removed at exit. */
static const char *fuzz_dir(void) {
    if (!g_fuzz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "%s/skv_fuzz_%d", base, (int)getpid());
        mkdir(g_fuzz_dir, 0700);
        atexit(fuzz_cleanup);
    }
    return g_fuzz_dir;
}

/* dir/name as a static path (eight rotating buffers: copy it if it must live longer). */
static const char *fuzz_path(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fuzz_dir(), name);
    return buf[k];
}

/* Write bytes to dir/name; returns the path (aborts if the scratch dir is unusable). */
__attribute__((unused)) static const char *fuzz_write(const char *name, const void *data, size_t n) {
    const char *p = fuzz_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", p);
        abort();
    }
    return p;
}

/* A failing reader must have said why: an empty message is a bug too. With FUZZ_DEBUG set
 * in the environment the message is printed (to see why a seed is refused). */
__attribute__((unused)) static void fuzz_expect_error(const char *who) {
    const char *e = skv_last_error();
    if (getenv("FUZZ_DEBUG")) fprintf(stderr, "fuzz: %s: %s\n", who, e ? e : "(null)");
    if (!e || !e[0]) {
        fprintf(stderr, "fuzz: %s failed without an error message\n", who);
        abort();
    }
}

/* Read every byte of a region so that ASan checks its bounds; returns a value that
 * depends on the bytes (so the loop is not optimised away). */
__attribute__((unused)) static unsigned fuzz_touch(const void *p, size_t n) {
    const volatile unsigned char *q = p;
    unsigned s = 0;
    if (n) s += q[0] + q[n - 1];
    return s;
}

#endif
