/* model_arch.c: what the model families beyond plain Llama/Qwen2 add to a loaded model, shared
 * by the GGUF and Hugging Face loaders: the RoPE inverse-frequency tables (plain, linear and
 * llama3 scaling, Gemma 3's local base), the architecture names, the feature names a backend
 * that lacks them refuses with, and the range checks on the config fields they read. */
#include "model.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>

const char *skv_arch_name(skv_arch a) {
    switch (a) {
    case SKV_ARCH_LLAMA: return "llama";
    case SKV_ARCH_QWEN2: return "qwen2";
    case SKV_ARCH_QWEN3: return "qwen3";
    case SKV_ARCH_GEMMA3: return "gemma3";
    case SKV_ARCH_MISTRAL: return "mistral";
    }
    return "?";
}

const char *skv_config_extra_feature(const skv_config *c) {
    if (c->rope_scale == SKV_ROPE_SCALE_LLAMA3) return "llama3 RoPE scaling";
    if (c->rope_scale == SKV_ROPE_SCALE_LINEAR) return "linear RoPE scaling";
    if (c->sliding_window) return "sliding-window attention";
    if (c->has_qk_norm) return "q/k norms";
    if (c->has_post_norms) return "post-attention / post-FFN norms";
    if (c->act != SKV_ACT_SILU) return "GeGLU (gelu tanh) MLP";
    if (c->embd_scale != 0.0f) return "embedding scale";
    if (c->attn_scale != 0.0f) return "query pre-attention scale";
    if (c->final_softcap != 0.0f) return "final logit softcapping";
    if (c->rope_theta_local != 0.0f && c->rope_theta_local != c->rope_theta) return "local RoPE base";
    return NULL;
}

int skv_config_check(const skv_config *c, const char *path) {
    if (c->rope_scale != SKV_ROPE_SCALE_NONE && !(c->rope_factor >= 1.0f && c->rope_factor < 1e6f))
        return skv_error("%s: RoPE scaling factor %g out of range (need >= 1)", path, (double)c->rope_factor);
    if (c->rope_scale == SKV_ROPE_SCALE_LLAMA3 &&
        !(c->rope_low_freq > 0 && c->rope_high_freq > c->rope_low_freq && c->rope_orig_ctx > 0))
        return skv_error("%s: llama3 RoPE scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g) and "
                         "original_max_position_embeddings > 0 (%d)", path, (double)c->rope_low_freq,
                         (double)c->rope_high_freq, c->rope_orig_ctx);
    if (c->sliding_window < 0 || (c->n_window_layers && c->sliding_window < 1))
        return skv_error("%s: sliding window %d out of range", path, c->sliding_window);
    if (!(c->final_softcap >= 0.0f) || !(c->embd_scale >= 0.0f) || !(c->attn_scale >= 0.0f) ||
        !(c->rope_theta_local >= 0.0f))
        return skv_error("%s: negative softcap, embedding scale, attention scale or local RoPE base", path);
    if (c->head_dim / 2 > 512) return skv_error("%s: head size %d above 1024", path, c->head_dim);
    return 0;
}

/* inv[i] = theta^(-2i/d), as transformers computes it (float32 of the exact value) */
static void plain_freqs(float *inv, int d, float theta) {
    for (int i = 0; i < d / 2; i++) inv[i] = (float)(1.0 / pow((double)theta, (double)(2 * i) / d));
}

/* transformers' _compute_llama3_parameters: long wavelengths divided by factor, short ones
 * kept, the band between blended */
static void llama3_freqs(float *inv, int d, const skv_config *c) {
    const double pi = 3.14159265358979323846;
    const double f = c->rope_factor, lo = c->rope_low_freq, hi = c->rope_high_freq, old = c->rope_orig_ctx;
    const double lo_wl = old / lo, hi_wl = old / hi;
    for (int i = 0; i < d / 2; i++) {
        const double w = inv[i], wl = 2 * pi / w;
        double r = wl > lo_wl ? w / f : w;
        if (!(wl < hi_wl) && !(wl > lo_wl)) {
            const double sm = (old / wl - lo) / (hi - lo);
            r = (1 - sm) * r / f + sm * r;
        }
        inv[i] = (float)r;
    }
}

int skv_model_rope_init(skv_model *m, const float *factors) {
    const skv_config *c = &m->cfg;
    const int half = c->head_dim / 2;
    free(m->rope_freq);
    free(m->rope_freq_local);
    m->rope_freq = m->rope_freq_local = NULL;
    m->rope_freq = skv_malloc((size_t)half * sizeof(float) + 4, "RoPE table");
    m->rope_freq_local = skv_malloc((size_t)half * sizeof(float) + 4, "RoPE table");
    if (!m->rope_freq || !m->rope_freq_local) return -1;
    plain_freqs(m->rope_freq, c->head_dim, c->rope_theta);
    if (c->rope_scale == SKV_ROPE_SCALE_LINEAR)
        for (int i = 0; i < half; i++) m->rope_freq[i] = m->rope_freq[i] / c->rope_factor;
    else if (c->rope_scale == SKV_ROPE_SCALE_LLAMA3 && !factors)   /* a GGUF file carries them as factors */
        llama3_freqs(m->rope_freq, c->head_dim, c);
    if (factors)
        for (int i = 0; i < half; i++) {
            if (!(factors[i] > 0)) return skv_error("%s: rope_freqs[%d] = %g is not positive", m->path, i, (double)factors[i]);
            m->rope_freq[i] = m->rope_freq[i] / factors[i];
        }
    if (c->rope_theta_local > 0) plain_freqs(m->rope_freq_local, c->head_dim, c->rope_theta_local);
    else for (int i = 0; i < half; i++) m->rope_freq_local[i] = m->rope_freq[i];
    return 0;
}

const float *skv_model_rope_freq(const skv_model *m, int l) {
    return m->layers[l].window ? m->rope_freq_local : m->rope_freq;
}
