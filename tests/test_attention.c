/* test_attention.c: skv_attention (AVX2, OpenMP) against skv_attention_ref, and the
 * score outputs.
 * Tolerances: out vs. reference max abs error 2e-5 (values are O(1); the fast path uses a
 * polynomial exp with ~2e-7 relative error and a different summation order); colsum and
 * lastrow vs. reference 1e-5 abs; each attention row sums to 1 within 1e-5; colsum of a
 * block equals the sum of its rows (checked by running the block row by row, where the
 * lastrow of each single-row call is that row); colsum identical for 1 and N threads. */
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
#include "common/util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

typedef struct {
    skv_attn_args a;
    float *q, *out, *out_ref, *cs, *cs_ref, *lr, *lr_ref;
    void *k, *v;
} fixture;

static void setup(fixture *f, int T, int H, int Hkv, int d, int pos0, bool f16) {
    memset(f, 0, sizeof *f);
    int S_cap = pos0 + T + 5;
    f->a = (skv_attn_args){ .T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = S_cap, .kv_f16 = f16 };
    size_t n = (size_t)Hkv * S_cap * d;
    f->k = malloc(n * 4);
    f->v = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float kx = 2.0f * frand(), vx = frand();
        if (f16) { ((uint16_t *)f->k)[i] = skv_f32_to_f16(kx); ((uint16_t *)f->v)[i] = skv_f32_to_f16(vx); }
        else { ((float *)f->k)[i] = kx; ((float *)f->v)[i] = vx; }
    }
    size_t nq = (size_t)T * H * d, ns = (size_t)H * S_cap;
    f->q = malloc(nq * 4); f->out = malloc(nq * 4); f->out_ref = malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) f->q[i] = 2.0f * frand();
    f->cs = calloc(ns, 4); f->cs_ref = calloc(ns, 4); f->lr = calloc(ns, 4); f->lr_ref = calloc(ns, 4);
}

static void teardown_f(fixture *f) {
    free(f->q); free(f->out); free(f->out_ref); free(f->cs); free(f->cs_ref); free(f->lr); free(f->lr_ref);
    free(f->k); free(f->v);
}

static float maxdiff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void check_case(int T, int H, int Hkv, int d, int pos0, bool f16) {
    fixture f;
    setup(&f, T, H, Hkv, d, pos0, f16);
    skv_attn_args a = f.a, ar = f.a;
    a.colsum = f.cs; a.lastrow = f.lr;
    ar.colsum = f.cs_ref; ar.lastrow = f.lr_ref;
    skv_attention(f.out, f.q, f.k, f.v, &a);
    skv_attention_ref(f.out_ref, f.q, f.k, f.v, &ar);
    size_t nq = (size_t)T * H * d, ns = (size_t)H * a.S_cap;
    /* float rounding (the kernel's and the float reference's) grows with the dot length d
     * (the scores, |q|, |k| <= 2) and, for the outputs, with the S keys summed */
    const float tol = 2e-5f * fmaxf(1.0f, (float)d / 64.0f) * fmaxf(1.0f, (float)(pos0 + T) / 512.0f);
    float e = maxdiff(f.out, f.out_ref, nq);
    if (e > tol) fail_msg("out T=%d H=%d Hkv=%d d=%d pos0=%d f16=%d: max err %g (tolerance %g)", T, H, Hkv, d, pos0, f16, e, tol);
    const float ptol = 1e-5f * fmaxf(1.0f, (float)d / 64.0f);   /* probabilities: not summed over keys */
    const float ecs = maxdiff(f.cs, f.cs_ref, ns), elr = maxdiff(f.lr, f.lr_ref, ns);
    if (ecs >= ptol || elr >= ptol)
        fail_msg("colsum / lastrow T=%d H=%d Hkv=%d d=%d pos0=%d f16=%d: max err %g / %g (tolerance %g)", T, H, Hkv, d,
                 pos0, f16, ecs, elr, ptol);
    const int S = pos0 + T;
    for (int h = 0; h < H; h++) {
        double s = 0, c = 0;
        for (int k = 0; k < S; k++) { s += f.lr[(size_t)h * a.S_cap + k]; c += f.cs[(size_t)h * a.S_cap + k]; }
        assert_true(fabs(s - 1.0) < 1e-5);          /* lastrow is a distribution */
        assert_true(fabs(c - T) < 1e-4 * T);        /* colsum: T rows of mass 1 */
        for (int k = S; k < a.S_cap; k++) assert_true(f.cs[(size_t)h * a.S_cap + k] == 0.0f);
    }
    /* also without score outputs (the (h, t)-parallel path) */
    skv_attn_args an = f.a;
    memset(f.out, 0, nq * 4);
    skv_attention(f.out, f.q, f.k, f.v, &an);
    assert_true(maxdiff(f.out, f.out_ref, nq) <= tol);
    teardown_f(&f);
}

