/* kvzip_pass.c: KVzip's scoring pass by context reconstruction (Kim et al. 2025, section 3;
 * snu-mllab/KVzip model/wrapper.py scoring + attention/score.py, kvpress KVzipPress).
 *
 * The context's scored part is cut into chunks (`chunk` tokens). For each chunk the LLM runs
 * over the reconstruction input
 *     "\n\nRepeat the previous context exactly."                      (first chunk)
 *     "\n\nRepeat the part of the previous context exactly, starting with" + the previous
 *                                              chunk's last `tail` tokens   (later chunks)
 *   + the chat template's assistant header + the chunk's own tokens,
 * at positions n, n+1, .. after the n context tokens, with the context's K/V in the cache.
 * Every layer attends exactly over the whole cache plus the reconstruction rows so far
 * (causal), so the hidden states are those of a real forward. For the score, each query's
 * probabilities are renormalised over the sinks (positions < sinks), the chunk and the
 * reconstruction rows, which is KVzip's softmax over those keys only; a context pair's score is
 * the maximum of that over its KV group's query heads and over the reconstruction queries.
 * The reconstruction rows' K/V live in this pass's own buffer and go with it: the session's
 * cache is only read (its cold tier, where the first prefill is staged). */
#include "kvzip.h"
#include "common/util.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd_math.h"
#include "runtime/engine/forward.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    skv_kvzip_state *s;
    const skv_kvcache *c;
    int H, Hkv, d;
    int n;                /* context length: positions 0 .. n-1, in the cold tier */
    int start, end;       /* the chunk being reconstructed */
    int sink_end;         /* positions < sink_end are the softmax's sinks */
    int R;                /* reconstruction tokens of this chunk */
    float *rk, *rv;       /* (L, R, Hkv, d): their K/V, never written to the session's cache */
    int nth;              /* threads of the per-row work */
    size_t scratch_peak;  /* largest per-layer scratch */
} kz_pass;

static void row_f32(float *dst, const void *src, int d, bool f16) {
    if (f16) {
        const uint16_t *h = src;
        for (int i = 0; i < d; i++) dst[i] = skv_f16_to_f32(h[i]);
    } else {
        memcpy(dst, src, (size_t)d * sizeof(float));
    }
}

/* One lane's keys and values as the block's rows see them: the context (cold rows 0 .. n-1)
 * then the reconstruction rows 0 .. nr-1; pos and sub (1: in the scoring softmax, 2: and
 * scored) for the context entries. */
static int lane_rows(const kz_pass *z, int layer, int j, int nr, float *K, float *V, int *pos, unsigned char *sub,
                     int *nc_out) {
    const skv_kvcache *c = z->c;
    const int d = z->d;
    int nc = 0;
    for (int p = 0; p < z->n; p++, nc++) {
        const void *ck = skv_kvcache_cold_k(c, layer, j, p), *cv = skv_kvcache_cold_v(c, layer, j, p);
        if (!ck || !cv) return skv_error("kvzip: layer %d: position %d is not in the cold tier", layer, p);
        row_f32(K + (size_t)nc * d, ck, d, c->f16);
        row_f32(V + (size_t)nc * d, cv, d, c->f16);
        pos[nc] = p;
    }
    for (int i = 0; i < nc; i++)
        sub[i] = pos[i] >= z->start && pos[i] < z->end ? 2 : pos[i] < z->sink_end ? 1 : 0;
    const size_t kvrow = (size_t)z->Hkv * d;
    for (int r = 0; r < nr; r++) {
        memcpy(K + (size_t)(nc + r) * d, z->rk + ((size_t)layer * z->R + r) * kvrow + (size_t)j * d, (size_t)d * sizeof(float));
        memcpy(V + (size_t)(nc + r) * d, z->rv + ((size_t)layer * z->R + r) * kvrow + (size_t)j * d, (size_t)d * sizeof(float));
    }
    *nc_out = nc;
    return 0;
}

/* One query row's probabilities p over its nh visible keys (the first nc the context's, in
 * lane_rows's order; the rest reconstruction rows), from its scaled logits: softmax, the keys
 * past nh set to 0 (so P V sums only what the row sees); then KVzip's score: each scored
 * context pair's probability renormalised over the sinks, the chunk and the reconstruction
 * keys, maxed into mx (indexed from the chunk's start). */
static void row_probs(float *p, int nh, int nk, int nc, const int *pos, const unsigned char *sub, int start,
                      float *mx) {
    const float inv = 1.0f / skv_exp_sum(p, nh, skv_max_row(p, nh));
    for (int i = 0; i < nh; i++) p[i] *= inv;
    if (nk > nh) memset(p + nh, 0, (size_t)(nk - nh) * sizeof(float));
    double Z = 0;
    for (int i = 0; i < nc; i++) if (sub[i]) Z += p[i];
    for (int i = nc; i < nh; i++) Z += p[i];
    if (!(Z > 0)) return;
    const float iz = (float)(1.0 / Z);
    for (int i = 0; i < nc; i++)
        if (sub[i] == 2) {
            const float w = p[i] * iz;
            float *m = mx + (pos[i] - start);
            if (w > *m) *m = w;
        }
}

