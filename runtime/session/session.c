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
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/topk.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The policy reads the SLM guide's rows: drafted row t of a verify pass, or the live ones
 * (t = -1). */
static int slm_attach(skv_session *s, int t) {
    if (t >= 0 && t >= s->slm->pending) return skv_error("SLM: verify row %d, %d drafted", t, s->slm->pending);
    const skv_slm_view v = skv_slm_guide_view(s->slm, t);
    return s->pol->slm_attach ? s->pol->slm_attach(s->pol, &v) : 0;
}

void skv_session_opts_default(skv_session_opts *o) {
    memset(o, 0, sizeof *o);
    skv_policy_spec_default("full", &o->pol);
    o->budget = 1.0;
    o->kv_f16 = true;
    o->max_ctx = 4096;
    o->T_max = 256;
    o->obs_rows = 32;
}

int skv_session_opts_for(skv_session_opts *o, const skv_policy_spec *pol, double budget, const skv_model *slm,
                         const int *map, int map_depth) {
    skv_session_opts_default(o);
    o->pol = *pol;
    o->budget = budget;
    const skv_policy_desc *d = pol->desc;
    if (!(budget > 0 && budget <= 1)) return skv_error("budget %g is not a fraction in (0, 1]", budget);
    if (!(d->caps & SKV_POLICY_NEEDS_SLM)) return 0;
    if (!slm) return skv_error("policy %s needs an SLM", d->name);
    if (skv_policy_spec_needs_map(pol) && !map) return skv_error("policy %s needs a profile (or mapping online)", d->name);
    o->slm = slm;
    o->map = map;
    o->map_depth = map_depth;
    return 0;
}

double skv_session_budget(const skv_session *s, int n) {
    if (skv_policy_has(s->pol, SKV_POLICY_KEEPS_ALL)) return n;
    const int base = s->o.budget_prompt && s->n_base > 0 ? s->n_base : n;
    double b = s->o.budget_abs ? s->o.budget : s->o.budget * base;
    if (b < 1) b = 1;
    return b;
}

/* allocate everything but the policy and the cache contents */
static int alloc_buffers(skv_session *s) {
    const skv_config *c = &s->m->cfg;
    const int N = s->o.max_ctx, Hkv = c->n_kv_head, g = c->n_head / c->n_kv_head;
    s->sel_kv = skv_calloc((size_t)Hkv, sizeof(int *), "session");
    s->sel_v = skv_calloc((size_t)Hkv, sizeof(int *), "session");
    s->n_selkv = skv_calloc((size_t)Hkv, sizeof(int), "session");
    s->n_selv = skv_calloc((size_t)Hkv, sizeof(int), "session");
    s->lane_budget = skv_calloc((size_t)Hkv, sizeof(double), "session");
    if (!s->sel_kv || !s->sel_v || !s->n_selkv || !s->n_selv || !s->lane_budget) return -1;
    if (s->o.per_head) {
        s->head_keep = skv_malloc((size_t)Hkv * g * N, "per-head selection");
        s->head_mask = skv_malloc((size_t)Hkv * g * N, "per-head selection");
        if (!s->head_keep || !s->head_mask) return -1;
    }
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
    /* a prefill base keeps them for the derived sessions that read the query */
    if ((skv_policy_has(s->pol, SKV_POLICY_QUERY) || s->o.prefill_base) &&
        !(s->q_last = skv_rows_new(c->n_layer, (size_t)c->n_head * c->head_dim, "last prompt queries")))
        return -1;
    if (!s->itmp || !s->ftmp || !s->mark || !s->probs || !s->scr || !s->pm || !s->w || !s->obs_out) return -1;
    return 0;
}

void skv_session_free(skv_session *s) {
    if (!s) return;
    const int L = s->m->cfg.n_layer, Hkv = s->m->cfg.n_kv_head;
    skv_state_free(s->st);
    skv_kvcache_free(s->kv);
    skv_policy_free(s->pol);
    skv_slm_guide_free(s->slm);
    skv_rows_free(s->pre_colsum, L);
    skv_rows_free(s->pre_obs, L);
    skv_rows_free(s->q_last, L);
    free(s->obs_out);
    if (s->sel_kv) for (int j = 0; j < Hkv; j++) free(s->sel_kv[j]);
    if (s->sel_v) for (int j = 0; j < Hkv; j++) free(s->sel_v[j]);
    free(s->sel_kv); free(s->sel_v); free(s->n_selkv); free(s->n_selv); free(s->lane_budget);
    free(s->itmp); free(s->ftmp); free(s->mark); free(s->probs); free(s->scr); free(s->pm); free(s->w);
    free(s->lane_args); free(s->lane_head_p);
    free(s->head_keep); free(s->head_mask);
    free(s->x_tmp);
    free(s->vcap);
    free(s->base_ids);
    if (s->memo) s->memo->free(s->memo);
    for (int i = 0; i < s->n_slm_alt; i++) skv_slm_guide_free(s->slm_alt[i]);
    skv_batch_free(s->bws);
    free(s);
}

