/* test_kvcache.c: the two-tier KV cache: restore returns exactly the stored K/V, random
 * evict/restore sequences keep every hot slot equal to its cold row, the hot tier never
 * exceeds the budget, and the hot arena is sized by the budget (byte accounting); the cold
 * tier shared copy-on-write by clones, released (policies without restore), flattened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/kv/kvcache.h"
#include "common/util.h"

static uint32_t rng = 12345;
static float frand(void) { rng = rng * 1664525u + 1013904223u; return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f; }
static int irand(int n) { rng = rng * 1664525u + 1013904223u; return (int)((rng >> 8) % (uint32_t)n); }

static skv_kvcache *filled(int L, int Hkv, int d, bool f16, int N) {
    skv_kvcache *c = skv_kvcache_new(L, Hkv, d, f16);
    assert_non_null(c);
    assert_int_equal(skv_kvcache_cold_reserve(c, N), 0);
    float *k = malloc(sizeof(float) * N * Hkv * d), *v = malloc(sizeof(float) * N * Hkv * d);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < N * Hkv * d; i++) { k[i] = frand(); v[i] = frand(); }
        /* two blocks, to exercise pos0 */
        assert_int_equal(skv_kvcache_cold_write(c, l, 0, N / 2, k, v), 0);
        assert_int_equal(skv_kvcache_cold_write(c, l, N / 2, N - N / 2, k + (size_t)(N / 2) * Hkv * d,
                                                v + (size_t)(N / 2) * Hkv * d), 0);
    }
    free(k); free(v);
    return c;
}

/* every hot slot holds exactly its cold row; returns the lane's (n_kv, n_v) */
static void check_lane(const skv_kvcache *c, int l, int j) {
    const size_t row = (size_t)c->d * c->esz;
    int ln = skv_lane(c, l, j);
    const char *K = skv_kvcache_hot_k(c, l, j), *V = skv_kvcache_hot_v(c, l, j), *M = skv_kvcache_hot_m(c, l, j);
    const int *P = skv_kvcache_hot_pos_kv(c, l, j), *PV = skv_kvcache_hot_pos_v(c, l, j);
    for (int s = 0; s < c->n_kv[ln]; s++) {
        assert_memory_equal(K + s * row, skv_kvcache_cold_k(c, l, j, P[s]), row);
        assert_memory_equal(V + s * row, skv_kvcache_cold_v(c, l, j, P[s]), row);
    }
    for (int s = 0; s < c->n_v[ln]; s++) assert_memory_equal(M + s * row, skv_kvcache_cold_v(c, l, j, PV[s]), row);
}

static void restore_exact(bool f16) {
    skv_kvcache *c = filled(2, 2, 24, f16, 50);
    int kv[] = {3, 7, 10, 49}, vv[] = {5, 6};
    int need_kv[2] = {4, 4}, need_v[2] = {2, 2};
    assert_int_equal(skv_kvcache_hot_reserve(c, 1, need_kv, need_v), 0);
    assert_int_equal(skv_kvcache_apply(c, 1, 1, kv, 4, vv, 2), 6);
    check_lane(c, 1, 1);
    /* the stored rows equal what was written (f32 bit-exact; f16 = the rounded value) */
    const int *P = skv_kvcache_hot_pos_kv(c, 1, 1);
    int seen = 0;
    for (int s = 0; s < 4; s++) seen |= 1 << (P[s] == 3 ? 0 : P[s] == 7 ? 1 : P[s] == 10 ? 2 : P[s] == 49 ? 3 : 4);
    assert_int_equal(seen, 15);
    /* move 7 to V-only, 5 to K+V, drop 6 and 49: one load of K+V (5); 7 keeps its hot V */
    int kv2[] = {3, 5, 10}, vv2[] = {7};
    assert_int_equal(skv_kvcache_apply(c, 1, 1, kv2, 3, vv2, 1), 1);
    check_lane(c, 1, 1);
    assert_int_equal(c->n_kv[skv_lane(c, 1, 1)], 3);
    assert_int_equal(c->n_v[skv_lane(c, 1, 1)], 1);
    /* other lanes untouched */
    assert_int_equal(c->n_kv[skv_lane(c, 1, 0)], 0);
    /* bad input is an error, not a crash */
    int bad[] = {3, 3};
    assert_int_equal(skv_kvcache_apply(c, 1, 1, bad, 2, NULL, 0), -1);
    int far[] = {50};
    assert_int_equal(skv_kvcache_apply(c, 1, 1, far, 1, NULL, 0), -1);
    skv_kvcache_free(c);
}
static void test_restore_exact_f32(void **st) { (void)st; restore_exact(false); }
static void test_restore_exact_f16(void **st) { (void)st; restore_exact(true); }

