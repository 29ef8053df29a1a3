/* session_cuda.c: GPU decode of a compressed-cache session (see session_cuda.h).
 *
 * Per decode step:   SLM forward on the device (colsum / lastrow back on the host)
 *                    LLM forward on the device, per layer dev_attn:
 *   1. k, v (Hkv, d) of the new token -> host (a synchronous copy: waits for the layer's
 *      q/k/v, and with it for everything queued before, including the previous layer's
 *      attention and the row uploads it waited on);
 *   2. host: skv_session_step_prepare, the CPU's own decode step up to the attention (fresh
 *      rows, cold write, selection, each lane's arguments and marginal weights);
 *   3. host: marginal weights (pm, w) of every lane -> one upload;
 *   4. host: skv_kvmirror_sync -> row copies staged in pinned buffers -> copy stream:
 *      upload + scatter into the device arenas, event; the default stream waits on it;
 *   5. device: per lane skv_cuda_compensate over the lane's slots of the mirror (+ slot
 *      accumulators for policies that keep scores: downloaded into the lanes' host buffers,
 *      then skv_session_step_finish, the CPU's own step update, 6).
 * Pinned buffers are rewritten only after skv_cuda_copyq_wait_host; device arrays are
 * freed (relayout) only after it too. The device mirror holds K, V and V-only rows at the
 * host arena's slot indices; multiplicities are not mirrored (always 1 without EMS). */
#include "session_cuda.h"
#include "runtime/kv/kvmirror.h"
#include "common/util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int skv_session_cuda_check(const skv_session *s) {
    if (!s) return skv_error("CUDA session: no session");
    const char *pol = s->pol->name;
    if (s->o.prefill_base) return skv_error("CUDA session: a prefill base does not step");
    if (s->n < 1) return skv_error("CUDA session: prefill the session first (the prefill runs on the CPU)");
    if (s->o.n_layers) return skv_error("CUDA session: partial-depth sessions (n_layers) are not supported");
    if (!skv_policy_has(s->pol, SKV_POLICY_GPU))
        return skv_error("CUDA session: policy %s does not decode on the GPU%s", pol,
                         s->pol->after_apply ? " (it merges slots: the CUDA compensate kernel has no multiplicities)" : "");
    if (s->x_colsum || s->x_lastrow) return skv_error("CUDA session: attention export is not supported on the GPU");
    if (s->o.per_head) return skv_error("CUDA session: per-attention-head selection is not supported on the GPU");
    if (s->slm && s->slm->sess)
        return skv_error("CUDA session: policy %s: a compressed SLM cache (slm_budget < 1) is not supported on the GPU", pol);
    if (s->slm && s->slm->st && (s->slm->st->k_bits || s->slm->st->v_bits))
        return skv_error("CUDA session: policy %s: a quantised SLM cache (slm_kv) is not supported on the GPU", pol);
    if (s->slm && s->pol->head_map && !s->pol->head_map(s->pol))
        return skv_error("CUDA session: policy %s: online head matching is still pending (prefill more tokens)", pol);
    if (s->pol->wants_head_p)
        return skv_error("CUDA session: policy %s reads per-head probabilities, which the GPU path does not return", pol);
    if (s->m->cfg.head_dim > 256) return skv_error("CUDA session: head_dim %d > 256", s->m->cfg.head_dim);
    return 0;
}

#ifndef SKV_CUDA

skv_session_cuda *skv_session_cuda_new(skv_session *s, const skv_cuda_model *llm, const skv_cuda_model *slm) {
    (void)s; (void)llm; (void)slm;
    skv_error("built without CUDA (make CUDA=1)");
    return NULL;
}
int skv_session_cuda_step(skv_session_cuda *g, int token) {
    (void)g; (void)token;
    return skv_error("built without CUDA (make CUDA=1)");
}
void skv_session_cuda_free(skv_session_cuda *g) { (void)g; }
long skv_session_cuda_verify(skv_session_cuda *g) {
    (void)g;
    return skv_error("built without CUDA (make CUDA=1)");
}

#else  /* SKV_CUDA */

#include "kernels/cuda/backend.h"

