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

void skv_select_keep_hot(skv_select_io *io) {
    const int nh = io->cache->n_kv[io->lane];
    memcpy(io->kv_pos, skv_kvcache_hot_pos_kv(io->cache, io->layer, io->kvh), (size_t)nh * sizeof(int));
    int nk = nh;
    for (int k = io->n0 > 0 ? io->n0 : 0; k < io->n; k++) io->kv_pos[nk++] = k;
    io->n_kv = nk;
    io->n_v = 0;
    skv_sort_ints(io->kv_pos, nk);
}

void skv_select_all(skv_select_io *io) {
    for (int i = 0; i < io->n; i++) io->kv_pos[i] = i;
    io->n_kv = io->n;
    io->n_v = 0;
}

/* skv_select_scored's rule into out (n_out), over the positions alive marks (NULL: all) */
static void select_alive(skv_select_io *io, int *out, int *n_out, const float *score, int keep, int recent,
                         const unsigned char *alive, int sinks);

void skv_select_scored(skv_select_io *io, const float *score, int keep, int recent, bool permanent, int sinks) {
    /* score NULL: no ranking; slots beyond the sinks and the recent window go to the most
     * recent candidates */
    const int n = io->n;
    io->n_v = 0;
    if (keep >= n) { skv_select_all(io); return; }
    /* permanent: a position offered before (< n0) that is no longer hot is gone for good.
     * That can be a sink or a recent position too: while the budget holds fewer tokens than
     * the sinks (a short prompt) the sink count grows with the sequence, over positions
     * that an earlier step evicted; their slots go to the candidates. */
    unsigned char *m = NULL;
    if (permanent) {
        m = io->mark;
        memset(m, 0, (size_t)n);
        const int *P = skv_kvcache_hot_pos_kv(io->cache, io->layer, io->kvh);
        const int nh = io->cache->n_kv[io->lane];
        for (int i = 0; i < nh; i++) if (P[i] >= 0 && P[i] < n) m[P[i]] = 1;
        for (int p = io->n0 > 0 ? io->n0 : 0; p < n; p++) m[p] = 1;
    }
    select_alive(io, io->kv_pos, &io->n_kv, score, keep, recent, m, sinks);
}

void skv_select_scored_alive(skv_select_io *io, int *out, int *n_out, const float *score, int keep, int recent,
                             const unsigned char *alive, int sinks) {
    if (keep >= io->n) {
        for (int i = 0; i < io->n; i++) out[i] = i;
        *n_out = io->n;
        return;
    }
    select_alive(io, out, n_out, score, keep, recent, alive, sinks);
}

static void select_alive(skv_select_io *io, int *out, int *n_out, const float *score, int keep, int recent,
                         const unsigned char *alive, int sinks) {
    const int n = io->n;
    const bool permanent = alive != NULL;
    const unsigned char *m = alive;
    if (keep < 0) keep = 0;
    int s = sinks < keep ? sinks : keep;
    if (s > n) s = n;
    int r = recent < keep - s ? recent : keep - s;
    if (r < 0) r = 0;
    int rlo = n - r;               /* recent window [rlo, n) */
    if (rlo < s) rlo = s;
    int nk = 0;
    for (int p = 0; p < s; p++) if (!permanent || m[p]) out[nk++] = p;
    int nr = 0;
    for (int p = rlo; p < n; p++) nr += !permanent || m[p];
    /* candidates in [s, rlo) */
    int nc = 0;
    for (int p = s; p < rlo; p++) if (!permanent || m[p]) io->itmp[nc++] = p;
    int want = keep - nk - nr;
    if (want > nc) want = nc;
    if (want > 0 && !score) {   /* no scores (StreamingLLM): the most recent candidates */
        for (int i = nc - want; i < nc; i++) out[nk++] = io->itmp[i];
    } else if (want > 0) {
        int got = skv_topk(score, io->itmp, nc, want);
        skv_sort_ints(io->itmp, got);
        for (int i = 0; i < got; i++) out[nk++] = io->itmp[i];
    }
    for (int p = rlo; p < n; p++) if (!permanent || m[p]) out[nk++] = p;
    *n_out = nk;
}
