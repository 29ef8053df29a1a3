/* forward.h: the Llama/Qwen2 decoder forward pass on the CPU with a contiguous KV cache.
 *
 * A skv_state holds everything one sequence needs: its KV cache and the activation
 * buffers for blocks of up to T_max tokens, all allocated once (llama2.c's RunState).
 *   prefill: skv_forward(s, tokens, T, ...) with T > 1
 *   decode : skv_forward(s, &tok, 1, ...)
 * Cache layout per layer: K and V each (Hkv, S_cap, d), fp16 or fp32, keys rotated; or
 * (skv_state_new_quant) each row of d values as quantised groups (kernels/cpu/kvquant.h). */
#ifndef SKV_FORWARD_H
#define SKV_FORWARD_H
#include <stdbool.h>
#include <stddef.h>
#include "runtime/model/model.h"

typedef struct {
    const skv_model *m;
    int S_cap;             /* cache capacity in tokens */
    int T_max;             /* largest block per call */
    bool kv_f16;
    int k_bits, v_bits;    /* 0, or 8 / 4: K (V) rows are quantised (kernels/cpu/kvquant.h) */
    size_t k_row_bytes, v_row_bytes;   /* bytes of one K (V) row: one token of one KV head */
    int n_past;            /* tokens already in the cache */
    /* quantised keys (k_bits): per layer the key normalisation (2, Hkv, d: offset mu, scale
     * sigma; kernels/cpu/kvquant.h) the rows were stored with, fitted on the layer's first
     * block and set in k_norm_set[l]; k_norm_off keeps plain rows (an ablation) */
    float *k_norm;
    unsigned char *k_norm_set;
    bool k_norm_off;
    void **k, **v;         /* [L] -> (Hkv, S_cap, d), in kv_arena (NULL without a cache) */
    void *kv_arena;        /* every layer's K then V, one huge-page block (common/hugemem.h) */
    size_t kv_arena_bytes;
    /* activations (T_max rows) */
    float *x, *xb, *q, *kx, *vx, *att, *hb, *hb2, *logits;
    int *pos;
    bool attn_in_team;     /* true while the one-region decode calls opts->attn from every
                              thread of its team (forward.h, attn_team) */
    /* per-thread scratch of the one-region decode (forward.c), grown on first use */
    void *team_ws;
    size_t team_ws_bytes;
} skv_state;

typedef enum { SKV_LOGITS_NONE = 0, SKV_LOGITS_LAST = 1, SKV_LOGITS_ALL = 2 } skv_logits_mode;

/* An early stop (n_layers below the model's n_layer, no logits) ends at the last run layer's
 * attention: that layer's K/V rows and attention probabilities are what its consumers read
 * (the SLM's cache, colsum / lastrow), while its output projection and MLP would only feed a
 * layer that does not run. So every forward (CPU, CUDA, batched) skips them there. */
static inline int skv_fwd_tail_skips_mlp(int l, int n_layers, int n_layer) {
    return n_layers < n_layer && l == n_layers - 1;
}

typedef struct {
    skv_logits_mode logits;  /* which rows of logits to compute into s->logits */
    int n_layers;            /* run only the first n layers (0 = all), e.g. SLM early stop;
                                with n_layers < L no logits are produced */
    float **colsum;          /* NULL or [L] pointers (NULL entries skip a layer) to (H, S_cap),
                                accumulated column sums of attention probabilities */
    float **lastrow;         /* NULL or [L] pointers to (H, S_cap): last query's attention row */
    /* Optional attention override, used by the compressed-cache runtime, which owns its own
     * KV storage: when set, skv_forward neither writes nor reads s->k / s->v; for each layer
     * it calls attn(attn_ctx, layer, q, k, v, pos0, T, out) with this block's rotated
     * q (T, H, d), rotated k (T, Hkv, d), v (T, Hkv, d), positions pos0 .. pos0+T-1, and
     * expects out (T, H, d). Returns 0, or -1 with an error set (the forward then fails). */
    int (*attn)(void *attn_ctx, int layer, const float *q, const float *k, const float *v,
                int pos0, int T, float *out);
    void *attn_ctx;
    /* attn may be called by every thread of one parallel region: a single-token step then
     * runs as one region, as it does without a hook (forward.c). While it does, the state's
     * attn_in_team is true: the hook then shares its work through orphaned `omp single` /
     * `omp for` constructs and returns the same status on every thread; otherwise (the
     * general path, batches) it is called by one thread alone. */
    bool attn_team;
    /* SKV_LOGITS_LAST only: compute the logits of token ids < head_rows alone (rounded up to
     * a multiple of 8, at most vocab; 0 = every token) and set the others to -INFINITY. A
     * drafter's cheaper LM head: byte-level BPE ids follow merge order, so a prefix of the
     * vocabulary holds the frequent tokens (runtime/api/speculate.c, draft_vocab). The
     * logits it computes are the same bits as without the limit. */
    int head_rows;
} skv_fwd_opts;

