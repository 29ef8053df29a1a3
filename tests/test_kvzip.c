/* test_kvzip.c: KVzip (runtime/policies/kvzip.c, kvzip_pass.c) on the tiny random model:
 *   - the reconstruction scores equal a plain computation: a plain full-cache forward over
 *     the context, then over each chunk's reconstruction tokens one at a time, whose last
 *     attention rows, renormalised over the sinks + chunk + reconstruction keys, maxed over the
 *     group's heads and the queries, are each context pair's score (one chunk and several);
 *   - budgets: level=lane keeps floor(B) per lane, level=layer floor(B Hkv) per layer and
 *     level=global floor(B lanes) over all lanes, each the top scores of its scope (no evicted
 *     pair outscores a kept one), and the hot tier holds exactly them (evicted K/V freed, no
 *     cold copy); the sinks are always kept; a later prefill and decoding keep every new token;
 *   - the scoring pass's cost is counted (time, peak bytes) and its tokens never reach the
 *     session's cache; at the budget of the whole prompt no pass runs;
 *   - sessions derived from a prefill base equal those that prefill by themselves, and share
 *     one pass across budgets and levels (not across scoring options). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "runtime/engine/forward.h"
#include "runtime/policies/kvzip.h"
#include "runtime/session/session.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_model.h"

static skv_model *tiny;

static int setup(void **st) { (void)st; return (tiny = tiny_model_load(SKV_ARCH_QWEN2, 7, "kvzip")) ? 0 : -1; }
static int teardown(void **st) { (void)st; skv_model_free(tiny); return 0; }

static skv_session *mk(const char *policy, double budget) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    assert_int_equal(skv_policy_spec_parse(policy, &o.pol), 0);
    o.budget = budget;
    o.max_ctx = 256;
    o.T_max = 16;          /* reconstruction runs in blocks too */
    o.kv_f16 = false;
    skv_session *s = skv_session_new(tiny, &o);
    if (!s) print_message("session: %s\n", skv_last_error());
    assert_non_null(s);
    return s;
}

/* Plain scores (L*Hkv, n) of positions [sinks, n): chunk by chunk, the tiny model has no
 * tokenizer, so a chunk's reconstruction input is the previous chunk's last 8 tokens (not
 * for the first) followed by the chunk. */
static void plain_scores(const int *ids, int n, int sinks, int chunk, float *out) {
    const skv_config *c = &tiny->cfg;
    const int L = c->n_layer, H = c->n_head, Hkv = c->n_kv_head, g = H / Hkv, S = 256;
    memset(out, 0, (size_t)L * Hkv * n * sizeof(float));
    float *rows[64];
    for (int l = 0; l < L; l++) rows[l] = calloc((size_t)H * S, sizeof(float));
    for (int start = sinks; start < n; start += chunk) {
        const int end = start + chunk < n ? start + chunk : n;
        int rec[300], R = 0;
        if (start > sinks)
            for (int i = start - 8; i < start; i++) rec[R++] = ids[i];
        for (int i = start; i < end; i++) rec[R++] = ids[i];
        skv_state *st = skv_state_new(tiny, S, 64, false);
        skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE};
        assert_int_equal(skv_forward(st, ids, n, &fo), 0);
        fo.lastrow = rows;
        for (int r = 0; r < R; r++) {
            assert_int_equal(skv_forward(st, &rec[r], 1, &fo), 0);
            const int p = n + r;   /* this query's position: keys 0 .. p */
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    const float *a = rows[l] + (size_t)h * S;
                    double Z = 0;
                    for (int k = 0; k <= p; k++)
                        if (k < (sinks < start ? sinks : start) || (k >= start && k < end) || k >= n) Z += a[k];
                    float *o = out + ((size_t)l * Hkv + h / g) * n;
                    for (int k = start; k < end; k++) o[k] = fmaxf(o[k], (float)(a[k] / Z));
                }
        }
        skv_state_free(st);
    }
    for (int l = 0; l < L; l++) free(rows[l]);
}

static void check_scores(int n, int chunk) {
    const skv_config *c = &tiny->cfg;
    const int L = c->n_layer, Hkv = c->n_kv_head, sinks = 2;
    int ids[256];
    test_prompt(ids, n, c->vocab, 5 + (uint32_t)n);
    char spec[64];
    snprintf(spec, sizeof spec, "kvzip:level=lane:sinks=%d:chunk=%d", sinks, chunk);
    skv_session *s = mk(spec, 0.25);
    assert_int_equal(skv_session_prefill(s, ids, n), 0);
    const skv_kvzip_state *z = s->pol->st;
    float *ref = malloc((size_t)L * Hkv * n * sizeof(float));
    plain_scores(ids, n, sinks, chunk, ref);
    float worst = 0, top = 0;
    for (int ln = 0; ln < L * Hkv; ln++) {
        for (int k = 0; k < sinks; k++) assert_true(isinf(z->score.s[ln][k]));
        for (int k = sinks; k < n; k++) {
            worst = fmaxf(worst, fabsf(z->score.s[ln][k] - ref[(size_t)ln * n + k]));
            top = fmaxf(top, ref[(size_t)ln * n + k]);
        }
    }
    print_message("n %d chunk %d: max |score - plain| %.3g (scores up to %.3g), %ld reconstruction tokens\n", n,
                  chunk, worst, top, z->pass_tokens);
    assert_true(top > 0.01f);
    assert_true(worst < 2e-5f);
    free(ref);
    skv_session_free(s);
}

