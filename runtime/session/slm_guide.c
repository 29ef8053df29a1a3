/* slm_guide.c: the session's companion model (slm_guide.h): SmallKV's SLM run over the same
 * tokens as the LLM, before it, to its early-stop depth, its attention column sums and this
 * step's row kept for the policy's selection. Plain: a forward state with its own full
 * contiguous cache. Compressed (slm_budget < 1): a session of its own under H2O, exporting
 * every attention row it computes. Drafting (speculative decoding): the plain guide runs
 * every layer, proposes tokens from its logits and keeps each drafted step's rows apart
 * until the verify pass says which to keep. */
#include "slm_guide.h"
#include "session.h"
#include "kernels/cpu/ops.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the SLM as a session of its own: its cache H2O-compressed to budget (1 keeps everything),
 * exporting every attention row into the guide's rows */
static skv_session *slm_session_open(const skv_slm_guide *g, const skv_slm_need *need, double budget, int T_max,
                                     bool kv_f16) {
    skv_session_opts so;
    skv_session_opts_default(&so);
    char spec[96];
    snprintf(spec, sizeof spec, "h2o:sinks=%d:reduce=%s", need->sinks, skv_reduce_names[need->reduce]);
    if (skv_policy_spec_parse(spec, &so.pol)) return NULL;
    so.budget = budget;
    so.kv_f16 = kv_f16;
    so.max_ctx = g->max_ctx;
    so.T_max = T_max;
    so.n_layers = g->depth;
    skv_session *s = skv_session_new(g->m, &so);
    if (s) skv_session_export(s, g->colsum, g->lastrow, g->max_ctx);
    return s;
}

skv_slm_guide *skv_slm_guide_new(const skv_model *slm, const skv_slm_need *need, int max_ctx, int T_max, bool kv_f16) {
    skv_slm_guide *g = skv_calloc(1, sizeof *g, "SLM guide");
    if (!g) return NULL;
    g->m = slm;
    g->depth = need->depth;
    g->run_layers = need->depth;
    g->max_ctx = max_ctx;
    g->refs = 1;
    const size_t rows = (size_t)slm->cfg.n_head * max_ctx;
    const bool compressed = need->compress > 0 && need->compress < 1;
    /* column sums cost as much as the rows: kept unless only the rows are read (a compressed
     * SLM's H2O session exports both) */
    if (!need->rows_only || compressed || need->as_session)
        g->colsum = skv_rows_new(g->depth, rows, "SLM column sums");
    g->lastrow = skv_rows_new(g->depth, rows, "SLM last rows");
    if ((!g->colsum && !need->rows_only) || !g->lastrow) goto fail;
    if (need->k_bits && (compressed || need->as_session)) {
        skv_error("a quantised SLM cache is a full cache: not with slm_budget < 1");
        goto fail;
    }
    if (compressed || need->as_session) {
        /* the SLM's cache compressed by H2O: the SLM runs as a session of its own */
        if (!(g->sess = slm_session_open(g, need, compressed ? need->compress : 1.0, T_max, kv_f16))) {
            skv_error_prefix("SLM session");
            goto fail;
        }
    } else if (!(g->st = need->k_bits ? skv_state_new_quant(slm, max_ctx, T_max, need->k_bits, need->v_bits)
                                       : skv_state_new(slm, max_ctx, T_max, kv_f16))) {
        goto fail;
    } else {
        g->st->k_norm_off = need->plain_keys;
    }
    return g;
fail:
    skv_slm_guide_free(g);
    return NULL;
}

skv_slm_view skv_slm_guide_view(const skv_slm_guide *g, int t) {
    skv_slm_view v = {.map = NULL, .slm_heads = g->m->cfg.n_head, .slm_layers = g->depth,
                      .colsum = (const float *const *)g->colsum, .lastrow = (const float *const *)g->lastrow,
                      .stride = g->max_ctx};
    if (t >= 0 && t < g->pending) {
        v.lastrow = (const float *const *)g->lr_set[t];
        if (g->spec_colsum) v.colsum = (const float *const *)g->cs_set[t];
    }
    return v;
}

static int spec_enable_at(skv_slm_guide *g, int kmax, bool colsum);

static void spec_sets_free(skv_slm_guide *g) {
    for (int t = 0; t <= g->spec_kmax; t++) {
        if (g->lr_set) skv_rows_free(g->lr_set[t], g->depth);
        if (g->cs_set) skv_rows_free(g->cs_set[t], g->depth);
    }
    free(g->lr_set);
    free(g->cs_set);
    g->lr_set = g->cs_set = NULL;
}

