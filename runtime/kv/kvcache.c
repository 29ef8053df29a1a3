/* kvcache.c: hot/cold tier storage of the compressed KV cache (see kvcache.h). */
#include "kvcache.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

skv_kvcache *skv_kvcache_new(int L, int Hkv, int d, bool f16) {
    if (L < 1 || Hkv < 1 || d < 1 || L > (1 << 16) || Hkv > (1 << 16) || d > (1 << 16)) {
        skv_error("skv_kvcache_new: bad shape (L %d, Hkv %d, d %d)", L, Hkv, d);
        return NULL;
    }
    skv_kvcache *c = skv_calloc(1, sizeof *c, "kv cache");
    if (!c) return NULL;
    c->L = L; c->Hkv = Hkv; c->d = d; c->f16 = f16; c->esz = f16 ? 2 : 4;
    size_t nl = (size_t)L * Hkv;
    c->hk = skv_calloc(L, sizeof(void *), "kv cache tables");
    c->hv = skv_calloc(L, sizeof(void *), "kv cache tables");
    c->hm = skv_calloc(L, sizeof(void *), "kv cache tables");
    c->pos_kv = skv_calloc(L, sizeof(int *), "kv cache tables");
    c->pos_v = skv_calloc(L, sizeof(int *), "kv cache tables");
    c->mult = skv_calloc(L, sizeof(int *), "kv cache tables");
    c->ck = skv_calloc(L, sizeof(void *), "kv cache tables");
    c->cv = skv_calloc(L, sizeof(void *), "kv cache tables");
    c->off_kv = skv_calloc(nl, sizeof(int), "kv cache tables");
    c->off_v = skv_calloc(nl, sizeof(int), "kv cache tables");
    c->cap_kv = skv_calloc(nl, sizeof(int), "kv cache tables");
    c->cap_v = skv_calloc(nl, sizeof(int), "kv cache tables");
    c->n_kv = skv_calloc(nl, sizeof(int), "kv cache tables");
    c->n_v = skv_calloc(nl, sizeof(int), "kv cache tables");
    if (!c->hk || !c->hv || !c->hm || !c->mult || !c->pos_kv || !c->pos_v || !c->ck || !c->cv || !c->off_kv ||
        !c->off_v || !c->cap_kv || !c->cap_v || !c->n_kv || !c->n_v) {
        skv_kvcache_free(c);
        return NULL;
    }
    return c;
}

static void seg_unref(skv_coldseg *g) {
    while (g && --g->refs == 0) {
        skv_coldseg *p = g->parent;
        for (int l = 0; l < g->L; l++) { free(g->ck[l]); free(g->cv[l]); }
        free(g->ck); free(g->cv); free(g);
        g = p;
    }
}

void skv_kvcache_free(skv_kvcache *c) {
    if (!c) return;
    for (int l = 0; l < c->L; l++) {
        if (c->hk) free(c->hk[l]);
        if (c->hv) free(c->hv[l]);
        if (c->hm) free(c->hm[l]);
        if (c->pos_kv) free(c->pos_kv[l]);
        if (c->pos_v) free(c->pos_v[l]);
        if (c->mult) free(c->mult[l]);
        if (c->ck) free(c->ck[l]);
        if (c->cv) free(c->cv[l]);
    }
    seg_unref(c->shared);
    free(c->hk); free(c->hv); free(c->hm); free(c->pos_kv); free(c->pos_v); free(c->mult); free(c->ck); free(c->cv);
    free(c->off_kv); free(c->off_v); free(c->cap_kv); free(c->cap_v); free(c->n_kv); free(c->n_v);
    free(c->mark);
    skv_kvlog_disable(c);
    free(c);
}

/* ---------------------------------------------------------------- slot-write log */

int skv_kvlog_enable(skv_kvcache *c) {
    if (c->log) { c->log->n = 0; c->log->lost = true; return 0; }
    c->log = skv_calloc(1, sizeof *c->log, "kv cache log");
    if (!c->log) return -1;
    c->log->lost = true;
    return 0;
}

void skv_kvlog_disable(skv_kvcache *c) {
    if (!c->log) return;
    free(c->log->ops);
    free(c->log);
    c->log = NULL;
}

