/* h2o.c: H2O (heavy-hitter oracle). Per lane, the accumulated (unnormalised)
 * attention each token received: prefill column sums plus every decode row over the hot
 * tokens, reduced over the group's query heads (sum; mean divides by g; max applies to the
 * prefill sums, decode rows are summed). Keep the sinks, the heavy hitters (heavy_frac of
 * the budget) and the recent window (the rest); eviction is permanent. */
#include "policy.h"
#include "common/util.h"
#include <stdlib.h>

typedef struct { skv_lanescore acc; } h2o_state;

/* Shared with SmallKV's --no-saliency ablation: add one prefill's column sums into acc. */
int skv_h2o_accumulate_prefill(skv_lanescore *acc, const skv_policy *p, const skv_prefill_info *pi) {
    if (skv_lanescore_reserve(acc, pi->n)) return -1;
    const int g = p->H / p->Hkv;
    float *tmp = skv_malloc((size_t)pi->n * sizeof(float), "h2o scores");
    if (!tmp) return -1;
    for (int j = 0; j < p->Hkv; j++) {
        skv_reduce_group(tmp, pi->colsum + (size_t)j * g * pi->stride, g, (size_t)pi->stride, pi->n, p->o.reduce);
        float *a = acc->s[pi->layer * p->Hkv + j];
        for (int k = 0; k < pi->n; k++) a[k] += tmp[k];
    }
    free(tmp);
    return 0;
}

void skv_h2o_accumulate_step(skv_lanescore *acc, const skv_policy *p, int layer, int kvh, const int *pos,
                             const float *prob, int n) {
    float *a = acc->s[layer * p->Hkv + kvh];
    const float scale = p->o.reduce == SKV_REDUCE_MEAN ? 1.0f / (float)(p->H / p->Hkv) : 1.0f;
    for (int i = 0; i < n; i++)
        if (pos[i] < acc->cap) a[pos[i]] += prob[i] * scale;
}

static int h2o_prefill(skv_policy *p, const skv_prefill_info *pi) {
    h2o_state *s = p->st;
    return skv_h2o_accumulate_prefill(&s->acc, p, pi);
}

static int h2o_select(skv_policy *p, skv_select_io *io) {
    h2o_state *s = p->st;
    if (skv_lanescore_reserve(&s->acc, io->n)) return -1;
    int keep = skv_budget_tokens(io->budget, io->n);
    int heavy = (int)(keep * p->o.heavy_frac);
    skv_select_scored(io, s->acc.s[io->lane], keep, keep - heavy, true, p->o.sinks);
    return 0;
}

static void h2o_step(skv_policy *p, int layer, int kvh, const int *pos, const float *prob, int n) {
    h2o_state *s = p->st;
    skv_h2o_accumulate_step(&s->acc, p, layer, kvh, pos, prob, n);
}

static int h2o_fork(const skv_policy *src, skv_policy *dst) {
    const h2o_state *a = src->st;
    h2o_state *b = skv_calloc(1, sizeof *b, "h2o state");
    if (!b) return -1;
    if (skv_lanescore_copy(&b->acc, &a->acc)) { free(b); return -1; }
    dst->st = b;
    return 0;
}

static void h2o_free(skv_policy *p) {
    h2o_state *s = p->st;
    if (!s) return;
    skv_lanescore_free(&s->acc);
    free(s);
    p->st = NULL;
}

int skv_policy_init_h2o(skv_policy *p) {
    h2o_state *s = skv_calloc(1, sizeof *s, "h2o state");
    if (!s) return -1;
    if (skv_lanescore_init(&s->acc, p->L * p->Hkv)) { free(s); return -1; }
    p->st = s;
    p->wants_colsum = true;
    p->wants_step = true;
    p->on_prefill = h2o_prefill;
    p->select = h2o_select;
    p->on_step = h2o_step;
    p->fork = h2o_fork;
    p->free_state = h2o_free;
    return 0;
}