skv_session *skv_session_new(const skv_model *m, const skv_session_opts *o) {
    if (!m || !o || o->max_ctx < 1 || !o->pol.desc) { skv_error("skv_session_new: bad arguments"); return NULL; }
    const char *pname = o->pol.desc->name;
    if (!o->budget_abs && !(o->budget > 0 && o->budget <= 1)) {
        skv_error("skv_session_new: budget %g is not a fraction in (0, 1]", o->budget);
        return NULL;
    }
    if (o->budget_abs && !(o->budget >= 1)) {
        skv_error("skv_session_new: budget %g tokens is below 1", o->budget);
        return NULL;
    }
    if (o->prefill_base && o->n_layers) {
        skv_error("a prefill base runs over all layers");
        return NULL;
    }
    const skv_config *c = &m->cfg;
    skv_session *s = skv_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->m = m;
    s->o = *o;
    if (s->o.T_max < 1) s->o.T_max = 256;
    if (s->o.obs_rows < 1) s->o.obs_rows = 32;
    const skv_policy_env env = {.llm = m, .slm = o->slm, .map = o->map, .map_depth = o->map_depth,
                                .max_ctx = o->max_ctx, .T_max = s->o.T_max, .kv_f16 = o->kv_f16,
                                .prefill_base = o->prefill_base, .per_head = o->per_head};
    s->pol = skv_policy_new(&o->pol, &env, c->n_layer, c->n_head, c->n_kv_head);
    if (!s->pol) goto fail;
    if (o->per_head && !skv_policy_has(s->pol, SKV_POLICY_PER_HEAD)) {
        skv_error("policy %s selects per KV head only (per-attention-head selection: h2o, smallkv)", pname);
        goto fail;
    }
    s->L_act = o->n_layers > 0 && o->n_layers < c->n_layer ? o->n_layers : c->n_layer;
    s->st = skv_state_new_nocache(m, o->max_ctx, s->o.T_max, o->kv_f16);
    if (!s->st) goto fail;
    s->kv = skv_kvcache_new(c->n_layer, c->n_kv_head, c->head_dim, o->kv_f16);
    if (!s->kv || alloc_buffers(s)) goto fail;
    if (s->pol->slm.depth > 0) {   /* the small model the policy scores with */
        if (!o->slm) { skv_error("policy %s needs an SLM", pname); goto fail; }
        if (!(s->slm = skv_slm_guide_new(o->slm, &s->pol->slm, o->max_ctx, s->o.T_max, o->kv_f16)) ||
            slm_attach(s, -1))
            goto fail;
    }
    return s;
fail:
    skv_error_prefix("session (%s)", pname);
    skv_session_free(s);
    return NULL;
}

/* ------------------------------------------------------------------ attention hook */

/* A sliding-window layer (Gemma 3's local layers, Mistral) keeps exactly its window, which
 * already bounds its cache: the policy compresses the global layers only (its select,
 * on_prefill, after_apply and on_step are not called for windowed layers). */
static int window_select(skv_session *s, int layer, int n) {
    const int Hkv = s->m->cfg.n_kv_head, W = s->m->layers[layer].window, start = n > W ? n - W : 0;
    for (int j = 0; j < Hkv; j++) {
        for (int p = start; p < n; p++) s->sel_kv[j][p - start] = p;
        s->n_selkv[j] = n - start;
        s->n_selv[j] = 0;
    }
    if (skv_kvcache_hot_reserve(s->kv, layer, s->n_selkv, s->n_selv)) return -1;
    s->kv->settled = s->n_sel;
    for (int j = 0; j < Hkv; j++)
        if (skv_kvcache_apply(s->kv, layer, j, s->sel_kv[j], s->n_selkv[j], s->sel_v[j], 0) < 0)
            return skv_error_prefix("sliding-window layer %d", layer);
    s->restores = (int)s->kv->restores;
    return 0;
}

static int select_layer(skv_session *s, int layer, int n, const float *q) {
    const int Hkv = s->m->cfg.n_kv_head, g = s->m->cfg.n_head / Hkv;
    if (s->m->layers[layer].window) return window_select(s, layer, n);
    if (!skv_policy_has(s->pol, SKV_POLICY_QUERY)) q = NULL;
    const double B = skv_session_budget(s, n);
    for (int j = 0; j < Hkv; j++) {
        double share = s->pol->lane_share ? s->pol->lane_share(s->pol, layer, j, B) : 1.0;
        s->lane_budget[j] = B * share;
        skv_select_io io = {
            .layer = layer, .kvh = j, .lane = skv_lane(s->kv, layer, j), .n = n, .n0 = s->n_sel,
            .budget = s->lane_budget[j], .cache = s->kv, .q = q, .d = s->m->cfg.head_dim,
            .kv_pos = s->sel_kv[j], .v_pos = s->sel_v[j],
            .itmp = s->itmp, .ftmp = s->ftmp, .mark = s->mark,
        };
        if (s->o.per_head) {
            io.head_keep = s->head_keep + (size_t)j * g * s->o.max_ctx;
            memset(io.head_keep, 0, (size_t)g * n);
        }
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
        if (s->o.per_head) {   /* each head's positions -> the slots it attends */
            const size_t N = (size_t)s->o.max_ctx;
            const int ln = skv_lane(s->kv, layer, j), nh = s->kv->n_kv[ln];
            const int *P = skv_kvcache_hot_pos_kv(s->kv, layer, j);
            const unsigned char *keep = s->head_keep + (size_t)j * g * N;
            unsigned char *mask = s->head_mask + (size_t)j * g * N;
            for (int t = 0; t < g; t++)
                for (int x = 0; x < nh; x++) mask[(size_t)t * nh + x] = keep[(size_t)t * n + P[x]];
        }
    }
    s->restores = (int)s->kv->restores;
    return 0;
}

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
    if (s->m->layers[layer].window)
        return skv_error("policy %s: a prefill over a compressed past is not supported for sliding-window layer %d",
                         s->pol->name, layer);
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
        if (T != 1 && !s->in_verify) return skv_error("session: decode block of %d tokens (1 expected)", T);
        /* a verify block (skv_session_verify): row by row, each exactly a decode step's layer */
        const skv_config *c = &s->m->cfg;
        const size_t qs = (size_t)c->n_head * c->head_dim, ks = (size_t)c->n_kv_head * c->head_dim;
        if (s->in_verify) {   /* keep the rows' inputs for skv_session_verify_replay */
            const size_t row = qs + 2 * ks;
            float *cap = s->vcap + (size_t)layer * s->vcap_T * row;
            for (int t = 0; t < T; t++) {
                memcpy(cap + t * row, q + t * qs, qs * sizeof(float));
                memcpy(cap + t * row + qs, k + t * ks, ks * sizeof(float));
                memcpy(cap + t * row + qs + ks, v + t * ks, ks * sizeof(float));
            }
        }
        for (int t = 0; t < T; t++) {
            if (s->in_verify) {
                s->n_sel = pos0 + t;   /* what a step at this position sees */
                /* a drafting SLM's rows at this position */
                if (skv_session_drafting(s) && slm_attach(s, pos0 + t - s->n)) return -1;
            }
            if (decode_layer(s, layer, q + t * qs, k + t * ks, v + t * ks, pos0 + t, out + t * qs)) return -1;
        }
        return 0;
    }
    const skv_config *c = &s->m->cfg;
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    skv_kvcache *kv = s->kv;
    if (s->q_last) memcpy(s->q_last[layer], q + (size_t)(T - 1) * H * d, (size_t)H * d * sizeof(float));
    skv_kvcache_set_fresh(kv, layer, pos0, T, k, v);
    /* the cold tier keeps everything (SmallKV) or stages this prefill (the others) */
    if (skv_kvcache_cold_write(kv, layer, pos0, T, k, v)) return -1;
    if (kv->cold_base > 0) return prefill_over_hot(s, layer, q, pos0, T, out);
    skv_attn_args a = {
        .T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = kv->cold_cap, .kv_f16 = kv->f16,
        .colsum = s->pre_colsum ? s->pre_colsum[layer] : NULL,
        .lastrow = s->x_lastrow ? s->x_tmp : NULL,     /* (H, cold_cap), copied below */
    };
    skv_attention_window(out, q, kv->ck[layer], kv->cv[layer], &a, s->m->layers[layer].window);
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
            skv_attention_window(s->obs_out, q + (size_t)t0 * H * d, kv->ck[layer], kv->cv[layer], &b,
                                 s->m->layers[layer].window);
        }
    }
    return 0;
}