struct skv_session_cuda {
    skv_session *s;
    skv_cuda_state *llm;          /* no KV cache: dev_attn owns it */
    skv_cuda_state *slm;          /* the session's SLM guide (slm_guide.h) with its full
                                     (early-stop) cache, or NULL */
    skv_slm_guide *guide;         /* that guide on the host: its rows and time */
    float *hq;                    /* this layer's query (H, d) on the host, for a policy that
                                     reads it (SKV_POLICY_QUERY), else NULL */
    skv_cuda_copyq *q;
    int L, Hkv, d, g;
    size_t row;                   /* bytes per K / V row (d * esz) */
    bool broken;                  /* a step failed half-way: host and device disagree */
    /* device mirror of the hot arenas, [L] -> (slots, d) at the host's slot indices */
    void **dk, **dv, **dm;
    size_t *kv_slots, *v_slots;
    /* one sync's row copies, pinned */
    skv_cuda_row_copy *rows;
    size_t n_rows, cap_rows;
    unsigned char *data;
    size_t n_data, cap_data;
    /* this layer's new K / V (Hkv, d) f32, pinned */
    float *hk, *hv;
    /* marginal weights of all lanes: host staging and device copy (floats) */
    float *pmw_h, *pmw_d;
    size_t cap_pmw_h, cap_pmw_d;
    /* slot accumulators of all lanes (floats) */
    float *acc_h, *acc_d;
    size_t cap_acc_h, cap_acc_d;
    size_t *off_pmw, *off_acc;    /* [Hkv] */
};

/* ------------------------------------------------------------------ buffers */

/* Grow a host buffer to n elements of size es (contents kept). -1 + error. */
static int grow_host(void **p, size_t *cap, size_t n, size_t es, const char *what) {
    if (n <= *cap) return 0;
    size_t want = n + n / 2 + 64, bytes;
    if (!skv_mul_ok(want, es, &bytes)) return skv_error("CUDA session: %s of %zu entries overflows", what, n);
    void *q = realloc(*p, bytes);
    if (!q) return skv_error("CUDA session: out of host memory (%zu bytes, %s)", bytes, what);
    *p = q;
    *cap = want;
    return 0;
}

/* Grow a pinned host buffer (contents kept). Only while no copy reads it. -1 + error. */
static int grow_pinned(void **p, size_t *cap, size_t n, size_t es, const char *what) {
    if (n <= *cap) return 0;
    size_t want = n + n / 2 + 256, bytes;
    if (!skv_mul_ok(want, es, &bytes)) return skv_error("CUDA session: %s of %zu entries overflows", what, n);
    void *q = skv_cuda_host_alloc(bytes, what);
    if (!q) return -1;
    if (*p && *cap) memcpy(q, *p, *cap * es);
    skv_cuda_host_free(*p);
    *p = q;
    *cap = want;
    return 0;
}

/* Grow a device float buffer (contents dropped). -1 + error. */
static int grow_dev(float **p, size_t *cap, size_t n, const char *what) {
    if (n <= *cap) return 0;
    size_t want = n + n / 2 + 256, bytes;
    if (!skv_mul_ok(want, sizeof(float), &bytes)) return skv_error("CUDA session: %s overflows", what);
    skv_cuda_free(*p);   /* cudaFree waits for kernels still using it */
    *p = NULL;
    *cap = 0;
    if (!(*p = skv_cuda_malloc(bytes, what))) return -1;
    *cap = want;
    return 0;
}

/* ------------------------------------------------------------------ mirror sink */

static int sink_resize(void *ctx, int layer, int region, size_t slots) {
    skv_session_cuda *g = ctx;
    /* the previous batch may still write into the old arrays */
    if (skv_cuda_copyq_wait_host(g->q) != 0) return -1;
    size_t bytes;
    if (!skv_mul_ok(slots, g->row, &bytes)) return skv_error("CUDA session: hot arena of %zu slots overflows", slots);
    if (region == 0) {
        skv_cuda_free(g->dk[layer]); skv_cuda_free(g->dv[layer]);
        g->dk[layer] = g->dv[layer] = NULL;
        g->kv_slots[layer] = 0;
        if (slots) {
            if (!(g->dk[layer] = skv_cuda_malloc(bytes, "hot tier K")) ||
                !(g->dv[layer] = skv_cuda_malloc(bytes, "hot tier V")))
                return skv_error_prefix("CUDA session: layer %d, %zu slots", layer, slots);
        }
        g->kv_slots[layer] = slots;
    } else {
        skv_cuda_free(g->dm[layer]);
        g->dm[layer] = NULL;
        g->v_slots[layer] = 0;
        if (slots && !(g->dm[layer] = skv_cuda_malloc(bytes, "hot tier V-only")))
            return skv_error_prefix("CUDA session: layer %d, %zu V-only slots", layer, slots);
        g->v_slots[layer] = slots;
    }
    return 0;
}

