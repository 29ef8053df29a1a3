/* session.c: drives the LLM forward pass through the compressed KV cache (see session.h).
 *
 * Per layer the forward calls sess_attn with this block's rotated q (T, H, d), k, v
 * (T, Hkv, d):
 *   prefill: k, v -> cold tier; exact causal attention over the cold tier (skv_attention,
 *            with column sums / last-window sums when the policy wants them);
 *   decode : k, v -> cold tier; per lane: policy select -> reserve -> apply (evict, restore
 *            from cold) -> compensated attention over the hot tier (+ marginal V) ->
 *            policy on_step with the hot slots' probabilities. */
#include "session.h"
#include "common/util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/compensate.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_session_opts_default(skv_session_opts *o) {
    memset(o, 0, sizeof *o);
    o->policy = "full";
    skv_policy_opts_default(&o->popts);
    o->budget = 1.0;
    o->kv_f16 = true;
    o->max_ctx = 4096;
    o->T_max = 256;
    o->online_min = 100;
    o->online_max = 200;
}

double skv_session_budget(const skv_session *s, int n) {
    if (!strcmp(s->pol->name, "full")) return n;
    double b = s->o.budget_abs ? s->o.budget : s->o.budget * n;
    if (b < 1) b = 1;
    return b;
}

static float **alloc_rows(int count, size_t n, const char *what) {
    float **a = skv_calloc((size_t)count, sizeof(float *), what);
    if (!a) return NULL;
    for (int i = 0; i < count; i++) {
        a[i] = skv_calloc(n ? n : 1, sizeof(float), what);
        if (!a[i]) {
            for (int j = 0; j < i; j++) free(a[j]);
            free(a);
            return NULL;
        }
    }
    return a;
}

static void free_rows(float **a, int count) {
    if (!a) return;
    for (int i = 0; i < count; i++) free(a[i]);
    free(a);
}

static int attach_slm_view(skv_session *s) {
    skv_slm_view v = {
        .map = s->o.online_map ? NULL : s->o.map,
        .slm_heads = s->o.slm->cfg.n_head,
        .slm_layers = s->slm_layers,
        .colsum = (const float *const *)s->slm_colsum,
        .lastrow = (const float *const *)s->slm_lastrow,
        .stride = s->o.max_ctx,
    };
    return skv_policy_smallkv_attach(s->pol, &v);
}

/* the SLM's per-layer column sums and last rows, depth layers of (h, max_ctx) */
static int alloc_slm_scores(skv_session *s, const skv_model *sm, int depth) {
    s->slm_layers = depth;
    s->slm_colsum = alloc_rows(depth, (size_t)sm->cfg.n_head * s->o.max_ctx, "SLM column sums");
    s->slm_lastrow = alloc_rows(depth, (size_t)sm->cfg.n_head * s->o.max_ctx, "SLM last rows");
    return s->slm_colsum && s->slm_lastrow ? 0 : -1;
}

/* allocate everything but the policy, the cache contents and the SLM state */
static int alloc_buffers(skv_session *s) {
    const skv_config *c = &s->m->cfg;
    const int N = s->o.max_ctx, Hkv = c->n_kv_head, g = c->n_head / c->n_kv_head;
    s->sel_kv = skv_calloc((size_t)Hkv, sizeof(int *), "session");
    s->sel_v = skv_calloc((size_t)Hkv, sizeof(int *), "session");
    s->n_selkv = skv_calloc((size_t)Hkv, sizeof(int), "session");
    s->n_selv = skv_calloc((size_t)Hkv, sizeof(int), "session");
    s->lane_budget = skv_calloc((size_t)Hkv, sizeof(double), "session");
    if (!s->sel_kv || !s->sel_v || !s->n_selkv || !s->n_selv || !s->lane_budget) return -1;
    for (int j = 0; j < Hkv; j++) {
        s->sel_kv[j] = skv_malloc((size_t)N * sizeof(int), "session selection");
        s->sel_v[j] = skv_malloc((size_t)N * sizeof(int), "session selection");
        if (!s->sel_kv[j] || !s->sel_v[j]) return -1;
    }
    s->itmp = skv_malloc((size_t)N * sizeof(int), "session scratch");
    s->ftmp = skv_malloc((size_t)N * sizeof(float), "session scratch");
    s->mark = skv_malloc((size_t)N, "session scratch");
    /* per KV head (lane) of a layer, so the lanes' decode attention can run in parallel */
    s->probs = skv_malloc((size_t)Hkv * N * sizeof(float), "session scratch");
    s->scr = skv_malloc((size_t)Hkv * N * sizeof(float), "session scratch");
    s->pm = skv_malloc((size_t)Hkv * g * N * sizeof(float), "session scratch");
    s->w = skv_malloc((size_t)Hkv * g * sizeof(float), "session scratch");
    s->lane_args = skv_calloc((size_t)Hkv, sizeof(skv_comp_args), "session lanes");
    s->lane_head_p = skv_calloc((size_t)Hkv, sizeof(float *), "session lanes");
    if (!s->lane_args || !s->lane_head_p) return -1;
    s->obs_out = skv_malloc((size_t)s->st->T_max * c->n_head * c->head_dim * sizeof(float), "session scratch");
    if (!s->itmp || !s->ftmp || !s->mark || !s->probs || !s->scr || !s->pm || !s->w || !s->obs_out) return -1;
    return 0;
}

void skv_session_free(skv_session *s) {
    if (!s) return;
    const int L = s->m->cfg.n_layer, Hkv = s->m->cfg.n_kv_head;
    skv_state_free(s->st);
    skv_kvcache_free(s->kv);
    skv_policy_free(s->pol);
    free_rows(s->pre_colsum, L);
    free_rows(s->pre_obs, L);
    free(s->obs_out);
    if (s->sel_kv) for (int j = 0; j < Hkv; j++) free(s->sel_kv[j]);
    if (s->sel_v) for (int j = 0; j < Hkv; j++) free(s->sel_v[j]);
    free(s->sel_kv); free(s->sel_v); free(s->n_selkv); free(s->n_selv); free(s->lane_budget);
    free(s->itmp); free(s->ftmp); free(s->mark); free(s->probs); free(s->scr); free(s->pm); free(s->w);
    free(s->lane_args); free(s->lane_head_p);
    skv_state_free(s->slm);
    skv_session_free(s->slm_sess);
    free(s->x_tmp);
    free_rows(s->slm_colsum, s->slm_layers);
    free_rows(s->slm_lastrow, s->slm_layers);
    free_rows(s->onl_llm, L);
    skv_batch_free(s->bws);
    skv_batch_free(s->slm_bws);
    free(s);
}

