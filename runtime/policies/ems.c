/* ems.c: EMS, evict-then-merge with a global-local score (method.md section 6).
 *
 * Score of a position (per lane, per-query-head scores reduced over the GQA group):
 *   global  accumulated attention over every query row (prefill column sums + every decode
 *           row, the H2O accumulation, shared with policy_h2o.c);
 *   local   accumulated over the last w query rows: after a prefill its last-w sums; during
 *           decode the prefill sums plus the decode rows so far until w decode rows exist,
 *           then exactly the last w decode rows (a ring of rows per lane);
 *   score = global + local * mean(global) / mean(local)   (means over the candidates:
 *           "mean alignment", relative weight 1).
 * Sinks score +inf; positions without a score yet score just below (FLT_MAX): with ems_gen=inf (the default) every
 * token added after the last prefill, for as long as it stays; with ems_gen=acc only the
 * token being added (docs/lab/retrieval.md measures both).
 * Evict + merge, per lane with budget N tokens (skv_budget_tokens), over the candidates
 * (the hot slots and the new positions; eviction is permanent):
 *   keep the top gamma*N by score, evict the rest; the top N are class centres; each other
 *   kept position i joins the centre c maximising cos(k_i,k_c) * cos(v_i,v_c) when that is
 *   > tau and both cosines are positive, else it is dropped (the zero class);
 *   a centre's K and V become the multiplicity-weighted mean of its members (a member that
 *   is itself an earlier centre counts with its multiplicity), its multiplicity the sum.
 * Storage: only the N centres per lane (hot K+V slots with a multiplicity each); the
 * look-up table (kept position -> centre) of the last merge is kept in the policy state
 * (skv_policy_ems_plan). Attention gives a centre of multiplicity m m places in the
 * softmax, implemented as + log(m) on its logit (kernels/cpu/compensate.h).
 * Decode schedule: new tokens append while the lane is within budget; once the lane would
 * exceed it, evict+merge runs again at that step over the N hot centres + the new token
 * (so from then on every step merges or drops exactly the surplus). */
#include "ems.h"
#include "common/util.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float gamma, tau;
    int ems_window;       /* rows of the local score (0: window) */
    int reduce;           /* skv_reduce */
    int sinks, window;
    int gen;              /* ems_gen: how tokens generated after the prefill are scored */
} ems_opts;

/* inf: a token added after the last prefill scores +inf for as long as it stays (the
 * behaviour of the records so far: decoding then keeps the sinks and the newest tokens and
 * merges each displaced one); acc: once a decode row has attended to it, it competes by its
 * own global + local score like the prompt's tokens (only the token being added is +inf) */
enum { EMS_GEN_INF = 0, EMS_GEN_ACC = 1 };
static const char *const ems_gen_names[] = {"inf", "acc", NULL};

static const skv_opt_desc ems_opt_table[] = {
    {"ems_gamma", NULL, SKV_OPT_FLOAT, offsetof(ems_opts, gamma), 4, 1, 1000, NULL, 0, 4,
     "candidates kept before merging, as a multiple of the budget"},
    {"ems_tau", NULL, SKV_OPT_FLOAT, offsetof(ems_opts, tau), 0.6, -1, 1, NULL, 0, 0.6,
     "merge threshold on cos(k) * cos(v)"},
    {"ems_window", NULL, SKV_OPT_INT, offsetof(ems_opts, ems_window), 0, 0, 4096, NULL, 0, 0,
     "query rows of the local score (0: the observation window)"},
    SKV_OPT_REDUCE(ems_opts),
    SKV_OPT_SINKS(ems_opts),
    SKV_OPT_WINDOW(ems_opts),
    {"ems_gen", NULL, SKV_OPT_ENUM, offsetof(ems_opts, gen), EMS_GEN_INF, 0, 0, ems_gen_names, 0, EMS_GEN_INF,
     "generated tokens: inf (never outscored while they stay) or acc (scored by their attention once seen)"},
};

typedef struct { int n, cap; int *pos; float *p; } ems_row;

typedef struct {
    int n_lut, n_cen, cap;          /* capacities in entries */
    int *lut_pos, *lut_cen;         /* (n_lut) */
    int *cen_pos, *cen_mult;        /* (n_cen) */
    float *cen_k, *cen_v;           /* (n_cen, d) merged values to write, f32 */
    bool pending;                   /* after_apply has values to write */
    int ring_n, ring_head;          /* decode rows in the ring, next slot */
    bool local_from_ring;           /* local == sum of the ring rows (w decode rows seen) */
    ems_row *ring;                  /* [w] */
} ems_lane;

