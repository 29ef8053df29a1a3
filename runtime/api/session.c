/* session.c: the public API's sessions (include/smallkv.h): options to a policy spec and a
 * backend, prefill / step / fork / generate on whichever device the options named, and the
 * statistics. Every policy runs as a compressed-cache session (runtime/session/) whose
 * decode steps go through the backend (runtime/backend/backend.h); on a device that keeps
 * a full cache itself, a policy that keeps everything runs as a plain sequence there. */
#include "api.h"
#include "runtime/session/sampling.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

void smallkv_options_default(smallkv_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = "full";
    o->budget = 1.0;
    o->device = "cpu";
}

const skv_backend *api_device(const char *name) {
    const skv_backend *be = skv_backend_get(name ? name : "cpu");
    if (!be) return NULL;
    if (!be->available()) { skv_error_prefix("device %s", be->name); return NULL; }
    return be;
}

smallkv_session *smallkv_session_new(smallkv_pair *p, const smallkv_options *uo) {
    if (!p) { skv_error("smallkv_session_new: no model pair"); return NULL; }
    smallkv_options o;
    if (uo) o = *uo; else smallkv_options_default(&o);
    const skv_backend *be = api_device(o.device);
    if (!be) return NULL;
    skv_policy_spec pol;
    if (api_policy_spec(&o, &pol, NULL)) return NULL;
    skv_session_opts so;
    if (skv_session_opts_for(&so, &pol, o.budget, p->slm, p->map, p->prof ? p->prof->depth : 0)) return NULL;
    return api_session_open(p, be, &o, &so);
}

void api_session_opts_apply(const smallkv_pair *p, const smallkv_options *o, skv_session_opts *so) {
    so->kv_f16 = !o->kv_f32;
    so->budget_prompt = o->budget_prompt != 0;
    so->per_head = o->per_head != 0;
    const int cm = p->llm->cfg.ctx_max > 0 ? p->llm->cfg.ctx_max : 4096;
    so->max_ctx = o->max_ctx > 0 ? o->max_ctx : (cm < 4096 ? cm : 4096);
}

smallkv_session *api_session_open(smallkv_pair *p, const skv_backend *be, const smallkv_options *uo, skv_session_opts *so) {
    const smallkv_options o = *uo;
    const skv_policy_desc *d = so->pol.desc;
    api_session_opts_apply(p, &o, so);
    if (be != skv_backend_get("cpu") && !(d->caps & SKV_POLICY_GPU)) {
        skv_error("policy %s does not run on device %s", d->name, be->name);
        return NULL;
    }
    smallkv_session *s = skv_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->p = p;
    s->be = be;
    if (o.draft && be != skv_backend_get("cpu")) {
        skv_error("draft %d: speculative decoding runs on the CPU only", o.draft);
        goto fail;
    }
    if (smallkv_set_sampling(s, o.temperature, o.seed)) goto fail;   /* checked; buffers after api_spec_init */
    if (api_pair_upload(p, be)) goto fail;
    if ((d->caps & SKV_POLICY_KEEPS_ALL) && be->full_cache_on_device) {
        s->seq_cap = so->max_ctx;
        s->seq_token_bytes = skv_model_kv_bytes_per_token(p->llm, so->kv_f16 ? 2 : 4);
        if (!(s->seq = be->seq_new(p->dev_llm, so->max_ctx, so->max_ctx < so->T_max ? so->max_ctx : so->T_max, so->kv_f16)))
            goto fail;
        return s;
    }
    if (!(s->s = skv_session_new(p->llm, so))) goto fail;
    s->draft_adapt = o.draft_adapt != 0;
    if (api_spec_init(s, so, o.draft, o.draft_vocab)) {
        skv_session_free(s->s);
        goto fail;
    }
    if (api_spec_sampling(s)) {
        api_spec_free(s);
        skv_session_free(s->s);
        goto fail;
    }
    return s;
fail:
    free(s);
    return NULL;
}

static void detach(smallkv_session *s) {
    if (s->att) s->be->detach(s->att);
    s->att = NULL;
}

void smallkv_session_free(smallkv_session *s) {
    if (!s) return;
    detach(s);
    if (s->seq) s->be->seq_free(s->seq);
    api_spec_free(s);
    skv_session_free(s->s);
    free(s);
}

