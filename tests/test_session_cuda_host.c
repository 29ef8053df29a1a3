/* test_session_cuda_host.c: the host side of the GPU decode of a compressed-cache session
 * (runtime/backend/session_cuda.c), run on the CPU against a fake device.
 *
 * runtime/backend/session_cuda.c is compiled here a second time, with SKV_CUDA set and every
 * backend / device-forward function it calls renamed to a fake defined below: "device"
 * memory is host memory, copies are memcpy, the copy queue performs its row scatter at
 * once, skv_cuda_compensate is the CPU's skv_compensate, and the device forward passes are
 * the CPU forward (skv_forward) with the device hook as its attention hook. Everything
 * else is the real code: the per-layer hook (download, cold write, selection, marginal
 * packing, slot-score offsets, on_step), the mirror sink (resizes, row staging, scatter
 * entries with device addresses), the attach / step / free life cycle and the SLM step.
 * What this cannot check is the CUDA side itself (kernels, streams, events, pinned memory):
 * tests/test_cuda_session.c does that on a GPU.
 *   - SmolLM2 as its own SLM, SmallKV and H2O at 20 %, and the tiny model with every policy
 *     the device path takes: the fake-GPU session's logits equal the CPU session's exactly
 *     (same arithmetic on the same bytes) for every step, and the "device" hot tier equals
 *     the host's after every step (skv_session_cuda_verify);
 *   - an allocation failure inside a step is reported, the session refuses to continue,
 *     and freeing it leaks nothing (ASan build). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the fake device: every name session_cuda.c uses from backend.h / forward_cuda.h */
#define skv_cuda_compensate fake_compensate
#define skv_cuda_copyq_free fake_copyq_free
#define skv_cuda_copyq_new fake_copyq_new
#define skv_cuda_copyq_scatter fake_copyq_scatter
#define skv_cuda_copyq_wait_host fake_copyq_wait_host
#define skv_cuda_download fake_download
#define skv_cuda_upload fake_upload
#define skv_cuda_memset fake_memset
#define skv_cuda_malloc fake_malloc
#define skv_cuda_free fake_free
#define skv_cuda_host_alloc fake_host_alloc
#define skv_cuda_host_free fake_host_free
#define skv_cuda_sync fake_sync
#define skv_cuda_forward fake_forward
#define skv_cuda_forward_dev fake_forward_dev
#define skv_cuda_state_free fake_state_free
#define skv_cuda_state_load fake_state_load
#define skv_cuda_state_new fake_state_new
#define skv_cuda_state_new_nocache fake_state_new_nocache
/* and session_cuda.c's own exports, so that they do not clash with the library's copy */
#define skv_session_cuda_check fake_session_check
#define skv_session_cuda_new fake_session_new
#define skv_session_cuda_step fake_session_step
#define skv_session_cuda_free fake_session_free
#define skv_session_cuda_verify fake_session_verify
#ifndef SKV_CUDA
#define SKV_CUDA 1
#endif
#include "runtime/backend/session_cuda.c"

#include "kernels/cpu/compensate.h"
#include "tests/support/tiny_model.h"
#include "tests/support/test_env.h"
#include "tests/support/test_util.h"

/* ---------------------------------------------------------------- fake device */

static long allocs_left = -1;   /* >= 0: fail the allocation after this many */

static bool alloc_ok(void) {
    if (allocs_left < 0) return true;
    if (allocs_left == 0) return false;
    allocs_left--;
    return true;
}

void *fake_malloc(size_t bytes, const char *what) {
    if (bytes == 0) return NULL;
    if (!alloc_ok()) { skv_error("fake device: out of memory allocating %zu bytes (%s)", bytes, what); return NULL; }
    return malloc(bytes);
}
void fake_free(void *p) { free(p); }
void *fake_host_alloc(size_t bytes, const char *what) { return fake_malloc(bytes, what); }
void fake_host_free(void *p) { free(p); }
int fake_upload(void *dst, const void *src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); return 0; }
int fake_download(void *dst, const void *src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); return 0; }
int fake_memset(void *dst, int byte, size_t bytes) { if (bytes) memset(dst, byte, bytes); return 0; }
int fake_sync(void) { return 0; }

struct skv_cuda_copyq { long batches, rows; };
skv_cuda_copyq *fake_copyq_new(void) {
    if (alloc_ok()) return calloc(1, sizeof(skv_cuda_copyq));
    skv_error("fake device: out of memory (copy queue)");
    return NULL;
}
void fake_copyq_free(skv_cuda_copyq *q) { free(q); }
int fake_copyq_wait_host(skv_cuda_copyq *q) { (void)q; return 0; }
int fake_copyq_scatter(skv_cuda_copyq *q, const skv_cuda_row_copy *rows, int n, const void *data, size_t data_bytes) {
    for (int i = 0; i < n; i++) {
        if ((size_t)rows[i].src_off + rows[i].bytes > data_bytes) return skv_error("fake scatter: row %d outside the data", i);
        memcpy((void *)(uintptr_t)rows[i].dst, (const char *)data + rows[i].src_off, rows[i].bytes);
    }
    q->batches++;
    q->rows += n;
    return 0;
}