/* Decode, step 1 (one thread; session.h): the new row into the fresh slot (and the cold tier
 * when the policy keeps one), selection for this layer's lanes, then per lane in order the
 * compensated attention's arguments and the policy's marginal weights (own buffers) into
 * s->lane_args / lane_head_p / lane_work. */
int skv_session_step_prepare(skv_session *s, int layer, const float *q, const float *k, const float *v, int pos0) {
    const skv_config *c = &s->m->cfg;
    const int Hkv = c->n_kv_head, d = c->head_dim, g = c->n_head / Hkv, n = pos0 + 1;
    skv_kvcache *kv = s->kv;
    skv_kvcache_set_fresh(kv, layer, pos0, 1, k, v);
    if (s->pol->uses_cold && skv_kvcache_cold_write(kv, layer, pos0, 1, k, v)) return -1;
    if (select_layer(s, layer, n, q)) return -1;
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
            .combine = s->pol->combine, .scratch = s->scr + (size_t)j * N,
        };
        if (s->o.per_head && !s->m->layers[layer].window) a->head_mask = s->head_mask + (size_t)j * g * N;
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
        if (s->pol->wants_head_p || s->x_colsum) {
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

/* Decode, step 3 (one thread; session.h): per lane in order the policy's step update and the
 * export; frees the lanes' probabilities. */
void skv_session_step_finish(skv_session *s, int layer, int n) {
    const skv_config *c = &s->m->cfg;
    const int Hkv = c->n_kv_head, g = c->n_head / Hkv;
    const size_t N = (size_t)s->o.max_ctx;
    for (int j = 0; j < Hkv; j++) {
        const int nh = s->lane_args[j].n_hot;
        const int *pk = skv_kvcache_hot_pos_kv(s->kv, layer, j);
        float *hp = s->lane_head_p[j];
        if ((s->pol->wants_step || s->pol->wants_head_p) && s->pol->on_step && !s->m->layers[layer].window)
            s->pol->on_step(s->pol, layer, j, pk, s->pol->wants_step ? s->probs + (size_t)j * N : NULL,
                            s->pol->wants_head_p ? hp : NULL, nh);
        if (hp && s->x_colsum) {
            /* export (SLM session): accumulated column sums and this step's row, by position */
            for (int u = 0; u < g; u++) {
                const int h = j * g + u;
                float *cs = s->x_colsum[layer] + (size_t)h * s->x_stride, *lr = s->x_lastrow[layer] + (size_t)h * s->x_stride;
                memset(lr, 0, (size_t)n * sizeof(float));
                for (int i = 0; i < nh; i++) { cs[pk[i]] += hp[(size_t)u * nh + i]; lr[pk[i]] = hp[(size_t)u * nh + i]; }
            }
        }
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
        if (skv_session_step_prepare(s, layer, q, k, v, pos0)) return -1;
        /* other threads only when there is enough work to pay for waking them (with
         * OMP_WAIT_POLICY=PASSIVE, as `make eval-*` runs, tens of microseconds: at 64k
         * multiply-adds the parallel lanes made H2O and SmallKV at 10-20 % of 1024 tokens
         * 1-2 % slower, the full cache 4 % faster) */
        #pragma omp parallel for schedule(static) if (Hkv > 1 && s->lane_work >= ((size_t)1 << 19))
        for (int j = 0; j < Hkv; j++)
            skv_compensate(out + (size_t)j * g * d, q + (size_t)j * g * d, &s->lane_args[j]);
        skv_session_step_finish(s, layer, pos0 + 1);
        return 0;
    }
    #pragma omp single
    {
        s->team_rc = skv_session_step_prepare(s, layer, q, k, v, pos0);
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
    skv_session_step_finish(s, layer, pos0 + 1);
    return 0;
}

/* ------------------------------------------------------------------ prefill / step */

int skv_session_dump_kept(const skv_session *s, FILE *f) {
    const skv_kvcache *kv = s->kv;
    const int L = s->L_act, Hkv = s->m->cfg.n_kv_head;
    char label[256];
    skv_policy_spec_label(&s->o.pol, label, sizeof label);
    fprintf(f, "# kept policy=%s n=%d budget=%.17g layers=%d kv_heads=%d\n", label, s->n,
            skv_session_budget(s, s->n), L, Hkv);
    int most = 1;
    for (int ln = 0; ln < L * Hkv; ln++) {
        if (kv->n_kv[ln] > most) most = kv->n_kv[ln];
        if (kv->n_v[ln] > most) most = kv->n_v[ln];
    }
    int *tmp = skv_malloc((size_t)most * sizeof(int), "kept dump");
    if (!tmp) return -1;
    for (int l = 0; l < L; l++)
        for (int j = 0; j < Hkv; j++) {
            /* slot order inside a lane is arbitrary: sort so dumps compare line by line */
            const int ln = skv_lane(kv, l, j), nk = kv->n_kv[ln], nv = kv->n_v[ln];
            fprintf(f, "%d %d", l, j);
            memcpy(tmp, skv_kvcache_hot_pos_kv(kv, l, j), (size_t)nk * sizeof(int));
            skv_sort_ints(tmp, nk);
            for (int i = 0; i < nk; i++) fprintf(f, " %d", tmp[i]);
            if (nv) {
                memcpy(tmp, skv_kvcache_hot_pos_v(kv, l, j), (size_t)nv * sizeof(int));
                skv_sort_ints(tmp, nv);
                fputs(" |", f);
                for (int i = 0; i < nv; i++) fprintf(f, " %d", tmp[i]);
            }
            fputc('\n', f);
        }
    free(tmp);
    return ferror(f) ? skv_error("kept dump: write failed") : 0;
}

/* SKV_DUMP_KEPT=path appends every prefill's token ids and every compression's kept sets
 * to path, so that an outside implementation (tests/golden/kvpress_compare.py) can be fed
 * the very same ids and checked position by position, without a build of its own or a
 * change to the public API. */
static bool dump_wanted(void) {
    const char *path = getenv("SKV_DUMP_KEPT");
    return path && *path;
}

static FILE *dump_open(void) {
    const char *path = getenv("SKV_DUMP_KEPT");
    FILE *f = fopen(path, "a");
    if (!f) skv_error("SKV_DUMP_KEPT: cannot open %s", path);
    return f;
}

static int dump_close(FILE *f, int rc) {
    if (fclose(f) && !rc) rc = skv_error("SKV_DUMP_KEPT: write failed");
    return rc;
}

static int dump_kept_env(const skv_session *s) {
    if (!dump_wanted()) return 0;
    FILE *f = dump_open();
    return f ? dump_close(f, skv_session_dump_kept(s, f)) : -1;
}

static int dump_tokens_env(const skv_session *s, const int *tokens, int T) {
    if (!dump_wanted()) return 0;
    FILE *f = dump_open();
    if (!f) return -1;
    fprintf(f, "# tokens from=%d", s->n);
    for (int i = 0; i < T; i++) fprintf(f, " %d", tokens[i]);
    fputc('\n', f);
    return dump_close(f, ferror(f) ? skv_error("SKV_DUMP_KEPT: write failed") : 0);
}

/* ids: kvzip, positions n0..; memo: a derived session's base slot (skv_prefill_memo) */
static int compress(skv_session *s, int n0, const int *ids, skv_prefill_memo **memo) {
    const skv_config *c = &s->m->cfg;
    if (!s->n_base) s->n_base = s->n;
    for (int l = 0; l < s->L_act; l++) {
        if (s->pol->on_prefill && !s->m->layers[l].window) {
            skv_prefill_info pi = {
                .layer = l, .H = c->n_head, .Hkv = c->n_kv_head, .n0 = n0, .n = s->n,
                .stride = s->pre_stride,
                .colsum = s->pre_colsum ? s->pre_colsum[l] : NULL,
                .obs = s->pre_obs ? s->pre_obs[l] : NULL,
                .obs_rows = s->n - s->pre_obs_from,
                .cache = s->kv, .budget = skv_session_budget(s, s->n),
                .ids = ids, .memo = memo,   /* kvzip */
            };
            if (s->pol->on_prefill(s->pol, &pi)) return skv_error_prefix("policy %s, layer %d", s->pol->name, l);
        }
        if (select_layer(s, l, s->n, s->q_last ? s->q_last[l] : NULL)) return -1;
    }
    s->n_sel = s->n;
    /* policies that never restore: the staged prefill is dropped (evicted tokens are gone) */
    if (!s->pol->uses_cold) skv_kvcache_cold_release(s->kv);
    return dump_kept_env(s);
}

/* Prefill statistics (H, stride) per layer, stride = cold_base + cold_cap (covers every
 * position of this prefill; equals the cold tier's stride when cold_base == 0). */
static int ensure_prefill_stats(skv_session *s, bool colsum, bool obs) {
    const skv_config *c = &s->m->cfg;
    const int L = c->n_layer, stride = s->kv->cold_base + s->kv->cold_cap;
    const size_t sz = (size_t)c->n_head * stride;
    if (s->pre_stride != stride) {
        skv_rows_free(s->pre_colsum, L); s->pre_colsum = NULL;
        skv_rows_free(s->pre_obs, L); s->pre_obs = NULL;
        s->pre_stride = stride;
    }
    if (colsum && !s->pre_colsum && !(s->pre_colsum = skv_rows_new(L, sz, "prefill column sums"))) return -1;
    if (obs && !s->pre_obs && !(s->pre_obs = skv_rows_new(L, sz, "prefill window sums"))) return -1;
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

void skv_session_export(skv_session *s, float **colsum, float **lastrow, int stride) {
    s->x_colsum = colsum; s->x_lastrow = lastrow; s->x_stride = stride;
}

/* rows of the observation window whose attention sums the prefill keeps: the policy's (SnapKV,
 * EMS), or a prefill base's */
static int obs_window(const skv_session *s) {
    if (s->o.prefill_base) return s->o.obs_rows;
    return s->pol->obs_rows > 0 ? s->pol->obs_rows : 1;
}

int skv_session_prefill(skv_session *s, const int *tokens, int T) {
    if (T < 1) return skv_error("skv_session_prefill: no tokens");
    if (s->n + T > s->o.max_ctx)
        return skv_error("skv_session_prefill: %d + %d tokens exceed the context of %d", s->n, T, s->o.max_ctx);
    if (s->o.prefill_base && s->n > 0) return skv_error("skv_session_prefill: a prefill base takes one prefill");
    if (dump_tokens_env(s, tokens, T)) return -1;
    /* an exact prefill over the cold tier needs it private and contiguous (copy-on-write) */
    if (s->pol->uses_cold && skv_kvcache_cold_flatten(s->kv)) return -1;
    /* the others stage this prefill from position n (their cold tier is empty) */
    if (!s->pol->uses_cold) skv_kvcache_cold_release(s->kv);
    if (skv_kvcache_cold_reserve(s->kv, s->n + T)) return -1;
    const bool base = s->o.prefill_base;
    if (ensure_prefill_stats(s, base || s->pol->wants_colsum || s->x_colsum, base || s->pol->obs_rows > 0)) return -1;
    if (s->slm && skv_slm_guide_run(s->slm, tokens, T, true)) return -1;
    const int n0 = s->n;
    const int w = obs_window(s);
    s->pre_obs_from = n0 + T - w < n0 ? n0 : n0 + T - w;
    skv_fwd_opts fo = { .attn = sess_attn, .attn_ctx = s, .n_layers = s->o.n_layers, .head_rows = s->o.head_rows };
    s->in_prefill = true;
    for (int t = 0; t < T;) {
        int b = T - t < s->st->T_max ? T - t : s->st->T_max;
        fo.logits = t + b == T ? SKV_LOGITS_LAST : SKV_LOGITS_NONE;
        if (skv_forward(s->st, tokens + t, b, &fo)) { s->in_prefill = false; return -1; }
        t += b;
        s->n += b;
    }
    s->in_prefill = false;
    if (base) {   /* derived sessions compress (skv_session_derive), reading these ids */
        if (!(s->base_ids = skv_malloc((size_t)T * sizeof(int), "prefill base ids"))) return -1;
        memcpy(s->base_ids, tokens, (size_t)T * sizeof(int));
        return 0;
    }
    if (s->x_colsum)
        for (int l = 0; l < s->L_act; l++)
            for (int h = 0; h < s->m->cfg.n_head; h++)
                for (int k = 0; k < s->n; k++)
                    s->x_colsum[l][(size_t)h * s->x_stride + k] += s->pre_colsum[l][(size_t)h * s->pre_stride + k];
    if (s->pol->before_compress && s->pol->before_compress(s->pol, s->pre_colsum, s->pre_stride, n0, s->n))
        return skv_error_prefix("policy %s", s->pol->name);
    return compress(s, n0, tokens, NULL);
}

int skv_session_step(skv_session *s, int token) {
    if (s->o.prefill_base) return skv_error("skv_session_step: a prefill base does not step (derive a session from it)");
    if (s->n + 1 > s->o.max_ctx) return skv_error("skv_session_step: context of %d tokens is full", s->o.max_ctx);
    if (s->n == 0) return skv_session_prefill(s, &token, 1);
    if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + 1)) return -1;
    if (s->slm && skv_slm_guide_run(s->slm, &token, 1, false)) return -1;
    skv_fwd_opts fo = { .logits = SKV_LOGITS_LAST, .attn = sess_attn, .attn_ctx = s, .n_layers = s->o.n_layers,
                        .head_rows = s->o.head_rows,
                        .attn_team = true };   /* one parallel region for the step (decode_layer) */
    if (skv_forward(s->st, &token, 1, &fo)) return -1;
    s->n++;
    s->n_sel = s->n;
    if (s->pol->after_step && s->pol->after_step(s->pol, s->n)) return skv_error_prefix("policy %s", s->pol->name);
    return 0;
}

/* Rows below which every matrix product of m takes the per-row decode dots (matmul.h). */
static int gemv_rows(const skv_model *m) {
    int g = skv_matmul_gemm_min_t(m->output.type);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const skv_layer *y = &m->layers[l];
        const skv_weight *w[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
            int t = skv_matmul_gemm_min_t(w[i]->type);
            if (t < g) g = t;
        }
    }
    return g;
}

