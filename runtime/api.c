/* api.c: the public API (include/smallkv.h) over the runtime's pieces: models
 * (model.h), profile (profile.h, fingerprint.h), sessions (session.h), tokenizer. It adds
 * only option translation, the SmallKV wiring (profile map, depth, online matching) and
 * timing statistics. */
#include "include/smallkv.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/model.h"
#include "profiles/profile.h"
#include "runtime/session/sampling.h"
#include "runtime/policies/policy.h"
#include "runtime/session/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

struct smallkv_pair {
    skv_model *llm, *slm;
    skv_profile *prof;
    int *map;                 /* (L*H) from the profile, as int */
};

struct smallkv_session {
    smallkv_pair *p;
    skv_session *s;
    int prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    double t_prefill0;        /* start of the last prefill */
    double ttft;
    int has_logits;
};

const char *smallkv_last_error(void) { return skv_last_error(); }

smallkv_pair *smallkv_pair_load(const char *llm_path, const char *slm_path) {
    if (!llm_path) { skv_error("smallkv_pair_load: no LLM path"); return NULL; }
    smallkv_pair *p = skv_calloc(1, sizeof *p, "model pair");
    if (!p) return NULL;
    if (!(p->llm = skv_model_load(llm_path))) goto fail;
    if (slm_path) {
        if (!(p->slm = skv_model_load(slm_path))) goto fail;
        if (p->slm->cfg.vocab != p->llm->cfg.vocab) {
            skv_error("%s: the SLM's vocabulary (%d) differs from the LLM's (%d, %s)", slm_path, p->slm->cfg.vocab,
                      p->llm->cfg.vocab, llm_path);
            goto fail;
        }
    }
    return p;
fail:
    smallkv_pair_free(p);
    return NULL;
}

int smallkv_pair_load_profile(smallkv_pair *p, const char *path) {
    if (!p || !path) return skv_error("smallkv_pair_load_profile: bad arguments");
    if (!p->slm) return skv_error("%s: a profile needs an SLM (load the pair with one)", path);
    skv_profile *pr = skv_profile_load(path);
    if (!pr) return -1;
    skv_model_fp fs, fl;
    if (skv_fp_from_model(p->slm, false, &fs) || skv_fp_from_model(p->llm, false, &fl) ||
        skv_profile_check_models(pr, &fs, &fl)) {
        skv_profile_free(pr);
        return -1;
    }
    const int n = p->llm->cfg.n_layer * p->llm->cfg.n_head, ns = p->slm->cfg.n_layer * p->slm->cfg.n_head;
    if (pr->n_llm != n || pr->n_slm != ns) {
        skv_profile_free(pr);
        return skv_error("%s: head counts %d/%d do not match the models (%d/%d)", path, pr->n_llm, pr->n_slm, n, ns);
    }
    int *map = skv_malloc((size_t)n * sizeof(int), "profile map");
    if (!map) { skv_profile_free(pr); return -1; }
    for (int i = 0; i < n; i++) {
        if (pr->map[i] < 0 || pr->map[i] >= ns) {
            free(map);
            skv_profile_free(pr);
            return skv_error("%s: map entry %d = %d out of range", path, i, (int)pr->map[i]);
        }
        map[i] = pr->map[i];
    }
    skv_profile_free(p->prof);
    free(p->map);
    p->prof = pr;
    p->map = map;
    return 0;
}

void smallkv_pair_free(smallkv_pair *p) {
    if (!p) return;
    skv_model_free(p->llm);
    skv_model_free(p->slm);
    skv_profile_free(p->prof);
    free(p->map);
    free(p);
}

int smallkv_vocab(const smallkv_pair *p) { return p->llm->cfg.vocab; }
int smallkv_context_length(const smallkv_pair *p) { return p->llm->cfg.ctx_max; }

static int tokenize(const smallkv_pair *p, const char *system, const char *text, int flags, int *ids, int cap) {
    if (!p || !text || cap < 0) return skv_error("smallkv_tokenize: bad arguments");
    const skv_tokenizer *tok = p->llm->tok;
    if (!tok) return skv_error("%s: the model has no tokenizer", p->llm->path ? p->llm->path : "LLM");
    const bool chat = flags & SMALLKV_TOK_CHAT;
    char *t = chat ? skv_chat_prompt(tok, system, text) : skv_strdup(text);
    if (!t) return -1;
    const int bos = (!chat && (flags & SMALLKV_TOK_BOS) && skv_tok_add_bos(tok) && skv_tok_bos(tok) >= 0) ? 1 : 0;
    int need = skv_tokenize(tok, t, strlen(t), chat, NULL, 0);
    if (need >= 0 && ids && cap > 0) {
        if (bos) ids[0] = skv_tok_bos(tok);
        if (cap > bos) {
            int *tmp = skv_malloc(((size_t)need + 1) * sizeof(int), "token ids");
            if (!tmp) need = -1;
            else if (skv_tokenize(tok, t, strlen(t), chat, tmp, need) != need) need = skv_error("tokenizer: inconsistent counts");
            else memcpy(ids + bos, tmp, (size_t)(need < cap - bos ? need : cap - bos) * sizeof(int));
            free(tmp);
        }
    }
    free(t);
    return need < 0 ? -1 : need + bos;
}

