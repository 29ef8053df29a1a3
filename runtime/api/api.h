/* api.h: what the public API's files (runtime/api/) share behind include/smallkv.h: the
 * handles' structs. */
#ifndef SKV_API_H
#define SKV_API_H
#include "include/smallkv.h"
#include "runtime/format/profile.h"
#include "runtime/backend/backend.h"
#include "runtime/model/model.h"
#include "runtime/session/session.h"

struct smallkv_pair {
    skv_model *llm, *slm;
    skv_profile *prof;
    int *map;                 /* (L*H) from the profile, as int */
    const skv_backend *dev;   /* the backend the uploads below are on, or NULL */
    void *dev_llm, *dev_slm;  /* the weights on it (dev_slm NULL without an SLM) */
    bool borrowed;            /* llm and slm belong to the caller (api_pair_borrow) */
};

struct smallkv_session {
    smallkv_pair *p;
    const skv_backend *be;
    skv_session *s;           /* the compressed cache on the host (every policy on the CPU), or */
    void *seq;                /* a full-cache sequence on a device (policy full off the CPU) */
    int seq_cap;              /* its context */
    size_t seq_token_bytes;   /* its K+V bytes per token */
    void *att;                /* s decoding on be (the CPU backend: s itself), NULL until the
                                 first step after a prefill */
    int prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    double t_prefill0;        /* start of the last prefill */
    double ttft;
    int has_logits;
    /* speculative decoding (speculate.c), when draft > 0 */
    int draft;
    int draft_adapt, draft_cur;   /* adaptive: the next round's draft length */
    skv_session *drafter;     /* the SLM over the same tokens, policy full (NULL when the
                                 policy drafts with its own SLM) */
    int *hist; int hist_n;    /* every token in the LLM's sequence (hist_n = its length) */
    int spec_passes, spec_drafted, spec_accepted;
    /* wall time of the rounds' phases: drafting, forking the LLM session, the verify
     * pass, accepting and rolling back (truncate or replay) */
    double spec_draft_s, spec_fork_s, spec_verify_s, spec_close_s;
    /* sampling in smallkv_generate (temperature 0: greedy) */
    float temp;
    unsigned long long rng;
    float *spec_q;            /* (draft, vocab) the SLM's distribution for each proposal, and */
    float *spec_p;            /* (vocab) the LLM's at one verified row (sampled drafts only) */
};

/* Speculative decoding (speculate.c). init: check that s can speculate with K drafts (SLM,
 * CPU, a policy whose verify pass is exact) and make the drafter, unless the policy drafts
 * with its own companion (smallkv); vocab: the draft vocabulary (smallkv_options.draft_vocab); -1 + error. note: tokens appended to the LLM's
 * sequence (prefill, step). fork: dst takes a copy of src's drafter and history. generate:
 * smallkv_generate with drafts, the same tokens and final state as plain greedy steps. */
int api_spec_init(smallkv_session *s, const skv_session_opts *so, int K, int vocab);
void api_spec_note(smallkv_session *s, const int *ids, int n);
/* After a prefill of the LLM (noted): the drafter prefills the same tokens, so that its
 * prompt counts as prefill time, not as the first draft's. -1 + error. */
int api_spec_prefill(smallkv_session *s, const int *ids, int n);
int api_spec_fork(smallkv_session *dst, const smallkv_session *src);
/* The buffers sampled drafts need, once s->temp > 0 (nothing otherwise). -1 + error. */
int api_spec_sampling(smallkv_session *s);
void api_spec_free(smallkv_session *s);
/* Hand one generated token to the caller as smallkv_generate does: nonzero when generation
 * ends here (a stop token, not counted, or the callback asked to stop); *produced counts the
 * tokens handed over. */
int api_emit_token(smallkv_session *s, int tok, smallkv_token_cb cb, void *user, int *produced);
int api_spec_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user);
/* smallkv_generate_batch for n drafting sessions (n <= 64): each its own callback and user,
 * produced[i] its token count. 0, or -1 + error. */
