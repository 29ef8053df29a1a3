/* model_hf.c: load a Hugging Face model directory (config.json + *.safetensors, optionally
 * sharded via model.safetensors.index.json, optional tokenizer.json) into a skv_model
 * (config.json itself: hf_config.c). Gemma 3's norms scale by (1 + w): the loader adds the 1
 * to its F32 copies, as the GGUF converter does, so the forward pass has one RMSNorm.
 *
 * Matrices point straight into the safetensors maps (F32/F16/BF16; HF linear weights are
 * [out, in] row-major = our rows x cols). Norm weights and biases are converted to F32
 * buffers owned by the hf storage. HF checkpoints keep Q/K rows in the "halves" RoPE
 * order for both llama and qwen2, so rope_mode = SKV_ROPE_HALVES. */
#include "hf_config.h"
#include "runtime/format/safetensors.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    int n_files;
    safetensors_file **files;     /* [n_files] shards */
    cJSON *weight_map;            /* index.json root (NULL for a single file) */
    int n_bufs, cap_bufs;
    void **bufs;                  /* converted F32 vectors / realigned copies */
} skv_hf;

void skv_hf_free(void *p) {
    skv_hf *hf = p;
    if (!hf) return;
    for (int i = 0; i < hf->n_files; i++) safetensors_close(hf->files[i]);
    free(hf->files);
    if (hf->weight_map) cJSON_Delete(hf->weight_map);
    for (int i = 0; i < hf->n_bufs; i++) free(hf->bufs[i]);
    free(hf->bufs);
    free(hf);
}

static void *hf_own(skv_hf *hf, size_t n, const char *what) {
    if (hf->n_bufs == hf->cap_bufs) {
        int cap = hf->cap_bufs ? 2 * hf->cap_bufs : 64;
        void **nb = realloc(hf->bufs, (size_t)cap * sizeof *nb);
        if (!nb) { skv_error("out of memory (hf buffers)"); return NULL; }
        hf->bufs = nb;
        hf->cap_bufs = cap;
    }
    void *p = skv_aligned_alloc(n, what);
    if (p) hf->bufs[hf->n_bufs++] = p;
    return p;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = skv_malloc(n, "path");
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- tensors ---- */

typedef struct {
    const char *dir;
    skv_hf *hf;
    size_t weight_bytes;
} loader;

static int open_shards(loader *L) {
    skv_hf *hf = L->hf;
    char *idx = join(L->dir, "model.safetensors.index.json");
    char *single = join(L->dir, "model.safetensors");
    int rc = -1;
    if (!idx || !single) goto out;
    if (file_exists(idx)) {
        size_t len;
        char *text = skv_read_file(idx, &len);
        if (!text) goto out;
        hf->weight_map = cJSON_ParseWithLength(text, len);
        free(text);
        const cJSON *wm = hf->weight_map ? cJSON_GetObjectItemCaseSensitive(hf->weight_map, "weight_map") : NULL;
        if (!cJSON_IsObject(wm)) { skv_error("%s: not valid JSON with a weight_map object", idx); goto out; }
        int n = cJSON_GetArraySize(wm);
        hf->files = skv_calloc(n ? (size_t)n : 1, sizeof *hf->files, "shards");
        if (!hf->files) goto out;
        for (const cJSON *e = wm->child; e; e = e->next) {
            if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/')) {
                skv_error("%s: weight_map['%s'] is not a plain file name", idx, e->string);
                goto out;
            }
            int seen = 0;
            for (int i = 0; i < hf->n_files && !seen; i++) {
                const char *p = hf->files[i]->path;
                size_t dl = strlen(L->dir);
                seen = !strcmp(p + dl + 1, e->valuestring);
            }
            if (seen) continue;
            char *sp = join(L->dir, e->valuestring);
            if (!sp) goto out;
            safetensors_file *f = safetensors_open(sp);
            free(sp);
            if (!f) goto out;
            hf->files[hf->n_files++] = f;
        }
    } else if (file_exists(single)) {
        hf->files = skv_calloc(1, sizeof *hf->files, "shards");
        if (!hf->files) goto out;
        if (!(hf->files[0] = safetensors_open(single))) goto out;
        hf->n_files = 1;
    } else {
        skv_error("%s: no model.safetensors or model.safetensors.index.json", L->dir);
        goto out;
    }
    rc = 0;
out:
    free(idx);
    free(single);
    return rc;
}

