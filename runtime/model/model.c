/* model.c: build a skv_model from a GGUF file (llama incl. Llama 3 RoPE scaling and a
 * sliding window, qwen2, qwen3, gemma3), dispatch loading of a path to the GGUF or Hugging
 * Face loader, free either kind, and KV-size arithmetic.
 *
 * GGUF layout facts used here: tensor ne[0] is the row length (input dim), ne[1] the rows.
 *   token_embd.weight  (vocab, C)          output.weight (vocab, C), absent -> tied
 *   blk.N.attn_q       (H*d, C)            attn_k / attn_v (Hkv*d, C)
 *   blk.N.attn_output  (C, H*d)            ffn_gate / ffn_up (F, C), ffn_down (C, F)
 *   *_norm.weight      (C) F32             blk.N.attn_{q,k,v}.bias (qwen2) F32
 *   blk.N.attn_{q,k}_norm (d) F32 (qwen3, gemma3)   blk.N.post_attention_norm, post_ffw_norm (gemma3)
 *   rope_freqs.weight  (d/2) F32: Llama 3's per-frequency divisors (the converter's llama3 scaling)
 * The llama converter permutes Q/K rows so that RoPE pairs are adjacent; qwen2/qwen3/gemma3
 * files keep the Hugging Face layout (pairs are d/2 apart). The gemma3 converter stores its
 * norms as 1 + w already. Gemma 3's fixed facts the file does not carry are llama.cpp's:
 * every 6th layer global (sliding_window_pattern when present), local RoPE base 10000,
 * query scale 1/sqrt(head_dim) (1/sqrt(C/H) for the 62-layer 27B). */
#include "model.h"
#include "runtime/format/gguf.h"
#include "common/hugemem.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

static skv_model *load_gguf(const char *path, int flags);

skv_model *skv_model_load_ex(const char *path, int flags) {
    struct stat st;
    if (!path) { skv_error("skv_model_load: no path"); return NULL; }
    if (stat(path, &st) != 0) { skv_error("%s: cannot open model (no such file or directory)", path); return NULL; }
    if (S_ISDIR(st.st_mode)) return skv_model_load_hf(path);
    return load_gguf(path, flags);
}

skv_model *skv_model_load(const char *path) { return skv_model_load_ex(path, 0); }
skv_model *skv_model_load_gguf(const char *path) { return load_gguf(path, 0); }

void skv_model_free(skv_model *m) {
    if (!m) return;
    skv_huge_free(m->pack_arena, m->pack_bytes);   /* the copies; x8 groups go with the weights */
    if (m->tok) skv_tokenizer_free(m->tok);
    if (m->gguf) gguf_close((gguf_file *)m->gguf);
    if (m->hf) skv_hf_free(m->hf);
    free(m->layers);
    free(m->rope_freq);
    free(m->rope_freq_local);
    free(m->name);
    free(m->path);
    free(m);
}

size_t skv_model_kv_bytes_per_token(const skv_model *m, size_t elem_bytes) {
    const skv_config *c = &m->cfg;
    return 2u * (size_t)c->n_layer * (size_t)c->n_kv_head * (size_t)c->head_dim * elem_bytes;
}

/* ---- GGUF ---- */

/* Integer hyper-parameter "<arch>.<key>"; def < 0 means required. */
static int get_int(const gguf_file *f, const char *arch, const char *key, int64_t def, int *out) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!gguf_find(f, k)) {
        if (def < 0) return skv_error("%s: missing metadata key '%s'", f->path, k);
        *out = (int)def;
        return 0;
    }
    int64_t v;
    if (gguf_get_i64(f, k, &v) != 0) return -1;
    if (v <= 0 || v > (1 << 30)) return skv_error("%s: metadata '%s' = %lld is out of range", f->path, k, (long long)v);
    *out = (int)v;
    return 0;
}

static int get_float(const gguf_file *f, const char *arch, const char *key, float def, float *out) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!gguf_find(f, k)) { *out = def; return 0; }
    return gguf_get_f32(f, k, out);
}

/* Look up a tensor and check its type and shape: rows x cols (rows = 1 for vectors).
 * optional: a missing tensor leaves w->data NULL and succeeds. */
