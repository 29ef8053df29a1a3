/* test_policies.c: each policy's selection on small synthetic scores against a
 * hand-computed answer, SmallKV's budget split, the marginal weights, the lane shares
 * of PyramidKV / Ada-KV, SnapKV's decode=keep|evict, Quest's page bounds (they bound every
 * true score of their page) and pages, the oracle's exact top-k, PyramidInfer's per-layer
 * budgets, nested recent-window selection and decode blocks, and the descriptions users
 * read (docs/policies.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/policies/ems.h"
#include "runtime/policies/policy.h"
#include "runtime/policies/quest.h"
#include "runtime/policies/smallkv.h"
#include "runtime/policies/snapkv.h"
#include "common/util.h"
#include "include/smallkv.h"

#define NMAX 64
typedef struct { int kv[NMAX], v[NMAX], itmp[NMAX]; float ftmp[NMAX]; unsigned char mark[NMAX]; } bufs;

static skv_select_io io_for(const skv_kvcache *c, bufs *b, int layer, int kvh, int n, int n0, double budget) {
    skv_select_io io = {.layer = layer, .kvh = kvh, .lane = skv_lane(c, layer, kvh), .n = n, .n0 = n0,
                        .budget = budget, .cache = c, .kv_pos = b->kv, .v_pos = b->v,
                        .itmp = b->itmp, .ftmp = b->ftmp, .mark = b->mark};
    return io;
}

static void expect(const int *got, int n_got, const int *want, int n_want) {
    assert_int_equal(n_got, n_want);
    int tmp[NMAX];
    memcpy(tmp, got, sizeof(int) * n_got);
    skv_sort_ints(tmp, n_got);
    for (int i = 0; i < n_want; i++) assert_int_equal(tmp[i], want[i]);
}

static skv_kvcache *cache(int L, int Hkv, int n) {
    skv_kvcache *c = skv_kvcache_new(L, Hkv, 8, false);
    assert_int_equal(skv_kvcache_cold_reserve(c, n), 0);
    float z[64 * 8 * 2] = {0};
    for (int l = 0; l < L; l++) assert_int_equal(skv_kvcache_cold_write(c, l, 0, n, z, z), 0);
    return c;
}

static void test_topk_pool(void **st) {
    (void)st;
    float s[8] = {1, 5, 3, 5, 0, 2, 9, 3};
    int cand[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int k = skv_topk(s, cand, 8, 3);
    int want[3] = {1, 3, 6};
    expect(cand, k, want, 3);
    /* ties: the later position wins */
    int cand2[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    k = skv_topk(s, cand2, 8, 4);
    int want2[4] = {1, 3, 6, 7};
    expect(cand2, k, want2, 4);
    float x[8] = {0, 1, 0, 0, 5, 0, 0, 2}, y[8];
    skv_maxpool1d(y, x, 8, 1);
    float wy[8] = {1, 1, 1, 5, 5, 5, 2, 2};
    for (int i = 0; i < 8; i++) assert_float_equal(y[i], wy[i], 0);
}

static const skv_policy_env no_models;   /* unit tests: no models, inputs given directly */

static skv_policy *mkpol(const char *spec, int L, int H, int Hkv) {
    skv_policy *p = skv_policy_new_str(spec, &no_models, L, H, Hkv);
    if (!p) print_message("%s: %s\n", spec, skv_last_error());
    return p;
}

static void test_full_streaming(void **st) {
    (void)st;
    skv_kvcache *c = cache(1, 1, 20);
    bufs b;
    skv_policy *p = mkpol("full", 1, 2, 1);
    skv_select_io io = io_for(c, &b, 0, 0, 20, 0, 5);
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, 20);
    skv_policy_free(p);
    p = mkpol("streamingllm", 1, 2, 1);
    io = io_for(c, &b, 0, 0, 20, 0, 8);
    assert_int_equal(p->select(p, &io), 0);
    int want[8] = {0, 1, 2, 3, 16, 17, 18, 19};
    expect(io.kv_pos, io.n_kv, want, 8);
    assert_int_equal(io.n_v, 0);
    skv_policy_free(p);
    skv_kvcache_free(c);
}

/* A short prompt: while the budget holds fewer tokens than the sinks, the sink count grows
 * with the sequence, over positions an earlier step evicted for good. Those stay evicted and
 * their slots go to the candidates (StreamingLLM: the most recent), for every permanent
 * policy (once an error "neither hot nor in the cold tier" at the first such step). */
static void test_sinks_after_eviction(void **st) {
    (void)st;
    const int n = 14;
    skv_kvcache *c = cache(1, 1, n);
    int need[1] = {4}, hot[4] = {0, 1, 2, 12};
    assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c, 0, 0, hot, 4, NULL, 0), 4);
    const char *specs[] = {"streamingllm", "h2o", "snapkv:decode=evict"};
    for (int i = 0; i < 3; i++) {
        skv_policy *p = mkpol(specs[i], 1, 2, 1);
        float colsum[2 * 14] = {0}, obs[2 * 14] = {0};
        skv_prefill_info pi = {.layer = 0, .H = 2, .Hkv = 1, .n0 = 0, .n = n - 1, .stride = 14, .colsum = colsum,
                               .obs = obs, .obs_rows = 2, .cache = c, .budget = 4};
        if (p->on_prefill) assert_int_equal(p->on_prefill(p, &pi), 0);
        bufs b;
        skv_select_io io = io_for(c, &b, 0, 0, n, n - 1, 4);   /* 4 sinks by default, budget 4 */
        assert_int_equal(p->select(p, &io), 0);
        assert_int_equal(io.n_kv, 4);
        for (int k = 0; k < io.n_kv; k++) assert_true(io.kv_pos[k] < 3 || io.kv_pos[k] >= 12);   /* 3..11 are gone */
        if (i == 0) {
            int want[4] = {0, 1, 2, 13};
            expect(io.kv_pos, io.n_kv, want, 4);
        }
        skv_policy_free(p);
    }
    skv_kvcache_free(c);
}

static void test_h2o(void **st) {
    (void)st;
    const int n = 12;
    skv_kvcache *c = cache(1, 1, n);
    skv_policy *p = mkpol("h2o:sinks=1", 1, 2, 1);
    /* two query heads; summed scores: pos 2 -> 9, pos 5 -> 7, pos 7 -> 8, others small */
    float colsum[2 * 12] = {0};
    for (int k = 0; k < n; k++) { colsum[k] = 0.1f * k; colsum[12 + k] = 0.05f; }
    colsum[2] = 4; colsum[12 + 2] = 5;
    colsum[5] = 7;
    colsum[7] = 3; colsum[12 + 7] = 5;
    skv_prefill_info pi = {.layer = 0, .H = 2, .Hkv = 1, .n0 = 0, .n = n, .stride = 12, .colsum = colsum, .cache = c};
    assert_int_equal(p->on_prefill(p, &pi), 0);
    bufs b;
    /* budget 6: heavy 3 (sink 0 + the top 2: 2, 7), recent 3 (9, 10, 11) */
    skv_select_io io = io_for(c, &b, 0, 0, n, 0, 6);
    assert_int_equal(p->select(p, &io), 0);
    int want[6] = {0, 2, 7, 9, 10, 11};
    expect(io.kv_pos, io.n_kv, want, 6);
    int need[1] = {6};
    assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0), 6);
    /* a decode row puts mass on 9 (about to leave the window); position 5 (score 7, evicted)
     * must not come back: eviction is permanent */
    int pos[6] = {0, 2, 7, 9, 10, 11};
    float prob[6] = {0, 0, 0, 20, 0, 0};
    p->on_step(p, 0, 0, pos, prob, NULL, 6);
    skv_kvcache *c2 = cache(1, 1, n + 1);   /* one more token in cold */
    assert_int_equal(skv_kvcache_hot_reserve(c2, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c2, 0, 0, pos, 6, NULL, 0), 6);
    io = io_for(c2, &b, 0, 0, n + 1, n, 6);
    assert_int_equal(p->select(p, &io), 0);
    int want2[6] = {0, 2, 9, 10, 11, 12};
    expect(io.kv_pos, io.n_kv, want2, 6);
    skv_policy_free(p);
    skv_kvcache_free(c); skv_kvcache_free(c2);
}