static void log_op(skv_kvcache *c, int layer, int kind, int slot) {
    skv_kvlog *g = c->log;
    if (!g || g->lost) return;   /* lost: everything is taken anyway */
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 1024;
        skv_kvop *o = cap > g->cap ? realloc(g->ops, (size_t)cap * sizeof *o) : NULL;
        if (!o) { g->lost = true; return; }
        g->ops = o;
        g->cap = cap;
    }
    g->ops[g->n++] = (skv_kvop){.layer = layer, .kind = kind, .slot = slot};
}

void skv_kvlog_lane(skv_kvcache *c, int layer, int kvh) {
    if (!c->log) return;
    const int ln = skv_lane(c, layer, kvh);
    for (int s = 0; s < c->n_kv[ln]; s++) log_op(c, layer, SKV_KVOP_KV, c->off_kv[ln] + s);
}

static size_t layer_slots(const skv_kvcache *c, int layer, const int *cap) {
    size_t n = 0;
    for (int j = 0; j < c->Hkv; j++) n += (size_t)cap[layer * c->Hkv + j];
    return n;
}

static void *dup_block(const void *src, size_t n, bool *ok) {
    if (!*ok || !src) return NULL;
    void *p = skv_aligned_alloc(n, "kv cache copy");
    if (!p) { *ok = false; return NULL; }
    memcpy(p, src, n);
    return p;
}

/* Turn the own cold buffer into a shared segment (on top of the existing chain). */
static int cold_share(skv_kvcache *c) {
    if (c->cold_n <= c->cold_base && c->cold_cap == 0) return 0;
    if (c->cold_n <= c->cold_base) {                /* empty own buffer: just drop it */
        for (int l = 0; l < c->L; l++) { free(c->ck[l]); free(c->cv[l]); c->ck[l] = c->cv[l] = NULL; }
        c->cold_cap = 0;
        return 0;
    }
    skv_coldseg *g = skv_calloc(1, sizeof *g, "shared cold segment");
    void **k = skv_calloc((size_t)c->L, sizeof(void *), "shared cold segment");
    void **v = skv_calloc((size_t)c->L, sizeof(void *), "shared cold segment");
    if (!g || !k || !v) { free(g); free(k); free(v); return -1; }
    g->refs = 1; g->parent = c->shared; g->L = c->L;
    g->start = c->cold_base; g->n = c->cold_n - c->cold_base; g->cap = c->cold_cap;
    g->bytes = (size_t)c->L * c->Hkv * (size_t)g->n * 2 * c->d * c->esz;
    for (int l = 0; l < c->L; l++) { k[l] = c->ck[l]; v[l] = c->cv[l]; c->ck[l] = c->cv[l] = NULL; }
    g->ck = k; g->cv = v;
    c->shared = g;
    c->cold_base = c->cold_n;
    c->cold_cap = 0;
    return 0;
}

skv_kvcache *skv_kvcache_clone(skv_kvcache *c) {
    if (cold_share(c)) return NULL;
    skv_kvcache *o = skv_kvcache_new(c->L, c->Hkv, c->d, c->f16);
    if (!o) return NULL;
    size_t nl = (size_t)c->L * c->Hkv, row = (size_t)c->d * c->esz;
    memcpy(o->off_kv, c->off_kv, nl * sizeof(int));
    memcpy(o->off_v, c->off_v, nl * sizeof(int));
    memcpy(o->cap_kv, c->cap_kv, nl * sizeof(int));
    memcpy(o->cap_v, c->cap_v, nl * sizeof(int));
    memcpy(o->n_kv, c->n_kv, nl * sizeof(int));
    memcpy(o->n_v, c->n_v, nl * sizeof(int));
    o->cold_base = c->cold_base; o->cold_n = c->cold_n; o->no_headroom = c->no_headroom;
    o->n_tok = c->n_tok; o->settled = c->settled; o->restores = c->restores;
    o->shared = c->shared;
    if (o->shared) o->shared->refs++;
    bool ok = true;
    for (int l = 0; l < c->L; l++) {
        size_t skv = layer_slots(c, l, c->cap_kv), sv = layer_slots(c, l, c->cap_v);
        o->hk[l] = dup_block(c->hk[l], skv * row, &ok);
        o->hv[l] = dup_block(c->hv[l], skv * row, &ok);
        o->pos_kv[l] = dup_block(c->pos_kv[l], skv * sizeof(int), &ok);
        o->mult[l] = dup_block(c->mult[l], skv * sizeof(int), &ok);
        o->hm[l] = dup_block(c->hm[l], sv * row, &ok);
        o->pos_v[l] = dup_block(c->pos_v[l], sv * sizeof(int), &ok);
    }
    if (!ok) { skv_kvcache_free(o); return NULL; }
    return o;
}