int smallkv_length(const smallkv_session *s) { return s->seq ? s->be->seq_length(s->seq) : s->s->n; }
static int capacity(const smallkv_session *s) { return s->seq ? s->seq_cap : s->s->o.max_ctx; }

/* a sequence on the device: prefill in blocks, the last block's last logits kept */
static int seq_prefill(smallkv_session *s, const int *ids, int n) {
    const int T = 256;
    for (int i = 0; i < n; i += T) {
        const int b = n - i < T ? n - i : T;
        skv_fwd_opts o = {.logits = i + b == n ? SKV_LOGITS_LAST : SKV_LOGITS_NONE};
        if (s->be->seq_forward(s->seq, ids + i, b, &o)) return -1;
    }
    return 0;
}

int smallkv_prefill(smallkv_session *s, const int *ids, int n) {
    if (!s || !ids || n < 1) return skv_error("smallkv_prefill: empty prompt");
    if (smallkv_length(s) + n > capacity(s))
        return skv_error("the prompt (%d tokens, %d already in the session) is longer than the context of %d tokens", n,
                         smallkv_length(s), capacity(s));
    s->t_prefill0 = skv_now();
    s->ttft = 0;
    if (s->seq) {
        if (seq_prefill(s, ids, n)) return -1;
    } else {
        detach(s);   /* a prefill runs on the host; the device takes the session again at its next step */
        if (skv_session_prefill(s->s, ids, n)) return -1;
        api_spec_note(s, ids, n);
        if (api_spec_prefill(s, ids, n)) return -1;
    }
    s->prefill_s += skv_now() - s->t_prefill0;
    s->prefill_tokens += n;
    s->has_logits = 1;
    return 0;
}

static int step(smallkv_session *s, int token) {
    if (s->seq) {
        skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
        return s->be->seq_forward(s->seq, &token, 1, &o);
    }
    if (s->s->n == 0) return skv_session_step(s->s, token);   /* the first token is a prefill */
    if (!s->att && !(s->att = s->be->attach(s->s, s->p->dev_llm, s->p->dev_slm))) return -1;
    return s->be->step(s->att, token);
}

int smallkv_step(smallkv_session *s, int token) {
    double t0 = skv_now();
    if (step(s, token)) return -1;
    if (!s->seq) api_spec_note(s, &token, 1);
    s->decode_s += skv_now() - t0;
    s->decode_tokens++;
    s->has_logits = 1;
    return 0;
}

int smallkv_step_batch(smallkv_session **ss, const int *tokens, int n) {
    if (n < 1) return 0;
    const skv_backend *cpu = skv_backend_get("cpu");
    skv_session *arr[64];
    for (int i0 = 0; i0 < n; i0 += 64) {
        int k = n - i0 < 64 ? n - i0 : 64;
        bool host = true;
        for (int i = 0; i < k; i++) host = host && ss[i0 + i]->be == cpu && ss[i0 + i]->s;
        double t0 = skv_now();
        if (host) {
            /* the host's batched step: the weights read once for all */
            for (int i = 0; i < k; i++) arr[i] = ss[i0 + i]->s;
            if (skv_session_step_batch(arr, tokens + i0, k)) return -1;
            for (int i = 0; i < k; i++) api_spec_note(ss[i0 + i], tokens + i0 + i, 1);
        } else {
            for (int i = 0; i < k; i++)
                if (step(ss[i0 + i], tokens[i0 + i])) return skv_error_prefix("batch entry %d", i0 + i);
                else if (!ss[i0 + i]->seq) api_spec_note(ss[i0 + i], tokens + i0 + i, 1);
        }
        double dt = skv_now() - t0;
        for (int i = 0; i < k; i++) {
            ss[i0 + i]->decode_s += dt;   /* each sequence waited the whole batched step */
            ss[i0 + i]->decode_tokens++;
            ss[i0 + i]->has_logits = 1;
        }
    }
    return 0;
}

const float *smallkv_logits(const smallkv_session *s) {
    if (!s->has_logits) return NULL;
    return s->seq ? s->be->seq_logits(s->seq) : skv_session_logits(s->s);
}