skv_session *skv_session_new(const skv_model *m, const skv_session_opts *o) {
    if (!m || !o || o->max_ctx < 1) { skv_error("skv_session_new: bad arguments"); return NULL; }
    if (!o->budget_abs && !(o->budget > 0 && o->budget <= 1)) {
        skv_error("skv_session_new: budget %g is not a fraction in (0, 1]", o->budget);
        return NULL;
    }
    if (o->budget_abs && !(o->budget >= 1)) {
        skv_error("skv_session_new: budget %g tokens is below 1", o->budget);
        return NULL;
    }
    const skv_config *c = &m->cfg;
    skv_session *s = skv_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->m = m;
    s->o = *o;
    if (s->o.T_max < 1) s->o.T_max = 256;
    if (s->o.online_min < 1) s->o.online_min = 100;
    if (s->o.online_max < s->o.online_min) s->o.online_max = s->o.online_min;
    s->pol = skv_policy_new(o->policy ? o->policy : "full", &o->popts, c->n_layer, c->n_head, c->n_kv_head);
    if (!s->pol) goto fail;
    s->L_act = o->n_layers > 0 && o->n_layers < c->n_layer ? o->n_layers : c->n_layer;
    s->st = skv_state_new_nocache(m, o->max_ctx, s->o.T_max, o->kv_f16);
    if (!s->st) goto fail;
    s->kv = skv_kvcache_new(c->n_layer, c->n_kv_head, c->head_dim, o->kv_f16);
    if (!s->kv || alloc_buffers(s)) goto fail;
    if (o->prefill_base) {
        if (strcmp(s->pol->name, "full") || o->n_layers) {
            skv_error("a prefill base runs policy full over all layers");
            goto fail;
        }
        if (o->slm) {
            const skv_model *sm = o->slm;
            int depth = o->slm_layers > 0 && o->slm_layers < sm->cfg.n_layer ? o->slm_layers : sm->cfg.n_layer;
            if (alloc_slm_scores(s, sm, depth)) goto fail;
            if (!(s->slm = skv_state_new(sm, o->max_ctx, s->o.T_max, o->kv_f16))) goto fail;
        }
    } else if (!strcmp(s->pol->name, "smallkv")) {
        const skv_model *sm = o->slm;
        if (!sm) { skv_error("smallkv: no SLM given"); goto fail; }
        if (sm->cfg.vocab != c->vocab) {
            skv_error("smallkv: SLM %s (vocab %d) and LLM %s (vocab %d) do not share a tokenizer",
                      sm->name ? sm->name : "?", sm->cfg.vocab, m->name ? m->name : "?", c->vocab);
            goto fail;
        }
        if (!o->online_map && !o->map) { skv_error("smallkv: no head mapping (give a profile's map or online)"); goto fail; }
        int depth = o->slm_layers;
        if (depth <= 0) {
            depth = sm->cfg.n_layer;
            if (!o->online_map) {
                depth = 1;
                for (int i = 0; i < c->n_layer * c->n_head; i++) {
                    int l = o->map[i] / sm->cfg.n_head + 1;
                    if (l > depth) depth = l;
                }
            }
        }
        if (depth > sm->cfg.n_layer) depth = sm->cfg.n_layer;
        if (alloc_slm_scores(s, sm, depth)) goto fail;
        if ((o->slm_budget > 0 && o->slm_budget < 1) || o->slm_session) {
            /* the SLM's cache compressed by H2O: the SLM runs as a session of its own */
            skv_session_opts so;
            skv_session_opts_default(&so);
            so.policy = "h2o";
            so.popts = o->popts;
            so.budget = o->slm_budget > 0 && o->slm_budget < 1 ? o->slm_budget : 1.0;
            so.kv_f16 = o->kv_f16; so.max_ctx = o->max_ctx; so.T_max = s->o.T_max;
            so.n_layers = depth;
            if (!(s->slm_sess = skv_session_new(sm, &so))) { skv_error_prefix("SLM session"); goto fail; }
            skv_session_export(s->slm_sess, s->slm_colsum, s->slm_lastrow, o->max_ctx);
        } else if (!(s->slm = skv_state_new(sm, o->max_ctx, s->o.T_max, o->kv_f16))) {
            goto fail;
        }
        if (attach_slm_view(s)) goto fail;
        s->mapped = !o->online_map;
        if (o->online_map) {
            s->onl_llm = alloc_rows(c->n_layer, (size_t)c->n_head * s->o.online_max, "online matching");
            if (!s->onl_llm) goto fail;
        }
    }
    return s;
fail:
    skv_error_prefix("session (%s)", o->policy ? o->policy : "full");
    skv_session_free(s);
    return NULL;
}

/* ------------------------------------------------------------------ attention hook */

static int select_layer(skv_session *s, int layer, int n) {
    const int Hkv = s->m->cfg.n_kv_head;
    const double B = skv_session_budget(s, n);
    for (int j = 0; j < Hkv; j++) {
        double share = s->pol->lane_share ? s->pol->lane_share(s->pol, layer, j, B) : 1.0;
        s->lane_budget[j] = B * share;
        skv_select_io io = {
            .layer = layer, .kvh = j, .lane = skv_lane(s->kv, layer, j), .n = n, .n0 = s->n_sel,
            .budget = s->lane_budget[j], .cache = s->kv,
            .kv_pos = s->sel_kv[j], .v_pos = s->sel_v[j],
            .itmp = s->itmp, .ftmp = s->ftmp, .mark = s->mark,
        };
        if (s->pol->select(s->pol, &io)) return skv_error_prefix("policy %s, layer %d", s->pol->name, layer);
        s->n_selkv[j] = io.n_kv;
        s->n_selv[j] = io.n_v;
    }
    if (skv_kvcache_hot_reserve(s->kv, layer, s->n_selkv, s->n_selv)) return -1;
    s->kv->settled = s->n_sel;   /* loads of older positions are restores from cold */
    for (int j = 0; j < Hkv; j++) {
        int r = skv_kvcache_apply(s->kv, layer, j, s->sel_kv[j], s->n_selkv[j], s->sel_v[j], s->n_selv[j]);
        if (r < 0) return skv_error_prefix("policy %s, layer %d", s->pol->name, layer);
        if (s->pol->after_apply && s->pol->after_apply(s->pol, s->kv, layer, j))
            return skv_error_prefix("policy %s, layer %d", s->pol->name, layer);
        if (s->pol->after_apply) skv_kvlog_lane(s->kv, layer, j);   /* it writes slots itself (no-op without a log) */
    }
    s->restores = (int)s->kv->restores;
    return 0;
}