void skv_slm_guide_free(skv_slm_guide *g) {
    if (!g || --g->refs > 0) return;
    spec_sets_free(g);
    skv_state_free(g->st);
    skv_session_free(g->sess);
    skv_rows_free(g->colsum, g->depth);
    skv_rows_free(g->lastrow, g->depth);
    skv_batch_free(g->bws);
    free(g);
}

/* The forward's per-layer row pointers ([n_layer], NULL past depth): the live column sums
 * (none while drafting without them) and the given rows. */
static void row_ptrs(const skv_slm_guide *g, float **rows, float **cs, float **lr) {
    const bool colsum = !g->spec_kmax || g->spec_colsum;
    for (int l = 0; l < g->m->cfg.n_layer; l++) {
        cs[l] = l < g->depth && colsum && g->colsum ? g->colsum[l] : NULL;
        lr[l] = l < g->depth ? rows[l] : NULL;
    }
}

static int run(skv_slm_guide *g, const int *tokens, int T, bool prefill) {
    if (g->sess) {
        const int rc = prefill ? skv_session_prefill(g->sess, tokens, T) : skv_session_step(g->sess, tokens[0]);
        return rc ? skv_error_prefix("SLM") : 0;
    }
    float *cs[g->m->cfg.n_layer], *lr[g->m->cfg.n_layer];
    row_ptrs(g, g->lastrow, cs, lr);
    skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .n_layers = g->run_layers, .colsum = cs, .lastrow = lr};
    for (int t = 0; t < T;) {
        int b = T - t < g->st->T_max ? T - t : g->st->T_max;
        if (skv_forward(g->st, tokens + t, b, &fo)) return skv_error_prefix("SLM");
        t += b;
    }
    return 0;
}

int skv_slm_guide_run(skv_slm_guide *g, const int *tokens, int T, bool prefill) {
    const double t0 = skv_now();
    int rc = run(g, tokens, T, prefill);
    g->seconds += skv_now() - t0;
    return rc;
}

/* Grow (or create) a batch workspace for model m to hold n rows. */
static int batch_ws(skv_batch **b, const skv_model *m, int n) {
    if (*b && (*b)->m == m && (*b)->n_max >= n) return 0;
    skv_batch_free(*b);
    *b = skv_batch_new(m, n < 4 ? 4 : n);
    return *b ? 0 : -1;
}

int skv_slm_guide_step_batch(skv_slm_guide **gs, const int *tokens, int n) {
    if (n < 1) return 0;
    if (n > 64) {   /* bounded stack arrays below */
        for (int i = 0; i < n; i += 64)
            if (skv_slm_guide_step_batch(gs + i, tokens + i, n - i < 64 ? n - i : 64)) return -1;
        return 0;
    }
    const double t0 = skv_now();
    skv_state *st[n];
    skv_slm_guide *one[n];
    skv_session *sub[n];
    skv_fwd_opts fo[n];
    int tk[n], tk2[n], ns = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        skv_slm_guide *g = gs[i];
        if (g->sess) { sub[nb] = g->sess; tk2[nb++] = tokens[i]; continue; }
        if (g->spec_kmax || (ns > 0 && (g->m != st[0]->m || g->depth != fo[0].n_layers))) {
            if (run(g, &tokens[i], 1, false)) return skv_error_prefix("batch entry %d", i);
            continue;
        }
        st[ns] = g->st;
        one[ns] = g;
        tk[ns] = tokens[i];
        fo[ns] = (skv_fwd_opts){.logits = SKV_LOGITS_NONE, .n_layers = g->depth, .colsum = g->colsum, .lastrow = g->lastrow};
        ns++;
    }
    if (ns == 1 && run(one[0], tk, 1, false)) return -1;
    if (ns > 1) {
        if (batch_ws(&gs[0]->bws, st[0]->m, ns)) return -1;
        if (skv_forward_batch(gs[0]->bws, st, tk, ns, fo)) return skv_error_prefix("SLM");
    }
    if (nb > 0 && skv_session_step_batch(sub, tk2, nb)) return skv_error_prefix("SLM");
    const double dt = (skv_now() - t0) / n;   /* a batched step's time split evenly */
    for (int i = 0; i < n; i++) gs[i]->seconds += dt;
    return 0;
}