int fake_compensate(float *out, const float *q, const skv_comp_args *a) {
    float *scr = malloc(((size_t)a->n_hot + 1) * sizeof(float));
    if (!scr) return skv_error("fake compensate: out of memory");
    skv_comp_args b = *a;
    b.scratch = scr;
    skv_compensate(out, q, &b);
    free(scr);
    return 0;
}

/* a "device model" is the host model; a device state wraps a CPU forward state */
struct skv_cuda_model { const skv_model *m; };

static skv_cuda_state *wrap(const skv_cuda_model *dm, int S_cap, int T_max, bool f16) {
    if (!alloc_ok()) { skv_error("fake device: out of memory (state)"); return NULL; }
    skv_cuda_state *s = calloc(1, sizeof *s);
    skv_state *c = skv_state_new(dm->m, S_cap, T_max, f16);
    if (!s || !c) { free(s); skv_state_free(c); return NULL; }
    s->dm = dm; s->m = dm->m; s->S_cap = S_cap; s->T_max = c->T_max; s->kv_f16 = f16;
    s->logits = c->logits;
    s->dev = c;
    return s;
}
skv_cuda_state *fake_state_new(const skv_cuda_model *dm, int S_cap, int T_max, bool kv_f16) {
    return wrap(dm, S_cap, T_max, kv_f16);
}
skv_cuda_state *fake_state_new_nocache(const skv_cuda_model *dm, int S_cap, int T_max) {
    return wrap(dm, S_cap, T_max, false);
}
void fake_state_free(skv_cuda_state *s) {
    if (!s) return;
    skv_state_free(s->dev);
    free(s);
}
int fake_state_load(skv_cuda_state *s, const skv_state *cpu, int n_layers) {
    skv_state *c = s->dev;
    const skv_config *cf = &s->m->cfg;
    if (cpu->S_cap != c->S_cap || cpu->kv_f16 != c->kv_f16) return skv_error("fake load: caches differ");
    const size_t per = (size_t)cf->n_kv_head * c->S_cap * cf->head_dim * (c->kv_f16 ? 2 : 4);
    for (int l = 0; l < n_layers; l++) { memcpy(c->k[l], cpu->k[l], per); memcpy(c->v[l], cpu->v[l], per); }
    s->n_past = c->n_past = cpu->n_past;
    return 0;
}
int fake_forward(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts) {
    skv_state *c = s->dev;
    c->n_past = s->n_past;
    if (skv_forward(c, tokens, T, opts)) return -1;
    s->n_past = c->n_past;
    return 0;
}
int fake_forward_dev(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn attn,
                     void *ctx) {
    skv_fwd_opts o = *opts;
    o.attn = attn;       /* the same signature: host pointers stand for device ones */
    o.attn_ctx = ctx;
    return fake_forward(s, tokens, T, &o);
}

/* ---------------------------------------------------------------- tests */

static skv_model *tiny, *smol;

static int setup(void **st) { (void)st; return test_models_load(&tiny, &smol, SKV_ARCH_LLAMA, 42, "scuda"); }
static int teardown(void **st) { (void)st; test_models_free(&tiny, &smol); return 0; }

static skv_session *mk(const skv_model *m, const char *policy, double budget, const int *map, bool f16) {
    skv_session_opts o = test_self_pair_opts(m, policy, budget, map);
    o.kv_f16 = f16;
    skv_session *s = skv_session_new(m, &o);
    if (!s) fail_msg("session %s: %s", policy, skv_last_error());
    return s;
}

static void same_as_cpu(const skv_model *m, const char *policy, double budget, int np, int steps, bool f16) {
    const int V = m->cfg.vocab;
    int toks[256];
    test_prompt(toks, np, V, 31);
    int *map = test_identity_map(m);
    skv_session *cpu = mk(m, policy, budget, map, f16), *gpu = mk(m, policy, budget, map, f16);
    assert_int_equal(skv_session_prefill(cpu, toks, np), 0);
    assert_int_equal(skv_session_prefill(gpu, toks, np), 0);
    skv_cuda_model dm = {.m = m};
    skv_session_cuda *g = fake_session_new(gpu, &dm, &dm);
    if (!g) fail_msg("%s: attach: %s", policy, skv_last_error());
    assert_int_equal(fake_session_verify(g), 0);
    for (int i = 0; i < steps; i++) {
        int t = test_argmax(skv_session_logits(cpu), V);
        assert_int_equal(skv_session_step(cpu, t), 0);
        if (fake_session_step(g, t)) fail_msg("%s step %d: %s", policy, i, skv_last_error());
        if (memcmp(skv_session_logits(cpu), skv_session_logits(gpu), sizeof(float) * V) != 0)
            fail_msg("%s step %d: logits differ from the CPU session", policy, i);
        long bad = fake_session_verify(g);
        if (bad != 0) fail_msg("%s step %d: %ld hot slots differ on the device", policy, i, bad);
    }
    assert_int_equal(gpu->n, cpu->n);
    assert_int_equal(gpu->restores, cpu->restores);
    print_message("%-12s %s: %d steps equal to the CPU session; %ld row batches, %ld rows uploaded, restores %d\n",
                  policy, f16 ? "f16" : "f32", steps, g->q->batches, g->q->rows, gpu->restores);
    fake_session_free(g);
    skv_session_free(cpu);
    skv_session_free(gpu);
    free(map);
}

