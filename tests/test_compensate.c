/* test_compensate.c: the hot-tier attention with marginal compensation: fast vs scalar
 * reference, equality with ordinary attention when there are no marginal tokens, the
 * three combine modes on hand-made numbers, and the per-slot probability output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/attention.h"
#include "kernels/cpu/compensate.h"
#include "runtime/kv/kvcache.h"
#include "common/util.h"

static uint32_t rng = 777;
static float frand(void) { rng = rng * 1664525u + 1013904223u; return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f; }

static float maxdiff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void *rows(int n, int d, bool f16, float *src) {
    void *p = malloc((size_t)n * d * (f16 ? 2 : 4) + 4);
    for (int i = 0; i < n * d; i++) src[i] = frand();
    for (int s = 0; s < n; s++) skv_kv_store_row((char *)p + (size_t)s * d * (f16 ? 2 : 4), src + (size_t)s * d, d, f16);
    return p;
}

static void fast_vs_ref(bool f16, int d) {
    const int g = 3, n = 37, nm = 11;
    float *kf = malloc(sizeof(float) * n * d), *vf = malloc(sizeof(float) * n * d), *mf = malloc(sizeof(float) * nm * d);
    void *k = rows(n, d, f16, kf), *v = rows(n, d, f16, vf), *vm = rows(nm, d, f16, mf);
    float q[3 * 80], pm[3 * 11], w[3], out1[3 * 80], out2[3 * 80], scr[64], acc1[64], acc2[64], hp1[3 * 64], hp2[3 * 64];
    for (int i = 0; i < g * d; i++) q[i] = 2 * frand();
    for (int i = 0; i < g * nm; i++) pm[i] = fabsf(frand()) * 0.05f;
    for (int i = 0; i < g; i++) w[i] = 0.3f + 0.2f * i;
    int mult[37];   /* merged slots (EMS) on the second pass: every fifth slot stands for 3 tokens */
    for (int i = 0; i < n; i++) mult[i] = i % 5 == 0 ? 3 : 1;
    for (int mode = 0; mode < 6; mode++) {
        memset(acc1, 0, sizeof acc1); memset(acc2, 0, sizeof acc2);
        skv_comp_args a = {.g = g, .d = d, .n_hot = n, .n_marg = nm, .f16 = f16, .k = k, .v = v, .vm = vm,
                           .pm = pm, .w = w, .combine = (skv_combine)(mode % 3), .slot_acc = acc1, .head_p = hp1,
                           .scratch = scr, .mult = mode >= 3 ? mult : NULL};
        skv_compensate_ref(out1, q, &a);
        a.slot_acc = acc2; a.head_p = hp2;
        skv_compensate(out2, q, &a);
        assert_true(maxdiff(out1, out2, g * d) < 1e-5f);
        assert_true(maxdiff(acc1, acc2, n) < 1e-5f);
        assert_true(maxdiff(hp1, hp2, g * n) < 1e-6f);
    }
    free(kf); free(vf); free(mf); free(k); free(v); free(vm);
}
static void test_fast_vs_ref_f32(void **st) { (void)st; fast_vs_ref(false, 64); fast_vs_ref(false, 20); }
static void test_fast_vs_ref_f16(void **st) { (void)st; fast_vs_ref(true, 64); fast_vs_ref(true, 80); }

