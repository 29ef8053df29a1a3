/* tiny_model.c: build deterministic random tiny models and write them as HF dirs / GGUF
 * (see tiny_model.h). Test support only. */
#include "tiny_model.h"
#include "gguf_writer.h"
#include "test_env.h"
#include "common/util.h"
#include "runtime/tokenizer/tokenizer_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- building ---- */

static uint64_t rng_next(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float round_to(float x, int type) {
    if (type == SKV_F16) return skv_f16_to_f32(skv_f32_to_f16(x));
    if (type == SKV_BF16) return skv_bf16_to_f32(skv_f32_to_bf16(x));
    return x;
}

/* n values uniform in center +- scale, rounded through round_type. */
static float *rnd(uint64_t *s, size_t n, float center, float scale, int round_type) {
    float *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(s) >> 11) / 9007199254740992.0; /* [0, 1) */
        p[i] = round_to(center + scale * (float)(2.0 * u - 1.0), round_type);
    }
    return p;
}

tiny_model *tiny_model_new(skv_arch arch, uint64_t seed, int tied, int round_type) {
    return tiny_model_new_dims(arch, seed, tied, round_type, (tiny_dims){64, 96, 4, 2, 16, 300});
}

tiny_model *tiny_model_new_dims(skv_arch arch, uint64_t seed, int tied, int round_type, tiny_dims dm) {
    tiny_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    skv_config *c = &m->cfg;
    c->arch = arch;
    c->n_layer = 2; c->dim = dm.dim; c->n_head = dm.n_head; c->n_kv_head = dm.n_kv_head; c->head_dim = dm.head_dim;
    c->ffn_dim = dm.ffn; c->vocab = dm.vocab; c->ctx_max = 256;
    c->rope_theta = 50000.0f; c->norm_eps = 1e-5f;
    c->rope_mode = SKV_ROPE_HALVES;
    c->tied_embeddings = tied;
    c->has_qkv_bias = arch == SKV_ARCH_QWEN2;
    const size_t C = (size_t)dm.dim, F = (size_t)dm.ffn, V = (size_t)dm.vocab, Q = (size_t)dm.n_head * (size_t)dm.head_dim,
                 KV = (size_t)dm.n_kv_head * (size_t)dm.head_dim;
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    int ok = 1;
#define R(ptr, n, center, scale) ok = ok && ((ptr) = rnd(&s, (n), (center), (scale), round_type)) != NULL
    R(m->embd, V * C, 0.0f, 1.0f);
    R(m->out_norm, C, 1.0f, 0.2f);
    if (!tied) R(m->output, V * C, 0.0f, 0.25f);
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    ok = ok && m->layers;
    for (int l = 0; ok && l < c->n_layer; l++) {
        tiny_layer *y = &m->layers[l];
        R(y->attn_norm, C, 1.0f, 0.2f);
        R(y->wq, Q * C, 0.0f, 0.25f);
        R(y->wk, KV * C, 0.0f, 0.25f);
        R(y->wv, KV * C, 0.0f, 0.25f);
        R(y->wo, C * Q, 0.0f, 0.2f);
        if (c->has_qkv_bias) {
            R(y->bq, Q, 0.0f, 0.3f);
            R(y->bk, KV, 0.0f, 0.3f);
            R(y->bv, KV, 0.0f, 0.3f);
        }
        R(y->ffn_norm, C, 1.0f, 0.2f);
        R(y->gate, F * C, 0.0f, 0.25f);
        R(y->up, F * C, 0.0f, 0.25f);
        R(y->down, C * F, 0.0f, 0.2f);
        if (arch == SKV_ARCH_QWEN3 || arch == SKV_ARCH_GEMMA3) {   /* new draws only for the new families */
            const float ctr = arch == SKV_ARCH_GEMMA3 ? 0.0f : 1.0f;   /* gemma stores w of (1 + w) */
            R(y->q_norm, (size_t)dm.head_dim, ctr, 0.2f);
            R(y->k_norm, (size_t)dm.head_dim, ctr, 0.2f);
        }
        if (arch == SKV_ARCH_GEMMA3) {
            R(y->post_attn_norm, C, 0.0f, 0.2f);
            R(y->post_ffn_norm, C, 0.0f, 0.2f);
            for (float *nv[2] = {y->attn_norm, y->ffn_norm}, **q = nv; q < nv + 2; q++)
                for (size_t i = 0; i < C; i++) (*q)[i] -= 1.0f;   /* centre 0 as well */
        }
    }
    if (arch == SKV_ARCH_GEMMA3)
        for (size_t i = 0; ok && i < C; i++) m->out_norm[i] -= 1.0f;
#undef R
    if (!ok) { tiny_model_free(m); return NULL; }
    return m;
}

