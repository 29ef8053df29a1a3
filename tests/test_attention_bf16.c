/* test_attention_bf16.c: the opt-in bf16 prefill attention (kernels/cpu/attention_bf16.h).
 * - the AMX tile kernel against its plain reference (the same roundings, another summation
 *   order and a polynomial exp): max abs error 8e-3 (two roundings of
 *   a weight to bf16, relative to different running maxima, can differ by 2^-7);
 * - against the exact fp32 kernel on these random heads (logits up to ~30): max abs error 0.1
 *   (bf16 keeps 8 significand bits; the model case below bounds what that does to a model);
 * - where it takes rows: mode bf16, T >= SKV_ATTN_BF16_MIN_T, no colsum; with lastrow the last
 *   row and lastrow itself are the exact kernel's bits; in exact mode, or with colsum, or a
 *   short block, every output is the exact kernel's bits;
 * - results do not depend on the thread count;
 * - on a real model (SmolLM2-135M, the test model: d = 64), perplexity on 1024 wikitext-2 tokens
 *   (tests/golden/smollm2_wiki.txt) in one window moves by less than 0.5 % against exact
 *   prefill attention (measured: see the printed line; Qwen2.5-Coder-1.5B at 4096 tokens moves
 *   14.9009 -> 14.9018, docs/performance.md).
 * The kernel cases skip on a CPU without AMX-BF16 (the mode then falls back to exact, which
 * the last case checks everywhere). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <cmocka.h>
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cpu_caps.h"
#include "common/util.h"
#include "runtime/model/model.h"
#include "runtime/engine/forward.h"
#include "tests/support/test_env.h"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

typedef struct {
    skv_attn_args a;
    float *q, *out, *out2;
    uint16_t *k, *v;
    size_t nq;
} fixture;

/* keys with a few large entries so some rows have peaked attention, as real heads do */
static void setup(fixture *f, int T, int H, int Hkv, int d, int pos0) {
    memset(f, 0, sizeof *f);
    const int S_cap = pos0 + T + 3;
    f->a = (skv_attn_args){.T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = S_cap, .kv_f16 = true};
    const size_t n = (size_t)Hkv * S_cap * d;
    f->k = malloc(n * 2);
    f->v = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        const float big = i % 97 == 0 ? 6.0f : 1.0f;
        f->k[i] = skv_f32_to_f16(big * frand());
        f->v[i] = skv_f32_to_f16(frand());
    }
    f->nq = (size_t)T * H * d;
    f->q = malloc(f->nq * 4);
    f->out = malloc(f->nq * 4);
    f->out2 = malloc(f->nq * 4);
    for (size_t i = 0; i < f->nq; i++) f->q[i] = 2.0f * frand();
}

static void teardown_f(fixture *f) {
    free(f->q); free(f->out); free(f->out2); free(f->k); free(f->v);
}

static float maxdiff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void run(fixture *f, int mode, float *out) {
    skv_attention_set_prefill_mode(mode);
    skv_attention(out, f->q, f->k, f->v, &f->a);
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_EXACT);
}

static void need_amx_bf16(void) {
    if (!skv_cpu_amx_bf16()) {
        print_message("no AMX-BF16 on this CPU: bf16 kernel cases skipped\n");
        skip();
    }
}

static void check_shape(int T, int H, int Hkv, int d, int pos0) {
    fixture f;
    setup(&f, T, H, Hkv, d, pos0);
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_BF16);
    assert_int_equal(skv_attn_bf16_rows(&f.a), T);
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_EXACT);
    run(&f, SKV_PREFILL_ATTN_BF16, f.out);
    skv_attn_bf16_ref(f.out2, f.q, f.k, f.v, &f.a);
    const float e_ref = maxdiff(f.out, f.out2, f.nq);
    run(&f, SKV_PREFILL_ATTN_EXACT, f.out2);
    const float e_exact = maxdiff(f.out, f.out2, f.nq);
    print_message("T=%d H=%d Hkv=%d d=%d pos0=%d: |bf16 - ref| %.2e, |bf16 - exact| %.2e\n", T, H, Hkv, d, pos0,
                  e_ref, e_exact);
    assert_true(e_ref < 8e-3f);
    assert_true(e_exact < 0.1f);
    teardown_f(&f);
}

static void test_against_reference(void **st) {
    (void)st;
    need_amx_bf16();
    check_shape(128, 12, 2, 128, 0);    /* Qwen2.5 1.5B's heads, whole blocks of keys */
    check_shape(150, 12, 2, 128, 37);   /* ragged: rows and keys not multiples of 16 / 64 */
    check_shape(161, 9, 3, 64, 0);      /* SmolLM2's heads */
    check_shape(130, 4, 4, 256, 5);     /* d = 256, no grouping */
}