/* The forward's attention hook for the reconstruction rows pos0 .. pos0+T-1. Per KV head
 * and each of its query heads, the block's T rows go through two float matrix products
 * (skv_matmul, cache-blocked and threaded): logits (T, nk) = Q K^T over every key of the
 * lane, then, after each row's causal softmax and score, out (T, d) = P V. A row at a time
 * (every row streaming all of K and V per query head) took ~2.7x a prefill's time at 8K. */
static int kz_attn(void *ctx, int layer, const float *q, const float *k, const float *v, int pos0, int T, float *out) {
    kz_pass *z = ctx;
    const int H = z->H, Hkv = z->Hkv, d = z->d, g = H / Hkv;
    const int r0 = pos0 - z->n, nr = r0 + T, clen = z->end - z->start;
    if (r0 < 0 || nr > z->R) return skv_error("kvzip: reconstruction rows %d..%d outside 0..%d", r0, nr, z->R);
    const size_t kvrow = (size_t)Hkv * d;
    memcpy(z->rk + ((size_t)layer * z->R + r0) * kvrow, k, (size_t)T * kvrow * sizeof(float));
    memcpy(z->rv + ((size_t)layer * z->R + r0) * kvrow, v, (size_t)T * kvrow * sizeof(float));
    const int nmax = z->n + nr;   /* context and reconstruction keys */
    const float scale = 1.0f / sqrtf((float)d);
    /* K, V and V^T (nmax, d / d, nmax), positions, marks, Q and O of one head (T, d), the
     * logits / probabilities (T, nmax), each thread's score maxima (clen) */
    const size_t need = 3 * (size_t)nmax * d * sizeof(float) + (size_t)nmax * (sizeof(int) + 1) +
                        ((size_t)2 * T * d + (size_t)T * nmax + (size_t)z->nth * clen) * sizeof(float);
    if (need > z->scratch_peak) z->scratch_peak = need;
    float *K = skv_malloc((size_t)nmax * d * sizeof(float) + 1, "kvzip keys");
    float *V = skv_malloc((size_t)nmax * d * sizeof(float) + 1, "kvzip values");
    float *Vt = skv_malloc((size_t)nmax * d * sizeof(float) + 1, "kvzip values, transposed");
    int *pos = skv_malloc((size_t)nmax * sizeof(int) + 1, "kvzip positions");
    unsigned char *sub = skv_malloc((size_t)nmax + 1, "kvzip positions");
    float *Qh = skv_malloc((size_t)T * d * sizeof(float) + 1, "kvzip queries");
    float *Oh = skv_malloc((size_t)T * d * sizeof(float) + 1, "kvzip outputs");
    float *P = skv_malloc((size_t)T * nmax * sizeof(float) + 1, "kvzip probabilities");
    float *mx = skv_malloc((size_t)z->nth * clen * sizeof(float) + 1, "kvzip score maxima");
    int rc = !K || !V || !Vt || !pos || !sub || !Qh || !Oh || !P || !mx ? -1 : 0;
    for (int j = 0; j < Hkv && !rc; j++) {
        const int ln = skv_lane(z->c, layer, j);
        int nc = 0;
        if (lane_rows(z, layer, j, nr, K, V, pos, sub, &nc)) { rc = -1; break; }
        const int nk = nc + nr;
        for (int i = 0; i < nk; i++)
            for (int e = 0; e < d; e++) Vt[(size_t)e * nk + i] = V[(size_t)i * d + e];
        const skv_weight Kw = {.type = SKV_F32, .rows = nk, .cols = d, .data = K};
        const skv_weight Vw = {.type = SKV_F32, .rows = d, .cols = nk, .data = Vt};
        memset(mx, 0, (size_t)z->nth * clen * sizeof(float));
        for (int u = 0; u < g; u++) {
            const size_t h = (size_t)j * g + u;
            for (int t = 0; t < T; t++)
                for (int e = 0; e < d; e++) Qh[(size_t)t * d + e] = q[((size_t)t * H + h) * d + e] * scale;
            skv_matmul(P, Qh, &Kw, T);   /* (T, nk) scaled logits */
            #pragma omp parallel for schedule(static) num_threads(z->nth)
            for (int t = 0; t < T; t++)
                row_probs(P + (size_t)t * nk, nc + r0 + t + 1, nk, nc, pos, sub, z->start,
                          mx + (size_t)omp_get_thread_num() * clen);
            skv_matmul(Oh, P, &Vw, T);   /* (T, d) */
            for (int t = 0; t < T; t++) memcpy(out + ((size_t)t * H + h) * d, Oh + (size_t)t * d, (size_t)d * sizeof(float));
        }
        float *sc = z->s->score.s[ln] + z->start;
        for (int th = 0; th < z->nth; th++)
            for (int i = 0; i < clen; i++) if (mx[(size_t)th * clen + i] > sc[i]) sc[i] = mx[(size_t)th * clen + i];
    }
    free(K); free(V); free(Vt); free(pos); free(sub); free(Qh); free(Oh); free(P); free(mx);
    return rc;
}

