/* hf_config.c: read a Hugging Face config.json into a skv_config, for the families the engine
 * runs exactly: llama (plain, linear or llama3 RoPE scaling), mistral (optionally a sliding
 * window on every layer), qwen2, qwen3 (q/k norms) and gemma3_text (interleaved sliding-window
 * and global layers, their own RoPE bases, (1+w) norms, GeGLU, embedding scale, query scale,
 * final logit softcapping). Everything else a config can ask for is refused with a message
 * that names the field and its value: RoPE types dynamic / yarn / longrope / others,
 * attention-logit softcapping, bidirectional attention, qwen2/qwen3 sliding windows, biases
 * the engine lacks, activations other than the family's. */
#include "hf_config.h"
#include "common/util.h"
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Integer field: 1 ok, 0 absent (or null), -1 present but not a positive int. */
static int cfg_int(const cJSON *root, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1) || v->valuedouble > INT_MAX ||
        (double)(int)v->valuedouble != v->valuedouble)
        return -1;
    *out = (int)v->valuedouble;
    return 1;
}

static int cfg_float(const cJSON *root, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) return -1;
    *out = (float)v->valuedouble;
    return 1;
}

static int cfg_bool(const cJSON *root, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return -1;
    *out = cJSON_IsTrue(v);
    return 1;
}

static const char *cfg_str(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One RoPE parameter object (rope_scaling, rope_parameters or one of Gemma 3's per-layer-type
 * entries): its theta into *theta when present; its scaling into c when global, refused on
 * the local (sliding) entry unless default. */
static int rope_entry(const char *path, const char *key, const cJSON *rs, skv_config *c, float *theta, int global) {
    if (!cJSON_IsObject(rs)) return skv_error("%s: %s must be an object or null", path, key);
    const char *ty = cfg_str(rs, "rope_type");
    if (!ty) ty = cfg_str(rs, "type");
    if (!ty) ty = "default";
    if (cfg_float(rs, "rope_theta", theta) < 0) return skv_error("%s: %s.rope_theta must be a positive number", path, key);
    if (!strcmp(ty, "default")) return 0;
    if (!global || (strcmp(ty, "linear") && strcmp(ty, "llama3")))
        return skv_error("%s: %s has rope_type '%.32s': not supported (supported: default, linear, llama3%s)",
                         path, key, ty, global ? "" : " on global layers only");
    c->rope_scale = strcmp(ty, "linear") ? SKV_ROPE_SCALE_LLAMA3 : SKV_ROPE_SCALE_LINEAR;
    if (cfg_float(rs, "factor", &c->rope_factor) != 1) return skv_error("%s: %s.factor must be a positive number", path, key);
    const cJSON *af = cJSON_GetObjectItemCaseSensitive(rs, "attention_factor");
    if (af && !cJSON_IsNull(af) && !(cJSON_IsNumber(af) && af->valuedouble == 1.0))
        return skv_error("%s: %s.attention_factor other than 1 is not supported", path, key);
    if (c->rope_scale == SKV_ROPE_SCALE_LLAMA3 &&
        (cfg_float(rs, "low_freq_factor", &c->rope_low_freq) != 1 || cfg_float(rs, "high_freq_factor", &c->rope_high_freq) != 1 ||
         cfg_int(rs, "original_max_position_embeddings", &c->rope_orig_ctx) != 1))
        return skv_error("%s: %s (llama3) needs positive low_freq_factor, high_freq_factor and "
                         "original_max_position_embeddings", path, key);
    return 0;
}

/* rope_scaling (transformers < 5) and rope_parameters (>= 5; Gemma 3: one entry per layer type) */
static int parse_rope(const char *path, const cJSON *root, skv_config *c) {
    static const char *const keys[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!rs || cJSON_IsNull(rs)) continue;
        const cJSON *full = cJSON_IsObject(rs) ? cJSON_GetObjectItemCaseSensitive(rs, "full_attention") : NULL;
        const cJSON *slide = cJSON_IsObject(rs) ? cJSON_GetObjectItemCaseSensitive(rs, "sliding_attention") : NULL;
        if (full || slide) {
            if (c->arch != SKV_ARCH_GEMMA3)
                return skv_error("%s: %s per layer type is only supported for gemma3", path, keys[i]);
            if (full && rope_entry(path, "rope_parameters.full_attention", full, c, &c->rope_theta, 1)) return -1;
            if (slide && rope_entry(path, "rope_parameters.sliding_attention", slide, c, &c->rope_theta_local, 0)) return -1;
        } else if (rope_entry(path, keys[i], rs, c, &c->rope_theta, 1)) {
            return -1;
        }
    }
    return 0;
}

