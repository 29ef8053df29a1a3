/* policy.c: a policy instance's life (new from a spec, fork, free) and the selection
 * building blocks every score-based policy shares. The registry and the spec grammar are in
 * registry.c and options.c. */
#include "policy.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const skv_reduce_names[] = {"sum", "mean", "max", NULL};

skv_policy *skv_policy_new(const skv_policy_spec *spec, const skv_policy_env *env, int L, int H, int Hkv) {
    if (!spec || !spec->desc || !env || L < 1 || H < 1 || Hkv < 1 || H % Hkv) {
        skv_error("skv_policy_new: bad arguments (L %d, H %d, Hkv %d)", L, H, Hkv);
        return NULL;
    }
    const skv_policy_desc *d = spec->desc;
    skv_policy *p = skv_calloc(1, sizeof *p, "policy");
    if (!p) return NULL;
    p->desc = d;
    p->name = d->name;
    p->L = L; p->H = H; p->Hkv = Hkv;
    p->combine = SKV_COMBINE_SUM;
    p->uses_cold = (d->caps & SKV_POLICY_COLD_TIER) != 0;
    if (!(p->opts = skv_malloc(d->opts_size ? d->opts_size : 1, "policy options"))) { free(p); return NULL; }
    memcpy(p->opts, spec->opts, d->opts_size);
    if (d->init(p, env)) {
        skv_error_prefix("policy %s", d->name);
        skv_policy_free(p);
        return NULL;
    }
    return p;
}

skv_policy *skv_policy_new_str(const char *spec, const skv_policy_env *env, int L, int H, int Hkv) {
    skv_policy_spec s;
    if (skv_policy_spec_parse(spec, &s)) return NULL;
    return skv_policy_new(&s, env, L, H, Hkv);
}

skv_policy *skv_policy_fork(const skv_policy *p) {
    skv_policy *q = skv_malloc(sizeof *q, "policy");
    if (!q) return NULL;
    *q = *p;
    q->st = NULL;
    if (!(q->opts = skv_malloc(p->desc->opts_size ? p->desc->opts_size : 1, "policy options"))) { free(q); return NULL; }
    memcpy(q->opts, p->opts, p->desc->opts_size);
    if (p->fork && p->fork(p, q)) { free(q->opts); free(q); return NULL; }
    return q;
}

void skv_policy_free(skv_policy *p) {
    if (!p) return;
    if (p->free_state) p->free_state(p);
    free(p->opts);
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
