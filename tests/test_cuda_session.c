/* test_cuda_session.c: the compressed-cache session decoding on the GPU
 * (runtime/backend/session_cuda.h) against the same session decoding on the CPU.
 *
 * GPU cases (skipped, never passed, without a GPU, without CUDA or without the model):
 *   SmolLM2 as its own SLM (identity map), budget 20%, h2o and smallkv: both sessions
 *   prefill the same 100-token prompt on the CPU; one then decodes 32 greedy steps on the
 *   CPU, the other on the GPU, fed the CPU's tokens. Each step:
 *     - the GPU's greedy token equals the CPU's; a divergence is accepted only where the
 *       CPU's own top-2 margin is below TIE_MARGIN, and the comparison stops there;
 *     - the device hot tier equals the host's byte for byte (skv_session_cuda_verify:
 *       the copy stream's uploads and scatter reproduced the slot log);
 *   and over the steps the logits differ by at most MAX_TOL (max abs) / MEAN_TOL (mean abs).
 *   Tolerances: NOT measured yet (written without a GPU). They are test_cuda.c's bounds for
 *   the full-cache forward (GPU fp32-activation GEMV vs the CPU's Q8-activation decode);
 *   the compressed cache adds the selection, which reads the GPU's probabilities (H2O's
 *   scores, SmallKV's SLM rows) and may pick a different token near a tie, so the hot sets
 *   of the two sessions are compared and their difference printed, not asserted.
 * CPU cases (run everywhere): the refusals (EMS, an empty session, a build without CUDA /
 * a machine without a GPU) name their reason. */
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
#include "include/smallkv.h"
#include "runtime/backend/forward_cuda.h"
#include "runtime/model/model.h"
#include "runtime/session/session.h"
#include "runtime/backend/session_cuda.h"
#include "common/util.h"
#include "tests/support/tiny_model.h"
#include "tests/support/test_env.h"
#include "tests/support/test_util.h"
#ifdef SKV_CUDA
#include "kernels/cuda/backend.h"
#endif

#define MAX_TOL 1.5f
#define MEAN_TOL 0.25f
#define TIE_MARGIN 0.25f
#define PROMPT 100
#define STEPS 32

static skv_model *smol;

static int setup(void **st) {
    (void)st;
    smol = test_load_smollm2();
    return 0;
}

static int teardown(void **st) {
    (void)st;
    skv_model_free(smol);
    return 0;
}

static void need_gpu(void) {
#ifdef SKV_CUDA
    if (!skv_cuda_available()) {
        print_message("skipped: %s\n", skv_last_error());
        skip();
    }
#else
    print_message("skipped: built without CUDA (make CUDA=1)\n");
    skip();
#endif
}

static skv_session *mk(const skv_model *m, const char *policy, double budget, const int *map) {
    skv_session_opts o = test_self_pair_opts(m, policy, budget, map);
    skv_session *s = skv_session_new(m, &o);
    if (!s) fail_msg("session %s: %s", policy, skv_last_error());
    return s;
}

static int argmax_margin(const float *x, int n, float *margin) {
    int b = 0, c = -1;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    for (int i = 0; i < n; i++) if (i != b && (c < 0 || x[i] > x[c])) c = i;
    *margin = c >= 0 ? x[b] - x[c] : INFINITY;
    return b;
}

/* positions hot (K+V) in one session and not in the other, over all lanes */
static long hot_set_difference(const skv_session *a, const skv_session *b) {
    const skv_kvcache *x = a->kv, *y = b->kv;
    long diff = 0;
    unsigned char *mark = calloc((size_t)a->n + 1, 1);
    for (int l = 0; l < x->L; l++)
        for (int j = 0; j < x->Hkv; j++) {
            const int ln = l * x->Hkv + j;
            const int *px = skv_kvcache_hot_pos_kv(x, l, j), *py = skv_kvcache_hot_pos_kv(y, l, j);
            memset(mark, 0, (size_t)a->n + 1);
            for (int s = 0; s < x->n_kv[ln]; s++) if (px[s] <= a->n) mark[px[s]] = 1;
            for (int s = 0; s < y->n_kv[ln]; s++) {
                if (py[s] <= a->n && mark[py[s]]) mark[py[s]] = 2;
                else diff++;
            }
            for (int p = 0; p <= a->n; p++) diff += mark[p] == 1;
        }
    free(mark);
    return diff;
}

