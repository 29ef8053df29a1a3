/* sampling.h: the next-token rules shared by the session API (runtime/api/), speculative
 * decoding's accept / resample step and the evaluation (first maximum for top-1 agreement). */
#ifndef SKV_SAMPLING_H
#define SKV_SAMPLING_H
#include "kernels/cpu/ops.h"   /* skv_argmax: the index of the first maximum */

/* Greedy (skv_argmax) when temperature <= 0 or rng is NULL; else one draw from
 * softmax(x / temperature) by inverse CDF, the uniform from a xorshift64* step of *rng
 * (0 seeds it with a fixed constant). */
int skv_sample_logits(const float *x, int V, float temperature, unsigned long long *rng);

/* One uniform draw in [0, 1) from a xorshift64* step of *rng (0 seeds it as above). */
double skv_uniform(unsigned long long *rng);
/* p = softmax(x / temperature) (temperature > 0). */
void skv_softmax_temp(const float *x, int V, float temperature, float *p);
/* One draw from the (unnormalised, non-negative) weights p by inverse CDF. */
int skv_sample_probs(const float *p, int V, unsigned long long *rng);

/* Speculative sampling's rule for one drafted token tok, drawn from the draft's
 * distribution q, against the target's distribution p at the same position: accepted
 * (*accepted = 1, tok returned) with probability min(1, p[tok] / q[tok]); else *accepted = 0
 * and a draw from normalise(max(0, p - q)) is returned (p is overwritten with that
 * residual). The returned token is then distributed exactly as p, whatever q is. */
int skv_spec_accept(float *p, const float *q, int V, int tok, unsigned long long *rng, int *accepted);

#endif