smallkv_session *smallkv_fork(const smallkv_session *s) {
    if (s->seq) { skv_error("fork: a full-cache sequence on device %s cannot be forked", s->be->name); return NULL; }
    if (s->att && s->att != (void *)s->s) {
        skv_error("fork: the session decodes on device %s; fork it before its first step", s->be->name);
        return NULL;
    }
    smallkv_session *f = skv_calloc(1, sizeof *f, "session");
    if (!f) return NULL;
    f->p = s->p;
    f->be = s->be;
    f->has_logits = s->has_logits;
    f->temp = s->temp;
    f->rng = s->rng;
    f->t_prefill0 = skv_now();   /* a fork starts a new request; speed counters at zero */
    if (!(f->s = skv_session_fork(s->s))) { free(f); return NULL; }
    if (api_spec_fork(f, s)) { smallkv_session_free(f); return NULL; }
    return f;
}

int smallkv_sample(smallkv_session *s, float temperature, unsigned long long *rng) {
    if (!s || !s->has_logits) return skv_error("smallkv_sample: no logits yet (prefill first)");
    const float *x = smallkv_logits(s);
    const int V = s->p->llm->cfg.vocab;
    const int tok = skv_sample_logits(x, V, temperature, rng);
    if (s->ttft == 0) s->ttft = skv_now() - s->t_prefill0;
    return tok;
}

int smallkv_set_sampling(smallkv_session *s, float temperature, unsigned long long seed) {
    if (!s) return skv_error("smallkv_set_sampling: no session");
    if (!(temperature >= 0 && temperature <= 100)) return skv_error("temperature %g: must be in [0, 100]", temperature);
    const float was = s->temp;
    s->temp = temperature;
    if (api_spec_sampling(s)) {
        s->temp = was;
        return -1;
    }
    s->rng = seed;
    return 0;
}

int api_emit_token(smallkv_session *s, int tok, smallkv_token_cb cb, void *user, int *produced) {
    if (smallkv_is_stop(s->p, tok)) return 1;
    size_t len = 0;
    const char *b = smallkv_token_bytes(s->p, tok, &len);
    ++*produced;
    return cb && cb(tok, b ? b : "", b ? len : 0, user);
}

int smallkv_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user) {
    if (!s || max_tokens < 0) return skv_error("smallkv_generate: bad arguments");
    if (!s->has_logits) return skv_error("smallkv_generate: nothing to continue (prefill first)");
    if (s->draft) return api_spec_generate(s, max_tokens, cb, user);
    int produced = 0;
    while (produced < max_tokens) {
        int next = smallkv_sample(s, s->temp, &s->rng);
        if (api_emit_token(s, next, cb, user, &produced) || produced == max_tokens) break;
        if (smallkv_length(s) >= capacity(s)) return skv_error("the context of %d tokens is full", capacity(s));
        if (smallkv_step(s, next)) return -1;
    }
    return produced;
}

/* smallkv_generate_batch's per-sequence callback: the caller's, told which sequence. */
typedef struct {
    smallkv_batch_token_cb cb;
    void *user;
    int seq;
} batch_cb;

static int batch_tramp(int id, const char *bytes, size_t len, void *user) {
    const batch_cb *b = user;
    return b->cb ? b->cb(b->seq, id, bytes, len, b->user) : 0;
}

