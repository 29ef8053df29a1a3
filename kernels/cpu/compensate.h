/* compensate.h: decode-step attention of one KV group over the compressed hot tier,
 * with SmallKV's marginal compensation (method.md section 5).
 *
 * For each of the g query heads i of one KV head (one query row):
 *   p   = softmax(q_i . K_hot^T / sqrt(d) + log mult)      over the n_hot K+V slots
 *   O_c = sum_s p[s] V_hot[s]                               (d)
 *   O_m = sum_k pm[i][k] Vm[k]                              over the n_marg V-only slots
 *   out_i = combine(O_c, O_m):
 *     SUM    O_c + O_m                  (the paper's Algorithm 1)
 *     MASS   w_i O_c + O_m              (w_i = the SLM head's mass on the hot tokens)
 *     RENORM (w_i O_c + O_m) / (w_i + sum_k pm[i][k])
 * With no marginal slots (or pm == NULL) out_i = O_c: ordinary attention.
 * Multiplicity (EMS merging): a slot with mult[s] = m stands for m tokens and takes m places
 * in the softmax. We add log(m) to its logit, which is the same thing for m identical
 * copies (m e^l / Z = e^(l + log m) / Z); p[s] is then the slot's total probability.
 * Side outputs (optional) for score-keeping policies:
 *   slot_acc  (n_hot)    += sum over the g heads of p[s]     (H2O's accumulated score)
 *   head_p    (g, n_hot)  = p per head                        (online head matching)
 *
 *   q (g, d), K_hot, V_hot (n_hot, d), Vm (n_marg, d) in fp32 or fp16, out (g, d). */
#ifndef SKV_COMPENSATE_H
#define SKV_COMPENSATE_H
#include <stdbool.h>
#include "kernels/args.h"


void skv_compensate(float *out, const float *q, const skv_comp_args *a);
void skv_compensate_ref(float *out, const float *q, const skv_comp_args *a);

#endif