int skv_session_select(skv_session *s, int layer, int n) { return select_layer(s, layer, n); }

static void online_accumulate_step(skv_session *s, int layer, int kvh, const int *pos, int n_hot, const float *head_p);

/* Prefill block over a compressed past (policies without a cold tier, n0 > 0): query row
 * t sees the lane's hot slots (with their multiplicities) and the staged rows n0 .. pos0+t
 * of this prefill (cold own buffer). Exact softmax over what the cache still holds; the
 * per-head probabilities go to the prefill statistics at their positions. */
static int prefill_over_hot(skv_session *s, int layer, const float *q, int pos0, int T, float *out) {
    const skv_config *c = &s->m->cfg;
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim, g = H / Hkv;
    skv_kvcache *kv = s->kv;
    const size_t row = (size_t)d * kv->esz;
    const int n0 = kv->cold_base, nst = pos0 + T - n0;      /* staged rows n0 .. pos0+T-1 */
    for (int j = 0; j < Hkv; j++) {
        int rc = -1;
        const int ln = skv_lane(kv, layer, j), nh = kv->n_kv[ln], nt = nh + nst;
        char *K = skv_malloc((size_t)nt * row + 1, "prefill over the hot tier");
        char *V = skv_malloc((size_t)nt * row + 1, "prefill over the hot tier");
        int *pos = skv_malloc((size_t)nt * sizeof(int) + 1, "prefill over the hot tier");
        int *mu = skv_malloc((size_t)nt * sizeof(int) + 1, "prefill over the hot tier");
        float *hp = skv_malloc((size_t)g * nt * sizeof(float) + 1, "prefill over the hot tier");
        float *scr = skv_malloc((size_t)nt * sizeof(float) + 1, "prefill over the hot tier");
        if (!K || !V || !pos || !mu || !hp || !scr) goto lane_done;
        if (nh) {
            memcpy(K, skv_kvcache_hot_k(kv, layer, j), (size_t)nh * row);
            memcpy(V, skv_kvcache_hot_v(kv, layer, j), (size_t)nh * row);
            memcpy(pos, skv_kvcache_hot_pos_kv(kv, layer, j), (size_t)nh * sizeof(int));
            memcpy(mu, skv_kvcache_hot_mult(kv, layer, j), (size_t)nh * sizeof(int));
        }
        for (int i = 0; i < nst; i++) {
            memcpy(K + (size_t)(nh + i) * row, skv_kvcache_cold_k(kv, layer, j, n0 + i), row);
            memcpy(V + (size_t)(nh + i) * row, skv_kvcache_cold_v(kv, layer, j, n0 + i), row);
            pos[nh + i] = n0 + i;
            mu[nh + i] = 1;
        }
        for (int t = 0; t < T; t++) {
            const int p = pos0 + t, n = nh + (p - n0) + 1;
            skv_comp_args a = {.g = g, .d = d, .n_hot = n, .f16 = kv->f16, .k = K, .v = V, .mult = mu,
                               .head_p = hp, .scratch = scr};
            skv_compensate(out + ((size_t)t * H + (size_t)j * g) * d, q + ((size_t)t * H + (size_t)j * g) * d, &a);
            for (int u = 0; u < g; u++) {
                const int h = j * g + u;
                const float *pr = hp + (size_t)u * n;
                if (s->pre_colsum)
                    for (int i = 0; i < n; i++) s->pre_colsum[layer][(size_t)h * s->pre_stride + pos[i]] += pr[i];
                if (s->pre_obs && p >= s->pre_obs_from)
                    for (int i = 0; i < n; i++) s->pre_obs[layer][(size_t)h * s->pre_stride + pos[i]] += pr[i];
                if (s->x_lastrow && t == T - 1) {
                    float *lr = s->x_lastrow[layer] + (size_t)h * s->x_stride;
                    memset(lr, 0, (size_t)(p + 1) * sizeof(float));
                    for (int i = 0; i < n; i++) lr[pos[i]] = pr[i];
                }
            }
        }
        rc = 0;
    lane_done:
        free(K); free(V); free(pos); free(mu); free(hp); free(scr);
        if (rc) return -1;
    }
    return 0;
}

static int decode_layer(skv_session *s, int layer, const float *q, const float *k, const float *v, int pos0,
                        float *out);

static int sess_attn(void *ctx, int layer, const float *q, const float *k, const float *v, int pos0, int T, float *out) {
    skv_session *s = ctx;
    if (!s->in_prefill) {
        if (T != 1) return skv_error("session: decode block of %d tokens (1 expected)", T);
        return decode_layer(s, layer, q, k, v, pos0, out);
    }
    const skv_config *c = &s->m->cfg;
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    skv_kvcache *kv = s->kv;
    skv_kvcache_set_fresh(kv, layer, pos0, T, k, v);
    /* the cold tier keeps everything (SmallKV) or stages this prefill (the others) */
    if (skv_kvcache_cold_write(kv, layer, pos0, T, k, v)) return -1;
    if (kv->cold_base > 0) return prefill_over_hot(s, layer, q, pos0, T, out);
    skv_attn_args a = {
        .T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = kv->cold_cap, .kv_f16 = kv->f16,
        .colsum = s->pre_colsum ? s->pre_colsum[layer] : NULL,
        .lastrow = s->x_lastrow ? s->x_tmp : NULL,     /* (H, cold_cap), copied below */
    };
    skv_attention(out, q, kv->ck[layer], kv->cv[layer], &a);
    if (s->x_lastrow && layer < s->L_act)
        for (int h = 0; h < H; h++)
            memcpy(s->x_lastrow[layer] + (size_t)h * s->x_stride, s->x_tmp + (size_t)h * kv->cold_cap,
                   (size_t)(pos0 + T) * sizeof(float));
    if (s->pre_obs) {
        int t0 = s->pre_obs_from - pos0;
        if (t0 < 0) t0 = 0;
        if (t0 < T) {
            skv_attn_args b = a;
            b.T = T - t0; b.pos0 = pos0 + t0; b.colsum = s->pre_obs[layer]; b.lastrow = NULL;
            skv_attention(s->obs_out, q + (size_t)t0 * H * d, kv->ck[layer], kv->cv[layer], &b);
        }
    }
    return 0;
}

/* Decode, step 1 (one thread): the new row into the fresh slot (and the cold tier when the
 * policy keeps one), selection for this layer's lanes, then per lane in order the
 * compensated attention's arguments and the policy's marginal weights (own buffers) into
 * s->lane_args / lane_head_p / lane_work. */