tiny_model *tiny_model_new_family(const char *family, uint64_t seed) {
    static const struct { const char *name; skv_arch arch; int tied; } fams[] = {
        {"llama3", SKV_ARCH_LLAMA, 0}, {"mistral", SKV_ARCH_MISTRAL, 0},
        {"qwen3", SKV_ARCH_QWEN3, 0},  {"gemma3", SKV_ARCH_GEMMA3, 1},
    };
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        if (strcmp(family, fams[i].name) != 0) continue;
        tiny_model *m = tiny_model_new(fams[i].arch, seed, fams[i].tied, SKV_F32);
        if (!m) return NULL;
        skv_config *c = &m->cfg;
        c->ctx_max = 512;
        if (i == 0) {
            c->rope_scale = SKV_ROPE_SCALE_LLAMA3;
            c->rope_factor = 8.0f; c->rope_low_freq = 1.0f; c->rope_high_freq = 4.0f; c->rope_orig_ctx = 64;
        } else if (i == 1) {
            c->sliding_window = 48;
            m->layers[0].window = m->layers[1].window = 48;
            c->n_window_layers = 2;
        } else if (i == 2) {
            c->has_qk_norm = 1;
        } else {
            c->has_qk_norm = c->has_post_norms = 1;
            c->act = SKV_ACT_GELU_TANH;
            c->sliding_window = 48;
            c->n_window_layers = 1;
            m->layers[0].window = 48;
            c->rope_theta_local = 10000.0f;
            c->rope_scale = SKV_ROPE_SCALE_LINEAR;
            c->rope_factor = 2.0f;
            c->final_softcap = 30.0f;
            c->norm_eps = 1e-6f;
        }
        return m;
    }
    return NULL;
}

void tiny_model_free(tiny_model *m) {
    if (!m) return;
    free(m->embd); free(m->out_norm); free(m->output);
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        tiny_layer *y = &m->layers[l];
        free(y->attn_norm); free(y->wq); free(y->wk); free(y->wv); free(y->wo);
        free(y->bq); free(y->bk); free(y->bv);
        free(y->ffn_norm); free(y->gate); free(y->up); free(y->down);
        free(y->q_norm); free(y->k_norm); free(y->post_attn_norm); free(y->post_ffn_norm);
    }
    free(m->layers);
    free(m);
}

/* ---- safetensors ---- */

static size_t type_bytes(int type) { return type == SKV_F32 ? 4 : 2; }