skv_slm_guide *skv_slm_guide_fork(const skv_slm_guide *g) {
    skv_slm_guide *f = skv_calloc(1, sizeof *f, "SLM guide");
    if (!f) return NULL;
    const skv_config *sc = &g->m->cfg;
    f->m = g->m;
    f->depth = g->depth;
    f->run_layers = g->run_layers;
    f->max_ctx = g->max_ctx;
    f->seconds = g->seconds;
    f->head_rows = g->head_rows;
    f->refs = 1;
    if (g->pending) { skv_error("SLM guide: fork with drafted rows pending"); goto fail; }
    const size_t rows = (size_t)sc->n_head * g->max_ctx;
    f->colsum = skv_rows_copy(g->colsum, g->depth, rows, "SLM column sums");
    f->lastrow = skv_rows_copy(g->lastrow, g->depth, rows, "SLM last rows");
    if ((g->colsum && !f->colsum) || !f->lastrow) goto fail;
    if (g->sess) {
        if (!(f->sess = skv_session_fork(g->sess))) goto fail;
        skv_session_export(f->sess, f->colsum, f->lastrow, g->max_ctx);
    } else {
        const skv_state *st = g->st;
        if (!(f->st = st->k_bits ? skv_state_new_quant(g->m, st->S_cap, st->T_max, st->k_bits, st->v_bits)
                                   : skv_state_new(g->m, st->S_cap, st->T_max, st->kv_f16)))
            goto fail;
        f->st->k_norm_off = st->k_norm_off;
        if (skv_state_copy_cache(f->st, st, g->run_layers)) goto fail;
        if (g->spec_kmax && spec_enable_at(f, g->spec_kmax, g->spec_colsum)) goto fail;
    }
    return f;
fail:
    skv_slm_guide_free(f);
    return NULL;
}

/* 0 when dst can take base's state, else why not (0 / 1 / 2: fine / layers / cache type or sums) */
static int take_refusal(const skv_slm_guide *dst, const skv_slm_guide *base) {
    if (!base || !base->st || base->m != dst->m || dst->run_layers > base->run_layers) return 1;
    /* a quantised cache changes the SLM's own prefill (its attention reads the rows) */
    if (base->st->k_bits != dst->st->k_bits || base->st->v_bits != dst->st->v_bits ||
        base->st->k_norm_off != dst->st->k_norm_off ||
        base->st->k_row_bytes != dst->st->k_row_bytes || base->st->v_row_bytes != dst->st->v_row_bytes ||
        base->st->S_cap != dst->st->S_cap || (dst->colsum && !base->colsum) || dst->depth > base->depth)
        return 2;
    return 0;
}

bool skv_slm_guide_can_take(const skv_slm_guide *dst, const skv_slm_guide *base) {
    return !dst->sess && take_refusal(dst, base) == 0;
}

int skv_slm_guide_take(skv_slm_guide *dst, const skv_slm_guide *base) {
    if (dst->sess) return skv_error("a compressed SLM cache prefills itself");
    const int why = take_refusal(dst, base);
    if (why == 1)
        return skv_error("the base ran %s SLM layers, %d needed", base ? "fewer or other" : "no", dst->run_layers);
    if (why == 2)
        return skv_error("the base's SLM cache differs (%d/%d-bit K/V, %d/%d-bit needed; or its capacity, depth or "
                         "column sums)", base->st->k_bits, base->st->v_bits, dst->st->k_bits, dst->st->v_bits);
    const skv_config *sc = &dst->m->cfg;
    const size_t srows = (size_t)sc->n_head * dst->max_ctx * sizeof(float);
    if (skv_state_copy_cache(dst->st, base->st, dst->run_layers)) return -1;
    for (int l = 0; l < dst->depth; l++) {
        if (dst->colsum) memcpy(dst->colsum[l], base->colsum[l], srows);
        memcpy(dst->lastrow[l], base->lastrow[l], srows);
    }
    return 0;
}