static int decode_prepare(skv_session *s, int layer, const float *k, const float *v, int pos0) {
    const skv_config *c = &s->m->cfg;
    const int Hkv = c->n_kv_head, d = c->head_dim, g = c->n_head / Hkv, n = pos0 + 1;
    skv_kvcache *kv = s->kv;
    skv_kvcache_set_fresh(kv, layer, pos0, 1, k, v);
    if (s->pol->uses_cold && skv_kvcache_cold_write(kv, layer, pos0, 1, k, v)) return -1;
    if (select_layer(s, layer, n)) return -1;
    const bool online_pending = s->onl_llm && !s->mapped;
    const size_t N = (size_t)s->o.max_ctx;
    size_t work = 0;
    for (int j = 0; j < Hkv; j++) {
        const int ln = skv_lane(kv, layer, j);
        const int nh = kv->n_kv[ln], nm = kv->n_v[ln];
        const int *pk = skv_kvcache_hot_pos_kv(kv, layer, j), *pv = skv_kvcache_hot_pos_v(kv, layer, j);
        skv_comp_args *a = &s->lane_args[j];
        *a = (skv_comp_args){
            .g = g, .d = d, .n_hot = nh, .n_marg = nm, .f16 = kv->f16,
            .k = skv_kvcache_hot_k(kv, layer, j), .v = skv_kvcache_hot_v(kv, layer, j),
            .vm = skv_kvcache_hot_m(kv, layer, j), .mult = skv_kvcache_hot_mult(kv, layer, j),
            .combine = s->pol->o.combine, .scratch = s->scr + (size_t)j * N,
        };
        if (s->pol->marginal && nm > 0) {
            float *pm = s->pm + (size_t)j * g * N, *w = s->w + (size_t)j * g;
            s->pol->marginal(s->pol, layer, j, pk, nh, pv, nm, pm, w);
            a->pm = pm;
            a->w = w;
        }
        if (s->pol->wants_step) {
            memset(s->probs + (size_t)j * N, 0, (size_t)nh * sizeof(float));
            a->slot_acc = s->probs + (size_t)j * N;
        }
        s->lane_head_p[j] = NULL;
        if (online_pending || s->x_colsum) {
            s->lane_head_p[j] = skv_malloc((size_t)g * nh * sizeof(float) + 1, "per-head probabilities");
            if (!s->lane_head_p[j]) {
                for (int i = 0; i < j; i++) { free(s->lane_head_p[i]); s->lane_head_p[i] = NULL; }
                return -1;
            }
            a->head_p = s->lane_head_p[j];
        }
        work += (size_t)(nh + nm) * (size_t)g * (size_t)d;
    }
    s->lane_work = work;
    return 0;
}

/* Decode, step 3 (one thread): per lane in order the policy's step update, export and
 * online matching; frees the lanes' probabilities. */
static void decode_finish(skv_session *s, int layer, int n) {
    const skv_config *c = &s->m->cfg;
    const int Hkv = c->n_kv_head, g = c->n_head / Hkv;
    const bool online_pending = s->onl_llm && !s->mapped;
    const size_t N = (size_t)s->o.max_ctx;
    for (int j = 0; j < Hkv; j++) {
        const int nh = s->lane_args[j].n_hot;
        const int *pk = skv_kvcache_hot_pos_kv(s->kv, layer, j);
        float *hp = s->lane_head_p[j];
        if (s->pol->wants_step && s->pol->on_step) s->pol->on_step(s->pol, layer, j, pk, s->probs + (size_t)j * N, nh);
        if (hp && s->x_colsum) {
            /* export (SLM session): accumulated column sums and this step's row, by position */
            for (int u = 0; u < g; u++) {
                const int h = j * g + u;
                float *cs = s->x_colsum[layer] + (size_t)h * s->x_stride, *lr = s->x_lastrow[layer] + (size_t)h * s->x_stride;
                memset(lr, 0, (size_t)n * sizeof(float));
                for (int i = 0; i < nh; i++) { cs[pk[i]] += hp[(size_t)u * nh + i]; lr[pk[i]] = hp[(size_t)u * nh + i]; }
            }
        }
        if (hp && online_pending) online_accumulate_step(s, layer, j, pk, nh, hp);
        free(hp);
        s->lane_head_p[j] = NULL;
    }
}

/* One decode layer of the hook. Called by one thread (the forward's general path, batches)
 * or, while s->st->attn_in_team, by every thread of the forward's team (decode_one_region:
 * the session's step sets attn_team): then steps 1 and 3 run on one thread (`omp single`,
 * whose barrier publishes team_rc) and the lanes' compensated attention is shared among
 * the threads. Each lane writes only its own out rows and buffers: the same bits for any
 * thread count. */
static int decode_layer(skv_session *s, int layer, const float *q, const float *k, const float *v, int pos0,
                        float *out) {
    const skv_config *c = &s->m->cfg;
    const int Hkv = c->n_kv_head, d = c->head_dim, g = c->n_head / Hkv;
    if (!s->st->attn_in_team) {
        if (decode_prepare(s, layer, k, v, pos0)) return -1;
        /* other threads only when there is enough work to pay for waking them (with
         * OMP_WAIT_POLICY=PASSIVE, as `make eval-*` runs, tens of microseconds: at 64k
         * multiply-adds the parallel lanes made H2O and SmallKV at 10-20 % of 1024 tokens
         * 1-2 % slower, the full cache 4 % faster) */
        #pragma omp parallel for schedule(static) if (Hkv > 1 && s->lane_work >= ((size_t)1 << 19))
        for (int j = 0; j < Hkv; j++)
            skv_compensate(out + (size_t)j * g * d, q + (size_t)j * g * d, &s->lane_args[j]);
        decode_finish(s, layer, pos0 + 1);
        return 0;
    }
    #pragma omp single
    {
        s->team_rc = decode_prepare(s, layer, k, v, pos0);
        if (s->team_rc) snprintf(s->team_err, sizeof s->team_err, "%s", skv_last_error());
    }
    if (s->team_rc) {   /* every thread returns the failure, with the message */
        skv_error("%s", s->team_err);
        return -1;
    }
    #pragma omp for schedule(static)
    for (int j = 0; j < Hkv; j++)
        skv_compensate(out + (size_t)j * g * d, q + (size_t)j * g * d, &s->lane_args[j]);
    #pragma omp single
    decode_finish(s, layer, pos0 + 1);
    return 0;
}

/* ------------------------------------------------------------------ online head matching */

