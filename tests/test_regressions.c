/* test_regressions.c: inputs that once crashed or misbehaved a reader (found by the fuzzers in
 * fuzz/, see docs/robustness.md), replayed through the same reader. Each file in
 * tests/regress/<reader>/ is the file exactly as the reader saw it; the reader must either
 * refuse it with a message (NULL/-1 + skv_last_error()) or load it, and never crash; run
 * `make SAN=1 test` to have ASan/UBSan check the memory accesses too.
 *   gguf/        gguf_open, then the GGUF tokenizer and model loaders
 *   tokenizer/   skv_tokenizer_from_json (file copied to tokenizer.json in a scratch dir)
 *   safetensors/ safetensors_open
 *   hf_config/   config.json of a Hugging Face dir (skv_model_load_hf, no weights)
 *   calib/       skv_calib_read      profile/  skv_profile_load
 *   text/        encode/decode with the SmolLM2 tokenizer (skipped without the model) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "runtime/format/gguf.h"
#include "runtime/model/model.h"
#include "runtime/format/profile.h"
#include "runtime/format/safetensors.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include "tests/support/test_env.h"


/* Calls fn(path) for every regular file in tests/regress/<sub>/ (sorted); returns the count. */
typedef void (*replay_fn)(const char *path);
static int each_file(const char *sub, replay_fn fn) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/regress/%s", sub);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort), count = 0;
    for (int i = 0; i < n; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
        struct stat st;
        if (names[i]->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            print_message("  replay %s\n", p);
            fn(p);
            count++;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

static void copy_to(const char *src, const char *dst) {
    size_t n;
    char *b = skv_read_file(src, &n);
    assert_non_null(b);
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

/* The special ids a tokenizer hands out are -1 or valid ids (crash_bos_id_2pow31.gguf: a
 * u32 bos id >= 2^31 came back as a large negative int). */
static void check_special_ids(const skv_tokenizer *t) {
    int nv = skv_tok_vocab_size(t);
    assert_true(nv > 0);
    assert_true(skv_tok_bos(t) >= -1 && skv_tok_bos(t) < nv);
    assert_true(skv_tok_eos(t) >= -1 && skv_tok_eos(t) < nv);
}

static void refused_with_message(const char *path) {
    const char *e = skv_last_error();
    if (!e || !e[0]) fail_msg("%s: refused without an error message", path);
}

/* ---- readers ---- */

static void replay_gguf(const char *path) {
    skv_clear_error();
    gguf_file *f = gguf_open(path);
    if (!f) { refused_with_message(path); return; }
    skv_clear_error();
    skv_tokenizer *t = skv_tokenizer_from_gguf(f);
    if (t) check_special_ids(t);
    skv_tokenizer_free(t);
    gguf_close(f);
    skv_clear_error();
    skv_model *m = skv_model_load_gguf(path);
    if (m) skv_model_free(m);
    else refused_with_message(path);
}

static void replay_tokenizer(const char *path) {
    char dst[300];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", test_tmpdir());
    copy_to(path, dst);
    skv_clear_error();
    skv_tokenizer *t = skv_tokenizer_from_json(dst);
    if (!t) { refused_with_message(path); return; }
    check_special_ids(t);
    int ids[64];
    int n = skv_tokenize(t, "Hello <|im_start|> 123", 21, true, ids, 64);
    assert_true(n >= 0);
    skv_tokenizer_free(t);
}

static void replay_safetensors(const char *path) {
    skv_clear_error();
    safetensors_file *f = safetensors_open(path);
    if (!f) { refused_with_message(path); return; }
    safetensors_close(f);
}

static void replay_hf_config(const char *path) {
    char dst[300];
    snprintf(dst, sizeof dst, "%s/config.json", test_tmpdir());
    copy_to(path, dst);
    skv_clear_error();
    skv_model *m = skv_model_load_hf(test_tmpdir());   /* no weights here: must be refused */
    assert_null(m);
    refused_with_message(path);
    unlink(dst);
}

static void replay_calib(const char *path) {
    skv_clear_error();
    skv_calib *c = skv_calib_read(path);
    if (!c) { refused_with_message(path); return; }
    skv_calib_free(c);
}

static void replay_profile(const char *path) {
    skv_clear_error();
    skv_profile *p = skv_profile_load(path);
    if (!p) { refused_with_message(path); return; }
    skv_profile_free(p);
}

static skv_tokenizer *g_tok;
static void replay_text(const char *path) {
    size_t n;
    char *text = skv_read_file(path, &n);
    assert_non_null(text);
    for (int ps = 0; ps < 2; ps++) {
        int need = skv_tokenize(g_tok, text, n, ps, NULL, 0);
        assert_true(need >= 0);
        int *ids = malloc(((size_t)need + 1) * sizeof(int));
        assert_int_equal(skv_tokenize(g_tok, text, n, ps, ids, need), need);
        char *d = skv_detokenize(g_tok, ids, need);
        assert_non_null(d);
        free(d);
        free(ids);
    }
    free(text);
}

/* ---- tests ---- */

static void test_regress_gguf(void **st) { (void)st; each_file("gguf", replay_gguf); }
static void test_regress_tokenizer_json(void **st) { (void)st; each_file("tokenizer", replay_tokenizer); }
static void test_regress_safetensors(void **st) { (void)st; each_file("safetensors", replay_safetensors); }
static void test_regress_hf_config(void **st) { (void)st; each_file("hf_config", replay_hf_config); }
static void test_regress_calib(void **st) { (void)st; each_file("calib", replay_calib); }
static void test_regress_profile(void **st) { (void)st; each_file("profile", replay_profile); }

static void test_regress_text(void **st) {
    (void)st;
    char path[512];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) TEST_SKIP_MISSING(path);
    gguf_file *f = gguf_open(path);
    assert_non_null(f);
    g_tok = skv_tokenizer_from_gguf(f);
    gguf_close(f);
    assert_non_null(g_tok);
    each_file("text", replay_text);
    skv_tokenizer_free(g_tok);
    g_tok = NULL;
}

/* Runs load(path) in a child whose address space is capped at 1 GiB (not under ASan, which
 * reserves terabytes of shadow), so that a reader which allocates gigabytes because of a
 * tampered size fails with "out of memory" instead of succeeding lazily; the child must be
 * refused with a message containing `want`. */
typedef int (*load_fn)(const char *path);   /* 0 loaded, -1 refused */
static void refused_within_1g(load_fn load, const char *path, const char *want) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        struct rlimit r = { 1ull << 30, 1ull << 30 };
        setrlimit(RLIMIT_AS, &r);
#endif
        skv_clear_error();
        int rc = load(path);
        const char *e = skv_last_error();
        int ok = rc != 0 && e && strstr(e, want);
        if (!ok) fprintf(stderr, "%s: rc %d, error '%s', expected '%s'\n", path, rc, e ? e : "", want);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}
static int load_gguf_model(const char *p) { skv_model *m = skv_model_load_gguf(p); skv_model_free(m); return m ? 0 : -1; }
static int load_calib(const char *p) { skv_calib *c = skv_calib_read(p); skv_calib_free(c); return c ? 0 : -1; }
static int load_profile(const char *p) { skv_profile *x = skv_profile_load(p); skv_profile_free(x); return x ? 0 : -1; }

/* oom_heads_8192.skvcalib: a 2.5 KB calibration file whose header claims 8192 heads per model
 * made skv_calib_read allocate 3.2 GB of sums before comparing the SUMS section size. */
static void test_regress_oom_calib_heads(void **st) {
    (void)st;
    refused_within_1g(load_calib, "tests/regress/calib/oom_heads_8192.skvcalib",
                      "section 'SUMS' has 1728 bytes, the header implies 3221225472");
}
/* oom_heads_8192.skvprof: the same for a profile (2 x 800 MB similarity matrices). */
static void test_regress_oom_profile_heads(void **st) {
    (void)st;
    refused_within_1g(load_profile, "tests/regress/profile/oom_heads_8192.skvprof", "section 'SIMM' has");
}
/* oom_zstd_size_32g.skvcalib: a 14-byte zstd frame declaring 32 GiB of content; the section
 * reader allocated the declared size before decompressing. Now refused at the table. */
static void test_regress_oom_zstd_size(void **st) {
    (void)st;
    refused_within_1g(load_calib, "tests/regress/calib/oom_zstd_size_32g.skvcalib", "section 0 has a bad table entry");
}

/* oom_block_count.gguf: a 48 KB file whose llama.block_count (8454146) made the model loader
 * allocate 3.2 GB of layer structs before finding the tensors missing. Now refused up front. */
static void test_regress_oom_block_count(void **st) {
    (void)st;
    refused_within_1g(load_gguf_model, "tests/regress/gguf/oom_block_count.gguf", "block_count 8454146 needs at least");
}

/* crash_bos_id_2pow31.gguf: tokenizer.ggml.bos_token_id = 4294443268 (u32) was stored as the
 * int -524028 and returned by skv_tok_bos(); out-of-range ids now become -1 ("none"). */
static void test_regress_bos_id_2pow31(void **st) {
    (void)st;
    gguf_file *f = gguf_open("tests/regress/gguf/crash_bos_id_2pow31.gguf");
    assert_non_null(f);
    skv_tokenizer *t = skv_tokenizer_from_gguf(f);
    assert_non_null(t);
    assert_int_equal(skv_tok_bos(t), -1);
    assert_false(skv_tok_add_bos(t));
    skv_tokenizer_free(t);
    gguf_close(f);
}

/* gguf_open_memory parses with the same code as gguf_open: same verdict, same tensors. */
static void test_gguf_open_memory_matches_file(void **st) {
    (void)st;
    const char *dir = "tests/regress/gguf";
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
        size_t len;
        char *b = names[i]->d_name[0] != '.' ? skv_read_file(p, &len) : NULL;
        if (b) {
            gguf_file *a = gguf_open(p), *m = gguf_open_memory(b, len, p);
            assert_int_equal(a != NULL, m != NULL);
            if (a) {
                assert_int_equal(a->n_kv, m->n_kv);
                assert_int_equal(a->n_tensors, m->n_tensors);
                for (uint64_t k = 0; k < a->n_tensors; k++)
                    assert_memory_equal(a->tensors[k].data, m->tensors[k].data, a->tensors[k].nbytes);
            }
            gguf_close(a);
            gguf_close(m);
            free(b);
        }
        free(names[i]);
    }
    free(names);
    assert_null(gguf_open_memory("", 0, NULL));
    assert_non_null(strstr(skv_last_error(), "<memory>: not a GGUF file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regress_gguf),
        cmocka_unit_test(test_regress_tokenizer_json),
        cmocka_unit_test(test_regress_safetensors),
        cmocka_unit_test(test_regress_hf_config),
        cmocka_unit_test(test_regress_calib),
        cmocka_unit_test(test_regress_profile),
        cmocka_unit_test(test_regress_text),
        cmocka_unit_test(test_regress_oom_block_count),
        cmocka_unit_test(test_regress_oom_calib_heads),
        cmocka_unit_test(test_regress_oom_profile_heads),
        cmocka_unit_test(test_regress_oom_zstd_size),
        cmocka_unit_test(test_regress_bos_id_2pow31),
        cmocka_unit_test(test_gguf_open_memory_matches_file),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
