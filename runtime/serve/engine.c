/* engine.c: the worker thread that owns every session. Requests wait in a bounded queue;
 * up to cfg->batch of them decode together: each new one takes the cached session its
 * prompt extends (or a fork of a shared prefix, or a new one; under policy full, a long
 * prefix it has in common with a cached session becomes a shared prefix first) and
 * prefills the rest, then every round samples one token per sequence and steps them all
 * with one smallkv_step_batch. A sequence ends at a stop token, a stop string, max_tokens,
 * the context's end, its deadline or a cancel (client gone); its session then goes back to
 * the cache. The text it builds is always well-formed UTF-8: a token that ends inside a
 * character waits for the next one to complete it. A request that asks for log
 * probabilities gets one per token (logprobs.c); one in JSON mode samples only tokens the
 * JSON automaton allows (json_constrain.c) and ends when its object closes. */
#include "serve.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    serve_job *j;
    serve_sess *ss;
    unsigned long long rng;
    int *counts;               /* times each token was generated (for the penalties), or NULL */
    serve_json js;             /* JSON mode: the reply so far, read by the automaton */
} active_seq;

struct serve_engine {
    smallkv_pair *p;
    const serve_config *cfg;
    serve_metrics *m;
    serve_cache *cache;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_job *head, *tail;
    int queued;
    bool stop;
    active_seq *act;
    int n_act;
    int vocab;
    serve_cand *scratch;       /* serve_sample's, one vocab */
    unsigned char *allowed;    /* JSON mode's mask, one vocab */
    serve_json_vocab jv;       /* JSON mode's view of the vocabulary (made at the first use) */
};

serve_job *serve_job_new(serve_params *prm, int timeout_s) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->prm = *prm;
    memset(prm, 0, sizeof *prm);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->t_start = serve_mono_s();
    j->deadline = j->t_start + (timeout_s > 0 ? timeout_s : 1e9);
    return j;
}

void serve_job_release(serve_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r > 0) return;
    serve_params_free(&j->prm);
    free(j->text);
    free(j->lp);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void serve_job_cancel(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    pthread_mutex_unlock(&j->mu);
}