/* Bytes of a skv_state's activations for T rows that the pass uses (forward.c state_new);
 * not its (T, vocab) logits rows, allocated but never written (SKV_LOGITS_NONE), so never
 * resident. */
static size_t state_bytes(const skv_config *c, int T) {
    const size_t C = c->dim, Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim,
                 F = c->ffn_dim;
    return (size_t)T * ((C + (C > Q ? C : Q) + 2 * Q + 2 * KV + 2 * F) * sizeof(float) + sizeof(int));
}

int skv_kvzip_pass(skv_policy *p, const skv_prefill_info *pi, const int *ids, int begin) {
    skv_kvzip_state *s = p->st;
    const skv_kvzip_opts *o = p->opts;
    const skv_config *cf = &s->m->cfg;
    const int n = pi->n, L = cf->n_layer, Hkv = cf->n_kv_head, d = cf->head_dim;
    if (begin >= n) return 0;
    if (pi->n0 != 0) return skv_error("kvzip: the scoring pass runs over a first prefill only");
    if (!ids) return skv_error("kvzip: the prefill's token ids are needed to reconstruct the context");
    const int pmax = s->n_prompt[0] > s->n_prompt[1] + o->tail ? s->n_prompt[0] : s->n_prompt[1] + o->tail;
    const int Rmax = pmax + s->n_suffix + (o->chunk < n - begin ? o->chunk : n - begin);
    const double t0 = skv_now();
    int rc = -1;
    skv_state *fw = skv_state_new_nocache(s->m, n + Rmax, s->T_max, s->kv_f16);
    const size_t rbytes = (size_t)L * Rmax * Hkv * d * sizeof(float);
    float *rk = skv_malloc(rbytes + 1, "kvzip reconstruction keys");
    float *rv = skv_malloc(rbytes + 1, "kvzip reconstruction values");
    int *toks = skv_malloc((size_t)Rmax * sizeof(int), "kvzip reconstruction input");
    kz_pass z = {.s = s, .c = pi->cache, .H = cf->n_head, .Hkv = Hkv, .d = d, .n = n,
                 .sink_end = o->sinks, .rk = rk, .rv = rv, .nth = omp_get_max_threads()};
    if (z.nth < 1) z.nth = 1;
    if (!fw || !rk || !rv || !toks) goto done;
    for (int start = begin, ci = 0; start < n; start += o->chunk, ci++) {
        const int end = start + o->chunk < n ? start + o->chunk : n;
        int R = 0;
        const int which = ci ? 1 : 0;
        memcpy(toks, s->prompt[which], (size_t)s->n_prompt[which] * sizeof(int));
        R += s->n_prompt[which];
        if (ci) {   /* the previous chunk's last tokens */
            const int tl = o->tail < o->chunk ? o->tail : o->chunk;
            memcpy(toks + R, ids + (start - tl), (size_t)tl * sizeof(int));
            R += tl;
        }
        memcpy(toks + R, s->suffix, (size_t)s->n_suffix * sizeof(int));
        R += s->n_suffix;
        memcpy(toks + R, ids + start, (size_t)(end - start) * sizeof(int));
        R += end - start;
        z.start = start; z.end = end; z.R = R;
        if (z.sink_end > start) z.sink_end = start;
        fw->n_past = n;
        skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .attn = kz_attn, .attn_ctx = &z};
        for (int t = 0; t < R;) {
            const int b = R - t < fw->T_max ? R - t : fw->T_max;
            if (skv_forward(fw, toks + t, b, &fo)) goto done;
            t += b;
        }
        s->pass_tokens += R;
    }
    rc = 0;
done:
    if (rc) skv_error_prefix("kvzip scoring pass");
    {
        const size_t peak = (fw ? state_bytes(cf, fw->T_max) : 0) + 2 * rbytes + (size_t)Rmax * sizeof(int) +
                            z.scratch_peak;
        if (peak > s->pass_peak) s->pass_peak = peak;
    }
    skv_state_free(fw);
    free(rk); free(rv); free(toks);
    s->pass_seconds += skv_now() - t0;
    return rc;
}
