/* pyramidinfer.c: PyramidInfer (Yang et al., ACL Findings 2024, arXiv 2405.12532; its code
 * github.com/mutonix/pyramidinfer, models/modeling_llama_pyramidinfer*.py and configs/).
 * What it owns: per-layer retention that falls with depth, the pivotal context (PvC) of each
 * layer chosen by the attention of the most recent tokens, and its decode-time compression.
 *
 * As published, one token set per layer (attention averaged over every head, so all KV
 * heads of a layer keep the same positions):
 *   prefill  the last 1 + int(pi_recent * n) tokens (the recent window) are never compressed;
 *            layer 0 keeps every context token; the context of layer l+1 is the top
 *            int(|ctx_l| * r(l)) of layer l's context by layer l's recent-window attention
 *            (nested: a deeper layer keeps a subset), r(l) = (1 - d)(cos(pi l / L) + 1) / 2 + d
 *            (pi_decay d, cosine schedule), the first `sinks` always kept, no compression once
 *            it would leave pi_min_ctx tokens or fewer, only every pi_interval-th layer;
 *   decode   a layer whose hot length exceeds the recent window plus its length at the last
 *            compression by pi_exceed tokens compresses the pi_exceed tokens just before the
 *            recent window to max(int(pi_exceed * pi_gen_compress * g(l)), 1) by the same
 *            score, g(l) the schedule with pi_gen_decay; everything else stays.
 * pi_retain=schedule runs exactly that (the session's budget is ignored; the memory report
 * shows what the hot tier holds). pi_retain=budget (default) holds the session's budget at
 * every step with the same shape: layer l's share is proportional to its published
 * retention c_l (1 - rho) + rho (c_l = prod of r over the layers above it, rho = pi_recent),
 * mean 1, the recent window scaled alike; prefill keeps the nesting; decoding evicts the
 * lowest-scored context tokens of each layer, eviction permanent in both modes.
 * Differences the session imposes: the prefill is exact (deeper layers of the published
 * code never compute the dropped tokens' hidden states), the score window is the session's
 * fixed `window` rows (published: the whole recent window, 1 + 20 % of the prompt) and its
 * rows are not distance-weighted (published configs: distance_weight 1.2). */
#include "policy.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_PI 3.14159265358979323846

typedef enum { PI_COSINE = 0, PI_LINEAR = 1, PI_CONSTANT = 2 } pi_schedule;
typedef enum { PI_BUDGET = 0, PI_SCHEDULE = 1 } pi_retain;
static const char *const pi_schedule_names[] = {"cosine", "linear", "constant", NULL};
static const char *const pi_retain_names[] = {"budget", "schedule", NULL};

typedef struct {
    int retain;           /* pi_retain */
    float recent;         /* recent window: 1 + int(recent * n) tokens */
    float decay;          /* prefill decay ratio d (deepest layer's per-layer ratio) */
    int schedule;         /* pi_schedule of both decay ratios */
    int min_ctx;          /* no prefill compression to min_ctx tokens or fewer */
    int interval;         /* compress after every interval-th layer */
    float gen_decay;      /* decode decay ratio */
    float gen_compress;   /* decode: share of the compressed block before the decay */
    int exceed;           /* decode: block length */
    int sinks, window;
} pi_opts;

