/* test_install.c: `make install` as a user of the C library sees it. Into a temporary PREFIX:
 * `make -s install PREFIX=tmp BUILD=$BUILD` at the repo root (the current directory, as for
 * every test), then the installed tree (archive, shared library with its soname links and
 * only smallkv_* exported, the public header alone, smallkv.pc naming the prefix, the
 * tools); examples/generate_pair.c compiled against the installed copy through pkg-config
 * (PKG_CONFIG_PATH=tmp/lib/pkgconfig), once shared (rpath) and once static
 * (`pkg-config --static`, the archive named), each run on SmolLM2 as its own SLM with the
 * shipped profile (the run is skipped when the model is missing; the builds are not) and
 * compared with the in-tree $BUILD/bin/generate_pair; then `make uninstall` and nothing may
 * be left under the prefix. MAKEFLAGS/MAKELEVEL/MFLAGS are unset first, so that a `make test`
 * run does not hand its jobserver and variables to the inner make.
 * A sanitizer build (build-san) installs its instrumented library: the inner make gets SAN=1,
 * and smallkv.pc then adds the sanitizer runtime to the example's link. The CUDA build is not
 * tested here (.ci/run runs only the CUDA tests in build-cuda/): every case skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/test_env.h"

#ifdef __SANITIZE_ADDRESS__
#define INNER_MAKE_VARS " SAN=1"
#else
#define INNER_MAKE_VARS ""
#endif
#define VERSION "0.1.0" /* SKV_VERSION in the Makefile */
#define PROMPT "The three primary colours are"

static char build[256], tmp[256], prefix[300], work[300], smol[256];
static const char *profile = "profiles/smollm2-135m-self.skvprof";
static bool installed;
static char out[1 << 16];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int setup(void **st) {
    (void)st;
#ifdef __SANITIZE_ADDRESS__
    /* a sanitizer test binary run by hand, without BUILD, belongs to build-san */
    snprintf(build, sizeof build, "%s", getenv("BUILD") ? test_build_dir() : "build-san");
#else
    snprintf(build, sizeof build, "%s", test_build_dir());
#endif
    test_model_file(smol, sizeof smol, TEST_SMOL);
    if (test_tmpdir_make(tmp, sizeof tmp, "install") != 0) return -1;
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    snprintf(work, sizeof work, "%s/work", tmp);
    if (mkdir(prefix, 0755) || mkdir(work, 0755)) return -1;
    /* the inner make starts afresh; pkg-config finds the installed smallkv.pc first */
    unsetenv("MAKEFLAGS");
    unsetenv("MAKELEVEL");
    unsetenv("MFLAGS");
    unsetenv("MAKEOVERRIDES");
    char pc[400];
    snprintf(pc, sizeof pc, "%s/lib/pkgconfig", prefix);
    setenv("PKG_CONFIG_PATH", pc, 1);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    return test_tmpdir_remove(tmp);
}

/* Run a shell command with stderr merged into out (truncated); print the command, its exit
 * status, its time and the end of its output. Returns the exit status (-1: killed). */
