/* session.h: one sequence's run of the LLM over the compressed KV cache.
 *
 * A session = the LLM's activation state (skv_state, its contiguous cache released: the
 * session owns the KV storage through the forward's attn hook) + the two-tier cache
 * (kvcache.h) + a policy instance (runtime/policies/policy.h), which may run work of its own
 * beside the LLM (SmallKV: its small model).
 *   prefill  exact attention over the cold tier (every baseline does this), then each
 *            layer's statistics go to the policy and the hot tier is compressed to budget;
 *   step     one token: per layer the hook stores K/V in cold, asks the policy for each
 *            lane's hot set, evicts/restores, and runs the compensated attention.
 *   fork     a copy that continues identically: hot tier and policy state copied; the cold
 *            tier shared copy-on-write (kvcache.h), so many forks of one prefill cost one
 *            cold tier (skv_session_mem_total counts it once).
 * Tiers: only policies with SKV_POLICY_COLD_TIER keep a cold tier. Every other policy evicts
 * permanently: its prefill stages the new K/V in the cold buffer for the exact attention
 * and the selection, then releases it (cold = 0 bytes between calls; the staging peak is
 * transient). A later prefill of such a policy attends over what the hot tier holds plus
 * the staged block. A policy that keeps everything (`full`) keeps everything hot.
 * Budget: a fraction of the current length (0 < budget <= 1), of the prompt length at the
 * first compression (budget_prompt), or an absolute token count (budget_abs), per lane, in
 * cost units (K+V token 1, V-only 1/2). */
#ifndef SKV_SESSION_H
#define SKV_SESSION_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "runtime/engine/forward.h"
#include "runtime/kv/kvcache.h"
#include "runtime/policies/policy.h"
#include "slm_guide.h"
#include "kernels/cpu/compensate.h"

typedef struct {
    skv_policy_spec pol;       /* the policy and its options (policy.h; default: full) */
    double budget;             /* fraction of the current length, or tokens when budget_abs */
    bool budget_abs;
    bool per_head;             /* selection granularity: each attention (query) head keeps its
                                  own set, the hot tier stores their union per KV head and each
                                  head attends only to its own (a policy with
                                  SKV_POLICY_PER_HEAD); false: one set per KV head */
    bool budget_prompt;        /* budget base: a fraction of the prompt length at the first
                                  compression, fixed from then on (H2O's generation code), instead
                                  of the current length each step */
    bool kv_f16;               /* fp16 storage in both tiers (and the SLM cache) */
    int max_ctx;               /* longest sequence in tokens */
    int T_max;                 /* prefill block size (default 256) */
    /* what a policy with SKV_POLICY_NEEDS_SLM uses */
    const skv_model *slm;
    const int *map;            /* [L*H] LLM flat head -> SLM flat head (layer*h + head) */
    int map_depth;             /* SLM layers the mapping's profile chose (0: unknown) */
    int n_layers;              /* run only the first n layers (0 = all; then no logits): SLM use */
    int head_rows;             /* logits of token ids < head_rows only, the rest -INFINITY (0 =
                                  all; skv_fwd_opts.head_rows): a drafter's cheaper LM head */
    /* A prefill base (skv_session_derive): one exact prefill that keeps every K/V in the
     * cold tier and every statistic a policy's compression reads (column sums, window sums
     * over obs_rows rows), lets its policy prepare what derived sessions of that policy take
     * over (SmallKV: the SLM run to all layers, or to the policy's slm_depth), and
     * compresses nothing. It cannot step. */
    bool prefill_base;
    int obs_rows;              /* a prefill base's window rows (default 32) */
} skv_session_opts;

void skv_session_opts_default(skv_session_opts *o);
/* The one place that turns a policy and a model pair into session options (every public-API
 * session is built here, the evaluation's cells too, runtime/api/cells.c): defaults, then
 * pol at budget for llm; a policy that needs the SLM gets slm, map and the profile's depth
 * map_depth (0: unknown), and is refused without an SLM, or without a mapping when its
 * options need one, or with a budget outside (0, 1].
 * The caller sets the rest (cache type, lengths). -1 + error. */
int skv_session_opts_for(skv_session_opts *o, const skv_policy_spec *pol, double budget, const skv_model *slm,
                         const int *map, int map_depth);