static int batch_ws(skv_batch **b, const skv_model *m, int n);

/* Room for T rows of every layer's attention inputs (the capture replay reads). */
static int verify_capture(skv_session *s, int T) {
    const skv_config *c = &s->m->cfg;
    const size_t row = (size_t)(c->n_head + 2 * c->n_kv_head) * c->head_dim;
    const size_t need = (size_t)c->n_layer * (size_t)T * row;
    if (need > s->vcap_cap) {
        float *p = realloc(s->vcap, need * sizeof(float));
        if (!p) return skv_error("skv_session_verify: out of memory (%zu bytes of captured rows)", need * sizeof(float));
        s->vcap = p;
        s->vcap_cap = need;
    }
    s->vcap_T = T;
    s->vcap_n0 = s->n;
    return 0;
}

/* Speculative decoding's verify pass (speculate.c): T tokens in one forward, each row's
 * attention exactly a decode step's (sess_attn), logits of every row. */
/* What a verify of T rows on s needs (the rows stay on the exact per-row path only below the
 * model's GEMM threshold; with others in a batch, the caller checks the sum). -1 + error. */
static int verify_check(const skv_session *s, int T, int rows_in_pass) {
    if (T < 1 || T > s->st->T_max) return skv_error("%d tokens (1..%d)", T, s->st->T_max);
    if (s->n == 0) return skv_error("prefill first");
    if (s->n + T > s->o.max_ctx) return skv_error("%d + %d tokens exceed the context of %d", s->n, T, s->o.max_ctx);
    if (!skv_session_verify_ok(s))
        return skv_error("policy %s is not exact under a batched verify (it runs work of its own before or after "
                         "each step)", s->pol->name);
    const int gmin = gemv_rows(s->m);
    if (rows_in_pass >= gmin)
        return skv_error("%d rows would take the float GEMM path (this model's weights decode bit-exactly below %d "
                         "rows)", rows_in_pass, gmin);
    return 0;
}

