/* oracle.c: an upper bound, not a method. Each selection computes the LLM's own exact
 * attention of the current query over every token in the cold tier (per query head
 * softmax(q . k / sqrt(d)) over positions 0 .. n-1, summed over the group's query heads)
 * and keeps the top `budget` tokens by it, restoring evicted ones from the cold tier. No
 * sinks, no recent window: only what this step's attention ranks highest. It reads the whole
 * cache every step (as much as full attention), so it saves no time and no memory; it shows
 * how close any token selection sharing one set per KV head can come to the full cache at
 * this budget. At a budget of the whole sequence it keeps everything (equals full). */
#include "policy.h"
#include "common/util.h"
#include "runtime/kv/kvcache.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int d, cap;
    float *row;      /* (d) */
    float *logit;    /* (cap) one head's logits, then probabilities */
} oracle_state;

static int oracle_select(skv_policy *p, skv_select_io *io) {
    oracle_state *s = p->st;
    const int n = io->n, g = p->H / p->Hkv, d = io->d;
    io->n_v = 0;
    if (!io->q) return skv_error("oracle: selection without the current query");
    const int keep = skv_budget_tokens(io->budget, n);
    if (keep >= n) { skv_select_all(io); return 0; }
    if (s->d != d) {
        free(s->row);
        if (!(s->row = skv_malloc((size_t)d * sizeof(float), "oracle scratch"))) return -1;
        s->d = d;
    }
    if (s->cap < n) {
        int cap = s->cap ? s->cap : 256;
        while (cap < n) cap *= 2;
        float *l = realloc(s->logit, (size_t)cap * sizeof(float));
        if (!l) return skv_error("out of memory (oracle logits)");
        s->logit = l;
        s->cap = cap;
    }
    float *score = io->ftmp;
    memset(score, 0, (size_t)n * sizeof(float));
    const float scale = 1.0f / sqrtf((float)d);   /* the attention kernels' scale */
    for (int t = 0; t < g; t++) {
        const float *q = io->q + (size_t)(io->kvh * g + t) * d;
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            const void *src = skv_kvcache_cold_k(io->cache, io->layer, io->kvh, k);
            const float *key;
            if (src) { skv_kv_load_row(s->row, src, d, io->cache->f16); key = s->row; }
            else if (!(key = skv_kvcache_fresh_k(io->cache, io->layer, io->kvh, k)))
                return skv_error("oracle: the key of position %d is in neither tier", k);
            float dot = 0;
            for (int c = 0; c < d; c++) dot += q[c] * key[c];
            s->logit[k] = dot * scale;
            if (s->logit[k] > mx) mx = s->logit[k];
        }
        double z = 0;
        for (int k = 0; k < n; k++) z += (s->logit[k] = expf(s->logit[k] - mx));
        for (int k = 0; k < n; k++) score[k] += (float)(s->logit[k] / z);
    }
    skv_select_scored(io, score, keep, 0, false, 0);
    return 0;
}

static void oracle_free(skv_policy *p) {
    oracle_state *s = p->st;
    if (!s) return;
    free(s->row); free(s->logit); free(s);
    p->st = NULL;
}

/* a fork starts with empty scratch (it holds no history) */
static int oracle_fork(const skv_policy *src, skv_policy *dst) {
    (void)src;
    return (dst->st = skv_calloc(1, sizeof(oracle_state), "oracle state")) ? 0 : -1;
}

static int oracle_init(skv_policy *p, const skv_policy_env *env) {
    (void)env;
    if (!(p->st = skv_calloc(1, sizeof(oracle_state), "oracle state"))) return -1;
    p->select = oracle_select;
    p->fork = oracle_fork;
    p->free_state = oracle_free;
    return 0;
}

const skv_policy_desc skv_policy_oracle = {
    .name = "oracle",
    .summary = "BOUND, not a method: the top tokens of the LLM's exact current attention over the whole cache, each step",
    .keeps = "At every step, the top tokens by the LLM's own exact attention for the current query "
             "over the whole cache (restored from the cold tier); no sinks and no recent window.",
    .choose = "A bound, not a deployable method: it reads every key at every step, so it saves neither "
              "time nor memory. Use it to see how close any selection of one token set per KV head can "
              "come to the full cache at a given budget.",
    .caps = SKV_POLICY_COLD_TIER | SKV_POLICY_QUERY,
    .init = oracle_init,
};