static void gpu_vs_cpu(const char *policy) {
    need_gpu();
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    const int V = smol->cfg.vocab;
    int toks[PROMPT];
    test_prompt(toks, PROMPT, V, 99);
    int *map = test_identity_map(smol);
    skv_session *cpu = mk(smol, policy, 0.2, map), *gpu = mk(smol, policy, 0.2, map);
    assert_int_equal(skv_session_prefill(cpu, toks, PROMPT), 0);
    assert_int_equal(skv_session_prefill(gpu, toks, PROMPT), 0);
    skv_cuda_model *dm = skv_cuda_model_upload(smol, 0);
    if (!dm) fail_msg("upload: %s", skv_last_error());
    /* self pair: the SLM is the same model, one upload serves both */
    skv_session_cuda *g = skv_session_cuda_new(gpu, dm, dm);
    if (!g) fail_msg("attach: %s", skv_last_error());
    long bad = skv_session_cuda_verify(g);
    if (bad != 0) fail_msg("after attach: %ld hot slots differ on the device (%s)", bad, bad < 0 ? skv_last_error() : "");
    float dmax = 0;
    double dmean = 0;
    int steps = 0;
    for (int i = 0; i <= STEPS; i++) {
        float mc, mg;
        const float *lc = skv_session_logits(cpu), *lg = skv_session_logits(gpu);
        int tc = argmax_margin(lc, V, &mc), tg = argmax_margin(lg, V, &mg);
        if (i > 0) {   /* logits after a decode step (both prefills ran on the CPU) */
            float mx = 0;
            double sum = 0;
            for (int v = 0; v < V; v++) { float e = fabsf(lc[v] - lg[v]); mx = fmaxf(mx, e); sum += e; }
            dmax = fmaxf(dmax, mx);
            dmean += sum / V;
        }
        if (tc != tg) {
            print_message("%s step %d: CPU token %d, GPU token %d, CPU top-2 margin %.4f\n", policy, i, tc, tg, mc);
            if (!(mc < TIE_MARGIN)) fail_msg("%s: greedy tokens differ at step %d (CPU margin %.4f)", policy, i, mc);
            print_message("near tie: the comparison stops at step %d\n", i);
            break;
        }
        if (i == STEPS) break;
        assert_int_equal(skv_session_step(cpu, tc), 0);
        if (skv_session_cuda_step(g, tc)) fail_msg("%s step %d: %s", policy, i, skv_last_error());
        bad = skv_session_cuda_verify(g);
        if (bad != 0) fail_msg("%s step %d: %ld hot slots differ on the device", policy, i, bad);
        steps++;
    }
    const long hd = hot_set_difference(cpu, gpu);
    print_message("%s: %d steps, identical greedy tokens; logits max abs %.4f, mean %.4f (tol %.2f / %.2f); "
                  "hot sets differ in %ld positions over all lanes; restores CPU %d, GPU %d\n", policy, steps, dmax,
                  steps ? dmean / steps : 0.0, MAX_TOL, MEAN_TOL, hd, cpu->restores, gpu->restores);
    assert_true(dmax <= MAX_TOL);
    assert_true(steps == 0 || dmean / steps <= MEAN_TOL);
    assert_int_equal(gpu->n, PROMPT + steps);
    skv_session_cuda_free(g);
    skv_cuda_model_free(dm);
    skv_session_free(cpu);
    skv_session_free(gpu);
    free(map);
}

static void test_gpu_h2o(void **st) { (void)st; gpu_vs_cpu("h2o"); }
static void test_gpu_smallkv(void **st) { (void)st; gpu_vs_cpu("smallkv"); }