static int parse_arch(const char *path, const cJSON *root, skv_config *c) {
    static const struct { const char *type, *cls; skv_arch arch; } fam[] = {
        {"llama", "LlamaForCausalLM", SKV_ARCH_LLAMA},   {"qwen2", "Qwen2ForCausalLM", SKV_ARCH_QWEN2},
        {"qwen3", "Qwen3ForCausalLM", SKV_ARCH_QWEN3},   {"gemma3_text", "Gemma3ForCausalLM", SKV_ARCH_GEMMA3},
        {"mistral", "MistralForCausalLM", SKV_ARCH_MISTRAL},
    };
    const char *mt = cfg_str(root, "model_type");
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *cls = cJSON_IsArray(ar) && cJSON_IsString(cJSON_GetArrayItem(ar, 0)) ? cJSON_GetArrayItem(ar, 0)->valuestring : NULL;
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++)
        if ((mt && !strcmp(mt, fam[i].type)) || (!mt && cls && !strcmp(cls, fam[i].cls))) {
            c->arch = fam[i].arch;
            return 0;
        }
    if (mt && !strcmp(mt, "gemma3"))
        return skv_error("%s: model_type 'gemma3' is the multimodal Gemma 3 (not supported; the text-only "
                         "gemma3_text checkpoints are)", path);
    if (mt) return skv_error("%s: unsupported model_type '%.64s' (supported: llama, mistral, qwen2, qwen3, gemma3_text)", path, mt);
    if (cls) return skv_error("%s: unsupported architecture '%.64s' (supported: LlamaForCausalLM, MistralForCausalLM, "
                              "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM)", path, cls);
    return skv_error("%s: no model_type or architectures field", path);
}

/* layer_types (gemma3: sliding_attention / full_attention per layer, else every
 * sliding_window_pattern-th layer global; mistral: every layer when sliding_window is set) */
