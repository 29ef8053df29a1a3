/* test_profile.c: mapping and early-stop math on hand-made matrices, the identity case
 * (SLM == LLM maps every head to itself with similarity 1), the profile round trip,
 * refusal of damaged profiles and of mismatched models, the printer, the HTML report's
 * well-formedness, load time at a realistic size (336 x 336 heads), and the fingerprint
 * of the CI model (skipped when models/ lacks it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/model.h"
#include "calibrate/mapping.h"
#include "runtime/format/profile.h"
#include "mapgen/report_html.h"
#include "common/util.h"
#include "tests/support/calib_fixtures.h"
#include "tests/support/test_env.h"


static skv_calib_settings mkset(int windows, unsigned metrics) {
    skv_calib_settings s;
    memset(&s, 0, sizeof s);
    s.window = 64; s.windows_planned = windows; s.topk = 6; s.sinks = 4; s.last_rows = 1;
    s.metrics = metrics; s.seed = 42; s.shard_count = 1; s.n_corpora = 1;
    snprintf(s.corpora[0].name, sizeof s.corpora[0].name, "corpus & <co>.txt");
    memset(s.corpora[0].sha256, 'c', 64);
    s.corpora[0].bytes = 999;
    return s;
}

#define ALL_METRICS 7u

/* ---- mapping math ---- */

static void test_early_stop_hand(void **st) {
    (void)st;
    /* 2 LLM heads, SLM l = 3 layers x h = 1 head */
    const float S[2 * 3] = {0.2f, 0.9f, 0.5f,
                            0.8f, 0.1f, 0.85f};
    float R[3];
    skv_map_curve(S, 2, 3, 1, R);
    assert_true(fabsf(R[0] - 0.5f) < 1e-6f);     /* (0.2 + 0.8) / 2 */
    assert_true(fabsf(R[1] - 0.85f) < 1e-6f);    /* (0.9 + 0.8) / 2 */
    assert_true(fabsf(R[2] - 0.875f) < 1e-6f);   /* (0.9 + 0.85) / 2 */
    assert_int_equal(skv_map_choose_depth(R, 3, 0.01), 3);   /* target 0.866 */
    assert_int_equal(skv_map_choose_depth(R, 3, 0.05), 2);   /* target 0.831 */
    assert_int_equal(skv_map_choose_depth(R, 3, 0.5), 1);    /* target 0.4375 */
    assert_int_equal(skv_map_choose_depth(R, 3, 0.0), 3);
    int32_t f[2];
    skv_map_argmax(S, 2, 3, 3, f);
    assert_int_equal(f[0], 1);
    assert_int_equal(f[1], 2);
    skv_map_argmax(S, 2, 3, 1, f);                           /* restricted to layer 0 */
    assert_int_equal(f[0], 0);
    assert_int_equal(f[1], 0);
    const float T[4] = {0.5f, 0.7f, 0.7f, 0.1f};              /* ties -> lowest j */
    skv_map_argmax(T, 1, 4, 4, f);
    assert_int_equal(f[0], 1);
    /* 2 heads per SLM layer: R(1) uses j in {0,1} */
    const float U[1 * 4] = {0.3f, 0.6f, 0.9f, 0.2f};
    float R2[2];
    skv_map_curve(U, 1, 2, 2, R2);
    assert_true(fabsf(R2[0] - 0.6f) < 1e-6f && fabsf(R2[1] - 0.9f) < 1e-6f);
}

/* identity: both models the same shape, the SLM's vectors equal the LLM's */
static skv_calib *identity_calib(int L, int H, int windows) {
    skv_model_fp fp = mkfp("llama", L, H, "abcd");
    skv_calib_settings s = mkset(windows, ALL_METRICS);
    skv_calib *c = skv_calib_new(&fp, &fp, &s, 0, "test");
    assert_non_null(c);
    int n = 60;
    float *F = malloc((size_t)L * H * n * sizeof *F), *R = malloc((size_t)L * H * n * sizeof *R);
    for (int w = 0; w < windows; w++) {
        g_rng = 77 + (uint64_t)w;
        for (int i = 0; i < L * H * n; i++) { F[i] = frand(); R[i] = frand(); }
        assert_int_equal(skv_calib_add_window(c, w, 64, n, F, F, R, R), 0);
    }
    free(F); free(R);
    return c;
}

