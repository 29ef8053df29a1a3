/* test_kvlog.c: the hot tier's slot-write log (kvcache.h) replayed into a mirror
 * (kvmirror.h) reproduces the hot arenas byte for byte: every used KV slot's K row, V row
 * and multiplicity and every used V-only slot's V row. This is the bookkeeping the CUDA
 * session (runtime/backend/session_cuda.c) uses to keep the GPU copy of the hot tier current, here
 * checked on the CPU with a second host copy as the mirror.
 *   - SmolLM2 as its own SLM (identity map), SmallKV and H2O at budget 20%: prefill, then
 *     32 greedy steps, the mirror synced and compared after the prefill and every step;
 *   - the tiny model, every policy (EMS writes merged slots itself), synced every 3 steps
 *     and after a second prefill, and once after the log is marked lost (full resync);
 *   - the comparison is not vacuous: a step left unsynced shows differences.
 * The SmolLM2 cases skip when models/ lacks the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/kv/kvmirror.h"
#include "runtime/model/model.h"
#include "runtime/session/session.h"
#include "common/util.h"
#include "tests/support/tiny_model.h"
#include "tests/support/test_env.h"
#include "tests/support/test_util.h"

static skv_model *tiny, *smol;

static int setup(void **st) { (void)st; return test_models_load(&tiny, &smol, SKV_ARCH_LLAMA, 42, "kvlog"); }
static int teardown(void **st) { (void)st; test_models_free(&tiny, &smol); return 0; }

/* ---------------------------------------------------------------- host mirror */

typedef struct {
    int L;
    size_t row;               /* bytes per K / V row */
    char **k, **v, **m;       /* [L] -> (slots, row) */
    int **mult;               /* [L] -> (slots) */
    size_t *kv_slots, *v_slots;
    long resizes;
} mirror;

static mirror *mirror_new(const skv_kvcache *c) {
    mirror *r = calloc(1, sizeof *r);
    r->L = c->L;
    r->row = (size_t)c->d * c->esz;
    r->k = calloc(c->L, sizeof(char *)); r->v = calloc(c->L, sizeof(char *)); r->m = calloc(c->L, sizeof(char *));
    r->mult = calloc(c->L, sizeof(int *));
    r->kv_slots = calloc(c->L, sizeof(size_t)); r->v_slots = calloc(c->L, sizeof(size_t));
    return r;
}

static void mirror_free(mirror *r) {
    for (int l = 0; l < r->L; l++) { free(r->k[l]); free(r->v[l]); free(r->m[l]); free(r->mult[l]); }
    free(r->k); free(r->v); free(r->m); free(r->mult); free(r->kv_slots); free(r->v_slots);
    free(r);
}

/* resize: fresh arrays filled with a pattern (a relayout's old contents must not be relied on) */
static int m_resize(void *ctx, int layer, int region, size_t slots) {
    mirror *r = ctx;
    r->resizes++;
    if (region == 0) {
        free(r->k[layer]); free(r->v[layer]); free(r->mult[layer]);
        r->k[layer] = malloc(slots * r->row + 1); r->v[layer] = malloc(slots * r->row + 1);
        r->mult[layer] = malloc(slots * sizeof(int) + 1);
        memset(r->k[layer], 0xA5, slots * r->row); memset(r->v[layer], 0x5A, slots * r->row);
        memset(r->mult[layer], 0x77, slots * sizeof(int));
        r->kv_slots[layer] = slots;
    } else {
        free(r->m[layer]);
        r->m[layer] = malloc(slots * r->row + 1);
        memset(r->m[layer], 0x3C, slots * r->row);
        r->v_slots[layer] = slots;
    }
    return 0;
}