static void online_accumulate_step(skv_session *s, int layer, int kvh, const int *pos, int n_hot, const float *head_p) {
    const skv_config *c = &s->m->cfg;
    const int g = c->n_head / c->n_kv_head, W = s->o.online_max;
    for (int t = 0; t < g; t++) {
        float *row = s->onl_llm[layer] + (size_t)(kvh * g + t) * W;
        for (int i = 0; i < n_hot; i++)
            if (pos[i] < W) row[pos[i]] += head_p[(size_t)t * n_hot + i];
    }
}

/* top-K key set (positions sinks .. W-1) of a score row as a bitmask */
static void topk_mask(const float *row, int lo, int hi, int K, int *tmp, uint64_t *mask, int words) {
    memset(mask, 0, (size_t)words * sizeof(uint64_t));
    int nc = 0;
    for (int k = lo; k < hi; k++) tmp[nc++] = k;
    int got = skv_topk(row, tmp, nc, K);
    for (int i = 0; i < got; i++) mask[tmp[i] / 64] |= 1ull << (tmp[i] % 64);
}

/* Match every LLM head to the SLM head with the highest top-K Jaccard overlap of the
 * accumulated scores over keys sinks .. min(n, online_max)-1 (K = 10% of them). */
static int online_match(skv_session *s) {
    const skv_config *c = &s->m->cfg, *sc = &s->o.slm->cfg;
    const int W = s->o.online_max, hi = s->n < W ? s->n : W, lo = s->pol->o.sinks < hi ? s->pol->o.sinks : 0;
    int K = (hi - lo) / 10;
    if (K < 1) K = 1;
    const int words = (W + 63) / 64, nslm = s->slm_layers * sc->n_head, nllm = c->n_layer * c->n_head;
    uint64_t *sm = skv_calloc((size_t)nslm * words, sizeof(uint64_t), "online matching");
    uint64_t *lm = skv_calloc((size_t)words, sizeof(uint64_t), "online matching");
    int *map = skv_malloc((size_t)nllm * sizeof(int), "online matching");
    int rc = -1;
    if (!sm || !lm || !map) goto done;
    for (int j = 0; j < nslm; j++)
        topk_mask(s->slm_colsum[j / sc->n_head] + (size_t)(j % sc->n_head) * s->o.max_ctx, lo, hi, K, s->itmp,
                  sm + (size_t)j * words, words);
    for (int i = 0; i < nllm; i++) {
        topk_mask(s->onl_llm[i / c->n_head] + (size_t)(i % c->n_head) * W, lo, hi, K, s->itmp, lm, words);
        int best = 0, bi = -1, bu = 1;
        for (int j = 0; j < nslm; j++) {
            int in = 0, un = 0;
            for (int w = 0; w < words; w++) {
                in += __builtin_popcountll(lm[w] & sm[(size_t)j * words + w]);
                un += __builtin_popcountll(lm[w] | sm[(size_t)j * words + w]);
            }
            if (bi < 0 || (long)in * bu > (long)best * un) { best = in; bu = un ? un : 1; bi = j; }
        }
        map[i] = bi;
    }
    rc = skv_policy_smallkv_set_map(s->pol, map);
    if (!rc) s->mapped = true;
done:
    free(sm); free(lm); free(map);
    return rc;
}

/* ------------------------------------------------------------------ prefill / step */

static int compress(skv_session *s, int n0) {
    const skv_config *c = &s->m->cfg;
    for (int l = 0; l < s->L_act; l++) {
        if (s->pol->on_prefill) {
            skv_prefill_info pi = {
                .layer = l, .H = c->n_head, .Hkv = c->n_kv_head, .n0 = n0, .n = s->n,
                .stride = s->pre_stride,
                .colsum = s->pre_colsum ? s->pre_colsum[l] : NULL,
                .obs = s->pre_obs ? s->pre_obs[l] : NULL,
                .obs_rows = s->n - s->pre_obs_from,
                .cache = s->kv, .budget = skv_session_budget(s, s->n),
            };
            if (s->pol->on_prefill(s->pol, &pi)) return skv_error_prefix("policy %s, layer %d", s->pol->name, l);
        }
        if (select_layer(s, l, s->n)) return -1;
    }
    s->n_sel = s->n;
    /* policies that never restore: the staged prefill is dropped (evicted tokens are gone) */
    if (!s->pol->uses_cold) skv_kvcache_cold_release(s->kv);
    return 0;
}

/* Prefill statistics (H, stride) per layer, stride = cold_base + cold_cap (covers every
 * position of this prefill; equals the cold tier's stride when cold_base == 0). */
static int ensure_prefill_stats(skv_session *s, bool colsum, bool obs) {
    const skv_config *c = &s->m->cfg;
    const int L = c->n_layer, stride = s->kv->cold_base + s->kv->cold_cap;
    const size_t sz = (size_t)c->n_head * stride;
    if (s->pre_stride != stride) {
        free_rows(s->pre_colsum, L); s->pre_colsum = NULL;
        free_rows(s->pre_obs, L); s->pre_obs = NULL;
        s->pre_stride = stride;
    }
    if (colsum && !s->pre_colsum && !(s->pre_colsum = alloc_rows(L, sz, "prefill column sums"))) return -1;
    if (obs && !s->pre_obs && !(s->pre_obs = alloc_rows(L, sz, "prefill window sums"))) return -1;
    for (int l = 0; l < L; l++) {
        if (s->pre_colsum) memset(s->pre_colsum[l], 0, sz * sizeof(float));
        if (s->pre_obs) memset(s->pre_obs[l], 0, sz * sizeof(float));
    }
    if (s->x_lastrow && s->x_tmp_n < sz) {
        free(s->x_tmp);
        if (!(s->x_tmp = skv_malloc(sz * sizeof(float), "last-row staging"))) { s->x_tmp_n = 0; return -1; }
        s->x_tmp_n = sz;
    }
    return 0;
}

static int slm_run_timed(skv_session *s, const int *tokens, int T, bool prefill);

static int slm_run(skv_session *s, const int *tokens, int T, bool prefill) {
    const double t0 = skv_now();
    int rc = slm_run_timed(s, tokens, T, prefill);
    s->slm_seconds += skv_now() - t0;
    return rc;
}