/* Find a tensor; with an index, in the shard the weight_map names. Sets *file for messages. */
static const safetensors_tensor *find_tensor(loader *L, const char *name, const safetensors_file **file) {
    skv_hf *hf = L->hf;
    if (hf->weight_map) {
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(hf->weight_map, "weight_map");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(wm, name);
        if (!e) return NULL;
        size_t dl = strlen(L->dir);
        for (int i = 0; i < hf->n_files; i++)
            if (!strcmp(hf->files[i]->path + dl + 1, e->valuestring)) {
                *file = hf->files[i];
                return safetensors_find(hf->files[i], name);
            }
        return NULL;
    }
    *file = hf->files[0];
    return safetensors_find(hf->files[0], name);
}

/* Look up `name` with the expected shape (cols = 0 for a 1-D tensor). NULL + error. */
static const safetensors_tensor *get(loader *L, const char *name, int64_t rows, int64_t cols,
                                     const safetensors_file **file) {
    *file = NULL;
    const safetensors_tensor *t = find_tensor(L, name, file);
    if (!t) {
        if (L->hf->weight_map && *file) skv_error("%s: tensor '%s' listed in the index but missing", (*file)->path, name);
        else skv_error("%s: missing tensor '%s'", L->dir, name);
        return NULL;
    }
    const char *fp = (*file)->path;
    if (t->type < 0) {
        skv_error("%s: tensor '%s': dtype %s not supported (need F32, F16 or BF16)", fp, name, t->dtype);
        return NULL;
    }
    int ok = cols ? (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols)
                  : (t->n_dims == 1 && t->shape[0] == rows);
    if (!ok) {
        char got[160] = "[", *p = got + 1;
        for (int i = 0; i < t->n_dims && p < got + sizeof got - 24; i++)
            p += snprintf(p, 24, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        snprintf(p, 2, "]");
        if (cols) skv_error("%s: tensor '%s': shape %s, expected [%lld, %lld]", fp, name, got,
                            (long long)rows, (long long)cols);
        else skv_error("%s: tensor '%s': shape %s, expected [%lld]", fp, name, got, (long long)rows);
        return NULL;
    }
    L->weight_bytes += t->nbytes;
    return t;
}

static size_t elem_bytes(int type) { return type == SKV_F32 ? 4 : 2; }

/* A [rows x cols] matrix referenced in place (copied only if misaligned for its type). */
static int load_matrix(loader *L, skv_weight *w, const char *name, int64_t rows, int64_t cols) {
    const safetensors_file *f;
    const safetensors_tensor *t = get(L, name, rows, cols, &f);
    if (!t) return -1;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    if ((uintptr_t)t->data % elem_bytes(t->type) != 0) {
        void *copy = hf_own(L->hf, t->nbytes, name);
        if (!copy) return -1;
        memcpy(copy, t->data, t->nbytes);
        w->data = copy;
    }
    return 0;
}

/* A [n] vector, always converted to an owned F32 buffer, plus `add` (Gemma's 1 + w). */
static int load_vector_add(loader *L, skv_weight *w, const char *name, int64_t n, float add) {
    const safetensors_file *f;
    const safetensors_tensor *t = get(L, name, n, 0, &f);
    if (!t) return -1;
    float *dst = hf_own(L->hf, (size_t)n * sizeof(float), name);
    if (!dst) return -1;
    const uint8_t *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (t->type == SKV_F32) memcpy(&dst[i], src + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->type == SKV_F16 ? skv_f16_to_f32(h) : skv_bf16_to_f32(h);
        }
        dst[i] += add;
    }
    w->type = SKV_F32;
    w->rows = n;
    w->cols = 1;
    w->data = dst;
    return 0;
}

static int load_vector(loader *L, skv_weight *w, const char *name, int64_t n) {
    return load_vector_add(L, w, name, n, 0.0f);
}

