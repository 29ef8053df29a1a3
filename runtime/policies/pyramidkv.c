/* pyramidkv.c: PyramidKV: SnapKV's scores and selection with per-layer budgets
 * falling linearly from the bottom layer to the top: with b = B - w, the top layer gets
 * b / beta, the bottom 2b - b / beta, mean b (beta = 20); every layer keeps its window w. */
#include "snapkv.h"

static const skv_opt_desc pyramid_opt_table[] = {
    {"beta", NULL, SKV_OPT_FLOAT, offsetof(skv_snap_opts, beta), 20, 1, 1000, NULL, 0, 20,
     "the top layer keeps 1/beta of the mean budget, the bottom 2 - 1/beta"},
    SKV_OPT_POOL,
    SKV_OPT_REDUCE(skv_snap_opts),
    SKV_OPT_SINKS(skv_snap_opts),
    SKV_OPT_WINDOW(skv_snap_opts),
    SKV_OPT_DECODE,
};

static int pyramid_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    if (skv_snap_init(p)) return -1;
    skv_snap_state *s = p->st;
    const double beta = ((const skv_snap_opts *)p->opts)->beta;
    const double top = 1.0 / beta, bottom = 2.0 - 1.0 / beta;
    for (int l = 0; l < p->L; l++) {
        double m = p->L > 1 ? bottom + (top - bottom) * l / (p->L - 1) : 1.0;
        for (int j = 0; j < p->Hkv; j++) s->share[l * p->Hkv + j] = m;
    }
    return 0;
}

const skv_policy_desc skv_policy_pyramidkv = {
    .name = "pyramidkv",
    .summary = "SnapKV with budgets falling linearly from the bottom layer to the top",
    .keeps = "SnapKV's selection with per-layer budgets falling linearly from the bottom layer (more) "
             "to the top (1/`beta` of the mean), the mean unchanged; generated tokens as in SnapKV "
             "(`decode`).",
    .choose = "A published SnapKV variant, for comparison: on the evaluation pair it was never ahead of "
              "SnapKV at any budget measured (docs/results.md section 1, both held to the budget).",
    .caps = SKV_POLICY_GPU,
    .opts = pyramid_opt_table,
    .n_opts = sizeof pyramid_opt_table / sizeof *pyramid_opt_table,
    .opts_size = sizeof(skv_snap_opts),
    .init = pyramid_init,
};