static int slm_run_timed(skv_session *s, const int *tokens, int T, bool prefill) {
    if (s->slm_sess) {
        int rc = prefill ? skv_session_prefill(s->slm_sess, tokens, T) : skv_session_step(s->slm_sess, tokens[0]);
        return rc ? skv_error_prefix("SLM") : 0;
    }
    skv_fwd_opts fo = {
        .logits = SKV_LOGITS_NONE, .n_layers = s->slm_layers,
        .colsum = s->slm_colsum, .lastrow = s->slm_lastrow,
    };
    /* colsum / lastrow arrays have slm_layers entries; the forward only reads the first
     * n_layers */
    for (int t = 0; t < T;) {
        int b = T - t < s->slm->T_max ? T - t : s->slm->T_max;
        if (skv_forward(s->slm, tokens + t, b, &fo)) return skv_error_prefix("SLM");
        t += b;
    }
    return 0;
}

void skv_session_export(skv_session *s, float **colsum, float **lastrow, int stride) {
    s->x_colsum = colsum; s->x_lastrow = lastrow; s->x_stride = stride;
}

/* rows of the observation window whose attention sums a policy reads (SnapKV, EMS) */
static int obs_window(const skv_policy *p) {
    if (!strcmp(p->name, "ems") && p->o.ems_window > 0) return p->o.ems_window;
    return p->o.window > 0 ? p->o.window : 1;
}

int skv_session_prefill(skv_session *s, const int *tokens, int T) {
    if (T < 1) return skv_error("skv_session_prefill: no tokens");
    if (s->n + T > s->o.max_ctx)
        return skv_error("skv_session_prefill: %d + %d tokens exceed the context of %d", s->n, T, s->o.max_ctx);
    if (s->o.prefill_base && s->n > 0) return skv_error("skv_session_prefill: a prefill base takes one prefill");
    /* an exact prefill over the cold tier needs it private and contiguous (copy-on-write) */
    if (s->pol->uses_cold && skv_kvcache_cold_flatten(s->kv)) return -1;
    /* the others stage this prefill from position n (their cold tier is empty) */
    if (!s->pol->uses_cold) skv_kvcache_cold_release(s->kv);
    if (skv_kvcache_cold_reserve(s->kv, s->n + T)) return -1;
    const bool online_pending = s->onl_llm && !s->mapped;
    const bool base = s->o.prefill_base;
    if (ensure_prefill_stats(s, base || s->pol->wants_colsum || online_pending || s->x_colsum, base || s->pol->wants_obs))
        return -1;
    if ((s->slm || s->slm_sess) && slm_run(s, tokens, T, true)) return -1;
    const int n0 = s->n;
    const int w = obs_window(s->pol);
    s->pre_obs_from = n0 + T - w < n0 ? n0 : n0 + T - w;
    skv_fwd_opts fo = { .attn = sess_attn, .attn_ctx = s, .n_layers = s->o.n_layers };
    s->in_prefill = true;
    for (int t = 0; t < T;) {
        int b = T - t < s->st->T_max ? T - t : s->st->T_max;
        fo.logits = t + b == T ? SKV_LOGITS_LAST : SKV_LOGITS_NONE;
        if (skv_forward(s->st, tokens + t, b, &fo)) { s->in_prefill = false; return -1; }
        t += b;
        s->n += b;
    }
    s->in_prefill = false;
    if (base) return 0;   /* derived sessions compress (skv_session_derive) */
    if (s->x_colsum)
        for (int l = 0; l < s->L_act; l++)
            for (int h = 0; h < s->m->cfg.n_head; h++)
                for (int k = 0; k < s->n; k++)
                    s->x_colsum[l][(size_t)h * s->x_stride + k] += s->pre_colsum[l][(size_t)h * s->pre_stride + k];
    if (online_pending) {
        /* LLM column sums of this prefill over keys < online_max */
        const skv_config *c = &s->m->cfg;
        const int W = s->o.online_max, lim = s->n < W ? s->n : W;
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head; h++)
                for (int k = 0; k < lim; k++)
                    s->onl_llm[l][(size_t)h * W + k] += s->pre_colsum[l][(size_t)h * s->pre_stride + k];
        if (s->n >= s->o.online_min && online_match(s)) return -1;
    }
    return compress(s, n0);
}

int skv_session_step(skv_session *s, int token) {
    if (s->o.prefill_base) return skv_error("skv_session_step: a prefill base does not step (derive a session from it)");
    if (s->n + 1 > s->o.max_ctx) return skv_error("skv_session_step: context of %d tokens is full", s->o.max_ctx);
    if (s->n == 0) return skv_session_prefill(s, &token, 1);
    if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + 1)) return -1;
    if ((s->slm || s->slm_sess) && slm_run(s, &token, 1, false)) return -1;
    skv_fwd_opts fo = { .logits = SKV_LOGITS_LAST, .attn = sess_attn, .attn_ctx = s, .n_layers = s->o.n_layers,
                        .attn_team = true };   /* one parallel region for the step (decode_layer) */
    if (skv_forward(s->st, &token, 1, &fo)) return -1;
    s->n++;
    s->n_sel = s->n;
    if (s->onl_llm && !s->mapped && s->n >= s->o.online_min && online_match(s)) return -1;
    return 0;
}

/* Grow (or create) a batch workspace for model m to hold n rows. */
static int batch_ws(skv_batch **b, const skv_model *m, int n) {
    if (*b && (*b)->m == m && (*b)->n_max >= n) return 0;
    skv_batch_free(*b);
    *b = skv_batch_new(m, n < 4 ? 4 : n);
    return *b ? 0 : -1;
}

/* Batch the SLMs of sessions ss (all with an SLM, all stepping): plain SLM states of the
 * same model and depth in one batched forward, compressed SLM sessions through
 * skv_session_step_batch. */
static int slm_run_batch(skv_session *lead, skv_session **ss, const int *tokens, int n) {
    skv_state *st[n];
    skv_session *one[n], *sub[n];
    skv_fwd_opts fo[n];
    int tk[n], tk2[n], ns = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        skv_session *s = ss[i];
        if (s->slm_sess) { sub[nb] = s->slm_sess; tk2[nb++] = tokens[i]; continue; }
        if (ns > 0 && (s->o.slm != st[0]->m || s->slm_layers != fo[0].n_layers)) {
            if (slm_run(s, &tokens[i], 1, false)) return skv_error_prefix("batch entry %d", i);
            continue;
        }
        st[ns] = s->slm;
        one[ns] = s;
        tk[ns] = tokens[i];
        fo[ns] = (skv_fwd_opts){ .logits = SKV_LOGITS_NONE, .n_layers = s->slm_layers,
                                 .colsum = s->slm_colsum, .lastrow = s->slm_lastrow };
        ns++;
    }
    if (ns == 1 && slm_run(one[0], tk, 1, false)) return -1;
    if (ns > 1) {
        if (batch_ws(&lead->slm_bws, st[0]->m, ns)) return -1;
        if (skv_forward_batch(lead->slm_bws, st, tk, ns, fo)) return skv_error_prefix("SLM");
    }
    if (nb > 0 && skv_session_step_batch(sub, tk2, nb)) return skv_error_prefix("SLM");
    return 0;
}

