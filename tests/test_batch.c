/* test_batch.c: batched decode (skv_forward_batch, skv_session_step_batch) against the
 * same sequences decoded one by one.
 *   - plain forward, tiny F32 model: batch 3 (below the F32 GEMM threshold of 4, so the
 *     same per-row decode dots) is bit-identical; batch 6 (float GEMM tiles) within
 *     1e-3 relative;
 *   - plain forward, SmolLM2 (Q4_1/Q8_0, GEMM from T = 12): batch 4 identical, greedy
 *     tokens equal over the steps;
 *   - sessions (full, h2o, snapkv, smallkv with SmolLM2 as its own SLM, smallkv with an
 *     H2O-compressed SLM session), sequences of different lengths at different positions:
 *     the batch gives the same greedy tokens and logits as stepping each session alone;
 *   - errors: a full cache or a bad token is reported with the entry, nothing runs.
 * Tolerance: below skv_matmul_gemm_min_t the batched rows take exactly the T = 1 path,
 * so logits agree to 1e-5 relative (we allow that much for reduction-order noise in
 * OpenMP-parallel attention); at or above it float tiles differ from Q8 dots by ~1e-3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"
#include "runtime/session/session.h"
#include "common/util.h"
#include "tests/support/tiny_model.h"
#include "tests/support/test_util.h"

static skv_model *tiny, *smol;

static int setup(void **st) { (void)st; return test_models_load(&tiny, &smol, SKV_ARCH_QWEN2, 7, "batch"); }
static int teardown(void **st) { (void)st; test_models_free(&tiny, &smol); return 0; }

/* max |a - b| / max(1, max |a|) */
static double reldiff(const float *a, const float *b, int n) {
    double m = 0, s = 1;
    for (int i = 0; i < n; i++) { m = fmax(m, fabs((double)a[i] - b[i])); s = fmax(s, fabs(a[i])); }
    return m / s;
}

/* n sequences with prompts of different lengths; then `steps` greedy steps batched (A)
 * and one by one (B). Returns the worst relative logit difference; tokens must agree
 * unless the one-by-one top-2 margin is tiny. */
static double plain_batch_vs_single(const skv_model *m, int n, int steps) {
    const int V = m->cfg.vocab;
    skv_state *A[16], *B[16];
    int tok[16], toks[64];
    double worst = 0;
    skv_batch *b = skv_batch_new(m, n);
    assert_non_null(b);
    for (int i = 0; i < n; i++) {
        A[i] = skv_state_new(m, 128, 32, true);
        B[i] = skv_state_new(m, 128, 32, true);
        assert_non_null(A[i]); assert_non_null(B[i]);
        int np = 5 + 3 * i;
        test_prompt(toks, np, V, 11 + i);
        skv_fwd_opts fo = {.logits = SKV_LOGITS_LAST};
        assert_int_equal(skv_forward(A[i], toks, np, &fo), 0);
        assert_int_equal(skv_forward(B[i], toks, np, &fo), 0);
        tok[i] = test_argmax(B[i]->logits, V);
    }
    skv_fwd_opts fo[16];
    for (int i = 0; i < n; i++) fo[i] = (skv_fwd_opts){.logits = SKV_LOGITS_LAST};
    for (int s = 0; s < steps; s++) {
        assert_int_equal(skv_forward_batch(b, A, tok, n, fo), 0);
        for (int i = 0; i < n; i++) {
            assert_int_equal(skv_forward(B[i], &tok[i], 1, &fo[i]), 0);
            assert_int_equal(A[i]->n_past, B[i]->n_past);
            worst = fmax(worst, reldiff(B[i]->logits, A[i]->logits, V));
            int ta = test_argmax(A[i]->logits, V), tb = test_argmax(B[i]->logits, V);
            if (ta != tb) assert_true(B[i]->logits[tb] - B[i]->logits[ta] < 1e-2f);
            tok[i] = tb;
        }
    }
    for (int i = 0; i < n; i++) { skv_state_free(A[i]); skv_state_free(B[i]); }
    skv_batch_free(b);
    return worst;
}

static void test_plain_tiny(void **st) {
    (void)st;
    double d3 = plain_batch_vs_single(tiny, 3, 6);
    double d6 = plain_batch_vs_single(tiny, 6, 6);
    print_message("tiny: batch 3 rel diff %.3g, batch 6 %.3g\n", d3, d6);
    assert_true(d3 <= 1e-5);
    assert_true(d6 <= 1e-3);
}

static void test_plain_smollm2(void **st) {
    (void)st;
    if (!smol) skip();
    double d = plain_batch_vs_single(smol, 4, 4);
    print_message("SmolLM2: batch 4 rel diff %.3g\n", d);
    assert_true(d <= 1e-5);
}