typedef struct {
    size_t hot_used, hot_cap;    /* LLM hot tier, bytes, including hot_meta */
    size_t hot_meta;             /* part of hot_used / hot_cap: the policy's selection metadata
                                    kept with the hot tier (Quest's page bounds) */
    size_t cold_used, cold_cap;  /* LLM cold tier, bytes (this session reads them) */
    size_t cold_shared;          /* part of cold_used shared with forks (counted once by
                                    skv_session_mem_total) */
    size_t slm_weights;          /* SLM weight bytes (whole file + pair-packed decode copies) */
    size_t slm_cache;            /* SLM K/V bytes in use (early-stop layers; the SLM session's hot
                                    tier when compressed) */
    size_t slm_scores;           /* SLM column-sum / last-row buffers */
    double hot_tokens;           /* sum over lanes of n_kv + n_v/2 */
    double budget_tokens;        /* sum over lanes of the lane budgets */
    size_t full_equiv;           /* bytes the full cache would take at this length */
    double slm_seconds;          /* wall time in the policy's SLM so far (a batched SLM step is
                                    split evenly over its sessions) */
    double pass_seconds;         /* kvzip: its scoring passes' wall time (extra prefill) */
    size_t pass_peak;            /* kvzip: the most transient bytes one scoring pass held */
} skv_session_mem;

enum { SKV_SLM_ALT_MAX = 4 };   /* a prefill base's kept SLM states of other settings */
typedef struct skv_session skv_session;
struct skv_session {
    const skv_model *m;
    skv_session_opts o;
    skv_state *st;             /* LLM activations; st->logits after prefill / step */
    skv_kvcache *kv;
    skv_policy *pol;
    skv_slm_guide *slm;        /* the small model the policy scores with (its skv_slm_need), or
                                  NULL: run before the LLM over every token, forked, derived and
                                  reported with the session, and its drafter (shared with a
                                  verify fork while drafted rows are pending) */
    int n;                     /* tokens in the sequence */
    int n_base;                /* length at the first compression (budget_prompt's base; 0: none yet) */
    int n_sel;                 /* positions < n_sel were offered to select before */
    bool in_prefill;
    bool in_verify;            /* in skv_session_verify: a block of decode rows */
    /* prefill statistics (H, pre_stride) per layer */
    float **pre_colsum, **pre_obs;
    int pre_stride, pre_obs_from;
    float *obs_out;            /* (T_max, H, d) throwaway output of the window re-run */
    float **q_last;            /* [L] -> (H, d): the last prompt token's query, for a policy
                                  that reads the query (SKV_POLICY_QUERY), else NULL */
    /* per-layer selection buffers */
    int **sel_kv, **sel_v;     /* [Hkv] -> (max_ctx) */
    int *n_selkv, *n_selv;     /* [Hkv] */
    int *itmp; float *ftmp; unsigned char *mark;   /* (max_ctx) */
    /* per_head: per lane (Hkv) -> (g, max_ctx): the heads' kept positions (select's
     * head_keep), and which hot K+V slot each head attends (the kernels' head_mask) */
    unsigned char *head_keep, *head_mask;
    float *probs, *scr, *pm, *w;                   /* attention scratch */
    double *lane_budget;       /* [Hkv] */
    int restores;              /* rows promoted from the cold tier so far (not appends) */
    int L_act;                 /* layers run (o.n_layers or all) */
    /* export of every attention row (a policy's SLM run as a session): [L_act] -> (H, x_stride) */
    float **x_colsum, **x_lastrow;
    int x_stride;
    float *x_tmp; size_t x_tmp_n;   /* (H, cold_cap) last-row staging */
    /* one decode layer's lanes, shared by the threads of a forward's team (sess_attn) */
    skv_comp_args *lane_args;  /* [Hkv] */
    float **lane_head_p;       /* [Hkv] per-head probabilities to export, or NULL */
    size_t lane_work;          /* multiply-adds of the layer's compensated attention */
    int team_rc;               /* the layer's status, read by every thread */
    char team_err[256];        /* its message, copied to every thread's error */
    /* batched decode workspace (skv_session_step_batch), owned by the batch's first session */
    skv_batch *bws;
    /* the last verify pass's attention inputs, for skv_session_verify_replay: per layer
     * (vcap_T, H*d + 2*Hkv*d) floats, q then k then v of each row (rotated, biased) */
    float *vcap;
    size_t vcap_cap;           /* floats allocated */
    int vcap_T, vcap_n0;       /* rows captured, and the length before them */
    /* a prefill base: the ids it was prefilled with (derived sessions' policies read them) and
     * what a derived session's policy left for the next (skv_prefill_memo) */
    int *base_ids;
    skv_prefill_memo *memo;
    /* SLM states after the base's prompt that derived sessions ran with other settings than
     * the base's SLM (a quantised cache), kept for the next with the same (skv_session_derive) */
    skv_slm_guide *slm_alt[SKV_SLM_ALT_MAX];
    int n_slm_alt;
};