static void test_scores_one_chunk(void **st) { (void)st; check_scores(40, 2048); }
static void test_scores_chunked(void **st) { (void)st; check_scores(60, 16); }   /* 4 chunks, the last short */

/* kept positions of a lane from the hot tier, as a mark array */
static int kept(const skv_session *s, int l, int j, unsigned char *m, int n) {
    memset(m, 0, (size_t)n);
    const int ln = skv_lane(s->kv, l, j), *P = skv_kvcache_hot_pos_kv(s->kv, l, j);
    for (int i = 0; i < s->kv->n_kv[ln]; i++) m[P[i]] = 1;
    assert_int_equal(s->kv->n_v[ln], 0);
    return s->kv->n_kv[ln];
}

static void test_budgets(void **st) {
    (void)st;
    const skv_config *c = &tiny->cfg;
    const int L = c->n_layer, Hkv = c->n_kv_head, nl = L * Hkv, n = 100;
    const double frac = 0.15;
    const double B = frac * n;
    int ids[128];
    test_prompt(ids, n, c->vocab, 11);
    const char *specs[3] = {"kvzip:lane:sinks=4", "kvzip:layer:sinks=4", "kvzip:sinks=4"};
    int lane_counts[3][64];
    for (int v = 0; v < 3; v++) {
        skv_session *s = mk(specs[v], frac);
        assert_int_equal(skv_session_prefill(s, ids, n), 0);
        const skv_kvzip_state *z = s->pol->st;
        unsigned char m[128];
        int total = 0;
        for (int l = 0; l < L; l++) {
            int in_layer = 0;
            float min_kept = INFINITY, max_out = -INFINITY;
            for (int j = 0; j < Hkv; j++) {
                const int ln = l * Hkv + j, k = kept(s, l, j, m, n);
                lane_counts[v][ln] = k;
                in_layer += k;
                for (int p = 0; p < 4; p++) assert_true(m[p]);   /* sinks */
                for (int p = 0; p < n; p++)
                    if (m[p]) min_kept = fminf(min_kept, z->score.s[ln][p]);
                    else max_out = fmaxf(max_out, z->score.s[ln][p]);
                if (v == 0) {
                    assert_int_equal(k, (int)floor(B));
                    assert_true(min_kept >= max_out);   /* per lane */
                    min_kept = INFINITY; max_out = -INFINITY;
                }
            }
            if (v == 1) {
                assert_int_equal(in_layer, (int)floor(B * Hkv + 1e-9));
                assert_true(min_kept >= max_out);   /* per layer */
            }
            total += in_layer;
        }
        skv_session_mem r;
        skv_session_mem_report(s, &r);
        assert_true(fabs(r.hot_tokens - total) < 1e-9);   /* the hot tier holds exactly them */
        assert_true(fabs(r.budget_tokens - total) < 1e-6);
        assert_int_equal((int)r.cold_used, 0);            /* nothing kept aside: evicted is freed */
        if (v == 2) {
            assert_int_equal(total, (int)floor(B * nl + 1e-9));
            float min_kept = INFINITY, max_out = -INFINITY;   /* over every lane */
            for (int l = 0; l < L; l++)
                for (int j = 0; j < Hkv; j++) {
                    kept(s, l, j, m, n);
                    for (int p = 0; p < n; p++)
                        if (m[p]) min_kept = fminf(min_kept, z->score.s[l * Hkv + j][p]);
                        else max_out = fmaxf(max_out, z->score.s[l * Hkv + j][p]);
                }
            assert_true(min_kept >= max_out);
        }
        /* a later prefill (a question) and decoding keep every new token and evict nothing more */
        assert_int_equal(skv_session_prefill(s, ids + 50, 6), 0);
        for (int t = 0; t < 5; t++) assert_int_equal(skv_session_step(s, 3 + t), 0);
        skv_session_mem_report(s, &r);
        assert_true(fabs(r.hot_tokens - (total + 11 * nl)) < 1e-9);
        skv_session_free(s);
    }
    int differ = 0;
    for (int ln = 1; ln < nl; ln++) differ += lane_counts[2][ln] != lane_counts[2][0];
    print_message("global lane budgets:");
    for (int ln = 0; ln < nl; ln++) print_message(" %d", lane_counts[2][ln]);
    print_message(" (lane level: %d each)\n", lane_counts[0][0]);
    assert_true(differ > 0);   /* non-uniform on this model */
}

