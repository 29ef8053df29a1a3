/* smallkv.c: SmallKV (method.md section 5). Per lane (LLM layer, KV head) every
 * decode step:
 *   score[k]  = sum over the group's query heads i of the mapped SLM head f(i)'s
 *               attention on token k in this step's row (score=now, the default), or
 *               accumulated over the SLM's full history (score=acc, the method's text),
 *               or that sum per query row that saw k (score=mean)
 *               (--no-saliency: the LLM's own accumulated scores, H2O-style)
 *   K+V       = sinks + recent window + critical (top by score outside the window)
 *   V only    = marginal (the next tokens by score)
 *   split     critical : recent : marginal = 2 : 1 : 2 in tokens (cost 2 + 1 + 1), recent
 *             and marginal shrink first when the budget is small; or adaptive (critical =
 *             the fewest tokens with 80% of the score mass, marginal up to 95%).
 * Newly critical tokens are restored from the cold tier (by the session's apply); with
 * --no-saliency only tokens still hot are candidates (no restore).
 * The compensation weights (marginal hook): pm[i][k] = the SLM head f(i)'s current
 * attention on marginal token k, w[i] = its mass on the K+V tokens.
 * While no mapping is set (online matching pending) the policy keeps everything. */
#include "policy.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int *map;               /* [L*H] or NULL */
    skv_slm_view v;
    bool attached;
    skv_lanescore acc;      /* --no-saliency: the LLM's own scores */
} skv_state_smallkv;

void skv_smallkv_split(const skv_policy_opts *o, double B, int *crit, int *recent, int *marg) {
    double c = o->split_crit, r = o->split_recent, m = o->no_marginal ? 0 : o->split_marg;
    double x = B / (c + r + m / 2);
    int Bt = (int)floor(B + 1e-9);
    int cr = (int)floor(c * x + 1e-9), rc = (int)floor(r * x + 1e-9), mg = (int)floor(m * x + 1e-9);
    int cmin = o->sinks + 1 < Bt ? o->sinks + 1 : Bt;
    if (rc < 1) rc = 1;
    if (cr < cmin) cr = cmin;
    if (cr + rc > Bt) {                 /* recent shrinks first, then critical */
        rc = Bt - cr;
        if (rc < 1) rc = Bt >= 2 ? 1 : 0;
        cr = Bt - rc;
    }
    int room = (int)floor(2 * (B - cr - rc) + 1e-9);   /* marginal takes what is left */
    if (mg > room) mg = room;
    if (mg < 0) mg = 0;
    *crit = cr; *recent = rc; *marg = mg;
}