static int m_row(void *ctx, int layer, int array, size_t slot, const void *src, size_t bytes) {
    mirror *r = ctx;
    const size_t n = array == SKV_MIRROR_M ? r->v_slots[layer] : r->kv_slots[layer];
    if (slot >= n) return skv_error("mirror: slot %zu of layer %d beyond %zu", slot, layer, n);
    if (array == SKV_MIRROR_MULT) {
        if (bytes != sizeof(int)) return skv_error("mirror: mult row of %zu bytes", bytes);
        memcpy(r->mult[layer] + slot, src, bytes);
        return 0;
    }
    if (bytes != r->row) return skv_error("mirror: row of %zu bytes", bytes);
    char *a = array == SKV_MIRROR_K ? r->k[layer] : array == SKV_MIRROR_V ? r->v[layer] : r->m[layer];
    memcpy(a + slot * bytes, src, bytes);
    return 0;
}

static long msync_(skv_kvcache *c, mirror *r) {
    skv_kvmirror_sink k = {.resize = m_resize, .row = m_row, .ctx = r};
    long n = skv_kvmirror_sync(c, &k);
    if (n < 0) fail_msg("sync: %s", skv_last_error());
    return n;
}

/* used slots that differ between the cache and the mirror */
static long differences(const skv_kvcache *c, const mirror *r) {
    long bad = 0;
    const size_t row = r->row;
    for (int l = 0; l < c->L; l++)
        for (int j = 0; j < c->Hkv; j++) {
            const int ln = l * c->Hkv + j;
            for (int s = 0; s < c->n_kv[ln]; s++) {
                size_t sl = (size_t)c->off_kv[ln] + s;
                if (sl >= r->kv_slots[l]) { bad++; continue; }
                bad += memcmp((char *)c->hk[l] + sl * row, r->k[l] + sl * row, row) != 0 ||
                       memcmp((char *)c->hv[l] + sl * row, r->v[l] + sl * row, row) != 0 ||
                       c->mult[l][sl] != r->mult[l][sl];
            }
            for (int s = 0; s < c->n_v[ln]; s++) {
                size_t sl = (size_t)c->off_v[ln] + s;
                if (sl >= r->v_slots[l]) { bad++; continue; }
                bad += memcmp((char *)c->hm[l] + sl * row, r->m[l] + sl * row, row) != 0;
            }
        }
    return bad;
}

/* ---------------------------------------------------------------- sessions */

static skv_session *mk(const skv_model *m, const char *policy, double budget, int T_max, const int *map) {
    skv_session_opts o = test_self_pair_opts(m, policy, budget, map);
    o.T_max = T_max;
    skv_session *s = skv_session_new(m, &o);
    if (!s) fail_msg("session %s: %s", policy, skv_last_error());
    if (skv_kvlog_enable(s->kv)) fail_msg("log: %s", skv_last_error());
    return s;
}

/* prefill np tokens, then `steps` greedy steps, syncing every `every` steps (and at the end) */
static void run_case(const skv_model *m, const char *policy, double budget, int np, int steps, int every,
                     bool second_prefill) {
    const int V = m->cfg.vocab;
    int toks[256];
    test_prompt(toks, np, V, 7);
    int *map = test_identity_map(m);
    skv_session *s = mk(m, policy, budget, 64, map);
    mirror *r = mirror_new(s->kv);
    assert_int_equal(skv_session_prefill(s, toks, np), 0);
    long rows = msync_(s->kv, r), first = rows;
    assert_int_equal(differences(s->kv, r), 0);
    int checks = 1;
    for (int i = 0; i < steps; i++) {
        assert_int_equal(skv_session_step(s, test_argmax(skv_session_logits(s), V)), 0);
        if ((i + 1) % every == 0 || i + 1 == steps) {
            rows += msync_(s->kv, r);
            assert_int_equal(differences(s->kv, r), 0);
            checks++;
        }
    }
    if (second_prefill) {
        assert_int_equal(skv_session_prefill(s, toks, 40), 0);
        rows += msync_(s->kv, r);
        assert_int_equal(differences(s->kv, r), 0);
        assert_int_equal(skv_session_step(s, test_argmax(skv_session_logits(s), V)), 0);
        rows += msync_(s->kv, r);
        assert_int_equal(differences(s->kv, r), 0);
        checks += 2;
    }
    /* a lost log resynchronises everything */
    assert_int_equal(skv_session_step(s, test_argmax(skv_session_logits(s), V)), 0);
    s->kv->log->lost = true;
    rows += msync_(s->kv, r);
    assert_int_equal(differences(s->kv, r), 0);
    print_message("%-12s budget %.2f: n %d, %d syncs equal (prefill %ld rows, %ld in all, %ld resizes), "
                  "restores %d\n", policy, budget, s->n, checks + 1, first, rows, r->resizes, s->restores);
    mirror_free(r);
    skv_session_free(s);
    free(map);
}