static void test_identity(void **st) {
    (void)st;
    skv_calib *c = identity_calib(3, 4, 3);
    for (int m = 0; m < SKV_METRIC_COUNT; m++) {
        skv_profile *p = skv_profile_build(c, m, 0.01, 0, "test");
        assert_non_null(p);
        for (int i = 0; i < p->n_llm; i++) {
            assert_int_equal(p->map[i], i);
            assert_int_equal(p->map_full[i], i);
            for (int mi = 0; mi < p->n_metrics; mi++) assert_true(fabsf(p->map_sim[mi * p->n_llm + i] - 1.0f) < 1e-6f);
        }
        assert_true(fabsf(p->curve[2] - 1.0f) < 1e-6f);
        assert_true(p->curve[0] < p->curve[1] && p->curve[1] < p->curve[2]);
        assert_int_equal(p->depth, 3);
        assert_true(fabs(skv_profile_mean_matched(p, m) - 1.0) < 1e-6);
        skv_profile_free(p);
    }
    /* the depth cap restricts the mapping to layers below it */
    skv_profile *p = skv_profile_build(c, SKV_METRIC_COSINE, 0.01, 2, "test");
    assert_non_null(p);
    assert_int_equal(p->depth, 2);
    assert_int_equal(p->depth_eps, 3);
    for (int i = 0; i < p->n_llm; i++) {
        assert_true(p->map[i] < 2 * 4);
        assert_int_equal(p->map_full[i], i);
    }
    skv_profile_free(p);
    assert_null(skv_profile_build(c, SKV_METRIC_COSINE, 1.5, 0, "test"));
    skv_calib_free(c);
}

static skv_profile *mixed_profile(void) {
    skv_model_fp llm = mkfp("qwen2", 4, 3, "1111"), slm = mkfp("qwen2", 3, 2, "2222");
    skv_calib_settings s = mkset(4, SKV_METRIC_BIT(SKV_METRIC_JACCARD) | SKV_METRIC_BIT(SKV_METRIC_COSINE));
    skv_calib *c = skv_calib_new(&slm, &llm, &s, 0, "test");
    assert_non_null(c);
    int n = 40;
    float Fl[12 * 40], Fs[6 * 40];
    for (int w = 0; w < 4; w++) {
        g_rng = 9 + (uint64_t)w;
        for (int i = 0; i < 12 * n; i++) Fl[i] = frand();
        for (int i = 0; i < 6 * n; i++) Fs[i] = 0.5f * Fl[(i * 7) % (12 * n)] + 0.5f * frand();
        assert_int_equal(skv_calib_add_window(c, w, 64, n, Fl, Fs, NULL, NULL), 0);
    }
    skv_profile *p = skv_profile_build(c, SKV_METRIC_JACCARD, 0.02, 0, "test 1.0");
    assert_non_null(p);
    assert_null(skv_profile_build(c, SKV_METRIC_ROWCOS, 0.02, 0, "test"));   /* not recorded */
    assert_non_null(strstr(skv_last_error(), "rowcos"));
    skv_calib_free(c);
    return p;
}

static void test_roundtrip(void **st) {
    (void)st;
    skv_profile *p = mixed_profile();
    const char *path = test_tmp("a.skvprof");
    assert_int_equal(skv_profile_write(p, path), 0);
    skv_profile *q = skv_profile_load(path);
    if (!q) fail_msg("%s", skv_last_error());
    char why[256];
    assert_int_equal(skv_fp_diff(&p->llm, &q->llm, why, sizeof why), 0);
    assert_int_equal(skv_fp_diff(&p->slm, &q->slm, why, sizeof why), 0);
    assert_int_equal(q->metric, SKV_METRIC_JACCARD);
    assert_int_equal(q->depth, p->depth);
    assert_int_equal(q->depth_eps, p->depth_eps);
    assert_true(q->eps == p->eps);
    assert_int_equal(q->windows, 4);
    assert_int_equal(q->tokens, 256);
    assert_int_equal(q->n_metrics, 2);
    assert_string_equal(q->tool, "test 1.0");
    assert_string_equal(q->calib.corpora[0].name, "corpus & <co>.txt");
    assert_memory_equal(q->map, p->map, (size_t)p->n_llm * 4);
    assert_memory_equal(q->map_full, p->map_full, (size_t)p->n_llm * 4);
    assert_memory_equal(q->map_sim, p->map_sim, (size_t)p->n_llm * 2 * 4);
    assert_memory_equal(q->curve, p->curve, (size_t)p->slm.n_layer * 4);
    assert_memory_equal(q->sim, p->sim, (size_t)2 * p->n_llm * p->n_slm * 4);
    assert_memory_equal(q->sim_std, p->sim_std, (size_t)2 * p->n_llm * p->n_slm * 4);
    skv_profile_free(q);
    skv_profile_free(p);
}