static void put_values(uint8_t *dst, const float *src, size_t n, int type) {
    for (size_t i = 0; i < n; i++) {
        if (type == SKV_F32) memcpy(dst + 4 * i, &src[i], 4);
        else {
            uint16_t h = type == SKV_F16 ? skv_f32_to_f16(src[i]) : skv_f32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
    }
}

static size_t numel(const tiny_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (size_t)t->shape[i];
    return n;
}

int tiny_write_raw(const char *path, uint64_t header_len, const char *header, size_t header_bytes,
                   const void *data, size_t data_len) {
    size_t n = 8 + header_bytes + data_len;
    uint8_t *buf = skv_malloc(n, "raw file");
    if (!buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(header_len >> (8 * i));
    if (header_bytes) memcpy(buf + 8, header, header_bytes);
    if (data_len) memcpy(buf + 8 + header_bytes, data, data_len);
    int rc = skv_write_file_atomic(path, buf, n);
    free(buf);
    return rc;
}

int tiny_write_safetensors(const char *path, const tiny_tensor *t, int n) {
    size_t hcap = 256 + (size_t)n * 256, hlen = 0, off = 0;
    char *h = skv_malloc(hcap, "header");
    if (!h) return -1;
    hlen += (size_t)snprintf(h + hlen, hcap - hlen, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t nb = numel(&t[i]) * type_bytes(t[i].type);
        const char *dt = t[i].type == SKV_F32 ? "F32" : t[i].type == SKV_F16 ? "F16" : "BF16";
        hlen += (size_t)snprintf(h + hlen, hcap - hlen, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, dt);
        for (int d = 0; d < t[i].n_dims; d++)
            hlen += (size_t)snprintf(h + hlen, hcap - hlen, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        hlen += (size_t)snprintf(h + hlen, hcap - hlen, "],\"data_offsets\":[%zu,%zu]}", off, off + nb);
        off += nb;
    }
    hlen += (size_t)snprintf(h + hlen, hcap - hlen, "}");
    while (hlen % 8) h[hlen++] = ' ';   /* hcap leaves room: entries are far below 256 bytes */
    uint8_t *data = skv_malloc(off, "tensor data");
    if (!data) { free(h); return -1; }
    off = 0;
    for (int i = 0; i < n; i++) {
        put_values(data + off, t[i].data, numel(&t[i]), t[i].type);
        off += numel(&t[i]) * type_bytes(t[i].type);
    }
    int rc = tiny_write_raw(path, hlen, h, hlen, data, off);
    free(h);
    free(data);
    return rc;
}

/* All tensors of m with HF names (names point into a static-lifetime pool owned by caller). */
typedef struct { char name[96]; tiny_tensor t; } named;

static int hf_tensors(const tiny_model *m, int type, named **out) {
    const skv_config *c = &m->cfg;
    int cap = 3 + c->n_layer * 16, n = 0;
    const int gemma = c->arch == SKV_ARCH_GEMMA3;
    named *v = calloc((size_t)cap, sizeof *v);
    if (!v) return -1;
    int64_t C = c->dim, F = c->ffn_dim, V = c->vocab, Q = (int64_t)c->n_head * c->head_dim,
            KV = (int64_t)c->n_kv_head * c->head_dim;
#define ADD(nm, ptr, r, cl) do { \
        snprintf(v[n].name, sizeof v[n].name, "%s", nm); \
        v[n].t = (tiny_tensor){v[n].name, type, (cl) ? 2 : 1, {(r), (cl)}, (ptr)}; n++; } while (0)
    ADD("model.embed_tokens.weight", m->embd, V, C);
    for (int l = 0; l < c->n_layer; l++) {
        const tiny_layer *y = &m->layers[l];
        char nm[96];
#define L(suffix, ptr, r, cl) do { snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix); ADD(nm, ptr, r, cl); } while (0)
        L("input_layernorm.weight", y->attn_norm, C, 0);
        L("self_attn.q_proj.weight", y->wq, Q, C);
        L("self_attn.k_proj.weight", y->wk, KV, C);
        L("self_attn.v_proj.weight", y->wv, KV, C);
        if (y->bq) {
            L("self_attn.q_proj.bias", y->bq, Q, 0);
            L("self_attn.k_proj.bias", y->bk, KV, 0);
            L("self_attn.v_proj.bias", y->bv, KV, 0);
        }
        L("self_attn.o_proj.weight", y->wo, C, Q);
        if (y->q_norm) {
            L("self_attn.q_norm.weight", y->q_norm, c->head_dim, 0);
            L("self_attn.k_norm.weight", y->k_norm, c->head_dim, 0);
        }
        if (gemma) {
            L("post_attention_layernorm.weight", y->post_attn_norm, C, 0);
            L("pre_feedforward_layernorm.weight", y->ffn_norm, C, 0);
            L("post_feedforward_layernorm.weight", y->post_ffn_norm, C, 0);
        } else {
            L("post_attention_layernorm.weight", y->ffn_norm, C, 0);
        }
        L("mlp.gate_proj.weight", y->gate, F, C);
        L("mlp.up_proj.weight", y->up, F, C);
        L("mlp.down_proj.weight", y->down, C, F);
#undef L
    }
    ADD("model.norm.weight", m->out_norm, C, 0);
    if (m->output) ADD("lm_head.weight", m->output, V, C);
#undef ADD
    *out = v;
    return n;
}

static int write_text(const char *path, const char *text) {
    return skv_write_file_atomic(path, text, strlen(text));
}

/* config.json of a tiny_model_new_family model (the fields its family reads) */
static void family_config(const tiny_model *m, char *cfg, size_t cap, const char *dt) {
    const skv_config *c = &m->cfg;
    const char *type = c->arch == SKV_ARCH_GEMMA3 ? "gemma3_text" : c->arch == SKV_ARCH_QWEN3 ? "qwen3"
                     : c->arch == SKV_ARCH_MISTRAL ? "mistral" : "llama";
    const char *cls = c->arch == SKV_ARCH_GEMMA3 ? "Gemma3ForCausalLM" : c->arch == SKV_ARCH_QWEN3 ? "Qwen3ForCausalLM"
                    : c->arch == SKV_ARCH_MISTRAL ? "MistralForCausalLM" : "LlamaForCausalLM";
    char extra[768] = "";
    if (c->arch == SKV_ARCH_LLAMA)
        snprintf(extra, sizeof extra, ",\n  \"attention_bias\": false,\n  \"hidden_act\": \"silu\",\n"
                 "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.1f, \"low_freq_factor\": %.1f, "
                 "\"high_freq_factor\": %.1f, \"original_max_position_embeddings\": %d}",
                 (double)c->rope_factor, (double)c->rope_low_freq, (double)c->rope_high_freq, c->rope_orig_ctx);
    else if (c->arch == SKV_ARCH_MISTRAL)
        snprintf(extra, sizeof extra, ",\n  \"hidden_act\": \"silu\",\n  \"sliding_window\": %d", c->sliding_window);
    else if (c->arch == SKV_ARCH_QWEN3)
        snprintf(extra, sizeof extra, ",\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n"
                 "  \"use_sliding_window\": false,\n  \"sliding_window\": null");
    else
        snprintf(extra, sizeof extra, ",\n  \"hidden_activation\": \"gelu_pytorch_tanh\",\n  \"query_pre_attn_scalar\": %d,\n"
                 "  \"sliding_window\": %d,\n  \"layer_types\": [\"%s\", \"%s\"],\n"
                 "  \"rope_local_base_freq\": %.1f,\n  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": %.1f},\n"
                 "  \"final_logit_softcapping\": %.1f,\n  \"attn_logit_softcapping\": null,\n  \"attention_bias\": false",
                 c->head_dim, c->sliding_window, m->layers[0].window ? "sliding_attention" : "full_attention",
                 m->layers[1].window ? "sliding_attention" : "full_attention", (double)c->rope_theta_local,
                 (double)c->rope_factor, (double)c->final_softcap);
    snprintf(cfg, cap,
             "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
             "  \"rms_norm_eps\": %g,\n  \"rope_theta\": %.1f,\n  \"max_position_embeddings\": %d,\n"
             "  \"vocab_size\": %d,\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"%s\n}\n",
             cls, type, c->dim, c->ffn_dim, c->n_layer, c->n_head, c->n_kv_head, c->head_dim, (double)c->norm_eps,
             (double)c->rope_theta, c->ctx_max, c->vocab, c->tied_embeddings ? "true" : "false", dt, extra);
}