static void test_smol_smallkv(void **st) {
    (void)st;
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    run_case(smol, "smallkv", 0.2, 100, 32, 1, false);
}

static void test_smol_h2o(void **st) {
    (void)st;
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    run_case(smol, "h2o", 0.2, 100, 32, 1, false);
}

static void test_tiny_all_policies(void **st) {
    (void)st;
    const char *pols[] = {"full", "streamingllm", "h2o", "snapkv", "pyramidkv", "adakv", "ems", "smallkv"};
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
        run_case(tiny, pols[p], 0.3, 120, 60, 3, true);
        run_case(tiny, pols[p], 0.3, 120, 20, 1, false);
    }
}

/* without a sync after a step the mirror is stale: the comparison sees it */
static void test_stale_detected(void **st) {
    (void)st;
    const int V = tiny->cfg.vocab;
    int toks[128];
    test_prompt(toks, 100, V, 3);
    int *map = test_identity_map(tiny);
    const char *pols[] = {"h2o", "smallkv"};
    for (int p = 0; p < 2; p++) {
        skv_session *s = mk(tiny, pols[p], 0.2, 64, map);
        mirror *r = mirror_new(s->kv);
        assert_int_equal(skv_session_prefill(s, toks, 100), 0);
        msync_(s->kv, r);
        assert_int_equal(differences(s->kv, r), 0);
        for (int i = 0; i < 3; i++) assert_int_equal(skv_session_step(s, test_argmax(skv_session_logits(s), V)), 0);
        long d = differences(s->kv, r);
        print_message("%s: %ld used slots differ after 3 unsynced steps\n", pols[p], d);
        assert_true(d > 0);
        msync_(s->kv, r);
        assert_int_equal(differences(s->kv, r), 0);
        mirror_free(r);
        skv_session_free(s);
    }
    free(map);
}

/* logging changes nothing: the same session with and without a log gives the same logits */
static void test_log_is_passive(void **st) {
    (void)st;
    const int V = tiny->cfg.vocab;
    int toks[128];
    test_prompt(toks, 90, V, 11);
    int *map = test_identity_map(tiny);
    skv_session_opts o = test_self_pair_opts(tiny, "smallkv", 0.25, map);
    o.T_max = 32;
    skv_session *a = skv_session_new(tiny, &o), *b = skv_session_new(tiny, &o);
    assert_non_null(a); assert_non_null(b);
    assert_int_equal(skv_kvlog_enable(b->kv), 0);
    assert_int_equal(skv_session_prefill(a, toks, 90), 0);
    assert_int_equal(skv_session_prefill(b, toks, 90), 0);
    for (int i = 0; i < 20; i++) {
        assert_memory_equal(skv_session_logits(a), skv_session_logits(b), sizeof(float) * V);
        int t = test_argmax(skv_session_logits(a), V);
        assert_int_equal(skv_session_step(a, t), 0);
        assert_int_equal(skv_session_step(b, t), 0);
    }
    assert_memory_equal(skv_session_logits(a), skv_session_logits(b), sizeof(float) * V);
    skv_session_free(a);
    skv_session_free(b);
    free(map);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smol_smallkv),
        cmocka_unit_test(test_smol_h2o),
        cmocka_unit_test(test_tiny_all_policies),
        cmocka_unit_test(test_stale_detected),
        cmocka_unit_test(test_log_is_passive),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
