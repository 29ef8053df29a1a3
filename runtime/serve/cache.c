/* cache.c: the session cache. Finished conversations keep their session (compressed KV
 * state) and the tokens appended to it; a request whose prompt extends one of them takes
 * it and prefills only the rest. Shared prefixes (engine.c makes them) stay in the cache:
 * a request that extends one continues a fork of it (smallkv_fork: a copy that continues
 * identically), so every request that starts with that prefix can. Bounded by bytes (each
 * session's KV tiers, SLM cache and history, plus the workspace every session keeps,
 * measured at start), least recently used first out. Used by the engine thread only. */
#include "serve.h"
#include <stdlib.h>
#include <string.h>

struct serve_cache {
    serve_sess **e;
    int n, cap;
    size_t max_bytes, bytes, overhead;
    uint64_t clock;
};

serve_cache *serve_cache_new(size_t max_bytes, size_t overhead) {
    serve_cache *c = calloc(1, sizeof *c);
    if (c) { c->max_bytes = max_bytes; c->overhead = overhead; }
    return c;
}

void serve_sess_free(serve_sess *s) {
    if (!s) return;
    smallkv_session_free(s->s);
    free(s->hist);
    free(s);
}

void serve_cache_free(serve_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) serve_sess_free(c->e[i]);
    free(c->e);
    free(c);
}

size_t serve_sess_bytes(const serve_cache *c, const serve_sess *s) {
    smallkv_stats st;
    smallkv_get_stats(s->s, &st);
    return st.hot_bytes + st.cold_bytes + st.slm_cache_bytes + st.slm_score_bytes + (size_t)s->cap * sizeof(int) + c->overhead;
}

static void remove_at(serve_cache *c, int i) {
    c->bytes -= serve_sess_bytes(c, c->e[i]);
    c->e[i] = c->e[--c->n];
}

serve_sess *serve_sess_fork(const serve_sess *s) {
    serve_sess *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    *f = *s;
    f->shared = false;
    f->cap = s->n > 0 ? s->n : 1;
    f->hist = malloc((size_t)f->cap * sizeof(int));
    f->s = f->hist ? smallkv_fork(s->s) : NULL;
    if (!f->s) { free(f->hist); free(f); return NULL; }
    memcpy(f->hist, s->hist, (size_t)s->n * sizeof(int));
    return f;
}

serve_sess *serve_cache_take(serve_cache *c, const int *ids, int n, const char *policy, double budget, bool *forked) {
    int best = -1;
    *forked = false;
    for (int i = 0; i < c->n; i++) {
        const serve_sess *s = c->e[i];
        /* a conversation must leave a token to prefill; a shared prefix has the logits after
         * its last token, so it may be the whole prompt */
        if (s->n > n || (s->n == n && !s->shared) || s->budget != budget || strcmp(s->policy, policy)) continue;
        if (best >= 0 && s->n <= c->e[best]->n) continue;
        if (memcmp(s->hist, ids, (size_t)s->n * sizeof(int)) == 0) best = i;
    }
    if (best < 0) return NULL;
    serve_sess *s = c->e[best];
    if (s->shared) {   /* it stays for the next request with this prefix */
        s->last_use = ++c->clock;
        serve_sess *f = serve_sess_fork(s);
        *forked = f != NULL;
        return f;
    }
    remove_at(c, best);
    return s;
}

int serve_cache_common(const serve_cache *c, const int *ids, int n, const char *policy, double budget) {
    int best = 0;
    for (int i = 0; i < c->n; i++) {
        const serve_sess *s = c->e[i];
        if (s->budget != budget || strcmp(s->policy, policy)) continue;
        int k = 0;
        const int m = s->n < n ? s->n : n;
        while (k < m && s->hist[k] == ids[k]) k++;
        if (k > best) best = k;
    }
    return best;
}

int serve_cache_put(serve_cache *c, serve_sess *s) {
    size_t b = serve_sess_bytes(c, s);
    int evicted = 0;
    if (b > c->max_bytes) { serve_sess_free(s); return 1; }
    while (c->n > 0 && c->bytes + b > c->max_bytes) {
        int lru = 0;
        for (int i = 1; i < c->n; i++) if (c->e[i]->last_use < c->e[lru]->last_use) lru = i;
        serve_sess *old = c->e[lru];
        remove_at(c, lru);
        serve_sess_free(old);
        evicted++;
    }
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 16;
        serve_sess **ne = realloc(c->e, (size_t)nc * sizeof *ne);
        if (!ne) { serve_sess_free(s); return evicted + 1; }
        c->e = ne;
        c->cap = nc;
    }
    s->last_use = ++c->clock;
    c->e[c->n++] = s;
    c->bytes += b;
    return evicted;
}

void serve_cache_usage(const serve_cache *c, size_t *hot, size_t *cold, size_t *slm, size_t *total, int *n) {
    *hot = *cold = *slm = 0;
    for (int i = 0; i < c->n; i++) {
        smallkv_stats st;
        smallkv_get_stats(c->e[i]->s, &st);
        *hot += st.hot_bytes;
        *cold += st.cold_bytes;
        *slm += st.slm_cache_bytes + st.slm_score_bytes;
    }
    *total = c->bytes;
    *n = c->n;
}
