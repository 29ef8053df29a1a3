/* kvzip.h: what KVzip's policy (kvzip.c: options, budgets, selection) and its
 * context-reconstruction scoring pass (kvzip_pass.c) share. */
#ifndef SKV_POLICY_KVZIP_H
#define SKV_POLICY_KVZIP_H
#include "policy.h"

typedef struct {
    int sinks;            /* first tokens kept fixed: the scoring softmax's sinks */
    int chunk;            /* context tokens reconstructed per scoring pass */
    int level;            /* skv_kvzip_level: how the budget is spread over lanes */
    int tail;             /* previous chunk's last tokens quoted in a later chunk's prompt */
} skv_kvzip_opts;

typedef enum { SKV_KVZIP_GLOBAL = 0, SKV_KVZIP_LAYER = 1, SKV_KVZIP_LANE = 2 } skv_kvzip_level;

typedef struct {
    skv_lanescore score;  /* [lanes] -> per position: the max reconstruction attention
                             (+inf: the sinks and every token after a compression) */
    int *filled;          /* [lanes] positions < filled have a score */
    unsigned char *fresh; /* [lanes] a prefill just scored the lane: its next selection compresses */
    int *keep;            /* [lanes] tokens the lane keeps at that compression */
    double *share;        /* [lanes] keep / the session's mean lane budget then (lane_share) */
    int *prompt[2];       /* the reconstruction prompt's ids: first chunk, later chunks */
    int n_prompt[2];
    int *suffix;          /* the chat template's assistant header after it ("\n" without one) */
    int n_suffix;
    const skv_model *m;
    int T_max;
    bool kv_f16;
    /* the scoring passes' cost (mem) */
    double pass_seconds;  /* wall time, all passes */
    size_t pass_peak;     /* largest transient bytes one pass held */
    long pass_tokens;     /* reconstruction tokens run through the LLM */
} skv_kvzip_state;

/* Score positions begin .. n-1 of every lane of every layer (their scores must be 0 on entry)
 * by reconstructing them chunk by chunk, after a first prefill (pi->n0 == 0): ids are the
 * token ids of positions 0 .. n-1, staged in the session's cold tier. Runs the
 * LLM over each chunk's reconstruction input with its own activations and K/V buffers, freed
 * before returning; the session's cache is only read. -1 + error. */
int skv_kvzip_pass(skv_policy *p, const skv_prefill_info *pi, const int *ids, int begin);

#endif