static const skv_opt_desc pi_opt_table[] = {
    {"pi_retain", NULL, SKV_OPT_ENUM, offsetof(pi_opts, retain), PI_BUDGET, 0, 0, pi_retain_names, 0, PI_BUDGET,
     "budget: the published per-layer shape held to the session's budget; schedule: retention from the "
     "decay ratios alone, as published (the budget is ignored)"},
    {"pi_recent", NULL, SKV_OPT_FLOAT, offsetof(pi_opts, recent), 0.2, 0, 0.9, NULL, 0, 0.2,
     "recent window, never compressed: 1 + int(pi_recent x length) tokens (recent_ratio)"},
    {"pi_decay", NULL, SKV_OPT_FLOAT, offsetof(pi_opts, decay), 0.9, 0.01, 1, NULL, 0, 0.9,
     "prefill: per-layer retention ratio reached at the top layer (prefill_decay_ratio)"},
    {"pi_schedule", NULL, SKV_OPT_ENUM, offsetof(pi_opts, schedule), PI_COSINE, 0, 0, pi_schedule_names, 0, PI_COSINE,
     "how the per-layer ratio moves from 1 to the decay ratio with depth (decay_strategy)"},
    {"pi_min_ctx", NULL, SKV_OPT_INT, offsetof(pi_opts, min_ctx), 64, 0, 4096, NULL, 0, 64,
     "prefill: no compression that would leave this many context tokens or fewer (min_context_length)"},
    {"pi_interval", NULL, SKV_OPT_INT, offsetof(pi_opts, interval), 1, 1, 64, NULL, 0, 1,
     "prefill: compress after every N-th layer only (layerwise_downsample_interval)"},
    {"pi_gen_decay", NULL, SKV_OPT_FLOAT, offsetof(pi_opts, gen_decay), 0.1, 0.01, 1, NULL, 0, 0.1,
     "decode: per-layer ratio at the top layer (gen_decay_ratio)"},
    {"pi_gen_compress", NULL, SKV_OPT_FLOAT, offsetof(pi_opts, gen_compress), 0.9, 0.01, 1, NULL, 0, 0.9,
     "decode: a full block keeps this share times the layer's ratio (gen_compress_ratio)"},
    {"pi_exceed", NULL, SKV_OPT_INT, offsetof(pi_opts, exceed), 16, 1, 4096, NULL, 0, 16,
     "decode: tokens past the recent window that trigger a compression (exceed_length_to_compress)"},
    SKV_OPT_SINKS(pi_opts),
    SKV_OPT_WINDOW(pi_opts),
};

typedef struct {
    int cap;                  /* positions per score row */
    float **pre;              /* [L] the prefill's window sums over all heads */
    float **acc;              /* [L] sum of the ring's decode rows */
    float **ring;             /* [L] window rows x cap: the last decode rows, all heads summed */
    int ring_n, head, steps;  /* completed rows, the row being filled, steps since the prefill */
    double *c;                /* [L] published context retention of layer l (c_0 = 1) */
    double c_mean;            /* mean of c_l (1 - rho) + rho over layers */
    int *past;                /* [L*Hkv] schedule: hot length at the lane's last compression */
    unsigned char *fresh;     /* [L] a prefill just scored the layer */
    unsigned char *prev_set;  /* (cap) context kept by layer prev_layer at this prefill */
    unsigned char *cur_set;   /* (cap) ... by the layer being selected (its first lane) */
    int prev_layer, prev_n;
} pi_state;

static double pi_ratio(int schedule, double d, int l, int L) {
    if (schedule == PI_COSINE) return (1.0 - d) * (cos(PI_PI * l / L) + 1.0) / 2.0 + d;
    if (schedule == PI_LINEAR) return (1.0 - d) * ((double)l / L) + d;
    return d;
}

static int pi_reserve(skv_policy *p, int n) {
    pi_state *s = p->st;
    const int w = ((const pi_opts *)p->opts)->window;
    if (n <= s->cap) return 0;
    int nc = s->cap * 2 > n ? s->cap * 2 : n;
    if (nc < 64) nc = 64;
    unsigned char *ps = skv_calloc((size_t)nc, 1, "pyramidinfer state");
    unsigned char *cs = skv_calloc((size_t)nc, 1, "pyramidinfer state");
    if (!ps || !cs) { free(ps); free(cs); return -1; }
    if (s->cap) { memcpy(ps, s->prev_set, (size_t)s->cap); memcpy(cs, s->cur_set, (size_t)s->cap); }
    free(s->prev_set); free(s->cur_set);
    s->prev_set = ps; s->cur_set = cs;
    for (int l = 0; l < p->L; l++) {
        float *a = skv_calloc((size_t)nc, sizeof(float), "pyramidinfer scores");
        float *b = skv_calloc((size_t)nc, sizeof(float), "pyramidinfer scores");
        float *r = skv_calloc((size_t)nc * w, sizeof(float), "pyramidinfer rows");
        if (!a || !b || !r) { free(a); free(b); free(r); return -1; }
        if (s->cap) {
            memcpy(a, s->pre[l], (size_t)s->cap * sizeof(float));
            memcpy(b, s->acc[l], (size_t)s->cap * sizeof(float));
            for (int i = 0; i < w; i++) memcpy(r + (size_t)i * nc, s->ring[l] + (size_t)i * s->cap, (size_t)s->cap * sizeof(float));
        }
        free(s->pre[l]); free(s->acc[l]); free(s->ring[l]);
        s->pre[l] = a; s->acc[l] = b; s->ring[l] = r;
    }
    s->cap = nc;
    return 0;
}