typedef struct {
    skv_lanescore global, local;
    int *scored;                    /* [lanes] positions < scored have scores */
    ems_lane *lane;                 /* [lanes] */
    int w, d;
    int *slot_of; int slot_cap;     /* scratch: position -> hot slot */
    float *ka, *va, *kb, *vb;       /* scratch rows (d) */
} ems_state;

static int ems_w(const skv_policy *p) {
    const ems_opts *o = p->opts;
    return o->ems_window > 0 ? o->ems_window : (o->window > 0 ? o->window : 32);
}

static int lane_reserve(ems_lane *L, int n, int d) {
    if (n <= L->cap) return 0;
    int cap = n + n / 4 + 8;
    int *a = realloc(L->lut_pos, (size_t)cap * sizeof(int)); if (!a) goto oom; L->lut_pos = a;
    a = realloc(L->lut_cen, (size_t)cap * sizeof(int)); if (!a) goto oom; L->lut_cen = a;
    a = realloc(L->cen_pos, (size_t)cap * sizeof(int)); if (!a) goto oom; L->cen_pos = a;
    a = realloc(L->cen_mult, (size_t)cap * sizeof(int)); if (!a) goto oom; L->cen_mult = a;
    float *f = realloc(L->cen_k, (size_t)cap * d * sizeof(float)); if (!f) goto oom; L->cen_k = f;
    f = realloc(L->cen_v, (size_t)cap * d * sizeof(float)); if (!f) goto oom; L->cen_v = f;
    L->cap = cap;
    return 0;
oom:
    return skv_error("ems: out of memory for a lane plan of %d entries", n);
}

static int ems_prefill(skv_policy *p, const skv_prefill_info *pi) {
    ems_state *s = p->st;
    if (!pi->colsum || !pi->obs) return skv_error("ems: prefill without column sums / window sums");
    if (skv_h2o_accumulate_prefill(&s->global, p, (skv_reduce)((const ems_opts *)p->opts)->reduce, pi)) return -1;
    if (skv_lanescore_reserve(&s->local, pi->n)) return -1;
    const int g = p->H / p->Hkv;
    for (int j = 0; j < p->Hkv; j++) {
        int ln = pi->layer * p->Hkv + j;
        /* the local term is the last-w rows of this prefill (older rows leave the window) */
        skv_reduce_group(s->local.s[ln], pi->obs + (size_t)j * g * pi->stride, g, (size_t)pi->stride, pi->n,
                         (skv_reduce)((const ems_opts *)p->opts)->reduce);
        s->scored[ln] = pi->n;
        ems_lane *L = &s->lane[ln];
        L->ring_n = 0; L->ring_head = 0; L->local_from_ring = false;
    }
    return 0;
}

static void ems_step(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, int n) {
    ems_state *s = p->st;
    const int ln = layer * p->Hkv + kvh;
    const skv_reduce reduce = (skv_reduce)((const ems_opts *)p->opts)->reduce;
    skv_h2o_accumulate_step(&s->global, p, reduce, layer, kvh, pos, prob, n);
    const float scale = reduce == SKV_REDUCE_MEAN ? 1.0f / (float)(p->H / p->Hkv) : 1.0f;
    ems_lane *L = &s->lane[ln];
    float *loc = s->local.s[ln];
    ems_row *r = &L->ring[L->ring_head];
    if (L->ring_n == s->w) {               /* the oldest row leaves the window */
        for (int i = 0; i < r->n; i++) if (r->pos[i] < s->local.cap) loc[r->pos[i]] -= r->p[i];
    }
    if (r->cap < n) {
        int *a = realloc(r->pos, (size_t)n * sizeof(int));
        float *b = a ? realloc(r->p, (size_t)n * sizeof(float)) : NULL;
        if (a) r->pos = a;
        if (b) r->p = b;
        if (!a || !b) { r->n = 0; return; }   /* out of memory: this row is not remembered */
        r->cap = n;
    }
    r->n = n;
    for (int i = 0; i < n; i++) { r->pos[i] = pos[i]; r->p[i] = prob[i] * scale; }
    L->ring_head = (L->ring_head + 1) % s->w;
    if (L->ring_n < s->w) L->ring_n++;
    if (L->ring_n == s->w && !L->local_from_ring) {
        /* w decode rows seen: from now on local is exactly the ring */
        memset(loc, 0, (size_t)s->local.cap * sizeof(float));
        for (int k = 0; k < s->w; k++)
            for (int i = 0; i < L->ring[k].n; i++)
                if (L->ring[k].pos[i] < s->local.cap) loc[L->ring[k].pos[i]] += L->ring[k].p[i];
        L->local_from_ring = true;
    } else {
        for (int i = 0; i < n; i++) if (pos[i] < s->local.cap) loc[pos[i]] += r->p[i];
    }
}

