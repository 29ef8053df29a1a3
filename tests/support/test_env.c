/* test_env.c: the models folder, the build folder and temporary directories for the tests
 * (see test_env.h). */
#include "test_env.h"
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *test_data_dir(void) {
    const char *d = getenv("SKV_DATA_DIR");
    return d && *d ? d : "data";
}

const char *test_data_file(const char *rel) {
    const char *p = test_path(test_data_dir(), rel);
    return p && access(p, R_OK) == 0 ? p : NULL;
}

const char *test_models_dir(void) {
    const char *d = getenv("SKV_MODELS_DIR");
    return d && *d ? d : "models";
}

const char *test_build_dir(void) {
    const char *b = getenv("BUILD");
    return b && *b ? b : "build";
}

char *test_join(char *buf, size_t n, const char *dir, const char *name) {
    const int w = snprintf(buf, n, "%s/%s", dir, name);
    if (n && (w < 0 || (size_t)w >= n)) buf[0] = '\0';
    return buf;
}

const char *test_path(const char *dir, const char *name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    return *test_join(buf[k], sizeof buf[k], dir, name) ? buf[k] : NULL;
}

char *test_model_file(char *buf, size_t n, const char *file) {
    return test_join(buf, n, test_models_dir(), file);
}

char *test_model_path(char *buf, size_t n, const char *file) {
    test_model_file(buf, n, file);
    return n && buf[0] && access(buf, R_OK) == 0 ? buf : NULL;
}

char *test_bin_path(char *buf, size_t n, const char *tool) {
    const int w = snprintf(buf, n, "%s/bin/%s", test_build_dir(), tool);
    if (n && (w < 0 || (size_t)w >= n)) buf[0] = '\0';
    return buf;
}

int test_tmpdir_make(char *buf, size_t n, const char *tag) {
    const int w = snprintf(buf, n, "/tmp/skv_test_%s_XXXXXX", tag);
    if (w < 0 || (size_t)w >= n) { if (n) buf[0] = '\0'; return -1; }
    return mkdtemp(buf) ? 0 : -1;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

int test_tmpdir_remove(const char *dir) {
    if (!dir || !*dir) return -1;
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

static char g_tmpdir[256];

int test_tmpdir_setup(void **state) {
    const char *name = program_invocation_short_name;   /* glibc (_GNU_SOURCE) */
    if (!strncmp(name, "test_", 5)) name += 5;
    if (test_tmpdir_make(g_tmpdir, sizeof g_tmpdir, name)) { g_tmpdir[0] = '\0'; return -1; }
    if (state) *state = g_tmpdir;
    return 0;
}

int test_tmpdir_teardown(void **state) {
    (void)state;
    const int r = test_tmpdir_remove(g_tmpdir);
    g_tmpdir[0] = '\0';
    return r;
}

const char *test_tmpdir(void) { return g_tmpdir; }

const char *test_tmp(const char *name) { return test_path(g_tmpdir, name); }