static void test_snapkv_family(void **st) {
    (void)st;
    const int n = 10;
    skv_kvcache *c = cache(3, 2, n);
    skv_policy *p = mkpol("snapkv:sinks=1:window=2:pool=3", 3, 2, 2);    /* g = 1 */
    float obs[2 * 10] = {0, 1, 0, 0, 5, 0, 0, 2, 9, 9,   /* head 0: pooled 1 1 1 5 5 5 2 2 */
                         3, 0, 0, 0, 0, 0, 1, 0, 9, 9};  /* head 1: pooled 3 3 0 0 0 1 1 1 */
    for (int l = 0; l < 3; l++) {
        skv_prefill_info pi = {.layer = l, .H = 2, .Hkv = 2, .n0 = 0, .n = n, .stride = 10, .obs = obs, .obs_rows = 2,
                               .cache = c, .budget = 6};
        assert_int_equal(p->on_prefill(p, &pi), 0);
    }
    bufs b;
    skv_select_io io = io_for(c, &b, 1, 0, n, 0, 6);
    assert_int_equal(p->select(p, &io), 0);
    int want[6] = {0, 3, 4, 5, 8, 9};
    expect(io.kv_pos, io.n_kv, want, 6);
    io = io_for(c, &b, 1, 1, n, 0, 6);
    assert_int_equal(p->select(p, &io), 0);
    int want1[6] = {0, 1, 6, 7, 8, 9};   /* 1 (3), then 5,6,7 tie at 1: later wins -> 6, 7 */
    expect(io.kv_pos, io.n_kv, want1, 6);
    skv_policy_free(p);

    /* PyramidKV: L = 3, beta 20: (B - w) x 1.95, 1.0, 0.05 */
    p = mkpol("pyramidkv:sinks=1:window=2:pool=3", 3, 2, 2);
    assert_float_equal(p->lane_share(p, 0, 0, 12), (2 + 1.95 * 10) / 12, 1e-9);
    assert_float_equal(p->lane_share(p, 1, 1, 12), 1.0, 1e-9);
    assert_float_equal(p->lane_share(p, 2, 0, 12), (2 + 0.05 * 10) / 12, 1e-9);
    skv_policy_free(p);

    /* Ada-KV: b = 6 - 2 = 4 per head, 8 over the layer among positions 1..7:
     * head 0 pooled (1 1 5 5 5 2 2), head 1 (3 0 0 0 1 1 1): the top 8 are 5 5 5 3 2 2 and
     * two of the 1s; ties go to the later flat index (head 1), so won = {5, 3};
     * shares floor(won * 0.8 + 0.2 * 4) / 4 = 4/4, 3/4. */
    p = mkpol("adakv:sinks=1:window=2:pool=3", 3, 2, 2);
    skv_prefill_info pi = {.layer = 0, .H = 2, .Hkv = 2, .n0 = 0, .n = n, .stride = 10, .obs = obs, .obs_rows = 2,
                           .cache = c, .budget = 6};
    assert_int_equal(p->on_prefill(p, &pi), 0);
    double s0 = p->lane_share(p, 0, 0, 6), s1 = p->lane_share(p, 0, 1, 6);
    /* head 0 keeps the even share, head 1 gets less, and the total stays <= 2 * 6 */
    assert_true(s0 >= 1.0 && s1 < 1.0);
    assert_true(6 * (s0 + s1) <= 12 + 1e-9);
    skv_snap_state *ss = p->st;
    assert_float_equal(ss->share[0], 4.0 / 4, 1e-9);
    assert_float_equal(ss->share[1], 3.0 / 4, 1e-9);
    skv_policy_free(p);
    skv_kvcache_free(c);
}

static void test_smallkv_split(void **st) {
    (void)st;
    skv_policy_spec spec;
    assert_int_equal(skv_policy_spec_parse("smallkv", &spec), 0);
    skv_smallkv_opts o;
    memcpy(&o, spec.opts, sizeof o);
    int cr, rc, mg;
    skv_smallkv_split(&o, 200, 1000, &cr, &rc, &mg);       /* tau 20% of 1000 -> 10% / 5% / 10% */
    assert_int_equal(cr, 100); assert_int_equal(rc, 50); assert_int_equal(mg, 100);
    skv_smallkv_split(&o, 10, 1000, &cr, &rc, &mg);        /* x = 2.5 -> 5, 2, 5: cost 9.5 <= 10 */
    assert_int_equal(cr, 5); assert_int_equal(rc, 2); assert_int_equal(mg, 5);
    skv_smallkv_split(&o, 6, 1000, &cr, &rc, &mg);         /* small: critical keeps sinks + 1, recent 1, no marginal */
    assert_int_equal(cr, 5); assert_int_equal(rc, 1); assert_int_equal(mg, 0);
    o.no_marginal = true;
    skv_smallkv_split(&o, 30, 1000, &cr, &rc, &mg);        /* 2 : 1 of the whole budget */
    assert_int_equal(cr, 20); assert_int_equal(rc, 10); assert_int_equal(mg, 0);
    /* split=small: at 5 % of the sequence most slots go to critical tokens (6:1:1), above
     * small_at (7.5 %) the fixed split */
    assert_int_equal(skv_policy_spec_parse("smallkv:split=small", &spec), 0);
    memcpy(&o, spec.opts, sizeof o);
    skv_smallkv_split(&o, 50, 1000, &cr, &rc, &mg);   /* x = 50 / 7.5 -> 40, 6, 6: cost 49 */
    assert_int_equal(cr, 40); assert_int_equal(rc, 6); assert_int_equal(mg, 6);
    skv_smallkv_split(&o, 100, 1000, &cr, &rc, &mg);  /* 10 %: the fixed 2:1:2 */
    assert_int_equal(cr, 50); assert_int_equal(rc, 25); assert_int_equal(mg, 50);
    int fc, fr, fm;
    assert_int_equal(skv_policy_spec_parse("smallkv", &spec), 0);
    memcpy(&o, spec.opts, sizeof o);
    skv_smallkv_split(&o, 50, 1000, &fc, &fr, &fm);   /* fixed at 5 %: 25, 12, 25 */
    assert_true(cr > fc && fc == 25 && fr == 12 && fm == 25);
}

