/* policies.c: the public API's view of the policy registry (include/smallkv.h): names,
 * help text, the user page (docs/policies.md), what a spec needs, and option lookups for
 * programs that build specs from their own flags. All of it comes from the policies' tables
 * (runtime/policies/policy.h). */
#include "api.h"
#include "common/util.h"

const char *smallkv_policy_list(void) { return skv_policy_names(); }
const char *smallkv_policies_help(void) { return skv_policy_help(); }
const char *smallkv_policies_markdown(void) { return skv_policy_markdown(); }

static unsigned needs_of(const skv_policy_spec *ps) {
    unsigned n = 0;
    if (ps->desc->caps & SKV_POLICY_NEEDS_SLM) n |= SMALLKV_NEEDS_SLM;
    if (skv_policy_spec_needs_map(ps)) n |= SMALLKV_NEEDS_PROFILE;
    if (ps->desc->caps & SKV_POLICY_KEEPS_ALL) n |= SMALLKV_NO_BUDGET;
    if (!(ps->desc->caps & SKV_POLICY_GPU)) n |= SMALLKV_NO_GPU;
    return n;
}

int smallkv_policy_check(const char *spec, unsigned *needs) {
    skv_policy_spec ps;
    if (skv_policy_spec_parse(spec ? spec : "full", &ps)) return -1;
    if (needs) *needs = needs_of(&ps);
    return 0;
}

int api_policy_spec(const smallkv_options *o, skv_policy_spec *out, unsigned long long *skipped) {
    if (skipped) *skipped = 0;
    if (skv_policy_spec_parse(o->policy ? o->policy : "full", out)) return -1;
    if (o->n_policy_opts < 0 || (o->n_policy_opts > 0 && !o->policy_opts))
        return skv_error("policy options: %d given without an array", o->n_policy_opts);
    for (int i = 0; i < o->n_policy_opts; i++) {
        const smallkv_policy_opt *kv = &o->policy_opts[i];
        if (!kv->name || !kv->name[0]) return skv_error("policy option %d has no name", i);
        /* a value valid for the option wherever it exists, then set when this policy has it */
        if (skv_policy_option_check(kv->name, kv->value)) return -1;
        if (skv_policy_spec_set(out, kv->name, kv->value) == 0) continue;
        if (!o->policy_opts_lenient) return -1;
        if (skipped && i < 64) *skipped |= 1ull << i;
    }
    return 0;
}

int smallkv_options_check(const smallkv_options *o, unsigned *needs, unsigned long long *skipped, const char **label) {
    static _Thread_local char buf[512];
    if (!o) return skv_error("smallkv_options_check: no options");
    skv_policy_spec ps;
    if (api_policy_spec(o, &ps, skipped)) return -1;
    const unsigned n = needs_of(&ps);
    if (!(n & SMALLKV_NO_BUDGET) && !(o->budget > 0 && o->budget <= 1))
        return skv_error("budget %g is not a fraction in (0, 1]", o->budget);
    if (needs) *needs = n;
    if (label) { skv_policy_spec_label(&ps, buf, sizeof buf); *label = buf; }
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