static int sink_row(void *ctx, int layer, int array, size_t slot, const void *src, size_t bytes) {
    skv_session_cuda *g = ctx;
    if (array == SKV_MIRROR_MULT) return 0;   /* not mirrored (no merged slots on the device) */
    const bool vonly = array == SKV_MIRROR_M;
    const size_t n = vonly ? g->v_slots[layer] : g->kv_slots[layer];
    if (slot >= n || bytes != g->row)
        return skv_error("CUDA session: row copy to slot %zu of layer %d (arena %zu slots, %zu bytes)", slot, layer, n,
                         bytes);
    char *base = array == SKV_MIRROR_K ? g->dk[layer] : array == SKV_MIRROR_V ? g->dv[layer] : g->dm[layer];
    const size_t sz = (bytes + 15) & ~(size_t)15;
    if (g->n_data + sz > UINT32_MAX) return skv_error("CUDA session: more than 4 GiB of rows in one upload");
    if (grow_pinned((void **)&g->rows, &g->cap_rows, g->n_rows + 1, sizeof *g->rows, "hot tier row table") ||
        grow_pinned((void **)&g->data, &g->cap_data, g->n_data + sz, 1, "hot tier row data"))
        return -1;
    memcpy(g->data + g->n_data, src, bytes);
    g->rows[g->n_rows++] = (skv_cuda_row_copy){
        .dst = (uint64_t)(uintptr_t)(base + slot * bytes), .src_off = (uint32_t)g->n_data, .bytes = (uint32_t)bytes};
    g->n_data += sz;
    return 0;
}

/* Bring the device mirror up to date with the host hot tier and queue the uploads. */
static int mirror_sync(skv_session_cuda *g) {
    /* the previous batch read the pinned buffers: wait before rewriting them */
    if (skv_cuda_copyq_wait_host(g->q) != 0) return -1;
    g->n_rows = g->n_data = 0;
    skv_kvmirror_sink k = {.resize = sink_resize, .row = sink_row, .ctx = g};
    if (skv_kvmirror_sync(g->s->kv, &k) < 0) return -1;
    if (g->n_rows > INT32_MAX) return skv_error("CUDA session: %zu row copies in one upload", g->n_rows);
    return skv_cuda_copyq_scatter(g->q, g->rows, (int)g->n_rows, g->data, g->n_data);
}

/* ------------------------------------------------------------------ attention hook */