static void test_smallkv_select(void **st) {
    (void)st;
    const int n = 20, S = 32;
    skv_kvcache *c = cache(1, 1, n);
    /* the accumulated score first; NOW and MEAN below */
    skv_policy *p = mkpol("smallkv:sinks=1:score=acc", 1, 2, 1);   /* LLM: 1 layer, 2 query heads, 1 KV head */
    skv_smallkv_opts *o = p->opts;
    /* SLM: 1 layer, 2 heads; LLM head 0 -> SLM head 1, LLM head 1 -> SLM head 1 */
    float colsum[2 * S], lastrow[2 * S];
    memset(colsum, 0, sizeof colsum); memset(lastrow, 0, sizeof lastrow);
    float sc[20] = {50, 1, 9, 2, 8, 3, 7, 4, 6, 0.5f, 5, 0.2f, 0.1f, 0.3f, 0.4f, 0.6f, 0.7f, 0.8f, 9, 9};
    for (int k = 0; k < n; k++) { colsum[S + k] = sc[k]; colsum[k] = 100.0f * (k == 13); lastrow[S + k] = 0.01f * k; }
    int map[2] = {1, 1};
    const float *cs[1] = {colsum}, *lr[1] = {lastrow};
    skv_slm_view v = {.map = map, .slm_heads = 2, .slm_layers = 1, .colsum = cs, .lastrow = lr, .stride = S};
    assert_int_equal(skv_smallkv_attach(p, &v), 0);
    bufs b;
    /* budget 8: critical 4 (sink 0 + top 3 in [1, 18): 2 (9), 4 (8), 6 (7)), recent 2 (18, 19),
     * marginal 4: 8 (6), 10 (5), 7 (4), 5 (3) */
    skv_select_io io = io_for(c, &b, 0, 0, n, 0, 8);
    assert_int_equal(p->select(p, &io), 0);
    int wkv[6] = {0, 2, 4, 6, 18, 19}, wv[4] = {5, 7, 8, 10};
    expect(io.kv_pos, io.n_kv, wkv, 6);
    expect(io.v_pos, io.n_v, wv, 4);
    assert_true(io.n_kv + 0.5 * io.n_v <= 8);
    /* marginal weights: the SLM head 1's last row at the marginal slots; w = its mass on K+V */
    float pm[2 * 4], w[2];
    p->marginal(p, 0, 0, io.kv_pos, io.n_kv, io.v_pos, io.n_v, pm, w);
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < 4; k++) assert_float_equal(pm[t * 4 + k], 0.01f * wv[k], 1e-7);
        assert_float_equal(w[t], 0.01f * (0 + 2 + 4 + 6 + 18 + 19), 1e-6);
    }
    /* score = this step's SLM row (0.01 k): critical 15, 16, 17; marginal 11 .. 14 */
    int nkv[6] = {0, 15, 16, 17, 18, 19}, nv[4] = {11, 12, 13, 14};
    o->score = SKV_SLM_SCORE_NOW;
    io = io_for(c, &b, 0, 0, n, 0, 8);
    assert_int_equal(p->select(p, &io), 0);
    expect(io.kv_pos, io.n_kv, nkv, 6);
    expect(io.v_pos, io.n_v, nv, 4);
    /* score = mean per row that saw k: colsum (n - k) * 0.01 k ranks like 0.01 k (the
     * accumulated sum alone would pick the middle, k = 8 .. 12) */
    for (int k = 0; k < n; k++) colsum[S + k] = (float)(n - k) * 0.01f * (float)k;
    o->score = SKV_SLM_SCORE_MEAN;
    io = io_for(c, &b, 0, 0, n, 0, 8);
    assert_int_equal(p->select(p, &io), 0);
    expect(io.kv_pos, io.n_kv, nkv, 6);
    expect(io.v_pos, io.n_v, nv, 4);
    o->score = SKV_SLM_SCORE_ACC;
    io = io_for(c, &b, 0, 0, n, 0, 8);
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, 6);
    for (int i = 1; i < 4; i++) assert_true(io.kv_pos[i] >= 8 && io.kv_pos[i] <= 12);
    /* budget >= n keeps everything */
    io = io_for(c, &b, 0, 0, n, 0, 20);
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, 20); assert_int_equal(io.n_v, 0);
    /* a mapping outside the SLM's layers is refused */
    int badmap[2] = {1, 2};
    v.map = badmap;
    assert_int_equal(skv_smallkv_attach(p, &v), -1);
    skv_policy_free(p);
    skv_kvcache_free(c);
}

/* EMS on hand-made K/V and scores (d = 2, one head, budget N = 3, gamma 2, tau 0.6):
 *   global (colsum) 10 1 5 0.5 4 0.2 0.1 3, local (last 2 rows) 0 0 0 0 0 0 1 1;
 *   mean alignment over positions 1..7 (sink 0 excluded): a = 13.8 / 2 = 6.9, so
 *   scores: 1 -> 1, 2 -> 5, 3 -> 0.5, 4 -> 4, 5 -> 0.2, 6 -> 7.0, 7 -> 9.9, sink +inf;
 *   centres (top 3): 0, 7, 6; merge candidates (next 3): 2, 4, 1; evicted: 3, 5.
 *   K/V: 0 (1,0)/(1,0)  1 (1,0)/(0,1)  2 (1,1)/(1,0)  4 (0,1)/(0,2)  6 (0,1)/(0,1)  7 (-1,0)/(1,1)
 *   2 -> 0: cos_k 0.707 * cos_v 1 = 0.707 > 0.6;  4 -> 6: 1 * 1;  1: best product 0 -> dropped.
 *   merged: centre 0 K (1, 0.5) V (1, 0) m 2; centre 6 K (0, 1) V (0, 1.5) m 2; 7 as is, m 1. */
static void test_ems(void **st) {
    (void)st;
    const int n = 8;
    float k[8 * 2] = {1, 0, 1, 0, 1, 1, 5, 5, 0, 1, 5, 5, 0, 1, -1, 0};
    float v[8 * 2] = {1, 0, 0, 1, 1, 0, 5, 5, 0, 2, 5, 5, 0, 1, 1, 1};
    skv_kvcache *c = skv_kvcache_new(1, 1, 2, false);
    assert_int_equal(skv_kvcache_cold_reserve(c, n), 0);
    assert_int_equal(skv_kvcache_cold_write(c, 0, 0, n, k, v), 0);
    skv_policy *p = mkpol("ems:sinks=1:ems_gamma=2:ems_tau=0.6:window=2", 1, 1, 1);
    assert_non_null(p);
    float colsum[8] = {10, 1, 5, 0.5f, 4, 0.2f, 0.1f, 3}, obs[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    skv_prefill_info pi = {.layer = 0, .H = 1, .Hkv = 1, .n0 = 0, .n = n, .stride = 8, .colsum = colsum, .obs = obs,
                           .obs_rows = 2, .cache = c, .budget = 3};
    assert_int_equal(p->on_prefill(p, &pi), 0);
    bufs b;
    skv_select_io io = io_for(c, &b, 0, 0, n, 0, 3);
    assert_int_equal(p->select(p, &io), 0);
    int want[3] = {0, 6, 7};
    expect(io.kv_pos, io.n_kv, want, 3);
    assert_int_equal(io.n_v, 0);
    /* the look-up table: kept positions and their centres */
    skv_ems_plan plan;
    assert_int_equal(skv_policy_ems_plan(p, 0, 0, &plan), 0);
    assert_int_equal(plan.n_lut, 6);
    assert_int_equal(plan.n_centre, 3);
    int cen_of[8];
    for (int i = 0; i < 8; i++) cen_of[i] = -2;   /* -2: evicted (not in the table) */
    for (int i = 0; i < plan.n_lut; i++) cen_of[plan.lut_pos[i]] = plan.lut_centre[i];
    int want_cen[8] = {0, -1, 0, -2, 6, -2, 6, 7};
    for (int i = 0; i < 8; i++) assert_int_equal(cen_of[i], want_cen[i]);
    /* apply + merge: only the 3 centres are stored, with merged K/V and multiplicities */
    int need[1] = {3};
    assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0), 3);
    assert_int_equal(p->after_apply(p, c, 0, 0), 0);
    const int *P = skv_kvcache_hot_pos_kv(c, 0, 0), *M = skv_kvcache_hot_mult(c, 0, 0);
    const float *K = skv_kvcache_hot_k(c, 0, 0), *V = skv_kvcache_hot_v(c, 0, 0);
    for (int sl = 0; sl < 3; sl++) {
        float wk[2], wv[2];
        int wm;
        if (P[sl] == 0) { wk[0] = 1; wk[1] = 0.5f; wv[0] = 1; wv[1] = 0; wm = 2; }
        else if (P[sl] == 6) { wk[0] = 0; wk[1] = 1; wv[0] = 0; wv[1] = 1.5f; wm = 2; }
        else { assert_int_equal(P[sl], 7); wk[0] = -1; wk[1] = 0; wv[0] = 1; wv[1] = 1; wm = 1; }
        assert_int_equal(M[sl], wm);
        for (int t = 0; t < 2; t++) {
            assert_float_equal(K[sl * 2 + t], wk[t], 1e-6);
            assert_float_equal(V[sl * 2 + t], wv[t], 1e-6);
        }
    }
    /* decode: one new token appends while within budget (budget 4 at n = 9) */
    skv_kvcache_set_fresh(c, 0, 8, 1, (float[]){0.5f, 0.5f}, (float[]){2, 2});
    io = io_for(c, &b, 0, 0, 9, 8, 4);
    assert_int_equal(p->select(p, &io), 0);
    int want2[4] = {0, 6, 7, 8};
    expect(io.kv_pos, io.n_kv, want2, 4);
    int need2[1] = {4};
    assert_int_equal(skv_kvcache_hot_reserve(c, 0, need2, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0), 1);
    assert_int_equal(p->after_apply(p, c, 0, 0), 0);
    /* over budget (3 at n = 10): evict+merge again over the 4 centres + the new token;
     * the new token (no score yet) and the sink stay centres, evicted positions never return */
    skv_kvcache_set_fresh(c, 0, 9, 1, (float[]){0, 1}, (float[]){0, 1});
    io = io_for(c, &b, 0, 0, 10, 9, 3);
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, 3);
    bool has0 = false, has9 = false;
    for (int i = 0; i < 3; i++) {
        has0 |= io.kv_pos[i] == 0; has9 |= io.kv_pos[i] == 9;
        assert_true(io.kv_pos[i] != 1 && io.kv_pos[i] != 3 && io.kv_pos[i] != 5 && io.kv_pos[i] != 2);
    }
    assert_true(has0 && has9);
    skv_policy_free(p);
    skv_kvcache_free(c);
}