/* ---------------------------------------------------------------- cold tier */

/* New per-layer K and V tables of the cold tier, `bytes` each; -1 (nothing kept) when out
 * of memory. */
static int cold_tables(int L, size_t bytes, void ***k, void ***v) {
    void **nk = skv_calloc(L, sizeof(void *), "cold tier table");
    void **nv = skv_calloc(L, sizeof(void *), "cold tier table");
    bool ok = nk && nv;
    for (int l = 0; ok && l < L; l++) {
        nk[l] = skv_aligned_alloc(bytes, "cold tier (K)");
        nv[l] = skv_aligned_alloc(bytes, "cold tier (V)");
        ok = nk[l] && nv[l];
    }
    if (!ok) {
        for (int l = 0; nk && nv && l < L; l++) { free(nk[l]); free(nv[l]); }
        free(nk); free(nv);
        return -1;
    }
    *k = nk;
    *v = nv;
    return 0;
}

int skv_kvcache_cold_reserve(skv_kvcache *c, int n) {
    if (n < 0) return skv_error("skv_kvcache_cold_reserve: negative size %d", n);
    if (n > c->n_tok) { /* nothing: n_tok grows with the writes */ }
    n -= c->cold_base;
    if (n <= c->cold_cap) return 0;
    int cap = c->cold_cap ? c->cold_cap : 64;
    while (cap < n) cap = cap > (1 << 29) ? n : cap * 2;
    size_t row = (size_t)c->d * c->esz, bytes;
    if (!skv_mul_ok((size_t)c->Hkv * (size_t)cap, row, &bytes))
        return skv_error("skv_kvcache_cold_reserve: %d tokens overflow", n);
    void **nk, **nv;
    if (cold_tables(c->L, bytes, &nk, &nv) != 0)
        return skv_error_prefix("skv_kvcache_cold_reserve (%d tokens)", n + c->cold_base);
    /* (Hkv, old_cap, d) -> (Hkv, cap, d) */
    const int own = c->cold_n - c->cold_base;
    for (int l = 0; l < c->L; l++) {
        for (int j = 0; j < c->Hkv && own > 0; j++) {
            memcpy((char *)nk[l] + (size_t)j * cap * row, (char *)c->ck[l] + (size_t)j * c->cold_cap * row,
                   (size_t)own * row);
            memcpy((char *)nv[l] + (size_t)j * cap * row, (char *)c->cv[l] + (size_t)j * c->cold_cap * row,
                   (size_t)own * row);
        }
        free(c->ck[l]); free(c->cv[l]);
    }
    free(c->ck); free(c->cv);
    c->ck = nk; c->cv = nv; c->cold_cap = cap;
    return 0;
}

void skv_kvcache_cold_release(skv_kvcache *c) {
    for (int l = 0; l < c->L; l++) { free(c->ck[l]); free(c->cv[l]); c->ck[l] = c->cv[l] = NULL; }
    seg_unref(c->shared);
    c->shared = NULL;
    c->cold_cap = 0;
    c->cold_base = c->cold_n = c->n_tok;
}

int skv_kvcache_cold_flatten(skv_kvcache *c) {
    if (c->cold_base == 0) return 0;
    if (!c->shared) return skv_error("skv_kvcache_cold_flatten: positions < %d are not in the cold tier", c->cold_base);
    const int n = c->cold_n, Hkv = c->Hkv;
    const size_t row = (size_t)c->d * c->esz;
    int cap = 64;
    while (cap < n) cap *= 2;
    size_t bytes;
    if (!skv_mul_ok((size_t)Hkv * (size_t)cap, row, &bytes)) return skv_error("skv_kvcache_cold_flatten: size overflows");
    void **nk, **nv;
    if (cold_tables(c->L, bytes, &nk, &nv) != 0) return skv_error_prefix("skv_kvcache_cold_flatten (%d tokens)", n);
    for (int l = 0; l < c->L; l++)
        for (int j = 0; j < Hkv; j++)
            for (int p = 0; p < n; p++) {
                memcpy((char *)nk[l] + ((size_t)j * cap + p) * row, skv_kvcache_cold_k(c, l, j, p), row);
                memcpy((char *)nv[l] + ((size_t)j * cap + p) * row, skv_kvcache_cold_v(c, l, j, p), row);
            }
    for (int l = 0; l < c->L; l++) { free(c->ck[l]); free(c->cv[l]); }
    free(c->ck); free(c->cv);
    seg_unref(c->shared);
    c->shared = NULL;
    c->ck = nk; c->cv = nv; c->cold_cap = cap; c->cold_base = 0;
    return 0;
}