/* The recent-window score of a layer's positions < n: the prompt's window rows (fading out
 * as decode rows replace them) plus the decode rows still in the window. */
static void pi_score(const skv_policy *p, int layer, int n, float *out) {
    const pi_state *s = p->st;
    const int w = ((const pi_opts *)p->opts)->window;
    const float fade = s->steps < w ? (float)(w - s->steps) / (float)w : 0.0f;
    for (int k = 0; k < n; k++) out[k] = k < s->cap ? fade * s->pre[layer][k] + s->acc[layer][k] : 0.0f;
}

/* Recent window of a lane: published 1 + int(rho n); held to a budget, the same share of
 * the lane's budget as the published shape gives it. */
static int pi_recent_len(const skv_policy *p, int layer, int n, double budget) {
    const pi_opts *o = p->opts;
    const pi_state *s = p->st;
    int r;
    if (o->retain == PI_SCHEDULE) r = 1 + (int)(o->recent * (double)n);
    else {
        const double rho = o->recent;
        r = (int)floor(budget * rho / (s->c[layer] * (1.0 - rho) + rho) + 1e-9);
        if (r < 1) r = 1;
    }
    return r < n ? r : n;
}

static int pi_prefill(skv_policy *p, const skv_prefill_info *pi) {
    pi_state *s = p->st;
    const pi_opts *o = p->opts;
    if (!pi->obs) return skv_error("%s: prefill without the observation-window sums", p->name);
    if (pi->layer < 0 || pi->layer >= p->L) return skv_error("%s: layer %d", p->name, pi->layer);
    if (pi_reserve(p, pi->n)) return -1;
    if (pi->layer == 0) {   /* a new prompt: its window rows replace the decode rows */
        for (int l = 0; l < p->L; l++) {
            memset(s->acc[l], 0, (size_t)s->cap * sizeof(float));
            memset(s->ring[l], 0, (size_t)s->cap * o->window * sizeof(float));
        }
        s->ring_n = s->head = s->steps = 0;
        s->prev_layer = -1;
    }
    float *a = s->pre[pi->layer];
    memset(a, 0, (size_t)s->cap * sizeof(float));
    for (int h = 0; h < p->H; h++)
        for (int k = 0; k < pi->n; k++) a[k] += pi->obs[(size_t)h * pi->stride + k];
    s->fresh[pi->layer] = 1;
    return 0;
}

/* candidates: positions hot in the lane or never offered (>= n0); eviction is permanent */
static void pi_mark(const skv_select_io *io) {
    memset(io->mark, 0, (size_t)io->n);
    const int *P = skv_kvcache_hot_pos_kv(io->cache, io->layer, io->kvh);
    const int nh = io->cache->n_kv[io->lane];
    for (int i = 0; i < nh; i++) if (P[i] >= 0 && P[i] < io->n) io->mark[P[i]] = 1;
    for (int k = io->n0 > 0 ? io->n0 : 0; k < io->n; k++) io->mark[k] = 1;
}

/* Keep `k` of the cand[0..nc) (ascending): those below `sinks` first, then the top by score.
 * The kept ones are appended to io->kv_pos (unsorted); returns how many. */