/* Every policy's option table is well formed; an option name means the same everywhere (the
 * CLI takes it as one flag for every policy); each spec's label parses back to the same
 * options; the help names every visible option. */
/* a float cache of one layer, Hkv lanes, head dim d, with pseudo-random keys (values = keys) */
static skv_kvcache *random_cache(int Hkv, int d, int n, unsigned seed, float *keys /* (n, Hkv, d) */) {
    skv_kvcache *c = skv_kvcache_new(1, Hkv, d, false);
    assert_int_equal(skv_kvcache_cold_reserve(c, n), 0);
    for (int i = 0; i < n * Hkv * d; i++) {
        seed = seed * 1103515245u + 12345u;
        keys[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    assert_int_equal(skv_kvcache_cold_write(c, 0, 0, n, keys, keys), 0);
    return c;
}

/* EMS while decoding: with ems_gen=inf (default) a generated token is never outscored while it
 * stays; with ems_gen=acc, once a decode row has seen it, it competes by its attention; the
 * sinks stay in both however many tokens are generated. */
static void test_ems_gen(void **st) {
    (void)st;
    const int n = 8;
    float kv[14 * 2];
    for (int i = 0; i < 28; i++) kv[i] = (float)(i % 3) - 1;
    float colsum[8] = {10, 1, 5, 0.5f, 4, 0.2f, 0.1f, 3}, obs[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    const char *specs[2] = {"ems:sinks=1:ems_gamma=1:window=2", "ems:sinks=1:ems_gamma=1:window=2:ems_gen=acc"};
    for (int mode = 0; mode < 2; mode++) {
        skv_kvcache *c = skv_kvcache_new(1, 1, 2, false);
        assert_int_equal(skv_kvcache_cold_reserve(c, 14), 0);
        assert_int_equal(skv_kvcache_cold_write(c, 0, 0, 14, kv, kv), 0);
        skv_policy *p = mkpol(specs[mode], 1, 1, 1);
        skv_prefill_info pi = {.layer = 0, .H = 1, .Hkv = 1, .n0 = 0, .n = n, .stride = 8, .colsum = colsum, .obs = obs,
                               .obs_rows = 2, .cache = c, .budget = 3};
        assert_int_equal(p->on_prefill(p, &pi), 0);
        bufs b;
        int need[1] = {4};
        assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
        skv_select_io io = io_for(c, &b, 0, 0, n, 0, 3);
        assert_int_equal(p->select(p, &io), 0);
        assert_true(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0) >= 0);
        /* step 1 adds position 8: it scores +inf either way (nothing has seen it yet) */
        io = io_for(c, &b, 0, 0, 9, 8, 3);
        assert_int_equal(p->select(p, &io), 0);
        int w1[3] = {0, 7, 8};   /* 7 (3 + its window sum, aligned) beats 2 (5) */
        expect(io.kv_pos, io.n_kv, w1, 3);
        assert_true(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0) >= 0);
        /* the step's row: much attention on 7, almost none on 8 */
        int pos[3] = {0, 7, 8};
        float prob[3] = {0.4f, 0.59f, 0.01f};
        p->on_step(p, 0, 0, pos, prob, NULL, 3);
        /* step 2 adds 9: inf keeps 8 and drops 7; acc keeps 7 and drops 8 */
        io = io_for(c, &b, 0, 0, 10, 9, 3);
        assert_int_equal(p->select(p, &io), 0);
        int w_inf[3] = {0, 8, 9}, w_acc[3] = {0, 7, 9};
        expect(io.kv_pos, io.n_kv, mode ? w_acc : w_inf, 3);
        /* more tokens than the budget since the prefill: the sink stays (it used to tie with
         * the unscored generated tokens at +inf and lose to the later ones) */
        for (int k = 10; k < 14; k++) {
            assert_true(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0) >= 0);
            io = io_for(c, &b, 0, 0, k + 1, k, 3);
            assert_int_equal(p->select(p, &io), 0);
            assert_int_equal(io.n_kv, 3);
            skv_sort_ints(io.kv_pos, io.n_kv);
            assert_int_equal(io.kv_pos[0], 0);
            assert_int_equal(io.kv_pos[2], k);
        }
        skv_policy_free(p);
        skv_kvcache_free(c);
    }
}