static void test_decode(void **state) {
    (void)state;
    for (int f16 = 0; f16 < 2; f16++) {
        check_case(1, 2, 2, 64, 0, f16);        /* group 1, first token */
        check_case(1, 6, 2, 64, 37, f16);       /* group 3 */
        check_case(1, 14, 2, 64, 100, f16);     /* group 7 */
        check_case(1, 3, 1, 20, 9, f16);        /* d not a multiple of 8 */
        check_case(1, 4, 2, 128, 300, f16);
        /* the grouped split-key decode: several 128-key chunks, partial chunks and tiles */
        check_case(1, 9, 3, 64, 1000, f16);     /* SmolLM2 heads */
        check_case(1, 14, 2, 64, 2100, f16);    /* Qwen2.5 0.5B heads */
        check_case(1, 12, 2, 128, 700, f16);    /* Qwen2.5 1.5B heads (blocks 3 + 3; rows of 256 B or more: V touched) */
        check_case(1, 6, 2, 72, 260, f16);      /* d = 64 + 8 */
        check_case(1, 2, 1, 256, 130, f16);     /* largest d of that path */
        check_case(1, 4, 4, 32, 127, f16);      /* group 1, exactly one full chunk */
        check_case(1, 10, 2, 40, 500, f16);     /* group 5: head blocks of 3 and 2, d = 32 + 8 */
        check_case(1, 8, 2, 64, 300, f16);      /* group 4: head blocks 2 + 2 (group 7: 3, 2, 2) */
    }
}

/* Decode: the same bits for 1 and N threads, and skv_attention_team (one region, shared
 * workspace) == skv_attention. */
static void test_decode_threads(void **state) {
    (void)state;
    const int H = 9, Hkv = 3, d = 64, pos0 = 700;
    fixture f;
    setup(&f, 1, H, Hkv, d, pos0, true);
    skv_attn_args a = f.a;
    a.colsum = f.cs; a.lastrow = f.lr;
    skv_attention(f.out, f.q, f.k, f.v, &a);
    const int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    a.colsum = f.cs_ref; a.lastrow = f.lr_ref;
    skv_attention(f.out_ref, f.q, f.k, f.v, &a);
    omp_set_num_threads(nth);
    const size_t nq = (size_t)H * d, ns = (size_t)H * a.S_cap;
    assert_memory_equal(f.out, f.out_ref, nq * 4);
    assert_memory_equal(f.cs, f.cs_ref, ns * 4);
    assert_memory_equal(f.lr, f.lr_ref, ns * 4);
    const int team = nth > 1 ? nth : 2;
    float *ws = skv_aligned_alloc(skv_attention_ws_floats(&f.a, team) * 4, "test");
    float *o2 = calloc(nq, 4);
    skv_attn_args b = f.a;
    #pragma omp parallel num_threads(team)
    skv_attention_team(o2, f.q, f.k, f.v, &b, ws);
    assert_memory_equal(o2, f.out, nq * 4);
    free(o2); free(ws);
    teardown_f(&f);
}

/* Decode over many chunks (2500 keys: 20 of 128 per KV head): a thread does its share of
 * the (KV head, chunk) units as runs of consecutive chunks (up to 128 KiB of K), and how the
 * units fall into runs depends on the team size; teams of 1, 2, 3 and 5 split them
 * differently (runs of 8, of 1, across KV heads), and every split must give the same bits
 * (out, colsum, lastrow), fp16 (runs of 8 chunks) and fp32 (4). Group 7 = head blocks 3, 2, 2. */
