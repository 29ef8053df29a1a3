/* test_mapgen.c: the mapgen tool end to end. Writes synthetic calibration shards, runs
 * the built binary ($SKV_MAPGEN, else $BUILD/bin/mapgen, else build/bin/mapgen; skipped
 * when absent) and checks its exit codes, messages, and that the profile it writes from
 * shards merged in any order equals the one built in-process from a single run; a
 * cross-tokenizer calibration gets a report (--report-only) and no profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "runtime/format/profile.h"
#include "calibrate/mapping.h"
#include "common/util.h"
#include "tests/support/test_env.h"

static char g_bin[512];

static int setup(void **st) {
    if (test_tmpdir_setup(st)) return -1;
    const char *env = getenv("SKV_MAPGEN");
    if (env && *env) snprintf(g_bin, sizeof g_bin, "%s", env);
    else test_bin_path(g_bin, sizeof g_bin, "mapgen");
    return 0;
}

static void need_binary(void) {
    if (access(g_bin, X_OK) != 0) {
        print_message("mapgen binary %s not built: skipping\n", g_bin);
        skip();
    }
}

/* run "mapgen ARGS", stdout+stderr into OUT; returns the exit status */
static int run(const char *args, char **out) {
    char cmd[2048];
    const char *log = test_tmp("run.log");
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", g_bin, args, log);
    int st = system(cmd);
    if (out) *out = skv_read_file(log, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t g_rng;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f;
}

static skv_model_fp mkfp(int L, int H, const char *wh) {
    skv_model_fp fp;
    memset(&fp, 0, sizeof fp);
    snprintf(fp.arch, sizeof fp.arch, "qwen2");
    snprintf(fp.name, sizeof fp.name, "synthetic-%dx%d", L, H);
    fp.n_layer = L; fp.n_head = H; fp.n_kv_head = 1; fp.head_dim = 16; fp.dim = 16 * H; fp.vocab = 500;
    snprintf(fp.tokenizer_hash, sizeof fp.tokenizer_hash, "00ff00ff");
    snprintf(fp.weight_hash, sizeof fp.weight_hash, "%s", wh);
    return fp;
}

#define NW 9
#define NK 48
/* LLM 4 x 3 heads, SLM 3 x 2; SLM heads are noisy copies of some LLM heads */
static skv_calib *mk(int shard, const char *llm_hash) {
    skv_model_fp llm = mkfp(4, 3, llm_hash), slm = mkfp(3, 2, "5151");
    skv_calib_settings s;
    memset(&s, 0, sizeof s);
    s.window = 52; s.windows_planned = NW; s.topk = 5; s.sinks = 4; s.last_rows = 1;
    s.metrics = 7; s.seed = 1; s.shard_count = 3; s.n_corpora = 1;
    snprintf(s.corpora[0].name, sizeof s.corpora[0].name, "synthetic");
    memset(s.corpora[0].sha256, 'e', 64);
    skv_calib *c = skv_calib_new(&slm, &llm, &s, shard, "test");
    assert_non_null(c);
    return c;
}
static void add(skv_calib *c, int w) {
    float Fl[12 * NK], Fs[6 * NK];
    g_rng = 31 + 17 * (uint64_t)w;
    for (int i = 0; i < 12 * NK; i++) Fl[i] = frand();
    for (int j = 0; j < 6; j++)
        for (int k = 0; k < NK; k++) Fs[j * NK + k] = Fl[(2 * j) * NK + k] + 0.3f * frand();
    assert_int_equal(skv_calib_add_window(c, w, 52, NK, Fl, Fs, Fl, Fs), 0);
}

static void write_shards(void) {
    for (int k = 0; k < 3; k++) {
        skv_calib *c = mk(k, "aaaa");
        for (int w = k; w < NW; w += 3) add(c, w);
        char name[32];
        snprintf(name, sizeof name, "s%d.calib", k);
        assert_int_equal(skv_calib_write(c, test_tmp(name)), 0);
        skv_calib_free(c);
    }
}

static void test_args(void **st) {
    (void)st;
    need_binary();
    char *out;
    assert_int_equal(run("--help", &out), 0);
    assert_non_null(strstr(out, "usage: mapgen"));
    free(out);
    assert_int_equal(run("", &out), 2);
    assert_non_null(strstr(out, "no calibration files"));
    free(out);
    write_shards();
    char args[1024];
    snprintf(args, sizeof args, "%s", test_tmp("s0.calib"));
    assert_int_equal(run(args, &out), 2);                   /* no -o */
    assert_non_null(strstr(out, "-o PROFILE"));
    free(out);
    snprintf(args, sizeof args, "%s -o %s --metric dot", test_tmp("s0.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, &out), 2);
    assert_non_null(strstr(out, "unknown metric 'dot'"));
    free(out);
    snprintf(args, sizeof args, "%s -o %s --eps 1.5", test_tmp("s0.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, NULL), 2);
    snprintf(args, sizeof args, "%s -o %s --max-depth x", test_tmp("s0.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, NULL), 2);
    snprintf(args, sizeof args, "%s -o %s --bogus", test_tmp("s0.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, NULL), 2);
    snprintf(args, sizeof args, "%s -o %s", test_tmp("missing.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, &out), 1);
    assert_non_null(strstr(out, "missing.calib: cannot open"));
    free(out);
    assert_int_equal(access(test_tmp("x.skvprof"), F_OK), -1);   /* nothing written on failure */
}

static void test_merge_equals_single(void **st) {
    (void)st;
    need_binary();
    write_shards();
    /* reference: one accumulator with every window, built in-process */
    skv_calib *all = mk(0, "aaaa");
    for (int w = 0; w < NW; w++) add(all, w);
    skv_profile *ref = skv_profile_build(all, SKV_METRIC_COSINE, 0.05, 0, "ref");
    assert_non_null(ref);
    skv_calib_free(all);
    const char *orders[3] = {"s0 s1 s2", "s2 s0 s1", "s1 s2 s0"};
    char *first = NULL;
    size_t first_len = 0;
    for (int o = 0; o < 3; o++) {
        char args[2048], a[3][8];
        sscanf(orders[o], "%7s %7s %7s", a[0], a[1], a[2]);
        char p0[64], p1[64], p2[64];
        snprintf(p0, sizeof p0, "%s.calib", a[0]);
        snprintf(p1, sizeof p1, "%s.calib", a[1]);
        snprintf(p2, sizeof p2, "%s.calib", a[2]);
        snprintf(args, sizeof args, "%s %s %s -o %s --metric cosine --eps 0.05 --report %s", test_tmp(p0),
                 test_tmp(p1), test_tmp(p2), test_tmp("m.skvprof"), test_tmp("m.html"));
        char *out;
        int rc = run(args, &out);
        if (rc != 0) fail_msg("mapgen failed (%d): %s", rc, out);
        assert_non_null(strstr(out, "early stop: depth"));
        assert_non_null(strstr(out, "merged 3 files: 9 windows"));
        free(out);
        skv_profile *p = skv_profile_load(test_tmp("m.skvprof"));
        if (!p) fail_msg("%s", skv_last_error());
        assert_int_equal(p->depth, ref->depth);
        assert_memory_equal(p->map, ref->map, (size_t)ref->n_llm * 4);
        assert_memory_equal(p->curve, ref->curve, (size_t)ref->slm.n_layer * 4);
        assert_memory_equal(p->sim, ref->sim, (size_t)ref->n_metrics * ref->n_llm * ref->n_slm * 4);
        assert_memory_equal(p->sim_std, ref->sim_std, (size_t)ref->n_metrics * ref->n_llm * ref->n_slm * 4);
        skv_profile_free(p);
        size_t len;
        char *buf = skv_read_file(test_tmp("m.skvprof"), &len);
        if (!first) { first = buf; first_len = len; }
        else {
            assert_int_equal(len, first_len);
            assert_memory_equal(buf, first, len);          /* same bytes whatever the order */
            free(buf);
        }
        char *page = skv_read_file(test_tmp("m.html"), NULL);
        assert_non_null(page);
        assert_non_null(strstr(page, "<svg"));
        assert_non_null(strstr(page, "</html>"));
        free(page);
    }
    free(first);
    /* SLM heads copy even LLM heads of layer 0 and 1: those map to them */
    assert_int_equal(ref->map_full[0], 0);
    assert_int_equal(ref->map_full[2], 1);
    skv_profile_free(ref);
}

static void test_depth_cap(void **st) {
    (void)st;
    need_binary();
    write_shards();
    char args[1024], *out;
    snprintf(args, sizeof args, "%s %s %s -o %s --metric jaccard --eps 0 --max-depth 1", test_tmp("s0.calib"),
             test_tmp("s1.calib"), test_tmp("s2.calib"), test_tmp("cap.skvprof"));
    int rc = run(args, &out);
    if (rc) fail_msg("%s", out);
    assert_non_null(strstr(out, "capped by --max-depth"));
    free(out);
    skv_profile *p = skv_profile_load(test_tmp("cap.skvprof"));
    assert_non_null(p);
    assert_int_equal(p->depth, 1);
    assert_int_equal(p->max_depth, 1);
    for (int i = 0; i < p->n_llm; i++) assert_true(p->map[i] < p->slm.n_head);
    skv_profile_free(p);
}

static void test_refusals(void **st) {
    (void)st;
    need_binary();
    write_shards();
    char args[1024], *out;
    /* a shard given twice overlaps itself */
    snprintf(args, sizeof args, "%s %s -o %s", test_tmp("s0.calib"), test_tmp("s0.calib"), test_tmp("r.skvprof"));
    assert_int_equal(run(args, &out), 1);
    assert_non_null(strstr(out, "overlapping"));
    free(out);
    /* a shard of a different LLM */
    skv_calib *c = mk(1, "bbbb");
    add(c, 1);
    assert_int_equal(skv_calib_write(c, test_tmp("other.calib")), 0);
    skv_calib_free(c);
    snprintf(args, sizeof args, "%s %s -o %s", test_tmp("s0.calib"), test_tmp("other.calib"), test_tmp("r.skvprof"));
    assert_int_equal(run(args, &out), 1);
    assert_non_null(strstr(out, "LLM differs: weight_hash"));
    free(out);
    /* a damaged file */
    size_t len;
    char *buf = skv_read_file(test_tmp("s1.calib"), &len);
    buf[len / 2] ^= 0x10;
    assert_int_equal(skv_write_file_atomic(test_tmp("bad.calib"), buf, len), 0);
    free(buf);
    snprintf(args, sizeof args, "%s %s -o %s", test_tmp("s0.calib"), test_tmp("bad.calib"), test_tmp("r.skvprof"));
    assert_int_equal(run(args, &out), 1);
    assert_non_null(strstr(out, "bad.calib: corrupted calibration file"));
    free(out);
    assert_int_equal(access(test_tmp("r.skvprof"), F_OK), -1);
}

/* A cross-tokenizer calibration (two tokenizers, "alignment" in the header): no profile, with
 * the reason; --report-only prints the pair's table (alignment counts merged over shards) and
 * writes the HTML report; it does not merge with a one-tokenizer file. */
static void test_cross_tokenizer(void **st) {
    (void)st;
    need_binary();
    write_shards();
    for (int k = 0; k < 2; k++) {
        skv_calib *c = mk(k, "aaaa");
        snprintf(c->slm.tokenizer_hash, sizeof c->slm.tokenizer_hash, "11ee11ee");   /* another tokenizer */
        c->align = (skv_calib_align){.present = true, .llm_tokens = 100, .slm_tokens = 110, .matched = 90 + k};
        for (int w = k; w < NW; w += 3) add(c, w);
        char name[32];
        snprintf(name, sizeof name, "x%d.calib", k);
        assert_int_equal(skv_calib_write(c, test_tmp(name)), 0);
        skv_calib_free(c);
    }
    skv_calib *r = skv_calib_read(test_tmp("x1.calib"));
    assert_non_null(r);
    assert_true(r->align.present);
    assert_int_equal(r->align.matched, 91);
    assert_int_equal(r->align.slm_tokens, 110);
    skv_calib_free(r);
    char args[1024], *out;
    snprintf(args, sizeof args, "%s %s -o %s", test_tmp("x0.calib"), test_tmp("x1.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, &out), 1);
    assert_non_null(strstr(out, "different tokenizers"));
    assert_non_null(strstr(out, "one token stream"));
    assert_non_null(strstr(out, "--report-only"));
    free(out);
    assert_int_equal(access(test_tmp("x.skvprof"), F_OK), -1);
    snprintf(args, sizeof args, "%s %s --report-only --report %s", test_tmp("x0.calib"), test_tmp("x1.calib"), test_tmp("x.html"));
    assert_int_equal(run(args, &out), 0);
    assert_non_null(strstr(out, "181 of 200 LLM tokens matched (90.5%), of 220 SLM tokens"));
    assert_non_null(strstr(out, "best(all)"));
    assert_non_null(strstr(out, "cosine"));
    free(out);
    char *html = skv_read_file(test_tmp("x.html"), NULL);
    assert_non_null(html);
    assert_non_null(strstr(html, "two tokenizers, similarities over the tokens both split alike (byte-span): 181 of 200"));
    free(html);
    assert_int_equal(access(test_tmp("x.skvprof"), F_OK), -1);
    snprintf(args, sizeof args, "%s --report-only -o %s", test_tmp("x0.calib"), test_tmp("x.skvprof"));
    assert_int_equal(run(args, &out), 2);
    assert_non_null(strstr(out, "drop -o"));
    free(out);
    /* a one-tokenizer file reports too, and says so */
    snprintf(args, sizeof args, "%s --report-only", test_tmp("s0.calib"));
    assert_int_equal(run(args, &out), 0);
    assert_non_null(strstr(out, "one tokenizer"));
    free(out);
    /* a cross file and a one-tokenizer file of the same models do not merge */
    skv_calib *a = skv_calib_read(test_tmp("x0.calib")), *b = skv_calib_read(test_tmp("s1.calib"));
    assert_non_null(a); assert_non_null(b);
    snprintf(b->slm.tokenizer_hash, sizeof b->slm.tokenizer_hash, "11ee11ee");
    assert_int_equal(skv_calib_merge(a, b, "x0", "s1"), -1);
    assert_non_null(strstr(skv_last_error(), "cross-tokenizer"));
    skv_calib_free(a); skv_calib_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_merge_equals_single),
        cmocka_unit_test(test_depth_cap),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cross_tokenizer),
    };
    return cmocka_run_group_tests(tests, setup, test_tmpdir_teardown);
}