int smallkv_generate_batch(smallkv_session **ss, int n, int max_tokens, smallkv_batch_token_cb cb, void *user,
                           int *produced) {
    if (!ss || n < 1 || n > 64 || max_tokens < 0 || !produced)
        return skv_error("smallkv_generate_batch: bad arguments (%d sequences, at most 64)", n);
    int drafting = 0;
    for (int i = 0; i < n; i++) {
        if (!ss[i]) return skv_error("smallkv_generate_batch: sequence %d is NULL", i);
        if (!ss[i]->has_logits) return skv_error("smallkv_generate_batch: sequence %d: nothing to continue (prefill first)", i);
        if (ss[i]->p->llm != ss[0]->p->llm) return skv_error("smallkv_generate_batch: sequence %d runs another LLM", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return skv_error("smallkv_generate_batch: sequences %d and %d are one session", j, i);
        drafting += ss[i]->draft > 0;
        produced[i] = 0;
    }
    if (drafting && drafting < n)
        return skv_error("smallkv_generate_batch: %d of %d sequences draft; all or none must", drafting, n);
    batch_cb bc[n];
    smallkv_token_cb cbs[n];
    void *users[n];
    for (int i = 0; i < n; i++) {
        bc[i] = (batch_cb){.cb = cb, .user = user, .seq = i};
        cbs[i] = batch_tramp;
        users[i] = &bc[i];
    }
    if (drafting) return api_spec_generate_batch(ss, n, max_tokens, cbs, users, produced);
    /* plain decoding: every live sequence's next token, then one batched step */
    bool done[n];
    memset(done, 0, sizeof done);
    for (;;) {
        smallkv_session *step_ss[n];
        int tk[n], ns = 0;
        for (int i = 0; i < n; i++) {
            if (done[i] || produced[i] >= max_tokens) { done[i] = true; continue; }
            smallkv_session *s = ss[i];
            const int next = smallkv_sample(s, s->temp, &s->rng);
            if (next < 0) return -1;
            if (api_emit_token(s, next, cbs[i], users[i], &produced[i]) || produced[i] == max_tokens) {
                done[i] = true;
                continue;
            }
            if (smallkv_length(s) >= capacity(s))
                return skv_error("smallkv_generate_batch: sequence %d: the context of %d tokens is full", i, capacity(s));
            step_ss[ns] = s;
            tk[ns++] = next;
        }
        if (!ns) return 0;
        if (smallkv_step_batch(step_ss, tk, ns)) return -1;
    }
}

void smallkv_get_stats(const smallkv_session *s, smallkv_stats *st) {
    memset(st, 0, sizeof *st);
    const skv_model *m = s->p->llm;
    if (s->seq) {
        /* the full cache on the device */
        const int n = s->be->seq_length(s->seq);
        st->full_bytes = st->hot_bytes = s->seq_token_bytes * (size_t)n;
        st->hot_tokens = n;
        st->length = n;
    } else {
        skv_session_mem r;
        skv_session_mem_report(s->s, &r);
        st->hot_bytes = r.hot_used;
        st->cold_bytes = r.cold_used;
        st->slm_weight_bytes = r.slm_weights;
        st->slm_cache_bytes = r.slm_cache;
        st->slm_score_bytes = r.slm_scores;
        st->score_pass_seconds = r.pass_seconds;   /* kvzip */
        st->score_pass_peak_bytes = r.pass_peak;
        st->full_bytes = r.full_equiv;
        const int lanes = s->s->L_act * m->cfg.n_kv_head;
        st->hot_tokens = lanes ? r.hot_tokens / lanes : 0;
        st->length = s->s->n;
        st->restores = s->s->restores;
    }
    st->prefill_tokens = s->prefill_tokens;
    st->decode_tokens = s->decode_tokens;
    st->prefill_seconds = s->prefill_s;
    st->decode_seconds = s->decode_s;
    st->prefill_tps = s->prefill_s > 0 ? s->prefill_tokens / s->prefill_s : 0;
    st->decode_tps = s->decode_s > 0 ? s->decode_tokens / s->decode_s : 0;
    st->ttft = s->ttft;
    st->tpot = s->decode_tokens > 0 ? s->decode_s / s->decode_tokens : 0;
    st->spec_passes = s->spec_passes;
    st->spec_drafted = s->spec_drafted;
    st->spec_accepted = s->spec_accepted;
    st->spec_draft_seconds = s->spec_draft_s;
    st->spec_fork_seconds = s->spec_fork_s;
    st->spec_verify_seconds = s->spec_verify_s;
    st->spec_rollback_seconds = s->spec_close_s;
}

const char *smallkv_session_device(const smallkv_session *s) { return s->be->name; }

void smallkv_stats_reset(smallkv_session *s) {
    s->prefill_tokens = s->decode_tokens = 0;
    s->spec_passes = s->spec_drafted = s->spec_accepted = 0;
    s->spec_draft_s = s->spec_fork_s = s->spec_verify_s = s->spec_close_s = 0;
    s->prefill_s = s->decode_s = 0;
    s->ttft = 0;
    s->t_prefill0 = skv_now();
}
