/* test_kvquant.c: the quantised KV rows (kernels/cpu/kvquant.h), attention over them
 * (kernels/cpu/attention_q.c), a forward state with a quantised cache, and SmallKV with a
 * quantised SLM cache.
 *   - row bytes: 34 (q8) and 20 (q4) per group of 32, 0 for head sizes not a multiple of 32;
 *   - dequantisation bounds: |x - x'| <= s / 2 + 1e-6 |x| per group (q8 s = max|x| / 127 as
 *     stored in fp16; q4 s = (max - min) / 15), where x' is what the row stands for; the
 *     AVX2 dequantisation equals the scalar reference bit for bit;
 *   - attention over a quantised cache against the reference (dequantise, then
 *     skv_attention_ref): out 2e-5, colsum / lastrow 1e-5, as test_attention.c allows the
 *     fp32 fast path; the same bits for 1 and 2 threads; the team form writes the new row;
 *   - attention over q8 against the fp16 cache of the same values (uniform in [-1, 1), 500
 *     keys, d 64): out within 2e-3, the attention rows within 5e-4 (measured 4.6e-4 and
 *     5.9e-5; q8 rounds to 1/254 of a group's range);
 *   - a forward state with an 8-bit cache: the cache takes 17/32 of the fp16 bytes, its
 *     logits stay close to the fp16 state's (top-1 agrees on most steps) and a 4-bit head
 *     size refusal is a clear error;
 *   - mixed widths (8-bit keys, 4-bit values) against the reference;
 *   - SmallKV with slm_kv=q8 / q4 / k8v4 on the self pair: the SLM cache bytes reported are the
 *     rows as stored, and it decodes. */
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
#include "kernels/cpu/kvquant.h"
#include "runtime/engine/forward.h"
#include "runtime/session/session.h"
#include "common/util.h"
#include "tests/support/test_util.h"
#include <unistd.h>

#define SMOL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;   /* [-1, 1) */
}

static void test_row_bytes(void **st) {
    (void)st;
    assert_int_equal(skv_kvq_row_bytes(64, 8), 68);
    assert_int_equal(skv_kvq_row_bytes(128, 8), 136);
    assert_int_equal(skv_kvq_row_bytes(64, 4), 40);
    assert_int_equal(skv_kvq_row_bytes(256, 4), 160);
    assert_int_equal(skv_kvq_row_bytes(48, 8), 0);
    assert_int_equal(skv_kvq_row_bytes(64, 2), 0);
}

static void bounds(int bits) {
    const int d = 128;
    float x[128], y[128], z[128];
    uint8_t row[256];
    for (int rep = 0; rep < 200; rep++) {
        const float amp = rep % 3 == 0 ? 0.01f : rep % 3 == 1 ? 1.0f : 40.0f;
        for (int i = 0; i < d; i++) x[i] = frand() * amp + (rep % 5 == 0 ? 3.0f * amp : 0.0f);
        if (rep % 7 == 0) x[rep % d] = 25.0f * amp;   /* an outlier in one group */
        if (rep == 1) memset(x, 0, sizeof x);          /* all zero: no division by zero */
        skv_kvq_quantize_row(row, x, d, bits);
        skv_kvq_dequant_row(y, row, d, bits);
        skv_kvq_dequant_row_ref(z, row, d, bits);
        assert_memory_equal(y, z, sizeof y);
        for (int g = 0; g < d; g += 32) {
            float mn = x[g], mx = x[g], am = 0;
            for (int i = g; i < g + 32; i++) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); am = fmaxf(am, fabsf(x[i])); }
            /* the scale as stored is within fp16 rounding (2^-11 relative) of the ideal; the
             * q4 minimum too, which shifts values by up to |min| 2^-11 */
            const float s = bits == 8 ? am / 127.0f : (mx - mn) / 15.0f;
            const float tol = s * 0.5f * (1.0f + 2e-3f) + (bits == 4 ? fabsf(mn) * 1e-3f : 0.0f) + 1e-6f * am + 1e-30f;
            for (int i = g; i < g + 32; i++)
                if (!(fabsf(x[i] - y[i]) <= tol))
                    fail_msg("bits %d rep %d: x %g -> %g (tolerance %g)", bits, rep, x[i], y[i], tol);
        }
    }
}
static void test_bounds_q8(void **st) { (void)st; bounds(8); }
static void test_bounds_q4(void **st) { (void)st; bounds(4); }