int tiny_model_write_hf(const tiny_model *m, const char *dir, int type, int n_shards) {
    const skv_config *c = &m->cfg;
    char path[1024], cfg[2048];
    const char *dt = type == SKV_F32 ? "float32" : type == SKV_F16 ? "float16" : "bfloat16";
    if (skv_config_extra_feature(c) || c->arch > SKV_ARCH_QWEN2) family_config(m, cfg, sizeof cfg, dt);
    else snprintf(cfg, sizeof cfg,
             "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
             "  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": %.1f,\n  \"max_position_embeddings\": %d,\n"
             "  \"vocab_size\": %d,\n  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n"
             "  \"rope_scaling\": null,\n  \"torch_dtype\": \"%s\"%s\n}\n",
             c->arch == SKV_ARCH_QWEN2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM",
             c->arch == SKV_ARCH_QWEN2 ? "qwen2" : "llama", c->dim, c->ffn_dim, c->n_layer, c->n_head,
             c->n_kv_head, c->head_dim, (double)c->rope_theta, c->ctx_max, c->vocab,
             c->tied_embeddings ? "true" : "false", dt,
             c->arch == SKV_ARCH_LLAMA ? ",\n  \"attention_bias\": false" : ",\n  \"use_sliding_window\": false");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_text(path, cfg) != 0) return -1;

    named *v;
    int n = hf_tensors(m, type, &v);
    if (n < 0) return skv_error("out of memory (tiny tensors)");
    int rc = 0;
    if (n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        tiny_tensor *t = calloc((size_t)n, sizeof *t);
        if (!t) { free(v); return skv_error("out of memory"); }
        for (int i = 0; i < n; i++) t[i] = v[i].t;
        rc = tiny_write_safetensors(path, t, n);
        free(t);
        free(v);
        return rc;
    }
    /* shard k holds tensors [k*n/S, (k+1)*n/S); the index maps each name to its shard */
    size_t icap = 256 + (size_t)n * 160, il = 0;
    char *idx = malloc(icap);
    tiny_tensor *t = calloc((size_t)n, sizeof *t);
    if (!idx || !t) { free(idx); free(t); free(v); return skv_error("out of memory"); }
    il += (size_t)snprintf(idx + il, icap - il, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
    for (int k = 0; k < n_shards && rc == 0; k++) {
        int a = k * n / n_shards, b = (k + 1) * n / n_shards;
        char fname[64];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        for (int i = a; i < b; i++) {
            t[i - a] = v[i].t;
            il += (size_t)snprintf(idx + il, icap - il, "%s\n    \"%s\": \"%s\"", i ? "," : "", v[i].name, fname);
        }
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        rc = tiny_write_safetensors(path, t, b - a);
    }
    il += (size_t)snprintf(idx + il, icap - il, "\n  }\n}\n");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (rc == 0) rc = write_text(path, idx);
    free(idx);
    free(t);
    free(v);
    return rc;
}