size_t skv_kvcache_cold_unique(const skv_kvcache *const *cs, int n) {
    /* own buffers are private; shared segments are counted once (by address) */
    size_t total = 0;
    const skv_coldseg *seen[256];
    int ns = 0;
    for (int i = 0; i < n; i++) {
        const skv_kvcache *c = cs[i];
        total += (size_t)c->L * c->Hkv * (size_t)(c->cold_n - c->cold_base) * 2 * c->d * c->esz;
        for (const skv_coldseg *g = c->shared; g; g = g->parent) {
            bool dup = false;
            for (int k = 0; k < ns && !dup; k++) dup = seen[k] == g;
            if (dup) continue;
            if (ns < 256) seen[ns++] = g;
            total += g->bytes;
        }
    }
    return total;
}

void skv_kvcache_set_fresh(skv_kvcache *c, int layer, int pos0, int T, const float *k, const float *v) {
    c->fk = k; c->fv = v; c->f_layer = layer; c->f_pos0 = pos0; c->f_T = T;
    if (pos0 + T > c->n_tok) c->n_tok = pos0 + T;
}

const float *skv_kvcache_fresh_k(const skv_kvcache *c, int layer, int kvh, int pos) {
    if (!c->fk || layer != c->f_layer || pos < c->f_pos0 || pos >= c->f_pos0 + c->f_T) return NULL;
    return c->fk + ((size_t)(pos - c->f_pos0) * c->Hkv + kvh) * c->d;
}
const float *skv_kvcache_fresh_v(const skv_kvcache *c, int layer, int kvh, int pos) {
    if (!c->fv || layer != c->f_layer || pos < c->f_pos0 || pos >= c->f_pos0 + c->f_T) return NULL;
    return c->fv + ((size_t)(pos - c->f_pos0) * c->Hkv + kvh) * c->d;
}

void skv_kv_store_row(void *dst, const float *src, int d, bool f16) {
    if (f16) {
        uint16_t *o = dst;
        for (int i = 0; i < d; i++) o[i] = skv_f32_to_f16(src[i]);
    } else {
        memcpy(dst, src, (size_t)d * sizeof(float));
    }
}

void skv_kv_load_row(float *dst, const void *src, int d, bool f16) {
    if (f16) {
        const uint16_t *s = src;
        for (int i = 0; i < d; i++) dst[i] = skv_f16_to_f32(s[i]);
    } else {
        memcpy(dst, src, (size_t)d * sizeof(float));
    }
}

int skv_kvcache_cold_write(skv_kvcache *c, int layer, int pos0, int T, const float *k, const float *v) {
    if (layer < 0 || layer >= c->L || pos0 < c->cold_base || T < 0 || pos0 + T - c->cold_base > c->cold_cap)
        return skv_error("skv_kvcache_cold_write: layer %d, tokens %d..%d outside the cold tier (positions %d..%d)",
                         layer, pos0, pos0 + T, c->cold_base, c->cold_base + c->cold_cap);
    const int Hkv = c->Hkv, d = c->d;
    const size_t row = (size_t)d * c->esz;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < Hkv; j++) {
            size_t off = ((size_t)j * c->cold_cap + pos0 - c->cold_base + t) * row;
            skv_kv_store_row((char *)c->ck[layer] + off, k + ((size_t)t * Hkv + j) * d, d, c->f16);
            skv_kv_store_row((char *)c->cv[layer] + off, v + ((size_t)t * Hkv + j) * d, d, c->f16);
        }
    if (pos0 + T > c->cold_n) c->cold_n = pos0 + T;
    if (c->cold_n > c->n_tok) c->n_tok = c->cold_n;
    return 0;
}

