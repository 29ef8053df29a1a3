/* full.c: no eviction; every token keeps K and V in the hot tier (the reference). */
#include "policy.h"

static int full_select(skv_policy *p, skv_select_io *io) {
    (void)p;
    skv_select_all(io);
    return 0;
}

int skv_policy_init_full(skv_policy *p) {
    p->select = full_select;
    return 0;
}