static void test_quest(void **st) {
    (void)st;
    enum { n = 50, d = 8, Hkv = 2, H = 4, P = 8 };
    float keys[n * Hkv * d], q[H * d];
    skv_kvcache *c = random_cache(Hkv, d, n, 7, keys);
    for (int i = 0; i < H * d; i++) q[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    skv_policy *p = mkpol("quest:page=8", 1, H, Hkv);
    assert_non_null(p);
    bufs b;
    skv_select_io io = io_for(c, &b, 0, 1, n, 0, 20);
    io.q = q; io.d = d;
    assert_int_equal(p->select(p, &io), 0);
    /* the bound of every page of lane 1 is >= q.k of each of its keys, for both query heads
     * of the group (pages of 8: 0..7, .., 40..47, and the current one 48..49) */
    for (int t = 0; t < 2; t++) {
        const float *qh = q + (size_t)(1 * 2 + t) * d;
        for (int pg = 0; pg * P < n; pg++) {
            float u;
            assert_int_equal(skv_policy_quest_bound(p, 0, 1, pg, qh, &u), 0);
            float best = -INFINITY;
            for (int k = pg * P; k < (pg + 1) * P && k < n; k++) {
                float dot = 0;
                for (int ch = 0; ch < d; ch++) dot += qh[ch] * keys[((size_t)k * Hkv + 1) * d + ch];
                if (dot > u + 1e-5f) fail_msg("page %d bound %g < q.k %g of position %d", pg, u, dot, k);
                best = fmaxf(best, dot);
            }
            assert_true(u >= best - 1e-5f);
        }
    }
    assert_int_equal(skv_policy_quest_bound(p, 0, 1, 7, q, &(float){0}), -1);   /* not seen */
    /* selection: 20 tokens = the current page (48, 49) + the two best pages whole (16) + the
     * first 2 tokens of the third best; the pages follow the group's summed bounds */
    assert_int_equal(io.n_kv, 20);
    assert_int_equal(io.n_v, 0);
    float pb[6];
    for (int pg = 0; pg < 6; pg++) {
        float u0, u1;
        skv_policy_quest_bound(p, 0, 1, pg, q + 2 * d, &u0);
        skv_policy_quest_bound(p, 0, 1, pg, q + 3 * d, &u1);
        pb[pg] = u0 + u1;
    }
    int order[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            if (pb[order[j]] > pb[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    unsigned char in[n] = {0};
    for (int i = 0; i < io.n_kv; i++) in[io.kv_pos[i]] = 1;
    assert_true(in[48] && in[49]);
    for (int k = 0; k < P; k++) assert_true(in[order[0] * P + k] && in[order[1] * P + k]);
    assert_true(in[order[2] * P] && in[order[2] * P + 1] && !in[order[2] * P + 2]);
    for (int k = 0; k < P; k++) assert_false(in[order[5] * P + k]);
    skv_policy_free(p);
    /* the budget of the whole sequence keeps everything */
    p = mkpol("quest", 1, H, Hkv);
    io = io_for(c, &b, 0, 0, n, 0, n);
    io.q = q; io.d = d;
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, n);
    /* metadata: ceil(50 / 16) pages x min and max rows of d floats, for the one lane seen */
    skv_policy_mem m = {0};
    p->mem(p, &m);
    assert_int_equal(m.hot_meta_bytes, 4 * 2 * d * sizeof(float));
    skv_policy_free(p);
    skv_kvcache_free(c);
}

static void test_oracle(void **st) {
    (void)st;
    enum { n = 40, d = 8, Hkv = 1, H = 2 };
    float keys[n * Hkv * d], q[H * d];
    skv_kvcache *c = random_cache(Hkv, d, n, 3, keys);
    for (int i = 0; i < H * d; i++) q[i] = (float)((i * 13) % 7) / 2.0f - 1.5f;
    skv_policy *p = mkpol("oracle", 1, H, Hkv);
    assert_non_null(p);
    bufs b;
    skv_select_io io = io_for(c, &b, 0, 0, n, 0, 10);
    io.q = q; io.d = d;
    assert_int_equal(p->select(p, &io), 0);
    /* the 10 tokens with the most attention (softmax per head, summed over the group) */
    double a[n] = {0};
    for (int h = 0; h < H; h++) {
        double lg[n], mx = -1e30, z = 0;
        for (int k = 0; k < n; k++) {
            lg[k] = 0;
            for (int ch = 0; ch < d; ch++) lg[k] += q[h * d + ch] * keys[k * d + ch];
            lg[k] /= sqrt(d);
            mx = fmax(mx, lg[k]);
        }
        for (int k = 0; k < n; k++) z += (lg[k] = exp(lg[k] - mx));
        for (int k = 0; k < n; k++) a[k] += lg[k] / z;
    }
    assert_int_equal(io.n_kv, 10);
    double kept_min = 1e30, out_max = 0;
    unsigned char in[n] = {0};
    for (int i = 0; i < io.n_kv; i++) in[io.kv_pos[i]] = 1;
    for (int k = 0; k < n; k++) {
        if (in[k]) kept_min = fmin(kept_min, a[k]);
        else out_max = fmax(out_max, a[k]);
    }
    assert_true(kept_min >= out_max);
    /* budget n: everything */
    io = io_for(c, &b, 0, 0, n, 0, n);
    io.q = q; io.d = d;
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, n);
    /* without the query it refuses */
    io = io_for(c, &b, 0, 0, n, 0, 10);
    assert_int_equal(p->select(p, &io), -1);
    skv_policy_free(p);
    skv_kvcache_free(c);
}

static void test_snapkv_decode(void **st) {
    (void)st;
    const int n = 10;
    float obs[10] = {0, 1, 0, 0, 5, 0, 0, 2, 9, 9};
    const char *specs[2] = {"snapkv:sinks=1:window=2:pool=1", "snapkv:sinks=1:window=2:pool=1:decode=evict"};
    for (int mode = 0; mode < 2; mode++) {
        skv_kvcache *c = cache(1, 1, n + 6);
        skv_policy *p = mkpol(specs[mode], 1, 1, 1);
        skv_prefill_info pi = {.layer = 0, .H = 1, .Hkv = 1, .n0 = 0, .n = n, .stride = 10, .obs = obs, .obs_rows = 2,
                               .cache = c, .budget = 5};
        assert_int_equal(p->on_prefill(p, &pi), 0);
        bufs b;
        skv_select_io io = io_for(c, &b, 0, 0, n, 0, 5);
        assert_int_equal(p->select(p, &io), 0);
        int want[5] = {0, 4, 7, 8, 9};   /* the prompt compressed to the budget either way */
        expect(io.kv_pos, io.n_kv, want, 5);
        int need[1] = {n + 6};
        assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
        assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0), 5);
        /* six decode steps at a budget of 5 tokens */
        for (int k = n; k < n + 6; k++) {
            io = io_for(c, &b, 0, 0, k + 1, k, 5);
            assert_int_equal(p->select(p, &io), 0);
            assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0) >= 0, 1);
        }
        if (mode == 0) {   /* keep: the compressed prompt and every generated token */
            int want_keep[11] = {0, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15};
            expect(io.kv_pos, io.n_kv, want_keep, 11);
        } else {           /* evict: 5 tokens, the generated ones (+inf) push the prompt out */
            int want_ev[5] = {0, 12, 13, 14, 15};
            expect(io.kv_pos, io.n_kv, want_ev, 5);
        }
        skv_policy_free(p);
        skv_kvcache_free(c);
    }
    /* the labels: evict (the behaviour of the older records) omits the option */
    skv_policy_spec s;
    char label[64];
    assert_int_equal(skv_policy_spec_parse("snapkv:decode=evict", &s), 0);
    skv_policy_spec_label(&s, label, sizeof label);
    assert_string_equal(label, "snapkv");
    assert_int_equal(skv_policy_spec_parse("pyramidkv", &s), 0);
    skv_policy_spec_label(&s, label, sizeof label);
    assert_string_equal(label, "pyramidkv:decode=keep");
}

/* PyramidInfer's per-layer budgets: cosine ratios r(l) = (1 - d)(cos(pi l / L) + 1) / 2 + d,
 * c_l = r(0) ... r(l-1), share_l = (0.8 c_l + 0.2) / mean. L = 4, d = 0.5: r = 1, 0.92678,
 * 0.75, c = 1, 1, 0.92678, 0.69508, shares 1.08182, 1.08182, 1.01844, 0.81792 (mean 1). */
