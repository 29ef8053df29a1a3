/* test_util.c: small helpers shared by the session tests (see test_util.h). */
#include "test_util.h"
#include <stdlib.h>

int test_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

void test_prompt(int *toks, int n, int vocab, uint32_t seed) {
    for (int i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; toks[i] = (int)((seed >> 8) % (uint32_t)vocab); }
}

int *test_identity_map(const skv_model *m) {
    const int n = m->cfg.n_layer * m->cfg.n_head;
    int *map = malloc(sizeof(int) * (size_t)n);
    if (map)
        for (int i = 0; i < n; i++) map[i] = i;
    return map;
}

skv_session_opts test_self_pair_opts(const skv_model *m, const char *policy, double budget, const int *map) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    if (skv_policy_spec_parse(policy, &o.pol)) skv_policy_spec_default("full", &o.pol);
    o.budget = budget;
    o.max_ctx = 512;
    o.T_max = 64;
    o.slm = m;
    o.map = map;
    return o;
}
