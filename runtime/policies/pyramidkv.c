/* pyramidkv.c: PyramidKV: SnapKV's scores and selection with per-layer budgets
 * falling linearly from the bottom layer to the top: with b = B - w, the top layer gets
 * b / beta, the bottom 2b - b / beta, mean b (beta = 20); every layer keeps its window w. */
#include "policy.h"

int skv_policy_init_pyramidkv(skv_policy *p) {
    if (skv_snap_init(p, 1)) return -1;
    skv_snap_state *s = p->st;
    const double beta = p->o.pyramid_beta > 0 ? p->o.pyramid_beta : 20.0;
    const double top = 1.0 / beta, bottom = 2.0 - 1.0 / beta;
    for (int l = 0; l < p->L; l++) {
        double m = p->L > 1 ? bottom + (top - bottom) * l / (p->L - 1) : 1.0;
        for (int j = 0; j < p->Hkv; j++) s->share[l * p->Hkv + j] = m;
    }
    return 0;
}