static float cosine(const float *a, const float *b, int d) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < d; i++) { ab += (double)a[i] * b[i]; aa += (double)a[i] * a[i]; bb += (double)b[i] * b[i]; }
    if (aa <= 0 || bb <= 0) return 0;
    return (float)(ab / sqrt(aa * bb));
}

/* K, V (f32) and multiplicity of a candidate position: its hot slot, else cold / fresh */
static int cand_row(ems_state *s, const skv_select_io *io, int pos, float *k, float *v, int *mult) {
    const skv_kvcache *c = io->cache;
    const size_t row = (size_t)c->d * c->esz;
    int sl = pos < s->slot_cap ? s->slot_of[pos] : -1;
    if (sl >= 0) {
        skv_kv_load_row(k, (const char *)skv_kvcache_hot_k(c, io->layer, io->kvh) + (size_t)sl * row, c->d, c->f16);
        skv_kv_load_row(v, (const char *)skv_kvcache_hot_v(c, io->layer, io->kvh) + (size_t)sl * row, c->d, c->f16);
        *mult = skv_kvcache_hot_mult(c, io->layer, io->kvh)[sl];
        return 0;
    }
    *mult = 1;
    const void *ck = skv_kvcache_cold_k(c, io->layer, io->kvh, pos), *cv = skv_kvcache_cold_v(c, io->layer, io->kvh, pos);
    if (ck && cv) { skv_kv_load_row(k, ck, c->d, c->f16); skv_kv_load_row(v, cv, c->d, c->f16); return 0; }
    const float *fk = skv_kvcache_fresh_k(c, io->layer, io->kvh, pos), *fv = skv_kvcache_fresh_v(c, io->layer, io->kvh, pos);
    if (fk && fv) {
        /* round through the storage type so merged and unmerged rows agree */
        for (int i = 0; i < c->d; i++) {
            k[i] = c->f16 ? skv_f16_to_f32(skv_f32_to_f16(fk[i])) : fk[i];
            v[i] = c->f16 ? skv_f16_to_f32(skv_f32_to_f16(fv[i])) : fv[i];
        }
        return 0;
    }
    return skv_error("ems: position %d of lane %d/%d has no K/V", pos, io->layer, io->kvh);
}

