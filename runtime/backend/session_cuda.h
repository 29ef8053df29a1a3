/* session_cuda.h: a compressed-cache session (session.h) that decodes on the GPU.
 *
 * The session and all its bookkeeping stay on the host, exactly the CPU code: the policy
 * (SmallKV, H2O, ... selection), the two-tier cache's slot bookkeeping (which slot holds
 * which position, evictions, restores) and the cold tier (host memory). The prefill runs
 * on the CPU (skv_session_prefill, unchanged). Attaching the session to the GPU then
 *   - runs the LLM's decode on the device (forward_cuda.h, a state without a KV cache) with
 *     a device attention hook: per layer it downloads the new K/V row (Hkv, d) and runs
 *     the CPU's decode step up to the attention on the host (skv_session_step_prepare:
 *     cold write, policy, evict / restore / append on the host hot tier, marginal
 *     weights), replays the hot tier's slot-write log (kvmirror.h)
 *     into a device mirror of the hot arenas (rows staged in pinned memory, uploaded and
 *     scattered on a second stream whose event the default stream waits on), and runs the
 *     compensated attention over each lane's hot slots on the device (skv_cuda_compensate,
 *     marginal weights computed on the host by the policy and uploaded), then the CPU's
 *     step update (skv_session_step_finish);
 *   - runs the SmallKV SLM's decode on the device too (its CPU-prefilled cache uploaded
 *     once), its column sums / last rows copied back for the host policy.
 * So the device hot tier equals the host's byte for byte by construction (every slot write
 * is logged, tests/test_kvlog.c), and the selection is the CPU's own.
 *
 * Not supported on the device (refused with a message): EMS (merged slots: the CUDA
 * compensate kernel has no multiplicities), a compressed SLM session (slm_budget < 1),
 * online head matching still pending, export, n_layers, a prefill base.
 *
 * After attaching, step only through skv_session_cuda_step (the CPU step would use the
 * SLM's CPU cache, which stops at the prefill; a session that advanced on the CPU after
 * attaching is refused: free and attach again). Built without CUDA every function fails
 * with "built without CUDA (make CUDA=1)".
 * STATUS: compiled, never run on a GPU (written on a machine without one). */
#ifndef SKV_SESSION_CUDA_H
#define SKV_SESSION_CUDA_H
#include "forward_cuda.h"
#include "runtime/session/session.h"

typedef struct skv_session_cuda skv_session_cuda;

/* Attach a prefilled session (s->n >= 1). llm: s->m uploaded (skv_cuda_model_upload); slm:
 * the SLM (s->o.slm) uploaded when the policy runs one, else NULL (the same upload as llm
 * for a self pair). Uploads the hot tier and the SLM's cache. s, llm, slm must outlive the
 * result. NULL + error. */
skv_session_cuda *skv_session_cuda_new(skv_session *s, const skv_cuda_model *llm, const skv_cuda_model *slm);
/* One decode token on the GPU; logits in skv_session_logits(s). -1 + error; after an error
 * the session cannot continue (later calls fail). */
int skv_session_cuda_step(skv_session_cuda *g, int token);
/* Why the session cannot decode on the GPU (0 if it can): -1 + error. No GPU needed. */
int skv_session_cuda_check(const skv_session *s);
void skv_session_cuda_free(skv_session_cuda *g);
/* Tests: download the device hot tier and compare every used slot's K / V / V-only row with
 * the host's, byte for byte. Returns the number of differing slots, -1 + error. */
long skv_session_cuda_verify(skv_session_cuda *g);

#endif