typedef struct {
    skv_attn_args a;
    float *q, *kf, *vf;   /* fp32 source values (Hkv, S_cap, d) */
    void *kq, *vq;        /* quantised cache */
} fixture;

static int mixed_v;   /* nonzero: values at this width, keys at setup's */

static void setup(fixture *f, int T, int H, int Hkv, int d, int pos0, int bits) {
    memset(f, 0, sizeof *f);
    const int S_cap = pos0 + T + 3, vbits = mixed_v ? mixed_v : bits;
    f->a = (skv_attn_args){.T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = S_cap, .k_bits = bits, .v_bits = vbits};
    const size_t n = (size_t)Hkv * S_cap * d, rb = skv_kvq_row_bytes(d, bits), rbv = skv_kvq_row_bytes(d, vbits);
    f->kf = malloc(n * 4); f->vf = malloc(n * 4);
    f->kq = calloc((size_t)Hkv * S_cap, rb); f->vq = calloc((size_t)Hkv * S_cap, rbv);
    f->q = malloc((size_t)T * H * d * 4);
    for (size_t i = 0; i < n; i++) { f->kf[i] = frand() * 2.0f; f->vf[i] = frand(); }
    for (size_t i = 0; i < (size_t)T * H * d; i++) f->q[i] = frand();
    for (size_t r = 0; r < (size_t)Hkv * S_cap; r++) {
        skv_kvq_quantize_row((uint8_t *)f->kq + r * rb, f->kf + r * d, d, bits);
        skv_kvq_quantize_row((uint8_t *)f->vq + r * rbv, f->vf + r * d, d, vbits);
    }
}
static void teardown(fixture *f) { free(f->q); free(f->kf); free(f->vf); free(f->kq); free(f->vq); }

static float maxdiff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void against_ref(int T, int H, int Hkv, int d, int pos0, int bits) {
    fixture f;
    setup(&f, T, H, Hkv, d, pos0, bits);
    const size_t no = (size_t)T * H * d, ns = (size_t)H * f.a.S_cap;
    float *out = malloc(no * 4), *ref = malloc(no * 4), *out1 = malloc(no * 4);
    float *cs = calloc(ns, 4), *csr = calloc(ns, 4), *cs1 = calloc(ns, 4);
    float *lr = calloc(ns, 4), *lrr = calloc(ns, 4);
    skv_attn_args a = f.a;
    a.colsum = cs; a.lastrow = lr;
    skv_attention(out, f.q, f.kq, f.vq, &a);
    a.colsum = csr; a.lastrow = lrr;
    skv_attention_q_ref(ref, f.q, f.kq, f.vq, &a);
    assert_true(maxdiff(out, ref, no) < 2e-5f);
    assert_true(maxdiff(cs, csr, ns) < 1e-5f);
    assert_true(maxdiff(lr, lrr, ns) < 1e-5f);
    /* one thread: the same bits */
    const int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    a.colsum = cs1; a.lastrow = NULL;
    skv_attention(out1, f.q, f.kq, f.vq, &a);
    omp_set_num_threads(nth);
    assert_memory_equal(out, out1, no * 4);
    assert_memory_equal(cs, cs1, ns * 4);
    /* without score outputs (tasks per row): the same outputs */
    a.colsum = a.lastrow = NULL;
    skv_attention(out1, f.q, f.kq, f.vq, &a);
    assert_memory_equal(out, out1, no * 4);
    free(out); free(ref); free(out1); free(cs); free(csr); free(cs1); free(lr); free(lrr);
    teardown(&f);
}
static void test_attention_q8(void **st) {
    (void)st;
    against_ref(1, 14, 2, 64, 300, 8);
    against_ref(7, 6, 2, 128, 40, 8);
    against_ref(33, 9, 3, 64, 0, 8);
}
static void test_attention_q4(void **st) {
    (void)st;
    against_ref(1, 14, 2, 64, 300, 4);
    against_ref(5, 4, 4, 32, 17, 4);
}
static void test_attention_k8v4(void **st) {
    (void)st;
    mixed_v = 4;
    against_ref(1, 14, 2, 64, 300, 8);
    against_ref(6, 6, 3, 64, 50, 8);
    mixed_v = 0;
}