int serve_engine_submit(serve_engine *e, serve_job *j) {
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->queued >= e->cfg->queue) {
        int rc = e->stop ? -2 : -1;
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->next = NULL;
    if (e->tail) e->tail->next = j; else e->head = j;
    e->tail = j;
    e->queued++;
    pthread_mutex_lock(&e->m->mu);
    e->m->queue_len = e->queued;
    pthread_mutex_unlock(&e->m->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* end a job: its memory figures, done, wake the HTTP side; the session to the cache */
static void finish(serve_engine *e, active_seq *a, const char *reason, int status, const char *err) {
    serve_job *j = a->j;
    smallkv_stats st = {0};
    if (a->ss) smallkv_get_stats(a->ss->s, &st);
    pthread_mutex_lock(&j->mu);
    j->finish = reason;
    if (err) { snprintf(j->err, sizeof j->err, "%s", err); j->err_status = status; }
    j->hot = st.hot_bytes;
    j->cold = st.cold_bytes;
    j->slm = st.slm_cache_bytes + st.slm_score_bytes;
    j->full = st.full_bytes;
    j->length = st.length;
    j->done = true;
    bool cancelled = j->cancelled;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    int ev = 0;
    if (a->ss) ev = err ? (serve_sess_free(a->ss), 0) : serve_cache_put(e->cache, a->ss);
    pthread_mutex_lock(&e->m->mu);
    e->m->evictions += (unsigned long)ev;
    e->m->completion_tokens += (unsigned long)j->n_out;
    e->m->requests[cancelled ? SR_CANCELLED : err ? (status < 500 ? SR_CLIENT_ERROR : SR_ERROR) : SR_OK]++;
    pthread_mutex_unlock(&e->m->mu);
    a->ss = NULL;
    free(a->counts);
    a->counts = NULL;
    serve_job_release(j);
}

static int hist_push(serve_sess *s, const int *ids, int n) {
    if (s->n + n > s->cap) {
        int nc = s->cap ? s->cap : 256;
        while (nc < s->n + n) nc *= 2;
        int *h = realloc(s->hist, (size_t)nc * sizeof(int));
        if (!h) return -1;
        s->hist = h;
        s->cap = nc;
    }
    memcpy(s->hist + s->n, ids, (size_t)n * sizeof(int));
    s->n += n;
    return 0;
}

/* prefill ids[from, to) and note them in the history; 0 or -1 (the job finished with 500) */
static int prefill(serve_engine *e, active_seq *a, int from, int to) {
    serve_sess *ss = a->ss;
    if (to > from && (smallkv_prefill(ss->s, a->j->prm.ids + from, to - from) || hist_push(ss, a->j->prm.ids + from, to - from))) {
        char msg[256];
        snprintf(msg, sizeof msg, "prefill: %s", smallkv_last_error());
        finish(e, a, NULL, 500, msg);
        return -1;
    }
    return 0;
}

/* A prompt prefix is shared (made a cached session of its own, forked by every request that
 * extends it) only under a policy that keeps every token: there the rest of the prompt
 * attends to every token of the prefix, as in one prefill (its sums run in another order,
 * so the logits may differ by rounding, as in a conversation's next turn). A compressing
 * policy compresses at the end of each prefill: the rest would attend to a compressed
 * prefix where a fresh prefill attends to all of it, so its sessions are reused only where
 * a conversation left off, never split where a conversation did not. */
static bool shares_prefixes(const char *policy) {
    unsigned needs = 0;
    return smallkv_policy_check(policy, &needs) == 0 && (needs & SMALLKV_NO_BUDGET);
}

/* a new sequence: a cached session its prompt extends, or a fresh one; prefill the rest */
static int start(serve_engine *e, active_seq *a) {
    serve_job *j = a->j;
    const serve_params *p = &j->prm;
    bool forked;
    serve_sess *ss = serve_cache_take(e->cache, p->ids, p->n_ids, p->policy, p->budget, &forked);
    int reused = ss ? ss->n : 0;
    if (!ss) {
        smallkv_options o;
        smallkv_options_default(&o);
        o.policy = p->policy;
        o.budget = p->budget;
        o.max_ctx = e->cfg->ctx;
        ss = calloc(1, sizeof *ss);
        if (!ss) { finish(e, a, NULL, 500, "out of memory"); return -1; }
        if (!(ss->s = smallkv_session_new(e->p, &o))) {
            free(ss);
            finish(e, a, NULL, 400, smallkv_last_error());
            return -1;
        }
        snprintf(ss->policy, sizeof ss->policy, "%s", p->policy);
        ss->budget = p->budget;
    }
    a->ss = ss;
    /* a longer prefix in common with a cached session (the same system prompt, examples or
     * document, a reply asked for again): prefill it first and keep a fork of it */
    int at = reused, ev = 0, kept = 0;
    if (e->cfg->share_prefix > 0 && shares_prefixes(p->policy)) {
        const int common = serve_cache_common(e->cache, p->ids, p->n_ids, p->policy, p->budget);
        if (common >= e->cfg->share_prefix && common > reused) {
            if (prefill(e, a, at, common)) return -1;
            at = common;
            serve_sess *snap = serve_sess_fork(ss);
            if (snap) {
                snap->shared = true;
                ev = serve_cache_put(e->cache, snap);
                kept = 1;
            }
        }
    }
    if (prefill(e, a, at, p->n_ids)) return -1;
    a->rng = p->seed ? p->seed : (unsigned long long)(serve_mono_s() * 1e9) | 1;
    if ((p->presence != 0 || p->frequency != 0) && !(a->counts = calloc((size_t)e->vocab, sizeof(int)))) {
        finish(e, a, NULL, 500, "out of memory");
        return -1;
    }
    serve_json_init(&a->js);
    pthread_mutex_lock(&j->mu);
    j->pair = e->p;
    j->reused = reused;
    j->started = true;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&e->m->mu);
    e->m->prompt_tokens += (unsigned long)p->n_ids;
    e->m->reused_tokens += (unsigned long)reused;
    e->m->prefix_forks += forked;
    e->m->prefix_kept += (unsigned long)kept;
    e->m->evictions += (unsigned long)ev;
    pthread_mutex_unlock(&e->m->mu);
    return 0;
}

/* append a token's bytes as well-formed UTF-8 (a character the token leaves cut short
 * waits in pend for the next token; ill-formed bytes become U+FFFD); a stop string ends the
 * text at its start: returns 1 then */
static int add_text(serve_job *j, const char *b, size_t n) {
    const size_t m = j->n_pend + n;
    char small[256];   /* a token's bytes and a held-back partial character fit here */
    char *in = m <= sizeof small ? small : malloc(m + 1);
    if (!in) return 1;
    memcpy(in, j->pend, j->n_pend);
    memcpy(in + j->n_pend, b, n);
    if (j->len + 3 * m + 1 > j->cap) {
        size_t nc = j->cap ? 2 * j->cap : 256;
        while (nc < j->len + 3 * m + 1) nc *= 2;
        char *t = realloc(j->text, nc);
        if (!t) {
            if (in != small) free(in);
            return 1;
        }
        j->text = t;
        j->cap = nc;
    }
    size_t tail;
    const size_t w = serve_utf8_fix(in, m, j->text + j->len, &tail);
    memcpy(j->pend, in + m - tail, tail);
    j->n_pend = tail;
    if (in != small) free(in);
    j->len += w;
    j->text[j->len] = 0;
    for (int i = 0; i < j->prm.n_stop; i++) {
        size_t sl = strlen(j->prm.stop[i]);
        size_t from = j->len >= w + sl ? j->len - w - sl + 1 : 0;   /* only where the new bytes reach */
        char *hit = strstr(j->text + from, j->prm.stop[i]);
        if (hit) { j->len = (size_t)(hit - j->text); j->text[j->len] = 0; return 1; }
    }
    return 0;
}

/* JSON mode's view of the vocabulary, made at its first use: each token's bytes; stop
 * tokens are banned, and so are control tokens (text such as "<|im_start|>" that the
 * tokenizer, reading it as plain text, does not give back as that one token) */
static int json_vocab(serve_engine *e) {
    if (e->jv.bytes) return 0;
    const int V = e->vocab;
    serve_json_vocab v = { V, calloc((size_t)V, sizeof(char *)), calloc((size_t)V, sizeof(size_t)), calloc((size_t)V, 1) };
    if (!e->allowed) e->allowed = malloc((size_t)V);
    if (!v.bytes || !v.len || !v.banned || !e->allowed) {
        free(v.bytes); free(v.len); free(v.banned);
        return -1;
    }
    for (int t = 0; t < V; t++) {
        size_t n = 0;
        const char *b = smallkv_token_bytes(e->p, t, &n);
        v.bytes[t] = b;
        v.len[t] = b ? n : 0;
        if (smallkv_is_stop(e->p, t)) { v.banned[t] = 1; continue; }
        if (b && n >= 3 && n < 64 && b[0] == '<' && b[n - 1] == '>') {
            char text[64];
            int ids[4];
            memcpy(text, b, n);
            text[n] = 0;
            v.banned[t] = smallkv_tokenize(e->p, text, 0, ids, 4) != 1 || ids[0] != t;
        }
    }
    e->jv = v;
    return 0;
}

/* the next token of a sequence from the session's logits; -1 + message in *why */
static int next_token(serve_engine *e, active_seq *a, const float *logits, const char **why) {
    const serve_params *p = &a->j->prm;
    *why = NULL;
    if (!p->json)
        return serve_sampling_plain(p) ? smallkv_sample(a->ss->s, p->temperature, &a->rng)
             : logits ? serve_sample(logits, e->vocab, p, a->counts, e->scratch, &a->rng) : -1;
    if (!logits) return -1;
    if (json_vocab(e)) { *why = "out of memory"; return -1; }
    if (serve_json_mask(&a->js, &e->jv, e->allowed) == 0) { *why = "JSON mode: no token can continue the reply"; return -1; }
    return serve_sample_masked(logits, e->vocab, p, a->counts, e->allowed, e->scratch, &a->rng);
}

/* one round: a token for each sequence, then one batched step for those that go on */
static void round_step(serve_engine *e) {
    smallkv_session *ss[e->n_act > 0 ? e->n_act : 1];
    int tok[e->n_act > 0 ? e->n_act : 1], idx[e->n_act > 0 ? e->n_act : 1], k = 0;
    double t0 = serve_mono_s();
    for (int i = 0; i < e->n_act; i++) {
        active_seq *a = &e->act[i];
        serve_job *j = a->j;
        pthread_mutex_lock(&j->mu);
        bool cancelled = j->cancelled;
        pthread_mutex_unlock(&j->mu);
        if (cancelled) { finish(e, a, "cancelled", 0, NULL); continue; }
        if (t0 > j->deadline) { finish(e, a, NULL, 504, "request timed out"); continue; }
        const float *logits = smallkv_logits(a->ss->s);
        const char *why;
        int t = next_token(e, a, logits, &why);
        if (t < 0) { finish(e, a, NULL, 500, why ? why : smallkv_last_error()); continue; }
        if (smallkv_is_stop(e->p, t)) { finish(e, a, "stop", 0, NULL); continue; }
        if (a->counts) a->counts[t]++;
        serve_lp lp = { 0 };
        const bool want_lp = j->prm.logprobs && logits;
        if (want_lp) serve_logprob(logits, e->vocab, t, j->prm.top_logprobs, &lp);
        size_t n;
        const char *b = smallkv_token_bytes(e->p, t, &n);
        if (!b) n = 0;
        pthread_mutex_lock(&j->mu);
        j->n_out++;
        lp.off = j->len;   /* where this token's text starts */
        int hit = want_lp && serve_logprob_push(j, &lp);
        hit = hit || add_text(j, b ? b : "", n);
        /* a stop string cut the text: the tokens that start after the cut are not in the reply */
        while (hit && j->n_lp > 0 && j->lp[j->n_lp - 1].off >= j->len) j->n_lp--;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        if (hit) { finish(e, a, "stop", 0, NULL); continue; }
        if (j->prm.json && serve_json_feed(&a->js, b ? b : "", n) && serve_json_done(&a->js)) {
            finish(e, a, "stop", 0, NULL);   /* the object has closed */
            continue;
        }
        if (j->n_out >= j->prm.max_tokens || smallkv_length(a->ss->s) + 1 >= e->cfg->ctx) {
            finish(e, a, "length", 0, NULL);
            continue;
        }
        ss[k] = a->ss->s;
        tok[k] = t;
        idx[k++] = i;
    }
    if (k > 0) {
        if (smallkv_step_batch(ss, tok, k)) {
            char msg[256];
            snprintf(msg, sizeof msg, "decode: %s", smallkv_last_error());
            for (int q = 0; q < k; q++) finish(e, &e->act[idx[q]], NULL, 500, msg);
        } else {
            for (int q = 0; q < k; q++) hist_push(e->act[idx[q]].ss, &tok[q], 1);
        }
        double dt = serve_mono_s() - t0;
        pthread_mutex_lock(&e->m->mu);
        double tps = dt > 0 ? k / dt : 0;
        e->m->tokens_per_s = e->m->tokens_per_s > 0 ? 0.8 * e->m->tokens_per_s + 0.2 * tps : tps;
        pthread_mutex_unlock(&e->m->mu);
    }
    /* drop the finished ones (finish() cleared their session) */
    int w = 0;
    for (int i = 0; i < e->n_act; i++)
        if (e->act[i].ss) e->act[w++] = e->act[i];
    e->n_act = w;
}

static void publish(serve_engine *e) {
    size_t hot, cold, slm, total;
    int n;
    serve_cache_usage(e->cache, &hot, &cold, &slm, &total, &n);
    size_t ah = 0, ac = 0, as = 0;
    for (int i = 0; i < e->n_act; i++) {
        smallkv_stats st;
        smallkv_get_stats(e->act[i].ss->s, &st);
        ah += st.hot_bytes; ac += st.cold_bytes; as += st.slm_cache_bytes + st.slm_score_bytes;
    }
    pthread_mutex_lock(&e->m->mu);
    e->m->hot = hot + ah; e->m->cold = cold + ac; e->m->slm = slm + as;
    e->m->cache_bytes = total; e->m->cache_sessions = n;
    e->m->active = e->n_act;
    if (e->n_act == 0) e->m->tokens_per_s = 0;
    pthread_mutex_unlock(&e->m->mu);
}

static void *run(void *arg) {
    serve_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->n_act == 0 && !e->head) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) { pthread_mutex_unlock(&e->mu); break; }
        serve_job *fresh[e->cfg->batch];
        int nf = 0;
        while (e->head && e->n_act + nf < e->cfg->batch) {
            fresh[nf++] = e->head;
            e->head = e->head->next;
            if (!e->head) e->tail = NULL;
            e->queued--;
        }
        pthread_mutex_lock(&e->m->mu);
        e->m->queue_len = e->queued;
        pthread_mutex_unlock(&e->m->mu);
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < nf; i++) {
            active_seq a = { .j = fresh[i] };
            pthread_mutex_lock(&a.j->mu);
            bool gone = a.j->cancelled;
            pthread_mutex_unlock(&a.j->mu);
            if (gone) { finish(e, &a, "cancelled", 0, NULL); continue; }
            if (serve_mono_s() > a.j->deadline) { finish(e, &a, NULL, 504, "request timed out in the queue"); continue; }
            if (start(e, &a) == 0) e->act[e->n_act++] = a;
        }
        round_step(e);
        publish(e);
    }
    /* shutting down: end everything still here */
    for (int i = 0; i < e->n_act; i++) finish(e, &e->act[i], NULL, 503, "the server is shutting down");
    e->n_act = 0;
    while (e->head) {
        active_seq a = { .j = e->head };
        e->head = e->head->next;
        finish(e, &a, NULL, 503, "the server is shutting down");
    }
    return NULL;
}

