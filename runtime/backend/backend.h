/* backend.h: the one interface between the runtime and the device a forward pass runs on.
 * The public API (include/smallkv.h) picks a backend by the options' device name; nothing
 * above this header knows which device it talks to.
 *
 *   upload      a model's weights on the device, once, shared by every sequence of it
 *               (the CPU backend uses the loaded model as it is);
 *   seq_*       a sequence with its full contiguous KV cache on the device: forward T tokens
 *               (prefill blocks or one decode token) with forward.h's options, logits on the
 *               host afterwards;
 *   attach      a compressed-cache session (session.h: policy, selection and tiers on the
 *               host) continues its decode on the device: the attention hook of every step
 *               runs there over a device copy of the hot tier, the policy's companion model
 *               (SmallKV's SLM) too. The CPU backend steps the session itself.
 * Every function returns NULL or -1 with an error set; a device missing from this build or
 * machine is reported by available(). */
#ifndef SKV_BACKEND_H
#define SKV_BACKEND_H
#include <stdbool.h>
#include "runtime/engine/forward.h"
#include "runtime/session/session.h"

typedef struct {
    const char *name;                        /* "cpu", "cuda" */
    /* 1 when usable here, else 0 with the reason in the error */
    int (*available)(void);
    /* A policy that keeps the whole cache runs as a full-cache sequence on this device
     * (true), or as a session whose hot tier holds everything (false: the CPU, where that
     * session is the reference). */
    bool full_cache_on_device;
    void *(*upload)(const skv_model *m);
    void (*release)(void *weights);
    size_t (*weight_bytes)(const void *weights);   /* bytes on the device */
    void *(*seq_new)(void *weights, int S_cap, int T_max, bool kv_f16);
    void (*seq_free)(void *seq);
    void (*seq_reset)(void *seq);
    int (*seq_forward)(void *seq, const int *tokens, int T, const skv_fwd_opts *o);
    const float *(*seq_logits)(const void *seq);
    int (*seq_length)(const void *seq);
    /* decode a prefilled session here: slm_weights is the upload of the policy's companion
     * model (NULL when it runs none) */
    void *(*attach)(skv_session *s, void *llm_weights, void *slm_weights);
    int (*step)(void *attached, int token);
    void (*detach)(void *attached);
} skv_backend;

/* "cpu" or "cuda"; NULL + error for another name. */
const skv_backend *skv_backend_get(const char *name);
/* "cpu, cuda" */
const char *skv_backend_names(void);

#endif