static int pi_keep(skv_select_io *io, const float *score, int *cand, int nc, int k, int sinks) {
    if (k > nc) k = nc;
    if (k <= 0) return 0;
    int ns = 0;
    while (ns < nc && cand[ns] < sinks) ns++;
    if (ns > k) ns = k;
    for (int i = 0; i < ns; i++) io->kv_pos[io->n_kv++] = cand[i];
    int got = skv_topk(score, cand + ns, nc - ns, k - ns);
    for (int i = 0; i < got; i++) io->kv_pos[io->n_kv++] = cand[ns + i];
    return ns + got;
}

static int pi_select_prefill(skv_policy *p, skv_select_io *io) {
    pi_state *s = p->st;
    const pi_opts *o = p->opts;
    const int n = io->n, layer = io->layer;
    pi_mark(io);
    const int keep = skv_budget_tokens(io->budget, n);
    int R = pi_recent_len(p, layer, n, io->budget);
    if (o->retain == PI_BUDGET && R > keep) R = keep;
    const int lo = n - R;
    const bool nest = layer > 0 && s->prev_layer == layer - 1 && s->prev_n == n;
    int nc = 0;
    for (int k = 0; k < lo; k++) if (io->mark[k] && (!nest || s->prev_set[k])) io->itmp[nc++] = k;
    pi_score(p, nest ? layer - 1 : layer, n, io->ftmp);
    int k;
    if (o->retain == PI_BUDGET) k = keep - R;
    else if (!nest || (layer - 1) % o->interval) k = nc;
    else {   /* the published transition from layer - 1 to layer */
        const double r = pi_ratio(o->schedule, o->decay, layer - 1, p->L);
        const int mc = o->min_ctx < n - R ? o->min_ctx : n - R;
        const int kk = (int)(nc * r);
        k = nc > mc && r < 1.0 && kk > mc ? kk : nc;
    }
    io->n_kv = 0;
    io->n_v = 0;
    pi_keep(io, io->ftmp, io->itmp, nc, k, o->sinks);
    if (io->kvh == 0) {   /* the next layer chooses among these (pi_select passes them on) */
        memset(s->cur_set, 0, (size_t)n);
        for (int i = 0; i < io->n_kv; i++) s->cur_set[io->kv_pos[i]] = 1;
    }
    for (int q = lo; q < n; q++) if (io->mark[q]) io->kv_pos[io->n_kv++] = q;
    skv_sort_ints(io->kv_pos, io->n_kv);
    s->past[io->lane] = io->n_kv;
    return 0;
}

static int pi_select_decode(skv_policy *p, skv_select_io *io) {
    pi_state *s = p->st;
    const pi_opts *o = p->opts;
    const int n = io->n, layer = io->layer;
    pi_score(p, layer, n, io->ftmp);
    if (o->retain == PI_BUDGET) {
        const int keep = skv_budget_tokens(io->budget, n);
        skv_select_scored(io, io->ftmp, keep, pi_recent_len(p, layer, n, io->budget), true, o->sinks);
        return 0;
    }
    pi_mark(io);
    int h = 0;
    for (int k = 0; k < n; k++) if (io->mark[k]) io->kv_pos[h++] = k;
    io->n_kv = h;
    io->n_v = 0;
    const int R = pi_recent_len(p, layer, n, io->budget), b0 = h - R - o->exceed;
    if (h - R - s->past[io->lane] < o->exceed || b0 < 0) return 0;
    /* the block of `exceed` tokens just before the recent window */
    const double g = pi_ratio(o->schedule, o->gen_decay, layer, p->L);
    int kk = (int)(o->exceed * (double)o->gen_compress * g);
    if (kk < 1) kk = 1;
    memcpy(io->itmp, io->kv_pos + b0, (size_t)o->exceed * sizeof(int));
    const int nt = h - (b0 + o->exceed);   /* the recent window: R positions */
    io->n_kv = b0;
    pi_keep(io, io->ftmp, io->itmp, o->exceed, kk, o->sinks);   /* into the block's slots */
    memmove(io->kv_pos + io->n_kv, io->kv_pos + b0 + o->exceed, (size_t)nt * sizeof(int));
    io->n_kv += nt;
    skv_sort_ints(io->kv_pos, io->n_kv);
    s->past[io->lane] = io->n_kv - R;
    return 0;
}