/* no marginal tokens + the full history hot == ordinary causal attention's last row */
static void test_equals_attention(void **st) {
    (void)st;
    for (int f = 0; f < 2; f++) {
        bool f16 = f;
        const int H = 6, Hkv = 2, g = 3, d = 64, S = 29;
        float *kf = malloc(sizeof(float) * Hkv * S * d), *vf = malloc(sizeof(float) * Hkv * S * d);
        void *kc = rows(Hkv * S, d, f16, kf), *vc = rows(Hkv * S, d, f16, vf);   /* (Hkv, S, d) */
        float q[6 * 64], ref[6 * 64], out[6 * 64], scr[64], colsum[6 * 29], acc[29];
        for (int i = 0; i < H * d; i++) q[i] = 2 * frand();
        memset(colsum, 0, sizeof colsum);
        skv_attn_args aa = {.T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = S - 1, .S_cap = S, .kv_f16 = f16, .colsum = colsum};
        skv_attention(ref, q, kc, vc, &aa);
        size_t esz = f16 ? 2 : 4;
        for (int j = 0; j < Hkv; j++) {
            memset(acc, 0, sizeof acc);
            skv_comp_args a = {.g = g, .d = d, .n_hot = S, .f16 = f16,
                               .k = (char *)kc + (size_t)j * S * d * esz, .v = (char *)vc + (size_t)j * S * d * esz,
                               .combine = SKV_COMBINE_RENORM, .slot_acc = acc, .scratch = scr};
            skv_compensate(out + (size_t)j * g * d, q + (size_t)j * g * d, &a);
            /* the slot probabilities summed over the group = the column sums of those heads */
            for (int s = 0; s < S; s++) {
                float cs = 0;
                for (int t = 0; t < g; t++) cs += colsum[(j * g + t) * S + s];
                assert_true(fabsf(cs - acc[s]) < 1e-5f);
            }
        }
        assert_true(maxdiff(ref, out, H * d) < 1e-5f);
        free(kf); free(vf); free(kc); free(vc);
    }
}

static void test_combine_modes(void **st) {
    (void)st;
    /* one hot slot: O_c = V_hot = (1, 1). Marginal V = (2, 0), (0, 4) with p' = 0.25, 0.125:
     * O_m = (0.5, 0.5), SLM marginal mass 0.375; SLM mass on the hot token w = 0.5. */
    const int d = 2;
    float k[2] = {0.3f, -0.2f}, v[2] = {1, 1}, vm[4] = {2, 0, 0, 4}, pm[2] = {0.25f, 0.125f}, w[1] = {0.5f};
    float q[2] = {1, 1}, out[2], scr[4];
    skv_comp_args a = {.g = 1, .d = d, .n_hot = 1, .n_marg = 2, .k = k, .v = v, .vm = vm, .pm = pm, .w = w, .scratch = scr};
    a.combine = SKV_COMBINE_SUM;
    skv_compensate(out, q, &a);
    assert_float_equal(out[0], 1.5f, 1e-6); assert_float_equal(out[1], 1.5f, 1e-6);
    skv_compensate_ref(out, q, &a);
    assert_float_equal(out[0], 1.5f, 1e-6); assert_float_equal(out[1], 1.5f, 1e-6);
    a.combine = SKV_COMBINE_MASS;
    skv_compensate(out, q, &a);
    assert_float_equal(out[0], 1.0f, 1e-6); assert_float_equal(out[1], 1.0f, 1e-6);
    a.combine = SKV_COMBINE_RENORM;
    skv_compensate(out, q, &a);
    assert_float_equal(out[0], 1.0f / 0.875f, 1e-6); assert_float_equal(out[1], 1.0f / 0.875f, 1e-6);
    skv_compensate_ref(out, q, &a);
    assert_float_equal(out[0], 1.0f / 0.875f, 1e-6);
    /* without weights (pm NULL) every mode is plain attention */
    a.pm = NULL;
    skv_compensate(out, q, &a);
    assert_float_equal(out[0], 1.0f, 1e-6);
}