static void test_lastrow_exact(void **st) {
    (void)st;
    need_amx_bf16();
    fixture f;
    setup(&f, 140, 12, 2, 128, 11);
    const size_t ns = (size_t)f.a.H * f.a.S_cap;
    float *lr = calloc(ns, 4), *lr2 = calloc(ns, 4);
    f.a.lastrow = lr;
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_BF16);
    assert_int_equal(skv_attn_bf16_rows(&f.a), f.a.T - 1);
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_EXACT);
    run(&f, SKV_PREFILL_ATTN_BF16, f.out);
    f.a.lastrow = lr2;
    run(&f, SKV_PREFILL_ATTN_EXACT, f.out2);
    const size_t row = (size_t)f.a.H * f.a.d, last = (size_t)(f.a.T - 1) * row;
    assert_memory_equal(f.out + last, f.out2 + last, row * sizeof(float));
    assert_memory_equal(lr, lr2, ns * sizeof(float));
    assert_true(maxdiff(f.out, f.out2, last) < 0.1f);
    free(lr); free(lr2);
    teardown_f(&f);
}

static void test_threads(void **st) {
    (void)st;
    need_amx_bf16();
    fixture f;
    setup(&f, 130, 12, 2, 128, 3);
    const int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    run(&f, SKV_PREFILL_ATTN_BF16, f.out);
    omp_set_num_threads(nth > 1 ? nth : 2);
    run(&f, SKV_PREFILL_ATTN_BF16, f.out2);
    omp_set_num_threads(nth);
    assert_memory_equal(f.out, f.out2, f.nq * sizeof(float));
    teardown_f(&f);
}

/* where the mode takes no rows the exact kernel runs: the same bits on every CPU */
static void test_exact_where_not_taken(void **st) {
    (void)st;
    fixture f;
    setup(&f, SKV_ATTN_BF16_MIN_T - 1, 12, 2, 128, 20);   /* a short block: a verify pass */
    run(&f, SKV_PREFILL_ATTN_BF16, f.out);
    run(&f, SKV_PREFILL_ATTN_EXACT, f.out2);
    assert_memory_equal(f.out, f.out2, f.nq * sizeof(float));
    teardown_f(&f);

    setup(&f, 130, 12, 2, 128, 0);   /* colsum requested (H2O, calibration) */
    const size_t ns = (size_t)f.a.H * f.a.S_cap;
    float *cs = calloc(ns, 4), *cs2 = calloc(ns, 4);
    f.a.colsum = cs;
    run(&f, SKV_PREFILL_ATTN_BF16, f.out);
    f.a.colsum = cs2;
    run(&f, SKV_PREFILL_ATTN_EXACT, f.out2);
    assert_memory_equal(f.out, f.out2, f.nq * sizeof(float));
    assert_memory_equal(cs, cs2, ns * sizeof(float));
    free(cs); free(cs2);
    teardown_f(&f);

    assert_int_equal(skv_attention_prefill_mode_parse("bf16"), SKV_PREFILL_ATTN_BF16);
    assert_int_equal(skv_attention_prefill_mode_parse("exact"), SKV_PREFILL_ATTN_EXACT);
    assert_int_equal(skv_attention_prefill_mode_parse("fp8"), -1);
}

/* mean NLL of ids[1..n-1] after one prefill of all n tokens */
static double window_nll(skv_state *s, const int *ids, int n, int V) {
    skv_state_reset(s);
    skv_fwd_opts o = {.logits = SKV_LOGITS_ALL};
    assert_int_equal(skv_forward(s, ids, n, &o), 0);
    double nll = 0;
    for (int t = 0; t < n - 1; t++) {
        const float *row = s->logits + (size_t)t * V;
        float mx = row[0];
        for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp((double)row[i] - mx);
        nll += log(sum) - ((double)row[ids[t + 1]] - mx);
    }
    return nll / (n - 1);
}

static void test_model_perplexity(void **st) {
    (void)st;
#if defined(__SANITIZE_ADDRESS__)
    skip();   /* a 1024-token prefill twice is slow under the sanitizers; the kernel cases run */
    return;
#endif
    need_amx_bf16();
    char path[1024];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) { skip(); return; }
    FILE *f = fopen("tests/golden/smollm2_wiki.txt", "r");
    assert_non_null(f);
    static char line[65536];
    enum { N = 1024 };
    int ids[N], got = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "ids ", 4)) {
            char *p = line + 4, *e;
            for (got = 0; got < N; got++) {
                ids[got] = (int)strtol(p, &e, 10);
                if (e == p) break;
                p = e;
            }
        }
    fclose(f);
    assert_int_equal(got, N);
    skv_model *m = skv_model_load(path);
    assert_non_null(m);
    skv_state *s = skv_state_new(m, N, N, true);
    assert_non_null(s);
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_EXACT);
    const double exact = exp(window_nll(s, ids, N, m->cfg.vocab));
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_BF16);
    const double bf = exp(window_nll(s, ids, N, m->cfg.vocab));
    skv_attention_set_prefill_mode(SKV_PREFILL_ATTN_EXACT);
    print_message("SmolLM2-135M, 1024 wikitext-2 tokens in one window: ppl exact %.4f, bf16 %.4f (%+.3f %%)\n", exact, bf,
                  100 * (bf - exact) / exact);
    assert_true(fabs(bf - exact) < 0.005 * exact);
    skv_state_free(s);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_lastrow_exact),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_exact_where_not_taken),
        cmocka_unit_test(test_model_perplexity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
