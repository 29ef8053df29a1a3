/* test_faults.c: a full disk or an unwritable output never damages the file already there.
 *
 * Every tool writes through skv_write_file_atomic (temp file, fsync, rename). Here the disk
 * is "full" for a child process through RLIMIT_FSIZE (writes past the limit fail with
 * EFBIG, SIGXFSZ ignored): `mapgen` must fail with a clear message and exit status 1, the
 * old profile must stay byte-identical and no temp file may be left. The same for a library
 * call writing into a missing directory. Binaries come from $BUILD/bin (default build/bin);
 * the mapgen cases are skipped when it or the shipped calibration file is missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/util.h"
#include "tests/support/test_env.h"

#define CALIB "profiles/smollm2-135m-self.calib"


static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* Run argv with stderr to errfile, optionally with a file-size limit. Returns exit status. */
static int run_limited(char *const argv[], long fsize_limit, const char *errfile) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        FILE *e = freopen(errfile, "w", stderr);
        (void)e;
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        if (fsize_limit > 0) {
            struct rlimit rl = { (rlim_t)fsize_limit, (rlim_t)fsize_limit };
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_full_disk_keeps_old_profile(void **st) {
    (void)st;
    char bin[512], prof[512], err[512];
    test_bin_path(bin, sizeof bin, "mapgen");
    if (access(bin, X_OK) != 0 || access(CALIB, R_OK) != 0) skip();
    snprintf(prof, sizeof prof, "%s/p.skvprof", test_tmpdir());
    snprintf(err, sizeof err, "%s/err.txt", test_tmpdir());
    char *ok_argv[] = { bin, (char *)CALIB, (char *)"-o", prof, NULL };
    assert_int_equal(run_limited(ok_argv, 0, err), 0);
    size_t n_old = 0;
    char *old = skv_read_file(prof, &n_old);
    assert_non_null(old);
    assert_true(n_old > 65536);

    /* the disk is full after 64 KiB: the new profile cannot be written */
    assert_int_equal(run_limited(ok_argv, 65536, err), 1);
    char *msg = skv_read_file(err, NULL);
    assert_non_null(msg);
    assert_non_null(strstr(msg, prof));          /* names the file */
    assert_non_null(strstr(msg, "write failed")); /* and the problem */
    free(msg);
    size_t n_now = 0;
    char *now = skv_read_file(prof, &n_now);
    assert_non_null(now);
    assert_int_equal(n_now, n_old);
    assert_memory_equal(now, old, n_old);        /* the old profile is intact */
    assert_int_equal(count_temp_files(test_tmpdir()), 0); /* and nothing is left half-written */
    free(now);
    free(old);
}

static void test_unwritable_output_keeps_old_file(void **st) {
    (void)st;
    char path[512], bad[600];
    snprintf(path, sizeof path, "%s/keep.bin", test_tmpdir());
    assert_int_equal(skv_write_file_atomic(path, "old contents", 12), 0);
    /* a directory that does not exist, and a path below a regular file */
    snprintf(bad, sizeof bad, "%s/missing-dir/out.bin", test_tmpdir());
    assert_int_equal(skv_write_file_atomic(bad, "new", 3), -1);
    assert_non_null(strstr(skv_last_error(), "missing-dir/out.bin"));
    snprintf(bad, sizeof bad, "%s/out.bin", path);
    assert_int_equal(skv_write_file_atomic(bad, "new", 3), -1);
    assert_non_null(strstr(skv_last_error(), "cannot create"));
    size_t n = 0;
    char *now = skv_read_file(path, &n);
    assert_non_null(now);
    assert_int_equal(n, 12);
    assert_memory_equal(now, "old contents", 12);
    free(now);
    assert_int_equal(count_temp_files(test_tmpdir()), 0);
}

static void test_atomic_write_replaces_whole_file(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/replace.bin", test_tmpdir());
    assert_int_equal(skv_write_file_atomic(path, "a much longer old content", 25), 0);
    assert_int_equal(skv_write_file_atomic(path, "new", 3), 0);
    size_t n = 0;
    char *now = skv_read_file(path, &n);
    assert_non_null(now);
    assert_int_equal(n, 3);
    assert_memory_equal(now, "new", 3);
    free(now);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk_keeps_old_profile),
        cmocka_unit_test(test_unwritable_output_keeps_old_file),
        cmocka_unit_test(test_atomic_write_replaces_whole_file),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
