/* test_hugemem.c: the huge-page arrays (runtime/model/hugemem.c) and their users: the model's
 * decode copies (one arena) and a forward state's KV cache (one arena per state).
 * Whether the kernel really backs them with 2 MiB pages depends on the machine's THP
 * setting, so it is reported, not asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/engine/forward.h"
#include "common/hugemem.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include "kernels/cpu/quant.h"
#include "tests/support/tiny_model.h"

static const size_t MIB = (size_t)1 << 20;

/* every size class: heap (small), mapped below and above one huge page, not a multiple */
static void check_sizes(void) {
    const size_t sizes[] = {0, 1, 100, MIB - 1, MIB, 2 * MIB, 2 * MIB + 1, 5 * MIB + 7};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t n = sizes[i];
        uint8_t *p = skv_huge_alloc(n, "test");
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        for (size_t j = 0; j < n; j++)
            if (p[j]) fail_msg("size %zu: byte %zu not zero", n, j);
        memset(p, 0xA5, n);   /* every byte writable */
        for (size_t j = 0; j < n; j += 4093) assert_int_equal(p[j], 0xA5);
        skv_huge_free(p, n);
    }
    skv_huge_free(NULL, 0);
    skv_huge_free(NULL, 4 * MIB);
}

static void test_alloc_sizes(void **state) {
    (void)state;
    check_sizes();
}

static void test_alloc_without_advice(void **state) {
    (void)state;
    setenv("SKV_HUGEPAGES", "0", 1);
    check_sizes();
    unsetenv("SKV_HUGEPAGES");
}

/* The KV cache of a state is one block: every layer's K and V inside it, disjoint, aligned,
 * zeroed; a state without a cache has none. */
static void test_state_kv_arena(void **state) {
    (void)state;
    skv_model *m = tiny_model_load(SKV_ARCH_QWEN2, 7, "hugemem");
    assert_non_null(m);
    const int S = 300, L = m->cfg.n_layer;
    skv_state *s = skv_state_new(m, S, 8, true);
    assert_non_null(s);
    const size_t per = (size_t)m->cfg.n_kv_head * S * m->cfg.head_dim * 2;
    const uint8_t *lo = s->kv_arena, *hi = lo + s->kv_arena_bytes;
    assert_true(s->kv_arena_bytes >= 2 * (size_t)L * per);
    for (int l = 0; l < L; l++) {
        const uint8_t *k = s->k[l], *v = s->v[l];
        assert_true(k >= lo && k + per <= hi && v >= lo && v + per <= hi);
        assert_int_equal((uintptr_t)k % 64, 0);
        assert_int_equal((uintptr_t)v % 64, 0);
        for (int l2 = 0; l2 < L; l2++) {   /* no two arrays overlap */
            const uint8_t *k2 = s->k[l2], *v2 = s->v[l2];
            if (l2 != l) assert_true(k + per <= k2 || k2 + per <= k);
            assert_true(k + per <= v2 || v2 + per <= k);
        }
        for (size_t j = 0; j < per; j++)
            if (k[j] | v[j]) fail_msg("layer %d: cache byte %zu not zero", l, j);
    }
    int tok[4] = {1, 2, 3, 4};
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    assert_int_equal(skv_forward(s, tok, 4, &o), 0);
    skv_state_free(s);
    s = skv_state_new_nocache(m, S, 8, true);
    assert_non_null(s);
    assert_null(s->kv_arena);
    for (int l = 0; l < L; l++) assert_true(s->k[l] == NULL && s->v[l] == NULL);
    skv_state_free(s);
    skv_model_free(m);
}

/* SmolLM2's decode copies (memory-mapped, so no 8-row groups in place): one arena of
 * skv_model_pack_size bytes, each copy inside it, aligned, in matrix order, disjoint;
 * unpack clears every pointer. */
static void test_pack_arena(void **state) {
    (void)state;
    skv_model *m = test_load_smollm2_ex(SKV_LOAD_MAPPED);
    if (!m) skip();
    if (!m->pack_arena) assert_int_equal(skv_model_pack(m), 0);
    assert_non_null(m->pack_arena);
    assert_int_equal(m->pack_bytes, skv_model_pack_size(m));
    const uint8_t *lo = m->pack_arena, *hi = lo + m->pack_bytes, *prev_end = lo;
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) {
            if (!w[i]->pack) continue;
            const uint8_t *p = w[i]->pack;
            const size_t bytes = skv_row_bytes(w[i]->type, w[i]->cols) * (size_t)w[i]->rows;
            assert_true(p >= prev_end && p + bytes <= hi);
            assert_int_equal((uintptr_t)p % 64, 0);
            prev_end = p + bytes;
            n++;
        }
    }
    assert_int_equal(n, 7 * m->cfg.n_layer);   /* every SmolLM2 layer matrix is Q4_1 */
    skv_model_unpack(m);
    assert_null(m->pack_arena);
    assert_int_equal(m->pack_bytes, 0);
    assert_null(m->layers[0].wq.pack);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_sizes),
        cmocka_unit_test(test_alloc_without_advice),
        cmocka_unit_test(test_state_kv_arena),
        cmocka_unit_test(test_pack_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