/* What one session holds beyond its KV tiers (activations for a prefill block, logits,
 * scratch): resident memory before and after a session prefills a 256-token block, less
 * its KV bytes. Also the LLM's KV bytes per token. */
static void probe_overhead(smallkv_pair *p, const serve_config *cfg, size_t *overhead, size_t *per_token) {
    *overhead = *per_token = 0;
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = cfg->policy; o.budget = cfg->budget; o.max_ctx = cfg->ctx;
    const int n = cfg->ctx - 1 < 256 ? cfg->ctx - 1 : 256;
    int *ids = malloc((size_t)n * sizeof(int));
    if (!ids) return;
    for (int i = 0; i < n; i++) ids[i] = 100 + i % 50;
    size_t r0 = serve_rss_bytes();
    smallkv_session *s = smallkv_session_new(p, &o);
    if (s && smallkv_prefill(s, ids, n) == 0) {
        size_t r1 = serve_rss_bytes();
        smallkv_stats st;
        smallkv_get_stats(s, &st);
        size_t kv = st.hot_bytes + st.cold_bytes + st.slm_cache_bytes + st.slm_score_bytes;
        *overhead = r1 > r0 + kv ? r1 - r0 - kv : 0;
        *per_token = st.length > 0 ? st.full_bytes / (size_t)st.length : 0;
    }
    smallkv_session_free(s);
    free(ids);
}