static const void *cold_row(const skv_kvcache *c, bool v, int layer, int kvh, int pos) {
    if (pos < 0 || pos >= c->cold_n) return NULL;
    const size_t row = (size_t)c->d * c->esz;
    if (pos >= c->cold_base)
        return (const char *)(v ? c->cv : c->ck)[layer] + ((size_t)kvh * c->cold_cap + pos - c->cold_base) * row;
    for (const skv_coldseg *g = c->shared; g; g = g->parent)
        if (pos >= g->start)
            return pos < g->start + g->n
                       ? (const char *)(v ? g->cv : g->ck)[layer] + ((size_t)kvh * g->cap + pos - g->start) * row
                       : NULL;
    return NULL;
}
const void *skv_kvcache_cold_k(const skv_kvcache *c, int layer, int kvh, int pos) { return cold_row(c, false, layer, kvh, pos); }
const void *skv_kvcache_cold_v(const skv_kvcache *c, int layer, int kvh, int pos) { return cold_row(c, true, layer, kvh, pos); }

/* ---------------------------------------------------------------- hot tier */

void *skv_kvcache_hot_k(const skv_kvcache *c, int layer, int kvh) {
    return (char *)c->hk[layer] + (size_t)c->off_kv[skv_lane(c, layer, kvh)] * c->d * c->esz;
}
void *skv_kvcache_hot_v(const skv_kvcache *c, int layer, int kvh) {
    return (char *)c->hv[layer] + (size_t)c->off_kv[skv_lane(c, layer, kvh)] * c->d * c->esz;
}
void *skv_kvcache_hot_m(const skv_kvcache *c, int layer, int kvh) {
    return (char *)c->hm[layer] + (size_t)c->off_v[skv_lane(c, layer, kvh)] * c->d * c->esz;
}
int *skv_kvcache_hot_pos_kv(const skv_kvcache *c, int layer, int kvh) {
    return c->pos_kv[layer] + c->off_kv[skv_lane(c, layer, kvh)];
}
int *skv_kvcache_hot_pos_v(const skv_kvcache *c, int layer, int kvh) {
    return c->pos_v[layer] + c->off_v[skv_lane(c, layer, kvh)];
}
int *skv_kvcache_hot_mult(const skv_kvcache *c, int layer, int kvh) {
    return c->mult[layer] + c->off_kv[skv_lane(c, layer, kvh)];
}
bool skv_kvcache_layer_merged(const skv_kvcache *c, int layer) {
    for (int j = 0; j < c->Hkv; j++) {
        const int *m = skv_kvcache_hot_mult(c, layer, j);
        for (int s = 0; s < c->n_kv[layer * c->Hkv + j]; s++) if (m[s] != 1) return true;
    }
    return false;
}

static int grow_to(const skv_kvcache *c, int have, int need) {
    if (need <= have) return have;
    if (c->no_headroom) return need;
    int g = need + need / 8 + 8;
    return g < need ? need : g;
}