/* ---- GGUF ---- */

/* HF -> GGUF llama Q/K row order: within each head of d rows, HF row i (i < d/2) becomes
 * row 2i and HF row d/2 + i becomes row 2i + 1, so RoPE pairs (i, i + d/2) turn into
 * adjacent pairs (2i, 2i + 1). w: [n_head * d x cols]. Returns a new array. */
static float *permute_rope_rows(const float *w, int n_head, int d, int64_t cols) {
    float *o = malloc((size_t)n_head * (size_t)d * (size_t)cols * sizeof *o);
    if (!o) return NULL;
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < d / 2; i++) {
            memcpy(o + ((size_t)h * d + 2 * i) * cols, w + ((size_t)h * d + i) * cols, (size_t)cols * sizeof *o);
            memcpy(o + ((size_t)h * d + 2 * i + 1) * cols, w + ((size_t)h * d + d / 2 + i) * cols,
                   (size_t)cols * sizeof *o);
        }
    return o;
}

/* v + add (Gemma's 1 + w as the converter stores it); a new array */
static float *plus(const float *v, size_t n, float add) {
    float *o = malloc(n * sizeof *o);
    if (o) for (size_t i = 0; i < n; i++) o[i] = v[i] + add;
    return o;
}

/* The converter's Llama 3 rope_freqs: per frequency the divisor of theta^(-2i/d) */
static void llama3_factors(const skv_config *c, float *f) {
    const double pi = 3.14159265358979323846, lo_wl = c->rope_orig_ctx / c->rope_low_freq,
                 hi_wl = c->rope_orig_ctx / c->rope_high_freq;
    for (int i = 0; i < c->head_dim / 2; i++) {
        const double wl = 2 * pi * pow((double)c->rope_theta, (double)(2 * i) / c->head_dim);
        if (wl < hi_wl) f[i] = 1.0f;
        else if (wl > lo_wl) f[i] = c->rope_factor;
        else {
            const double sm = (c->rope_orig_ctx / wl - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
            f[i] = (float)(1.0 / ((1 - sm) / c->rope_factor + sm));
        }
    }
}

/* The byte-level BPE tokenizer of a tiny model (tiny_model.byte_bpe): ids 0-255 are the
 * bytes in the GPT-2 byte alphabet, id 256 + i the merge of tiny_bpe_merges[i] (ASCII pairs,
 * ' ' written as the alphabet's U+0120), as many as the vocabulary holds. */
static const char *const tiny_bpe_merges[] = {
    " t", " a", "he", "in", "re", "on", " s", "er", " w", "at", "nd", "ou", " o", "es", "ed",
    "en", "it", "or", "is", "an", "ar", "ng", " b", " c", " f", " h", " m", " p", "le", "st",
    "al", "te", "ti", "as", "ve", "ro", "co", "ra", "ha", "de", "to", "ri", "ea", "el"};

/* byte b in the GPT-2 byte alphabet, NUL-terminated (at most 2 bytes of UTF-8) */
static void byte_sym(uint8_t b, char out[5]) {
    int n = skv_utf8_encode(skv_byte_to_unicode(b), out);
    out[n > 0 ? n : 0] = 0;
}

static int add_byte_bpe(gw_writer *w, int vocab) {
    int n_merge = vocab - 256, cap = (int)(sizeof tiny_bpe_merges / sizeof tiny_bpe_merges[0]);
    if (n_merge < 0) return skv_error("tiny byte_bpe: vocabulary %d < 256", vocab);
    if (n_merge > cap) n_merge = cap;   /* the rest of the ids: unused filler tokens */
    char (*tok)[24] = calloc((size_t)vocab, sizeof *tok);
    char (*mer)[16] = calloc((size_t)(n_merge > 0 ? n_merge : 1), sizeof *mer);
    const char **tp = calloc((size_t)vocab, sizeof *tp), **mp = calloc((size_t)(n_merge > 0 ? n_merge : 1), sizeof *mp);
    int32_t *type = calloc((size_t)vocab, sizeof *type);
    int rc = (!tok || !mer || !tp || !mp || !type) ? skv_error("out of memory") : 0;
    for (int i = 0; rc == 0 && i < vocab; i++) {
        type[i] = 1;
        tp[i] = tok[i];
        if (i < 256) {
            byte_sym((uint8_t)i, tok[i]);
        } else if (i < 256 + n_merge) {   /* "ab": token "ab", merge "a b" */
            const char *p = tiny_bpe_merges[i - 256];
            char a[5], b[5];
            byte_sym((uint8_t)p[0], a);
            byte_sym((uint8_t)p[1], b);
            snprintf(tok[i], sizeof tok[i], "%s%s", a, b);
            snprintf(mer[i - 256], sizeof mer[i - 256], "%s %s", a, b);
            mp[i - 256] = mer[i - 256];
        } else {
            snprintf(tok[i], sizeof tok[i], "<unused%d>", i);
            type[i] = 5;
        }
    }
    if (rc == 0) {
        rc |= gw_add_str(w, "tokenizer.ggml.model", "gpt2");
        rc |= gw_add_str(w, "tokenizer.ggml.pre", "qwen2");
        rc |= gw_add_arr_str(w, "tokenizer.ggml.tokens", tp, (uint64_t)vocab);
        rc |= gw_add_arr_str(w, "tokenizer.ggml.merges", mp, (uint64_t)n_merge);
        rc |= gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, type, (uint64_t)vocab);
    }
    free(tok); free(mer); free(tp); free(mp); free(type);
    return rc ? -1 : 0;
}