/* a slot with multiplicity m == m identical slots (EMS centres), fast and reference */
static void test_multiplicity(void **st) {
    (void)st;
    const int g = 2, d = 16;
    float kf[5 * 16], vf[5 * 16];
    void *k = rows(5, d, false, kf), *v = rows(5, d, false, vf);
    /* duplicated layout: slot 1 three times, slot 3 twice -> 3 slots with mult {1, 3, 2}... */
    float kd[8 * 16], vd[8 * 16];
    int src[8] = {0, 1, 1, 1, 2, 3, 3, 4}, mult[5] = {1, 3, 1, 2, 1};
    for (int i = 0; i < 8; i++) {
        memcpy(kd + i * d, kf + src[i] * d, sizeof(float) * d);
        memcpy(vd + i * d, vf + src[i] * d, sizeof(float) * d);
    }
    float q[2 * 16], o1[2 * 16], o2[2 * 16], o3[2 * 16], scr[8], acc1[8] = {0}, acc2[8] = {0};
    for (int i = 0; i < g * d; i++) q[i] = 2 * frand();
    skv_comp_args a = {.g = g, .d = d, .n_hot = 5, .k = k, .v = v, .mult = mult, .slot_acc = acc1, .scratch = scr};
    skv_compensate(o1, q, &a);
    a.slot_acc = NULL;
    skv_compensate_ref(o3, q, &a);
    skv_comp_args b = {.g = g, .d = d, .n_hot = 8, .k = kd, .v = vd, .slot_acc = acc2, .scratch = scr};
    skv_compensate_ref(o2, q, &b);
    assert_true(maxdiff(o1, o2, g * d) < 1e-5f);
    assert_true(maxdiff(o3, o2, g * d) < 1e-5f);
    /* the slot's probability is the total over its copies */
    float tot[5] = {0};
    for (int i = 0; i < 8; i++) tot[src[i]] += acc2[i];
    assert_true(maxdiff(acc1, tot, 5) < 1e-5f);
    free(k); free(v);
}

/* per-attention-head selection: head h over the union of slots with a mask equals head h
 * over only its own slots (fast and reference, f32 and f16), masked slots get probability 0 */
static void test_head_mask(void **st) {
    (void)st;
    const int g = 3, d = 32, n = 21;
    for (int f16 = 0; f16 < 2; f16++) {
        float kf[21 * 32], vf[21 * 32];
        void *k = rows(n, d, f16, kf), *v = rows(n, d, f16, vf);
        unsigned char mask[3 * 21];
        for (int h = 0; h < g; h++)
            for (int s2 = 0; s2 < n; s2++) mask[h * n + s2] = s2 == n - 1 || (s2 * 7 + h * 3) % 4 == 0;
        float q[3 * 32], o1[3 * 32], o2[3 * 32], scr[32], hp[3 * 21];
        for (int i = 0; i < g * d; i++) q[i] = 2 * frand();
        skv_comp_args a = {.g = g, .d = d, .n_hot = n, .f16 = f16, .k = k, .v = v, .head_mask = mask,
                           .head_p = hp, .scratch = scr};
        skv_compensate(o1, q, &a);
        for (int h = 0; h < g; h++)
            for (int s2 = 0; s2 < n; s2++)
                if (!mask[h * n + s2]) assert_true(hp[h * n + s2] == 0.0f);
        a.head_p = NULL;
        skv_compensate_ref(o2, q, &a);
        assert_true(maxdiff(o1, o2, g * d) < 1e-5f);
        for (int h = 0; h < g; h++) {   /* head h alone over its own slots, packed */
            float ks[21 * 32], vs[21 * 32], oh[32];
            int m = 0;
            for (int s2 = 0; s2 < n; s2++)
                if (mask[h * n + s2]) {
                    memcpy(ks + m * d, kf + s2 * d, sizeof(float) * d);
                    memcpy(vs + m * d, vf + s2 * d, sizeof(float) * d);
                    m++;
                }
            const size_t rb = (size_t)d * (f16 ? 2 : 4);
            char *kp = malloc((size_t)m * rb + 4), *vp = malloc((size_t)m * rb + 4);
            for (int r = 0; r < m; r++) {
                skv_kv_store_row(kp + r * rb, ks + r * d, d, f16);
                skv_kv_store_row(vp + r * rb, vs + r * d, d, f16);
            }
            skv_comp_args b = {.g = 1, .d = d, .n_hot = m, .f16 = f16, .k = kp, .v = vp, .scratch = scr};
            skv_compensate_ref(oh, q + h * d, &b);
            assert_true(maxdiff(oh, o1 + h * d, d) < 1e-5f);
            free(kp); free(vp);
        }
        free(k); free(v);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multiplicity),
        cmocka_unit_test(test_head_mask),
        cmocka_unit_test(test_fast_vs_ref_f32),
        cmocka_unit_test(test_fast_vs_ref_f16),
        cmocka_unit_test(test_equals_attention),
        cmocka_unit_test(test_combine_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