int api_spec_generate_batch(smallkv_session **ss, int n, int max_tokens, smallkv_token_cb *cbs, void **users,
                            int *produced);
/* Tests: every greedy proposal passes through hook(position, token, user), which may replace
 * it (so that rejections and rollbacks happen with a self pair); NULL: off. Sampled proposals
 * come from the SLM at temperature x factor (default 1), so that with a self pair the draft's
 * distribution differs from the LLM's and the resample path runs. Process-wide. */
void api_spec_set_draft_hook(int (*hook)(int pos, int tok, void *user), void *user);
void api_spec_set_draft_temp_factor(float factor);

/* o's policy spec with its policy_opts applied (smallkv_options_check); skipped: bit i for
 * each option a lenient check skipped (may be NULL). -1 + error. */
int api_policy_spec(const smallkv_options *o, skv_policy_spec *out, unsigned long long *skipped);

/* The backend a device name stands for (NULL: "cpu"), when this build and machine have it;
 * NULL + error saying why not ("device cuda: built without CUDA (make CUDA=1)"). */
const skv_backend *api_device(const char *name);
/* Opening a session (smallkv_session_new after its policy parse): so, built by
 * skv_session_opts_for, gets o's cache type, budget base, granularity and context
 * (api_session_opts_apply), then a session on be runs it with o's drafting and sampling.
 * NULL + error. */
void api_session_opts_apply(const smallkv_pair *p, const smallkv_options *o, skv_session_opts *so);
smallkv_session *api_session_open(smallkv_pair *p, const skv_backend *be, const smallkv_options *o, skv_session_opts *so);

/* For the evaluation (eval/runner.c), which loads its models itself and drives its cells
 * through the public API (cells.c). A pair over models the caller keeps owning
 * (smallkv_pair_free leaves them; no profile: each cell names its mapping). */
smallkv_pair *api_pair_borrow(const skv_model *llm, const skv_model *slm);
/* A cell: what smallkv_options cannot say. */
typedef struct {
    const skv_policy_spec *pol;   /* the parsed policy (o->policy and policy_opts are unused) */
    const int *map;               /* head mapping [L*H] (NULL: none) and its profile's SLM depth */
    int map_depth;                /*   (0: unknown) */
    int T_max;                    /* prefill block (0: the default) */
} api_cell;
/* A session as smallkv_session_new(p, o) opens it (o's budget, device, cache, drafting...),
 * with c's policy, mapping and prefill block. NULL + error. */
smallkv_session *api_session_cell(smallkv_pair *p, const smallkv_options *o, const api_cell *c);
/* A prefill base on the CPU (skv_session_derive, session.h): its smallkv_prefill is one exact
 * prefill that cells derive from; slm_policy (NULL: none) names the policy whose SLM it
 * prepares, to all layers. It cannot step. NULL + error. */
smallkv_session *api_session_base(smallkv_pair *p, const char *slm_policy, int max_ctx, int kv_f16, int T_max);
/* The cell (o, c) continuing from base's prefill, exactly as its own prefill of the same
 * tokens would leave it (logits included). NULL + error when it cannot be derived: a
 * device other than the CPU, drafting, or what skv_session_derive refuses (a compressed SLM
 * cache, another observation window...); the cell then prefills by itself. */
smallkv_session *api_session_derive(smallkv_session *base, const smallkv_options *o, const api_cell *c);
/* The full memory report (skv_session_mem, session.h; smallkv_get_stats has a summary). */
void api_session_mem(const smallkv_session *s, skv_session_mem *r);
/* The LLM-head -> SLM-head map a policy matched online (SmallKV's mapping=online), NULL
 * when it has none (yet). */
const int *api_session_head_map(const smallkv_session *s);

/* Upload the pair's models to be (once; another backend's uploads are released). -1 + error. */
int api_pair_upload(smallkv_pair *p, const skv_backend *be);

#endif
