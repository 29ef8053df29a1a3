/* policy_ems.c: EMS (evict-then-merge with a global-local score), method.md section 6.
 * Not implemented yet: creating it fails with a clear message. */
#include "policy.h"
#include "util.h"

int skv_policy_init_ems(skv_policy *p) {
    (void)p;
    return skv_error("ems: not implemented yet");
}