static int ems_select(skv_policy *p, skv_select_io *io) {
    ems_state *s = p->st;
    const int n = io->n, d = s->d;
    const skv_kvcache *c = io->cache;
    ems_lane *L = &s->lane[io->lane];
    L->pending = false;
    io->n_v = 0;
    if (skv_lanescore_reserve(&s->global, n) || skv_lanescore_reserve(&s->local, n)) return -1;
    /* candidates: hot K+V slots (centres) and positions never offered before */
    if (s->slot_cap < n) {
        int cap = n + n / 4 + 64;
        int *a = realloc(s->slot_of, (size_t)cap * sizeof(int));
        if (!a) return skv_error("ems: out of memory");
        s->slot_of = a; s->slot_cap = cap;
    }
    for (int k = 0; k < n; k++) s->slot_of[k] = -1;
    const int *P = skv_kvcache_hot_pos_kv(c, io->layer, io->kvh);
    const int nh = c->n_kv[io->lane];
    for (int i = 0; i < nh; i++) if (P[i] < n) s->slot_of[P[i]] = i;
    int *cand = io->itmp, nc = 0;
    for (int k = 0; k < n; k++) if (s->slot_of[k] >= 0 || k >= io->n0) cand[nc++] = k;
    const int N = skv_budget_tokens(io->budget, n);
    if (nc <= N) {                            /* within budget: keep every candidate as it is */
        memcpy(io->kv_pos, cand, (size_t)nc * sizeof(int));
        io->n_kv = nc;
        return 0;
    }
    /* score = global + aligned local */
    float *sc = io->ftmp;
    const float *gl = s->global.s[io->lane], *lo = s->local.s[io->lane];
    double mg = 0, ml = 0;
    int nm = 0;
    int scored = s->scored[io->lane];
    /* positions < n0 were offered before, so decode rows have attended to them */
    if (((const ems_opts *)p->opts)->gen == EMS_GEN_ACC && io->n0 > scored) scored = io->n0;
    for (int i = 0; i < nc; i++) {
        int k = cand[i];
        if (k < ((const ems_opts *)p->opts)->sinks || k >= scored) continue;
        mg += gl[k]; ml += lo[k]; nm++;
    }
    const double a = ml > 0 ? mg / ml : 0;
    for (int k = 0; k < n; k++) sc[k] = -INFINITY;
    for (int i = 0; i < nc; i++) {
        int k = cand[i];
        /* sinks outrank the unscored positions: both used to score +inf, and top-k breaks ties
         * towards later positions, so once more tokens than the budget had been added since
         * the prefill the sinks were evicted (docs/lab/retrieval.md) */
        sc[k] = k < ((const ems_opts *)p->opts)->sinks ? INFINITY : k >= scored ? FLT_MAX : (float)(gl[k] + a * lo[k]);
    }
    (void)nm;
    /* evict: keep the top M = gamma N; centres: the top N of those */
    int M = (int)floor(((const ems_opts *)p->opts)->gamma * N + 1e-9);
    if (M < N) M = N;
    M = skv_topk(sc, cand, nc, M);
    skv_topk(sc, cand, M, N);
    if (lane_reserve(L, M, d)) return -1;
    /* centres' rows and multiplicities */
    for (int i = 0; i < N; i++) {
        L->cen_pos[i] = cand[i];
        if (cand_row(s, io, cand[i], L->cen_k + (size_t)i * d, L->cen_v + (size_t)i * d, &L->cen_mult[i])) return -1;
        L->lut_pos[i] = cand[i];
        L->lut_cen[i] = cand[i];
    }
    L->n_cen = N;
    /* merge: members accumulate into sums (centre rows scaled by their multiplicity) */
    float *sk = skv_malloc((size_t)N * d * 2 * sizeof(float), "ems merge");
    int *sm = skv_malloc((size_t)N * sizeof(int), "ems merge");
    if (!sk || !sm) { free(sk); free(sm); return -1; }
    float *sv = sk + (size_t)N * d;
    for (int i = 0; i < N; i++) {
        sm[i] = L->cen_mult[i];
        for (int t = 0; t < d; t++) {
            sk[(size_t)i * d + t] = L->cen_k[(size_t)i * d + t] * sm[i];
            sv[(size_t)i * d + t] = L->cen_v[(size_t)i * d + t] * sm[i];
        }
    }
    bool merged = false;
    for (int i = N; i < M; i++) {
        int mu;
        if (cand_row(s, io, cand[i], s->ka, s->va, &mu)) { free(sk); free(sm); return -1; }
        int best = -1;
        float bs = 0;
        for (int c2 = 0; c2 < N; c2++) {
            float ck = cosine(s->ka, L->cen_k + (size_t)c2 * d, d), cv = cosine(s->va, L->cen_v + (size_t)c2 * d, d);
            if (ck <= 0 || cv <= 0) continue;
            float sim = ck * cv;
            if (sim > ((const ems_opts *)p->opts)->tau && (best < 0 || sim > bs)) { best = c2; bs = sim; }
        }
        L->lut_pos[i] = cand[i];
        L->lut_cen[i] = best >= 0 ? cand[best] : -1;
        if (best < 0) continue;
        merged = true;
        sm[best] += mu;
        for (int t = 0; t < d; t++) {
            sk[(size_t)best * d + t] += s->ka[t] * mu;
            sv[(size_t)best * d + t] += s->va[t] * mu;
        }
    }
    L->n_lut = M;
    for (int i = 0; i < N; i++) {
        if (sm[i] == L->cen_mult[i]) continue;     /* unchanged centre */
        for (int t = 0; t < d; t++) {
            L->cen_k[(size_t)i * d + t] = sk[(size_t)i * d + t] / sm[i];
            L->cen_v[(size_t)i * d + t] = sv[(size_t)i * d + t] / sm[i];
        }
        L->cen_mult[i] = sm[i];
    }
    free(sk); free(sm);
    L->pending = merged;
    memcpy(io->kv_pos, cand, (size_t)N * sizeof(int));
    io->n_kv = N;
    skv_sort_ints(io->kv_pos, N);
    return 0;
}