/* Relayout one region (KV or V-only) of a layer with new per-lane capacities. */
static int relayout(skv_kvcache *c, int layer, bool kv, const int *newcap) {
    const int Hkv = c->Hkv;
    const size_t row = (size_t)c->d * c->esz;
    int *cap = kv ? c->cap_kv : c->cap_v, *off = kv ? c->off_kv : c->off_v, *n = kv ? c->n_kv : c->n_v;
    size_t total = 0;
    for (int j = 0; j < Hkv; j++) total += (size_t)newcap[j];
    size_t bytes;
    if (!skv_mul_ok(total, row, &bytes)) return skv_error("skv_kvcache_hot_reserve: size overflows");
    void *a = skv_aligned_alloc(bytes, "hot tier");
    void *b = kv ? skv_aligned_alloc(bytes, "hot tier") : NULL;
    int *p = skv_malloc((total ? total : 1) * sizeof(int), "hot tier positions");
    int *mu = kv ? skv_malloc((total ? total : 1) * sizeof(int), "hot tier multiplicities") : NULL;
    if (!a || (kv && (!b || !mu)) || !p) { free(a); free(b); free(p); free(mu); return -1; }
    int *oldm = kv ? c->mult[layer] : NULL;
    void *olda = kv ? c->hk[layer] : c->hm[layer], *oldb = kv ? c->hv[layer] : NULL;
    int *oldp = kv ? c->pos_kv[layer] : c->pos_v[layer];
    size_t o = 0;
    for (int j = 0; j < Hkv; j++) {
        int ln = layer * Hkv + j;
        if (n[ln] > 0) {
            memcpy((char *)a + o * row, (char *)olda + (size_t)off[ln] * row, (size_t)n[ln] * row);
            if (kv) memcpy((char *)b + o * row, (char *)oldb + (size_t)off[ln] * row, (size_t)n[ln] * row);
            memcpy(p + o, oldp + off[ln], (size_t)n[ln] * sizeof(int));
            if (kv) memcpy(mu + o, oldm + off[ln], (size_t)n[ln] * sizeof(int));
        }
        off[ln] = (int)o;
        cap[ln] = newcap[j];
        o += (size_t)newcap[j];
    }
    free(olda); free(oldb); free(oldp); free(oldm);
    if (kv) { c->hk[layer] = a; c->hv[layer] = b; c->pos_kv[layer] = p; c->mult[layer] = mu; }
    else { c->hm[layer] = a; c->pos_v[layer] = p; }
    log_op(c, layer, kv ? SKV_KVOP_RELAYOUT_KV : SKV_KVOP_RELAYOUT_V, -1);
    return 0;
}

int skv_kvcache_hot_reserve(skv_kvcache *c, int layer, const int *need_kv, const int *need_v) {
    const int Hkv = c->Hkv;
    int nk[256], nv[256];
    int *newk = Hkv <= 256 ? nk : skv_malloc((size_t)Hkv * sizeof(int), "reserve");
    int *newv = Hkv <= 256 ? nv : skv_malloc((size_t)Hkv * sizeof(int), "reserve");
    int rc = -1;
    if (!newk || !newv) goto done;
    bool gk = false, gv = false;
    for (int j = 0; j < Hkv; j++) {
        int ln = layer * Hkv + j;
        if (need_kv[j] < 0 || (need_v && need_v[j] < 0)) { skv_error("skv_kvcache_hot_reserve: negative size"); goto done; }
        newk[j] = grow_to(c, c->cap_kv[ln], need_kv[j]);
        newv[j] = grow_to(c, c->cap_v[ln], need_v ? need_v[j] : 0);
        gk |= newk[j] != c->cap_kv[ln];
        gv |= newv[j] != c->cap_v[ln];
    }
    if (gk && relayout(c, layer, true, newk)) goto done;
    if (gv && relayout(c, layer, false, newv)) goto done;
    rc = 0;
done:
    if (newk != nk) free(newk);
    if (newv != nv) free(newv);
    return rc;
}

static int *marks(skv_kvcache *c) {
    if (c->mark_cap < c->n_tok) {
        int cap = c->n_tok + c->n_tok / 4 + 64;
        int *m = skv_calloc((size_t)cap, sizeof(int), "kv cache marks");
        if (!m) return NULL;
        free(c->mark);
        c->mark = m; c->mark_cap = cap; c->stamp = 0;
    }
    if (c->stamp > (1 << 29)) { memset(c->mark, 0, (size_t)c->mark_cap * sizeof(int)); c->stamp = 0; }
    return c->mark;
}

/* Load one row of a position into dst (storage format): cold first, then fresh. */
static int load_row(const skv_kvcache *c, bool v, int layer, int kvh, int pos, void *dst) {
    const void *r = cold_row(c, v, layer, kvh, pos);
    if (r) { memcpy(dst, r, (size_t)c->d * c->esz); return 0; }
    const float *f = v ? skv_kvcache_fresh_v(c, layer, kvh, pos) : skv_kvcache_fresh_k(c, layer, kvh, pos);
    if (f) { skv_kv_store_row(dst, f, c->d, c->f16); return 0; }
    return skv_error("skv_kvcache: position %d of lane %d/%d is neither hot nor in the cold tier (evicted permanently)",
                     pos, layer, kvh);
}