skv_state *skv_state_new(const skv_model *m, int S_cap, int T_max, bool kv_f16);
/* A state whose cache holds keys quantised to k_bits and values to v_bits (8 or 4 each;
 * kernels/cpu/kvquant.h; the head size must be a multiple of 32), for a model that only
 * ranks tokens by its attention (the SLM). The CPU forward only. NULL + error. */
skv_state *skv_state_new_quant(const skv_model *m, int S_cap, int T_max, int k_bits, int v_bits);
/* A state without a KV cache (k[l], v[l] NULL), for callers that own their KV storage and
 * run skv_forward with an attention hook (the compressed-cache session, batch workspaces). */
skv_state *skv_state_new_nocache(const skv_model *m, int S_cap, int T_max, bool kv_f16);
/* Whether a single-token step may run as one parallel region (default: yes, unless the
 * environment has SKV_ONE_REGION=0, read once); off sends it down the general path, with the
 * same bits (for checks). */
void skv_forward_set_one_region(int on);
void skv_state_free(skv_state *s);
void skv_state_reset(skv_state *s);   /* forget the sequence (n_past = 0) */
/* dst's cache <- src's: the first `layers` layers' rows, the key normalisation and n_past
 * (a fork or a derived state); the two states must share the model, capacity and cache
 * type. 0, or -1 + error. */
int skv_state_copy_cache(skv_state *dst, const skv_state *src, int layers);

/* Run T tokens at positions n_past .. n_past+T-1 and append their K/V.
 * Logits land in s->logits: (1, vocab) for LAST, (T, vocab) for ALL.
 * -1 + error when the cache or block size would overflow or a token id is out of range. */
int skv_forward(skv_state *s, const int *tokens, int T, const skv_fwd_opts *opts);

/* ---- batched decode: n sequences, one token each, one pass over the weights ----
 * The n rows are stacked into (n, C) activations in a workspace (skv_batch), so every
 * matrix product runs once with T = n; attention runs per sequence, on its own cache (or
 * its own attn hook) at its own position states[i]->n_past. All states must share one model.
 * Note on numerics: skv_matmul uses the Q8-activation integer dots for T below
 * skv_matmul_gemm_min_t(type) (per row exactly what T = 1 computes), and at every T on
 * matrices in 8-row groups in the default gemm mode (matmul.h); elsewhere float tiles above
 * the threshold, so such a batch matches one-by-one decode to float tolerance only. */
typedef struct {
    const skv_model *m;
    int n_max;
    skv_state *ws;         /* activations for n_max rows (its own K/V cache released) */
} skv_batch;

skv_batch *skv_batch_new(const skv_model *m, int n_max);
void skv_batch_free(skv_batch *b);
/* One decode token per sequence: tokens[i] at position states[i]->n_past, appended to that
 * sequence. opts: NULL, or n entries (per sequence: logits, colsum / lastrow, attn hook);
 * n_layers must agree across entries. Logits (1, vocab) land in states[i]->logits for the
 * entries that ask for them. -1 + error (naming the entry) before anything runs when a
 * state is full, a token is out of range or the shapes disagree. */
int skv_forward_batch(skv_batch *b, skv_state **states, const int *tokens, int n, const skv_fwd_opts *opts);
/* The same with rows[i] consecutive tokens for entry i (tokens holds entry 0's rows, then
 * entry 1's, ...; rows NULL: one each), at positions n_past .. n_past + rows[i] - 1: the
 * matrix products run once over all the stacked rows, the attention once per entry over its
 * rows (its attn hook called with T = rows[i]). Logits: an entry's last row, or all its rows
 * (rows[i] x vocab into its state) with SKV_LOGITS_ALL. The workspace must hold the sum of
 * rows. Speculative decoding's batched verify (skv_session_verify_batch). */
int skv_forward_batch_rows(skv_batch *b, skv_state **states, const int *tokens, const int *rows, int n,
                           const skv_fwd_opts *opts);

#endif