int skv_session_step_batch(skv_session **ss, const int *tokens, int n) {
    if (n < 1) return 0;
    if (n == 1) return skv_session_step(ss[0], tokens[0]) ? skv_error_prefix("batch entry 0") : 0;
    for (int i = 0; i < n; i++)
        if (ss[i]->o.prefill_base) return skv_error("batch entry %d: a prefill base does not step", i);
    if (n > 64) {   /* bounded stack arrays below */
        for (int i = 0; i < n; i += 64)
            if (skv_session_step_batch(ss + i, tokens + i, n - i < 64 ? n - i : 64)) return -1;
        return 0;
    }
    skv_session *lead = ss[0];
    skv_session *join[n];
    int tk[n], nj = 0;
    /* sessions that cannot join the batched forward step on their own */
    for (int i = 0; i < n; i++) {
        skv_session *s = ss[i];
        bool ok = s->n > 0 && s->m == lead->m && s->o.n_layers == lead->o.n_layers;
        for (int j = 0; ok && j < nj; j++) ok = join[j] != s;   /* the same session twice */
        if (!ok) {
            if (skv_session_step(s, tokens[i])) return skv_error_prefix("batch entry %d", i);
            continue;
        }
        if (s->n + 1 > s->o.max_ctx)
            return skv_error("batch entry %d: skv_session_step: context of %d tokens is full", i, s->o.max_ctx);
        if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + 1)) return skv_error_prefix("batch entry %d", i);
        join[nj] = s;
        tk[nj++] = tokens[i];
    }
    if (nj == 0) return 0;
    /* SLMs first (the LLM's selection reads their attention of this step) */
    skv_session *with_slm[nj];
    int tks[nj], nw = 0;
    for (int i = 0; i < nj; i++)
        if (join[i]->slm || join[i]->slm_sess) { with_slm[nw] = join[i]; tks[nw++] = tk[i]; }
    const double t_slm = skv_now();
    if (nw > 0 && slm_run_batch(lead, with_slm, tks, nw)) return -1;
    for (int i = 0; i < nw; i++) with_slm[i]->slm_seconds += (skv_now() - t_slm) / nw;
    skv_state *st[nj];
    skv_fwd_opts fo[nj];
    for (int i = 0; i < nj; i++) {
        st[i] = join[i]->st;
        fo[i] = (skv_fwd_opts){ .logits = SKV_LOGITS_LAST, .attn = sess_attn, .attn_ctx = join[i],
                                .n_layers = join[i]->o.n_layers };
    }
    if (batch_ws(&lead->bws, lead->m, nj)) return -1;
    if (skv_forward_batch(lead->bws, st, tk, nj, fo)) return -1;
    for (int i = 0; i < nj; i++) {
        skv_session *s = join[i];
        s->n++;
        s->n_sel = s->n;
        if (s->onl_llm && !s->mapped && s->n >= s->o.online_min && online_match(s)) return -1;
    }
    return 0;
}

const float *skv_session_logits(const skv_session *s) { return s->st->logits; }

/* ------------------------------------------------------------------ fork */

static float **copy_rows(float **src, int count, size_t n, const char *what) {
    if (!src) return NULL;
    float **a = alloc_rows(count, n, what);
    if (!a) return NULL;
    for (int i = 0; i < count; i++) memcpy(a[i], src[i], n * sizeof(float));
    return a;
}

skv_session *skv_session_fork(const skv_session *s) {
    const skv_config *c = &s->m->cfg;
    skv_session *f = skv_calloc(1, sizeof *f, "session");
    if (!f) return NULL;
    f->m = s->m;
    f->o = s->o;
    f->n = s->n; f->n_sel = s->n_sel; f->mapped = s->mapped; f->restores = s->restores;
    f->slm_layers = s->slm_layers; f->L_act = s->L_act;
    f->pol = skv_policy_fork(s->pol);
    if (!f->pol) goto fail;
    f->st = skv_state_new_nocache(s->m, s->o.max_ctx, s->o.T_max, s->o.kv_f16);
    if (!f->st) goto fail;
    f->st->n_past = s->st->n_past;
    memcpy(f->st->logits, s->st->logits, (size_t)c->vocab * sizeof(float));
    f->kv = skv_kvcache_clone(s->kv);
    if (!f->kv || alloc_buffers(f)) goto fail;
    if (s->slm || s->slm_sess) {
        const skv_config *sc = &s->o.slm->cfg;
        if (s->slm_sess) {
            if (!(f->slm_sess = skv_session_fork(s->slm_sess))) goto fail;
        } else {
            f->slm = skv_state_new(s->o.slm, s->o.max_ctx, s->o.T_max, s->o.kv_f16);
            if (!f->slm) goto fail;
            f->slm->n_past = s->slm->n_past;
            size_t per = (size_t)sc->n_kv_head * s->slm->S_cap * sc->head_dim * (s->o.kv_f16 ? 2 : 4);
            for (int l = 0; l < s->slm_layers; l++) {
                memcpy(f->slm->k[l], s->slm->k[l], per);
                memcpy(f->slm->v[l], s->slm->v[l], per);
            }
        }
        size_t rows = (size_t)sc->n_head * s->o.max_ctx;
        f->slm_colsum = copy_rows(s->slm_colsum, s->slm_layers, rows, "SLM column sums");
        f->slm_lastrow = copy_rows(s->slm_lastrow, s->slm_layers, rows, "SLM last rows");
        if (!f->slm_colsum || !f->slm_lastrow) goto fail;
        if (f->slm_sess) skv_session_export(f->slm_sess, f->slm_colsum, f->slm_lastrow, s->o.max_ctx);
        if (s->onl_llm && !(f->onl_llm = copy_rows(s->onl_llm, c->n_layer, (size_t)c->n_head * s->o.online_max, "online")))
            goto fail;
        skv_slm_view v = {
            .map = NULL, .slm_heads = sc->n_head, .slm_layers = f->slm_layers,
            .colsum = (const float *const *)f->slm_colsum, .lastrow = (const float *const *)f->slm_lastrow,
            .stride = s->o.max_ctx,
        };
        if (skv_policy_smallkv_attach(f->pol, &v)) goto fail;
    }
    return f;
fail:
    skv_error_prefix("session fork");
    skv_session_free(f);
    return NULL;
}

/* ------------------------------------------------------------------ derive */

