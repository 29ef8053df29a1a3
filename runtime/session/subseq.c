/* subseq.c: the session layer's sub-sequences (policy.h, skv_subseq_ops): a compressed-cache
 * session over another model that a policy runs beside the LLM (SmallKV's SLM with an
 * H2O-compressed cache). Policies sit below sessions and reach them only through this table,
 * which every session passes to its policy. */
#include "session.h"
#include "common/util.h"
#include <stdio.h>

/* a sub-sequence is a session; the casts only change the name of the pointer's type */
static skv_session *S(skv_subseq *q) { return (skv_session *)(void *)q; }
static const skv_session *CS(const skv_subseq *q) { return (const skv_session *)(const void *)q; }
static skv_subseq *Q(skv_session *s) { return (skv_subseq *)(void *)s; }

static skv_subseq *sub_open(const skv_model *m, double budget, int sinks, int reduce, int n_layers, int max_ctx,
                            int T_max, bool kv_f16, float **colsum, float **lastrow, int stride) {
    skv_session_opts so;
    skv_session_opts_default(&so);
    char spec[96];
    snprintf(spec, sizeof spec, "h2o:sinks=%d:reduce=%s", sinks, skv_reduce_names[reduce]);
    if (skv_policy_spec_parse(spec, &so.pol)) return NULL;
    so.budget = budget;
    so.kv_f16 = kv_f16;
    so.max_ctx = max_ctx;
    so.T_max = T_max;
    so.n_layers = n_layers;
    skv_session *s = skv_session_new(m, &so);
    if (s) skv_session_export(s, colsum, lastrow, stride);
    return Q(s);
}

static int sub_run(skv_subseq *q, const int *tokens, int T, bool prefill) {
    return prefill ? skv_session_prefill(S(q), tokens, T) : skv_session_step(S(q), tokens[0]);
}

static int sub_step_batch(skv_subseq **qs, const int *tokens, int n) {
    skv_session *ss[n];
    for (int i = 0; i < n; i++) ss[i] = S(qs[i]);
    return skv_session_step_batch(ss, tokens, n);
}

static skv_subseq *sub_fork(const skv_subseq *q, float **colsum, float **lastrow, int stride) {
    skv_session *f = skv_session_fork(CS(q));
    if (f) skv_session_export(f, colsum, lastrow, stride);
    return Q(f);
}

static size_t sub_cache_bytes(const skv_subseq *q) {
    skv_session_mem r;
    skv_session_mem_report(CS(q), &r);
    return r.hot_used + r.cold_used;
}

static void sub_free(skv_subseq *q) { skv_session_free(S(q)); }

const skv_subseq_ops skv_session_subseq_ops = {
    .open = sub_open, .run = sub_run, .step_batch = sub_step_batch,
    .fork = sub_fork, .cache_bytes = sub_cache_bytes, .free = sub_free,
};
