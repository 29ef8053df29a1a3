/* backend_cuda.c: the CUDA backend (backend.h) over forward_cuda.c (weights uploaded once,
 * full-cache sequences on the device) and session_cuda.c (a compressed-cache session's
 * decode on the device). Built without CUDA every call reports so. */
#include "backend.h"
#include "forward_cuda.h"
#include "session_cuda.h"
#include "common/util.h"
#ifdef SKV_CUDA
#include "kernels/cuda/backend.h"
#endif

static int cuda_available(void) {
#ifdef SKV_CUDA
    return skv_cuda_available();
#else
    skv_error("built without CUDA (make CUDA=1)");
    return 0;
#endif
}
static void *cuda_upload(const skv_model *m) { return skv_cuda_model_upload(m, 0); }
static void cuda_release(void *w) { skv_cuda_model_free(w); }
static size_t cuda_weight_bytes(const void *w) { return skv_cuda_model_bytes(w); }
static void *cuda_seq_new(void *w, int S_cap, int T_max, bool kv_f16) { return skv_cuda_state_new(w, S_cap, T_max, kv_f16); }
static void cuda_seq_free(void *s) { skv_cuda_state_free(s); }
static void cuda_seq_reset(void *s) { skv_cuda_state_reset(s); }
static int cuda_seq_forward(void *s, const int *tokens, int T, const skv_fwd_opts *o) {
    return skv_cuda_forward(s, tokens, T, o);
}
static const float *cuda_seq_logits(const void *s) { return ((const skv_cuda_state *)s)->logits; }
static int cuda_seq_length(const void *s) { return ((const skv_cuda_state *)s)->n_past; }
static void *cuda_attach(skv_session *s, void *llm, void *slm) { return skv_session_cuda_new(s, llm, slm); }
static int cuda_step(void *g, int token) { return skv_session_cuda_step(g, token); }
static void cuda_detach(void *g) { skv_session_cuda_free(g); }

const skv_backend skv_backend_cuda = {
    .name = "cuda",
    .available = cuda_available,
    .full_cache_on_device = true,
    .upload = cuda_upload,
    .release = cuda_release,
    .weight_bytes = cuda_weight_bytes,
    .seq_new = cuda_seq_new,
    .seq_free = cuda_seq_free,
    .seq_reset = cuda_seq_reset,
    .seq_forward = cuda_seq_forward,
    .seq_logits = cuda_seq_logits,
    .seq_length = cuda_seq_length,
    .attach = cuda_attach,
    .step = cuda_step,
    .detach = cuda_detach,
};