static int ems_after_apply(skv_policy *p, skv_kvcache *c, int layer, int kvh) {
    ems_state *s = p->st;
    if (!s) return 0;
    ems_lane *L = &s->lane[layer * p->Hkv + kvh];
    if (!L->pending) return 0;
    L->pending = false;
    const int ln = skv_lane(c, layer, kvh), d = c->d;
    const size_t row = (size_t)d * c->esz;
    int *P = skv_kvcache_hot_pos_kv(c, layer, kvh), *MU = skv_kvcache_hot_mult(c, layer, kvh);
    char *K = skv_kvcache_hot_k(c, layer, kvh), *V = skv_kvcache_hot_v(c, layer, kvh);
    if (s->slot_cap < c->n_tok) return skv_error("ems: plan and cache disagree");
    for (int i = 0; i < c->n_tok; i++) s->slot_of[i] = -1;
    for (int i = 0; i < c->n_kv[ln]; i++) s->slot_of[P[i]] = i;
    for (int i = 0; i < L->n_cen; i++) {
        int sl = s->slot_of[L->cen_pos[i]];
        if (sl < 0) return skv_error("ems: centre %d of lane %d/%d is not hot", L->cen_pos[i], layer, kvh);
        if (L->cen_mult[i] == 1) continue;       /* a single token: apply loaded it as is */
        skv_kv_store_row(K + (size_t)sl * row, L->cen_k + (size_t)i * d, d, c->f16);
        skv_kv_store_row(V + (size_t)sl * row, L->cen_v + (size_t)i * d, d, c->f16);
        MU[sl] = L->cen_mult[i];
    }
    return 0;
}

int skv_policy_ems_plan(const skv_policy *p, int layer, int kvh, skv_ems_plan *out) {
    if (p->desc != &skv_policy_ems) return skv_error("policy %s has no EMS plan", p->name);
    const ems_state *s = p->st;
    if (!s) { memset(out, 0, sizeof *out); return 0; }
    const ems_lane *L = &s->lane[layer * p->Hkv + kvh];
    out->n_lut = L->n_lut; out->lut_pos = L->lut_pos; out->lut_centre = L->lut_cen;
    out->n_centre = L->n_cen; out->centre_pos = L->cen_pos; out->centre_mult = L->cen_mult;
    return 0;
}

static void lane_free(ems_lane *L, int w) {
    free(L->lut_pos); free(L->lut_cen); free(L->cen_pos); free(L->cen_mult); free(L->cen_k); free(L->cen_v);
    if (L->ring)
        for (int k = 0; k < w; k++) { free(L->ring[k].pos); free(L->ring[k].p); }
    free(L->ring);
}

static void ems_free(skv_policy *p) {
    ems_state *s = p->st;
    if (!s) return;
    skv_lanescore_free(&s->global);
    skv_lanescore_free(&s->local);
    if (s->lane)
        for (int i = 0; i < p->L * p->Hkv; i++) lane_free(&s->lane[i], s->w);
    free(s->lane); free(s->scored); free(s->slot_of); free(s->ka);
    free(s);
    p->st = NULL;
}

static ems_state *state_new(const skv_policy *p, int d) {
    const int nl = p->L * p->Hkv;
    ems_state *s = skv_calloc(1, sizeof *s, "ems state");
    if (!s) return NULL;
    s->w = ems_w(p);
    s->d = d;
    s->scored = skv_calloc((size_t)nl, sizeof(int), "ems state");
    s->lane = skv_calloc((size_t)nl, sizeof(ems_lane), "ems state");
    s->ka = skv_malloc((size_t)d * 4 * sizeof(float), "ems state");
    bool ok = s->scored && s->lane && s->ka && !skv_lanescore_init(&s->global, nl) && !skv_lanescore_init(&s->local, nl);
    for (int i = 0; ok && i < nl; i++) ok = (s->lane[i].ring = skv_calloc((size_t)s->w, sizeof(ems_row), "ems ring")) != NULL;
    if (!ok) {
        skv_policy tmp = *p;
        tmp.st = s;
        ems_free(&tmp);
        return NULL;
    }
    s->va = s->ka + d; s->kb = s->ka + 2 * d; s->vb = s->ka + 3 * d;
    return s;
}