static int bind(const gguf_file *f, skv_weight *w, const char *name, int64_t rows, int64_t cols,
                bool vector, bool optional, size_t *total) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional) return 0;
        return skv_error("%s: missing tensor '%s'", f->path, name);
    }
    if (!skv_type_supported(t->type))
        return skv_error("%s: tensor '%s' has unsupported type %d (%s)", f->path, name, t->type,
                         skv_type_name(t->type) ? skv_type_name(t->type) : "?");
    int64_t trows = vector ? 1 : t->ne[1];
    int want_dims = vector ? 1 : 2;
    bool ok = t->ne[0] == cols && trows == rows && t->ne[2] == 1 && t->ne[3] == 1 &&
              (t->n_dims <= want_dims);
    if (!ok)
        return skv_error("%s: tensor '%s' has shape [%lld, %lld, %lld, %lld] (ne), expected [%lld%s%lld] from the model config",
                         f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)cols, vector ? "" : ", ", vector ? 0LL : (long long)rows);
    if (vector && t->type != SKV_F32)
        return skv_error("%s: tensor '%s' must be F32, is %s", f->path, name, skv_type_name(t->type));
    size_t rb = skv_row_bytes(t->type, cols), need;
    if (rb == 0) return skv_error_prefix("%s: tensor '%s'", f->path, name);
    if (!skv_mul_ok(rb, (size_t)rows, &need) || need > t->nbytes)
        return skv_error("%s: tensor '%s' holds %zu bytes, %lld rows of %s need more", f->path, name,
                         t->nbytes, (long long)rows, skv_type_name(t->type));
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    *total += need;
    return 0;
}

/* The GGUF keys beyond the plain llama/qwen2 block: RoPE scaling, sliding windows, Gemma 3. */
static int load_config_ext(const gguf_file *f, const char *arch, skv_config *c) {
    char k[160];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    char *st = gguf_find(f, k) ? gguf_get_str(f, k) : NULL;
    if (gguf_find(f, k) && !st) return skv_error_prefix("%s: %s", f->path, k);
    if (st && strcmp(st, "none") != 0) {
        int lin = !strcmp(st, "linear");
        if (!lin) {
            skv_error("%s: %s is '%.32s': RoPE scaling of that type is not supported (supported: none, linear, "
                      "and llama3 through rope_freqs)", f->path, k, st);
            free(st);
            return -1;
        }
        c->rope_scale = SKV_ROPE_SCALE_LINEAR;
        if (get_float(f, arch, "rope.scaling.factor", 1.0f, &c->rope_factor)) { free(st); return -1; }
    }
    free(st);
    float cap = 0.0f;
    if (get_float(f, arch, "attn_logit_softcapping", 0.0f, &cap)) return -1;
    if (cap != 0.0f) return skv_error("%s: %s.attn_logit_softcapping is set: attention-logit softcapping is not supported", f->path, arch);
    if (get_float(f, arch, "final_logit_softcapping", 0.0f, &c->final_softcap)) return -1;
    snprintf(k, sizeof k, "%s.attention.sliding_window", arch);
    if (gguf_find(f, k) && get_int(f, arch, "attention.sliding_window", 0, &c->sliding_window)) return -1;
    if (c->arch == SKV_ARCH_QWEN2 && c->sliding_window)
        return skv_error("%s: qwen2 with a sliding window is not supported", f->path);
    if (c->arch == SKV_ARCH_QWEN3) c->has_qk_norm = 1;
    if (c->arch == SKV_ARCH_GEMMA3) {
        if (!c->sliding_window) return skv_error("%s: gemma3 without %s.attention.sliding_window", f->path, arch);
        c->has_qk_norm = c->has_post_norms = 1;
        c->act = SKV_ACT_GELU_TANH;
        c->embd_scale = sqrtf((float)c->dim);
        c->rope_theta_local = 10000.0f;
        c->attn_scale = 1.0f / sqrtf(c->n_layer == 62 ? (float)(c->dim / c->n_head) : (float)c->head_dim);
    }
    return skv_config_check(c, f->path);
}

