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
#include "smallkv.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const combine_names[] = {"sum", "mass", "renorm", NULL};
static const char *const mapping_names[] = {"profile", "online", NULL};
static const char *const split_names[] = {"fixed", "adaptive", "small", NULL};
static const char *const score_names[] = {"acc", "now", "mean", NULL};
static const char *const slm_kv_names[] = {"f16", "q8", "q4", "k8v4", NULL};
static const int slm_kv_bits[][2] = {{0, 0}, {8, 8}, {4, 4}, {8, 4}};   /* K, V bits of each name */

#define O(f) offsetof(skv_smallkv_opts, f)
static const skv_opt_desc smallkv_opt_table[] = {
    {"combine", NULL, SKV_OPT_ENUM, O(combine), SKV_COMBINE_RENORM, 0, 0, combine_names,
     SKV_OPT_BARE | SKV_OPT_LABEL_ALWAYS, SKV_COMBINE_RENORM,
     "how V-only tokens' SLM weights join the LLM's softmax (renorm measured best)"},
    {"mapping", NULL, SKV_OPT_ENUM, O(mapping), 0, 0, 0, mapping_names, SKV_OPT_BARE | SKV_OPT_LABEL_ALWAYS, 0,
     "LLM head -> SLM head from the profile, or matched online on the prompt"},
    {"no_saliency", "nosal", SKV_OPT_BOOL, O(no_saliency), 0, 0, 1, NULL, 0, 0,
     "ablation: rank by the LLM's own accumulated attention, no restores"},
    {"no_marginal", "nomarg", SKV_OPT_BOOL, O(no_marginal), 0, 0, 1, NULL, 0, 0,
     "ablation: no V-only tokens (budget split critical:recent)"},
    {"split", NULL, SKV_OPT_ENUM, O(split), 0, 0, 0, split_names, SKV_OPT_BARE, 0,
     "budget split: fixed critical:recent:marginal 2:1:2, adaptive by the SLM's mass, or small: 6:1:1 "
     "(most slots critical) when the budget is at most small_at of the sequence, else fixed"},
    {"small_at", NULL, SKV_OPT_FLOAT, O(small_at), 0.075, 0, 1, NULL, 0, 0.075,
     "split=small: budgets at most this fraction of the sequence take the critical-heavy split"},
    /* labels name the score when it is not acc, the default before now was measured best */
    {"score", NULL, SKV_OPT_ENUM, O(score), SKV_SLM_SCORE_NOW, 0, 0, score_names, 0, SKV_SLM_SCORE_ACC,
     "token score from the SLM: this step's row (now: this project's variant), accumulated (acc: the paper's "
     "SmallKV), accumulated per row seen (mean)"},
    {"slm_depth", "depth", SKV_OPT_INT, O(slm_depth), 0, 0, 4096, NULL, 0, 0,
     "SLM layers to run (0: the profile's depth)"},
    {"slm_budget", "slmb", SKV_OPT_FLOAT, O(slm_budget), 0, 0, 1, NULL, 0, 0,
     "compress the SLM's own cache with H2O to this fraction (0: its full cache)"},
    {"slm_kv", "slmkv", SKV_OPT_ENUM, O(slm_kv), 0, 0, 0, slm_kv_names, 0, 0,
     "the SLM's cache: the session's KV type (f16), or 8- / 4-bit rows in groups of 32 (q8, q4; "
     "k8v4: 8-bit keys, 4-bit values); it only ranks tokens, so it needs less precision"},
    /* labels name it with a quantised cache only: records before it (plain keys) say slmkv=q4 */
    {"key_norm", "knorm", SKV_OPT_BOOL, O(key_norm), 1, 0, 1, NULL, SKV_OPT_LABEL_WITH_PREV, 0,
     "with a quantised SLM cache: store its keys normalised per channel (offset and scale fitted on the "
     "prompt, the query scaled instead; 4-bit keys then rank almost as plain 8-bit ones did); knorm=false in "
     "the spec: plain rows"},
    {"recent", NULL, SKV_OPT_FLOAT, O(recent), 1, 0, 1000, NULL, 0, 1,
     "recent weight of the fixed split critical:recent:marginal = 2:recent:2"},
    SKV_OPT_REDUCE(skv_smallkv_opts),
    {"adapt_crit", NULL, SKV_OPT_FLOAT, O(adapt_crit), 0.8, 0, 1, NULL, 0, 0.8,
     "adaptive split: critical tokens hold this share of the SLM's mass"},
    {"adapt_marg", NULL, SKV_OPT_FLOAT, O(adapt_marg), 0.95, 0, 1, NULL, 0, 0.95,
     "adaptive split: marginal tokens up to this share"},
    {"online_min", NULL, SKV_OPT_INT, O(online_min), 100, 1, 1 << 20, NULL, 0, 100,
     "online mapping: keep everything until the sequence has this many tokens"},
    {"online_max", NULL, SKV_OPT_INT, O(online_max), 200, 1, 1 << 20, NULL, 0, 200,
     "online mapping: match heads on the attention to keys below this position"},
    {"slm_session", NULL, SKV_OPT_BOOL, O(slm_session), 0, 0, 1, NULL, SKV_OPT_HIDDEN, 0,
     "run the SLM through a session even with its full cache (tests)"},
    SKV_OPT_SINKS(skv_smallkv_opts),
};
#undef O