/* the team form with knew / vnew: writes row pos0 quantised, then attends as skv_attention */
static void test_team_new_row(void **st) {
    (void)st;
    fixture f;
    setup(&f, 1, 8, 2, 64, 90, 8);
    const size_t rb = skv_kvq_row_bytes(64, 8), no = 8 * 64;
    float kn[128], vn[128];
    for (int i = 0; i < 128; i++) { kn[i] = frand(); vn[i] = frand(); }
    uint8_t *kq2 = malloc((size_t)2 * f.a.S_cap * rb), *vq2 = malloc((size_t)2 * f.a.S_cap * rb);
    memcpy(kq2, f.kq, (size_t)2 * f.a.S_cap * rb);
    memcpy(vq2, f.vq, (size_t)2 * f.a.S_cap * rb);
    for (int h = 0; h < 2; h++) {   /* the expected cache: row 90 of each head replaced */
        skv_kvq_quantize_row((uint8_t *)f.kq + ((size_t)h * f.a.S_cap + 90) * rb, kn + h * 64, 64, 8);
        skv_kvq_quantize_row((uint8_t *)f.vq + ((size_t)h * f.a.S_cap + 90) * rb, vn + h * 64, 64, 8);
    }
    float out[512], out2[512];
    skv_attention(out, f.q, f.kq, f.vq, &f.a);
    skv_attn_args a = f.a;
    a.knew = kn; a.vnew = vn;
    const int nth = omp_get_max_threads();
    float *ws = skv_aligned_alloc(skv_attention_ws_floats(&a, nth) * 4, "ws");
    #pragma omp parallel num_threads(nth)
    skv_attention_team(out2, f.q, kq2, vq2, &a, ws);
    assert_memory_equal(out, out2, no * 4);
    assert_memory_equal(kq2, f.kq, (size_t)2 * f.a.S_cap * rb);
    assert_memory_equal(vq2, f.vq, (size_t)2 * f.a.S_cap * rb);
    free(ws); free(kq2); free(vq2);
    teardown(&f);
}

/* q8 against the fp16 cache of the same values: the documented tolerance */
static void test_q8_vs_f16(void **st) {
    (void)st;
    fixture f;
    setup(&f, 1, 14, 2, 64, 500, 8);
    const int S = f.a.S_cap;
    const size_t n = (size_t)2 * S * 64, no = 14 * 64, ns = (size_t)14 * S;
    uint16_t *kh = malloc(n * 2), *vh = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { kh[i] = skv_f32_to_f16(f.kf[i]); vh[i] = skv_f32_to_f16(f.vf[i]); }
    float out[896], outh[896];
    float *lr = calloc(ns, 4), *lrh = calloc(ns, 4);
    skv_attn_args a = f.a;
    a.lastrow = lr;
    skv_attention(out, f.q, f.kq, f.vq, &a);
    a.k_bits = a.v_bits = 0; a.kv_f16 = true; a.lastrow = lrh;
    skv_attention(outh, f.q, kh, vh, &a);
    assert_true(maxdiff(out, outh, no) < 2e-3f);   /* measured 4.6e-4 */
    assert_true(maxdiff(lr, lrh, ns) < 5e-4f);     /* measured 5.9e-5 */
    free(kh); free(vh); free(lr); free(lrh);
    teardown(&f);
}