skv_session *skv_session_derive(skv_session *b, const skv_session_opts *o) {
    if (!b || !o) { skv_error("skv_session_derive: bad arguments"); return NULL; }
    const char *pname = o->policy ? o->policy : "full";
    if (!b->o.prefill_base || b->n < 1) { skv_error("derive %s: the base is not a prefilled prefill base", pname); return NULL; }
    if (o->prefill_base || o->n_layers || o->max_ctx != b->o.max_ctx || o->kv_f16 != b->o.kv_f16 || o->T_max != b->o.T_max) {
        skv_error("derive %s: options differ from the base's in context, cache type, block size or depth", pname);
        return NULL;
    }
    skv_session *f = skv_session_new(b->m, o);
    if (!f) return NULL;
    const skv_config *c = &b->m->cfg;
    const int L = c->n_layer;
    if (f->pol->wants_obs && obs_window(f->pol) != obs_window(b->pol)) {
        skv_error("derive %s: observation window %d, the base kept %d", pname, obs_window(f->pol), obs_window(b->pol));
        goto fail;
    }
    if (f->slm_sess) { skv_error("derive %s: a compressed SLM cache prefills itself", pname); goto fail; }
    if (f->slm && (!b->slm || o->slm != b->o.slm || f->slm_layers > b->slm_layers)) {
        skv_error("derive %s: the base ran %s SLM layers, %d needed", pname, b->slm ? "fewer or other" : "no", f->slm_layers);
        goto fail;
    }
    /* the LLM: the cold tier shared copy-on-write, activations at the end of the prefill */
    skv_kvcache_free(f->kv);
    if (!(f->kv = skv_kvcache_clone(b->kv))) goto fail;
    f->st->n_past = b->st->n_past;
    memcpy(f->st->logits, b->st->logits, (size_t)c->vocab * sizeof(float));
    f->n = b->n;
    f->n_sel = b->n_sel;
    /* the statistics a prefill of its own would have collected */
    const bool online_pending = f->onl_llm && !f->mapped;
    const size_t rows = (size_t)c->n_head * b->pre_stride;
    f->pre_stride = b->pre_stride;
    f->pre_obs_from = b->pre_obs_from;
    if ((f->pol->wants_colsum || online_pending) && !(f->pre_colsum = copy_rows(b->pre_colsum, L, rows, "prefill column sums")))
        goto fail;
    if (f->pol->wants_obs && !(f->pre_obs = copy_rows(b->pre_obs, L, rows, "prefill window sums"))) goto fail;
    if (f->slm) {
        const skv_config *sc = &o->slm->cfg;
        f->slm->n_past = b->slm->n_past;
        const size_t per = (size_t)sc->n_kv_head * b->slm->S_cap * sc->head_dim * (o->kv_f16 ? 2 : 4);
        const size_t srows = (size_t)sc->n_head * o->max_ctx * sizeof(float);
        for (int l = 0; l < f->slm_layers; l++) {
            memcpy(f->slm->k[l], b->slm->k[l], per);
            memcpy(f->slm->v[l], b->slm->v[l], per);
            memcpy(f->slm_colsum[l], b->slm_colsum[l], srows);
            memcpy(f->slm_lastrow[l], b->slm_lastrow[l], srows);
        }
    }
    if (online_pending) {
        const int W = f->o.online_max, lim = f->n < W ? f->n : W;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < c->n_head; h++)
                for (int k = 0; k < lim; k++)
                    f->onl_llm[l][(size_t)h * W + k] += f->pre_colsum[l][(size_t)h * f->pre_stride + k];
        if (f->n >= f->o.online_min && online_match(f)) goto fail;
    }
    if (compress(f, 0)) goto fail;
    return f;
fail:
    skv_error_prefix("derive %s", pname);
    skv_session_free(f);
    return NULL;
}

/* ------------------------------------------------------------------ memory report */

void skv_session_mem_report(const skv_session *s, skv_session_mem *r) {
    memset(r, 0, sizeof *r);
    skv_kv_bytes b;
    skv_kvcache_bytes(s->kv, &b);
    r->hot_used = b.hot_used; r->hot_cap = b.hot_cap;
    r->cold_used = b.cold_used; r->cold_cap = b.cold_cap; r->cold_shared = b.cold_shared;
    r->hot_tokens = b.hot_tokens;
    const skv_config *c = &s->m->cfg;
    const size_t esz = s->o.kv_f16 ? 2 : 4;
    r->full_equiv = (size_t)s->L_act * c->n_kv_head * (size_t)s->n * 2 * c->head_dim * esz;
    if (s->n > 0) {
        double B = skv_session_budget(s, s->n);
        for (int l = 0; l < s->L_act; l++)
            for (int j = 0; j < c->n_kv_head; j++) {
                double sh = s->pol->lane_share ? s->pol->lane_share(s->pol, l, j, B) : 1.0;
                double lb = B * sh;
                r->budget_tokens += lb < s->n ? lb : s->n;
            }
    }
    if (s->slm || s->slm_sess) {
        const skv_config *sc = &s->o.slm->cfg;
        r->slm_weights = s->o.slm->weight_bytes + s->o.slm->pack_bytes;   /* + its decode copies */
        if (s->slm_sess) {
            skv_kv_bytes sb;
            skv_kvcache_bytes(s->slm_sess->kv, &sb);
            r->slm_cache = sb.hot_used + sb.cold_used;
        } else {
            r->slm_cache = (size_t)s->slm_layers * sc->n_kv_head * (size_t)s->slm->n_past * 2 * sc->head_dim * esz;
        }
        r->slm_scores = 2 * (size_t)s->slm_layers * sc->n_head * s->o.max_ctx * sizeof(float);
    }
}

void skv_session_mem_total(skv_session *const *ss, int n, skv_session_mem *r) {
    memset(r, 0, sizeof *r);
    const skv_kvcache *cs[256];
    int nc = 0;
    for (int i = 0; i < n; i++) {
        skv_session_mem m;
        skv_session_mem_report(ss[i], &m);
        r->hot_used += m.hot_used; r->hot_cap += m.hot_cap;
        r->slm_cache += m.slm_cache; r->slm_scores += m.slm_scores;
        if (m.slm_weights > r->slm_weights) r->slm_weights = m.slm_weights;   /* one copy of the weights */
        r->hot_tokens += m.hot_tokens; r->budget_tokens += m.budget_tokens; r->full_equiv += m.full_equiv;
        if (nc < 256) cs[nc++] = ss[i]->kv;
    }
    r->cold_used = skv_kvcache_cold_unique(cs, nc);
}