int skv_kvcache_apply(skv_kvcache *c, int layer, int kvh, const int *kv_pos, int n_kv,
                      const int *v_pos, int n_v) {
    const int ln = skv_lane(c, layer, kvh);
    if (n_kv > c->cap_kv[ln] || n_v > c->cap_v[ln])
        return skv_error("skv_kvcache_apply: lane %d/%d wants %d+%d slots, capacity %d+%d", layer, kvh,
                         n_kv, n_v, c->cap_kv[ln], c->cap_v[ln]);
    if (c->n_tok < c->cold_n) c->n_tok = c->cold_n;
    int *m = marks(c);
    if (!m) return -1;
    /* stamps: base+1 wanted as KV, base+2 wanted as V, base+3 present (done) */
    const int base = c->stamp;
    c->stamp += 4;
    for (int i = 0; i < n_kv; i++) {
        int p = kv_pos[i];
        if (p < 0 || p >= c->n_tok || m[p] > base)
            return skv_error("skv_kvcache_apply: bad or repeated position %d (sequence has %d)", p, c->n_tok);
        m[p] = base + 1;
    }
    for (int i = 0; i < n_v; i++) {
        int p = v_pos[i];
        if (p < 0 || p >= c->n_tok || m[p] > base)
            return skv_error("skv_kvcache_apply: bad or repeated position %d (sequence has %d)", p, c->n_tok);
        m[p] = base + 2;
    }
    const size_t row = (size_t)c->d * c->esz;
    int loaded = 0;
    char *K = skv_kvcache_hot_k(c, layer, kvh), *V = skv_kvcache_hot_v(c, layer, kvh);
    int *P = skv_kvcache_hot_pos_kv(c, layer, kvh), *MU = skv_kvcache_hot_mult(c, layer, kvh);
    char *M = skv_kvcache_hot_m(c, layer, kvh);
    int *PV = skv_kvcache_hot_pos_v(c, layer, kvh);
    /* 1. V-only region: keep the wanted V-only slots, free the others */
    int nv = c->n_v[ln];
    for (int s = 0; s < nv;) {
        if (m[PV[s]] == base + 2) { m[PV[s]] = base + 3; s++; continue; }
        nv--;
        if (s != nv) {
            memcpy(M + (size_t)s * row, M + (size_t)nv * row, row); PV[s] = PV[nv];
            log_op(c, layer, SKV_KVOP_V, c->off_v[ln] + s);
        }
    }
    /* 2. KV region: keep the wanted K+V slots; a slot wanted as V only moves its V over
     *    (nv stays <= n_v <= cap_v: only wanted V positions are added) */
    int n = c->n_kv[ln];
    for (int s = 0; s < n;) {
        if (m[P[s]] == base + 1) { m[P[s]] = base + 3; s++; continue; }
        if (m[P[s]] == base + 2 && MU[s] == 1) {
            memcpy(M + (size_t)nv * row, V + (size_t)s * row, row);
            log_op(c, layer, SKV_KVOP_V, c->off_v[ln] + nv);
            PV[nv++] = P[s];
            m[P[s]] = base + 3;
        }
        n--;
        if (s != n) {
            memcpy(K + (size_t)s * row, K + (size_t)n * row, row);
            memcpy(V + (size_t)s * row, V + (size_t)n * row, row);
            P[s] = P[n]; MU[s] = MU[n];
            log_op(c, layer, SKV_KVOP_KV, c->off_kv[ln] + s);
        }
    }
    /* 3. load the missing K+V rows, then the missing V-only rows */
    int rc = 0;
    for (int i = 0; i < n_kv; i++) {
        int p = kv_pos[i];
        if (m[p] != base + 1) continue;
        if (load_row(c, false, layer, kvh, p, K + (size_t)n * row) ||
            load_row(c, true, layer, kvh, p, V + (size_t)n * row)) { rc = -1; break; }
        log_op(c, layer, SKV_KVOP_KV, c->off_kv[ln] + n);
        P[n] = p; MU[n] = 1; n++;
        m[p] = base + 3;
        loaded++;
        if (p < c->settled) c->restores++;
    }
    for (int i = 0; rc == 0 && i < n_v; i++) {
        int p = v_pos[i];
        if (m[p] != base + 2) continue;
        if (load_row(c, true, layer, kvh, p, M + (size_t)nv * row)) { rc = -1; break; }
        log_op(c, layer, SKV_KVOP_V, c->off_v[ln] + nv);
        PV[nv++] = p;
        m[p] = base + 3;
        loaded++;
        if (p < c->settled) c->restores++;
    }
    c->n_kv[ln] = n;
    c->n_v[ln] = nv;
    return rc ? -1 : loaded;
}

