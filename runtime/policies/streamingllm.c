/* streamingllm.c: StreamingLLM: the first `sinks` tokens plus the most recent ones
 * up to the budget. Eviction is permanent and needs no scores. */
#include "policy.h"

static int stream_select(skv_policy *p, skv_select_io *io) {
    int keep = skv_budget_tokens(io->budget, io->n);
    int sinks = p->o.sinks < keep ? p->o.sinks : keep;
    skv_select_scored(io, NULL, keep, keep - sinks, true, sinks);
    return 0;
}

int skv_policy_init_streamingllm(skv_policy *p) {
    p->select = stream_select;
    return 0;
}