static void test_pyramidinfer_budgets(void **st) {
    (void)st;
    skv_policy *p = mkpol("pyramidinfer:pi_decay=0.5", 4, 2, 2);
    assert_non_null(p);
    const double want[4] = {1.081815729449073, 1.081815729449073, 1.0184444312168004, 0.8179241098850539};
    double mean = 0;
    for (int l = 0; l < 4; l++) {
        for (int j = 0; j < 2; j++) assert_float_equal(p->lane_share(p, l, j, 10), want[l], 1e-6);
        mean += p->lane_share(p, l, 0, 10) / 4;
    }
    assert_float_equal(mean, 1.0, 1e-9);
    skv_policy_free(p);
    /* every 2nd layer only: c = 1, 1, 1, 0.75 */
    p = mkpol("pyramidinfer:pi_decay=0.5:pi_interval=2", 4, 2, 2);
    const double m2 = (3 * 1.0 + (0.8 * 0.75 + 0.2)) / 4;
    assert_float_equal(p->lane_share(p, 1, 0, 10), 1.0 / m2, 1e-6);
    assert_float_equal(p->lane_share(p, 2, 0, 10), 1.0 / m2, 1e-6);
    assert_float_equal(p->lane_share(p, 3, 1, 10), (0.8 * 0.75 + 0.2) / m2, 1e-6);
    skv_policy_free(p);
    /* as published, the budget plays no part */
    p = mkpol("pyramidinfer:pi_retain=schedule", 4, 2, 2);
    for (int l = 0; l < 4; l++) assert_float_equal(p->lane_share(p, l, 0, 10), 1.0, 0);
    skv_policy_free(p);
}

/* The published prefill on hand-made window sums: n = 20, recent 1 + int(0.25 n) = 6
 * (positions 14..19), context 0..13, constant ratio 0.5, sink 0. Layer 0 keeps all; layer 1
 * the sink + the top 6 of layer 0's window attention (int(14 x 0.5) = 7); layer 2 the sink
 * + the top 2 of layer 1's scores among layer 1's context (int(7 x 0.5) = 3): positions 1
 * and 4 score highest in layer 1 but were dropped above, so they stay out. The column sums
 * (the whole prompt's attention) rank differently and must not matter. */
static void test_pyramidinfer_select(void **st) {
    (void)st;
    const int n = 20;
    skv_kvcache *c = cache(3, 1, n);
    skv_policy *p = mkpol("pyramidinfer:pi_retain=schedule:pi_recent=0.25:pi_schedule=constant:pi_decay=0.5:"
                          "pi_min_ctx=2:sinks=1:window=4", 3, 2, 1);
    assert_non_null(p);
    float obs[3][2 * 20] = {{0}}, colsum[2 * 20];
    for (int k = 0; k < 2 * n; k++) colsum[k] = (k % 20 == 1 || k % 20 == 4 || k % 20 == 6) ? 100 : 0;
    /* layer 0, heads summed: 2 -> 9, 3 -> 8, 5 -> 7, 8 -> 6, 11 -> 5, 13 -> 4; others below 1 */
    const int top0[6] = {2, 3, 5, 8, 11, 13};
    for (int i = 0; i < 6; i++) { obs[0][top0[i]] = 4.5f - 0.5f * i; obs[0][20 + top0[i]] = 4.5f - 0.5f * i; }
    for (int k = 0; k < n; k++) obs[0][k] += 0.01f * k;
    /* layer 1: 1 -> 50, 4 -> 40 (dropped by layer 1), then 11 -> 9, 3 -> 8, others small */
    obs[1][1] = 50; obs[1][4] = 40; obs[1][11] = 9; obs[1][20 + 3] = 8; obs[1][5] = 1;
    for (int k = 0; k < n; k++) obs[2][k] = 1;
    const int want1[13] = {0, 2, 3, 5, 8, 11, 13, 14, 15, 16, 17, 18, 19};
    const int want2[9] = {0, 3, 11, 14, 15, 16, 17, 18, 19};
    bufs b;
    for (int l = 0; l < 3; l++) {
        skv_prefill_info pi = {.layer = l, .H = 2, .Hkv = 1, .n0 = 0, .n = n, .stride = 20, .colsum = colsum,
                               .obs = obs[l], .obs_rows = 4, .cache = c, .budget = 2};
        assert_int_equal(p->on_prefill(p, &pi), 0);
        skv_select_io io = io_for(c, &b, l, 0, n, 0, 2);   /* the budget is ignored as published */
        assert_int_equal(p->select(p, &io), 0);
        if (l == 0) assert_int_equal(io.n_kv, n);
        if (l == 1) expect(io.kv_pos, io.n_kv, want1, 13);
        if (l == 2) expect(io.kv_pos, io.n_kv, want2, 9);
    }
    skv_policy_free(p);
    skv_kvcache_free(c);
}

/* Published decoding (one layer, g(0) = 1): a prompt of 10, recent 1 + int(0.1 n) = 2,
 * exceed 4, gen_compress 0.5. At n = 16 the hot length 16 - 2 - 10 >= 4: the block 10..13
 * before the recent window keeps int(4 x 0.5) = 2 by the last window rows (window 4: the
 * current row and the 3 before it); rows that left the window (100 on 10, 100 on 12) no
 * longer count, so 11 and 13 stay. At n = 17 nothing more (15 - 2 - 12 < 4). */
static void test_pyramidinfer_decode(void **st) {
    (void)st;
    const int n = 10;
    skv_kvcache *c = cache(1, 1, 20);
    skv_policy *p = mkpol("pyramidinfer:pi_retain=schedule:pi_recent=0.1:pi_exceed=4:pi_gen_compress=0.5:"
                          "sinks=1:window=4", 1, 1, 1);
    float obs[10] = {0};
    skv_prefill_info pi = {.layer = 0, .H = 1, .Hkv = 1, .n0 = 0, .n = n, .stride = 10, .obs = obs, .obs_rows = 4,
                           .cache = c, .budget = 1};
    assert_int_equal(p->on_prefill(p, &pi), 0);
    bufs b;
    skv_select_io io = io_for(c, &b, 0, 0, n, 0, 1);
    assert_int_equal(p->select(p, &io), 0);
    assert_int_equal(io.n_kv, n);
    int need[1] = {20};
    assert_int_equal(skv_kvcache_hot_reserve(c, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0), n);
    for (int k = n; k < 17; k++) {
        io = io_for(c, &b, 0, 0, k + 1, k, 1);
        assert_int_equal(p->select(p, &io), 0);
        assert_int_equal(skv_kvcache_apply(c, 0, 0, io.kv_pos, io.n_kv, NULL, 0) >= 0, 1);
        if (k < 15) assert_int_equal(io.n_kv, k + 1);
        if (k == 15) {
            const int want[14] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 15};
            expect(io.kv_pos, io.n_kv, want, 14);
        }
        if (k == 16) assert_int_equal(io.n_kv, 15);
        /* this step's row over the hot slots */
        float prob[NMAX] = {0};
        for (int i = 0; i < io.n_kv; i++) {
            const int q = io.kv_pos[i];
            if (k == 10 && q == 10) prob[i] = 100;
            if (k == 11 && q == 12) prob[i] = 100;
            if (k >= 12) prob[i] = q == 11 ? 1 : q == 13 ? 2 : (q == 10 || q == 12) ? 0.5f : 0;
        }
        p->on_step(p, 0, 0, io.kv_pos, prob, NULL, io.n_kv);
        assert_int_equal(p->after_step(p, k + 1), 0);
    }
    skv_policy_free(p);
    skv_kvcache_free(c);
}

/* Held to the budget: over a prefill and 30 decode steps with pseudo-random attention rows,
 * every lane stays within its budget, a layer's KV heads keep the same positions, the newest
 * token stays, and at the prefill a deeper layer keeps a subset of the layer above. */
