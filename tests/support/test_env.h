/* test_env.h: where the tests find things and keep scratch files, one copy for every test:
 * the models folder ($SKV_MODELS_DIR, default "models") and the model files in it, the
 * build folder ($BUILD, default "build") and its tools, the evaluation data folder, and a
 * temporary directory per test group (mkdtemp, removed recursively with nftw).
 *
 * No runtime or cmocka dependency (the fuzz targets link every tests/support/ object too);
 * the skip macros below expand in the test files, which include cmocka.h first. */
#ifndef SKV_TEST_ENV_H
#define SKV_TEST_ENV_H
#include <stddef.h>

/* the model files the tests use */
#define TEST_SMOL   "SmolLM2-135M-Instruct.Q4_1.gguf"
#define TEST_QWEN05 "qwen2.5-coder-0.5b.gguf"
#define TEST_QWEN15 "qwen2.5-coder-1.5b.gguf"

/* $SKV_MODELS_DIR, or "models" when it is unset or empty */
const char *test_models_dir(void);
/* $BUILD, or "build" when it is unset or empty */
const char *test_build_dir(void);
/* the evaluation data folder, as `smallkv eval` finds it: $SKV_DATA_DIR, or "data" when it
 * is unset or empty (filled by scripts/fetch-data.sh, which `make check` runs first) */
const char *test_data_dir(void);
/* <data dir>/rel when it can be read (test_path's rotating buffers), else NULL */
const char *test_data_file(const char *rel);

/* dir/name into buf (n bytes); returns buf ("" when it does not fit) */
char *test_join(char *buf, size_t n, const char *dir, const char *name);
/* dir/name in one of 8 rotating static buffers (copy it if it must outlive 8 more calls);
 * NULL when it does not fit (1024 bytes) */
const char *test_path(const char *dir, const char *name);

/* <models dir>/file into buf, whether or not the file is there; returns buf */
char *test_model_file(char *buf, size_t n, const char *file);
/* the same, but NULL when the file cannot be read (the caller skips; buf holds the path
 * either way, for the message) */
char *test_model_path(char *buf, size_t n, const char *file);
/* <build dir>/bin/tool into buf; returns buf */
char *test_bin_path(char *buf, size_t n, const char *tool);

/* mkdtemp("/tmp/skv_test_<tag>_XXXXXX") into buf (n bytes): 0, or -1 */
int test_tmpdir_make(char *buf, size_t n, const char *tag);
/* remove dir and everything under it (depth first, links not followed): 0, or -1 when
 * something could not be removed */
int test_tmpdir_remove(const char *dir);

/* The test program's temporary directory, for cmocka (group or per-test setup/teardown):
 * test_tmpdir_setup makes /tmp/skv_test_<name>_XXXXXX, <name> the program's name without
 * "test_" (test_calib: /tmp/skv_test_calib_XXXXXX), and sets *state to its path;
 * test_tmpdir_teardown removes it with everything in it. test_tmpdir() is its path ("" when
 * there is none), test_tmp(name) is test_tmpdir()/name in test_path's rotating buffers. */
int test_tmpdir_setup(void **state);
int test_tmpdir_teardown(void **state);
const char *test_tmpdir(void);
const char *test_tmp(const char *name);

/* cmocka skip with the standard message: "<what> missing: skipping" */
#define TEST_SKIP_MISSING(what) \
    do { print_message("%s missing: skipping\n", (what)); skip(); } while (0)
/* the same for a data set the data locator could not get (no network, no mirror) */
#define TEST_SKIP_DATA(set) \
    do { print_message("data set %s not in %s (scripts/fetch-data.sh %s could not get it): skipping\n", \
                       (set), test_data_dir(), (set)); skip(); } while (0)
/* the same for a model file not in the models folder */
#define TEST_SKIP_MODEL(file) \
    do { print_message("%s/%s missing: skipping\n", test_models_dir(), (file)); skip(); } while (0)

#endif
