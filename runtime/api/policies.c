/* policies.c: the public API's view of the policy registry (include/smallkv.h): names,
 * help text, the user page (docs/policies.md), what a spec needs, and option lookups for
 * programs that build specs from their own flags. All of it comes from the policies' tables
 * (runtime/policies/policy.h). */
#include "api.h"
#include "common/util.h"

const char *smallkv_policy_list(void) { return skv_policy_names(); }
const char *smallkv_policies_help(void) { return skv_policy_help(); }
const char *smallkv_policies_markdown(void) { return skv_policy_markdown(); }

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