static int load_config(const gguf_file *f, skv_config *c, char **arch_out) {
    char *arch = gguf_get_str(f, "general.architecture");
    if (!arch) return skv_error_prefix("%s: cannot read the architecture", f->path);
    *arch_out = arch;
    if (strcmp(arch, "llama") == 0) {
        c->arch = SKV_ARCH_LLAMA;
        c->rope_mode = SKV_ROPE_ADJACENT;
    } else if (strcmp(arch, "qwen2") == 0 || strcmp(arch, "qwen3") == 0) {
        c->arch = arch[4] == '2' ? SKV_ARCH_QWEN2 : SKV_ARCH_QWEN3;
        c->rope_mode = SKV_ROPE_HALVES;
    } else if (strcmp(arch, "gemma3") == 0) {
        c->arch = SKV_ARCH_GEMMA3;
        c->rope_mode = SKV_ROPE_HALVES;
    } else {
        return skv_error("%s: unsupported architecture '%s' (supported: llama, qwen2, qwen3, gemma3)", f->path, arch);
    }
    if (get_int(f, arch, "block_count", -1, &c->n_layer) || get_int(f, arch, "embedding_length", -1, &c->dim) ||
        get_int(f, arch, "feed_forward_length", -1, &c->ffn_dim) ||
        get_int(f, arch, "attention.head_count", -1, &c->n_head))
        return -1;
    if (get_int(f, arch, "attention.head_count_kv", c->n_head, &c->n_kv_head) ||
        get_int(f, arch, "context_length", 2048, &c->ctx_max))
        return -1;
    int hd_default = c->dim / c->n_head;
    if (get_int(f, arch, "attention.key_length", hd_default, &c->head_dim)) return -1;
    int vl = c->head_dim, rope_dim = c->head_dim;
    if (get_int(f, arch, "attention.value_length", c->head_dim, &vl)) return -1;
    if (get_int(f, arch, "rope.dimension_count", c->head_dim, &rope_dim)) return -1;
    if (vl != c->head_dim)
        return skv_error("%s: value head size %d differs from key head size %d (unsupported)", f->path, vl, c->head_dim);
    if (rope_dim != c->head_dim)
        return skv_error("%s: partial RoPE (%d of %d dims) is not supported", f->path, rope_dim, c->head_dim);
    if (c->head_dim % 2 != 0) return skv_error("%s: head size %d is odd", f->path, c->head_dim);
    if (c->n_head % c->n_kv_head != 0)
        return skv_error("%s: %d query heads are not a multiple of %d KV heads", f->path, c->n_head, c->n_kv_head);
    if (get_float(f, arch, "rope.freq_base", 10000.0f, &c->rope_theta) ||
        get_float(f, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps))
        return -1;
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0))
        return skv_error("%s: bad rope theta %g or norm epsilon %g", f->path, c->rope_theta, c->norm_eps);
    return load_config_ext(f, arch, c);
}