static void test_random_steps_budget(void **st) {
    (void)st;
    const int L = 3, Hkv = 2, d = 16, N = 400, B = 40;   /* budget in cost units per lane */
    skv_kvcache *c = filled(L, Hkv, d, true, N);
    int *kv = malloc(sizeof(int) * N), *vv = malloc(sizeof(int) * N), *perm = malloc(sizeof(int) * N);
    size_t max_cap = 0;
    for (int step = 0; step < 300; step++) {
        int n = 20 + irand(N - 20);
        for (int l = 0; l < L; l++) {
            int nk[2], nv[2];
            int sets[2][2];
            for (int j = 0; j < Hkv; j++) {
                nk[j] = irand(B + 1);
                nv[j] = irand(2 * (B - nk[j]) + 1);
                if (nk[j] + nv[j] > n) { nk[j] = n / 2; nv[j] = 0; if (nk[j] > B) nk[j] = B; }
                sets[j][0] = nk[j]; sets[j][1] = nv[j];
            }
            assert_int_equal(skv_kvcache_hot_reserve(c, l, nk, nv), 0);
            for (int j = 0; j < Hkv; j++) {
                for (int i = 0; i < n; i++) perm[i] = i;
                for (int i = 0; i < sets[j][0] + sets[j][1]; i++) { int r = i + irand(n - i); int t = perm[i]; perm[i] = perm[r]; perm[r] = t; }
                memcpy(kv, perm, sizeof(int) * sets[j][0]);
                memcpy(vv, perm + sets[j][0], sizeof(int) * sets[j][1]);
                assert_true(skv_kvcache_apply(c, l, j, kv, sets[j][0], vv, sets[j][1]) >= 0);
                check_lane(c, l, j);
            }
        }
        skv_kv_bytes b;
        skv_kvcache_bytes(c, &b);
        assert_true(b.hot_tokens <= (double)L * Hkv * B);
        assert_true(b.hot_used <= (size_t)L * Hkv * B * 2 * d * 2);
        if (b.hot_cap > max_cap) max_cap = b.hot_cap;
    }
    /* the arena never grew far beyond the budget: every lane's KV region <= B + B/8 + 8
     * slots, V region <= 2B + 2B/8 + 8 */
    size_t bound = (size_t)L * Hkv * ((size_t)(B + B / 8 + 8) * 2 + (size_t)(2 * B + 2 * B / 8 + 8)) * d * 2;
    assert_true(max_cap <= bound);
    free(kv); free(vv); free(perm);
    skv_kvcache_free(c);
}

static void test_hot_sized_by_budget(void **st) {
    (void)st;
    /* 1000 tokens in cold, a 10% budget in hot: the hot arena is ~1/10 of the cold tier */
    const int L = 2, Hkv = 3, d = 32, N = 1000, B = 100;
    skv_kvcache *c = filled(L, Hkv, d, true, N);
    int kv[100];
    for (int l = 0; l < L; l++) {
        int need[3] = {B, B, B};
        assert_int_equal(skv_kvcache_hot_reserve(c, l, need, NULL), 0);
        for (int j = 0; j < Hkv; j++) {
            for (int i = 0; i < B; i++) kv[i] = i * 10 + j;
            assert_int_equal(skv_kvcache_apply(c, l, j, kv, B, NULL, 0), B);
        }
    }
    skv_kv_bytes b;
    skv_kvcache_bytes(c, &b);
    size_t full = (size_t)L * Hkv * N * 2 * d * 2;
    print_message("hot used %zu B, hot allocated %zu B, cold %zu B (full cache %zu B)\n", b.hot_used, b.hot_cap,
                  b.cold_used, full);
    assert_int_equal(b.cold_used, full);
    assert_int_equal(b.hot_used, full / 10);
    assert_true(b.hot_cap <= full / 10 * 125 / 100);
    /* evicting frees slots: keep 10 per lane, the used bytes drop */
    for (int l = 0; l < L; l++)
        for (int j = 0; j < Hkv; j++) assert_true(skv_kvcache_apply(c, l, j, kv, 10, NULL, 0) >= 0);
    skv_kvcache_bytes(c, &b);
    assert_int_equal(b.hot_used, full / 100);
    /* clone is deep and equal */
    skv_kvcache *o = skv_kvcache_clone(c);
    assert_non_null(o);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < Hkv; j++) check_lane(o, l, j);
    skv_kvcache_free(o);
    skv_kvcache_free(c);
}