int smallkv_tokenize(const smallkv_pair *p, const char *text, int flags, int *ids, int cap) {
    return tokenize(p, NULL, text, flags, ids, cap);
}

int smallkv_tokenize_chat(const smallkv_pair *p, const char *system, const char *user, int *ids, int cap) {
    return tokenize(p, system, user, SMALLKV_TOK_CHAT, ids, cap);
}

const char *smallkv_token_bytes(const smallkv_pair *p, int id, size_t *len) {
    if (!p->llm->tok) { if (len) *len = 0; return NULL; }
    return skv_token_bytes(p->llm->tok, id, len);
}

int smallkv_is_stop(const smallkv_pair *p, int id) { return p->llm->tok && skv_tok_is_stop(p->llm->tok, id); }

/* ------------------------------------------------------------------ sessions */

void smallkv_options_default(smallkv_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = "full";
    o->budget = 1.0;
    o->device = "cpu";
}

const char *smallkv_policy_list(void) { return skv_policy_names(); }
const char *smallkv_policies_help(void) { return skv_policy_help(); }

int smallkv_policy_check(const char *spec, unsigned *needs) {
    skv_policy_spec ps;
    if (skv_policy_spec_parse(spec ? spec : "full", &ps)) return -1;
    unsigned n = 0;
    if (ps.desc->caps & SKV_POLICY_NEEDS_SLM) n |= SMALLKV_NEEDS_SLM;
    if (skv_policy_spec_needs_map(&ps)) n |= SMALLKV_NEEDS_PROFILE;
    if (ps.desc->caps & SKV_POLICY_KEEPS_ALL) n |= SMALLKV_NO_BUDGET;
    if (!(ps.desc->caps & SKV_POLICY_GPU)) n |= SMALLKV_NO_GPU;
    if (needs) *needs = n;
    return 0;
}

int smallkv_policy_option(const char *name, int *takes_value) {
    const skv_opt_desc *o = name ? skv_policy_any_option(name) : NULL;
    if (!o) return 0;
    if (takes_value) *takes_value = o->type != SKV_OPT_BOOL;
    return 1;
}

int smallkv_policy_option_check(const char *spec, const char *name, const char *value) {
    skv_policy_spec ps;
    if (skv_policy_spec_parse(spec ? spec : "full", &ps) || skv_policy_option_check(name, value)) return -1;
    return skv_policy_spec_set(&ps, name, value) == 0;
}

smallkv_session *smallkv_session_new(smallkv_pair *p, const smallkv_options *uo) {
    if (!p) { skv_error("smallkv_session_new: no model pair"); return NULL; }
    smallkv_options o;
    if (uo) o = *uo; else smallkv_options_default(&o);
    if (!(o.budget > 0 && o.budget <= 1)) {
        skv_error("budget %g is not a fraction in (0, 1]", o.budget);
        return NULL;
    }
    if (o.device && strcmp(o.device, "cpu")) {
        skv_error("unknown device '%s' (cpu)", o.device);
        return NULL;
    }
    skv_session_opts so;
    skv_session_opts_default(&so);
    if (skv_policy_spec_parse(o.policy ? o.policy : "full", &so.pol)) return NULL;
    const char *pname = so.pol.desc->name;
    so.budget = o.budget;
    so.kv_f16 = !o.kv_f32;
    const int cm = p->llm->cfg.ctx_max > 0 ? p->llm->cfg.ctx_max : 4096;
    so.max_ctx = o.max_ctx > 0 ? o.max_ctx : (cm < 4096 ? cm : 4096);
    if (so.pol.desc->caps & SKV_POLICY_NEEDS_SLM) {
        if (!p->slm) { skv_error("policy %s needs an SLM", pname); return NULL; }
        if (skv_policy_spec_needs_map(&so.pol) && !p->map) {
            skv_error("policy %s needs a profile (or mapping online)", pname);
            return NULL;
        }
        so.slm = p->slm;
        so.map = p->map;
        so.map_depth = p->prof ? p->prof->depth : 0;
    }
    smallkv_session *s = skv_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->p = p;
    if (!(s->s = skv_session_new(p->llm, &so))) { free(s); return NULL; }
    return s;
}

/* The runtime session behind a public one (not in smallkv.h: runtime/cli/generate_cuda.c
 * moves its decode to the GPU, runtime/backend/session_cuda.h). */
skv_session *smallkv_session_runtime(smallkv_session *s) { return s ? s->s : NULL; }

void smallkv_session_free(smallkv_session *s) {
    if (!s) return;
    skv_session_free(s->s);
    free(s);
}