void skv_slm_guide_mem(const skv_slm_guide *g, skv_policy_mem *m) {
    const skv_config *sc = &g->m->cfg;
    m->model_bytes = g->m->weight_bytes + g->m->pack_bytes;   /* + its decode copies */
    if (g->sess) {
        skv_session_mem r;
        skv_session_mem_report(g->sess, &r);
        m->cache_bytes = r.hot_used + r.cold_used;
    } else {
        /* rows as stored: quantised groups with their scales (kvquant.h), and the layers' key
         * normalisation */
        m->cache_bytes = (size_t)g->run_layers * sc->n_kv_head * (size_t)g->st->n_past *
                         (g->st->k_row_bytes + g->st->v_row_bytes);
        if (g->st->k_norm && !g->st->k_norm_off)
            m->cache_bytes += (size_t)g->run_layers * 2 * sc->n_kv_head * sc->head_dim * sizeof(float);
    }
    const int sets = (g->colsum ? 2 : 1) + (g->spec_kmax ? (g->spec_kmax + 1) * (g->spec_colsum ? 2 : 1) : 0);
    m->score_bytes = (size_t)sets * g->depth * sc->n_head * g->max_ctx * sizeof(float);
    m->seconds = g->seconds;
}

/* ------------------------------------------------------------------ drafting */

/* Row sets for drafts of up to kmax tokens (kmax + 1 rows a round); the SLM runs every
 * layer from now on. Used by enable and by a fork of a drafting guide. */
static int spec_enable_at(skv_slm_guide *g, int kmax, bool colsum) {
    const size_t rows = (size_t)g->m->cfg.n_head * g->max_ctx;
    if (colsum && !g->colsum) return skv_error("SLM guide: drafting with column sums, which this guide does not keep");
    spec_sets_free(g);
    g->spec_kmax = kmax;
    g->spec_colsum = colsum;
    g->lr_set = skv_calloc((size_t)kmax + 1, sizeof(float **), "drafted SLM rows");
    g->cs_set = colsum ? skv_calloc((size_t)kmax + 1, sizeof(float **), "drafted SLM column sums") : NULL;
    if (!g->lr_set || (colsum && !g->cs_set)) goto fail;
    /* calloc'd rows: pages are only touched up to the positions a draft reaches */
    for (int t = 0; t <= kmax; t++) {
        if (!(g->lr_set[t] = skv_rows_new(g->depth, rows, "drafted SLM rows"))) goto fail;
        if (colsum && !(g->cs_set[t] = skv_rows_new(g->depth, rows, "drafted SLM column sums"))) goto fail;
    }
    g->run_layers = g->m->cfg.n_layer;
    return 0;
fail:
    spec_sets_free(g);
    g->spec_kmax = 0;
    return -1;
}

int skv_slm_guide_spec_enable(skv_slm_guide *g, int kmax, bool colsum, int head_rows) {
    if (g->sess) return skv_error("a compressed SLM cache (slm_budget < 1) cannot draft (its H2O state does not roll back)");
    if (g->st->n_past > 0) return skv_error("drafting must be enabled before the SLM's first token");
    if (kmax < 1) return skv_error("drafting: %d tokens a round", kmax);
    if (head_rows < 0) return skv_error("drafting: a draft vocabulary of %d tokens", head_rows);
    g->head_rows = head_rows;
    return spec_enable_at(g, kmax, colsum);
}

static int draft_check(const skv_slm_guide *g, int k) {
    if (!g->spec_kmax) return skv_error("SLM guide: drafting is not enabled");
    if (k < 0 || k > g->spec_kmax) return skv_error("SLM guide: %d drafts (0..%d)", k, g->spec_kmax);
    if (g->pending) return skv_error("SLM guide: the rows of an earlier draft are still pending");
    if (g->st->n_past + k + 1 > g->max_ctx)
        return skv_error("SLM guide: %d + %d tokens exceed the context of %d", g->st->n_past, k + 1, g->max_ctx);
    return 0;
}