static void test_cold_grows(void **st) {
    (void)st;
    skv_kvcache *c = filled(1, 2, 8, false, 10);
    float row[16];
    float k0[8];
    memcpy(k0, skv_kvcache_cold_k(c, 0, 1, 9), sizeof k0);
    assert_int_equal(skv_kvcache_cold_reserve(c, 1000), 0);
    assert_memory_equal(k0, skv_kvcache_cold_k(c, 0, 1, 9), sizeof k0);
    for (int i = 0; i < 16; i++) row[i] = (float)i;
    assert_int_equal(skv_kvcache_cold_write(c, 0, 10, 1, row, row), 0);
    assert_int_equal(c->cold_n, 11);
    assert_int_equal(skv_kvcache_cold_write(c, 0, c->cold_cap, 1, row, row), -1);
    skv_kvcache_free(c);
}

static void test_cold_cow_release(void **st) {
    (void)st;
    const int L = 2, Hkv = 2, d = 8, N = 30;
    skv_kvcache *c = filled(L, Hkv, d, false, N);
    const size_t per_tok = (size_t)L * Hkv * 2 * d * 4;
    skv_kvcache *o = skv_kvcache_clone(c);
    assert_non_null(o);
    skv_kv_bytes b;
    skv_kvcache_bytes(o, &b);
    assert_int_equal(b.cold_used, N * per_tok);
    assert_int_equal(b.cold_shared, N * per_tok);
    /* the clone appends to its own tail; the source's rows stay readable from both */
    float row[2 * 8];
    for (int i = 0; i < 16; i++) row[i] = (float)i;
    assert_int_equal(skv_kvcache_cold_reserve(o, N + 1), 0);
    assert_int_equal(skv_kvcache_cold_write(o, 1, N, 1, row, row), 0);
    assert_int_equal(o->cold_n, N + 1);
    assert_int_equal(c->cold_n, N);
    assert_memory_equal(skv_kvcache_cold_k(o, 1, 1, 7), skv_kvcache_cold_k(c, 1, 1, 7), d * 4);
    assert_memory_equal(skv_kvcache_cold_k(o, 1, 1, N), row + d, d * 4);
    assert_null(skv_kvcache_cold_k(c, 1, 1, N));
    const skv_kvcache *both[2] = {c, o};
    assert_int_equal(skv_kvcache_cold_unique(both, 2), (N + 1) * per_tok);
    /* flatten: a private contiguous copy, same rows */
    float k7[8];
    memcpy(k7, skv_kvcache_cold_k(o, 0, 1, 7), sizeof k7);
    assert_int_equal(skv_kvcache_cold_flatten(o), 0);
    assert_int_equal(o->cold_base, 0);
    assert_memory_equal(k7, skv_kvcache_cold_k(o, 0, 1, 7), sizeof k7);
    assert_int_equal(skv_kvcache_cold_unique(both, 2), (2 * N + 1) * per_tok);
    /* release: no cold bytes, old positions are gone (apply refuses to restore them) */
    skv_kvcache_cold_release(o);
    skv_kvcache_bytes(o, &b);
    assert_int_equal(b.cold_used + b.cold_cap, 0);
    assert_null(skv_kvcache_cold_k(o, 0, 0, 3));
    int need[2] = {4, 4}, kv[1] = {3};
    assert_int_equal(skv_kvcache_hot_reserve(o, 0, need, NULL), 0);
    assert_int_equal(skv_kvcache_apply(o, 0, 0, kv, 1, NULL, 0), -1);
    skv_kvcache_free(o);
    /* the source still reads its rows after the clone is gone */
    assert_memory_equal(k7, skv_kvcache_cold_k(c, 0, 1, 7), sizeof k7);
    skv_kvcache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restore_exact_f32),
        cmocka_unit_test(test_restore_exact_f16),
        cmocka_unit_test(test_random_steps_budget),
        cmocka_unit_test(test_hot_sized_by_budget),
        cmocka_unit_test(test_cold_grows),
        cmocka_unit_test(test_cold_cow_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