int smallkv_prefill(smallkv_session *s, const int *ids, int n) {
    if (!s || !ids || n < 1) return skv_error("smallkv_prefill: empty prompt");
    if (s->s->n + n > s->s->o.max_ctx)
        return skv_error("the prompt (%d tokens, %d already in the session) is longer than the context of %d tokens", n,
                         s->s->n, s->s->o.max_ctx);
    s->t_prefill0 = skv_now();
    s->ttft = 0;
    if (skv_session_prefill(s->s, ids, n)) return -1;
    s->prefill_s += skv_now() - s->t_prefill0;
    s->prefill_tokens += n;
    s->has_logits = 1;
    return 0;
}

int smallkv_step(smallkv_session *s, int token) {
    double t0 = skv_now();
    if (skv_session_step(s->s, token)) return -1;
    s->decode_s += skv_now() - t0;
    s->decode_tokens++;
    s->has_logits = 1;
    return 0;
}

int smallkv_step_batch(smallkv_session **ss, const int *tokens, int n) {
    if (n < 1) return 0;
    skv_session *arr[64];
    for (int i0 = 0; i0 < n; i0 += 64) {
        int k = n - i0 < 64 ? n - i0 : 64;
        for (int i = 0; i < k; i++) arr[i] = ss[i0 + i]->s;
        double t0 = skv_now();
        if (skv_session_step_batch(arr, tokens + i0, k)) return -1;
        double dt = skv_now() - t0;
        for (int i = 0; i < k; i++) {
            ss[i0 + i]->decode_s += dt;   /* each sequence waited the whole batched step */
            ss[i0 + i]->decode_tokens++;
            ss[i0 + i]->has_logits = 1;
        }
    }
    return 0;
}

const float *smallkv_logits(const smallkv_session *s) { return s->has_logits ? skv_session_logits(s->s) : NULL; }
int smallkv_length(const smallkv_session *s) { return s->s->n; }

smallkv_session *smallkv_fork(const smallkv_session *s) {
    smallkv_session *f = skv_calloc(1, sizeof *f, "session");
    if (!f) return NULL;
    f->p = s->p;
    f->has_logits = s->has_logits;
    f->t_prefill0 = skv_now();   /* a fork starts a new request; speed counters at zero */
    if (!(f->s = skv_session_fork(s->s))) { free(f); return NULL; }
    return f;
}

int smallkv_sample(smallkv_session *s, float temperature, unsigned long long *rng) {
    if (!s || !s->has_logits) return skv_error("smallkv_sample: no logits yet (prefill first)");
    const float *x = skv_session_logits(s->s);
    const int V = s->p->llm->cfg.vocab;
    const int tok = skv_sample_logits(x, V, temperature, rng);
    if (s->ttft == 0) s->ttft = skv_now() - s->t_prefill0;
    return tok;
}

int smallkv_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user) {
    if (!s || max_tokens < 0) return skv_error("smallkv_generate: bad arguments");
    if (!s->has_logits) return skv_error("smallkv_generate: nothing to continue (prefill first)");
    int produced = 0;
    while (produced < max_tokens) {
        int next = smallkv_sample(s, 0, NULL);
        if (smallkv_is_stop(s->p, next)) break;
        size_t len = 0;
        const char *b = smallkv_token_bytes(s->p, next, &len);
        produced++;
        if (cb && cb(next, b ? b : "", b ? len : 0, user)) break;
        if (produced == max_tokens) break;
        if (s->s->n >= s->s->o.max_ctx) return skv_error("the context of %d tokens is full", s->s->o.max_ctx);
        if (smallkv_step(s, next)) return -1;
    }
    return produced;
}

void smallkv_get_stats(const smallkv_session *s, smallkv_stats *st) {
    memset(st, 0, sizeof *st);
    skv_session_mem m;
    skv_session_mem_report(s->s, &m);
    st->hot_bytes = m.hot_used;
    st->cold_bytes = m.cold_used;
    st->slm_weight_bytes = m.slm_weights;
    st->slm_cache_bytes = m.slm_cache;
    st->slm_score_bytes = m.slm_scores;
    st->full_bytes = m.full_equiv;
    const int lanes = s->s->L_act * s->p->llm->cfg.n_kv_head;
    st->hot_tokens = lanes ? m.hot_tokens / lanes : 0;
    st->length = s->s->n;
    st->prefill_tokens = s->prefill_tokens;
    st->decode_tokens = s->decode_tokens;
    st->prefill_seconds = s->prefill_s;
    st->decode_seconds = s->decode_s;
    st->prefill_tps = s->prefill_s > 0 ? s->prefill_tokens / s->prefill_s : 0;
    st->decode_tps = s->decode_s > 0 ? s->decode_tokens / s->decode_s : 0;
    st->ttft = s->ttft;
    st->tpot = s->decode_tokens > 0 ? s->decode_s / s->decode_tokens : 0;
    st->restores = s->s->restores;
}

void smallkv_stats_reset(smallkv_session *s) {
    s->prefill_tokens = s->decode_tokens = 0;
    s->prefill_s = s->decode_s = 0;
    s->ttft = 0;
    s->t_prefill0 = skv_now();
}