int skv_session_verify(skv_session *s, const int *tokens, int T) {
    if (verify_check(s, T, T)) return skv_error_prefix("skv_session_verify");
    if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + T)) return -1;
    if (verify_capture(s, T)) return -1;
    skv_fwd_opts fo = {.logits = SKV_LOGITS_ALL, .attn = sess_attn, .attn_ctx = s};
    s->in_verify = true;
    int rc = skv_forward(s->st, tokens, T, &fo);
    s->in_verify = false;
    if (skv_session_drafting(s) && slm_attach(s, -1)) rc = -1;
    if (rc) { s->n_sel = s->n; return -1; }
    s->n += T;
    s->n_sel = s->n;
    return 0;
}

int skv_session_verify_batch(skv_session **ss, const int *tokens, const int *rows, int n, skv_batch **ws) {
    if (n < 1 || !ss || !tokens || !rows || !ws) return skv_error("skv_session_verify_batch: bad arguments (%d entries)", n);
    if (n == 1) return skv_session_verify(ss[0], tokens, rows[0]);
    if (n > 64) return skv_error("skv_session_verify_batch: %d entries (at most 64)", n);
    const skv_model *m = ss[0]->m;
    int R = 0;
    for (int i = 0; i < n; i++) R += rows[i];
    for (int i = 0; i < n; i++) {
        if (ss[i]->m != m) return skv_error("skv_session_verify_batch: entry %d runs another model", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return skv_error("skv_session_verify_batch: entries %d and %d are one session", j, i);
        if (verify_check(ss[i], rows[i], R)) return skv_error_prefix("skv_session_verify_batch: entry %d", i);
    }
    skv_state *st[n];
    skv_fwd_opts fo[n];
    for (int i = 0; i < n; i++) {
        skv_session *s = ss[i];
        if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + rows[i])) return skv_error_prefix("entry %d", i);
        if (verify_capture(s, rows[i])) return -1;
        st[i] = s->st;
        fo[i] = (skv_fwd_opts){.logits = SKV_LOGITS_ALL, .attn = sess_attn, .attn_ctx = s};
    }
    if (batch_ws(ws, m, R)) return -1;
    for (int i = 0; i < n; i++) ss[i]->in_verify = true;
    int rc = skv_forward_batch_rows(*ws, st, tokens, rows, n, fo);
    for (int i = 0; i < n; i++) {
        skv_session *s = ss[i];
        s->in_verify = false;
        if (skv_session_drafting(s) && slm_attach(s, -1)) rc = -1;
        if (!rc) s->n += rows[i];
        s->n_sel = s->n;
    }
    return rc;
}