skv_session *skv_session_new(const skv_model *m, const skv_session_opts *o);
void skv_session_free(skv_session *s);
/* Append T prompt tokens (any T >= 1, split into T_max blocks); logits of the last token
 * in s->st->logits. -1 + error. */
int skv_session_prefill(skv_session *s, const int *tokens, int T);
/* The hot tier's positions per lane, for checks against other implementations: a header
 * "# kept policy=NAME n=N budget=B layers=L kv_heads=K", then per (layer, KV head) one line
 * "layer kvh pos..." (sorted K+V positions; V-only positions follow " |"). A session whose
 * compression runs with SKV_DUMP_KEPT=path set appends this to path after every prefill
 * compression (prefills and derived sessions; decode steps are not dumped), and every
 * prefill first appends "# tokens from=N0 id..." (its token ids, from position N0). */
int skv_session_dump_kept(const skv_session *s, FILE *f);
/* One decode token; logits in s->st->logits. -1 + error. */
int skv_session_step(skv_session *s, int token);
/* Several sessions, one token each, decoded together: the LLM's matrix products run once
 * for all n rows (skv_forward_batch), attention per session through its own cache and
 * policy; the sessions' SLMs step batched too (skv_slm_guide_step_batch). Sessions that cannot join (empty ones, which
 * prefill; a different model or depth) step on their own. Workspaces are kept in ss[0]
 * (reused while the same session leads the batch). Same results as skv_session_step one
 * by one, up to the matmul path note in forward.h. -1 + error naming the entry; after an
 * error the sessions of the batch are in an undefined state. */
int skv_session_step_batch(skv_session **ss, const int *tokens, int n);
/* A new session with options o that continues from the exact prefill of base (a
 * prefill_base session, prefilled once): it shares base's cold tier copy-on-write, copies
 * the statistics its policy reads, takes over base's SLM run (to its own depth, when its
 * policy needs one), then compresses exactly as its own
 * prefill of the same tokens would (its policy reads base's prompt ids, and what its scoring
 * left in base's memo for the next session: skv_prefill_memo). One exact prefill thus serves
 * every policy and budget.
 * Refused (NULL + error) when the result could differ from a prefill of its own: another
 * model, max_ctx or cache type, another observation window, n_layers, or an SLM deeper or
 * other than base's, or a compressed one. */
skv_session *skv_session_derive(skv_session *base, const skv_session_opts *o);
/* Speculative decoding (runtime/api/speculate.c). verify: append T tokens (1 <= T <= T_max)
 * in one forward pass whose every row is exactly the decode step it stands for (per layer,
 * row by row: the policy's selection at that length, the decode attention, on_step; matrix
 * products below the GEMM threshold, else refused), logits of all T rows in s->st->logits
 * (T, vocab). Refused (verify_ok false) for a session that runs work of its own before or
 * after each step (an SLM that does not draft, online matching): that work is per token
 * across all layers. truncate:
 * forget positions >= n (n >= 1), as if they had never been stepped; only for a policy that
 * keeps every token (full: its cache only appends), others roll back through a fork. -1 +
 * error; after a verify error the session is in an undefined state (free it). */
int skv_session_verify(skv_session *s, const int *tokens, int T);
/* skv_session_verify for n sessions of one model at once: rows[i] tokens for ss[i] (tokens:
 * ss[0]'s, then ss[1]'s, ...), the matrix products run once over all the rows
 * (skv_forward_batch_rows), each session's rows attend exactly as its own verify would, so
 * every session ends as skv_session_verify(ss[i], its tokens, rows[i]) leaves it, logits
 * included. The rows together must stay below the GEMM threshold (skv_session_verify_max + 1).
 * ws: the caller's batch workspace, grown as needed (free it with skv_batch_free). -1 +
 * error (then the sessions are in an undefined state). */
