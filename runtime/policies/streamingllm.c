/* streamingllm.c: StreamingLLM: the first `sinks` tokens plus the most recent ones
 * up to the budget. Eviction is permanent and needs no scores. */
#include "policy.h"

typedef struct { int sinks; } stream_opts;

static const skv_opt_desc stream_opt_table[] = {SKV_OPT_SINKS(stream_opts)};

static int stream_select(skv_policy *p, skv_select_io *io) {
    const stream_opts *o = p->opts;
    int keep = skv_budget_tokens(io->budget, io->n);
    int sinks = o->sinks < keep ? o->sinks : keep;
    skv_select_scored(io, NULL, keep, keep - sinks, true, sinks);
    return 0;
}

static int stream_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    p->select = stream_select;
    return 0;
}

const skv_policy_desc skv_policy_streamingllm = {
    .name = "streamingllm",
    .summary = "attention sinks + the most recent tokens",
    .keeps = "The first `sinks` tokens (attention sinks) and the most recent tokens, up to the budget; "
             "no scores are kept and eviction is permanent.",
    .choose = "The simplest and cheapest baseline, for streams where only the recent context matters: "
              "it forgets everything else, so it finds a passkey only when the key is among the most "
              "recent tokens (docs/results.md sections 3 and 13).",
    .caps = SKV_POLICY_GPU,
    .opts = stream_opt_table,
    .n_opts = 1,
    .opts_size = sizeof(stream_opts),
    .init = stream_init,
};
