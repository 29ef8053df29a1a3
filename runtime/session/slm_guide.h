/* slm_guide.h: the companion model a session runs beside its LLM when its policy asks for
 * one (policy.h skv_slm_need; SmallKV's SLM): the small model over the same tokens, before
 * the LLM, to its early-stop depth, keeping per layer the attention column sums over its
 * whole history and this step's row. The session owns it (creates, runs, forks, derives,
 * reports it) and hands the policy only its rows (skv_slm_view); the CPU step, the CUDA
 * backend and speculative decoding (the guide drafts) all share this one guide.
 * Plain: a forward state with its own full contiguous cache. Compressed (slm_budget < 1):
 * a session of its own under H2O, exporting every attention row it computes. */
#ifndef SKV_SLM_GUIDE_H
#define SKV_SLM_GUIDE_H
#include "runtime/policies/policy.h"

typedef struct skv_session skv_session;

typedef struct skv_slm_guide {
    const skv_model *m;
    int depth;                 /* SLM layers run */
    int max_ctx;               /* row stride of colsum / lastrow */
    skv_state *st;             /* plain: the SLM with its own contiguous cache, or NULL */
    skv_session *sess;         /* compressed: the SLM as an H2O session exporting its attention */
    float **colsum, **lastrow; /* [depth] -> (h, max_ctx): accumulated column sums, this step's row */
    double seconds;            /* wall time in the SLM so far */
    skv_batch *bws;            /* batched steps' workspace, kept by a batch's first guide */
    int refs;                  /* sessions holding it (a verify fork borrows it) */
    /* drafting (speculative decoding): the SLM runs all run_layers (its every layer) so that
     * it has logits; each drafted step's rows go to a set of their own until the verify
     * decides which to keep (pointer swaps, no copies of the rows) */
    int run_layers;            /* layers each step runs: depth, or all when drafting */
    int spec_kmax;             /* drafted rows a round holds at most - 1 (0: not drafting) */
    bool spec_colsum;          /* keep column sums while drafting (scores that read them) */
    int head_rows;             /* drafting: logits of token ids < head_rows only (0: all; forward.h) */
    float ***lr_set, ***cs_set;/* [spec_kmax + 1] -> [depth] -> (h, max_ctx) */
    int pending, pend_n0;      /* drafted rows waiting for the verify, the first one's position */
} skv_slm_guide;

/* A guide for slm as need asks (depth layers; compress in (0, 1): its cache H2O-compressed
 * to that fraction with need's sinks and reduce; as_session: a session even uncompressed).
 * NULL + error. */
skv_slm_guide *skv_slm_guide_new(const skv_model *slm, const skv_slm_need *need, int max_ctx, int T_max, bool kv_f16);
void skv_slm_guide_free(skv_slm_guide *g);
/* The rows a policy reads (its view: no mapping; policy.h). t >= 0: drafted row t of the
 * pending verify; -1: the live rows. */
skv_slm_view skv_slm_guide_view(const skv_slm_guide *g, int t);
/* Run T tokens (a prefill, or one decode token) and update the rows; timed. -1 + error. */
int skv_slm_guide_run(skv_slm_guide *g, const int *tokens, int T, bool prefill);
/* One decode token for each of n guides: plain guides of one model and depth in one
 * batched forward, compressed ones through the session batch, the rest one by one; the
 * time is split evenly. -1 + error. */
int skv_slm_guide_step_batch(skv_slm_guide **gs, const int *tokens, int n);
skv_slm_guide *skv_slm_guide_fork(const skv_slm_guide *g);
/* dst (fresh, plain) takes base's state after the same prefill: refused (-1 + error) when
 * dst is compressed, or base ran another model, fewer layers, another cache type, or kept no
 * column sums that dst keeps. */
int skv_slm_guide_take(skv_slm_guide *dst, const skv_slm_guide *base);
/* whether skv_slm_guide_take(dst, base) would take (no error set) */
bool skv_slm_guide_can_take(const skv_slm_guide *dst, const skv_slm_guide *base);
/* Its weights, cache, score buffers and time into m's model/cache/score/seconds fields. */
void skv_slm_guide_mem(const skv_slm_guide *g, skv_policy_mem *m);
/* Drafting (speculative decoding). enable: before any token, a plain guide only; colsum:
 * keep the column sums (else they are not kept while drafting); head_rows: the draft
 * vocabulary, token ids below it (0: all; skv_fwd_opts.head_rows). draft: k + 1 steps from
 * first, rows into sets 0..k, proposals into drafts[0..k) (pick's choice from each step's
 * logits, argmax without one; pick < 0 is an error). keep: sets keep-1 become the live
 * rows, the SLM's length n0 + keep. -1 + error. */
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

#endif