static int load_weights(loader *L, skv_model *m) {
    const skv_config *c = &m->cfg;
    const int gemma = c->arch == SKV_ARCH_GEMMA3;
    const float one = gemma ? 1.0f : 0.0f;   /* Gemma3RMSNorm: x / rms(x) * (1 + w) */
    int64_t C = c->dim, F = c->ffn_dim, V = c->vocab;
    int64_t QD = (int64_t)c->n_head * c->head_dim, KD = (int64_t)c->n_kv_head * c->head_dim;
    char nm[128];
    if (load_matrix(L, &m->tok_embd, "model.embed_tokens.weight", V, C) != 0) return -1;
    if (load_vector_add(L, &m->out_norm, "model.norm.weight", C, one) != 0) return -1;
    if (c->tied_embeddings) m->output = m->tok_embd;
    else if (load_matrix(L, &m->output, "lm_head.weight", V, C) != 0) return -1;
    for (int l = 0; l < c->n_layer; l++) {
        skv_layer *ly = &m->layers[l];
#define P(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        if (load_vector_add(L, &ly->attn_norm, P("input_layernorm.weight"), C, one) ||
            load_matrix(L, &ly->wq, P("self_attn.q_proj.weight"), QD, C) ||
            load_matrix(L, &ly->wk, P("self_attn.k_proj.weight"), KD, C) ||
            load_matrix(L, &ly->wv, P("self_attn.v_proj.weight"), KD, C) ||
            load_matrix(L, &ly->wo, P("self_attn.o_proj.weight"), C, QD) ||
            load_vector_add(L, &ly->ffn_norm, P(gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), C, one) ||
            load_matrix(L, &ly->w_gate, P("mlp.gate_proj.weight"), F, C) ||
            load_matrix(L, &ly->w_up, P("mlp.up_proj.weight"), F, C) ||
            load_matrix(L, &ly->w_down, P("mlp.down_proj.weight"), C, F))
            return -1;
        if (c->has_qkv_bias &&
            (load_vector(L, &ly->bq, P("self_attn.q_proj.bias"), QD) ||
             load_vector(L, &ly->bk, P("self_attn.k_proj.bias"), KD) ||
             load_vector(L, &ly->bv, P("self_attn.v_proj.bias"), KD)))
            return -1;
        if (c->has_qk_norm &&
            (load_vector_add(L, &ly->q_norm, P("self_attn.q_norm.weight"), c->head_dim, one) ||
             load_vector_add(L, &ly->k_norm, P("self_attn.k_norm.weight"), c->head_dim, one)))
            return -1;
        if (c->has_post_norms &&
            (load_vector_add(L, &ly->post_attn_norm, P("post_attention_layernorm.weight"), C, one) ||
             load_vector_add(L, &ly->post_ffn_norm, P("post_feedforward_layernorm.weight"), C, one)))
            return -1;
#undef P
    }
    return 0;
}

static char *dir_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    char *s = skv_malloc(n - b + 1, "name");
    if (s) { memcpy(s, dir + b, n - b); s[n - b] = 0; }
    return s;
}

skv_model *skv_model_load_hf(const char *dir) {
    skv_model *m = skv_calloc(1, sizeof *m, "skv_model");
    if (!m) return NULL;
    char *cfg_path = NULL, *tok_path = NULL;
    int *windowed = NULL;
    loader L = {.dir = dir};
    if (!(m->path = skv_strdup(dir)) || !(m->name = dir_name(dir))) goto fail;
    if (!(cfg_path = join(dir, "config.json"))) goto fail;
    if (!file_exists(cfg_path)) { skv_error("%s: no config.json (not a Hugging Face model directory)", dir); goto fail; }
    if (skv_hf_parse_config(cfg_path, &m->cfg, &windowed) != 0) goto fail;
    if (!(m->hf = L.hf = skv_calloc(1, sizeof(skv_hf), "hf storage"))) goto fail;
    if (!(m->layers = skv_calloc((size_t)m->cfg.n_layer, sizeof *m->layers, "layers"))) goto fail;
    for (int l = 0; l < m->cfg.n_layer; l++) m->layers[l].window = windowed[l] ? m->cfg.sliding_window : 0;
    if (skv_model_rope_init(m, NULL) != 0) goto fail;
    if (open_shards(&L) != 0 || load_weights(&L, m) != 0) goto fail;
    m->weight_bytes = L.weight_bytes;

    if (!(tok_path = join(dir, "tokenizer.json"))) goto fail;
    if (file_exists(tok_path)) {   /* absent: tok stays NULL; present but broken: refuse */
        m->tok = skv_tokenizer_from_json(tok_path);
        if (!m->tok) goto fail;
        if (skv_tok_vocab_size(m->tok) > m->cfg.vocab) {
            skv_error("%s: tokenizer has %d tokens but the embedding only %d rows", tok_path,
                      skv_tok_vocab_size(m->tok), m->cfg.vocab);
            goto fail;
        }
    }
    free(cfg_path);
    free(tok_path);
    free(windowed);
    return m;
fail:
    free(windowed);
    free(cfg_path);
    free(tok_path);
    skv_model_free(m);   /* frees tok, hf storage, layers, name, path */
    return NULL;
}
