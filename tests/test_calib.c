/* test_calib.c: SHA-256 test vectors, the similarity metrics on hand-checkable vectors,
 * the fixed-point accumulator, exact shard merging (bit-identical in any order), merge
 * refusals, the calibration file round trip and refusal of every kind of damage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "common/sha256.h"
#include "calibrate/similarity.h"
#include "calibrate/mapping.h"
#include "calibrate/stability.h"
#include "common/util.h"
#include "tests/support/calib_fixtures.h"
#include "tests/support/test_env.h"


/* ---- SHA-256 ---- */

static void sha_hex(const void *d, size_t n, char hex[65]) {
    uint8_t out[32];
    skv_sha256(d, n, out);
    skv_sha256_hex(out, hex);
}

static void test_sha256_vectors(void **st) {
    (void)st;
    char hex[65];
    sha_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_hex(m2, strlen(m2), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a', streamed in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    skv_sha256_ctx c;
    skv_sha256_init(&c);
    size_t off = 0, step = 1;
    while (off < 1000000) {
        size_t n = step < 1000000 - off ? step : 1000000 - off;
        skv_sha256_update(&c, a + off, n);
        off += n;
        step = step * 3 + 1;
        if (step > 70000) step = 7;
    }
    uint8_t d[32];
    skv_sha256_final(&c, d);
    skv_sha256_hex(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* file hashing equals one-shot */
    const char *p = test_tmp("million_a");
    assert_int_equal(skv_write_file_atomic(p, a, 1000000), 0);
    char fh[65];
    assert_int_equal(skv_sha256_file(p, fh), 0);
    assert_string_equal(fh, hex);
    free(a);
}

/* ---- metrics ---- */

static void test_metrics_hand(void **st) {
    (void)st;
    /* A: 3 heads over 6 keys, B: 3 heads */
    const float A[3 * 6] = {
        5, 4, 3, 0, 0, 0,      /* top-2 {0,1} */
        0, 0, 0, 1, 2, 3,      /* top-2 {4,5} */
        1, 1, 1, 1, 1, 1,      /* ties: top-2 {0,1} */
    };
    const float B[3 * 6] = {
        10, 8, 6, 0, 0, 0,     /* = 2 * A0: cosine 1, same top-2 */
        0, 9, 8, 0, 0, 0,      /* top-2 {1,2} */
        0, 0, 0, 0, 0, 0,      /* zero vector */
    };
    double cs[9], jc[9];
    assert_int_equal(skv_sim_cosine(A, 3, B, 3, 6, cs), 0);
    assert_int_equal(skv_sim_jaccard(A, 3, B, 3, 6, 2, jc), 0);
    assert_true(fabs(cs[0 * 3 + 0] - 1.0) < 1e-12);
    assert_true(fabs(jc[0 * 3 + 0] - 1.0) < 1e-12);
    assert_true(fabs(cs[1 * 3 + 0]) < 1e-12);             /* disjoint support */
    assert_true(fabs(jc[1 * 3 + 0]) < 1e-12);             /* disjoint top-K */
    assert_true(fabs(jc[0 * 3 + 1] - 1.0 / 3.0) < 1e-12);  /* {0,1} vs {1,2}: 1 / 3 */
    assert_true(fabs(cs[0 * 3 + 2]) < 1e-12);             /* zero vector -> 0 */
    double want = (4.0 * 9 + 3.0 * 8) / (sqrt(50.0) * sqrt(145.0));
    assert_true(fabs(cs[0 * 3 + 1] - want) < 1e-12);
    int idx[2];
    skv_sim_topk(A + 12, 6, 2, idx);                      /* ties -> lower index */
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 1);
    /* K larger than the key count is clamped: full sets -> 1 */
    assert_int_equal(skv_sim_jaccard(A, 1, B, 1, 6, 50, jc), 0);
    assert_true(fabs(jc[0] - 1.0) < 1e-12);
    /* non-finite input refused */
    float bad[6] = {1, 2, NAN, 0, 0, 0};
    assert_int_equal(skv_sim_cosine(bad, 1, B, 1, 6, cs), -1);
    assert_non_null(strstr(skv_last_error(), "non-finite"));
}

static void test_pack(void **st) {
    (void)st;
    /* L=2, H=1, S_cap=8, T=6, sinks=2 */
    float l0[8] = {9, 9, 4, 3, 2, 1, 0, 0}, l1[8] = {9, 9, 1, 1, 1, 1, 0, 0};
    const float *layers[2] = {l0, l1};
    float out[2 * 4];
    assert_int_equal(skv_sim_pack(layers, 2, 1, 8, 6, 2, false, out), 0);
    assert_true(out[0] == 4 && out[3] == 1 && out[4] == 1);
    assert_int_equal(skv_sim_pack(layers, 2, 1, 8, 6, 2, true, out), 0);
    assert_true(fabsf(out[0] - 4.0f / 4) < 1e-6f && fabsf(out[3] - 1.0f / 1) < 1e-6f);   /* key 2 seen by 4 rows */
    assert_int_equal(skv_sim_pack(layers, 2, 1, 8, 9, 2, false, out), -1);
}

/* ---- synthetic calibration ---- */

static skv_calib_settings mkset(int shards, int windows) {
    skv_calib_settings s;
    memset(&s, 0, sizeof s);
    s.window = 24; s.windows_planned = windows; s.topk = 4; s.sinks = 4; s.last_rows = 1;
    s.metrics = SKV_METRIC_BIT(SKV_METRIC_JACCARD) | SKV_METRIC_BIT(SKV_METRIC_COSINE) | SKV_METRIC_BIT(SKV_METRIC_ROWCOS);
    s.seed = 0x1234abcdull; s.shard_count = shards; s.n_corpora = 1;
    snprintf(s.corpora[0].name, sizeof s.corpora[0].name, "wiki <test>.txt");
    memset(s.corpora[0].sha256, 'a', 64);
    s.corpora[0].bytes = 12345;
    return s;
}

#define NKEYS 20
#define LLM_L 3
#define LLM_H 2
#define SLM_L 2
#define SLM_H 3
static skv_model_fp g_llm, g_slm;

/* deterministic per-window data: the same window always gets the same vectors */
static int add_window(skv_calib *c, int w) {
    float Fl[LLM_L * LLM_H * NKEYS], Fs[SLM_L * SLM_H * NKEYS], Rl[LLM_L * LLM_H * NKEYS], Rs[SLM_L * SLM_H * NKEYS];
    g_rng = 1000 + (uint64_t)w * 7919;
    for (int i = 0; i < LLM_L * LLM_H * NKEYS; i++) { Fl[i] = frand(); Rl[i] = frand(); }
    for (int i = 0; i < SLM_L * SLM_H * NKEYS; i++) { Fs[i] = frand(); Rs[i] = frand(); }
    return skv_calib_add_window(c, w, 24, NKEYS, Fl, Fs, Rl, Rs);
}

static skv_calib *mk(int shards, int windows, int shard) {
    g_llm = mkfp("qwen2", LLM_L, LLM_H, "aa11");
    g_slm = mkfp("qwen2", SLM_L, SLM_H, "bb22");
    skv_calib_settings s = mkset(shards, windows);
    skv_calib *c = skv_calib_new(&g_slm, &g_llm, &s, shard, "test");
    assert_non_null(c);
    return c;
}

static void test_accumulator_values(void **st) {
    (void)st;
    skv_calib *c = mk(1, 4, 0);
    size_t n = (size_t)c->n_llm * c->n_slm * c->n_metrics;
    double *S = calloc(n, sizeof *S);
    for (size_t i = 0; i < n; i++) S[i] = 0.5;
    assert_int_equal(skv_calib_add_values(c, 0, 10, S), 0);
    for (size_t i = 0; i < n; i++) S[i] = 1.0;
    S[0] = -1.0;
    assert_int_equal(skv_calib_add_values(c, 2, 10, S), 0);
    assert_int_equal(skv_calib_add_values(c, 2, 10, S), -1);        /* duplicate window */
    assert_non_null(strstr(skv_last_error(), "twice"));
    assert_int_equal(skv_calib_add_values(c, 4, 10, S), -1);        /* beyond the plan */
    S[1] = 1.5;
    assert_int_equal(skv_calib_add_values(c, 3, 10, S), -1);        /* out of range value */
    float mean[LLM_L * LLM_H * SLM_L * SLM_H], sd[LLM_L * LLM_H * SLM_L * SLM_H];
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_COSINE, mean, sd), 0);
    assert_true(fabsf(mean[0] - 0.75f) < 1e-7f && fabsf(sd[0] - 0.25f) < 1e-7f);
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_JACCARD, mean, sd), 0);
    assert_true(fabsf(mean[0] + 0.25f) < 1e-7f && fabsf(sd[0] - 0.75f) < 1e-7f);
    assert_true(fabsf(mean[1] - 0.75f) < 1e-7f);
    assert_int_equal(c->n_windows, 2);
    assert_int_equal(c->tokens, 20);
    /* per-window layer stat: window 0 all 0.5 */
    assert_true(fabsf(c->wstat[0] - 0.5f) < 1e-7f);
    free(S);
    skv_calib_free(c);
}