static void test_pyramidinfer_budget_held(void **st) {
    (void)st;
    const int L = 4, H = 4, Hkv = 2, n0 = 30, steps = 30;
    skv_kvcache *c = cache(L, Hkv, n0 + steps);
    skv_policy *p = mkpol("pyramidinfer:window=4:sinks=2", L, H, Hkv);
    const double frac = 0.25;
    unsigned seed = 7;
    float obs[4 * 30];
    bufs b[2];
    int prev[NMAX], nprev = 0;
    for (int k = n0 - 1; k < n0 + steps; k++) {
        const bool pre = k == n0 - 1;
        const int n = pre ? n0 : k + 1, from = pre ? 0 : k;
        const double B = frac * n;
        for (int l = 0; l < L; l++) {
            if (pre) {
                for (int i = 0; i < H * n0; i++) { seed = seed * 1103515245u + 12345u; obs[i] = (float)(seed >> 16 & 1023) / 1024.0f; }
                skv_prefill_info pi = {.layer = l, .H = H, .Hkv = Hkv, .n0 = 0, .n = n0, .stride = n0, .obs = obs,
                                       .obs_rows = 4, .cache = c, .budget = B};
                assert_int_equal(p->on_prefill(p, &pi), 0);
            }
            int need[2];
            skv_select_io io[2];
            for (int j = 0; j < Hkv; j++) {
                const double lb = B * p->lane_share(p, l, j, B);
                io[j] = io_for(c, &b[j], l, j, n, from, lb);
                assert_int_equal(p->select(p, &io[j]), 0);
                assert_true(io[j].n_kv <= (int)floor(lb + 1e-9));
                assert_int_equal(io[j].n_v, 0);
                assert_int_equal(io[j].kv_pos[io[j].n_kv - 1], n - 1);   /* the newest token stays */
                need[j] = n0 + steps;
            }
            expect(io[1].kv_pos, io[1].n_kv, io[0].kv_pos, io[0].n_kv);
            if (pre && l > 0)   /* nested: a deeper layer keeps a subset (the recent window is alike) */
                for (int i = 0; i < io[0].n_kv; i++) {
                    bool found = false;
                    for (int q = 0; q < nprev; q++) found |= prev[q] == io[0].kv_pos[i];
                    assert_true(found);
                }
            if (pre) { memcpy(prev, io[0].kv_pos, sizeof(int) * io[0].n_kv); nprev = io[0].n_kv; }
            assert_int_equal(skv_kvcache_hot_reserve(c, l, need, NULL), 0);
            for (int j = 0; j < Hkv; j++) {
                assert_true(skv_kvcache_apply(c, l, j, io[j].kv_pos, io[j].n_kv, NULL, 0) >= 0);
                float prob[NMAX];
                for (int i = 0; i < io[j].n_kv; i++) { seed = seed * 1103515245u + 12345u; prob[i] = (float)(seed >> 16 & 1023) / 1024.0f; }
                if (!pre) p->on_step(p, l, j, io[j].kv_pos, prob, NULL, io[j].n_kv);
            }
        }
        if (!pre) assert_int_equal(p->after_step(p, n), 0);
    }
    skv_policy_free(p);
    skv_kvcache_free(c);
}

static void test_option_tables(void **st) {
    (void)st;
    const char *help = skv_policy_help();
    assert_true(skv_policy_count() >= 8);
    for (int i = 0; i < skv_policy_count(); i++) {
        const skv_policy_desc *d = skv_policy_at(i);
        assert_ptr_equal(skv_policy_find(d->name), d);
        assert_non_null(strstr(skv_policy_names(), d->name));
        assert_true(d->opts_size <= SKV_POLICY_OPTS_MAX);
        assert_non_null(d->summary);
        assert_non_null(d->init);
        for (int j = 0; j < d->n_opts; j++) {
            const skv_opt_desc *o = &d->opts[j];
            assert_non_null(o->help);
            assert_true(o->off + sizeof(int) <= d->opts_size || (o->type == SKV_OPT_BOOL && o->off < d->opts_size));
            if (o->type == SKV_OPT_INT || o->type == SKV_OPT_FLOAT) assert_true(o->def >= o->lo && o->def <= o->hi);
            if (o->type == SKV_OPT_ENUM) assert_non_null(o->values);
            if (!(o->flags & SKV_OPT_HIDDEN)) {
                char key[64];
                snprintf(key, sizeof key, " %s", o->name);
                if (!strstr(help, key)) fail_msg("help lacks %s of %s", o->name, d->name);
            }
            const skv_opt_desc *any = skv_policy_any_option(o->name);
            assert_non_null(any);
            assert_int_equal(any->type, o->type);
            assert_true(any->def == o->def && any->lo == o->lo && any->hi == o->hi);
        }
        /* the default spec, and each option set away from its default, round-trip via the label */
        skv_policy_spec a, b;
        char label[256];
        assert_int_equal(skv_policy_spec_default(d->name, &a), 0);
        for (int j = -1; j < d->n_opts; j++) {
            if (j >= 0) {
                const skv_opt_desc *o = &d->opts[j];
                char v[32];
                if (o->type == SKV_OPT_ENUM) snprintf(v, sizeof v, "%s", o->values[o->def == 0 ? 1 : 0]);
                else if (o->type == SKV_OPT_BOOL) snprintf(v, sizeof v, "%s", o->def ? "false" : "true");
                else {
                    const double up = o->def + (o->type == SKV_OPT_INT ? 1 : 0.25 * (o->hi - o->lo > 4 ? 4 : o->hi - o->lo));
                    snprintf(v, sizeof v, "%g", up <= o->hi ? up : o->lo);
                }
                assert_int_equal(skv_policy_spec_default(d->name, &a), 0);
                assert_int_equal(skv_policy_spec_set(&a, o->name, v), 0);
                assert_true(skv_opt_get(&a, o) != o->def);
            }
            skv_policy_spec_label(&a, label, sizeof label);
            /* an option whose label reference is not its default (SmallKV's score: labels of
             * records made before "now" became the default omit "acc") names the value in the
             * label only away from that reference, so that label reads back as the default */
            if (j >= 0 && d->opts[j].label_ref != d->opts[j].def && skv_opt_get(&a, &d->opts[j]) == d->opts[j].label_ref)
                continue;
            if (skv_policy_spec_parse(label, &b)) fail_msg("%s: label '%s' does not parse: %s", d->name, label, skv_last_error());
            assert_memory_equal(a.opts, b.opts, d->opts_size);
        }
    }
}

/* What users read (docs/policies.md, `smallkv policies --markdown`): every registered policy
 * says what it keeps and when to choose it, and the page has its section and every option
 * that --help shows. */
static void test_descriptions(void **st) {
    (void)st;
    const char *page = skv_policy_markdown();
    if (!page) fail_msg("no policies page: %s", skv_last_error());
    for (int i = 0; i < skv_policy_count(); i++) {
        const skv_policy_desc *d = skv_policy_at(i);
        if (!d->keeps || !d->keeps[0]) fail_msg("policy %s: empty keeps", d->name);
        if (!d->choose || !d->choose[0]) fail_msg("policy %s: empty choose", d->name);
        assert_non_null(d->summary);
        assert_true(d->summary[0] != 0);
        char key[128];
        snprintf(key, sizeof key, "\n## %s\n\n", d->name);
        const char *sec = strstr(page, key);
        if (!sec) fail_msg("page lacks the section of %s", d->name);
        if (!strstr(sec, d->summary + 1) || !strstr(sec, d->keeps) || !strstr(sec, d->choose))
            fail_msg("section of %s lacks its summary, keeps or choose", d->name);
        snprintf(key, sizeof key, "| [%s](#%s) |", d->name, d->name);
        if (!strstr(page, key)) fail_msg("page's overview lacks %s", d->name);
        for (int j = 0; j < d->n_opts; j++) {
            const skv_opt_desc *o = &d->opts[j];
            snprintf(key, sizeof key, "| `%s`", o->name);
            const bool listed = strstr(page, key) != NULL;
            if (!(o->flags & SKV_OPT_HIDDEN) && !listed) fail_msg("page lacks option %s of %s", o->name, d->name);
            /* a hidden option stays off the page (unless another policy shows one of its name) */
            bool shown_elsewhere = false;
            for (int a = 0; a < skv_policy_count(); a++)
                for (int b = 0; b < skv_policy_at(a)->n_opts; b++) {
                    const skv_opt_desc *x = &skv_policy_at(a)->opts[b];
                    shown_elsewhere |= !(x->flags & SKV_OPT_HIDDEN) && !strcmp(x->name, o->name);
                }
            if ((o->flags & SKV_OPT_HIDDEN) && !shown_elsewhere && listed) fail_msg("page shows hidden option %s", o->name);
        }
    }
    assert_ptr_equal(skv_policy_markdown(), page);   /* built once */
}