static void test_decode_runs(void **state) {
    (void)state;
    const int H = 14, Hkv = 2, d = 64, pos0 = 2500;
    for (int f16 = 1; f16 >= 0; f16--) {
        fixture f;
        setup(&f, 1, H, Hkv, d, pos0, f16);
        const size_t nq = (size_t)H * d, ns = (size_t)H * f.a.S_cap;
        const int teams[4] = {1, 2, 3, 5};
        float *ws = skv_aligned_alloc(skv_attention_ws_floats(&f.a, 5) * 4, "test");
        assert_non_null(ws);
        for (int i = 0; i < 4; i++) {
            float *out = i ? f.out : f.out_ref, *cs = i ? f.cs : f.cs_ref, *lr = i ? f.lr : f.lr_ref;
            memset(cs, 0, ns * 4);
            memset(lr, 0, ns * 4);
            skv_attn_args a = f.a;
            a.colsum = cs; a.lastrow = lr;
            #pragma omp parallel num_threads(teams[i])
            skv_attention_team(out, f.q, f.k, f.v, &a, ws);
            if (!i) continue;
            assert_memory_equal(f.out, f.out_ref, nq * 4);
            assert_memory_equal(f.cs, f.cs_ref, ns * 4);
            assert_memory_equal(f.lr, f.lr_ref, ns * 4);
        }
        /* and the one-thread bits are attention's (reference within the usual tolerance) */
        skv_attn_args ar = f.a;
        ar.colsum = f.cs; ar.lastrow = f.lr;
        memset(f.cs, 0, ns * 4);
        skv_attention_ref(f.out, f.q, f.k, f.v, &ar);
        assert_true(maxdiff(f.out, f.out_ref, nq) < 2e-5f);
        assert_true(maxdiff(f.cs, f.cs_ref, ns) < 1e-5f);
        free(ws);
        teardown_f(&f);
    }
}

/* skv_attn_args.knew / vnew: the team call stores the new key / value row pos0 itself (on
 * the thread whose share reads it) and gives the bits of a call on a cache that already
 * holds the row; the cache row equals skv_kv_store's. Decode shapes (chunked path, teams of
 * 1, 2, 3, 5: the row's owner changes; 513 keys: each KV head's last chunk holds one key, so
 * the key-weighted split of the units moves) and a head size off that path (d = 12: every
 * thread runs the general tasks, one stores the rows first). */
static void test_decode_new_row(void **state) {
    (void)state;
    const int shapes[4][4] = {{14, 2, 64, 2500}, {9, 3, 64, 300}, {9, 3, 64, 512}, {4, 2, 12, 40}};
    for (int s = 0; s < 4; s++)
        for (int f16 = 1; f16 >= 0; f16--) {
            const int H = shapes[s][0], Hkv = shapes[s][1], d = shapes[s][2], pos0 = shapes[s][3];
            fixture f;
            setup(&f, 1, H, Hkv, d, pos0, f16);
            const size_t esz = f16 ? 2 : 4, ncache = (size_t)Hkv * f.a.S_cap * d, nq = (size_t)H * d;
            float *kn = malloc((size_t)Hkv * d * 4), *vn = malloc((size_t)Hkv * d * 4);
            for (int i = 0; i < Hkv * d; i++) { kn[i] = 2.0f * frand(); vn[i] = frand(); }
            /* expected: the rows stored first, then the plain call */
            void *k0 = malloc(ncache * esz), *v0 = malloc(ncache * esz);
            memcpy(k0, f.k, ncache * esz);
            memcpy(v0, f.v, ncache * esz);
            for (int h = 0; h < Hkv; h++) {
                const size_t off = ((size_t)h * f.a.S_cap + (size_t)pos0) * d;
                skv_kv_store(k0, f16, off, kn + (size_t)h * d, d);
                skv_kv_store(v0, f16, off, vn + (size_t)h * d, d);
            }
            skv_attention(f.out_ref, f.q, k0, v0, &f.a);
            const int teams[4] = {1, 2, 3, 5};
            float *ws = skv_aligned_alloc(skv_attention_ws_floats(&f.a, 5) * 4, "test");
            assert_non_null(ws);
            for (int i = 0; i < 4; i++) {
                void *k1 = malloc(ncache * esz), *v1 = malloc(ncache * esz);
                memcpy(k1, f.k, ncache * esz);   /* row pos0 still holds other values */
                memcpy(v1, f.v, ncache * esz);
                skv_attn_args a = f.a;
                a.knew = kn; a.vnew = vn;
                memset(f.out, 0, nq * 4);
                #pragma omp parallel num_threads(teams[i])
                skv_attention_team(f.out, f.q, k1, v1, &a, ws);
                assert_memory_equal(f.out, f.out_ref, nq * 4);
                assert_memory_equal(k1, k0, ncache * esz);
                assert_memory_equal(v1, v0, ncache * esz);
                free(k1); free(v1);
            }
            free(ws); free(k0); free(v0); free(kn); free(vn);
            teardown_f(&f);
        }
}

static void test_prefill(void **state) {
    (void)state;
    for (int f16 = 0; f16 < 2; f16++) {
        check_case(9, 2, 2, 64, 0, f16);
        check_case(7, 6, 2, 64, 13, f16);
        check_case(17, 7, 1, 72, 5, f16);       /* group 7, d = 72 (64 + 8 tail) */
        check_case(5, 9, 3, 64, 40, f16);       /* SmolLM2 heads */
    }
}

