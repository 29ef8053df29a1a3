/* forward_cuda.h: the decoder forward pass on the GPU (runtime/forward_cuda.c), the same
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
 * The attention hook (opts->attn) is CPU-only: a forward with it set fails with an error.
 *
 * Built without CUDA (make, not make CUDA=1) every constructor fails with
 * "built without CUDA (make CUDA=1)"; with CUDA but no usable device the error names the
 * CUDA failure. Out of memory names the sizes that did not fit and the device's free memory. */
#ifndef SKV_FORWARD_CUDA_H
#define SKV_FORWARD_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include "forward.h"
#include "model.h"

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

/* Wait for the device (for timing). 0, or -1 + error. */
int skv_cuda_finish(void);

#endif