static int sh(const char *fmt, ...) {
    char cmd[4096], full[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    double t0 = now();
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {}
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    size_t show = n > 3000 ? n - 3000 : 0;
    print_message("$ %s -> %d (%.1f s)\n%s%s", cmd, rc, now() - t0, show ? "...\n" : "", out + show);
    return rc;
}

/* path under the prefix */
static const char *at(const char *rel) {
    static char p[600];
    snprintf(p, sizeof p, "%s/%s", prefix, rel);
    return p;
}

static void expect_file(const char *rel, mode_t mode) {
    struct stat s;
    if (lstat(at(rel), &s) != 0 || !S_ISREG(s.st_mode)) fail_msg("not installed as a file: %s", at(rel));
    assert_int_equal((int)(s.st_mode & 0777), (int)mode);
}

static void expect_link(const char *rel, const char *target) {
    char t[256];
    ssize_t n = readlink(at(rel), t, sizeof t - 1);
    if (n < 0) fail_msg("not installed as a link: %s", at(rel));
    t[n] = 0;
    assert_string_equal(t, target);
}

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* names in a directory, except . and .. */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void not_cuda(void) {
#if SKV_CUDA
    print_message("skipped: the install test runs in the CPU and sanitizer builds, not in %s\n", build);
    skip();
#endif
}

static void test_install(void **st) {
    (void)st;
    not_cuda();
    if (access("Makefile", R_OK) || access("smallkv.pc.in", R_OK) || access("examples/generate_pair.c", R_OK))
        fail_msg("run from the repository root (no Makefile, smallkv.pc.in or examples/ here)");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(sh("make -s -j%ld install PREFIX='%s' DESTDIR= BUILD='%s'%s", cpus > 0 ? cpus : 1, prefix, build,
                        INNER_MAKE_VARS),
                     0);
    expect_file("lib/libsmallkv.a", 0644);
    expect_file("lib/libsmallkv.so." VERSION, 0755);
    expect_link("lib/libsmallkv.so.0", "libsmallkv.so." VERSION);
    expect_link("lib/libsmallkv.so", "libsmallkv.so.0");
    expect_file("include/smallkv.h", 0644);
    assert_int_equal(entries(at("include")), 1); /* the public header only */
    assert_true(same_file(at("include/smallkv.h"), "include/smallkv.h"));
    expect_file("lib/pkgconfig/smallkv.pc", 0644);
    expect_file("bin/smallkv", 0755);
    expect_file("bin/calibrate", 0755);
    expect_file("bin/mapgen", 0755);
    /* an MPI=1 build (CI's, the flag reaching this make through MAKEFLAGS) also installs
     * the eval tool sharded over MPI ranks */
    const bool mpi = access(at("bin/smallkv-mpi"), F_OK) == 0;
    if (mpi) expect_file("bin/smallkv-mpi", 0755);
    assert_int_equal(entries(at("bin")), mpi ? 4 : 3);
    assert_int_equal(entries(at("lib")), 5); /* .a, .so.VERSION, .so.0, .so, pkgconfig/ */
    assert_int_equal(entries(prefix), 3);    /* bin, include, lib */
    /* the .pc names the prefix; pkg-config reads it */
    assert_int_equal(sh("grep -x 'prefix=%s' '%s'", prefix, at("lib/pkgconfig/smallkv.pc")), 0);
    assert_int_equal(sh("pkg-config --modversion smallkv"), 0);
    assert_string_equal(out, VERSION "\n");
    assert_int_equal(sh("pkg-config --libs smallkv"), 0);
    assert_non_null(strstr(out, "-lsmallkv"));
    assert_int_equal(sh("pkg-config --static --libs smallkv"), 0);
    assert_non_null(strstr(out, "-fopenmp"));
    assert_non_null(strstr(out, "-lzstd"));
    assert_non_null(strstr(out, "-lcjson"));
    /* the soname, and the API alone exported */
    assert_int_equal(sh("readelf -d '%s' | grep SONAME", at("lib/libsmallkv.so." VERSION)), 0);
    assert_non_null(strstr(out, "[libsmallkv.so.0]"));
    assert_int_equal(sh("nm -D --defined-only '%s' | awk '{print $NF}' | sort", at("lib/libsmallkv.so")), 0);
    assert_non_null(strstr(out, "smallkv_session_new\n"));
    /* exported == declared in the public header, both ways */
    static char exported[sizeof out];
    snprintf(exported, sizeof exported, "%s", out);
    assert_int_equal(sh("grep -o '\\bsmallkv_[a-z0-9_]*(' include/smallkv.h | tr -d '(' | sort -u"), 0);
    if (strcmp(exported, out) != 0) {
        print_message("exported:\n%s", exported);
        fail_msg("libsmallkv.so exports other names than the functions of include/smallkv.h (above)");
    }
    installed = true;
}

/* the in-tree example's answer (built by `make all`), once */
static const char *reference(void) {
    static char ref[sizeof out];
    static int done;
    if (!done) {
        done = 1;
        char bin[300];
        snprintf(bin, sizeof bin, "%s/bin/generate_pair", build);
        if (access(bin, X_OK) == 0 && sh("'%s' '%s' '%s' '%s'", bin, smol, smol, profile) == 0)
            snprintf(ref, sizeof ref, "%s", out);
        else
            print_message("no in-tree %s answer: outputs not compared\n", bin);
    }
    return ref[0] ? ref : NULL;
}

/* the two answer lines (prompt + greedy answer, the fork's) */
static size_t answer_len(const char *s) {
    const char *e = strchr(s, '\n');
    e = e ? strchr(e + 1, '\n') : NULL;
    return e ? (size_t)(e - s) : strlen(s);
}

/* build examples/generate_pair.c against the installed copy as `name`, check how it links
 * (libsmallkv.so.0 needed or not), then run it on SmolLM2 */
static void build_and_run(const char *name, const char *link, bool shared) {
    if (!installed) fail_msg("nothing installed (test_install failed)");
    char bin[400];
    snprintf(bin, sizeof bin, "%s/%s", work, name);
    assert_int_equal(sh("${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 examples/generate_pair.c -o '%s' %s", bin, link), 0);
    assert_int_equal(sh("readelf -d '%s' | grep NEEDED", bin), 0);
    if (shared != (strstr(out, "[libsmallkv.so.0]") != NULL))
        fail_msg("%s: libsmallkv.so.0 %s", name, shared ? "not needed" : "needed by a static link");
    if (access(smol, R_OK) != 0) {
        print_message("skipped: built; no %s to run it on (make models-test)\n", smol);
        skip();
    }
    const char *ref = reference();
    assert_int_equal(sh("env -u LD_LIBRARY_PATH '%s' '%s' '%s' '%s'", bin, smol, smol, profile), 0);
    assert_memory_equal(out, PROMPT, strlen(PROMPT));
    assert_non_null(strstr(out, "\n[fork] " PROMPT));
    assert_non_null(strstr(out, "\nhot "));
    assert_non_null(strstr(out, " B, full would be "));
    assert_non_null(strstr(out, "\nprefill "));
    assert_non_null(strstr(out, " tok/s, decode "));
    if (ref) { /* the same code: the same greedy answers as the in-tree build */
        size_t n = answer_len(out);
        assert_int_equal((int)n, (int)answer_len(ref));
        assert_memory_equal(out, ref, n);
    }
}

static void test_shared_example(void **st) {
    (void)st;
    not_cuda();
    char link[600];
    snprintf(link, sizeof link, "$(pkg-config --cflags --libs smallkv) -Wl,-rpath,'%s/lib'", prefix);
    build_and_run("generate_pair_shared", link, true);
}

/* pkg-config --static gives the flags; -l:libsmallkv.a picks the archive over the .so */
static void test_static_example(void **st) {
    (void)st;
    not_cuda();
    build_and_run("generate_pair_static",
                  "$(pkg-config --cflags smallkv) $(pkg-config --static --libs smallkv | sed 's/-lsmallkv\\b/-l:libsmallkv.a/')",
                  false);
}

static void test_uninstall(void **st) {
    (void)st;
    not_cuda();
    if (!installed) fail_msg("nothing installed (test_install failed)");
    assert_int_equal(sh("make -s uninstall PREFIX='%s' DESTDIR= BUILD='%s'%s", prefix, build, INNER_MAKE_VARS), 0);
    if (entries(prefix) != 0) {
        sh("find '%s'", prefix);
        fail_msg("left under %s after uninstall (above)", prefix);
    }
    installed = false;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install),
        cmocka_unit_test(test_shared_example),
        cmocka_unit_test(test_static_example),
        cmocka_unit_test(test_uninstall),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