typedef struct {
    int *map;               /* [L*H] or NULL (online matching pending) */
    skv_slm_view v;         /* the rows the selection reads */
    bool attached;
    skv_lanescore acc;      /* no-saliency: the LLM's own scores */
    skv_online *onl;        /* online matching while it is pending, else NULL */
    /* per attention head (env per_head): the lane just selected, (Hkv, g, max_ctx) marks of
     * each head's K+V and V-only positions, read by the marginal weights of the same step */
    bool per_head;
    int max_ctx;
    unsigned char *hk, *hv;
} skv_state_smallkv;

void skv_smallkv_split(const skv_smallkv_opts *o, double B, int n, int *crit, int *recent, int *marg) {
    double c = 2, r = o->recent, m = o->no_marginal ? 0 : 2;
    if (o->split == SKV_SPLIT_SMALL && B <= o->small_at * n) {   /* most slots to critical tokens */
        c = 6; r = 1; m = o->no_marginal ? 0 : 1;
    }
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

/* this step's score of every position for LLM query head h (layer, flat index in layer) */
static void head_score(const skv_state_smallkv *s, const skv_smallkv_opts *o, const skv_policy *p, int layer, int h,
                       int n, float *score) {
    const float *const *src = o->score == SKV_SLM_SCORE_NOW ? s->v.lastrow : s->v.colsum;
    const float *row = slm_row(s, src, s->map[layer * p->H + h]);
    memcpy(score, row, (size_t)n * sizeof(float));
    if (o->score == SKV_SLM_SCORE_MEAN)
        for (int k = 0; k < n; k++) score[k] /= (float)(n - k);
}

/* Per attention head: each query head ranks by its own mapped SLM head: sinks, recent and its
 * critical tokens as K+V (the lane stores the union), then its marginal tokens among the
 * positions no head keeps as K+V (the lane's V-only slots: their union). */
static int sk_select_heads(skv_policy *p, skv_select_io *io, int crit, int recent, int marg) {
    skv_state_smallkv *s = p->st;
    const skv_smallkv_opts *o = p->opts;
    const int n = io->n, g = p->H / p->Hkv;
    const size_t N = (size_t)s->max_ctx;
    unsigned char *hk = s->hk + (size_t)io->kvh * g * N, *hv = s->hv + (size_t)io->kvh * g * N;
    const int sinks = o->sinks < crit ? o->sinks : crit;
    const int rlo = n - recent < sinks ? sinks : n - recent;
    float *score = io->ftmp;
    int *cand = io->itmp;
    for (int t = 0; t < g; t++) {
        unsigned char *row = io->head_keep + (size_t)t * n;
        head_score(s, o, p, io->layer, io->kvh * g + t, n, score);
        int nc = 0;
        for (int k = sinks; k < rlo; k++) cand[nc++] = k;
        const int got = skv_topk(score, cand, nc, crit - sinks > 0 ? crit - sinks : 0);
        for (int k = 0; k < sinks; k++) row[k] = 1;
        for (int i = 0; i < got; i++) row[cand[i]] = 1;
        for (int k = rlo; k < n; k++) row[k] = 1;
        memcpy(hk + (size_t)t * N, row, (size_t)n);
    }
    unsigned char *any = io->mark;   /* 1: some head keeps it as K+V */
    memset(any, 0, (size_t)n);
    int nk = 0;
    for (int k = 0; k < n; k++) {
        for (int t = 0; t < g && !any[k]; t++) any[k] = io->head_keep[(size_t)t * n + k];
        if (any[k]) io->kv_pos[nk++] = k;
    }
    io->n_kv = nk;
    int nv = 0;
    for (int t = 0; t < g; t++) {
        unsigned char *vrow = hv + (size_t)t * N;
        memset(vrow, 0, (size_t)n);
        if (marg <= 0) continue;
        head_score(s, o, p, io->layer, io->kvh * g + t, n, score);
        int nc = 0;
        for (int k = sinks; k < rlo; k++) if (!any[k]) cand[nc++] = k;
        const int got = skv_topk(score, cand, nc, marg);
        for (int i = 0; i < got; i++) vrow[cand[i]] = 1;
    }
    for (int k = 0; k < n; k++) {
        bool v = false;
        for (int t = 0; t < g && !v; t++) v = hv[(size_t)t * N + k];
        if (v) io->v_pos[nv++] = k;
    }
    io->n_v = nv;
    return 0;
}

/* keep everything (every head everything, when per head) */
static void sk_select_all(const skv_policy *p, skv_select_io *io) {
    skv_select_all(io);
    const skv_state_smallkv *s = p->st;
    if (!io->head_keep) return;
    const int g = p->H / p->Hkv;
    memset(io->head_keep, 1, (size_t)g * io->n);
    for (int t = 0; t < g; t++) {
        memset(s->hk + ((size_t)io->kvh * g + t) * s->max_ctx, 1, (size_t)io->n);
        memset(s->hv + ((size_t)io->kvh * g + t) * s->max_ctx, 0, (size_t)io->n);
    }
}

static int sk_select(skv_policy *p, skv_select_io *io) {
    skv_state_smallkv *s = p->st;
    const skv_smallkv_opts *o = p->opts;
    const int n = io->n, g = p->H / p->Hkv;
    io->n_v = 0;
    if (!s->map || !s->attached || io->budget >= n) { sk_select_all(p, io); return 0; }
    if (s->per_head) {
        int crit, recent, marg;
        skv_smallkv_split(o, io->budget, n, &crit, &recent, &marg);
        return sk_select_heads(p, io, crit, recent, marg);
    }
    /* scores */
    float *score;
    if (o->no_saliency) {
        if (skv_lanescore_reserve(&s->acc, n)) return -1;
        score = s->acc.s[io->lane];
    } else {
        score = io->ftmp;
        memset(score, 0, (size_t)n * sizeof(float));
        const float *const *src = o->score == SKV_SLM_SCORE_NOW ? s->v.lastrow : s->v.colsum;
        for (int t = 0; t < g; t++) {
            int h = io->kvh * g + t;
            const float *row = slm_row(s, src, s->map[io->layer * p->H + h]);
            if (o->reduce == SKV_REDUCE_MAX)
                for (int k = 0; k < n; k++) score[k] = t == 0 || row[k] > score[k] ? row[k] : score[k];
            else
                for (int k = 0; k < n; k++) score[k] += row[k];
        }
        if (o->score == SKV_SLM_SCORE_MEAN)   /* token k was seen by the rows k .. n-1 */
            for (int k = 0; k < n; k++) score[k] /= (float)(n - k);
    }
    int crit, recent, marg;
    skv_smallkv_split(o, io->budget, n, &crit, &recent, &marg);
    int sinks = o->sinks < crit ? o->sinks : crit;
    int rlo = n - recent < sinks ? sinks : n - recent;
    /* candidates outside sinks and the recent window */
    unsigned char *m = io->mark;       /* 1 = has K in hot (or new), 2 = V only in hot */
    int nc = 0;
    if (o->no_saliency) {
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
    if (o->split == SKV_SPLIT_ADAPTIVE && nc > 0) {
        /* critical: fewest with adapt_crit_mass of the candidates' mass; marginal to adapt_marg_mass */
        float *sorted = skv_malloc((size_t)nc * sizeof(float), "adaptive split");
        if (!sorted) return -1;
        double tot = 0;
        for (int i = 0; i < nc; i++) { sorted[i] = score[io->itmp[i]]; tot += sorted[i]; }
        qsort(sorted, (size_t)nc, sizeof(float), cmp_desc);
        double acc = 0;
        int nc80 = 0, nc95 = 0;
        for (int i = 0; i < nc; i++) {
            if (acc < o->adapt_crit * tot) nc80 = i + 1;
            if (acc < o->adapt_marg * tot) nc95 = i + 1;
            acc += sorted[i];
        }
        free(sorted);
        int Bt = (int)floor(io->budget + 1e-9);
        int cap_c = Bt - sinks - (n - rlo);
        ccrit = nc80 < cap_c ? nc80 : cap_c;
        if (ccrit < 0) ccrit = 0;
        int room = (int)floor(2 * (io->budget - sinks - (n - rlo) - ccrit) + 1e-9);
        marg = o->no_marginal ? 0 : (nc95 - ccrit < room ? nc95 - ccrit : room);
        if (marg < 0) marg = 0;
    }
    if (ccrit < 0) ccrit = 0;
    /* critical: must have K when there is no restore */
    int nk = 0;
    for (int k = 0; k < sinks; k++) io->kv_pos[nk++] = k;
    int got;
    if (o->no_saliency) {
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
        if (s->per_head) {   /* this head's own K+V and V-only positions */
            const unsigned char *hk = s->hk + ((size_t)kvh * g + t) * s->max_ctx;
            const unsigned char *hv = s->hv + ((size_t)kvh * g + t) * s->max_ctx;
            for (int i = 0; i < n_kv; i++) if (hk[pos_kv[i]]) ws += row[pos_kv[i]];
            w[t] = (float)ws;
            for (int k = 0; k < n_v; k++) pm[(size_t)t * n_v + k] = hv[pos_v[k]] ? row[pos_v[k]] : 0;
            continue;
        }
        for (int i = 0; i < n_kv; i++) ws += row[pos_kv[i]];
        w[t] = (float)ws;
        for (int k = 0; k < n_v; k++) pm[(size_t)t * n_v + k] = row[pos_v[k]];
    }
}

static int sk_prefill(skv_policy *p, const skv_prefill_info *pi) {
    skv_state_smallkv *s = p->st;
    const skv_smallkv_opts *o = p->opts;
    return o->no_saliency ? skv_h2o_accumulate_prefill(&s->acc, p, (skv_reduce)o->reduce, pi) : 0;
}

static int check_map(const skv_policy *p, const skv_state_smallkv *s, const int *map) {
    if (!s->attached) return 0;
    int nslm = s->v.slm_layers * s->v.slm_heads;
    for (int i = 0; i < p->L * p->H; i++)
        if (map[i] < 0 || map[i] >= nslm)
            return skv_error("LLM head %d maps to SLM head %d, outside the SLM's first %d layers x %d heads", i, map[i],
                             s->v.slm_layers, s->v.slm_heads);
    return 0;
}

static int set_map(skv_policy *p, const int *map) {
    skv_state_smallkv *s = p->st;
    if (!map) { free(s->map); s->map = NULL; return 0; }
    if (check_map(p, s, map)) return -1;
    if (!s->map) {
        s->map = skv_malloc((size_t)p->L * p->H * sizeof(int), "smallkv head map");
        if (!s->map) return -1;
    }
    memcpy(s->map, map, (size_t)p->L * p->H * sizeof(int));
    return 0;
}

/* the session's SLM rows (policy.h slm_attach): at creation, after a fork, per verify row */
static int sk_slm_attach(skv_policy *p, const skv_slm_view *v) {
    skv_state_smallkv *s = p->st;
    if (v->slm_heads < 1 || v->slm_layers < 1 || !v->lastrow || v->stride < 1 || (!v->colsum && !p->slm.rows_only))
        return skv_error("bad SLM view");
    const bool again = s->attached && s->v.slm_layers == v->slm_layers && s->v.slm_heads == v->slm_heads;
    s->v = *v;
    s->v.map = NULL;
    s->attached = true;
    if (!again && s->map && check_map(p, s, s->map)) { s->attached = false; return -1; }
    return 0;
}

int skv_smallkv_attach(skv_policy *p, const skv_slm_view *v) {
    if (p->desc != &skv_policy_smallkv) return skv_error("policy %s takes no SLM", p->name);
    if (sk_slm_attach(p, v)) return -1;
    return v->map ? set_map(p, v->map) : 0;
}

/* online matching, once the sequence is long enough: the mapping is set and the LLM's
 * statistics for it are no longer needed */
static int online_try(skv_policy *p, int n) {
    skv_state_smallkv *s = p->st;
    const skv_smallkv_opts *o = p->opts;
    if (!s->onl || n < s->onl->min_tokens) return 0;
    if (!s->attached) return skv_error("smallkv: online matching without the SLM's rows");
    int *map = skv_malloc((size_t)p->L * p->H * sizeof(int), "online matching");
    if (!map) return -1;
    int rc = skv_online_match(s->onl, &s->v, n, map);
    if (!rc) rc = set_map(p, map);
    free(map);
    if (rc) return -1;
    skv_online_free(s->onl);
    s->onl = NULL;
    p->wants_colsum = o->no_saliency;
    p->wants_head_p = false;
    p->after_step = NULL;
    return 0;
}

static int sk_before_compress(skv_policy *p, float *const *colsum, int stride, int n0, int n) {
    (void)n0;
    skv_state_smallkv *s = p->st;
    if (!s->onl) return 0;
    skv_online_add_prefill(s->onl, colsum, stride, n);
    return online_try(p, n);
}

static void sk_step(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, const float *head_p, int n) {
    skv_state_smallkv *s = p->st;
    const skv_smallkv_opts *o = p->opts;
    if (o->no_saliency) skv_h2o_accumulate_step(&s->acc, p, (skv_reduce)o->reduce, layer, kvh, pos, prob, n);
    if (s->onl && head_p) skv_online_add_step(s->onl, layer, kvh, p->H / p->Hkv, pos, n, head_p);
}

static int sk_after_step(skv_policy *p, int n) { return online_try(p, n); }

static void sk_free(skv_policy *p);

/* the per-head marks (scratch of one lane's step) */
static int heads_alloc(skv_state_smallkv *s, bool per_head, int max_ctx, int H) {
    s->per_head = per_head;
    s->max_ctx = max_ctx;
    if (!per_head) return 0;
    s->hk = skv_calloc((size_t)H * max_ctx, 1, "smallkv per-head marks");
    s->hv = skv_calloc((size_t)H * max_ctx, 1, "smallkv per-head marks");
    return s->hk && s->hv ? 0 : -1;
}

static int sk_fork(const skv_policy *src, skv_policy *dst) {
    const skv_state_smallkv *a = src->st;
    skv_state_smallkv *b = skv_calloc(1, sizeof *b, "smallkv state");
    if (!b) return -1;
    dst->st = b;
    b->v = a->v;
    b->attached = a->attached;
    if (a->map) {
        b->map = skv_malloc((size_t)src->L * src->H * sizeof(int), "smallkv head map");
        if (!b->map) goto fail;
        memcpy(b->map, a->map, (size_t)src->L * src->H * sizeof(int));
    }
    if (skv_lanescore_copy(&b->acc, &a->acc)) goto fail;
    if (a->onl && !(b->onl = skv_online_fork(a->onl))) goto fail;
    if (heads_alloc(b, a->per_head, a->max_ctx, src->H)) goto fail;
    return 0;   /* the session attaches its fork's SLM rows */
fail:
    sk_free(dst);
    return -1;
}

static void sk_free(skv_policy *p) {
    skv_state_smallkv *s = p->st;
    if (!s) return;
    free(s->map);
    skv_lanescore_free(&s->acc);
    skv_online_free(s->onl);
    free(s->hk);
    free(s->hv);
    free(s);
    p->st = NULL;
}

/* SLM layers to run: the option, else the profile's depth, else the deepest mapped layer + 1
 * (all layers when matching online or for a prefill base) */
static int slm_depth(const skv_smallkv_opts *o, const skv_policy_env *env, int L, int H) {
    const int n = env->slm->cfg.n_layer, h = env->slm->cfg.n_head;
    int depth = o->slm_depth > 0 ? o->slm_depth : (!o->mapping && env->map_depth > 0 ? env->map_depth : 0);
    if (depth <= 0) {
        depth = n;
        if (!o->mapping && !env->prefill_base) {
            depth = 1;
            for (int i = 0; i < L * H; i++) {
                int l = env->map[i] / h + 1;
                if (l > depth) depth = l;
            }
        }
    }
    return depth > n ? n : depth;
}

static int sk_init(skv_policy *p, const skv_policy_env *env) {
    const skv_smallkv_opts *o = p->opts;
    skv_state_smallkv *s = skv_calloc(1, sizeof *s, "smallkv state");
    if (!s) return -1;
    p->st = s;
    p->free_state = sk_free;
    if (skv_lanescore_init(&s->acc, p->L * p->Hkv)) return -1;
    p->combine = (skv_combine)o->combine;
    p->wants_colsum = o->no_saliency;
    p->wants_step = o->no_saliency;
    p->uses_cold = !o->no_saliency;
    p->before_compress = sk_before_compress;
    p->on_prefill = sk_prefill;
    p->select = sk_select;
    p->on_step = sk_step;
    p->after_step = o->mapping == 1 ? sk_after_step : NULL;   /* online matching only */
    p->marginal = sk_marginal;
    p->fork = sk_fork;
    p->slm_attach = sk_slm_attach;
    p->head_map = skv_smallkv_map;
    if (!env->llm) return 0;   /* unit tests: the caller attaches a view */
    const skv_model *sm = env->slm, *m = env->llm;
    if (!sm) return skv_error("no SLM given");
    if (sm->cfg.vocab != m->cfg.vocab)
        return skv_error("SLM %s (vocab %d) and LLM %s (vocab %d) do not share a tokenizer", sm->name ? sm->name : "?",
                         sm->cfg.vocab, m->name ? m->name : "?", m->cfg.vocab);
    const bool online = o->mapping == 1 && !env->prefill_base;
    if (!env->prefill_base && !online && !env->map) return skv_error("no head mapping (give a profile's map or online)");
    if (env->per_head && (o->no_saliency || o->split == SKV_SPLIT_ADAPTIVE))
        return skv_error("per-attention-head selection takes the fixed or small split and the SLM's scores "
                         "(not nosal, not split=adaptive)");
    if (heads_alloc(s, env->per_head, env->max_ctx, p->H)) return -1;
    /* the session runs the SLM; a prefill base keeps the plain SLM state that derived
     * sessions copy */
    p->slm = (skv_slm_need){.depth = slm_depth(o, env, p->L, p->H), .compress = env->prefill_base ? 0 : o->slm_budget,
                            .as_session = o->slm_session && !env->prefill_base, .sinks = o->sinks,
                            .reduce = o->reduce, .draft_colsum = o->score != SKV_SLM_SCORE_NOW,
                            .k_bits = slm_kv_bits[o->slm_kv][0], .v_bits = slm_kv_bits[o->slm_kv][1],
                            .plain_keys = !o->key_norm,
                            /* this step's rows are all score=now reads once the map is known */
                            .rows_only = o->score == SKV_SLM_SCORE_NOW && !online && !env->prefill_base};
    if (!online && !env->prefill_base && set_map(p, env->map)) return -1;
    if (online) {
        const int mn = o->online_min, mx = o->online_max < mn ? mn : o->online_max;
        if (!(s->onl = skv_online_new(p->L, p->H, mn, mx, o->sinks))) return -1;
        p->wants_colsum = true;
        p->wants_head_p = true;
    }
    return 0;
}

bool skv_smallkv_mapped(const skv_policy *p) { return skv_smallkv_map(p) != NULL; }

const int *skv_smallkv_map(const skv_policy *p) {
    return p && p->desc == &skv_policy_smallkv && p->st ? ((const skv_state_smallkv *)p->st)->map : NULL;
}

static bool sk_needs_map(const void *opts) { return ((const skv_smallkv_opts *)opts)->mapping == 0; }

const skv_policy_desc skv_policy_smallkv = {
    .name = "smallkv",
    .summary = "the SLM's attention picks the hot set every step; middling tokens kept as V only",
    .keeps = "Every K/V in the cold tier; at every step, per KV head, the sinks, the recent tokens and "
             "the critical tokens ranked by the mapped SLM heads' attention as K+V, and the "
             "next-ranked (marginal) tokens as V only with the SLM's weights. With `score=now` (the "
             "default) the ranking is the SLM's attention row of this step, so the hot set follows the "
             "current query; `score=acc` accumulates it over the SLM's history (the method as "
             "described).",
    .choose = "Needs a small model of the same tokenizer and a profile for the pair. `score=now` is a "
              "query-aware retrieval method, closer to the full cache than Quest at the same hot budget "
              "(docs/results.md sections 11 and 12). At equal total memory, its SLM's cache counted, it "
              "needs that cache quantised (`slm_kv=q4`, keys normalised): then it is ahead of Quest and H2O "
              "at ~23 %, ~32 % and ~52 % of the full cache and level with H2O at ~12 % (768-token "
              "held-out documents, section 16); at 4K tokens Quest is ahead at ~23 % and ~27 %, level at ~23 % "
              "with the critical-heavy split (`split=small:small_at=1`), and at 8K Quest and H2O are ahead "
              "(section 17); with an fp16 SLM cache Quest and H2O are closer (sections 11 and 15).",
    .caps = SKV_POLICY_NEEDS_SLM | SKV_POLICY_COLD_TIER | SKV_POLICY_MARGINAL | SKV_POLICY_GPU | SKV_POLICY_PER_HEAD,
    .opts = smallkv_opt_table,
    .n_opts = sizeof smallkv_opt_table / sizeof *smallkv_opt_table,
    .opts_size = sizeof(skv_smallkv_opts),
    .init = sk_init,
    .needs_map = sk_needs_map,
};