int skv_session_verify_batch(skv_session **ss, const int *tokens, const int *rows, int n, skv_batch **ws);
/* Rollback without a second LLM pass. v is a fork of s (same length as s when forked) on
 * which skv_session_verify ran over T rows; s appends the first keep (1..T) of them exactly
 * as plain decoding would have stepped them: per layer and row, the policy's selection,
 * the decode attention and its step update run again on s from the q / k / v that v's pass
 * captured, and the logits of rows 0..keep-1 are copied from v. Row t's inputs depend only
 * on rows before it, so v's first keep rows are what s's own verify of them would compute;
 * what is skipped is the matrix products (the whole LLM pass but the attention). -1 +
 * error (then s is in an undefined state). */
int skv_session_verify_replay(skv_session *s, const skv_session *v, int keep);
int skv_session_truncate(skv_session *s, int n);
bool skv_session_verify_ok(const skv_session *s);
/* Speculative decoding with the session's SLM as the drafter (it already runs over every
 * token, so its pass drafts at no extra cost; slm_guide.h). enable: before the first token,
 * drafts of up to kmax tokens a round from the logits of token ids < head_rows (0: all);
 * refused without an SLM, with a compressed one, or while online head matching is pending.
 * draft_batch: for each of n <= 64 drafting sessions of one SLM, the SLM steps over first[i]
 * (the LLM's token at its length) then greedily over its own proposals, ks[i] + 1 steps,
 * each step's rows kept for the verify pass (skv_session_verify reads row t at position
 * n + t), proposals into drafts[i][0..ks[i]) (pick's choice when set, else argmax).
 * keep: the verify kept the first keep rows; the SLM forgets the others (no-op for a
 * session that does not draft). -1 + error. */
bool skv_session_drafting(const skv_session *s);
int skv_session_draft_enable(skv_session *s, int kmax, int head_rows);
int skv_session_draft_batch(skv_session **ss, const int *first, const int *ks, int *const *drafts,
                            int (*pick)(const float *logits, int pos, int i, void *user), void *const *users, int n);
int skv_session_draft_keep(skv_session *s, int keep);
/* The most rows skv_session_verify takes for s (its model's GEMM threshold - 1, at most T_max). */
int skv_session_verify_max(const skv_session *s);
/* Deep copy that continues identically. NULL + error. */
skv_session *skv_session_fork(const skv_session *s);
const float *skv_session_logits(const skv_session *s);
void skv_session_mem_report(const skv_session *s, skv_session_mem *r);
/* Bytes of n sessions together (e.g. forks of one prefill): hot tiers and SLM caches
 * summed, cold tiers with each shared segment counted once (cold_used; cold_shared 0). */
void skv_session_mem_total(skv_session *const *ss, int n, skv_session_mem *r);
/* Export every attention of layers < L_act into colsum / lastrow [L_act] -> (H, stride):
 * column sums accumulated over the whole history, last rows of the latest query. */
void skv_session_export(skv_session *s, float **colsum, float **lastrow, int stride);
/* One decode step of one layer, written once for every device: the CPU attention hook and
 * the CUDA session's (runtime/backend/session_cuda.c) both run
 *   prepare  the new row (k, v (Hkv, d)) into the fresh slot and the cold tier, the policy's
 *            selection at length pos0 + 1 (seeing q (H, d), the layer's query on the host,
 *            when it reads one: evictions, restores from cold), then per lane the
 *            compensated attention's arguments on the host tier (s->lane_args: slots, the
 *            policy's marginal weights pm / w, a zeroed slot_acc when the policy keeps
 *            scores, head_p when it wants them);
 *   attend   the device's own: each lane's skv_compensate (CPU) or its launch over the
 *            device's copy of the same slots, the slot scores brought back into
 *            s->lane_args[j].slot_acc;
 *   finish   the policy's step update from those scores, an SLM session's export, and the
 *            lanes' buffers released.
 * prepare: -1 + error. */
int skv_session_step_prepare(skv_session *s, int layer, const float *q, const float *k, const float *v, int pos0);
void skv_session_step_finish(skv_session *s, int layer, int n);
/* The lane budget (cost units) at length n, before the policy's lane share. */
double skv_session_budget(const skv_session *s, int n);

#endif
