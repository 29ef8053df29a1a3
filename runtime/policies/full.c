/* full.c: no eviction; every token keeps K and V in the hot tier (the reference). */
#include "policy.h"

static int full_select(skv_policy *p, skv_select_io *io) {
    (void)p;
    skv_select_all(io);
    return 0;
}

static int full_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    p->select = full_select;
    return 0;
}

const skv_policy_desc skv_policy_full = {
    .name = "full",
    .summary = "the full KV cache, nothing evicted (the reference)",
    .keeps = "Every token's K and V in the hot tier: nothing is evicted and the budget is ignored.",
    .choose = "The reference: exact attention, against which every other policy is measured "
              "(docs/results.md). Choose it when the whole cache fits in fast memory; with `--device "
              "cuda` it runs wholly on the GPU.",
    .caps = SKV_POLICY_KEEPS_ALL | SKV_POLICY_GPU,
    .init = full_init,
};