int skv_slm_guide_draft_batch(skv_slm_guide **gs, const int *first, const int *ks, int *const *drafts,
                              int (*pick)(const float *logits, int pos, int i, void *user), void *const *users, int n) {
    if (n < 1) return 0;
    if (n > 64) return skv_error("SLM guide: a draft batch of %d (at most 64)", n);
    int kmax = 0, n0[n], tok[n];
    for (int i = 0; i < n; i++) {
        if (draft_check(gs[i], ks[i])) return n > 1 ? skv_error_prefix("draft batch entry %d", i) : -1;
        if (i > 0 && (gs[i]->m != gs[0]->m || gs[i]->run_layers != gs[0]->run_layers))
            return skv_error("draft batch entry %d: another SLM", i);
        for (int j = 0; j < i; j++)
            if (gs[j] == gs[i]) return skv_error("draft batch entry %d: the same guide twice", i);
        n0[i] = gs[i]->st->n_past;
        tok[i] = first[i];
        if (ks[i] > kmax) kmax = ks[i];
    }
    const skv_model *m = gs[0]->m;
    const int L = m->cfg.n_layer, V = m->cfg.vocab, H = m->cfg.n_head;
    const double t0 = skv_now();
    if (n > 1 && batch_ws(&gs[0]->bws, m, n)) return -1;
    /* step t: every guide with t <= k runs over its token (the LLM's, then its own
     * proposals), its rows into set t; the last step only supplies rows for the verify, so
     * it computes no logits */
    for (int t = 0; t <= kmax; t++) {
        float *cs[n][L], *lr[n][L];
        skv_state *st[n];
        skv_fwd_opts fo[n];
        int tk[n], ix[n], nb = 0;
        for (int i = 0; i < n; i++) {
            skv_slm_guide *g = gs[i];
            if (t > ks[i]) continue;
            row_ptrs(g, g->lr_set[t], cs[nb], lr[nb]);
            fo[nb] = (skv_fwd_opts){.logits = t < ks[i] ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, .n_layers = g->run_layers,
                                    .colsum = cs[nb], .lastrow = lr[nb], .head_rows = g->head_rows};
            st[nb] = g->st;
            tk[nb] = tok[i];
            ix[nb++] = i;
        }
        const int rc = nb == 1 ? skv_forward(st[0], tk, 1, &fo[0]) : skv_forward_batch(gs[0]->bws, st, tk, nb, fo);
        for (int b = 0; b < nb && !rc; b++) {
            const int i = ix[b];
            skv_slm_guide *g = gs[i];
            if (g->spec_colsum)
                for (int l = 0; l < g->depth; l++)
                    for (int h = 0; h < H; h++)
                        memcpy(g->cs_set[t][l] + (size_t)h * g->max_ctx, g->colsum[l] + (size_t)h * g->max_ctx,
                               (size_t)(n0[i] + t + 1) * sizeof(float));
            if (t < ks[i]) {
                const int d = pick ? pick(g->st->logits, n0[i] + 1 + t, t, users ? users[i] : NULL)
                                   : skv_argmax(g->st->logits, V);
                if (d < 0) goto fail;
                drafts[i][t] = tok[i] = d;
            }
        }
        if (rc) goto fail;
    }
    const double dt = (skv_now() - t0) / n;   /* a batched draft's time split evenly */
    for (int i = 0; i < n; i++) {
        gs[i]->pending = ks[i] + 1;
        gs[i]->pend_n0 = n0[i];
        gs[i]->seconds += dt;
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) gs[i]->st->n_past = n0[i];
    return skv_error_prefix("SLM draft");
}

int skv_slm_guide_draft(skv_slm_guide *g, int first, int k, int *drafts,
                        int (*pick)(const float *logits, int pos, int i, void *user), void *user) {
    void *u[1] = {user};
    int *d[1] = {drafts};
    return skv_slm_guide_draft_batch(&g, &first, &k, d, pick, u, 1);
}

int skv_slm_guide_spec_keep(skv_slm_guide *g, int keep) {
    if (keep < 1 || keep > g->pending) return skv_error("SLM guide: keep %d of %d drafted rows", keep, g->pending);
    const int H = g->m->cfg.n_head, n = g->pend_n0 + keep;
    /* the kept row's set becomes the live one; the live buffers join the sets */
    for (int l = 0; l < g->depth; l++) {
        float *x = g->lastrow[l];
        g->lastrow[l] = g->lr_set[keep - 1][l];
        g->lr_set[keep - 1][l] = x;
        if (!g->spec_colsum) continue;
        x = g->colsum[l];
        g->colsum[l] = g->cs_set[keep - 1][l];
        g->cs_set[keep - 1][l] = x;
        /* the set held copies up to its row only; later steps add at positions >= n, which
         * earlier rounds may have left non-zero in this buffer (below pend_n0 + kmax + 1) */
        int hi = g->pend_n0 + g->spec_kmax + 1;
        if (hi > g->max_ctx) hi = g->max_ctx;
        if (hi > n)
            for (int h = 0; h < H; h++)
                memset(g->colsum[l] + (size_t)h * g->max_ctx + n, 0, (size_t)(hi - n) * sizeof(float));
    }
    g->st->n_past = n;
    g->pending = 0;
    return 0;
}