/* a forward state with a quantised cache on the test model */
static void test_forward_state(void **st) {
    (void)st;
    if (access(SMOL, R_OK)) skip();
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    const int S = 160, d = m->cfg.head_dim;
    skv_state *h = skv_state_new(m, S, 64, true), *q = skv_state_new_quant(m, S, 64, 8, 8);
    assert_non_null(h); assert_non_null(q);
    assert_int_equal(q->k_row_bytes, skv_kvq_row_bytes(d, 8));
    assert_int_equal(q->v_row_bytes, skv_kvq_row_bytes(d, 8));
    assert_true(q->kv_arena_bytes < h->kv_arena_bytes * 0.6);
    assert_null(skv_state_new_quant(m, S, 64, 8, 3));
    assert_non_null(strstr(skv_last_error(), "8 or 4 each"));
    int toks[100];
    test_prompt(toks, 100, m->cfg.vocab, 3);
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    assert_int_equal(skv_forward(h, toks, 60, &o), 0);
    assert_int_equal(skv_forward(q, toks, 60, &o), 0);
    int agree = 0;
    const int V = m->cfg.vocab;
    for (int t = 60; t < 100; t++) {
        int ah = 0, aq = 0;
        for (int i = 1; i < V; i++) {
            if (h->logits[i] > h->logits[ah]) ah = i;
            if (q->logits[i] > q->logits[aq]) aq = i;
        }
        agree += ah == aq;
        assert_int_equal(skv_forward(h, &toks[t], 1, &o), 0);
        assert_int_equal(skv_forward(q, &toks[t], 1, &o), 0);
    }
    assert_true(agree >= 32);   /* of 40 */
    skv_state_free(h); skv_state_free(q);
    skv_model_free(m);
}

/* SmallKV with a quantised SLM cache: bytes as stored, and it decodes */
static void smallkv_quant(const char *spec, int kb, int vb) {
    if (access(SMOL, R_OK)) skip();
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    int *map = test_identity_map(m);
    skv_session_opts o = test_self_pair_opts(m, spec, 0.3, map);
    skv_session *s = skv_session_new(m, &o);
    if (!s) fail_msg("%s", skv_last_error());
    int toks[140];
    test_prompt(toks, 140, m->cfg.vocab, 5);
    assert_int_equal(skv_session_prefill(s, toks, 120), 0);
    for (int t = 120; t < 140; t++) assert_int_equal(skv_session_step(s, toks[t]), 0);
    skv_session_mem r;
    skv_session_mem_report(s, &r);
    const skv_config *c = &m->cfg;
    const size_t want = (size_t)s->slm->run_layers * c->n_kv_head * 140 *
                        (skv_kvq_row_bytes(c->head_dim, kb) + skv_kvq_row_bytes(c->head_dim, vb));
    assert_int_equal(r.slm_cache, want);
    skv_session_free(s);
    free(map);
    skv_model_free(m);
}
static void test_smallkv_q8(void **st) { (void)st; smallkv_quant("smallkv:slmkv=q8", 8, 8); }
static void test_smallkv_q4(void **st) { (void)st; smallkv_quant("smallkv:slmkv=q4", 4, 4); }
static void test_smallkv_k8v4(void **st) { (void)st; smallkv_quant("smallkv:slmkv=k8v4", 8, 4); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_bounds_q8),
        cmocka_unit_test(test_bounds_q4),
        cmocka_unit_test(test_attention_q8),
        cmocka_unit_test(test_attention_q4),
        cmocka_unit_test(test_attention_k8v4),
        cmocka_unit_test(test_team_new_row),
        cmocka_unit_test(test_q8_vs_f16),
        cmocka_unit_test(test_forward_state),
        cmocka_unit_test(test_smallkv_q8),
        cmocka_unit_test(test_smallkv_q4),
        cmocka_unit_test(test_smallkv_k8v4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