/* colsum of a T-row block == sum of lastrows of T single-row calls; thread-count invariance. */
static void test_colsum_rows(void **state) {
    (void)state;
    const int T = 6, H = 6, Hkv = 2, d = 32, pos0 = 11;
    fixture f;
    setup(&f, T, H, Hkv, d, pos0, false);
    skv_attn_args a = f.a;
    a.colsum = f.cs;
    skv_attention(f.out, f.q, f.k, f.v, &a);
    float *sum = calloc((size_t)H * a.S_cap, 4);
    for (int t = 0; t < T; t++) {
        skv_attn_args r = f.a;
        r.T = 1; r.pos0 = pos0 + t; r.lastrow = f.lr;
        float o[6 * 32];
        skv_attention(o, f.q + (size_t)t * H * d, f.k, f.v, &r);
        assert_true(maxdiff(o, f.out + (size_t)t * H * d, (size_t)H * d) < 1e-6f);
        for (int h = 0; h < H; h++)
            for (int k = 0; k <= pos0 + t; k++) sum[(size_t)h * a.S_cap + k] += f.lr[(size_t)h * a.S_cap + k];
    }
    assert_true(maxdiff(sum, f.cs, (size_t)H * a.S_cap) < 1e-6f);
    /* thread-count invariance */
    float *cs1 = calloc((size_t)H * a.S_cap, 4);
    int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    a.colsum = cs1;
    skv_attention(f.out, f.q, f.k, f.v, &a);
    omp_set_num_threads(nth);
    assert_memory_equal(cs1, f.cs, (size_t)H * a.S_cap * 4);
    free(cs1); free(sum);
    teardown_f(&f);
}

/* A prefill equals its rows run one at a time as decode steps, bit for bit: outputs, colsum
 * (the rows' attention added in order) and lastrow, with blocks of rows that cross key-chunk
 * boundaries (128 keys), a block shorter than the rest, groups of 6 and 7 query heads, 1 and
 * 2 threads. */
static void test_prefill_blocks_equal_decode(void **state) {
    (void)state;
    const int cases[][5] = {  /* T, H, Hkv, d, pos0 */
        {20, 12, 2, 128, 120}, {37, 14, 2, 64, 250}, {300, 12, 2, 64, 3}, {9, 6, 2, 32, 0}};
    const int nth0 = omp_get_max_threads();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int nth = 1; nth <= 2; nth++) {
                const int T = cases[ci][0], H = cases[ci][1], Hkv = cases[ci][2], d = cases[ci][3], pos0 = cases[ci][4];
                fixture f;
                setup(&f, T, H, Hkv, d, pos0, f16);
                omp_set_num_threads(nth);
                skv_attn_args a = f.a;
                a.colsum = f.cs; a.lastrow = f.lr;
                skv_attention(f.out, f.q, f.k, f.v, &a);
                const size_t hd = (size_t)H * d, ns = (size_t)H * a.S_cap;
                for (int t = 0; t < T; t++) {
                    skv_attn_args r = f.a;
                    r.T = 1; r.pos0 = pos0 + t; r.lastrow = f.lr_ref;
                    skv_attention(f.out_ref + t * hd, f.q + t * hd, f.k, f.v, &r);
                    for (int h = 0; h < H; h++)
                        for (int k = 0; k <= pos0 + t; k++) f.cs_ref[(size_t)h * a.S_cap + k] += f.lr_ref[(size_t)h * a.S_cap + k];
                }
                omp_set_num_threads(nth0);
                if (memcmp(f.out, f.out_ref, (size_t)T * hd * 4) || memcmp(f.cs, f.cs_ref, ns * 4) ||
                    memcmp(f.lr, f.lr_ref, ns * 4))
                    fail_msg("prefill != decode rows: T=%d H=%d Hkv=%d d=%d pos0=%d f16=%d threads=%d (out %g, colsum %g, "
                             "lastrow %g)", T, H, Hkv, d, pos0, f16, nth, maxdiff(f.out, f.out_ref, (size_t)T * hd),
                             maxdiff(f.cs, f.cs_ref, ns), maxdiff(f.lr, f.lr_ref, ns));
                teardown_f(&f);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_colsum_rows),
        cmocka_unit_test(test_prefill_blocks_equal_decode),
        cmocka_unit_test(test_decode_threads),
        cmocka_unit_test(test_decode_runs),
        cmocka_unit_test(test_decode_new_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