int skv_kvcache_hot_append(skv_kvcache *c, int layer, int kvh, int pos) {
    const int ln = skv_lane(c, layer, kvh);
    if (c->n_kv[ln] >= c->cap_kv[ln] || pos < 0)
        return skv_error("skv_kvcache_hot_append: lane %d/%d full or bad position %d", layer, kvh, pos);
    const size_t row = (size_t)c->d * c->esz;
    int s = c->n_kv[ln];
    if (load_row(c, false, layer, kvh, pos, (char *)skv_kvcache_hot_k(c, layer, kvh) + (size_t)s * row) ||
        load_row(c, true, layer, kvh, pos, (char *)skv_kvcache_hot_v(c, layer, kvh) + (size_t)s * row))
        return -1;
    skv_kvcache_hot_pos_kv(c, layer, kvh)[s] = pos;
    skv_kvcache_hot_mult(c, layer, kvh)[s] = 1;
    log_op(c, layer, SKV_KVOP_KV, c->off_kv[ln] + s);
    c->n_kv[ln]++;
    return 0;
}

void skv_kvcache_bytes(const skv_kvcache *c, skv_kv_bytes *b) {
    memset(b, 0, sizeof *b);
    const size_t row = (size_t)c->d * c->esz;
    for (int ln = 0; ln < c->L * c->Hkv; ln++) {
        b->hot_used += (2 * (size_t)c->n_kv[ln] + (size_t)c->n_v[ln]) * row;
        b->hot_cap += (2 * (size_t)c->cap_kv[ln] + (size_t)c->cap_v[ln]) * row;
        b->hot_tokens += c->n_kv[ln] + 0.5 * c->n_v[ln];
    }
    const size_t per_tok = (size_t)c->L * c->Hkv * 2 * row;
    b->cold_used = per_tok * (size_t)(c->cold_n - c->cold_base);
    b->cold_cap = per_tok * (size_t)c->cold_cap;
    for (const skv_coldseg *g = c->shared; g; g = g->parent) {
        b->cold_used += g->bytes;
        b->cold_cap += per_tok * (size_t)g->cap;
        b->cold_shared += g->bytes;
    }
}

int skv_kvcache_truncate(skv_kvcache *c, int n) {
    if (n < 0 || n > c->n_tok) return skv_error("skv_kvcache_truncate: length %d outside 0..%d", n, c->n_tok);
    const bool released = c->cold_cap == 0 && !c->shared;
    if (!released && c->cold_n > n)
        return skv_error("skv_kvcache_truncate: the cold tier holds positions up to %d (> %d)", c->cold_n, n);
    const int lanes = c->L * c->Hkv;
    for (int ln = 0; ln < lanes; ln++) {
        const int layer = ln / c->Hkv, kvh = ln % c->Hkv;
        const int *P = skv_kvcache_hot_pos_kv(c, layer, kvh), *PV = skv_kvcache_hot_pos_v(c, layer, kvh);
        for (int s = 0; s < c->n_v[ln]; s++)
            if (PV[s] >= n) return skv_error("skv_kvcache_truncate: lane %d/%d keeps position %d as V only", layer, kvh, PV[s]);
        int keep = c->n_kv[ln];
        while (keep > 0 && P[keep - 1] >= n) keep--;
        for (int s = 0; s < keep; s++)
            if (P[s] >= n) return skv_error("skv_kvcache_truncate: lane %d/%d: position %d is not at the end", layer, kvh, P[s]);
    }
    for (int ln = 0; ln < lanes; ln++) {
        const int *P = skv_kvcache_hot_pos_kv(c, ln / c->Hkv, ln % c->Hkv);
        while (c->n_kv[ln] > 0 && P[c->n_kv[ln] - 1] >= n) c->n_kv[ln]--;
    }
    c->n_tok = n;
    if (c->settled > n) c->settled = n;
    if (released) c->cold_base = c->cold_n = n;
    c->fk = c->fv = NULL;
    if (c->log) c->log->lost = true;   /* a mirror takes everything again */
    return 0;
}