static void test_check_models(void **st) {
    (void)st;
    skv_profile *p = mixed_profile();
    skv_model_fp llm = p->llm, slm = p->slm;
    assert_int_equal(skv_profile_check_models(p, &slm, &llm), 0);
    llm.n_layer = 5;
    assert_int_equal(skv_profile_check_models(p, &slm, &llm), -1);
    assert_non_null(strstr(skv_last_error(), "different LLM"));
    assert_non_null(strstr(skv_last_error(), "n_layer 4 vs 5"));
    llm = p->llm;
    snprintf(slm.tokenizer_hash, sizeof slm.tokenizer_hash, "fedcba");
    assert_int_equal(skv_profile_check_models(p, &slm, &llm), -1);
    assert_non_null(strstr(skv_last_error(), "different SLM"));
    assert_non_null(strstr(skv_last_error(), "tokenizer_hash"));
    slm = p->slm;
    snprintf(slm.weight_hash, sizeof slm.weight_hash, "9999");
    assert_int_equal(skv_profile_check_models(p, &slm, &llm), -1);
    assert_non_null(strstr(skv_last_error(), "weight_hash"));
    skv_profile_free(p);
}

static void write_plain(const char *path, const void *d, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_corruption(void **st) {
    (void)st;
    skv_profile *p = mixed_profile();
    const char *good = test_tmp("good.skvprof"), *bad = test_tmp("bad.skvprof");
    assert_int_equal(skv_profile_write(p, good), 0);
    skv_profile_free(p);
    size_t len;
    unsigned char *buf = (unsigned char *)skv_read_file(good, &len);
    assert_non_null(buf);
    print_message("profile file: %zu bytes\n", len);
    for (size_t cut = 0; cut < len; cut++) {
        write_plain(bad, buf, cut);
        skv_profile *q = skv_profile_load(bad);
        if (q) fail_msg("truncated profile (%zu of %zu bytes) accepted", cut, len);
    }
    unsigned seen = 0;
    const char *ids[6] = {"'MAP '", "'MAPF'", "'MSIM'", "'CURV'", "'SIMM'", "'SSTD'"};
    for (size_t i = 0; i < len; i++)
        for (int pat = 0; pat < 2; pat++) {
            unsigned char x = pat ? 0x80 : 0x04;
            buf[i] ^= x;
            write_plain(bad, buf, len);
            buf[i] ^= x;
            skv_profile *q = skv_profile_load(bad);
            if (q) fail_msg("profile with byte %zu flipped accepted", i);
            for (int k = 0; k < 6; k++) if (strstr(skv_last_error(), ids[k])) seen |= 1u << k;
        }
    assert_int_equal(seen, 0x3f);          /* every section's damage was named */
    memcpy(buf, "SKVCALIB", 8);
    write_plain(bad, buf, len);
    assert_null(skv_profile_load(bad));
    assert_non_null(strstr(skv_last_error(), "bad magic"));
    memcpy(buf, "SKVPROF\0", 8);
    buf[8] = 7;
    write_plain(bad, buf, len);
    assert_null(skv_profile_load(bad));
    assert_non_null(strstr(skv_last_error(), "version 7"));
    free(buf);
}

static int contains_ci(const char *s, const char *w) {
    size_t n = strlen(w);
    for (; *s; s++)
        if (strncasecmp(s, w, n) == 0) return 1;
    return 0;
}

/* balanced tags: every opened element closed in order (void and self-closing ones excepted) */
static int html_balanced(const char *s, char *why, size_t why_len) {
    static const char *voids[] = {"meta", "br", "hr", "img", "input", "link", NULL};
    char stack[256][16];
    int depth = 0;
    while ((s = strchr(s, '<')) != NULL) {
        if (s[1] == '!') { s = strchr(s, '>'); if (!s) return snprintf(why, why_len, "unterminated <!"), 0; continue; }
        int closing = s[1] == '/';
        const char *q = s + 1 + closing;
        char name[16];
        int k = 0;
        while ((isalnum((unsigned char)*q)) && k < 15) name[k++] = (char)tolower((unsigned char)*q++);
        name[k] = 0;
        const char *end = strchr(q, '>');
        if (!k || !end) return snprintf(why, why_len, "bad tag near '%.20s'", s), 0;
        int self = end[-1] == '/';
        int is_void = 0;
        for (int v = 0; voids[v]; v++) is_void |= strcmp(voids[v], name) == 0;
        if (closing) {
            if (depth == 0 || strcmp(stack[depth - 1], name) != 0)
                return snprintf(why, why_len, "</%s> does not close <%s>", name, depth ? stack[depth - 1] : "(none)"), 0;
            depth--;
        } else if (!self && !is_void) {
            if (depth == 256) return snprintf(why, why_len, "nesting too deep"), 0;
            snprintf(stack[depth++], 16, "%s", name);
        }
        s = end + 1;
    }
    if (depth) return snprintf(why, why_len, "<%s> never closed", stack[depth - 1]), 0;
    return 1;
}

static void test_print_and_report(void **st) {
    (void)st;
    skv_profile *p = mixed_profile();
    const char *path = test_tmp("show.skvprof"), *html = test_tmp("report.html"), *txt = test_tmp("show.txt");
    assert_int_equal(skv_profile_write(p, path), 0);
    FILE *f = fopen(txt, "w");
    assert_int_equal(skv_profile_print(path, f), 0);
    fclose(f);
    char *out = skv_read_file(txt, NULL);
    assert_non_null(strstr(out, "mapping metric jaccard"));
    assert_non_null(strstr(out, "<- chosen"));
    assert_non_null(strstr(out, "qwen2-4x3"));
    free(out);
    assert_int_equal(skv_profile_print(test_tmp("missing.skvprof"), stdout), -1);
    assert_int_equal(skv_report_html(p, html), 0);
    char *page = skv_read_file(html, NULL);
    assert_non_null(page);
    char why[128];
    if (!html_balanced(page, why, sizeof why)) fail_msg("report not well-formed: %s", why);
    assert_non_null(strstr(page, "<svg"));
    assert_non_null(strstr(page, "<polyline"));
    assert_non_null(strstr(page, "corpus &amp; &lt;co&gt;.txt"));   /* escaped */
    assert_false(contains_ci(page, "nan"));
    assert_false(contains_ci(page, "inf"));
    free(page);
    skv_profile_free(p);
}

/* realistic size: 24 x 14 LLM heads vs 24 x 14 SLM heads, three metrics */
static void test_load_speed(void **st) {
    (void)st;
    skv_model_fp llm = mkfp("qwen2", 24, 14, "77"), slm = mkfp("qwen2", 24, 14, "88");
    skv_calib_settings s = mkset(2, ALL_METRICS);
    skv_calib *c = skv_calib_new(&slm, &llm, &s, 0, "test");
    assert_non_null(c);
    size_t n = (size_t)3 * 336 * 336;
    double *S = malloc(n * sizeof *S);
    for (int w = 0; w < 2; w++) {
        g_rng = 3 + (uint64_t)w;
        for (size_t i = 0; i < n; i++) S[i] = frand();
        assert_int_equal(skv_calib_add_values(c, w, 512, S), 0);
    }
    free(S);
    skv_profile *p = skv_profile_build(c, SKV_METRIC_JACCARD, 0.01, 0, "test");
    assert_non_null(p);
    const char *path = test_tmp("big.skvprof"), *html = test_tmp("big.html");
    assert_int_equal(skv_profile_write(p, path), 0);
    assert_int_equal(skv_report_html(p, html), 0);
    double t0 = skv_now();
    skv_profile *q = skv_profile_load(path);
    double ms = 1e3 * (skv_now() - t0);
    assert_non_null(q);
    size_t flen, hlen;
    free(skv_read_file(path, &flen));
    char *page = skv_read_file(html, &hlen);
    char why[128];
    if (!html_balanced(page, why, sizeof why)) fail_msg("big report not well-formed: %s", why);
    free(page);
    print_message("336x336 heads, 3 metrics: profile %zu bytes, loads in %.1f ms; report %zu bytes\n", flen, ms, hlen);
    assert_true(ms < 1000);   /* generous: loaded machines under ASan */
    skv_profile_free(q);
    skv_profile_free(p);
    skv_calib_free(c);
}

/* fingerprints of the CI model: stable, sampled != full, refuses a profile made for another model */
static void test_model_fingerprint(void **st) {
    (void)st;
    char path[512];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) TEST_SKIP_MISSING(path);
    skv_model *m = skv_model_load(path);
    if (!m) fail_msg("%s", skv_last_error());
    skv_model_fp a, b, full;
    double t0 = skv_now();
    assert_int_equal(skv_fp_from_model(m, false, &a), 0);
    double t1 = skv_now();
    assert_int_equal(skv_fp_from_model(m, false, &b), 0);
    assert_int_equal(skv_fp_from_model(m, true, &full), 0);
    double t2 = skv_now();
    print_message("SmolLM2 fingerprint: sampled %.2f ms, full %.0f ms; tokenizer %s weights %.16s...\n",
                  1e3 * (t1 - t0), 1e3 * (t2 - t1), a.tokenizer_hash, a.weight_hash);
    char why[256];
    assert_int_equal(skv_fp_diff(&a, &b, why, sizeof why), 0);
    assert_string_not_equal(a.weight_hash, full.weight_hash);
    assert_string_equal(a.arch, "llama");
    assert_int_equal(a.n_layer, 30);
    assert_int_equal(a.n_head, 9);
    assert_int_equal(a.n_kv_head, 3);
    assert_int_equal(a.dim, 576);
    assert_int_equal(strlen(a.tokenizer_hash), 16);
    skv_profile *p = mixed_profile();
    assert_int_equal(skv_profile_check_models(p, &a, &a), -1);
    assert_non_null(strstr(skv_last_error(), "different LLM"));
    skv_profile_free(p);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_stop_hand),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_check_models),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_print_and_report),
        cmocka_unit_test(test_load_speed),
        cmocka_unit_test(test_model_fingerprint),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