static void test_pass_cost(void **st) {
    (void)st;
    const skv_config *c = &tiny->cfg;
    const int n = 80;
    int ids[128];
    test_prompt(ids, n, c->vocab, 3);
    skv_session *s = mk("kvzip:chunk=32", 0.2), *f = mk("full", 1.0), *all = mk("kvzip", 1.0);
    assert_int_equal(skv_session_prefill(s, ids, n), 0);
    assert_int_equal(skv_session_prefill(f, ids, n), 0);
    assert_int_equal(skv_session_prefill(all, ids, n), 0);
    /* the pass leaves the sequence alone: n tokens, the prefill's own logits */
    assert_int_equal(s->n, n);
    assert_int_equal(s->kv->n_tok, n);
    assert_memory_equal(skv_session_logits(s), skv_session_logits(f), (size_t)c->vocab * sizeof(float));
    skv_session_mem r, ra;
    skv_session_mem_report(s, &r);
    skv_session_mem_report(all, &ra);
    /* chunks of 32 over positions 4..79: 32 + (8 + 32) + (8 + 12) reconstruction tokens */
    const skv_kvzip_state *z = s->pol->st;
    assert_int_equal(z->pass_tokens, 32 + 40 + 20);
    const size_t rec_kv = 2 * (size_t)c->n_layer * (8 + 32) * c->n_kv_head * c->head_dim * sizeof(float);
    print_message("scoring pass: %.4f s, peak %zu B (its reconstruction K/V alone %zu B)\n", r.pass_seconds,
                  r.pass_peak, rec_kv);
    assert_true(r.pass_seconds > 0);
    assert_true(r.pass_peak > rec_kv);
    assert_true(ra.pass_peak == 0 && ra.pass_seconds == 0);   /* budget covers the prompt: no pass */
    /* and through the public report of a session (smallkv_get_stats reads these fields) */
    skv_session_free(s); skv_session_free(f); skv_session_free(all);
}

/* Sessions derived from a prefill base (an evaluation's cells) are those that prefill by
 * themselves: the same scores, kept pairs and logits; the first derived kvzip session's
 * scores are kept with the base and reused by the next at another budget or level (no second
 * pass, the pass's cost reported again), but not by one with other scoring options. */
static void test_derived_share_scores(void **st) {
    (void)st;
    const skv_config *c = &tiny->cfg;
    const int nl = c->n_layer * c->n_kv_head, n = 90;
    int ids[128];
    test_prompt(ids, n, c->vocab, 17);
    skv_session_opts b;
    skv_session_opts_default(&b);
    b.prefill_base = true; b.max_ctx = 256; b.T_max = 16; b.kv_f16 = false;
    skv_session *base = skv_session_new(tiny, &b);
    assert_non_null(base);
    assert_int_equal(skv_session_prefill(base, ids, n), 0);
    assert_null(base->memo);
    const char *specs[3] = {"kvzip:chunk=32", "kvzip:lane:chunk=32", "kvzip:chunk=32:sinks=8"};
    const double budgets[3] = {0.15, 0.3, 0.3};
    const skv_prefill_memo *memo[3];
    double pass_s[3];
    for (int v = 0; v < 3; v++) {
        skv_session *own = mk(specs[v], budgets[v]);
        assert_int_equal(skv_session_prefill(own, ids, n), 0);
        skv_session_opts o = own->o;
        skv_session *d = skv_session_derive(base, &o);
        if (!d) print_message("derive: %s\n", skv_last_error());
        assert_non_null(d);
        memo[v] = base->memo;
        assert_non_null(memo[v]);
        const skv_kvzip_state *zo = own->pol->st, *zd = d->pol->st;
        for (int ln = 0; ln < nl; ln++) {
            assert_memory_equal(zo->score.s[ln], zd->score.s[ln], (size_t)n * sizeof(float));
            assert_int_equal(own->kv->n_kv[ln], d->kv->n_kv[ln]);
        }
        assert_int_equal(zo->pass_tokens, zd->pass_tokens);
        pass_s[v] = zd->pass_seconds;
        for (int t = 0; t < 4; t++) {
            assert_memory_equal(skv_session_logits(own), skv_session_logits(d), (size_t)c->vocab * sizeof(float));
            assert_int_equal(skv_session_step(own, 5 + t), 0);
            assert_int_equal(skv_session_step(d, 5 + t), 0);
        }
        skv_session_free(own);
        skv_session_free(d);
    }
    assert_ptr_equal(memo[1], memo[0]);   /* another budget and level: the first pass's scores */
    assert_true(pass_s[1] == pass_s[0]);  /*   and its cost */
    assert_ptr_not_equal(memo[2], memo[0]);   /* other sinks: a pass of its own, kept instead */
    skv_session_free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_one_chunk),
        cmocka_unit_test(test_scores_chunked),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_pass_cost),
        cmocka_unit_test(test_derived_share_scores),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
