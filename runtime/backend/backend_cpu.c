/* backend_cpu.c: the CPU backend (backend.h): the loaded model's weights as they are, the
 * forward pass of forward.c, and a compressed-cache session stepping itself (its attention
 * hook is the CPU reference, session.c). */
#include "backend.h"
#include "common/util.h"

static int cpu_available(void) { return 1; }
static void *cpu_upload(const skv_model *m) { return (void *)m; }
static void cpu_release(void *w) { (void)w; }
static size_t cpu_weight_bytes(const void *w) {
    const skv_model *m = w;
    return m->weight_bytes + m->pack_bytes;
}
static void *cpu_seq_new(void *w, int S_cap, int T_max, bool kv_f16) { return skv_state_new(w, S_cap, T_max, kv_f16); }
static void cpu_seq_free(void *s) { skv_state_free(s); }
static void cpu_seq_reset(void *s) { skv_state_reset(s); }
static int cpu_seq_forward(void *s, const int *tokens, int T, const skv_fwd_opts *o) { return skv_forward(s, tokens, T, o); }
static const float *cpu_seq_logits(const void *s) { return ((const skv_state *)s)->logits; }
static int cpu_seq_length(const void *s) { return ((const skv_state *)s)->n_past; }
static void *cpu_attach(skv_session *s, void *llm, void *slm) {
    (void)llm; (void)slm;
    return s;
}
static int cpu_step(void *s, int token) { return skv_session_step(s, token); }
static void cpu_detach(void *s) { (void)s; }

const skv_backend skv_backend_cpu = {
    .name = "cpu",
    .available = cpu_available,
    .full_cache_on_device = false,
    .upload = cpu_upload,
    .release = cpu_release,
    .weight_bytes = cpu_weight_bytes,
    .seq_new = cpu_seq_new,
    .seq_free = cpu_seq_free,
    .seq_reset = cpu_seq_reset,
    .seq_forward = cpu_seq_forward,
    .seq_logits = cpu_seq_logits,
    .seq_length = cpu_seq_length,
    .attach = cpu_attach,
    .step = cpu_step,
    .detach = cpu_detach,
};