static int pi_select(skv_policy *p, skv_select_io *io) {
    pi_state *s = p->st;
    if (pi_reserve(p, io->n)) return -1;
    int rc;
    if (s->fresh[io->layer]) {
        rc = pi_select_prefill(p, io);
        if (io->kvh == p->Hkv - 1) {   /* the layer is done: its context is the next one's pool */
            unsigned char *t = s->prev_set;
            s->prev_set = s->cur_set;
            s->cur_set = t;
            s->prev_layer = io->layer;
            s->prev_n = io->n;
            s->fresh[io->layer] = 0;
        }
    } else {
        rc = pi_select_decode(p, io);
    }
    return rc;
}

static void pi_step(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, const float *head_p, int n) {
    (void)kvh; (void)head_p;
    pi_state *s = p->st;
    float *row = s->ring[layer] + (size_t)s->head * s->cap, *a = s->acc[layer];
    for (int i = 0; i < n; i++)
        if (pos[i] >= 0 && pos[i] < s->cap) { row[pos[i]] += prob[i]; a[pos[i]] += prob[i]; }
}

/* The step's row is complete: the window moves on by one row. */
static int pi_after_step(skv_policy *p, int n) {
    (void)n;
    pi_state *s = p->st;
    const int w = ((const pi_opts *)p->opts)->window;
    s->steps++;
    if (s->ring_n < w) s->ring_n++;
    s->head = (s->head + 1) % w;
    if (s->ring_n == w) {   /* the oldest row leaves the window */
        for (int l = 0; l < p->L && s->cap; l++) {
            float *row = s->ring[l] + (size_t)s->head * s->cap, *a = s->acc[l];
            for (int k = 0; k < s->cap; k++) a[k] -= row[k];
            memset(row, 0, (size_t)s->cap * sizeof(float));
        }
        s->ring_n = w - 1;
    }
    return 0;
}

static double pi_share(const skv_policy *p, int layer, int kvh, double budget) {
    (void)kvh; (void)budget;
    const pi_opts *o = p->opts;
    const pi_state *s = p->st;
    if (o->retain == PI_SCHEDULE) return 1.0;
    const double rho = o->recent;
    return (s->c[layer] * (1.0 - rho) + rho) / s->c_mean;
}

static void pi_free(skv_policy *p) {
    pi_state *s = p->st;
    if (!s) return;
    for (int l = 0; s->pre && l < p->L; l++) { free(s->pre[l]); free(s->acc[l]); free(s->ring[l]); }
    free(s->pre); free(s->acc); free(s->ring);
    free(s->c); free(s->past); free(s->fresh); free(s->prev_set); free(s->cur_set);
    free(s);
    p->st = NULL;
}

static pi_state *pi_state_new(const skv_policy *p) {
    pi_state *s = skv_calloc(1, sizeof *s, "pyramidinfer state");
    if (!s) return NULL;
    const int L = p->L;
    s->pre = skv_calloc((size_t)L, sizeof(float *), "pyramidinfer state");
    s->acc = skv_calloc((size_t)L, sizeof(float *), "pyramidinfer state");
    s->ring = skv_calloc((size_t)L, sizeof(float *), "pyramidinfer state");
    s->c = skv_calloc((size_t)L, sizeof(double), "pyramidinfer state");
    s->past = skv_calloc((size_t)L * p->Hkv, sizeof(int), "pyramidinfer state");
    s->fresh = skv_calloc((size_t)L, 1, "pyramidinfer state");
    s->prev_layer = -1;
    return s;
}