static int dev_attn(void *ctx, int layer, const float *q, const float *k, const float *v, int pos0, int T, float *out) {
    skv_session_cuda *g = ctx;
    skv_session *s = g->s;
    skv_kvcache *kv = s->kv;
    const int Hkv = g->Hkv, d = g->d, G = g->g;
    if (T != 1) return skv_error("CUDA session: decode block of %d tokens (1 expected)", T);
    /* 1. the new K / V row (and the query, for a policy that reads it) to the host: waits for
     *    this layer's projections */
    const size_t kvb = (size_t)Hkv * d * sizeof(float);
    if (skv_cuda_download(g->hk, k, kvb) != 0 || skv_cuda_download(g->hv, v, kvb) != 0) return -1;
    if (g->hq && skv_cuda_download(g->hq, q, (size_t)Hkv * G * d * sizeof(float)) != 0) return -1;
    /* 2. the decode step's host part, the CPU's own (session.h): fresh and cold rows, the
     *    selection, each lane's arguments with the policy's marginal weights */
    if (skv_session_step_prepare(s, layer, g->hq, g->hk, g->hv, pos0)) return -1;
    /* 3. the lanes' marginal weights in one upload (before the rows are queued: a pageable
     *    upload queued after the default stream's wait for the copy stream would hold the
     *    host until the rows are in) */
    size_t npm = 0, nacc = 0;
    for (int j = 0; j < Hkv; j++) {
        const skv_comp_args *a = &s->lane_args[j];
        g->off_pmw[j] = npm;
        g->off_acc[j] = nacc;
        if (a->pm) npm += (size_t)G * a->n_marg + G;
        nacc += (size_t)a->n_hot;
    }
    if (npm) {
        if (grow_host((void **)&g->pmw_h, &g->cap_pmw_h, npm, sizeof(float), "marginal weights") ||
            grow_dev(&g->pmw_d, &g->cap_pmw_d, npm, "marginal weights"))
            goto fail;
        for (int j = 0; j < Hkv; j++) {
            const skv_comp_args *a = &s->lane_args[j];
            if (!a->pm) continue;
            float *pm = g->pmw_h + g->off_pmw[j];   /* (G, n_marg), then w (G) */
            memcpy(pm, a->pm, (size_t)G * a->n_marg * sizeof(float));
            memcpy(pm + (size_t)G * a->n_marg, a->w, (size_t)G * sizeof(float));
        }
        if (skv_cuda_upload(g->pmw_d, g->pmw_h, npm * sizeof(float)) != 0) goto fail;
    }
    const bool acc = s->pol->wants_step && s->pol->on_step && nacc > 0;
    if (acc) {
        if (grow_host((void **)&g->acc_h, &g->cap_acc_h, nacc, sizeof(float), "slot scores") ||
            grow_dev(&g->acc_d, &g->cap_acc_d, nacc, "slot scores") ||
            skv_cuda_memset(g->acc_d, 0, nacc * sizeof(float)) != 0)
            goto fail;
    }
    /* 4. the hot tier's changes to the device (copy stream; the default stream waits) */
    if (mirror_sync(g)) goto fail;
    /* 5. attend: each lane's compensated attention over the device's copy of its slots */
    for (int j = 0; j < Hkv; j++) {
        const skv_comp_args *h = &s->lane_args[j];
        const int ln = skv_lane(kv, layer, j), nh = h->n_hot, nm = h->n_marg;
        if ((size_t)kv->off_kv[ln] + nh > g->kv_slots[layer] || (size_t)kv->off_v[ln] + nm > g->v_slots[layer]) {
            skv_error("CUDA session: lane %d/%d (%d+%d slots) is outside the device arena (%zu+%zu slots)", layer, j, nh,
                      nm, g->kv_slots[layer], g->v_slots[layer]);
            goto fail;
        }
        skv_comp_args a = {
            .g = G, .d = d, .n_hot = nh, .n_marg = nm, .f16 = kv->f16,
            .k = nh ? (const char *)g->dk[layer] + (size_t)kv->off_kv[ln] * g->row : NULL,
            .v = nh ? (const char *)g->dv[layer] + (size_t)kv->off_kv[ln] * g->row : NULL,
            .vm = nm ? (const char *)g->dm[layer] + (size_t)kv->off_v[ln] * g->row : NULL,
            .combine = h->combine,
        };
        if (h->pm) {
            a.pm = g->pmw_d + g->off_pmw[j];
            a.w = a.pm + (size_t)G * nm;
        }
        if (acc) a.slot_acc = g->acc_d + g->off_acc[j];
        if (skv_cuda_compensate(out + (size_t)j * G * d, q + (size_t)j * G * d, &a) != 0) {
            skv_error_prefix("CUDA session: layer %d, lane %d", layer, j);
            goto fail;
        }
    }
    /* 6. the slot scores back into the lanes' host buffers, then the shared finish */
    if (acc) {
        if (skv_cuda_download(g->acc_h, g->acc_d, nacc * sizeof(float)) != 0) goto fail;
        for (int j = 0; j < Hkv; j++)
            memcpy(s->lane_args[j].slot_acc, g->acc_h + g->off_acc[j], (size_t)s->lane_args[j].n_hot * sizeof(float));
    }
    skv_session_step_finish(s, layer, pos0 + 1);
    return 0;
fail:   /* no step update after a failed step: only the lanes' buffers go */
    for (int j = 0; j < Hkv; j++) {
        free(s->lane_head_p[j]);
        s->lane_head_p[j] = NULL;
    }
    return -1;
}

/* ------------------------------------------------------------------ test support */

