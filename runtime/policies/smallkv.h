/* smallkv.h: SmallKV's pieces (method.md section 5), shared by its three files:
 *   smallkv.c         the policy: options, selection, marginal weights, hooks;
 *   smallkv_slm.c     the SLM guide: the small model run beside the LLM over the same
 *                     tokens, early-stopped, its attention column sums and last rows kept
 *                     for the selection (a plain state with its full cache, or a session of
 *                     its own whose cache H2O compresses);
 *   smallkv_online.c  online head matching: LLM head -> SLM head from the prompt's attention
 *                     when no profile gives the mapping.
 * Nothing outside these files touches them; tests inspect them through the accessors. */
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

typedef struct {
    int combine;          /* skv_combine of the marginal tokens */
    int mapping;          /* 0 profile, 1 online */
    bool no_saliency;     /* ablation: the LLM's own accumulated scores, no restore */
    bool no_marginal;     /* ablation: no V-only tokens (budget split critical:recent) */
    int split;            /* 0 fixed, 1 adaptive (critical = adapt_crit of the SLM mass,
                             marginal up to adapt_marg) */
    int score;            /* skv_slm_score */
    int slm_depth;        /* SLM layers to run (0: the profile's, else the deepest mapped + 1;
                             all when online) */
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

/* The budget split of a lane budget B: critical (incl. sinks), recent, marginal. */
void skv_smallkv_split(const skv_smallkv_opts *o, double B, int *crit, int *recent, int *marg);

/* ---- the SLM guide (smallkv_slm.c) ---- */

typedef struct skv_slm_guide {
    const skv_model *m;
    int depth;                 /* SLM layers run */
    int max_ctx;               /* row stride of colsum / lastrow */
    skv_state *st;             /* plain: the SLM with its own contiguous cache, or NULL */
    skv_subseq *sess;          /* compressed: the SLM as an H2O sub-sequence exporting its attention */
    const skv_subseq_ops *sub; /* the session layer's sub-sequences (policy.h) */
    float **colsum, **lastrow; /* [depth] -> (h, max_ctx): accumulated column sums, this step's row */
    double seconds;            /* wall time in the SLM so far */
    skv_batch *bws;            /* batched steps' workspace, kept by a batch's first guide */
    int refs;                  /* policies holding it (a verify fork borrows it) */
    /* drafting (speculative decoding): the SLM runs all run_layers (its every layer) so that
     * it has logits; each drafted step's rows go to a set of their own until the verify
     * decides which to keep (pointer swaps, no copies of the rows) */
    int run_layers;            /* layers each step runs: depth, or all when drafting */
    int spec_kmax;             /* drafted rows a round holds at most - 1 (0: not drafting) */
    bool spec_colsum;          /* keep column sums while drafting (score acc / mean read them) */
    int head_rows;             /* drafting: logits of token ids < head_rows only (0: all; forward.h) */
    float ***lr_set, ***cs_set;/* [spec_kmax + 1] -> [depth] -> (h, max_ctx) */
    int pending, pend_n0;      /* drafted rows waiting for the verify, the first one's position */
} skv_slm_guide;

/* A guide for slm at depth layers. compress in (0, 1): the SLM's cache H2O-compressed to
 * that fraction (sinks, reduce for its H2O), run as a sub-sequence of sub; as_session: a
 * sub-sequence even uncompressed. */
skv_slm_guide *skv_slm_guide_new(const skv_model *slm, int depth, int max_ctx, int T_max, bool kv_f16,
                                 double compress, bool as_session, int sinks, int reduce, const skv_subseq_ops *sub);
void skv_slm_guide_free(skv_slm_guide *g);
/* Run T tokens (a prefill, or one decode token) and update the rows; timed. -1 + error. */
int skv_slm_guide_run(skv_slm_guide *g, const int *tokens, int T, bool prefill);
/* One decode token for each of n guides: plain guides of one model and depth in one
 * batched forward, compressed ones through the session batch, the rest one by one; the
 * time is split evenly. -1 + error. */
int skv_slm_guide_step_batch(skv_slm_guide **gs, const int *tokens, int n);
skv_slm_guide *skv_slm_guide_fork(const skv_slm_guide *g);
/* dst (fresh, plain) takes base's state after the same prefill: refused (-1 + error) when
 * dst is compressed, or base ran another model or fewer layers. */
int skv_slm_guide_take(skv_slm_guide *dst, const skv_slm_guide *base);
void skv_slm_guide_mem(const skv_slm_guide *g, skv_policy_mem *m);
/* Drafting (speculative decoding; policy.h spec_*). enable: before any token, a plain
 * guide only; colsum: keep the column sums (else they are not kept while drafting);
 * head_rows: the draft vocabulary, token ids below it (0: all; skv_fwd_opts.head_rows). draft:
 * k + 1 steps from first, rows into sets 0..k, proposals into drafts[0..k) (pick's choice
 * from each step's logits, argmax without one; pick < 0 is an error). keep: sets keep-1
 * become the live rows, the SLM's length n0 + keep. -1 + error. */
int skv_slm_guide_spec_enable(skv_slm_guide *g, int kmax, bool colsum, int head_rows);
int skv_slm_guide_draft(skv_slm_guide *g, int first, int k, int *drafts,
                        int (*pick)(const float *logits, int pos, int i, void *user), void *user);
/* The drafts of n <= 64 guides of one SLM (each with its own first token, k and pick user)
 * together: step t of every guide with t <= k in one batched forward; the same rows,
 * proposals and state as n skv_slm_guide_draft calls. On error every guide is back at its
 * length before the call. */
int skv_slm_guide_draft_batch(skv_slm_guide **gs, const int *first, const int *ks, int *const *drafts,
                              int (*pick)(const float *logits, int pos, int i, void *user), void *const *users, int n);
int skv_slm_guide_spec_keep(skv_slm_guide *g, int keep);

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
/* Match every LLM head to the SLM head (of g's first depth layers) with the highest top-K
 * Jaccard overlap of the accumulated scores over keys sinks .. min(n, W)-1 (K = 10% of
 * them) into map [L*H]. -1 + error. */
int skv_online_match(const skv_online *o, const skv_slm_guide *g, int n, int *map);

/* ---- for tests ---- */

/* The rows a selection reads, attached directly (unit tests without a model). */
typedef struct {
    const int *map;            /* [L*H] LLM flat head -> SLM flat head (layer*h + head), or NULL */
    int slm_heads;             /* h: SLM query heads per layer */
    int slm_layers;
    const float *const *colsum;   /* [slm_layers] -> (h, stride) */
    const float *const *lastrow;
    int stride;
} skv_slm_view;
int skv_smallkv_attach(skv_policy *p, const skv_slm_view *v);
/* The policy's guide (NULL for another policy), whether its mapping is set, the mapping. */
const skv_slm_guide *skv_smallkv_guide(const skv_policy *p);
bool skv_smallkv_mapped(const skv_policy *p);
const int *skv_smallkv_map(const skv_policy *p);

#endif