int tiny_model_write_gguf(const tiny_model *m, const char *path, int type) {
    const skv_config *c = &m->cfg;
    const char *arch = c->arch == SKV_ARCH_QWEN2 ? "qwen2" : c->arch == SKV_ARCH_QWEN3 ? "qwen3"
                     : c->arch == SKV_ARCH_GEMMA3 ? "gemma3" : "llama";
    int llama = c->arch == SKV_ARCH_LLAMA || c->arch == SKV_ARCH_MISTRAL;
    const float one = c->arch == SKV_ARCH_GEMMA3 ? 1.0f : 0.0f;
    gw_writer *w = gw_new();
    if (!w) return -1;
    char k[128];
    int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", arch, suffix), k)
    rc |= gw_add_str(w, "general.architecture", arch);
    rc |= gw_add_str(w, "general.name", "tiny");
    rc |= gw_add_u32(w, KEY("block_count"), (uint32_t)c->n_layer);
    rc |= gw_add_u32(w, KEY("context_length"), (uint32_t)c->ctx_max);
    rc |= gw_add_u32(w, KEY("embedding_length"), (uint32_t)c->dim);
    rc |= gw_add_u32(w, KEY("feed_forward_length"), (uint32_t)c->ffn_dim);
    rc |= gw_add_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    rc |= gw_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_head);
    rc |= gw_add_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    rc |= gw_add_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    rc |= gw_add_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    rc |= gw_add_f32(w, KEY("rope.freq_base"), c->rope_theta);
    rc |= gw_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->norm_eps);
    if (c->sliding_window) rc |= gw_add_u32(w, KEY("attention.sliding_window"), (uint32_t)c->sliding_window);
    if (c->arch == SKV_ARCH_GEMMA3) {   /* layer 0 sliding, layer 1 global: a pattern of 2 */
        rc |= gw_add_u32(w, KEY("attention.sliding_window_pattern"), 2);
        rc |= gw_add_f32(w, KEY("final_logit_softcapping"), c->final_softcap);
    }
    if (m->gguf_extra_key && m->gguf_extra_str) rc |= gw_add_str(w, m->gguf_extra_key, m->gguf_extra_str);
    else if (m->gguf_extra_key) rc |= gw_add_f32(w, m->gguf_extra_key, m->gguf_extra_f32);
    if (m->byte_bpe && rc == 0) rc = add_byte_bpe(w, c->vocab);
    if (c->rope_scale == SKV_ROPE_SCALE_LINEAR) {
        rc |= gw_add_str(w, KEY("rope.scaling.type"), "linear");
        rc |= gw_add_f32(w, KEY("rope.scaling.factor"), c->rope_factor);
    }
