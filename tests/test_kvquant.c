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
 *     rows as stored (and the key normalisation), and it decodes;
 *   - key normalisation: the fit against a hand computation (mean, population standard
 *     deviation, the floor, plain rows below 16 rows or without spread); attention over
 *     normalised rows against the reference (which adds mu + sigma * row back); on keys with
 *     per-channel offsets and spreads, 4-bit normalised rows give attention rows at least 3x
 *     closer to the exact ones than plain 4-bit rows; a forward state fits on its first block
 *     (not token by token), a reset forgets it, skv_state_copy_cache carries it (the copy's
 *     next step equals the original's bit for bit) and refuses mismatched states; the label
 *     names knorm with a quantised cache only. */
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

/* the fit: mean and population standard deviation per channel, by hand on 17 rows */
static void test_key_norm_fit(void **st) {
    (void)st;
    enum { N = 17, D = 32 };
    float rows[N * D], mu[D], sig[D];
    for (int r = 0; r < N; r++)
        for (int i = 0; i < D; i++) rows[r * D + i] = i == 3 ? 50.0f + (r % 2 ? 1.0f : -1.0f) : i == 9 ? 7.0f : (float)(r - 8) * (float)(i + 1);
    skv_kvq_key_norm_fit(mu, sig, rows, N, D, D);
    /* channel 3: 9 rows at 49 and 8 at 51 -> mean 49 + 16/17, variance 1 - (1/17)^2 */
    assert_float_equal(mu[3], 49.0f + 16.0f / 17.0f, 1e-4);
    assert_float_equal(sig[3], sqrtf(1.0f - 1.0f / 289.0f), 1e-5);
    /* channel i (not 3, 9): (r - 8)(i + 1), mean 0, variance (i + 1)^2 * 24 */
    assert_float_equal(mu[0], 0.0f, 1e-5);
    assert_float_equal(sig[0], sqrtf(24.0f), 1e-4);
    assert_float_equal(sig[31], 32.0f * sqrtf(24.0f), 2e-3);
    /* channel 9 never varies: its sigma is the floor, 1e-3 of the channels' mean sigma */
    double mean = 0;
    for (int i = 0; i < D; i++) if (i != 9) mean += sig[i];
    mean /= D - 1;   /* the floor is 1e-3 of the mean over all D, with channel 9 at 0 */
    assert_float_equal(mu[9], 7.0f, 1e-5);
    assert_float_equal(sig[9], (float)(1e-3 * mean * (D - 1) / D), 1e-6);
    /* a stride: the same rows spread out */
    float wide[N * 2 * D], mu2[D], sig2[D];
    for (int r = 0; r < N; r++) memcpy(wide + (size_t)r * 2 * D, rows + r * D, sizeof(float) * D);
    skv_kvq_key_norm_fit(mu2, sig2, wide, N, 2 * D, D);
    assert_memory_equal(mu, mu2, sizeof mu);
    assert_memory_equal(sig, sig2, sizeof sig);
    /* too few rows, or no spread at all: plain rows (mu 0, sigma 1) */
    skv_kvq_key_norm_fit(mu, sig, rows, SKV_KVQ_NORM_MIN_ROWS - 1, D, D);
    for (int i = 0; i < D; i++) { assert_true(mu[i] == 0.0f); assert_true(sig[i] == 1.0f); }
    for (int i = 0; i < N * D; i++) rows[i] = 3.0f;
    skv_kvq_key_norm_fit(mu, sig, rows, N, D, D);
    for (int i = 0; i < D; i++) { assert_true(mu[i] == 0.0f); assert_true(sig[i] == 1.0f); }
    /* without mu the key is stored as a plain row */
    uint8_t a[40], b[40];
    for (int i = 0; i < 64; i++) wide[i] = frand() * 3.0f;
    skv_kvq_quantize_key(a, wide, NULL, NULL, 64, 4);
    skv_kvq_quantize_row(b, wide, 64, 4);
    assert_memory_equal(a, b, 40);
}

/* attention over normalised key rows: the kernel against the reference, for random mu / sigma */
static void norm_against_ref(int T, int H, int Hkv, int d, int pos0, int bits) {
    fixture f;
    setup(&f, T, H, Hkv, d, pos0, bits);
    float *norm = malloc((size_t)2 * Hkv * d * sizeof(float));
    for (int i = 0; i < Hkv * d; i++) { norm[i] = frand() * 5.0f; norm[Hkv * d + i] = 0.2f + fabsf(frand()) * 3.0f; }
    const size_t rb = skv_kvq_row_bytes(d, bits);
    for (int h = 0; h < Hkv; h++)
        for (int k = 0; k < f.a.S_cap; k++) {
            const size_t r = (size_t)h * f.a.S_cap + k;
            skv_kvq_quantize_key((uint8_t *)f.kq + r * rb, f.kf + r * d, norm + (size_t)h * d, norm + ((size_t)Hkv + h) * d, d, bits);
        }
    const size_t no = (size_t)T * H * d, ns = (size_t)H * f.a.S_cap;
    float *out = malloc(no * 4), *ref = malloc(no * 4), *lr = calloc(ns, 4), *lrr = calloc(ns, 4);
    skv_attn_args a = f.a;
    a.k_norm = norm;
    a.lastrow = lr;
    skv_attention(out, f.q, f.kq, f.vq, &a);
    a.lastrow = lrr;
    skv_attention_q_ref(ref, f.q, f.kq, f.vq, &a);
    assert_true(maxdiff(out, ref, no) < 2e-5f);
    assert_true(maxdiff(lr, lrr, ns) < 1e-5f);
    free(out); free(ref); free(lr); free(lrr); free(norm);
    teardown(&f);
}
static void test_attention_knorm(void **st) {
    (void)st;
    norm_against_ref(1, 14, 2, 64, 300, 4);
    norm_against_ref(6, 6, 3, 64, 50, 4);
    norm_against_ref(3, 4, 2, 128, 20, 8);
}

/* why: keys with per-channel offsets (a bias) and spreads, as a layer's keys have; the
 * attention rows of one query over 4-bit rows, plain and normalised, against the exact ones */
static void test_knorm_closer(void **st) {
    (void)st;
    enum { S = 400, D = 64 };
    float *k = malloc(sizeof(float) * S * D), *v = calloc((size_t)S * D, sizeof(float)), q[D];
    float off[D], spread[D];
    for (int i = 0; i < D; i++) { off[i] = frand() * 2.0f; spread[i] = 0.3f + fabsf(frand()); }
    off[5] = 40.0f; off[17] = -25.0f; spread[40] = 6.0f;   /* outlier channels */
    for (int r = 0; r < S; r++)
        for (int i = 0; i < D; i++) k[r * D + i] = off[i] + spread[i] * frand();
    for (int i = 0; i < D; i++) q[i] = frand() * 1.5f;
    q[5] = 2.0f; q[40] = 0.8f;
    float mu[D], sig[D];
    skv_kvq_key_norm_fit(mu, sig, k, S, D, D);
    const size_t rb = skv_kvq_row_bytes(D, 4);
    uint8_t *plain = malloc(rb * S), *normed = malloc(rb * S), *vq = malloc(rb * S);
    for (int r = 0; r < S; r++) {
        skv_kvq_quantize_row(plain + r * rb, k + r * D, D, 4);
        skv_kvq_quantize_key(normed + r * rb, k + r * D, mu, sig, D, 4);
        skv_kvq_quantize_row(vq + r * rb, v + r * D, D, 4);
    }
    float out[D], exact[S], lp[S], ln[S], norm[2 * D];
    memcpy(norm, mu, sizeof mu);
    memcpy(norm + D, sig, sizeof sig);
    skv_attn_args a = {.T = 1, .H = 1, .Hkv = 1, .d = D, .pos0 = S - 1, .S_cap = S, .k_bits = 4, .v_bits = 4, .lastrow = lp};
    skv_attention(out, q, plain, vq, &a);
    a.lastrow = ln;
    a.k_norm = norm;
    skv_attention(out, q, normed, vq, &a);
    skv_attn_args e = {.T = 1, .H = 1, .Hkv = 1, .d = D, .pos0 = S - 1, .S_cap = S, .lastrow = exact};
    skv_attention_ref(out, q, k, v, &e);
    double dp = 0, dn = 0;
    for (int r = 0; r < S; r++) { dp += fabs(lp[r] - exact[r]); dn += fabs(ln[r] - exact[r]); }
    print_message("attention row L1 error: plain q4 %.4f, normalised q4 %.4f\n", dp, dn);
    assert_true(dn * 3 < dp);
    free(k); free(v); free(plain); free(normed); free(vq);
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

/* a forward state's key normalisation: fitted on its first block, kept, reset, copied */
static void test_state_key_norm(void **st) {
    (void)st;
    if (access(SMOL, R_OK)) skip();
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    const skv_config *c = &m->cfg;
    const size_t per = (size_t)2 * c->n_kv_head * c->head_dim;
    int toks[80];
    test_prompt(toks, 80, c->vocab, 7);
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    skv_state *a = skv_state_new_quant(m, 128, 64, 4, 4), *b = skv_state_new_quant(m, 128, 64, 4, 4);
    assert_non_null(a); assert_non_null(b);
    assert_int_equal(skv_forward(a, toks, 40, &o), 0);
    bool fitted = false;
    for (int l = 0; l < c->n_layer; l++) {
        assert_int_equal(a->k_norm_set[l], 1);
        for (size_t i = per / 2; i < per; i++) fitted |= a->k_norm[l * per + i] != 1.0f;
    }
    assert_true(fitted);
    /* token by token from the start: plain rows (mu 0, sigma 1) */
    for (int t = 0; t < 3; t++) assert_int_equal(skv_forward(b, &toks[t], 1, &o), 0);
    for (size_t i = 0; i < per * c->n_layer; i++) assert_true(b->k_norm[i] == ((i % per) < per / 2 ? 0.0f : 1.0f));
    /* a copy steps as the original does, bit for bit */
    assert_int_equal(skv_state_copy_cache(b, a, c->n_layer), 0);
    assert_int_equal(b->n_past, 40);
    assert_int_equal(skv_forward(a, &toks[40], 1, &o), 0);
    float *la = malloc((size_t)c->vocab * sizeof(float));
    memcpy(la, a->logits, (size_t)c->vocab * sizeof(float));
    assert_int_equal(skv_forward(b, &toks[40], 1, &o), 0);
    assert_memory_equal(la, b->logits, (size_t)c->vocab * sizeof(float));
    /* a reset forgets the fit: the next first block fits again */
    skv_state_reset(a);
    for (int l = 0; l < c->n_layer; l++) assert_int_equal(a->k_norm_set[l], 0);
    /* mismatched states are refused */
    b->k_norm_off = true;
    assert_int_equal(skv_state_copy_cache(b, a, c->n_layer), -1);
    assert_non_null(strstr(skv_last_error(), "differ"));
    skv_state *h = skv_state_new(m, 128, 64, true);
    assert_non_null(h);
    assert_null(h->k_norm);
    assert_int_equal(skv_state_copy_cache(h, a, c->n_layer), -1);
    free(la);
    skv_state_free(a); skv_state_free(b); skv_state_free(h);
    skv_model_free(m);
}

/* the label names knorm with a quantised SLM cache only (older records: plain keys) */
static void test_knorm_label(void **st) {
    (void)st;
    static const char *const cases[][2] = {
#define P "smallkv:renorm:profile:score=now"   /* what every smallkv label names */
        {"smallkv", P},
        {"smallkv:slmkv=q4", P ":slmkv=q4:knorm"},
        {"smallkv:slmkv=k8v4:knorm=false", P ":slmkv=k8v4"},
        {"smallkv:knorm=false", P},
#undef P
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        skv_policy_spec s;
        char label[128];
        assert_int_equal(skv_policy_spec_parse(cases[i][0], &s), 0);
        skv_policy_spec_label(&s, label, sizeof label);
        assert_string_equal(label, cases[i][1]);
    }
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
    const size_t want = (size_t)s->slm->run_layers * c->n_kv_head *
                        (140 * (skv_kvq_row_bytes(c->head_dim, kb) + skv_kvq_row_bytes(c->head_dim, vb)) +
                         2 * c->head_dim * sizeof(float));   /* + the key normalisation */
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
        cmocka_unit_test(test_key_norm_fit),
        cmocka_unit_test(test_attention_knorm),
        cmocka_unit_test(test_knorm_closer),
        cmocka_unit_test(test_state_key_norm),
        cmocka_unit_test(test_knorm_label),
        cmocka_unit_test(test_smallkv_q8),
        cmocka_unit_test(test_smallkv_q4),
        cmocka_unit_test(test_smallkv_k8v4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
