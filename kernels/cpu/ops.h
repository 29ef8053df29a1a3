/* ops.h: small elementwise kernels of the decoder: RMSNorm, RoPE, SwiGLU / GeGLU, softmax,
 * softcapping. */
#ifndef SKV_OPS_H
#define SKV_OPS_H
#include "kernels/tensor.h"

/* out (T, n) = x (T, n) / rms(x) * w (n) */
void skv_rmsnorm(float *out, const float *x, const float *w, int T, int n, float eps);
/* Rotate n_heads heads of head_dim at each of T positions (pos[t]) in place:
 * x (T, n_heads, head_dim). */
void skv_rope(float *x, const int *pos, int T, int n_heads, int head_dim, float theta,
              skv_rope_mode mode);
/* The same rotation in two steps, for callers that rotate several tensors at one position:
 * cs, sn (head_dim / 2) for position pos, then x (n_heads, head_dim) rotated in place. */
void skv_rope_table(float *cs, float *sn, int pos, int head_dim, float theta);
void skv_rope_apply(float *x, int n_heads, int head_dim, const float *cs, const float *sn, skv_rope_mode mode);
/* RoPE from an inverse-frequency table inv (head_dim / 2): pair i at position p turns by
 * p * inv[i] (scaled RoPE variants differ only in the table, runtime/model/model_arch.c). */
void skv_rope_table_freq(float *cs, float *sn, int pos, int head_dim, const float *inv);
void skv_rope_freq(float *x, const int *pos, int T, int n_heads, int head_dim, const float *inv, skv_rope_mode mode);
/* out (n) = gelu_tanh(gate) * up (Gemma's GeGLU, transformers' gelu_pytorch_tanh) */
void skv_geglu(float *out, const float *gate, const float *up, int n);
/* x (n) = cap * tanh(x / cap) */
void skv_softcap(float *x, int n, float cap);
/* out (n) = silu(gate) * up */
void skv_swiglu(float *out, const float *gate, const float *up, int n);
/* In-place softmax over n values. */
void skv_softmax(float *x, int n);
/* index of the largest of x[0..n) (the first on ties) */
int skv_argmax(const float *x, int n);

#endif