static const float *slm_row(const skv_state_smallkv *s, const float *const *arr, int f) {
    int l = f / s->v.slm_heads, h = f % s->v.slm_heads;
    return arr[l] + (size_t)h * s->v.stride;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static int sk_select(skv_policy *p, skv_select_io *io) {
    skv_state_smallkv *s = p->st;
    const int n = io->n, g = p->H / p->Hkv;
    io->n_v = 0;
    if (!s->map || !s->attached || io->budget >= n) { skv_select_all(io); return 0; }
    /* scores */
    float *score;
    if (p->o.no_saliency) {
        if (skv_lanescore_reserve(&s->acc, n)) return -1;
        score = s->acc.s[io->lane];
    } else {
        score = io->ftmp;
        memset(score, 0, (size_t)n * sizeof(float));
        const float *const *src = p->o.slm_score == SKV_SLM_SCORE_NOW ? s->v.lastrow : s->v.colsum;
        for (int t = 0; t < g; t++) {
            int h = io->kvh * g + t;
            const float *row = slm_row(s, src, s->map[io->layer * p->H + h]);
            if (p->o.reduce == SKV_REDUCE_MAX)
                for (int k = 0; k < n; k++) score[k] = t == 0 || row[k] > score[k] ? row[k] : score[k];
            else
                for (int k = 0; k < n; k++) score[k] += row[k];
        }
        if (p->o.slm_score == SKV_SLM_SCORE_MEAN)   /* token k was seen by the rows k .. n-1 */
            for (int k = 0; k < n; k++) score[k] /= (float)(n - k);
    }
    int crit, recent, marg;
    skv_smallkv_split(&p->o, io->budget, &crit, &recent, &marg);
    int sinks = p->o.sinks < crit ? p->o.sinks : crit;
    int rlo = n - recent < sinks ? sinks : n - recent;
    /* candidates outside sinks and the recent window */
    unsigned char *m = io->mark;       /* 1 = has K in hot (or new), 2 = V only in hot */
    int nc = 0;
    if (p->o.no_saliency) {
        memset(m, 0, (size_t)n);
        const int *P = skv_kvcache_hot_pos_kv(io->cache, io->layer, io->kvh);
        for (int i = 0; i < io->cache->n_kv[io->lane]; i++) m[P[i]] = 1;
        const int *PV = skv_kvcache_hot_pos_v(io->cache, io->layer, io->kvh);
        for (int i = 0; i < io->cache->n_v[io->lane]; i++) m[PV[i]] = 2;
        for (int k = io->n0 > 0 ? io->n0 : 0; k < n; k++) m[k] = 1;
        for (int k = sinks; k < rlo; k++) if (m[k]) io->itmp[nc++] = k;
    } else {
        for (int k = sinks; k < rlo; k++) io->itmp[nc++] = k;
    }
    int ccrit = crit - sinks;
    if (p->o.adaptive_split && nc > 0) {
        /* critical: fewest with adapt_crit_mass of the candidates' mass; marginal to adapt_marg_mass */
        float *sorted = skv_malloc((size_t)nc * sizeof(float), "adaptive split");
        if (!sorted) return -1;
        double tot = 0;
        for (int i = 0; i < nc; i++) { sorted[i] = score[io->itmp[i]]; tot += sorted[i]; }
        qsort(sorted, (size_t)nc, sizeof(float), cmp_desc);
        double acc = 0;
        int nc80 = 0, nc95 = 0;
        for (int i = 0; i < nc; i++) {
            if (acc < p->o.adapt_crit_mass * tot) nc80 = i + 1;
            if (acc < p->o.adapt_marg_mass * tot) nc95 = i + 1;
            acc += sorted[i];
        }
        free(sorted);
        int Bt = (int)floor(io->budget + 1e-9);
        int cap_c = Bt - sinks - (n - rlo);
        ccrit = nc80 < cap_c ? nc80 : cap_c;
        if (ccrit < 0) ccrit = 0;
        int room = (int)floor(2 * (io->budget - sinks - (n - rlo) - ccrit) + 1e-9);
        marg = p->o.no_marginal ? 0 : (nc95 - ccrit < room ? nc95 - ccrit : room);
        if (marg < 0) marg = 0;
    }
    if (ccrit < 0) ccrit = 0;
    /* critical: must have K when there is no restore */
    int nk = 0;
    for (int k = 0; k < sinks; k++) io->kv_pos[nk++] = k;
    int got;
    if (p->o.no_saliency) {
        /* split candidates: with K first (eligible for critical) */
        int nkc = 0;
        for (int i = 0; i < nc; i++)
            if (m[io->itmp[i]] == 1) { int t = io->itmp[nkc]; io->itmp[nkc++] = io->itmp[i]; io->itmp[i] = t; }
        got = skv_topk(score, io->itmp, nkc, ccrit);
    } else {
        got = skv_topk(score, io->itmp, nc, ccrit);
    }
    for (int i = 0; i < got; i++) io->kv_pos[nk++] = io->itmp[i];
    for (int k = rlo; k < n; k++) io->kv_pos[nk++] = k;
    io->n_kv = nk;
    /* marginal: the next best among the remaining candidates */
    int mv = skv_topk(score, io->itmp + got, nc - got, marg);
    for (int i = 0; i < mv; i++) io->v_pos[i] = io->itmp[got + i];
    io->n_v = mv;
    skv_sort_ints(io->kv_pos, io->n_kv);
    skv_sort_ints(io->v_pos, io->n_v);
    return 0;
}

static void sk_marginal(const skv_policy *p, int layer, int kvh, const int *pos_kv, int n_kv,
                        const int *pos_v, int n_v, float *pm, float *w) {
    const skv_state_smallkv *s = p->st;
    const int g = p->H / p->Hkv;
    for (int t = 0; t < g; t++) {
        if (!s->map || !s->attached) {
            w[t] = 1;
            for (int k = 0; k < n_v; k++) pm[(size_t)t * n_v + k] = 0;
            continue;
        }
        const float *row = slm_row(s, s->v.lastrow, s->map[layer * p->H + kvh * g + t]);
        double ws = 0;
        for (int i = 0; i < n_kv; i++) ws += row[pos_kv[i]];
        w[t] = (float)ws;
        for (int k = 0; k < n_v; k++) pm[(size_t)t * n_v + k] = row[pos_v[k]];
    }
}

static int sk_prefill(skv_policy *p, const skv_prefill_info *pi) {
    skv_state_smallkv *s = p->st;
    return p->o.no_saliency ? skv_h2o_accumulate_prefill(&s->acc, p, pi) : 0;
}

static void sk_step(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, int n) {
    skv_state_smallkv *s = p->st;
    if (p->o.no_saliency) skv_h2o_accumulate_step(&s->acc, p, layer, kvh, pos, prob, n);
}

static int check_map(const skv_policy *p, const skv_state_smallkv *s, const int *map) {
    if (!s->attached) return 0;
    int nslm = s->v.slm_layers * s->v.slm_heads;
    for (int i = 0; i < p->L * p->H; i++)
        if (map[i] < 0 || map[i] >= nslm)
            return skv_error("smallkv: LLM head %d maps to SLM head %d, outside the SLM's first %d layers x %d heads",
                             i, map[i], s->v.slm_layers, s->v.slm_heads);
    return 0;
}

int skv_policy_smallkv_set_map(skv_policy *p, const int *map) {
    skv_state_smallkv *s = p->st;
    if (strcmp(p->name, "smallkv")) return skv_error("policy %s has no head mapping", p->name);
    if (!map) { free(s->map); s->map = NULL; return 0; }
    if (check_map(p, s, map)) return -1;
    if (!s->map) {
        s->map = skv_malloc((size_t)p->L * p->H * sizeof(int), "smallkv head map");
        if (!s->map) return -1;
    }
    memcpy(s->map, map, (size_t)p->L * p->H * sizeof(int));
    return 0;
}

int skv_policy_smallkv_attach(skv_policy *p, const skv_slm_view *v) {
    if (strcmp(p->name, "smallkv")) return skv_error("policy %s takes no SLM", p->name);
    skv_state_smallkv *s = p->st;
    if (v->slm_heads < 1 || v->slm_layers < 1 || !v->colsum || !v->lastrow || v->stride < 1)
        return skv_error("smallkv: bad SLM view");
    s->v = *v;
    s->attached = true;
    if (s->map && check_map(p, s, s->map)) { s->attached = false; return -1; }
    if (v->map) return skv_policy_smallkv_set_map(p, v->map);
    return 0;
}

static int sk_fork(const skv_policy *src, skv_policy *dst) {
    const skv_state_smallkv *a = src->st;
    skv_state_smallkv *b = skv_calloc(1, sizeof *b, "smallkv state");
    if (!b) return -1;
    *b = *a;
    b->map = NULL;
    memset(&b->acc, 0, sizeof b->acc);
    if (a->map) {
        b->map = skv_malloc((size_t)src->L * src->H * sizeof(int), "smallkv head map");
        if (!b->map) { free(b); return -1; }
        memcpy(b->map, a->map, (size_t)src->L * src->H * sizeof(int));
    }
    if (skv_lanescore_copy(&b->acc, &a->acc)) { free(b->map); free(b); return -1; }
    /* the SLM view points into the source session's SLM buffers: the forking session
     * re-attaches its own copy */
    dst->st = b;
    return 0;
}

static void sk_free(skv_policy *p) {
    skv_state_smallkv *s = p->st;
    if (!s) return;
    free(s->map);
    skv_lanescore_free(&s->acc);
    free(s);
    p->st = NULL;
}

int skv_policy_init_smallkv(skv_policy *p) {
    skv_state_smallkv *s = skv_calloc(1, sizeof *s, "smallkv state");
    if (!s) return -1;
    if (skv_lanescore_init(&s->acc, p->L * p->Hkv)) { free(s); return -1; }
    p->st = s;
    p->wants_colsum = p->o.no_saliency;
    p->wants_step = p->o.no_saliency;
    p->uses_cold = !p->o.no_saliency;
    p->on_prefill = sk_prefill;
    p->select = sk_select;
    p->on_step = sk_step;
    p->marginal = sk_marginal;
    p->fork = sk_fork;
    p->free_state = sk_free;
    return 0;
}

const int *skv_policy_smallkv_map(const skv_policy *p) {
    if (!p || strcmp(p->name, "smallkv") || !p->st) return NULL;
    return ((const skv_state_smallkv *)p->st)->map;
}
