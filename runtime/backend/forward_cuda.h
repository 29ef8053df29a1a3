/* forward_cuda.h: the decoder forward pass on the GPU (runtime/backend/forward_cuda.c), the same
 * steps and the same skv_fwd_opts semantics as skv_forward (forward.h).
 *
 *   skv_cuda_model : a loaded skv_model's weights uploaded to the device once (matrices in
 *                    their stored blocks for the decode GEMV and as fp16 for the prefill
 *                    GEMM; norms and biases as fp32). Shared by any number of states.
 *   skv_cuda_state : one sequence: its KV cache on the device, (Hkv, S_cap, d) per layer,
 *                    fp16 or fp32, and device activations for blocks of up to T_max tokens.
 *                    Logits are copied back to s->logits on the host.
 *   skv_cuda_batch : n sequences, one decode token each, one pass over the weights
 *                    (mirror of skv_forward_batch).
 *
 * opts: logits NONE / LAST / ALL and n_layers as on the CPU; colsum / lastrow are HOST
 * pointers as on the CPU ([L] -> (H, S_cap), accumulated / overwritten for k < n_past+T):
 * each requested layer's buffer is copied to the device, updated there and copied back.
 * The CPU attention hook (opts->attn, host pointers) is refused with an error; the
 * compressed-cache runtime uses the device hook of skv_cuda_forward_dev instead.
 *
 * Built without CUDA (make, not make CUDA=1) every constructor fails with
 * "built without CUDA (make CUDA=1)"; with CUDA but no usable device the error names the
 * CUDA failure. Out of memory names the sizes that did not fit and the device's free memory. */
#ifndef SKV_FORWARD_CUDA_H
#define SKV_FORWARD_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"

typedef struct skv_cuda_model skv_cuda_model;   /* opaque: device pointers */

typedef struct {
    const skv_cuda_model *dm;
    const skv_model *m;
    int S_cap, T_max;
    bool kv_f16;
    int n_past;            /* tokens already in the cache */
    float *logits;         /* host (T_max, vocab): row 0 for LAST, rows 0..T-1 for ALL */
    void *dev;             /* opaque device buffers (forward_cuda.c) */
} skv_cuda_state;

typedef struct {
    const skv_cuda_model *dm;
    int n_max;
    skv_cuda_state *ws;    /* activations for n_max rows, no KV cache */
} skv_cuda_batch;

/* 1 when this build has the CUDA backend (make CUDA=1), else 0. */
int skv_cuda_built(void);

/* Upload m's weights. flags: SKV_CUDA_W_QUANT (1) / SKV_CUDA_W_F16 (2) of backend.h, 0 = both
 * (decode GEMV and prefill GEMM). Checks the total against the device's free memory first.
 * m must outlive the result. NULL + error. */
skv_cuda_model *skv_cuda_model_upload(const skv_model *m, int flags);
void skv_cuda_model_free(skv_cuda_model *dm);
/* Device bytes the upload holds. */
size_t skv_cuda_model_bytes(const skv_cuda_model *dm);

skv_cuda_state *skv_cuda_state_new(const skv_cuda_model *dm, int S_cap, int T_max, bool kv_f16);
void skv_cuda_state_free(skv_cuda_state *s);
void skv_cuda_state_reset(skv_cuda_state *s);   /* forget the sequence (n_past = 0) */
/* Benchmarks only: zero the whole KV cache and set n_past = n (0 <= n <= S_cap), a synthetic
 * context of n tokens (the arithmetic of a decode step does not depend on the values). */
int skv_cuda_state_fill_synthetic(skv_cuda_state *s, int n);

/* Run T tokens at positions n_past .. n_past+T-1 and append their K/V (skv_forward's
 * contract). Returns after the logits (if asked for) are on the host. -1 + error. */
int skv_cuda_forward(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts);

skv_cuda_batch *skv_cuda_batch_new(const skv_cuda_model *dm, int n_max);
void skv_cuda_batch_free(skv_cuda_batch *b);
/* One decode token per sequence (skv_forward_batch's contract; opts NULL or n entries,
 * no attn hooks). Logits (1, vocab) land in states[i]->logits for the entries that ask. */
int skv_cuda_forward_batch(skv_cuda_batch *b, skv_cuda_state **states, const int *tokens, int n,
                           const skv_fwd_opts *opts);

/* ---- compressed KV cache on the device (runtime/backend/session_cuda.c) ---- */

/* Device attention hook: skv_fwd_opts.attn's contract with every pointer on the device:
 * q (T, H, d), k, v (T, Hkv, d) rotated, positions pos0 .., out (T, H, d) to fill. Work it
 * queues on the default stream is ordered with the forward's own. 0, or -1 + error. */
typedef int (*skv_cuda_attn_fn)(void *ctx, int layer, const float *q, const float *k, const float *v, int pos0,
                                int T, float *out);
/* A state without a KV cache (S_cap only bounds the positions): the hook owns the KV
 * storage, so only skv_cuda_forward_dev runs it. NULL + error. */
skv_cuda_state *skv_cuda_state_new_nocache(const skv_cuda_model *dm, int S_cap, int T_max);
/* skv_cuda_forward with attn(ctx, ...) in place of every layer's cache write and attention.
 * opts: logits and n_layers as skv_cuda_forward; colsum / lastrow / attn must be unset. */
int skv_cuda_forward_dev(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn attn,
                         void *ctx);
/* Continue on the GPU a sequence prefilled on the CPU: upload the first n_layers layers of
 * cpu's KV cache into s and set s->n_past = cpu->n_past. Same model, S_cap and cache type
 * (else an error says which differs). -1 + error. */
int skv_cuda_state_load(skv_cuda_state *s, const skv_state *cpu, int n_layers);

/* Wait for the device (for timing). 0, or -1 + error. */
int skv_cuda_finish(void);

#endif