static void test_smol_smallkv(void **st) {
    (void)st;
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    same_as_cpu(smol, "smallkv", 0.2, 100, 32, true);
}

static void test_smol_h2o(void **st) {
    (void)st;
    if (!smol) TEST_SKIP_MODEL(TEST_SMOL);
    same_as_cpu(smol, "h2o", 0.2, 100, 32, true);
}

static void test_tiny_policies(void **st) {
    (void)st;
    const char *pols[] = {"full", "streamingllm", "h2o", "snapkv", "pyramidkv", "adakv", "smallkv"};
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
        same_as_cpu(tiny, pols[p], 0.3, 120, 60, true);
        same_as_cpu(tiny, pols[p], 0.3, 90, 30, false);
    }
}

/* an allocation that fails inside a step: reported, the session stops, nothing leaks */
static void test_failure_in_step(void **st) {
    (void)st;
    const int V = tiny->cfg.vocab;
    int toks[128];
    test_prompt(toks, 100, V, 5);
    int *map = test_identity_map(tiny);
    const char *pols[] = {"h2o", "smallkv", "full"};
    for (int p = 0; p < 3; p++)
        for (long k = 0; k < 6; k++) {
            skv_session *s = mk(tiny, pols[p], 0.3, map, true);
            assert_int_equal(skv_session_prefill(s, toks, 100), 0);
            skv_cuda_model dm = {.m = tiny};
            skv_session_cuda *g = fake_session_new(s, &dm, &dm);
            assert_non_null(g);
            allocs_left = k;   /* the k-th allocation from here fails */
            int rc = 0, i = 0;
            for (; i < 40 && rc == 0; i++) rc = fake_session_step(g, test_argmax(skv_session_logits(s), V));
            allocs_left = -1;
            if (rc) {
                if (k == 0) print_message("%s: step %d failed: %s\n", pols[p], i, skv_last_error());
                if (!strstr(skv_last_error(), "out of memory")) fail_msg("step %d: %s", i, skv_last_error());
                assert_int_equal(fake_session_step(g, 1), -1);
                assert_non_null(strstr(skv_last_error(), "earlier step failed"));
            }
            fake_session_free(g);
            skv_session_free(s);
        }
    /* a session that advanced on the CPU after attaching is refused */
    {
        skv_session *s = mk(tiny, "smallkv", 0.3, map, true);
        assert_int_equal(skv_session_prefill(s, toks, 100), 0);
        skv_cuda_model dm = {.m = tiny};
        skv_session_cuda *g = fake_session_new(s, &dm, &dm);
        assert_non_null(g);
        assert_int_equal(fake_session_step(g, 7), 0);
        assert_int_equal(skv_session_prefill(s, toks, 10), 0);
        assert_int_equal(fake_session_step(g, 7), -1);
        print_message("expected: %s\n", skv_last_error());
        assert_non_null(strstr(skv_last_error(), "advanced on the CPU"));
        fake_session_free(g);
        skv_session_free(s);
    }
    /* and while attaching */
    for (long k = 0; k < 8; k++) {
        skv_session *s = mk(tiny, "smallkv", 0.3, map, true);
        assert_int_equal(skv_session_prefill(s, toks, 100), 0);
        skv_cuda_model dm = {.m = tiny};
        allocs_left = k;
        skv_session_cuda *g = fake_session_new(s, &dm, &dm);
        allocs_left = -1;
        if (!g) {
            if (!strstr(skv_last_error(), "out of memory")) fail_msg("attach, allocation %ld fails: %s", k, skv_last_error());
            assert_null(s->kv->log);   /* a failed attach leaves no log behind */
        }
        fake_session_free(g);
        skv_session_free(s);
    }
    free(map);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smol_smallkv),
        cmocka_unit_test(test_smol_h2o),
        cmocka_unit_test(test_tiny_policies),
        cmocka_unit_test(test_failure_in_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