long skv_session_cuda_verify(skv_session_cuda *g) {
    if (!g) return skv_error("skv_session_cuda_verify: no session");
    if (skv_cuda_copyq_wait_host(g->q) != 0 || skv_cuda_sync() != 0) return -1;
    const skv_kvcache *kv = g->s->kv;
    long bad = 0;
    char *buf = NULL;
    size_t cap = 0;
    for (int l = 0; l < g->L; l++)
        for (int region = 0; region < 2; region++) {
            const size_t slots = region ? g->v_slots[l] : g->kv_slots[l];
            if (slots != skv_kvmirror_slots(kv, l, region))
                return free(buf), skv_error("verify: layer %d region %d has %zu slots on the device, %zu on the host", l,
                                            region, slots, skv_kvmirror_slots(kv, l, region));
            if (!slots) continue;
            const size_t bytes = slots * g->row;
            if (bytes > cap) {
                char *nb = realloc(buf, bytes);
                if (!nb) return free(buf), skv_error("verify: out of memory (%zu bytes)", bytes);
                buf = nb;
                cap = bytes;
            }
            for (int a = 0; a < (region ? 1 : 2); a++) {
                const void *dsrc = region ? g->dm[l] : a ? g->dv[l] : g->dk[l];
                const char *host = region ? kv->hm[l] : a ? kv->hv[l] : kv->hk[l];
                if (skv_cuda_download(buf, dsrc, bytes) != 0) return free(buf), -1;
                for (int j = 0; j < g->Hkv; j++) {
                    const int ln = l * g->Hkv + j, n = region ? kv->n_v[ln] : kv->n_kv[ln];
                    const size_t off = (size_t)(region ? kv->off_v[ln] : kv->off_kv[ln]) * g->row;
                    for (int s = 0; s < n; s++)
                        bad += memcmp(buf + off + (size_t)s * g->row, host + off + (size_t)s * g->row, g->row) != 0;
                }
            }
        }
    free(buf);
    return bad;
}

/* ------------------------------------------------------------------ life cycle */

void skv_session_cuda_free(skv_session_cuda *g) {
    if (!g) return;
    /* freeing must not replace the error that led here */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", skv_last_error());
    if (g->q) {
        skv_cuda_copyq_free(g->q);   /* waits for the last upload */
        skv_cuda_sync();             /* and for kernels reading the arenas */
    }
    for (int l = 0; l < g->L; l++) {
        if (g->dk) skv_cuda_free(g->dk[l]);
        if (g->dv) skv_cuda_free(g->dv[l]);
        if (g->dm) skv_cuda_free(g->dm[l]);
    }
    free(g->dk); free(g->dv); free(g->dm); free(g->kv_slots); free(g->v_slots);
    skv_cuda_host_free(g->rows);
    skv_cuda_host_free(g->data);
    skv_cuda_host_free(g->hk);
    skv_cuda_host_free(g->hv);
    free(g->pmw_h); free(g->acc_h);
    skv_cuda_free(g->pmw_d); skv_cuda_free(g->acc_d);
    free(g->off_pmw); free(g->off_acc);
    skv_cuda_state_free(g->llm);
    skv_cuda_state_free(g->slm);
    free(g->hq);
    if (g->s) skv_kvlog_disable(g->s->kv);
    free(g);
    if (saved[0]) skv_error("%s", saved);
}