serve_engine *serve_engine_start(smallkv_pair *p, const serve_config *cfg, serve_metrics *m) {
    serve_engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->p = p;
    e->cfg = cfg;
    e->m = m;
    size_t overhead, per_token;
    probe_overhead(p, cfg, &overhead, &per_token);
    m->sess_overhead = overhead;
    m->kv_per_token = per_token;
    e->cache = serve_cache_new(cfg->cache_bytes, overhead);
    e->act = calloc((size_t)cfg->batch, sizeof *e->act);
    e->vocab = smallkv_vocab(p);
    e->scratch = malloc((size_t)e->vocab * sizeof *e->scratch);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->cache || !e->act || !e->scratch || pthread_create(&e->th, NULL, run, e)) {
        serve_cache_free(e->cache);
        free(e->act);
        free(e->scratch);
        free(e);
        return NULL;
    }
    return e;
}

void serve_engine_stop(serve_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    bool running = !e->stop;
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (running) pthread_join(e->th, NULL);
}

void serve_engine_free(serve_engine *e) {
    if (!e) return;
    serve_engine_stop(e);
    serve_cache_free(e->cache);
    free(e->act);
    free(e->scratch);
    free(e->allowed);
    free(e->jv.bytes);
    free(e->jv.len);
    free(e->jv.banned);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