/* Refusals with their reason; no GPU needed (the model cases skip without the model). */
static void test_refusals(void **st) {
    (void)st;
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    int *map = test_identity_map(smol);
    skv_session *s = mk(smol, "h2o", 0.2, map);
    /* not prefilled */
    assert_int_equal(skv_session_cuda_check(s), -1);
    print_message("expected: %s\n", skv_last_error());
    assert_non_null(strstr(skv_last_error(), "prefill"));
    int toks[40];
    test_prompt(toks, 40, smol->cfg.vocab, 3);
    assert_int_equal(skv_session_prefill(s, toks, 40), 0);
    assert_int_equal(skv_session_cuda_check(s), 0);
    /* attaching: without CUDA or a GPU the reason is named */
    skv_session_cuda *g = skv_session_cuda_new(s, NULL, NULL);
    assert_null(g);
    print_message("expected: %s\n", skv_last_error());
    if (!skv_cuda_built()) assert_non_null(strstr(skv_last_error(), "built without CUDA (make CUDA=1)"));
    else assert_non_null(strstr(skv_last_error(), "no uploaded LLM"));
    skv_session_free(s);
    /* EMS merges slots: refused */
    s = mk(smol, "ems", 0.2, map);
    assert_int_equal(skv_session_prefill(s, toks, 40), 0);
    assert_int_equal(skv_session_cuda_check(s), -1);
    print_message("expected: %s\n", skv_last_error());
    assert_non_null(strstr(skv_last_error(), "ems"));
    skv_session_free(s);
    free(map);
}

/* The public API with device "cuda": one generate for both devices. Greedy tokens of full (the
 * whole sequence on the GPU) and smallkv (CPU prefill, GPU decode) agree with the CPU's up to
 * a near tie (TIE_MARGIN); without CUDA or a GPU, a session on it is refused with the reason. */
static void api_device(const char *policy, const char *slm, const char *profile) {
    smallkv_pair *p = smallkv_pair_load(smol->path, slm);
    assert_non_null(p);
    if (profile) assert_int_equal(smallkv_pair_load_profile(p, profile), 0);
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = policy;
    o.budget = strcmp(policy, "full") ? 0.2 : 1.0;
    o.max_ctx = 256;
    o.device = "cuda";
    smallkv_session *g = smallkv_session_new(p, &o);
    if (!g) {
        print_message("device cuda refused: %s\n", smallkv_last_error());
        assert_non_null(strstr(smallkv_last_error(), skv_cuda_built() ? "cuda" : "built without CUDA (make CUDA=1)"));
        smallkv_pair_free(p);
        skip();
    }
    o.device = "cpu";
    smallkv_session *c = smallkv_session_new(p, &o);
    assert_non_null(c);
    assert_string_equal(smallkv_session_device(g), "cuda");
    int ids[64];
    const int n = smallkv_tokenize(p, "The three primary colours are red, yellow and", SMALLKV_TOK_BOS, ids, 64);
    assert_true(n > 0);
    assert_int_equal(smallkv_prefill(c, ids, n), 0);
    assert_int_equal(smallkv_prefill(g, ids, n), 0);
    const int V = smallkv_vocab(p);
    for (int t = 0; t < 24; t++) {
        const float *lc = smallkv_logits(c), *lg = smallkv_logits(g);
        int a = test_argmax(lc, V), b = test_argmax(lg, V);
        if (a != b) {
            float second = -INFINITY;
            for (int i = 0; i < V; i++) if (i != a && lc[i] > second) second = lc[i];
            print_message("%s: step %d: GPU %d vs CPU %d, CPU margin %g\n", policy, t, b, a, lc[a] - second);
            assert_true(lc[a] - second < TIE_MARGIN);
            break;
        }
        assert_int_equal(smallkv_step(c, a), 0);
        assert_int_equal(smallkv_step(g, a), 0);
    }
    smallkv_session_free(g);
    smallkv_session_free(c);
    smallkv_pair_free(p);
}

static void test_api_device(void **st) {
    (void)st;
    if (!smol) { print_message("skipped: models/SmolLM2-135M-Instruct.Q4_1.gguf missing\n"); skip(); }
    api_device("full", NULL, NULL);
    api_device("smallkv", smol->path, "profiles/smollm2-135m-self.skvprof");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_h2o),
        cmocka_unit_test(test_gpu_smallkv),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_api_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