static int ems_fork(const skv_policy *src, skv_policy *dst) {
    const ems_state *a = src->st;
    ems_state *b = state_new(src, a->d);
    if (!b) return -1;
    dst->st = b;
    const int nl = src->L * src->Hkv;
    if (skv_lanescore_reserve(&b->global, a->global.cap) || skv_lanescore_reserve(&b->local, a->local.cap)) goto fail;
    for (int i = 0; i < nl; i++) {
        if (a->global.cap) memcpy(b->global.s[i], a->global.s[i], (size_t)a->global.cap * sizeof(float));
        if (a->local.cap) memcpy(b->local.s[i], a->local.s[i], (size_t)a->local.cap * sizeof(float));
        b->scored[i] = a->scored[i];
        const ems_lane *x = &a->lane[i];
        ems_lane *y = &b->lane[i];
        if (lane_reserve(y, x->cap, a->d)) goto fail;
        y->n_lut = x->n_lut; y->n_cen = x->n_cen;
        if (x->cap) {
            memcpy(y->lut_pos, x->lut_pos, (size_t)x->n_lut * sizeof(int));
            memcpy(y->lut_cen, x->lut_cen, (size_t)x->n_lut * sizeof(int));
            memcpy(y->cen_pos, x->cen_pos, (size_t)x->n_cen * sizeof(int));
            memcpy(y->cen_mult, x->cen_mult, (size_t)x->n_cen * sizeof(int));
        }
        y->ring_n = x->ring_n; y->ring_head = x->ring_head; y->local_from_ring = x->local_from_ring;
        for (int k = 0; k < a->w; k++) {
            const ems_row *r = &x->ring[k];
            if (!r->n) continue;
            ems_row *q = &y->ring[k];
            q->pos = skv_malloc((size_t)r->n * sizeof(int), "ems ring");
            q->p = skv_malloc((size_t)r->n * sizeof(float), "ems ring");
            if (!q->pos || !q->p) goto fail;
            q->n = q->cap = r->n;
            memcpy(q->pos, r->pos, (size_t)r->n * sizeof(int));
            memcpy(q->p, r->p, (size_t)r->n * sizeof(float));
        }
    }
    return 0;
fail:
    ems_free(dst);
    return -1;
}

/* The head dim is not known to the policy interface: the state is created lazily at the
 * first select / prefill from the cache. */
static int ems_ensure(skv_policy *p, int d) {
    if (p->st) return 0;
    p->st = state_new(p, d);
    return p->st ? 0 : -1;
}
static int ems_prefill_lazy(skv_policy *p, const skv_prefill_info *pi) {
    if (ems_ensure(p, pi->cache->d)) return -1;
    return ems_prefill(p, pi);
}
static int ems_select_lazy(skv_policy *p, skv_select_io *io) {
    if (ems_ensure(p, io->cache->d)) return -1;
    return ems_select(p, io);
}
static void ems_step_lazy(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, const float *head_p,
                          int n) {
    (void)head_p;
    if (p->st) ems_step(p, layer, kvh, pos, prob, n);
}
static int ems_fork_lazy(const skv_policy *src, skv_policy *dst) {
    if (!src->st) { dst->st = NULL; return 0; }
    return ems_fork(src, dst);
}

static int ems_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    p->st = NULL;
    p->wants_colsum = true;
    p->obs_rows = ems_w(p);
    p->wants_step = true;
    p->on_prefill = ems_prefill_lazy;
    p->select = ems_select_lazy;
    p->on_step = ems_step_lazy;
    p->after_apply = ems_after_apply;
    p->fork = ems_fork_lazy;
    p->free_state = ems_free;
    return 0;
}

const skv_policy_desc skv_policy_ems = {
    .name = "ems",
    .summary = "evict-then-merge: the top gamma*budget tokens, the rest merged into centres",
    .keeps = "The top `ems_gamma` x budget tokens by a global plus local accumulated attention score: "
             "the best budget's worth stay as centres, and each other one is merged into the centre "
             "whose K and V it resembles most (above `ems_tau`) or dropped; eviction is permanent.",
    .choose = "For research comparison with evict-then-merge: it was far behind every other policy on "
              "fidelity (docs/results.md section 1; those rows predate the fix of its sinks, so they "
              "understate it).",
    .caps = 0,
    .opts = ems_opt_table,
    .n_opts = sizeof ems_opt_table / sizeof *ems_opt_table,
    .opts_size = sizeof(ems_opts),
    .init = ems_init,
};