static void test_specs(void **st) {
    (void)st;
    skv_policy_spec s;
    assert_int_equal(skv_policy_spec_parse("h2o:heavy=0.3,sinks=8:reduce=max", &s), 0);
    char label[128];
    skv_policy_spec_label(&s, label, sizeof label);
    assert_string_equal(label, "h2o:heavy=0.3:reduce=max:sinks=8");
    /* names: canonical, short, with '-' for '_', bare enum values and flags */
    assert_int_equal(skv_policy_spec_parse("smallkv:no-saliency:depth=3:adaptive:mass", &s), 0);
    const skv_smallkv_opts *o = (const void *)s.opts;
    assert_true(o->no_saliency && o->slm_depth == 3 && o->split == 1 && o->combine == SKV_COMBINE_MASS);
    assert_int_equal(skv_policy_spec_parse("smallkv:nosal=false", &s), 0);
    assert_false(((const skv_smallkv_opts *)s.opts)->no_saliency);
    /* errors say what is allowed */
    assert_int_equal(skv_policy_spec_parse("h2o:bogus=1", &s), -1);
    assert_non_null(strstr(skv_last_error(), "heavy, reduce, sinks"));
    assert_int_equal(skv_policy_spec_parse("h2o:heavy=2", &s), -1);
    assert_non_null(strstr(skv_last_error(), "[0, 1]"));
    assert_int_equal(skv_policy_spec_parse("h2o:heavy", &s), -1);
    assert_int_equal(skv_policy_spec_parse("h2o:combine=nosuch", &s), -1);
    assert_non_null(strstr(skv_last_error(), "unknown combine 'nosuch' (sum, mass, renorm)"));
    assert_int_equal(skv_policy_spec_parse("h2o:combine=mass", &s), -1);
    assert_non_null(strstr(skv_last_error(), "policy h2o has no option 'combine'"));
    assert_int_equal(skv_policy_spec_parse("full:sinks=3", &s), -1);
    assert_int_equal(skv_policy_spec_parse("", &s), -1);
    assert_int_equal(skv_policy_option_check("window", "0"), -1);
    assert_int_equal(skv_policy_option_check("window", "8"), 0);
    /* which policies need the SLM's head mapping */
    assert_int_equal(skv_policy_spec_parse("smallkv", &s), 0);
    assert_true(skv_policy_spec_needs_map(&s));
    assert_int_equal(skv_policy_spec_parse("smallkv:online", &s), 0);
    assert_false(skv_policy_spec_needs_map(&s));
    assert_int_equal(skv_policy_spec_parse("h2o", &s), 0);
    assert_false(skv_policy_spec_needs_map(&s));
}

static void test_unknown(void **st) {
    (void)st;
    assert_null(skv_policy_new_str("nope", &no_models, 1, 2, 1));
    assert_non_null(strstr(skv_last_error(), "nope"));
}

/* Option flags passed by name on top of a spec (smallkv_options.policy_opts, what the CLI
 * does with --heavy etc.): applied in order, a later one winning; a flag the policy lacks is
 * an error, or skipped and reported when lenient; values checked; the budget checked. */
static void test_options_by_name(void **st) {
    (void)st;
    smallkv_options o;
    smallkv_options_default(&o);
    const smallkv_policy_opt kv[] = {{"heavy", "0.3"}, {"window", "8"}, {"reduce", "max"}, {"heavy", "0.4"}};
    o.policy = "h2o:sinks=2";
    o.policy_opts = kv;
    o.n_policy_opts = 4;
    o.budget = 0.5;
    unsigned needs = 99;
    unsigned long long skipped = 99;
    const char *label = NULL;
    assert_int_equal(smallkv_options_check(&o, &needs, &skipped, &label), -1);   /* strict: h2o has no window */
    assert_non_null(strstr(skv_last_error(), "policy h2o has no option 'window'"));
    o.policy_opts_lenient = 1;
    assert_int_equal(smallkv_options_check(&o, &needs, &skipped, &label), 0);
    assert_int_equal(skipped, 2ull);   /* entry 1 */
    assert_false(needs & (SMALLKV_NEEDS_SLM | SMALLKV_NO_BUDGET));
    /* the same policy as the spec string the CLI used to write */
    skv_policy_spec ref;
    assert_int_equal(skv_policy_spec_parse("h2o:sinks=2:heavy=0.4:reduce=max", &ref), 0);
    char want[256];
    skv_policy_spec_label(&ref, want, sizeof want);
    assert_string_equal(label, want);
    /* a bad value, an option no policy has, an unknown policy, a bad budget */
    const smallkv_policy_opt bad[] = {{"heavy", "2"}};
    o.policy_opts = bad; o.n_policy_opts = 1;
    assert_int_equal(smallkv_options_check(&o, NULL, NULL, NULL), -1);
    assert_non_null(strstr(skv_last_error(), "heavy=2 is not a number in [0, 1]"));
    const smallkv_policy_opt none[] = {{"bogus", "1"}};
    o.policy_opts = none;
    assert_int_equal(smallkv_options_check(&o, NULL, NULL, NULL), -1);
    assert_non_null(strstr(skv_last_error(), "no policy has an option 'bogus'"));
    o.n_policy_opts = 0;
    o.policy = "nosuch";
    assert_int_equal(smallkv_options_check(&o, NULL, NULL, NULL), -1);
    o.policy = "h2o";
    o.budget = 1.5;
    assert_int_equal(smallkv_options_check(&o, NULL, NULL, NULL), -1);
    assert_non_null(strstr(skv_last_error(), "budget 1.5 is not a fraction"));
    o.policy = "full";   /* takes no budget */
    assert_int_equal(smallkv_options_check(&o, &needs, NULL, NULL), 0);
    assert_true(needs & SMALLKV_NO_BUDGET);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_pool),
        cmocka_unit_test(test_full_streaming),
        cmocka_unit_test(test_sinks_after_eviction),
        cmocka_unit_test(test_h2o),
        cmocka_unit_test(test_snapkv_family),
        cmocka_unit_test(test_smallkv_split),
        cmocka_unit_test(test_smallkv_select),
        cmocka_unit_test(test_ems),
        cmocka_unit_test(test_ems_gen),
        cmocka_unit_test(test_quest),
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_snapkv_decode),
        cmocka_unit_test(test_pyramidinfer_budgets),
        cmocka_unit_test(test_pyramidinfer_select),
        cmocka_unit_test(test_pyramidinfer_decode),
        cmocka_unit_test(test_pyramidinfer_budget_held),
        cmocka_unit_test(test_option_tables),
        cmocka_unit_test(test_descriptions),
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_options_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