int skv_session_verify_replay(skv_session *s, const skv_session *v, int keep) {
    if (!v || v->m != s->m || !v->vcap || v->vcap_T < 1 || v->vcap_n0 != s->n || v->n != s->n + v->vcap_T ||
        v->L_act != s->L_act)
        return skv_error("skv_session_verify_replay: not a verified fork of this session at length %d", s->n);
    if (keep < 1 || keep > v->vcap_T)
        return skv_error("skv_session_verify_replay: keep %d of %d verified rows", keep, v->vcap_T);
    if (!skv_session_verify_ok(s)) return skv_error("skv_session_verify_replay: policy %s cannot verify", s->pol->name);
    const skv_config *c = &s->m->cfg;
    const size_t qs = (size_t)c->n_head * c->head_dim, ks = (size_t)c->n_kv_head * c->head_dim, row = qs + 2 * ks;
    if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + keep)) return -1;
    int rc = 0;
    /* the order of the verify pass (layer by layer, rows in order) less the rows not kept */
    for (int l = 0; l < s->L_act && !rc; l++) {
        const float *cap = v->vcap + (size_t)l * v->vcap_T * row;
        for (int t = 0; t < keep && !rc; t++) {
            s->n_sel = s->n + t;
            if (skv_session_drafting(s) && slm_attach(s, t)) { rc = -1; break; }
            const float *q = cap + t * row;
            rc = decode_layer(s, l, q, q + qs, q + qs + ks, s->n + t, s->st->att);
        }
    }
    if (skv_session_drafting(s) && slm_attach(s, -1)) rc = -1;
    if (rc) { s->n_sel = s->n; return -1; }
    memcpy(s->st->logits, v->st->logits, (size_t)keep * c->vocab * sizeof(float));
    s->n += keep;
    s->n_sel = s->n;
    s->st->n_past = s->n;
    return 0;
}

bool skv_session_verify_ok(const skv_session *s) {
    /* a session that runs an SLM before each token qualifies once that SLM drafts (its rows
     * for every verified position are then ready) */
    return (!s->slm || skv_session_drafting(s)) && !s->pol->after_step && !s->x_colsum && !s->o.n_layers &&
           !s->o.prefill_base;
}

int skv_session_verify_max(const skv_session *s) {
    const int g = gemv_rows(s->m) - 1;
    return g < s->st->T_max ? g : s->st->T_max;
}

