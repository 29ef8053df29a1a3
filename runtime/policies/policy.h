/* policy.h: the KV-cache policy interface of the compressed runtime (llama2.c spirit: a
 * struct of function pointers, one file per policy: runtime/policy_<name>.c).
 *
 * The session drives a policy through three calls:
 *   on_prefill  once per layer after each exact prefill, with that prefill's attention
 *               statistics (accumulated column sums, the last-w-queries sums);
 *   select      per lane (layer, KV head) before every attention over the hot tier: say
 *               which positions the hot tier holds with K+V and which with V only;
 *               the session then evicts / restores (skv_kvcache_apply);
 *   on_step     per lane after a decode attention: the hot slots' probabilities summed
 *               over the group's query heads (H2O-style accumulation).
 * A policy only chooses positions; storage, budgets and accounting belong to the session
 * and the cache, so every policy is measured the same way.
 * Budget: a lane's budget is in cost units (a K+V token costs 1, a V-only token 1/2); a
 * policy must return sets with n_kv + n_v / 2 <= budget (or everything when the budget
 * covers the whole sequence). */
#ifndef SKV_POLICY_H
#define SKV_POLICY_H
#include <stdbool.h>
#include "runtime/kv/kvcache.h"
#include "runtime/kv/select.h"
#include "kernels/cpu/compensate.h"

/* SmallKV token score from the mapped SLM head (method.md section 5 names ACC; NOW is the
 * default because it measured far closer to the full cache, docs/results.md section 2):
 *   ACC  accumulated attention over the SLM's full history (column sums)
 *   NOW  this step's attention row only (the pure "what matters now" view; default)
 *   MEAN ACC divided by the number of query rows that could see the token (n - k), which
 *        removes the accumulated score's lean towards old tokens */
typedef enum { SKV_SLM_SCORE_ACC = 0, SKV_SLM_SCORE_NOW, SKV_SLM_SCORE_MEAN } skv_slm_score;

typedef struct {
    int sinks;            /* always-kept first tokens (4) */
    int window;           /* SnapKV observation / recent window w (32) */
    int pool_kernel;      /* SnapKV max-pool kernel (7; padding kernel/2) */
    float heavy_frac;     /* H2O: heavy-hitter share of the budget (0.5), the rest recent */
    float pyramid_beta;   /* PyramidKV (20) */
    float ada_alpha;      /* Ada-KV floor blend (0.2) */
    float ems_gamma;      /* EMS candidate multiple (4) */
    float ems_tau;        /* EMS merge threshold (0.6) */
    int ems_window;       /* EMS local-score window w (0 = window, 32) */
    skv_reduce reduce;    /* per-query-head scores -> KV head (sum) */
    /* SmallKV */
    float split_crit, split_recent, split_marg;   /* 2 : 1 : 2 (in tokens) */
    bool adaptive_split;  /* critical = 80% of the SLM mass, marginal up to 95% */
    float adapt_crit_mass, adapt_marg_mass;       /* 0.8, 0.95 */
    bool no_saliency;     /* ablation: the LLM's own accumulated scores, no restore */
    bool no_marginal;     /* ablation: no V-only tokens (budget split critical:recent) */
    skv_slm_score slm_score;  /* what ranks tokens: the SLM's accumulated score (the method), or variants */
    skv_combine combine;  /* SUM / MASS / RENORM */
} skv_policy_opts;

void skv_policy_opts_default(skv_policy_opts *o);

/* SmallKV token score names, in the enum's order: "acc", "now", "mean". parse: -1 for an
 * unknown name (no error set). */
const char *skv_slm_score_name(skv_slm_score sc);
int skv_slm_score_parse(const char *name);

/* What a policy sees at the end of a prefill, for one layer. */
typedef struct {
    int layer, H, Hkv;
    int n0, n;            /* this prefill covered positions n0 .. n-1 */
    int stride;           /* row stride of colsum / obs */
    const float *colsum;  /* (H, stride): sum over the prefill's rows of A[row][k], k < n */
    const float *obs;     /* (H, stride): sum over the last obs_rows rows, or NULL */
    int obs_rows;
    const skv_kvcache *cache;   /* cold tier holds positions < n (EMS reads K/V) */
    double budget;        /* the session's (mean) lane budget at length n, cost units */
} skv_prefill_info;

/* One lane's selection request and answer. */
typedef struct {
    int layer, kvh, lane;
    int n;                /* sequence length, including the token(s) being added */
    int n0;               /* positions >= n0 have never been offered to select before */
    double budget;        /* this lane's budget in cost units (session's budget x lane share) */
    const skv_kvcache *cache;   /* current hot set (positions) */
    /* outputs, capacity n each */
    int *kv_pos; int n_kv;
    int *v_pos;  int n_v;
    /* scratch, capacity n each (skv_select_scored uses itmp and mark) */
    int *itmp; float *ftmp; unsigned char *mark;
} skv_select_io;