skv_session_cuda *skv_session_cuda_new(skv_session *s, const skv_cuda_model *llm, const skv_cuda_model *slm) {
    if (skv_session_cuda_check(s)) return NULL;
    if (!llm) { skv_error("CUDA session: no uploaded LLM"); return NULL; }
    const bool has_comp = s->slm != NULL;
    if (has_comp && !slm) { skv_error("CUDA session: policy %s runs an SLM: upload it too", s->pol->name); return NULL; }
    if (s->kv->log) { skv_error("CUDA session: the session is already attached to a mirror"); return NULL; }
    const skv_config *c = &s->m->cfg;
    skv_session_cuda *g = skv_calloc(1, sizeof *g, "CUDA session");
    if (!g) return NULL;
    g->L = c->n_layer; g->Hkv = c->n_kv_head; g->d = c->head_dim; g->g = c->n_head / c->n_kv_head;
    g->row = (size_t)g->d * s->kv->esz;
    g->dk = skv_calloc((size_t)g->L, sizeof(void *), "CUDA session");
    g->dv = skv_calloc((size_t)g->L, sizeof(void *), "CUDA session");
    g->dm = skv_calloc((size_t)g->L, sizeof(void *), "CUDA session");
    g->kv_slots = skv_calloc((size_t)g->L, sizeof(size_t), "CUDA session");
    g->v_slots = skv_calloc((size_t)g->L, sizeof(size_t), "CUDA session");
    g->off_pmw = skv_calloc((size_t)g->Hkv, sizeof(size_t), "CUDA session");
    g->off_acc = skv_calloc((size_t)g->Hkv, sizeof(size_t), "CUDA session");
    if (!g->dk || !g->dv || !g->dm || !g->kv_slots || !g->v_slots || !g->off_pmw || !g->off_acc) goto fail;
    const size_t kvb = (size_t)g->Hkv * g->d * sizeof(float);
    if (!(g->hk = skv_cuda_host_alloc(kvb, "new K row")) || !(g->hv = skv_cuda_host_alloc(kvb, "new V row"))) goto fail;
    if (!(g->q = skv_cuda_copyq_new())) goto fail;
    if (skv_policy_has(s->pol, SKV_POLICY_QUERY) &&
        !(g->hq = skv_malloc((size_t)c->n_head * c->head_dim * sizeof(float), "CUDA session query")))
        goto fail;
    if (!(g->llm = skv_cuda_state_new_nocache(llm, s->o.max_ctx, 1))) goto fail;
    if (g->llm->m != s->m) { skv_error("CUDA session: the uploaded LLM is not the session's model"); goto fail; }
    g->llm->n_past = s->n;
    if (has_comp) {
        g->guide = s->slm;
        if (!(g->slm = skv_cuda_state_new(slm, s->o.max_ctx, 1, s->o.kv_f16))) goto fail;
        if (g->slm->m != s->slm->m) { skv_error("CUDA session: the uploaded SLM is not the session's SLM"); goto fail; }
        if (skv_cuda_state_load(g->slm, s->slm->st, s->slm->depth)) goto fail;
    }
    /* the whole hot tier once (a new log is "lost": the first sync takes everything) */
    g->s = s;
    if (skv_kvlog_enable(s->kv)) goto fail;
    if (mirror_sync(g) || skv_cuda_copyq_wait_host(g->q) || skv_cuda_sync()) goto fail;
    return g;
fail:
    skv_error_prefix("CUDA session (policy %s)", s->pol->name);
    skv_session_cuda_free(g);
    return NULL;
}

int skv_session_cuda_step(skv_session_cuda *g, int token) {
    if (!g) return skv_error("skv_session_cuda_step: no session");
    skv_session *s = g->s;
    if (g->broken) return skv_error("CUDA session: an earlier step failed; the session cannot continue");
    if (s->n + 1 > s->o.max_ctx) return skv_error("skv_session_cuda_step: context of %d tokens is full", s->o.max_ctx);
    if (token < 0 || token >= s->m->cfg.vocab)
        return skv_error("skv_session_cuda_step: token id %d out of range (vocab %d)", token, s->m->cfg.vocab);
    if (g->llm->n_past != s->n || (g->slm && g->slm->n_past != s->n))
        return skv_error("CUDA session: the session advanced on the CPU after it was attached (%d tokens, %d on the "
                         "device): attach it again", s->n, g->llm->n_past);
    if (s->pol->uses_cold && skv_kvcache_cold_reserve(s->kv, s->n + 1)) return -1;
    g->broken = true;   /* until the step completes */
    if (g->slm) {
        const double t0 = skv_now();
        skv_fwd_opts so = {.logits = SKV_LOGITS_NONE, .n_layers = g->guide->depth, .colsum = g->guide->colsum,
                           .lastrow = g->guide->lastrow};
        int rc = skv_cuda_forward(g->slm, &token, 1, &so);
        g->guide->seconds += skv_now() - t0;
        if (rc) return skv_error_prefix("CUDA session: SLM");
    }
    skv_fwd_opts fo = {.logits = SKV_LOGITS_LAST};
    if (skv_cuda_forward_dev(g->llm, &token, 1, &fo, dev_attn, g))
        return skv_error_prefix("CUDA session (policy %s, position %d)", s->pol->name, s->n);
    memcpy(s->st->logits, g->llm->logits, (size_t)s->m->cfg.vocab * sizeof(float));
    s->n++;
    s->n_sel = s->n;
    s->st->n_past = s->n;
    g->broken = false;
    return 0;
}

#endif  /* SKV_CUDA */
