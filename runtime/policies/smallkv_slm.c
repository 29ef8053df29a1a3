/* smallkv_slm.c: SmallKV's SLM guide (smallkv.h): the small model run over the same tokens
 * as the LLM, before it, to its early-stop depth, keeping per layer the attention column
 * sums over its whole history and this step's row, which the selection reads. Plain: a
 * forward state with its own full contiguous cache. Compressed (slm_budget < 1): a session
 * of its own under H2O, exporting every attention row it computes. */
#include "smallkv.h"
#include "runtime/session/session.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

skv_slm_guide *skv_slm_guide_new(const skv_model *slm, int depth, int max_ctx, int T_max, bool kv_f16,
                                 double compress, bool as_session, int sinks, int reduce) {
    skv_slm_guide *g = skv_calloc(1, sizeof *g, "SLM guide");
    if (!g) return NULL;
    g->m = slm;
    g->depth = depth;
    g->max_ctx = max_ctx;
    const size_t rows = (size_t)slm->cfg.n_head * max_ctx;
    g->colsum = skv_rows_new(depth, rows, "SLM column sums");
    g->lastrow = skv_rows_new(depth, rows, "SLM last rows");
    if (!g->colsum || !g->lastrow) goto fail;
    if ((compress > 0 && compress < 1) || as_session) {
        /* the SLM's cache compressed by H2O: the SLM runs as a session of its own */
        skv_session_opts so;
        skv_session_opts_default(&so);
        char spec[96];
        snprintf(spec, sizeof spec, "h2o:sinks=%d:reduce=%s", sinks, skv_reduce_names[reduce]);
        if (skv_policy_spec_parse(spec, &so.pol)) goto fail;
        so.budget = compress > 0 && compress < 1 ? compress : 1.0;
        so.kv_f16 = kv_f16;
        so.max_ctx = max_ctx;
        so.T_max = T_max;
        so.n_layers = depth;
        if (!(g->sess = skv_session_new(slm, &so))) { skv_error_prefix("SLM session"); goto fail; }
        skv_session_export(g->sess, g->colsum, g->lastrow, max_ctx);
    } else if (!(g->st = skv_state_new(slm, max_ctx, T_max, kv_f16))) {
        goto fail;
    }
    return g;
fail:
    skv_slm_guide_free(g);
    return NULL;
}

void skv_slm_guide_free(skv_slm_guide *g) {
    if (!g) return;
    skv_state_free(g->st);
    skv_session_free(g->sess);
    skv_rows_free(g->colsum, g->depth);
    skv_rows_free(g->lastrow, g->depth);
    skv_batch_free(g->bws);
    free(g);
}

static int run(skv_slm_guide *g, const int *tokens, int T, bool prefill) {
    if (g->sess) {
        int rc = prefill ? skv_session_prefill(g->sess, tokens, T) : skv_session_step(g->sess, tokens[0]);
        return rc ? skv_error_prefix("SLM") : 0;
    }
    skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .n_layers = g->depth, .colsum = g->colsum, .lastrow = g->lastrow};
    /* colsum / lastrow have depth entries; the forward only reads the first n_layers */
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
        if (ns > 0 && (g->m != st[0]->m || g->depth != fo[0].n_layers)) {
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
    f->max_ctx = g->max_ctx;
    f->seconds = g->seconds;
    const size_t rows = (size_t)sc->n_head * g->max_ctx;
    f->colsum = skv_rows_copy(g->colsum, g->depth, rows, "SLM column sums");
    f->lastrow = skv_rows_copy(g->lastrow, g->depth, rows, "SLM last rows");
    if (!f->colsum || !f->lastrow) goto fail;
    if (g->sess) {
        if (!(f->sess = skv_session_fork(g->sess))) goto fail;
        skv_session_export(f->sess, f->colsum, f->lastrow, g->max_ctx);
    } else {
        if (!(f->st = skv_state_new(g->m, g->st->S_cap, g->st->T_max, g->st->kv_f16))) goto fail;
        f->st->n_past = g->st->n_past;
        const size_t per = (size_t)sc->n_kv_head * g->st->S_cap * sc->head_dim * (g->st->kv_f16 ? 2 : 4);
        for (int l = 0; l < g->depth; l++) {
            memcpy(f->st->k[l], g->st->k[l], per);
            memcpy(f->st->v[l], g->st->v[l], per);
        }
    }
    return f;
fail:
    skv_slm_guide_free(f);
    return NULL;
}

int skv_slm_guide_take(skv_slm_guide *dst, const skv_slm_guide *base) {
    if (dst->sess) return skv_error("a compressed SLM cache prefills itself");
    if (!base || !base->st || base->m != dst->m || dst->depth > base->depth)
        return skv_error("the base ran %s SLM layers, %d needed", base ? "fewer or other" : "no", dst->depth);
    const skv_config *sc = &dst->m->cfg;
    dst->st->n_past = base->st->n_past;
    const size_t per = (size_t)sc->n_kv_head * base->st->S_cap * sc->head_dim * (base->st->kv_f16 ? 2 : 4);
    const size_t srows = (size_t)sc->n_head * dst->max_ctx * sizeof(float);
    for (int l = 0; l < dst->depth; l++) {
        memcpy(dst->st->k[l], base->st->k[l], per);
        memcpy(dst->st->v[l], base->st->v[l], per);
        memcpy(dst->colsum[l], base->colsum[l], srows);
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
        const size_t esz = g->st->kv_f16 ? 2 : 4;
        m->cache_bytes = (size_t)g->depth * sc->n_kv_head * (size_t)g->st->n_past * 2 * sc->head_dim * esz;
    }
    m->score_bytes = 2 * (size_t)g->depth * sc->n_head * g->max_ctx * sizeof(float);
    m->seconds = g->seconds;
}