static void test_identical_heads(void **st) {
    (void)st;
    /* SLM == LLM: every head's best match is itself with cosine 1 and jaccard 1 */
    skv_model_fp fp = mkfp("llama", 2, 2, "cc");
    skv_calib_settings s = mkset(1, 2);
    skv_calib *c = skv_calib_new(&fp, &fp, &s, 0, "test");
    assert_non_null(c);
    float F[4 * NKEYS];
    g_rng = 5;
    for (int i = 0; i < 4 * NKEYS; i++) F[i] = frand();
    assert_int_equal(skv_calib_add_window(c, 1, 24, NKEYS, F, F, F, F), 0);
    float mean[16];
    for (int m = 0; m < SKV_METRIC_COUNT; m++) {
        assert_int_equal(skv_calib_mean(c, m, mean, NULL), 0);
        for (int i = 0; i < 4; i++) assert_true(fabsf(mean[i * 4 + i] - 1.0f) < 1e-9f);
    }
    skv_calib_free(c);
}

static void test_file_roundtrip(void **st) {
    (void)st;
    skv_calib *c = mk(2, 10, 1);
    for (int w = 9; w >= 1; w -= 2) assert_int_equal(add_window(c, w), 0);
    const char *p = test_tmp("rt.calib");
    assert_int_equal(skv_calib_write(c, p), 0);
    skv_calib *r = skv_calib_read(p);
    if (!r) fail_msg("%s", skv_last_error());
    assert_int_equal(r->n_windows, 5);
    assert_int_equal(r->tokens, c->tokens);
    assert_int_equal(r->n_metrics, 3);
    assert_int_equal(r->n_shards, 1);
    assert_int_equal(r->shards[0], 1);
    assert_int_equal(r->windows[0], 1);                 /* stored ascending */
    assert_int_equal(r->windows[4], 9);
    char why[256];
    assert_int_equal(skv_fp_diff(&r->llm, &c->llm, why, sizeof why), 0);
    assert_int_equal(skv_fp_diff(&r->slm, &c->slm, why, sizeof why), 0);
    assert_string_equal(r->llm.name, c->llm.name);
    assert_string_equal(r->set.corpora[0].name, "wiki <test>.txt");
    assert_true(r->set.seed == c->set.seed);
    size_t n = (size_t)c->n_llm * c->n_slm * 2 * c->n_metrics;
    assert_memory_equal(r->sums, c->sums, n * sizeof(int64_t));
    /* window 1 was added last in memory: its stats must be row 0 in the file */
    size_t row = (size_t)c->n_metrics * LLM_L;
    assert_memory_equal(r->wstat, c->wstat + 4 * row, row * sizeof(float));
    /* writing the read-back copy gives the same bytes */
    const char *p2 = test_tmp("rt2.calib");
    assert_int_equal(skv_calib_write(r, p2), 0);
    size_t l1, l2;
    char *b1 = skv_read_file(p, &l1), *b2 = skv_read_file(p2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    free(b1); free(b2);
    skv_calib_free(r);
    skv_calib_free(c);
}

static skv_calib *merge_files(const char *a, const char *b, const char *c) {
    skv_calib *x = skv_calib_read(a);
    assert_non_null(x);
    const char *rest[2] = {b, c};
    for (int i = 0; i < 2; i++) {
        skv_calib *y = skv_calib_read(rest[i]);
        assert_non_null(y);
        if (skv_calib_merge(x, y, a, rest[i])) fail_msg("%s", skv_last_error());
        skv_calib_free(y);
    }
    return x;
}

static void test_shard_merge_exact(void **st) {
    (void)st;
    const int NW = 12;
    skv_calib *single = mk(3, NW, 0), *sh[3];
    for (int w = NW - 1; w >= 0; w--) assert_int_equal(add_window(single, w), 0);
    const char *names[3] = {"s0.calib", "s1.calib", "s2.calib"};
    char paths[3][320];
    for (int k = 0; k < 3; k++) {
        sh[k] = mk(3, NW, k);
        for (int w = k; w < NW; w += 3) assert_int_equal(add_window(sh[k], w), 0);
        snprintf(paths[k], sizeof paths[k], "%s", test_tmp(names[k]));
        assert_int_equal(skv_calib_write(sh[k], paths[k]), 0);
        skv_calib_free(sh[k]);
    }
    const int orders[4][3] = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
    char *first = NULL;
    size_t first_len = 0;
    size_t n = (size_t)single->n_llm * single->n_slm * 2 * single->n_metrics;
    const char *sp = test_tmp("single.calib");
    assert_int_equal(skv_calib_write(single, sp), 0);
    skv_calib *single_r = skv_calib_read(sp);
    assert_non_null(single_r);
    for (int o = 0; o < 4; o++) {
        skv_calib *m = merge_files(paths[orders[o][0]], paths[orders[o][1]], paths[orders[o][2]]);
        assert_int_equal(m->n_windows, NW);
        assert_int_equal(m->n_shards, 3);
        assert_memory_equal(m->sums, single->sums, n * sizeof(int64_t));   /* bit for bit */
        const char *mp = test_tmp("merged.calib");
        assert_int_equal(skv_calib_write(m, mp), 0);
        skv_calib_free(m);
        size_t len;
        char *buf = skv_read_file(mp, &len);
        if (!first) { first = buf; first_len = len; }
        else {
            assert_int_equal(len, first_len);
            assert_memory_equal(buf, first, len);                     /* whole file identical */
            free(buf);
        }
        skv_calib *mr = skv_calib_read(mp);
        assert_non_null(mr);
        assert_memory_equal(mr->wstat, single_r->wstat, (size_t)NW * mr->n_metrics * LLM_L * sizeof(float));
        assert_memory_equal(mr->windows, single_r->windows, (size_t)NW * sizeof(int32_t));
        skv_calib_free(mr);
    }
    free(first);
    skv_calib_free(single_r);
    skv_calib_free(single);
}

static void test_merge_refusals(void **st) {
    (void)st;
    skv_calib *a = mk(2, 8, 0), *b = mk(2, 8, 1);
    assert_int_equal(add_window(a, 0), 0);
    assert_int_equal(add_window(a, 2), 0);
    assert_int_equal(add_window(b, 2), 0);
    int64_t before = a->sums[0];
    assert_int_equal(skv_calib_merge(a, b, "a", "b"), -1);
    assert_non_null(strstr(skv_last_error(), "window 2"));
    assert_true(a->sums[0] == before && a->n_windows == 2);       /* unchanged */
    skv_calib_free(b);
    /* different LLM weights */
    skv_model_fp llm2 = mkfp("qwen2", LLM_L, LLM_H, "ffff");
    skv_calib_settings s = mkset(2, 8);
    b = skv_calib_new(&g_slm, &llm2, &s, 1, "test");
    assert_int_equal(skv_calib_merge(a, b, "a", "b"), -1);
    assert_non_null(strstr(skv_last_error(), "LLM differs: weight_hash"));
    skv_calib_free(b);
    /* different SLM shape */
    skv_model_fp slm2 = mkfp("qwen2", SLM_L, SLM_H, "bb22");
    slm2.vocab = 999;
    b = skv_calib_new(&slm2, &g_llm, &s, 1, "test");
    assert_int_equal(skv_calib_merge(a, b, "a", "b"), -1);
    assert_non_null(strstr(skv_last_error(), "SLM differs: vocab"));
    skv_calib_free(b);
    /* different settings */
    s.topk = 5;
    b = skv_calib_new(&g_slm, &g_llm, &s, 1, "test");
    assert_int_equal(skv_calib_merge(a, b, "a", "b"), -1);
    assert_non_null(strstr(skv_last_error(), "settings differ: topk"));
    skv_calib_free(b);
    s = mkset(2, 8);
    s.corpora[0].sha256[3] = 'b';
    b = skv_calib_new(&g_slm, &g_llm, &s, 1, "test");
    assert_int_equal(skv_calib_merge(a, b, "a", "b"), -1);
    assert_non_null(strstr(skv_last_error(), "corpus 0"));
    skv_calib_free(b);
    skv_calib_free(a);
}

/* plain write (no fsync): thousands of damaged variants are written below */
static void write_plain(const char *path, const void *d, size_t n) {
    unlink(path);   /* replace, not truncate: ext4 flushes on truncate-and-rewrite */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void expect_refused(const char *path, const char *what, long at) {
    skv_calib *c = skv_calib_read(path);
    if (c) {
        skv_calib_free(c);
        fail_msg("damaged file accepted (%s at %ld)", what, at);
    }
}

static void test_corruption(void **st) {
    (void)st;
    skv_calib *c = mk(1, 4, 0);
    for (int w = 0; w < 3; w++) assert_int_equal(add_window(c, w), 0);
    const char *p = test_tmp("good.calib"), *q = test_tmp("bad.calib");
    assert_int_equal(skv_calib_write(c, p), 0);
    skv_calib_free(c);
    size_t len;
    unsigned char *buf = (unsigned char *)skv_read_file(p, &len);
    assert_non_null(buf);
    print_message("calibration file: %zu bytes\n", len);
    /* truncation at every offset */
    for (size_t cut = 0; cut < len; cut++) {
        write_plain(q, buf, cut);
        expect_refused(q, "truncation", (long)cut);
    }
    /* trailing garbage */
    unsigned char *big = malloc(len + 1);
    memcpy(big, buf, len);
    big[len] = 0;
    write_plain(q, big, len + 1);
    expect_refused(q, "trailing byte", (long)len);
    free(big);
    /* one flipped bit (two patterns) at every byte: each region names itself */
    int saw_header = 0, saw_table = 0, saw_section = 0;
    for (size_t i = 0; i < len; i++) {
        for (int pat = 0; pat < 2; pat++) {
            unsigned char x = pat ? 0x80 : 0x01;
            buf[i] ^= x;
            write_plain(q, buf, len);
            buf[i] ^= x;
            expect_refused(q, "flipped byte", (long)i);
            const char *e = skv_last_error();
            saw_header |= strstr(e, "JSON header checksum") != NULL;
            saw_table |= strstr(e, "section table checksum") != NULL;
            saw_section |= strstr(e, "section 'SUMS' checksum") != NULL || strstr(e, "section 'WSTA' checksum") != NULL;
        }
    }
    assert_true(saw_header && saw_table && saw_section);
    /* wrong magic, version mismatch */
    buf[0] ^= 0xff;
    write_plain(q, buf, len);
    buf[0] ^= 0xff;
    expect_refused(q, "magic", 0);
    assert_non_null(strstr(skv_last_error(), "bad magic"));
    buf[8] = 2;
    write_plain(q, buf, len);
    buf[8] = 1;
    expect_refused(q, "version", 8);
    assert_non_null(strstr(skv_last_error(), "version 2"));
    /* empty and missing files */
    write_plain(q, buf, 0);
    expect_refused(q, "empty", 0);
    expect_refused(test_tmp("does-not-exist"), "missing", 0);
    assert_non_null(strstr(skv_last_error(), "cannot open"));
    free(buf);
}

/* Split halves: the odd windows' sums ride along ('HALF'), survive a file round trip and
 * a merge with halves, vanish in a merge with a file without them; the stability of a
 * designed case (one head whose best SLM head differs between the halves) */
static void set_pair(double *S, size_t pairs, int mi, int i, int j, double v) {
    S[(size_t)mi * pairs + (size_t)i * (SLM_L * SLM_H) + j] = v;
}

static void test_halves_and_stability(void **st) {
    (void)st;
    skv_calib *c = mk(1, 6, 0);
    size_t pairs = (size_t)c->n_llm * c->n_slm, n = pairs * c->n_metrics;
    double *S = calloc(n, sizeof *S);
    assert_non_null(S);
    for (int w = 0; w < 6; w++) {
        for (size_t k = 0; k < n; k++) S[k] = 0.1;
        for (int mi = 0; mi < c->n_metrics; mi++)
            for (int i = 0; i < c->n_llm; i++) set_pair(S, pairs, mi, i, i, 0.9);
        if (w & 1)   /* odd windows: LLM head 0 prefers SLM head 1, by a little */
            for (int mi = 0; mi < c->n_metrics; mi++) {
                set_pair(S, pairs, mi, 0, 0, 0.85);
                set_pair(S, pairs, mi, 0, 1, 0.9);
            }
        assert_int_equal(skv_calib_add_values(c, w, 10, S), 0);
    }
    assert_int_equal(skv_calib_odd_windows(c), 3);
    float A[LLM_L * LLM_H * SLM_L * SLM_H], B[LLM_L * LLM_H * SLM_L * SLM_H];
    assert_int_equal(skv_calib_half_mean(c, SKV_METRIC_JACCARD, false, A), 0);
    assert_int_equal(skv_calib_half_mean(c, SKV_METRIC_JACCARD, true, B), 0);
    assert_true(fabsf(A[0] - 0.9f) < 1e-6f && fabsf(A[1] - 0.1f) < 1e-6f);
    assert_true(fabsf(B[0] - 0.85f) < 1e-6f && fabsf(B[1] - 0.9f) < 1e-6f);
    assert_true(fabsf(B[7] - 0.9f) < 1e-6f);              /* head 1 -> 1 in both */

    skv_profile_stability sb;
    assert_int_equal(skv_map_stability(c, SKV_METRIC_JACCARD, SLM_L, &sb), 0);
    assert_true(sb.present);
    assert_int_equal((int)sb.windows_even, 3);
    assert_int_equal((int)sb.windows_odd, 3);
    assert_true(fabs(sb.agree - 5.0 / 6.0) < 1e-9);
    /* even data under the odd mapping loses 0.9 - 0.1 of 6 x 0.9; the reverse only 0.05 */
    assert_true(fabs(sb.loss - 0.8 / 5.4) < 1e-6);
    /* at depth 1 only SLM heads 0..2 compete: the same disagreement */
    assert_int_equal(skv_map_stability(c, SKV_METRIC_JACCARD, 1, &sb), 0);
    assert_true(fabs(sb.agree - 5.0 / 6.0) < 1e-9);
    assert_int_equal(skv_map_stability(c, SKV_METRIC_JACCARD, SLM_L + 1, &sb), -1);

    /* the profile carries it through its file and prints it */
    skv_profile *p = skv_profile_build(c, SKV_METRIC_JACCARD, 0.01, 0, "test");
    assert_non_null(p);
    assert_true(p->stability.present);
    assert_true(fabs(p->stability.loss - 0.8 / 5.4) < 1e-6);
    const char *pp = test_tmp("half.skvprof");
    assert_int_equal(skv_profile_write(p, pp), 0);
    skv_profile *q = skv_profile_load(pp);
    if (!q) fail_msg("%s", skv_last_error());
    assert_true(q->stability.present);
    assert_true(fabs(q->stability.agree - p->stability.agree) < 1e-12);
    assert_true(fabs(q->stability.loss - p->stability.loss) < 1e-12);
    assert_int_equal((int)q->stability.windows_odd, 3);
    char *text = NULL;
    size_t tl = 0;
    FILE *mf = open_memstream(&text, &tl);
    skv_profile_print_loaded(q, mf);
    fclose(mf);
    assert_non_null(strstr(text, "83.3% of LLM heads map alike"));
    free(text);
    skv_profile_free(q);
    skv_profile_free(p);

    /* round trip keeps the halves */
    const char *cp = test_tmp("half.calib");
    assert_int_equal(skv_calib_write(c, cp), 0);
    skv_calib *r = skv_calib_read(cp);
    if (!r) fail_msg("%s", skv_last_error());
    assert_non_null(r->half);
    assert_memory_equal(r->half, c->half, n * sizeof(int64_t));
    skv_calib_free(r);

    /* a file without halves (as written before they existed): read as such, merges drop them */
    skv_calib *old = mk(1, 8, 0);
    for (size_t k = 0; k < n; k++) S[k] = 0.2;
    assert_int_equal(skv_calib_add_values(old, 7, 10, S), 0);
    free(old->half);
    old->half = NULL;
    const char *op = test_tmp("nohalf.calib");
    assert_int_equal(skv_calib_write(old, op), 0);
    skv_calib *o2 = skv_calib_read(op);
    if (!o2) fail_msg("%s", skv_last_error());
    assert_null(o2->half);
    assert_int_equal(skv_calib_half_mean(o2, SKV_METRIC_JACCARD, true, B), -1);
    assert_non_null(strstr(skv_last_error(), "no split halves"));
    skv_profile *po = skv_profile_build(o2, SKV_METRIC_JACCARD, 0.01, 0, "test");
    assert_non_null(po);
    assert_false(po->stability.present);
    skv_profile_free(po);
    skv_calib *m8 = mk(1, 8, 0);
    for (int w = 0; w < 6; w++) assert_int_equal(add_window(m8, w), 0);
    assert_non_null(m8->half);
    assert_int_equal(skv_calib_merge(m8, o2, "a", "b"), 0);
    assert_null(m8->half);
    skv_calib_free(m8);
    skv_calib_free(o2);
    skv_calib_free(old);
    free(S);
    skv_calib_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_metrics_hand),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_accumulator_values),
        cmocka_unit_test(test_identical_heads),
        cmocka_unit_test(test_file_roundtrip),
        cmocka_unit_test(test_shard_merge_exact),
        cmocka_unit_test(test_merge_refusals),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_halves_and_stability),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
