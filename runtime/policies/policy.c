/* policy.c: the policy registry (name -> constructor), defaults, and the selection
 * building blocks every score-based policy shares. */
#include "policy.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void skv_policy_opts_default(skv_policy_opts *o) {
    memset(o, 0, sizeof *o);
    o->sinks = 4;
    o->window = 32;
    o->pool_kernel = 7;
    o->heavy_frac = 0.5f;
    o->pyramid_beta = 20.0f;
    o->ada_alpha = 0.2f;
    o->ems_gamma = 4.0f;
    o->ems_tau = 0.6f;
    o->ems_window = 0;
    o->reduce = SKV_REDUCE_SUM;
    o->split_crit = 2; o->split_recent = 1; o->split_marg = 2;
    o->slm_score = SKV_SLM_SCORE_NOW;   /* measured best (docs/results.md section 2); ACC is the method's text */
    o->adapt_crit_mass = 0.8f; o->adapt_marg_mass = 0.95f;
    o->combine = SKV_COMBINE_RENORM;   /* measured best: docs/results.md */
}

static const struct { const char *name; int (*init)(skv_policy *); } registry[] = {
    {"full", skv_policy_init_full},
    {"streamingllm", skv_policy_init_streamingllm},
    {"h2o", skv_policy_init_h2o},
    {"snapkv", skv_policy_init_snapkv},
    {"pyramidkv", skv_policy_init_pyramidkv},
    {"adakv", skv_policy_init_adakv},
    {"ems", skv_policy_init_ems},
    {"smallkv", skv_policy_init_smallkv},
};

static const char *const slm_score_names[] = {"acc", "now", "mean"};

const char *skv_slm_score_name(skv_slm_score sc) {
    return (unsigned)sc < sizeof slm_score_names / sizeof *slm_score_names ? slm_score_names[sc] : "?";
}

int skv_slm_score_parse(const char *name) {
    for (int i = 0; name && i < (int)(sizeof slm_score_names / sizeof *slm_score_names); i++)
        if (!strcmp(name, slm_score_names[i])) return i;
    return -1;
}

const char *skv_policy_names(void) { return "full, streamingllm, h2o, snapkv, pyramidkv, adakv, ems, smallkv"; }

skv_policy *skv_policy_new(const char *name, const skv_policy_opts *o, int L, int H, int Hkv) {
    if (!name || L < 1 || H < 1 || Hkv < 1 || H % Hkv) {
        skv_error("skv_policy_new: bad arguments (L %d, H %d, Hkv %d)", L, H, Hkv);
        return NULL;
    }
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        if (strcmp(registry[i].name, name)) continue;
        skv_policy *p = skv_calloc(1, sizeof *p, "policy");
        if (!p) return NULL;
        p->name = registry[i].name;
        if (o) p->o = *o; else skv_policy_opts_default(&p->o);
        p->L = L; p->H = H; p->Hkv = Hkv;
        if (registry[i].init(p)) {
            skv_error_prefix("policy %s", name);
            skv_policy_free(p);
            return NULL;
        }
        return p;
    }
    skv_error("unknown KV policy '%s' (known: %s)", name, skv_policy_names());
    return NULL;
}

skv_policy *skv_policy_fork(const skv_policy *p) {
    skv_policy *q = skv_malloc(sizeof *q, "policy");
    if (!q) return NULL;
    *q = *p;
    q->st = NULL;
    if (p->fork && p->fork(p, q)) { free(q); return NULL; }
    return q;
}

void skv_policy_free(skv_policy *p) {
    if (!p) return;
    if (p->free_state) p->free_state(p);
    free(p);
}

int skv_budget_tokens(double budget, int n) {
    double b = floor(budget + 1e-9);
    if (b < 1) b = 1;
    if (b > n) b = n;
    return (int)b;
}

void skv_select_all(skv_select_io *io) {
    for (int i = 0; i < io->n; i++) io->kv_pos[i] = i;
    io->n_kv = io->n;
    io->n_v = 0;
}

void skv_select_scored(skv_select_io *io, const float *score, int keep, int recent, bool permanent, int sinks) {
    const int n = io->n;
    io->n_v = 0;
    if (keep >= n) { skv_select_all(io); return; }
    if (keep < 0) keep = 0;
    int s = sinks < keep ? sinks : keep;
    if (s > n) s = n;
    int r = recent < keep - s ? recent : keep - s;
    if (r < 0) r = 0;
    int rlo = n - r;               /* recent window [rlo, n) */
    if (rlo < s) rlo = s;
    int nk = 0;
    for (int p = 0; p < s; p++) io->kv_pos[nk++] = p;
    /* candidates in [s, rlo) */
    int nc = 0;
    if (permanent) {
        unsigned char *m = io->mark;
        memset(m + s, 0, (size_t)(rlo - s));
        const int *P = skv_kvcache_hot_pos_kv(io->cache, io->layer, io->kvh);
        int nh = io->cache->n_kv[io->lane];
        for (int i = 0; i < nh; i++) if (P[i] >= s && P[i] < rlo) m[P[i]] = 1;
        for (int p = s; p < rlo; p++) if (m[p] || p >= io->n0) io->itmp[nc++] = p;
    } else {
        for (int p = s; p < rlo; p++) io->itmp[nc++] = p;
    }
    int want = keep - s - (n - rlo);
    int got = skv_topk(score, io->itmp, nc, want);
    skv_sort_ints(io->itmp, got);
    for (int i = 0; i < got; i++) io->kv_pos[nk++] = io->itmp[i];
    for (int p = rlo; p < n; p++) io->kv_pos[nk++] = p;
    io->n_kv = nk;
}
