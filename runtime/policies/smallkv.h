/* smallkv.h: SmallKV's pieces (method.md section 5), shared by its three files:
 *   smallkv.c         the policy: options, what it needs of the SLM (skv_slm_need), selection,
 *                     marginal weights, hooks;
 *   smallkv_online.c  online head matching: LLM head -> SLM head from the prompt's attention
 *                     when no profile gives the mapping.
 * The SLM itself is the session's (runtime/session/slm_guide.h): the policy only reads its
 * rows. Nothing outside these files touches them; tests inspect them through the accessors. */
#ifndef SKV_POLICY_SMALLKV_H
#define SKV_POLICY_SMALLKV_H
#include "policy.h"

extern const skv_policy_desc skv_policy_smallkv;

/* SmallKV token score from the mapped SLM head (method.md section 5 names ACC; NOW is the
 * default because it measured far closer to the full cache, docs/results.md section 2):
 *   ACC  accumulated attention over the SLM's full history (column sums)
 *   NOW  this step's attention row only (the pure "what matters now" view; default)
 *   MEAN ACC divided by the number of query rows that could see the token (n - k), which
 *        removes the accumulated score's lean towards old tokens */
typedef enum { SKV_SLM_SCORE_ACC = 0, SKV_SLM_SCORE_NOW, SKV_SLM_SCORE_MEAN } skv_slm_score;

/* The budget split: fixed 2:recent:2; adaptive (critical = adapt_crit of the SLM mass,
 * marginal up to adapt_marg); small (6:1:1 at budgets <= small_at of the sequence, else fixed). */
typedef enum { SKV_SPLIT_FIXED = 0, SKV_SPLIT_ADAPTIVE, SKV_SPLIT_SMALL } skv_smallkv_split_kind;

typedef struct {
    int combine;          /* skv_combine of the marginal tokens */
    int mapping;          /* 0 profile, 1 online */
    bool no_saliency;     /* ablation: the LLM's own accumulated scores, no restore */
    bool no_marginal;     /* ablation: no V-only tokens (budget split critical:recent) */
    int split;            /* skv_smallkv_split_kind */
    float small_at;       /* split small: budget fractions at or below it take 6:1:1 */
    int score;            /* skv_slm_score */
    int slm_depth;        /* SLM layers to run (0: the profile's, else the deepest mapped + 1;
                             all when online) */
    int slm_kv;           /* the SLM's cache: 0 the session's type, 1 q8, 2 q4, 3 k8v4 (kvquant.h) */
    bool key_norm;        /* quantised SLM keys stored normalised per channel (kvquant.h) */
    float slm_budget;     /* SLM cache H2O-compressed to this fraction (0 or 1: its full cache) */
    float recent;         /* recent weight of the fixed split critical:recent:marginal = 2:r:2 */
    int reduce;           /* skv_reduce: for the no-saliency ablation's H2O scores and the
                             SLM session's */
    float adapt_crit, adapt_marg;
    int online_min, online_max;   /* online matching: keep everything below online_min tokens;
                                     match on keys < online_max */
    bool slm_session;     /* run the SLM through a session even at slm_budget 1 (tests) */
    int sinks;
} skv_smallkv_opts;

/* The budget split of a lane budget B at sequence length n: critical (incl. sinks), recent,
 * marginal. Fixed: 2 : recent : 2 in tokens; small (at B <= small_at * n): 6 : 1 : 1, so
 * that at very small budgets most slots go to critical tokens (the paper's rule as the
 * method spec states it; the paper's own numbers could not be read, docs/lab/paper-protocol.md). */
void skv_smallkv_split(const skv_smallkv_opts *o, double B, int n, int *crit, int *recent, int *marg);

/* ---- online head matching (smallkv_online.c) ---- */

typedef struct {
    int L, H, W;               /* LLM layers, query heads; keys matched: < W (online_max) */
    int min_tokens;            /* match once the sequence has this many tokens */
    int sinks;
    float **llm;               /* [L] -> (H, W): the LLM's accumulated column sums */
    int *itmp;                 /* (W) scratch */
} skv_online;

skv_online *skv_online_new(int L, int H, int min_tokens, int max_tokens, int sinks);
skv_online *skv_online_fork(const skv_online *o);
void skv_online_free(skv_online *o);
/* Add a prefill's column sums ([L] -> (H, stride), keys < n) / a decode step's per-head
 * probabilities of one lane (g heads over its hot positions). */
void skv_online_add_prefill(skv_online *o, float *const *colsum, int stride, int n);
void skv_online_add_step(skv_online *o, int layer, int kvh, int g, const int *pos, int n_hot, const float *head_p);
/* Match every LLM head to the SLM head (of v's layers) with the highest top-K Jaccard
 * overlap of the accumulated scores (v's column sums) over keys sinks .. min(n, W)-1 (K =
 * 10% of them) into map [L*H]. -1 + error. */
int skv_online_match(const skv_online *o, const skv_slm_view *v, int n, int *map);

/* ---- for tests ---- */

/* The rows a selection reads, attached directly (unit tests without a model), with the
 * mapping when v->map is set. */
int skv_smallkv_attach(skv_policy *p, const skv_slm_view *v);
/* Whether its mapping is set, the mapping. */
bool skv_smallkv_mapped(const skv_policy *p);
const int *skv_smallkv_map(const skv_policy *p);

#endif