int skv_session_truncate(skv_session *s, int n) {
    if (n < 1 || n > s->n) return skv_error("skv_session_truncate: length %d outside 1..%d", n, s->n);
    if (n == s->n) return 0;
    if (!skv_policy_has(s->pol, SKV_POLICY_KEEPS_ALL) || s->pol->after_step || s->pol->uses_cold || s->x_colsum)
        return skv_error("skv_session_truncate: policy %s keeps state a truncation cannot restore", s->pol->name);
    if (skv_kvcache_truncate(s->kv, n)) return -1;
    s->n = s->n_sel = n;
    s->st->n_past = n;
    return 0;
}

/* Grow (or create) a batch workspace for model m to hold n rows. */
static int batch_ws(skv_batch **b, const skv_model *m, int n) {
    if (*b && (*b)->m == m && (*b)->n_max >= n) return 0;
    skv_batch_free(*b);
    *b = skv_batch_new(m, n < 4 ? 4 : n);
    return *b ? 0 : -1;
}

/* The SLMs of a batched step's sessions (slm_guide.h), batched where they can be. */
static int slms_before_step(skv_session **ss, const int *tokens, int n) {
    skv_slm_guide *gs[n];
    int tk[n], ng = 0;
    for (int i = 0; i < n; i++)
        if (ss[i]->slm) { gs[ng] = ss[i]->slm; tk[ng++] = tokens[i]; }
    return skv_slm_guide_step_batch(gs, tk, ng);
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
    /* the policies' own work first (SmallKV: the LLM's selection reads its SLM's attention of
     * this step) */
    if (slms_before_step(join, tk, nj)) return -1;
    skv_state *st[nj];
    skv_fwd_opts fo[nj];
    for (int i = 0; i < nj; i++) {
        st[i] = join[i]->st;
        fo[i] = (skv_fwd_opts){ .logits = SKV_LOGITS_LAST, .attn = sess_attn, .attn_ctx = join[i],
                                .n_layers = join[i]->o.n_layers, .head_rows = join[i]->o.head_rows };
    }
    if (batch_ws(&lead->bws, lead->m, nj)) return -1;
    if (skv_forward_batch(lead->bws, st, tk, nj, fo)) return -1;
    for (int i = 0; i < nj; i++) {
        skv_session *s = join[i];
        s->n++;
        s->n_sel = s->n;
        if (s->pol->after_step && s->pol->after_step(s->pol, s->n)) return skv_error_prefix("policy %s", s->pol->name);
    }
    return 0;
}

const float *skv_session_logits(const skv_session *s) { return s->st->logits; }

/* ------------------------------------------------------------------ fork */

skv_session *skv_session_fork(const skv_session *s) {
    const skv_config *c = &s->m->cfg;
    skv_session *f = skv_calloc(1, sizeof *f, "session");
    if (!f) return NULL;
    f->m = s->m;
    f->o = s->o;
    f->n = s->n; f->n_sel = s->n_sel; f->restores = s->restores; f->n_base = s->n_base;
    f->L_act = s->L_act;
    f->pol = skv_policy_fork(s->pol);
    if (!f->pol) goto fail;
    f->st = skv_state_new_nocache(s->m, s->o.max_ctx, s->o.T_max, s->o.kv_f16);
    if (!f->st) goto fail;
    f->st->n_past = s->st->n_past;
    memcpy(f->st->logits, s->st->logits, (size_t)c->vocab * sizeof(float));
    f->kv = skv_kvcache_clone(s->kv);
    if (!f->kv || alloc_buffers(f)) goto fail;
    if (s->slm) {
        if (s->slm->pending) {
            /* a verify pass's fork (speculate.c): it reads the drafted rows, one of the two
             * sessions is dropped right after, the survivor keeps the guide */
            f->slm = s->slm;
            f->slm->refs++;
        } else if (!(f->slm = skv_slm_guide_fork(s->slm))) {
            goto fail;
        }
        if (slm_attach(f, -1)) goto fail;
    }
    return f;
fail:
    skv_error_prefix("session fork");
    skv_session_free(f);
    return NULL;
}

/* ------------------------------------------------------------------ derive */

/* f's SLM state after the base's prompt: the base's own when it ran the same SLM cache type
 * deep enough; else the state an earlier derived session with f's settings ran (kept in the
 * base); else f runs its SLM over the base's prompt itself, as its own prefill would (a
 * quantised SLM cache changes the SLM's prefill: its attention reads the stored rows), and
 * the base keeps a copy for the next. A compressed SLM (a session of its own) is refused. */
static int derive_slm(skv_session *f, skv_session *b) {
    if (f->slm->sess) return skv_error("a compressed SLM cache prefills itself");
    if (b->slm && skv_slm_guide_can_take(f->slm, b->slm)) return skv_slm_guide_take(f->slm, b->slm);
    for (int i = 0; i < b->n_slm_alt; i++)
        if (skv_slm_guide_can_take(f->slm, b->slm_alt[i])) return skv_slm_guide_take(f->slm, b->slm_alt[i]);
    if (skv_slm_guide_run(f->slm, b->base_ids, b->n, true)) return -1;
    if (b->n_slm_alt < SKV_SLM_ALT_MAX) {   /* without room (or memory) the next one runs too */
        skv_slm_guide *k = skv_slm_guide_fork(f->slm);
        if (k) b->slm_alt[b->n_slm_alt++] = k;
    }
    return 0;
}