static skv_session *mk(const skv_model *m, const char *policy, double budget, const skv_model *slm, const int *map,
                       double slm_budget) {
    skv_session_opts o = test_self_pair_opts(m, policy, budget, map);
    o.max_ctx = 256;
    o.T_max = 32;
    o.slm = slm;
    if (slm_budget > 0) {
        char spec[64];
        snprintf(spec, sizeof spec, "%s:slm_budget=%g", policy, slm_budget);
        assert_int_equal(skv_policy_spec_parse(spec, &o.pol), 0);
    }
    skv_session *s = skv_session_new(m, &o);
    if (!s) print_message("session: %s\n", skv_last_error());
    assert_non_null(s);
    return s;
}

static void sessions_batch_vs_single(const skv_model *m, const char *policy, const skv_model *slm, double slm_budget,
                                     int n, int steps) {
    const int V = m->cfg.vocab;
    int *map = NULL;
    if (slm) {
        map = malloc(sizeof(int) * m->cfg.n_layer * m->cfg.n_head);
        for (int i = 0; i < m->cfg.n_layer * m->cfg.n_head; i++) map[i] = i % (slm->cfg.n_layer * slm->cfg.n_head);
    }
    skv_session *A[8], *B[8];
    int tok[8], toks[128];
    double worst = 0;
    for (int i = 0; i < n; i++) {
        A[i] = mk(m, policy, 0.3, slm, map, slm_budget);
        int np = 40 + 7 * i;
        test_prompt(toks, np, V, 3 + i);
        assert_int_equal(skv_session_prefill(A[i], toks, np), 0);
        B[i] = skv_session_fork(A[i]);
        assert_non_null(B[i]);
        tok[i] = test_argmax(skv_session_logits(B[i]), V);
    }
    for (int s = 0; s < steps; s++) {
        if (skv_session_step_batch(A, tok, n)) print_message("%s\n", skv_last_error());
        for (int i = 0; i < n; i++) {
            assert_int_equal(skv_session_step(B[i], tok[i]), 0);
            assert_int_equal(A[i]->n, B[i]->n);
            worst = fmax(worst, reldiff(skv_session_logits(B[i]), skv_session_logits(A[i]), V));
            int ta = test_argmax(skv_session_logits(A[i]), V), tb = test_argmax(skv_session_logits(B[i]), V);
            assert_int_equal(ta, tb);
            tok[i] = tb;
        }
    }
    print_message("%s (%s SLM%s): batch %d, %d steps, rel diff %.3g\n", policy, slm ? "with" : "no",
                  slm_budget > 0 ? ", H2O-compressed" : "", n, steps, worst);
    assert_true(worst <= 1e-5);
    for (int i = 0; i < n; i++) { skv_session_free(A[i]); skv_session_free(B[i]); }
    free(map);
}

static void test_sessions_tiny(void **st) {
    (void)st;
    sessions_batch_vs_single(tiny, "full", NULL, 0, 3, 8);
    sessions_batch_vs_single(tiny, "h2o", NULL, 0, 3, 8);
    sessions_batch_vs_single(tiny, "snapkv", NULL, 0, 3, 8);
    sessions_batch_vs_single(tiny, "smallkv", tiny, 0, 3, 8);
    sessions_batch_vs_single(tiny, "smallkv", tiny, 0.5, 3, 8);
}

static void test_sessions_smollm2(void **st) {
    (void)st;
    if (!smol) skip();
    sessions_batch_vs_single(smol, "h2o", NULL, 0, 3, 4);
    sessions_batch_vs_single(smol, "smallkv", smol, 0, 3, 4);
}

static void test_errors(void **st) {
    (void)st;
    skv_state *a = skv_state_new(tiny, 4, 4, true), *b = skv_state_new(tiny, 4, 4, true);
    skv_batch *bw = skv_batch_new(tiny, 2);
    skv_state *ss[2] = {a, b};
    int toks[4] = {1, 2, 3, 4};
    assert_int_equal(skv_forward(b, toks, 4, NULL), 0);          /* b is full */
    assert_int_equal(skv_forward_batch(bw, ss, toks, 2, NULL), -1);
    assert_non_null(strstr(skv_last_error(), "entry 1"));
    assert_int_equal(a->n_past, 0);                              /* nothing ran */
    skv_state_reset(b);
    int bad[2] = {1, tiny->cfg.vocab};
    assert_int_equal(skv_forward_batch(bw, ss, bad, 2, NULL), -1);
    assert_non_null(strstr(skv_last_error(), "out of range"));
    assert_int_equal(skv_forward_batch(bw, ss, toks, 3, NULL), -1);   /* larger than the workspace */
    assert_int_equal(skv_forward_batch(bw, ss, toks, 2, NULL), 0);
    assert_int_equal(a->n_past, 1);
    assert_int_equal(b->n_past, 1);
    skv_batch_free(bw);
    skv_state_free(a);
    skv_state_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_tiny),
        cmocka_unit_test(test_plain_smollm2),
        cmocka_unit_test(test_sessions_tiny),
        cmocka_unit_test(test_sessions_smollm2),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