typedef struct skv_policy skv_policy;
struct skv_policy {
    const char *name;
    skv_policy_opts o;
    int L, H, Hkv;        /* LLM shape */
    void *st;             /* policy state */
    bool wants_colsum;    /* session computes prefill column sums for on_prefill */
    bool wants_obs;       /* ... and the last-window sums */
    bool wants_step;      /* ... and calls on_step after decode attention */
    bool uses_cold;       /* restores from the cold tier (else cold is only prefill scratch,
                             released after each prefill: evicted tokens are gone) */
    int (*on_prefill)(skv_policy *p, const skv_prefill_info *pi);
    int (*select)(skv_policy *p, skv_select_io *io);
    void (*on_step)(skv_policy *p, int layer, int kvh, const int *slot_pos, const float *slot_p, int n_slots);
    /* share of the session budget for a lane (1 = even split; PyramidKV / Ada-KV vary it).
     * NULL = 1. */
    double (*lane_share)(const skv_policy *p, int layer, int kvh, double budget);
    /* SmallKV: marginal weights for a lane: pm (g, n_v) at the V-only slots and the SLM
     * mass w (g) on the K+V slots, for query heads kvh*g .. NULL for other policies. */
    void (*marginal)(const skv_policy *p, int layer, int kvh, const int *pos_kv, int n_kv,
                     const int *pos_v, int n_v, float *pm, float *w);
    /* EMS: after the session applied a lane's selection, rewrite the kept slots' K/V and
     * multiplicities with the merged values select planned. NULL for other policies. */
    int (*after_apply)(skv_policy *p, skv_kvcache *c, int layer, int kvh);
    int (*fork)(const skv_policy *src, skv_policy *dst);   /* copy st into dst (dst = *src done) */
    void (*free_state)(skv_policy *p);
};

/* Create a policy by name: full, streamingllm, h2o, snapkv, pyramidkv, adakv, ems, smallkv.
 * NULL + error for an unknown name. */
skv_policy *skv_policy_new(const char *name, const skv_policy_opts *o, int L, int H, int Hkv);
skv_policy *skv_policy_fork(const skv_policy *p);
void skv_policy_free(skv_policy *p);
const char *skv_policy_names(void);

/* Per-policy constructors (fill p->st and the function pointers). */
int skv_policy_init_full(skv_policy *p);
int skv_policy_init_streamingllm(skv_policy *p);
int skv_policy_init_h2o(skv_policy *p);
int skv_policy_init_snapkv(skv_policy *p);
int skv_policy_init_pyramidkv(skv_policy *p);
int skv_policy_init_adakv(skv_policy *p);
int skv_policy_init_ems(skv_policy *p);
int skv_policy_init_smallkv(skv_policy *p);

/* ---- shared building blocks (policy.c) ---- */
/* Tokens of K+V affordable with a budget: floor(budget), at least 1, at most n. */
int skv_budget_tokens(double budget, int n);
/* Keep everything as K+V (positions 0..n-1). */
void skv_select_all(skv_select_io *io);
/* The standard score selection: K+V for sinks + the last `recent` positions + the top
 * `keep - sinks - recent` others by score among candidates (positions already hot as K+V
 * or >= io->n0 when `permanent`, else all). Output sorted by position. */
void skv_select_scored(skv_select_io *io, const float *score, int keep, int recent, bool permanent, int sinks);

/* H2O accumulation (policy_h2o.c), shared with SmallKV's --no-saliency ablation. */
int skv_h2o_accumulate_prefill(skv_lanescore *acc, const skv_policy *p, const skv_prefill_info *pi);
void skv_h2o_accumulate_step(skv_lanescore *acc, const skv_policy *p, int layer, int kvh, const int *pos,
                             const float *prob, int n);

/* SnapKV family (policy_snapkv.c), shared by PyramidKV and Ada-KV: pooled scores of
 * the prompt's last-window queries, generated tokens scored +inf, per-lane budget share. */
typedef struct {
    skv_lanescore score;
    int *filled;          /* [lanes] positions < filled have a score */
    double *share;        /* [lanes] multiplier of (budget - window), mean 1 */
    int kind;             /* 0 snapkv, 1 pyramidkv, 2 adakv */
} skv_snap_state;
int skv_snap_init(skv_policy *p, int kind);
/* Pool the obs sums of one layer into per-lane scores (positions < n - window). */
int skv_snap_prefill_scores(skv_policy *p, const skv_prefill_info *pi);

/* EMS's plan for one lane after its last evict+merge (policy_ems.c), for tests and
 * reports: the look-up table of the kept positions (gamma*N at most) and the centre each
 * one uses (-1: dropped into the zero class), and the centres' multiplicities. */
typedef struct {
    int n_lut;
    const int *lut_pos, *lut_centre;   /* (n_lut) position, its centre's position or -1 */
    int n_centre;
    const int *centre_pos, *centre_mult;
} skv_ems_plan;
int skv_policy_ems_plan(const skv_policy *p, int layer, int kvh, skv_ems_plan *out);

/* SmallKV's budget split of a lane budget B: critical (incl. sinks), recent, marginal. */
void skv_smallkv_split(const skv_policy_opts *o, double B, int *crit, int *recent, int *marg);

/* SmallKV's hooks for the session: the SLM's statistics and the head mapping. */
typedef struct {
    const int *map;            /* [L*H] LLM flat head -> SLM flat head (layer*h + head), or NULL (online) */
    int slm_heads;             /* h: SLM query heads per layer */
    int slm_layers;            /* early-stop depth */
    const float *const *colsum;   /* [slm_layers] -> (h, stride): accumulated over the SLM's history */
    const float *const *lastrow;  /* [slm_layers] -> (h, stride): this step's attention row */
    int stride;
} skv_slm_view;
/* Give a smallkv policy its SLM view (the session calls this once; pointers stay valid). */
int skv_policy_smallkv_attach(skv_policy *p, const skv_slm_view *v);
/* Set / replace the mapping (online matching), [L*H] entries copied. */
int skv_policy_smallkv_set_map(skv_policy *p, const int *map);
/* The current mapping [L*H] (after online matching too), or NULL (none yet / not smallkv). */
const int *skv_policy_smallkv_map(const skv_policy *p);

#endif