skv_session *skv_session_derive(skv_session *b, const skv_session_opts *o) {
    if (!b || !o) { skv_error("skv_session_derive: bad arguments"); return NULL; }
    const char *pname = o->pol.desc ? o->pol.desc->name : "?";
    if (!b->o.prefill_base || b->n < 1) { skv_error("derive %s: the base is not a prefilled prefill base", pname); return NULL; }
    if (o->prefill_base || o->n_layers || o->max_ctx != b->o.max_ctx || o->kv_f16 != b->o.kv_f16 || o->T_max != b->o.T_max) {
        skv_error("derive %s: options differ from the base's in context, cache type, block size or depth", pname);
        return NULL;
    }
    skv_session *f = skv_session_new(b->m, o);
    if (!f) return NULL;
    const skv_config *c = &b->m->cfg;
    const int L = c->n_layer;
    if (f->pol->obs_rows > 0 && obs_window(f) != obs_window(b)) {
        skv_error("derive %s: observation window %d, the base kept %d", pname, obs_window(f), obs_window(b));
        goto fail;
    }
    /* the SLM's prefill: the base's, a kept one, or its own (derive_slm) */
    if (f->slm && derive_slm(f, b)) goto fail;
    /* the LLM: the cold tier shared copy-on-write, activations at the end of the prefill */
    skv_kvcache_free(f->kv);
    if (!(f->kv = skv_kvcache_clone(b->kv))) goto fail;
    f->st->n_past = b->st->n_past;
    memcpy(f->st->logits, b->st->logits, (size_t)c->vocab * sizeof(float));
    f->n = b->n;
    f->n_sel = b->n_sel;
    /* the statistics a prefill of its own would have collected */
    const size_t rows = (size_t)c->n_head * b->pre_stride;
    f->pre_stride = b->pre_stride;
    f->pre_obs_from = b->pre_obs_from;
    if (f->pol->wants_colsum && !(f->pre_colsum = skv_rows_copy(b->pre_colsum, L, rows, "prefill column sums"))) goto fail;
    if (f->pol->obs_rows > 0 && !(f->pre_obs = skv_rows_copy(b->pre_obs, L, rows, "prefill window sums"))) goto fail;
    if (f->q_last && b->q_last)
        for (int l = 0; l < L; l++) memcpy(f->q_last[l], b->q_last[l], (size_t)c->n_head * c->head_dim * sizeof(float));
    if (f->pol->before_compress && f->pol->before_compress(f->pol, f->pre_colsum, f->pre_stride, 0, f->n)) goto fail;
    if (compress(f, 0, b->base_ids, &b->memo)) goto fail;
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
    if (s->pol->mem || s->slm) {
        skv_policy_mem pm = {0};
        if (s->pol->mem) s->pol->mem(s->pol, &pm);
        if (s->slm) skv_slm_guide_mem(s->slm, &pm);
        r->slm_weights = pm.model_bytes;
        r->slm_cache = pm.cache_bytes;
        r->slm_scores = pm.score_bytes;
        r->slm_seconds = pm.seconds;
        r->pass_seconds = pm.pass_seconds;   /* kvzip's scoring passes */
        r->pass_peak = pm.pass_peak_bytes;
        /* selection metadata lives with the hot tier: a budget comparison must pay for it */
        r->hot_meta = pm.hot_meta_bytes;
        r->hot_used += pm.hot_meta_bytes;
        r->hot_cap += pm.hot_meta_bytes;
    }
}

void skv_session_mem_total(skv_session *const *ss, int n, skv_session_mem *r) {
    memset(r, 0, sizeof *r);
    const skv_kvcache *cs[256];
    int nc = 0;
    for (int i = 0; i < n; i++) {
        skv_session_mem m;
        skv_session_mem_report(ss[i], &m);
        r->hot_used += m.hot_used; r->hot_cap += m.hot_cap; r->hot_meta += m.hot_meta;
        r->slm_cache += m.slm_cache; r->slm_scores += m.slm_scores; r->slm_seconds += m.slm_seconds;
        r->pass_seconds += m.pass_seconds;   /* kvzip */
        if (m.pass_peak > r->pass_peak) r->pass_peak = m.pass_peak;
        if (m.slm_weights > r->slm_weights) r->slm_weights = m.slm_weights;   /* one copy of the weights */
        r->hot_tokens += m.hot_tokens; r->budget_tokens += m.budget_tokens; r->full_equiv += m.full_equiv;
        if (nc < 256) cs[nc++] = ss[i]->kv;
    }
    r->cold_used = skv_kvcache_cold_unique(cs, nc);
}

/* ------------------------------------------------------------------ drafting with the SLM */

bool skv_session_drafting(const skv_session *s) { return s->slm && s->slm->spec_kmax > 0; }

int skv_session_draft_enable(skv_session *s, int kmax, int head_rows) {
    if (!s->slm) return skv_error("policy %s runs no SLM to draft with", s->pol->name);
    if (s->pol->head_map && !s->pol->head_map(s->pol))
        return skv_error("%s: online head matching changes the policy mid-sequence; speculative decoding needs the "
                         "mapping from a profile", s->pol->name);
    if (skv_slm_guide_spec_enable(s->slm, kmax, s->pol->slm.draft_colsum, head_rows))
        return skv_error_prefix("%s", s->pol->name);
    return 0;
}

int skv_session_draft_batch(skv_session **ss, const int *first, const int *ks, int *const *drafts,
                            int (*pick)(const float *logits, int pos, int i, void *user), void *const *users, int n) {
    if (n < 1) return 0;
    if (n > 64) return skv_error("skv_session_draft_batch: %d entries (at most 64)", n);
    skv_slm_guide *gs[n];
    for (int i = 0; i < n; i++) {
        if (!skv_session_drafting(ss[i])) return skv_error("draft batch entry %d: its SLM does not draft", i);
        gs[i] = ss[i]->slm;
    }
    return skv_slm_guide_draft_batch(gs, first, ks, drafts, pick, users, n);
}

int skv_session_draft_keep(skv_session *s, int keep) {
    if (!skv_session_drafting(s)) return 0;
    if (skv_slm_guide_spec_keep(s->slm, keep)) return -1;
    return slm_attach(s, -1);
}
