/* adakv.c: Ada-KV: SnapKV's pooled scores; per layer the top Hkv * b scores over
 * all KV heads together (b = B - w, the even per-head share) decide how many each head
 * won (n_h); head h's share becomes floor(n_h (1 - a) + a b) (a = 0.2), so the layer's
 * total stays within Hkv * b. Shares are set at each prefill and scale with the budget. */
#include "policy.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>

static int ada_prefill(skv_policy *p, const skv_prefill_info *pi) {
    if (skv_snap_prefill_scores(p, pi)) return -1;
    skv_snap_state *s = p->st;
    const int Hkv = p->Hkv, w = p->o.window, sinks = p->o.sinks;
    int npre = pi->n - w;
    int b = skv_budget_tokens(pi->budget, pi->n) - w;
    if (npre <= sinks || b <= 0) return 0;
    /* all (lane, position) candidates of the layer, ranked by score */
    const int per = npre - sinks;
    size_t nc = (size_t)Hkv * per;
    float *sc = skv_malloc(nc * sizeof(float), "adakv scores");
    int *idx = skv_malloc(nc * sizeof(int), "adakv scores");
    if (!sc || !idx) { free(sc); free(idx); return -1; }
    for (int j = 0; j < Hkv; j++)
        for (int k = 0; k < per; k++) {
            sc[(size_t)j * per + k] = s->score.s[pi->layer * Hkv + j][sinks + k];
            idx[(size_t)j * per + k] = j * per + k;
        }
    int got = skv_topk(sc, idx, (int)nc, Hkv * b);
    int won[Hkv];
    for (int j = 0; j < Hkv; j++) won[j] = 0;
    for (int i = 0; i < got; i++) won[idx[i] / per]++;
    const double a = p->o.ada_alpha;
    for (int j = 0; j < Hkv; j++) {
        double bh = floor(won[j] * (1 - a) + a * b);
        s->share[pi->layer * Hkv + j] = bh / b;
    }
    free(sc); free(idx);
    return 0;
}

int skv_policy_init_adakv(skv_policy *p) {
    if (skv_snap_init(p, 2)) return -1;
    p->on_prefill = ada_prefill;
    return 0;
}