#undef KEY
    int64_t C = c->dim, F = c->ffn_dim, V = c->vocab, Q = (int64_t)c->n_head * c->head_dim,
            KV = (int64_t)c->n_kv_head * c->head_dim;
#define MAT(name, ptr, rows, cols) (rc |= gw_add_tensor_f32(w, name, type, 2, (int64_t[]){(cols), (rows)}, ptr))
#define VEC(name, ptr, n) (rc |= gw_add_tensor_f32(w, name, SKV_F32, 1, (int64_t[]){(n)}, ptr))
#define NORM(name, ptr, n) do { float *t_ = plus(ptr, (size_t)(n), one); \
        if (!t_) rc = -1; else { VEC(name, t_, n); free(t_); } } while (0)
    MAT("token_embd.weight", m->embd, V, C);
    if (c->rope_scale == SKV_ROPE_SCALE_LLAMA3) {
        float f[512];
        llama3_factors(c, f);
        VEC("rope_freqs.weight", f, c->head_dim / 2);
    }
    for (int l = 0; l < c->n_layer && rc == 0; l++) {
        const tiny_layer *y = &m->layers[l];
        char n[96];
#define N(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
        float *wq = llama ? permute_rope_rows(y->wq, c->n_head, c->head_dim, C) : NULL;
        float *wk = llama ? permute_rope_rows(y->wk, c->n_kv_head, c->head_dim, C) : NULL;
        if (llama && (!wq || !wk)) { free(wq); free(wk); rc = skv_error("out of memory"); break; }
        NORM(N("attn_norm.weight"), y->attn_norm, C);
        if (y->q_norm) {
            NORM(N("attn_q_norm.weight"), y->q_norm, c->head_dim);
            NORM(N("attn_k_norm.weight"), y->k_norm, c->head_dim);
        }
        if (y->post_attn_norm) {
            NORM(N("post_attention_norm.weight"), y->post_attn_norm, C);
            NORM(N("post_ffw_norm.weight"), y->post_ffn_norm, C);
        }
        MAT(N("attn_q.weight"), llama ? wq : y->wq, Q, C);
        MAT(N("attn_k.weight"), llama ? wk : y->wk, KV, C);
        MAT(N("attn_v.weight"), y->wv, KV, C);
        if (y->bq) {   /* qwen2: HF order, no permutation */
            VEC(N("attn_q.bias"), y->bq, Q);
            VEC(N("attn_k.bias"), y->bk, KV);
            VEC(N("attn_v.bias"), y->bv, KV);
        }
        MAT(N("attn_output.weight"), y->wo, C, Q);
        NORM(N("ffn_norm.weight"), y->ffn_norm, C);
        MAT(N("ffn_gate.weight"), y->gate, F, C);
        MAT(N("ffn_up.weight"), y->up, F, C);
        MAT(N("ffn_down.weight"), y->down, C, F);
        free(wq);
        free(wk);
#undef N
    }
    NORM("output_norm.weight", m->out_norm, C);
    if (m->output) MAT("output.weight", m->output, V, C);
