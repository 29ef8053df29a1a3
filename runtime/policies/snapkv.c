/* snapkv.c: SnapKV, and the machinery PyramidKV / Ada-KV share with it.
 * At the end of a prefill the last w queries' attention rows are summed (the session
 * computes them: obs), reduced over the group, max-pooled along the keys (kernel 7,
 * padding 3) and the top (B - w) prompt tokens plus the window (and the sinks) are kept
 * per KV head. Decoding appends:
 *   decode=keep (default, as published): every generated token joins the hot set and
 *     nothing more is evicted until the next prefill, so the hot tier grows past the budget
 *     by one token per step (the memory report shows the bytes actually used);
 *   decode=evict: each lane stays within its budget; generated tokens score +inf, so the
 *     lowest-scored prompt tokens go first (then the oldest generated ones).
 * Eviction is permanent in both. */
#include "snapkv.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const skv_snap_decode_names[] = {"keep", "evict", NULL};

static const skv_opt_desc snap_opt_table[] = {
    SKV_OPT_POOL,
    SKV_OPT_REDUCE(skv_snap_opts),
    SKV_OPT_SINKS(skv_snap_opts),
    SKV_OPT_WINDOW(skv_snap_opts),
    SKV_OPT_DECODE,
};

int skv_snap_prefill_scores(skv_policy *p, const skv_prefill_info *pi) {
    skv_snap_state *s = p->st;
    const skv_snap_opts *o = p->opts;
    if (!pi->obs) return skv_error("%s: prefill without the observation-window sums", p->name);
    if (skv_lanescore_reserve(&s->score, pi->n)) return -1;
    const int g = p->H / p->Hkv, n = pi->n;
    int npre = n - o->window;
    if (npre < 0) npre = 0;
    float *tmp = skv_malloc(((size_t)npre + 1) * sizeof(float), "snapkv scores");
    if (!tmp) return -1;
    for (int j = 0; j < p->Hkv; j++) {
        int ln = pi->layer * p->Hkv + j;
        float *sc = s->score.s[ln];
        skv_reduce_group(tmp, pi->obs + (size_t)j * g * pi->stride, g, (size_t)pi->stride, npre, (skv_reduce)o->reduce);
        skv_maxpool1d(sc, tmp, npre, o->pool / 2);
        for (int k = npre; k < n; k++) sc[k] = INFINITY;
        s->filled[ln] = n;
        s->fresh[ln] = 1;
    }
    free(tmp);
    return 0;
}

static int snap_prefill(skv_policy *p, const skv_prefill_info *pi) {
    return skv_snap_prefill_scores(p, pi);
}

static int snap_select(skv_policy *p, skv_select_io *io) {
    skv_snap_state *s = p->st;
    const skv_snap_opts *o = p->opts;
    if (skv_lanescore_reserve(&s->score, io->n)) return -1;
    float *sc = s->score.s[io->lane];
    for (int k = s->filled[io->lane]; k < io->n; k++) sc[k] = INFINITY;
    if (s->filled[io->lane] < io->n) s->filled[io->lane] = io->n;
    if (o->decode == SKV_SNAP_KEEP && !s->fresh[io->lane]) {
        skv_select_keep_hot(io);   /* decoding appends */
        return 0;
    }
    s->fresh[io->lane] = 0;
    int keep = skv_budget_tokens(io->budget, io->n);
    skv_select_scored(io, sc, keep, o->window, true, o->sinks);
    return 0;
}

static double snap_share(const skv_policy *p, int layer, int kvh, double budget) {
    const skv_snap_state *s = p->st;
    double w = ((const skv_snap_opts *)p->opts)->window;
    if (budget <= w || budget <= 0) return 1.0;
    return (w + s->share[layer * p->Hkv + kvh] * (budget - w)) / budget;
}

static int snap_fork(const skv_policy *src, skv_policy *dst) {
    const skv_snap_state *a = src->st;
    const int nl = src->L * src->Hkv;
    skv_snap_state *b = skv_calloc(1, sizeof *b, "snapkv state");
    if (!b) return -1;
    b->filled = skv_malloc((size_t)nl * sizeof(int), "snapkv state");
    b->share = skv_malloc((size_t)nl * sizeof(double), "snapkv state");
    b->fresh = skv_malloc((size_t)nl, "snapkv state");
    if (!b->filled || !b->share || !b->fresh || skv_lanescore_copy(&b->score, &a->score)) {
        free(b->filled); free(b->share); free(b->fresh); free(b);
        return -1;
    }
    memcpy(b->filled, a->filled, (size_t)nl * sizeof(int));
    memcpy(b->fresh, a->fresh, (size_t)nl);
    memcpy(b->share, a->share, (size_t)nl * sizeof(double));
    dst->st = b;
    return 0;
}

static void snap_free(skv_policy *p) {
    skv_snap_state *s = p->st;
    if (!s) return;
    skv_lanescore_free(&s->score);
    free(s->filled); free(s->share); free(s->fresh); free(s);
    p->st = NULL;
}

int skv_snap_init(skv_policy *p) {
    const int nl = p->L * p->Hkv;
    skv_snap_state *s = skv_calloc(1, sizeof *s, "snapkv state");
    if (!s) return -1;
    s->filled = skv_calloc((size_t)nl, sizeof(int), "snapkv state");
    s->share = skv_malloc((size_t)nl * sizeof(double), "snapkv state");
    s->fresh = skv_calloc((size_t)nl, 1, "snapkv state");
    if (!s->filled || !s->share || !s->fresh || skv_lanescore_init(&s->score, nl)) {
        free(s->filled); free(s->share); free(s->fresh); free(s);
        return -1;
    }
    for (int i = 0; i < nl; i++) s->share[i] = 1.0;
    p->st = s;
    p->obs_rows = ((const skv_snap_opts *)p->opts)->window;
    p->on_prefill = snap_prefill;
    p->select = snap_select;
    p->lane_share = snap_share;
    p->fork = snap_fork;
    p->free_state = snap_free;
    return 0;
}

static int snap_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    return skv_snap_init(p);
}

const skv_policy_desc skv_policy_snapkv = {
    .name = "snapkv",
    .summary = "the prompt compressed once by the last window's pooled attention; generated tokens kept (decode=evict: held to the budget)",
    .keeps = "At the end of each prefill, the sinks, the observation window (the last `window` prompt "
             "tokens) and the prompt tokens that the window's max-pooled attention ranks highest; with "
             "`decode=keep` (the default, as published) every generated token is kept as well, so the "
             "hot tier grows past the budget, while `decode=evict` holds the budget by evicting the "
             "lowest-scored tokens. Eviction is permanent.",
    .choose = "The published prompt-compression baseline, for answers short next to the prompt, since "
              "as published its hot tier grows by one token per generated token. Held to the budget "
              "(`decode=evict`) it does no better than StreamingLLM (docs/results.md section 9).",
    .caps = SKV_POLICY_GPU,
    .opts = snap_opt_table,
    .n_opts = sizeof snap_opt_table / sizeof *snap_opt_table,
    .opts_size = sizeof(skv_snap_opts),
    .init = snap_init,
};
