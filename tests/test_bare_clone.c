/* test_bare_clone.c: what a user without this workplace's data mirror meets. The README's
 * main job (scripts/run-main.sh) runs with no mirror (SKV_DATA empty), no data folder and
 * no network for data, on the test model as LLM and SLM with its shipped self profile, and
 * prints the three answers with their statistics; the data locator (scripts/fetch-data.sh)
 * reports what it cannot get, takes a file from a mirror only when its pinned sha256 matches,
 * and never leaves a half-written file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/support/test_env.h"

/* run cmd through sh with stdout + stderr into a heap string; *rc gets the exit status */
static char *run(const char *cmd, int *rc) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (;;) {
        if (n + 4096 + 1 > cap) { cap *= 2; out = realloc(out, cap); assert_non_null(out); }
        size_t r = fread(out + n, 1, 4096, p);
        if (!r) break;
        n += r;
    }
    out[n] = 0;
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static int count(const char *hay, const char *needle) {
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) k++;
    return k;
}

/* the main job, as a bare clone runs it, on the test model */
static void test_main_job_without_mirror(void **st) {
    (void)st;
    char bin[512], model[512], cmd[4096];
    test_bin_path(bin, sizeof bin, "smallkv");
    if (access(bin, X_OK)) TEST_SKIP_MISSING(bin);
    if (!test_model_path(model, sizeof model, TEST_SMOL)) TEST_SKIP_MODEL(TEST_SMOL);
    snprintf(cmd, sizeof cmd,
             "env SKV_DATA= SKV_DATA_DIR=%s SKV_DATA_OFFLINE=1 OMP_NUM_THREADS=2 BIN=%s LLM=%s SLM=%s "
             "PROFILE=profiles/smollm2-135m-self.skvprof N=8 scripts/run-main.sh",
             test_tmp("nodata"), bin, model, model);
    int rc;
    char *out = run(cmd, &rc);
    if (rc) print_message("%s\n", out);
    assert_int_equal(rc, 0);
    /* three answers, each with its statistics (memory by tier, speed) */
    assert_non_null(strstr(out, "=== policy full ==="));
    assert_non_null(strstr(out, "=== policy h2o, budget 0.2 ==="));
    assert_non_null(strstr(out, "=== policy smallkv, budget 0.2 ==="));
    assert_int_equal(count(out, "[stats] decode "), 3);
    assert_int_equal(count(out, "), cold "), 3);
    assert_non_null(strstr(out, "SLM weights "));
    /* nothing was fetched: the document is in the repository */
    struct stat sb;
    assert_int_not_equal(stat(test_tmp("nodata"), &sb), 0);
    free(out);
}

/* the locator with no source: says what is missing, exit 1 (0 with --allow-missing),
 * and leaves no file behind */
static void test_locator_reports_missing(void **st) {
    (void)st;
    char cmd[4096];
    const char *dest = test_tmp("missing");
    snprintf(cmd, sizeof cmd, "env SKV_DATA=/nonexistent SKV_DATA_DIR=%s scripts/fetch-data.sh --offline gsm8k", dest);
    int rc;
    char *out = run(cmd, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "gsm8k: 2 files"));
    assert_non_null(strstr(out, "2 MISSING"));
    assert_non_null(strstr(out, "gsm8k/test.jsonl"));
    free(out);
    char f[1200];
    snprintf(f, sizeof f, "%s/gsm8k/test.jsonl", dest);
    assert_int_not_equal(access(f, F_OK), 0);
    snprintf(cmd, sizeof cmd, "ls -A %s/gsm8k 2>/dev/null | wc -l", dest);
    out = run(cmd, &rc);
    assert_int_equal(atoi(out), 0);
    free(out);
    snprintf(cmd, sizeof cmd, "env SKV_DATA= SKV_DATA_DIR=%s scripts/fetch-data.sh --offline --allow-missing gsm8k", dest);
    out = run(cmd, &rc);
    assert_int_equal(rc, 0);
    free(out);
    out = run("scripts/fetch-data.sh no-such-set", &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown data set 'no-such-set'"));
    free(out);
}

/* a mirror's file is taken only when its sha256 is the pinned one */
static void test_locator_checks_mirror(void **st) {
    (void)st;
    char cmd[8192];
    const char *mirror = test_tmp("mirror"), *dest = test_tmp("dest");
    /* a mirror with a wrong mt-bench file: refused */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/mt-bench && echo '{\"question_id\": 1}' > %s/mt-bench/question.jsonl", mirror, mirror);
    int rc;
    free(run(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "env SKV_DATA=%s SKV_DATA_DIR=%s scripts/fetch-data.sh --offline mt-bench", mirror, dest);
    char *out = run(cmd, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "does not match its pinned sha256"));
    free(out);
    char f[1200];
    snprintf(f, sizeof f, "%s/mt-bench/question.jsonl", dest);
    assert_int_not_equal(access(f, F_OK), 0);
    /* the right file (when this machine has it): taken, named in the report */
    const char *good = test_data_file("mt-bench/question.jsonl");
    if (!good) {
        snprintf(cmd, sizeof cmd, "scripts/fetch-data.sh mt-bench >/dev/null 2>&1");
        free(run(cmd, &rc));
        good = test_data_file("mt-bench/question.jsonl");
    }
    if (!good) TEST_SKIP_DATA("mt-bench");
    snprintf(cmd, sizeof cmd, "cp %s %s/mt-bench/question.jsonl", good, mirror);
    free(run(cmd, &rc));
    assert_int_equal(rc, 0);
    snprintf(cmd, sizeof cmd, "env SKV_DATA=/nonexistent:%s SKV_DATA_DIR=%s scripts/fetch-data.sh --offline mt-bench", mirror, dest);
    out = run(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "(1 mirror "));
    free(out);
    assert_int_equal(access(f, R_OK), 0);
    /* present and right: not fetched again */
    out = run(cmd, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "(1 present)"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_main_job_without_mirror),
        cmocka_unit_test(test_locator_reports_missing),
        cmocka_unit_test(test_locator_checks_mirror),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