#undef NORM
#undef MAT
#undef VEC
    if (rc == 0) rc = gw_write(w, path);
    gw_free(w);
    return rc ? -1 : 0;
}

skv_model *tiny_model_load(skv_arch arch, uint64_t seed, const char *tag) {
    tiny_model *t = tiny_model_new(arch, seed, 0, SKV_F32);
    char path[256];
    snprintf(path, sizeof path, "/tmp/skv_test_%s_%d.gguf", tag, (int)getpid());
    if (!t || tiny_model_write_gguf(t, path, SKV_F32)) { tiny_model_free(t); return NULL; }
    tiny_model_free(t);
    skv_model *m = skv_model_load_gguf(path);
    unlink(path);
    return m;
}

skv_model *test_load_smollm2(void) { return test_load_smollm2_ex(0); }

skv_model *test_load_smollm2_ex(int flags) {
    char path[1024];
    return test_model_path(path, sizeof path, TEST_SMOL) ? skv_model_load_ex(path, flags) : NULL;
}

int test_models_load(skv_model **tiny, skv_model **smol, skv_arch arch, uint64_t seed, const char *tag) {
    if (!(*tiny = tiny_model_load(arch, seed, tag))) return -1;
    *smol = test_load_smollm2();
    return 0;
}

void test_models_free(skv_model **tiny, skv_model **smol) {
    skv_model_free(*tiny);
    skv_model_free(*smol);
    *tiny = *smol = NULL;
}