static skv_model *load_gguf(const char *path, int flags) {
    const char *mm = getenv("SKV_MMAP");
    const bool mapped = (flags & SKV_LOAD_MAPPED) || (mm && strcmp(mm, "0") != 0 && *mm);
    gguf_file *f = mapped ? gguf_open(path) : gguf_open_resident(path);
    if (!f) return NULL;
    skv_model *m = skv_calloc(1, sizeof *m, "model");
    char *arch = NULL;
    if (!m) { gguf_close(f); return NULL; }
    m->gguf = f;
    m->path = skv_strdup(path);
    skv_config *c = &m->cfg;
    if (!m->path || load_config(f, c, &arch) != 0) goto fail;

    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) { skv_error("%s: missing tensor 'token_embd.weight'", path); goto fail; }
    if (te->ne[1] <= 0 || te->ne[1] > (1 << 28)) { skv_error("%s: bad vocabulary size %lld", path, (long long)te->ne[1]); goto fail; }
    c->vocab = (int)te->ne[1];

    size_t tot = 0;
    const int64_t C = c->dim, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_kv_head * c->head_dim,
                  F = c->ffn_dim, V = c->vocab;
    if (bind(f, &m->tok_embd, "token_embd.weight", V, C, false, false, &tot) ||
        bind(f, &m->out_norm, "output_norm.weight", 1, C, true, false, &tot) ||
        bind(f, &m->output, "output.weight", V, C, false, true, &tot))
        goto fail;
    if (!m->output.data) { m->output = m->tok_embd; c->tied_embeddings = 1; }

    /* Each layer has at least 9 tensors: refuse a block_count the file cannot back before
     * allocating for it (a corrupt count up to 2^30 would otherwise ask for gigabytes). */
    if ((uint64_t)c->n_layer * 9 > f->n_tensors) {
        skv_error("%s: block_count %d needs at least %llu tensors, the file has %llu", path, c->n_layer,
                  (unsigned long long)c->n_layer * 9, (unsigned long long)f->n_tensors);
        goto fail;
    }
    m->layers = skv_calloc((size_t)c->n_layer, sizeof *m->layers, "model layers");
    if (!m->layers) goto fail;
    c->has_qkv_bias = -1;
    int swa_pattern = 6;
    if (get_int(f, arch, "attention.sliding_window_pattern", 6, &swa_pattern)) goto fail;
    for (int l = 0; l < c->n_layer; l++) {
        skv_layer *L = &m->layers[l];
        char n[96];
#define B(field, suffix, rows, cols, vec, opt) \
        (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), bind(f, &L->field, n, rows, cols, vec, opt, &tot))
        if (B(attn_norm, "attn_norm.weight", 1, C, true, false) || B(wq, "attn_q.weight", Q, C, false, false) ||
            B(wk, "attn_k.weight", KV, C, false, false) || B(wv, "attn_v.weight", KV, C, false, false) ||
            B(wo, "attn_output.weight", C, Q, false, false) || B(ffn_norm, "ffn_norm.weight", 1, C, true, false) ||
            B(w_gate, "ffn_gate.weight", F, C, false, false) || B(w_up, "ffn_up.weight", F, C, false, false) ||
            B(w_down, "ffn_down.weight", C, F, false, false) ||
            B(bq, "attn_q.bias", 1, Q, true, true) || B(bk, "attn_k.bias", 1, KV, true, true) ||
            B(bv, "attn_v.bias", 1, KV, true, true))
            goto fail;
        if ((c->has_qk_norm && (B(q_norm, "attn_q_norm.weight", 1, c->head_dim, true, false) ||
                                B(k_norm, "attn_k_norm.weight", 1, c->head_dim, true, false))) ||
            (c->has_post_norms && (B(post_attn_norm, "post_attention_norm.weight", 1, C, true, false) ||
                                   B(post_ffn_norm, "post_ffw_norm.weight", 1, C, true, false))))
            goto fail;
        if (!c->has_qk_norm && (gguf_find_tensor(f, (snprintf(n, sizeof n, "blk.%d.attn_q_norm.weight", l), n)) ||
                                gguf_find_tensor(f, (snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", l), n)))) {
            skv_error("%s: tensor '%s' is not part of a %s block (unsupported)", path, n, arch);
            goto fail;
        }
#undef B
        L->window = c->sliding_window && (c->arch != SKV_ARCH_GEMMA3 || (l + 1) % swa_pattern != 0) ? c->sliding_window : 0;
        c->n_window_layers += L->window != 0;
        int nb = (L->bq.data != NULL) + (L->bk.data != NULL) + (L->bv.data != NULL);
        if (nb != 0 && nb != 3) { skv_error("%s: layer %d has only some of the q/k/v biases", path, l); goto fail; }
        if (c->has_qkv_bias == -1) c->has_qkv_bias = nb == 3;
        else if (c->has_qkv_bias != (nb == 3)) { skv_error("%s: layer %d: q/k/v biases present in some layers only", path, l); goto fail; }
    }
    if (c->has_qkv_bias < 0) c->has_qkv_bias = 0;
    if (c->has_qkv_bias && c->arch != SKV_ARCH_QWEN2) { skv_error("%s: q/k/v biases in a %s model (unsupported)", path, arch); goto fail; }
    {   /* Llama 3: the converter's per-frequency divisors */
        skv_weight rf;
        if (bind(f, &rf, "rope_freqs.weight", 1, c->head_dim / 2, true, true, &tot)) goto fail;
        if (rf.data) c->rope_scale = c->rope_scale ? c->rope_scale : SKV_ROPE_SCALE_LLAMA3;
        if (rf.data && c->rope_scale != SKV_ROPE_SCALE_LLAMA3) { skv_error("%s: rope_freqs together with linear RoPE scaling (unsupported)", path); goto fail; }
        if (skv_model_rope_init(m, rf.data) != 0) goto fail;
    }
    m->weight_bytes = tot;

    m->name = gguf_get_str(f, "general.name");
    if (!m->name) {
        const char *b = strrchr(path, '/');
        m->name = skv_strdup(b ? b + 1 : path);
        if (!m->name) goto fail;
    }
    skv_clear_error();
    if (gguf_find(f, "tokenizer.ggml.model")) {
        m->tok = skv_tokenizer_from_gguf(f);
        if (!m->tok) { skv_error_prefix("%s: tokenizer", path); goto fail; }
        if (skv_tok_vocab_size(m->tok) > c->vocab) {
            skv_error("%s: tokenizer has %d tokens but the embedding only %d rows", path,
                      skv_tok_vocab_size(m->tok), c->vocab);
            goto fail;
        }
    }
    free(arch);
    const char *pk = getenv("SKV_PACK");
    if (!(flags & SKV_LOAD_NO_PACK) && !(pk && !strcmp(pk, "0")) && skv_model_pack(m) != 0)
        skv_clear_error();   /* not fatal: the model runs on the stored blocks */
    return m;
fail:
    free(arch);
    skv_model_free(m);
    return NULL;
}
