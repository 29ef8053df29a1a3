/* registry.c: the list of policies, one line each. Adding a policy: its file (a
 * skv_policy_desc with its option table), one line here, and its tests. */
#include "policy.h"
#include <stdio.h>
#include <string.h>

/* one line per policy, in the order --help and the evaluation list them */
#define POLICIES(X) \
    X(full)         \
    X(streamingllm) \
    X(h2o)          \
    X(snapkv)       \
    X(pyramidkv)    \
    X(pyramidinfer) \
    X(adakv)        \
    X(ems)          \
    X(quest)        \
    X(oracle)       \
    X(smallkv)      \
    X(kvzip)

#define DECLARE(n) extern const skv_policy_desc skv_policy_##n;
POLICIES(DECLARE)
#define ENTRY(n) &skv_policy_##n,
static const skv_policy_desc *const registry[] = {POLICIES(ENTRY)};

int skv_policy_count(void) { return (int)(sizeof registry / sizeof *registry); }

const skv_policy_desc *skv_policy_at(int i) { return i >= 0 && i < skv_policy_count() ? registry[i] : NULL; }

const skv_policy_desc *skv_policy_find(const char *name) {
    for (int i = 0; name && i < skv_policy_count(); i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

const char *skv_policy_names(void) {
    static char names[256];
    if (!names[0]) {
        size_t w = 0;
        for (int i = 0; i < skv_policy_count() && w < sizeof names; i++)
            w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", i ? ", " : "", registry[i]->name);
    }
    return names;
}