static int pi_fork(const skv_policy *src, skv_policy *dst) {
    const pi_state *a = src->st;
    const int w = ((const pi_opts *)src->opts)->window;
    pi_state *b = pi_state_new(src);
    dst->st = b;
    if (!b || !b->pre || !b->acc || !b->ring || !b->c || !b->past || !b->fresh) goto fail;
    const int L = src->L, cap = a->cap;
    memcpy(b->c, a->c, (size_t)L * sizeof(double));
    memcpy(b->past, a->past, (size_t)L * src->Hkv * sizeof(int));
    memcpy(b->fresh, a->fresh, (size_t)L);
    b->c_mean = a->c_mean;
    b->ring_n = a->ring_n; b->head = a->head; b->steps = a->steps;
    b->prev_layer = a->prev_layer; b->prev_n = a->prev_n;
    if (cap) {
        b->cap = cap;
        b->prev_set = skv_malloc((size_t)cap, "pyramidinfer state");
        b->cur_set = skv_malloc((size_t)cap, "pyramidinfer state");
        if (!b->prev_set || !b->cur_set) goto fail;
        memcpy(b->prev_set, a->prev_set, (size_t)cap);
        memcpy(b->cur_set, a->cur_set, (size_t)cap);
        for (int l = 0; l < L; l++) {
            b->pre[l] = skv_malloc((size_t)cap * sizeof(float), "pyramidinfer scores");
            b->acc[l] = skv_malloc((size_t)cap * sizeof(float), "pyramidinfer scores");
            b->ring[l] = skv_malloc((size_t)cap * w * sizeof(float), "pyramidinfer rows");
            if (!b->pre[l] || !b->acc[l] || !b->ring[l]) goto fail;
            memcpy(b->pre[l], a->pre[l], (size_t)cap * sizeof(float));
            memcpy(b->acc[l], a->acc[l], (size_t)cap * sizeof(float));
            memcpy(b->ring[l], a->ring[l], (size_t)cap * w * sizeof(float));
        }
    }
    return 0;
fail:
    pi_free(dst);
    return -1;
}

static void pi_mem(const skv_policy *p, skv_policy_mem *m) {
    const pi_state *s = p->st;
    const int w = ((const pi_opts *)p->opts)->window;
    m->score_bytes += (size_t)p->L * s->cap * (size_t)(2 + w) * sizeof(float);
}

static int pi_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    const pi_opts *o = p->opts;
    pi_state *s = pi_state_new(p);
    p->st = s;
    if (!s || !s->pre || !s->acc || !s->ring || !s->c || !s->past || !s->fresh) { pi_free(p); return -1; }
    double sum = 0;
    for (int l = 0; l < p->L; l++) {
        s->c[l] = l == 0 ? 1.0
                         : s->c[l - 1] * ((l - 1) % o->interval ? 1.0 : pi_ratio(o->schedule, o->decay, l - 1, p->L));
        sum += s->c[l] * (1.0 - o->recent) + o->recent;
    }
    s->c_mean = sum / p->L;
    p->obs_rows = o->window;
    p->wants_step = true;
    p->on_prefill = pi_prefill;
    p->select = pi_select;
    p->on_step = pi_step;
    p->after_step = pi_after_step;
    p->lane_share = pi_share;
    p->fork = pi_fork;
    p->mem = pi_mem;
    p->free_state = pi_free;
    return 0;
}

const skv_policy_desc skv_policy_pyramidinfer = {
    .name = "pyramidinfer",
    .summary = "per-layer pivotal context chosen by the recent tokens' attention, fewer tokens in deeper layers",
    .keeps = "Per layer (all its KV heads alike) the sinks, the recent window (`pi_recent` of the length) and "
             "the context tokens the recent window's attention ranks highest, fewer in deeper layers "
             "(nested: a deeper layer keeps a subset of the layer above); with `pi_retain=budget` (default) "
             "that shape is scaled to the budget and held while decoding, with `pi_retain=schedule` the "
             "published decay ratios alone decide, and decoding compresses blocks of `pi_exceed` tokens "
             "before the recent window. Eviction is permanent.",
    .choose = "A published baseline of the SmallKV paper (PyramidInfer), for comparison in the same "
              "accounting; no measurement of it is in docs/results.md yet.",
    .caps = 0,
    .opts = pi_opt_table,
    .n_opts = sizeof pi_opt_table / sizeof *pi_opt_table,
    .opts_size = sizeof(pi_opts),
    .init = pi_init,
};