static int parse_windows(const char *path, const cJSON *root, skv_config *c, int *win) {
    int sw = 0;
    int r = cfg_int(root, "sliding_window", &sw);
    if (r < 0) return skv_error("%s: sliding_window must be a positive integer or null", path);
    if (c->arch == SKV_ARCH_MISTRAL) {
        for (int l = 0; l < c->n_layer; l++) win[l] = r == 1;
    } else if (c->arch == SKV_ARCH_GEMMA3) {
        int bidi = 0;
        if (cfg_bool(root, "use_bidirectional_attention", &bidi) < 0 || bidi)
            return skv_error("%s: use_bidirectional_attention is not supported", path);
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
        int pat = 6;
        if (lt && !cJSON_IsNull(lt)) {
            if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layer)
                return skv_error("%s: layer_types must list %d layer types", path, c->n_layer);
            for (int l = 0; l < c->n_layer; l++) {
                const cJSON *e = cJSON_GetArrayItem(lt, l);
                if (cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention")) win[l] = 1;
                else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) win[l] = 0;
                else return skv_error("%s: layer_types[%d] is not sliding_attention or full_attention", path, l);
            }
        } else {
            if (cfg_int(root, "sliding_window_pattern", &pat) < 0) return skv_error("%s: bad sliding_window_pattern", path);
            for (int l = 0; l < c->n_layer; l++) win[l] = (l + 1) % pat != 0;
        }
        if (r != 1) for (int l = 0; l < c->n_layer; l++) if (win[l]) return skv_error("%s: sliding layers but no sliding_window", path);
    } else {
        int use = 0;
        if (cfg_bool(root, "use_sliding_window", &use) < 0) return skv_error("%s: use_sliding_window must be true or false", path);
        if (use) return skv_error("%s: use_sliding_window=true is not supported for %s", path, skv_arch_name(c->arch));
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
        for (int l = 0; cJSON_IsArray(lt) && l < cJSON_GetArraySize(lt); l++) {
            const cJSON *e = cJSON_GetArrayItem(lt, l);
            if (!(cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")))
                return skv_error("%s: layer_types[%d] is not full_attention (not supported for %s)", path, l,
                                 skv_arch_name(c->arch));
        }
    }
    c->n_window_layers = 0;
    for (int l = 0; l < c->n_layer; l++) c->n_window_layers += win[l];
    c->sliding_window = c->n_window_layers ? sw : 0;
    return 0;
}

static int parse_gemma(const char *path, const cJSON *root, skv_config *c) {
    c->has_qk_norm = 1;
    c->has_post_norms = 1;
    c->act = SKV_ACT_GELU_TANH;
    c->embd_scale = sqrtf((float)c->dim);
    float qs = 256.0f, cap = 0.0f;
    if (cfg_float(root, "query_pre_attn_scalar", &qs) < 0) return skv_error("%s: query_pre_attn_scalar must be positive", path);
    c->attn_scale = 1.0f / sqrtf(qs);
    if (cfg_float(root, "final_logit_softcapping", &c->final_softcap) < 0)
        return skv_error("%s: final_logit_softcapping must be a positive number or null", path);
    if (cfg_float(root, "attn_logit_softcapping", &cap) != 0)
        return skv_error("%s: attn_logit_softcapping is set: attention-logit softcapping is not supported", path);
    const char *act = cfg_str(root, "hidden_activation");
    if (!act) act = cfg_str(root, "hidden_act");
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return skv_error("%s: hidden_activation '%.32s' is not supported for gemma3 (need gelu_pytorch_tanh)", path, act);
    return 0;
}

static int parse(const char *path, const cJSON *root, skv_config *c, int **windowed) {
    if (parse_arch(path, root, c)) return -1;
    static const struct { const char *key; size_t off; } req[] = {
        {"hidden_size", offsetof(skv_config, dim)},
        {"intermediate_size", offsetof(skv_config, ffn_dim)},
        {"num_hidden_layers", offsetof(skv_config, n_layer)},
        {"num_attention_heads", offsetof(skv_config, n_head)},
        {"vocab_size", offsetof(skv_config, vocab)},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        int r = cfg_int(root, req[i].key, (int *)((char *)c + req[i].off));
        if (r == 0) return skv_error("%s: missing %s", path, req[i].key);
        if (r < 0) return skv_error("%s: %s must be a positive integer", path, req[i].key);
    }
    const int gemma = c->arch == SKV_ARCH_GEMMA3;
    c->n_kv_head = c->n_head;
    c->head_dim = gemma ? 256 : c->dim / c->n_head;
    c->ctx_max = c->arch == SKV_ARCH_QWEN2 ? 32768 : 2048;
    c->rope_theta = gemma ? 1000000.0f : 10000.0f;
    c->rope_theta_local = gemma ? 10000.0f : 0.0f;
    c->norm_eps = 1e-6f;
    if (cfg_int(root, "num_key_value_heads", &c->n_kv_head) < 0 || cfg_int(root, "head_dim", &c->head_dim) < 0 ||
        cfg_int(root, "max_position_embeddings", &c->ctx_max) < 0)
        return skv_error("%s: num_key_value_heads, head_dim and max_position_embeddings must be positive integers", path);
    if (cfg_float(root, "rope_theta", &c->rope_theta) < 0 || cfg_float(root, "rms_norm_eps", &c->norm_eps) < 0 ||
        cfg_float(root, "rope_local_base_freq", &c->rope_theta_local) < 0)
        return skv_error("%s: rope_theta, rope_local_base_freq and rms_norm_eps must be positive numbers", path);
    /* LlamaConfig, Qwen2/3Config and MistralConfig default tie_word_embeddings to false, Gemma3 to true */
    c->tied_embeddings = gemma;
    int attn_bias = 0, mlp_bias = 0;
    if (cfg_bool(root, "tie_word_embeddings", &c->tied_embeddings) < 0 || cfg_bool(root, "attention_bias", &attn_bias) < 0 ||
        cfg_bool(root, "mlp_bias", &mlp_bias) < 0)
        return skv_error("%s: tie_word_embeddings, attention_bias and mlp_bias must be true or false", path);
    /* qwen2 always has q/k/v biases (and no o bias); elsewhere attention_bias would add an
     * o_proj bias too, which the engine does not have */
    if (c->arch == SKV_ARCH_QWEN2) c->has_qkv_bias = 1;
    else if (attn_bias) return skv_error("%s: attention_bias=true (q/k/v/o biases) is not supported for %s", path, skv_arch_name(c->arch));
    if (mlp_bias) return skv_error("%s: mlp_bias=true is not supported", path);
    if (c->n_head % c->n_kv_head != 0)
        return skv_error("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path, c->n_head, c->n_kv_head);
    if (parse_rope(path, root, c)) return -1;
    if (gemma) {
        if (parse_gemma(path, root, c)) return -1;
    } else {
        const char *act = cfg_str(root, "hidden_act");
        if (cJSON_GetObjectItemCaseSensitive(root, "hidden_act") && !(act && !strcmp(act, "silu")))
            return skv_error("%s: hidden_act must be \"silu\"", path);
        c->has_qk_norm = c->arch == SKV_ARCH_QWEN3;
    }
    if (c->head_dim % 2 != 0) return skv_error("%s: head_dim %d must be even and positive", path, c->head_dim);
    if ((int64_t)c->n_head * c->head_dim > INT_MAX || c->n_layer > 4096)
        return skv_error("%s: implausible sizes (%d layers, %d heads of %d)", path, c->n_layer, c->n_head, c->head_dim);
    if (!(*windowed = skv_calloc((size_t)c->n_layer, sizeof(int), "layer types"))) return -1;
    if (parse_windows(path, root, c, *windowed)) return -1;
    c->rope_mode = SKV_ROPE_HALVES;
    return skv_config_check(c, path);
}

int skv_hf_parse_config(const char *path, skv_config *c, int **windowed) {
    *windowed = NULL;
    size_t len;
    char *text = skv_read_file(path, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return skv_error("%s: not a valid JSON object", path);
    }
    memset(c, 0, sizeof *c);
    int rc = parse(path, root, c, windowed);
    cJSON_Delete(root);
    if (rc) { free(*windowed); *windowed = NULL; }
    return rc;
}
