/* forward_cuda.c: the Llama/Qwen2 decoder forward pass on the GPU, host C driving the
 * launchers of kernels/cuda/backend.h. Step for step the same as runtime/engine/forward.c:
 *
 *   tokens (T) -> x (T, C)      embedding rows dequantised on the host, uploaded
 *   per layer l:
 *     xb  = rmsnorm(x) * attn_norm                         (T, C)
 *     q   = xb Wq^T (+bq)   kx = xb Wk^T (+bk)   vx = xb Wv^T (+bv)
 *     rope(q), rope(kx) at positions n_past .. n_past+T-1
 *     K[l], V[l] (Hkv, S_cap, d) <- kx, vx at rows n_past .. (fp16 or fp32)
 *     att = attention(q, K[l], V[l])  (T = 1: split-key decode kernel, else tiled prefill)
 *     x  += att Wo^T
 *     xb  = rmsnorm(x) * ffn_norm;  hb = silu(xb Wgate^T) * (xb Wup^T);  x += hb Wdown^T
 *   xb = rmsnorm(x) * out_norm; logits = xb Woutput^T (1 or T rows) -> copied to the host
 *
 * Every device buffer is allocated once (model upload, state creation). All launches go to
 * the default stream, so they run in order; the copy of the logits back waits for them.
 * Without SKV_CUDA (make without CUDA=1) only stubs that report the missing backend. */
#include "forward_cuda.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_CUDA_MSG "built without CUDA (make CUDA=1)"

#ifndef SKV_CUDA

int skv_cuda_built(void) { return 0; }
skv_cuda_model *skv_cuda_model_upload(const skv_model *m, int flags) {
    (void)m; (void)flags;
    skv_error(NO_CUDA_MSG);
    return NULL;
}
void skv_cuda_model_free(skv_cuda_model *dm) { (void)dm; }
size_t skv_cuda_model_bytes(const skv_cuda_model *dm) { (void)dm; return 0; }
skv_cuda_state *skv_cuda_state_new(const skv_cuda_model *dm, int S_cap, int T_max, bool kv_f16) {
    (void)dm; (void)S_cap; (void)T_max; (void)kv_f16;
    skv_error(NO_CUDA_MSG);
    return NULL;
}
void skv_cuda_state_free(skv_cuda_state *s) { (void)s; }
void skv_cuda_state_reset(skv_cuda_state *s) { if (s) s->n_past = 0; }
int skv_cuda_state_fill_synthetic(skv_cuda_state *s, int n) {
    (void)s; (void)n;
    return skv_error(NO_CUDA_MSG);
}
int skv_cuda_forward(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts) {
    (void)s; (void)tokens; (void)T; (void)opts;
    return skv_error(NO_CUDA_MSG);
}
skv_cuda_batch *skv_cuda_batch_new(const skv_cuda_model *dm, int n_max) {
    (void)dm; (void)n_max;
    skv_error(NO_CUDA_MSG);
    return NULL;
}
void skv_cuda_batch_free(skv_cuda_batch *b) { (void)b; }
int skv_cuda_forward_batch(skv_cuda_batch *b, skv_cuda_state **states, const int *tokens, int n,
                           const skv_fwd_opts *opts) {
    (void)b; (void)states; (void)tokens; (void)n; (void)opts;
    return skv_error(NO_CUDA_MSG);
}
int skv_cuda_finish(void) { return skv_error(NO_CUDA_MSG); }
skv_cuda_state *skv_cuda_state_new_nocache(const skv_cuda_model *dm, int S_cap, int T_max) {
    (void)dm; (void)S_cap; (void)T_max;
    skv_error(NO_CUDA_MSG);
    return NULL;
}
int skv_cuda_forward_dev(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn attn,
                         void *ctx) {
    (void)s; (void)tokens; (void)T; (void)opts; (void)attn; (void)ctx;
    return skv_error(NO_CUDA_MSG);
}
int skv_cuda_state_load(skv_cuda_state *s, const skv_state *cpu, int n_layers) {
    (void)s; (void)cpu; (void)n_layers;
    return skv_error(NO_CUDA_MSG);
}

#else  /* SKV_CUDA */

#include "kernels/cuda/backend.h"
#include "kernels/cpu/matmul.h"

typedef struct {
    skv_cuda_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm;       /* device (C) */
    float *bq, *bk, *bv;               /* device (Q), (KV), (KV), or NULL */
} dev_layer;

struct skv_cuda_model {
    const skv_model *m;
    dev_layer *layers;                 /* [L] */
    skv_cuda_weight output;            /* LM head (tied: the embedding matrix) */
    float *out_norm;                   /* device (C) */
    size_t bytes;
};

/* Device buffers of one state (activations for T_max rows) and its host staging. */
typedef struct {
    void **k, **v;                     /* [L] -> device (Hkv, S_cap, d), NULL for a batch workspace */
    float *x, *xb, *q, *kx, *vx, *att, *hb, *hb2, *logits;   /* device */
    int *pos;                          /* device (T_max) */
    float *colsum, *lastrow;           /* device (H, S_cap), made on first use */
    float *emb;                        /* host (T_max, C) embedding rows */
    int *hpos;                         /* host (T_max) */
} dev_bufs;

int skv_cuda_built(void) { return 1; }
int skv_cuda_finish(void) { return skv_cuda_sync(); }

static const char *GiB(size_t b, char *buf, size_t n) {
    snprintf(buf, n, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

/* -1 + "<what> needs N bytes (X GiB) on the device; free F of T bytes" when need > free. */
static int check_fits(size_t need, const char *what) {
    size_t fr = 0, tot = 0;
    if (skv_cuda_mem_info(&fr, &tot) != 0) return -1;
    if (need <= fr) return 0;
    char a[32], b[32], c[32];
    return skv_error("CUDA: %s needs %zu bytes (%s) on the device, more than the %zu bytes free (%s of %s): "
                     "out of device memory", what, need, GiB(need, a, sizeof a), fr, GiB(fr, b, sizeof b),
                     GiB(tot, c, sizeof c));
}

/* ---------------------------------------------------------------- model upload */

/* " of layer N" for l >= 0, "" for the model-level tensors (l < 0). Not reentrant. */
static const char *layer_tag(int l) {
    static char buf[32];
    if (l < 0) return "";
    snprintf(buf, sizeof buf, " of layer %d", l);
    return buf;
}

/* Device bytes one matrix takes with these flags (size_t overflow -> SIZE_MAX). */
static size_t weight_dev_bytes(const skv_weight *W, int flags) {
    size_t q, n, h;
    if (!skv_mul_ok(skv_row_bytes(W->type, W->cols), (size_t)W->rows, &q) ||
        !skv_mul_ok((size_t)W->rows, (size_t)W->cols, &n) || !skv_mul_ok(n, 2, &h))
        return SIZE_MAX;
    size_t t = 0;
    if (flags & SKV_CUDA_W_QUANT) t = q;
    if ((flags & SKV_CUDA_W_F16) && !(W->type == SKV_F16 && (flags & SKV_CUDA_W_QUANT))) t = t + h < t ? SIZE_MAX : t + h;
    return t;
}

static int up_matrix(skv_cuda_weight *dw, const skv_weight *W, int flags, const char *name, int l, size_t *bytes) {
    /* the device kernels read stored rows: a matrix in 8-row groups (W->x8) goes up as a
     * stored copy */
    skv_weight stored = *W;
    void *copy = NULL;
    if (W->x8) {
        size_t n;
        if (!skv_mul_ok(skv_row_bytes(W->type, W->cols), (size_t)W->rows, &n) || !(copy = skv_malloc(n, "stored rows for the upload")))
            return skv_error_prefix("uploading %s%s", name, layer_tag(l));
        skv_weight_stored_rows(W, 0, W->rows, copy);
        stored.data = copy;
        stored.x8 = 0;
    }
    const int rc = skv_cuda_weight_upload(dw, &stored, flags);
    free(copy);
    if (rc != 0)
        return skv_error_prefix("uploading %s%s (%lld x %lld, %s)", name, layer_tag(l), (long long)W->rows,
                                (long long)W->cols, skv_type_name(W->type));
    size_t b = weight_dev_bytes(W, flags);
    *bytes += b == SIZE_MAX ? 0 : b;
    return 0;
}

/* An F32 vector of n values (norm weight or bias) as a device fp32 array. */
static float *up_vector(const skv_weight *W, size_t n, const char *name, int l, size_t *bytes) {
    if (!W->data || W->type != SKV_F32 || (size_t)W->rows * (size_t)W->cols != n) {
        skv_error("CUDA model upload: %s%s is not an F32 vector of %zu values", name, layer_tag(l), n);
        return NULL;
    }
    float *d = skv_cuda_malloc(n * sizeof(float), name);
    if (!d) { skv_error_prefix("uploading %s%s", name, layer_tag(l)); return NULL; }
    if (skv_cuda_upload(d, W->data, n * sizeof(float)) != 0) { skv_cuda_free(d); return NULL; }
    *bytes += n * sizeof(float);
    return d;
}

void skv_cuda_model_free(skv_cuda_model *dm) {
    if (!dm) return;
    if (dm->layers) {
        for (int l = 0; l < dm->m->cfg.n_layer; l++) {
            dev_layer *D = &dm->layers[l];
            skv_cuda_weight_free(&D->wq); skv_cuda_weight_free(&D->wk); skv_cuda_weight_free(&D->wv);
            skv_cuda_weight_free(&D->wo); skv_cuda_weight_free(&D->w_gate); skv_cuda_weight_free(&D->w_up);
            skv_cuda_weight_free(&D->w_down);
            skv_cuda_free(D->attn_norm); skv_cuda_free(D->ffn_norm);
            skv_cuda_free(D->bq); skv_cuda_free(D->bk); skv_cuda_free(D->bv);
        }
        free(dm->layers);
    }
    skv_cuda_weight_free(&dm->output);
    skv_cuda_free(dm->out_norm);
    free(dm);
}

size_t skv_cuda_model_bytes(const skv_cuda_model *dm) { return dm ? dm->bytes : 0; }

skv_cuda_model *skv_cuda_model_upload(const skv_model *m, int flags) {
    if (!m) { skv_error("skv_cuda_model_upload: no model"); return NULL; }
    const skv_config *c = &m->cfg;
    const char *extra = skv_config_extra_feature(c);
    if (extra) {   /* the CUDA forward runs the plain llama / qwen2 block only */
        skv_error("%s: the CUDA backend does not support %s (%s); use --device cpu", m->path ? m->path : "model",
                  extra, skv_arch_name(c->arch));
        return NULL;
    }
    if (!skv_cuda_available()) return NULL;
    if (flags == 0) flags = SKV_CUDA_W_QUANT | SKV_CUDA_W_F16;
    if (c->head_dim > 256 || c->head_dim < 2 || c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0) {
        skv_error("%s: CUDA forward: head_dim %d / %d heads / %d kv heads not supported (head_dim <= 256)",
                  m->path ? m->path : "model", c->head_dim, c->n_head, c->n_kv_head);
        return NULL;
    }
    /* what the upload will take, checked against free memory before anything is copied */
    size_t need = 0, vec = 0;
    const size_t C = c->dim, Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim;
    for (int l = 0; l < c->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) {
            size_t b = weight_dev_bytes(ws[i], flags);
            need = (b == SIZE_MAX || need + b < need) ? SIZE_MAX : need + b;
        }
        vec += 2 * C + (L->bq.data ? Q + 2 * KV : 0);
    }
    size_t ob = weight_dev_bytes(&m->output, flags);
    need = (ob == SIZE_MAX || need + ob < need) ? SIZE_MAX : need + ob;
    vec = (vec + C) * sizeof(float);
    need = need + vec < need ? SIZE_MAX : need + vec;
    char what[512];
    snprintf(what, sizeof what, "the weights of %s (%d layers%s%s)", m->path ? m->path : "the model", c->n_layer,
             (flags & SKV_CUDA_W_QUANT) ? ", stored blocks" : "", (flags & SKV_CUDA_W_F16) ? " + fp16 copies" : "");
    if (check_fits(need, what) != 0) return NULL;

    skv_cuda_model *dm = skv_calloc(1, sizeof *dm, "CUDA model");
    if (!dm) return NULL;
    dm->m = m;
    dm->layers = skv_calloc((size_t)c->n_layer, sizeof *dm->layers, "CUDA layers");
    if (!dm->layers) { free(dm); return NULL; }
    size_t *B = &dm->bytes;
    for (int l = 0; l < c->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        dev_layer *D = &dm->layers[l];
        if (up_matrix(&D->wq, &L->wq, flags, "wq", l, B) || up_matrix(&D->wk, &L->wk, flags, "wk", l, B) ||
            up_matrix(&D->wv, &L->wv, flags, "wv", l, B) || up_matrix(&D->wo, &L->wo, flags, "wo", l, B) ||
            up_matrix(&D->w_gate, &L->w_gate, flags, "w_gate", l, B) ||
            up_matrix(&D->w_up, &L->w_up, flags, "w_up", l, B) ||
            up_matrix(&D->w_down, &L->w_down, flags, "w_down", l, B))
            goto fail;
        if (!(D->attn_norm = up_vector(&L->attn_norm, C, "attn_norm", l, B))) goto fail;
        if (!(D->ffn_norm = up_vector(&L->ffn_norm, C, "ffn_norm", l, B))) goto fail;
        if (L->bq.data) {
            if (!(D->bq = up_vector(&L->bq, Q, "bq", l, B)) || !(D->bk = up_vector(&L->bk, KV, "bk", l, B)) ||
                !(D->bv = up_vector(&L->bv, KV, "bv", l, B)))
                goto fail;
        }
    }
    if (up_matrix(&dm->output, &m->output, flags, "output (LM head)", -1, B)) goto fail;
    if (!(dm->out_norm = up_vector(&m->out_norm, C, "out_norm", -1, B))) goto fail;
    if (skv_cuda_sync() != 0) goto fail;   /* the fp16 copies are made by kernels */
    return dm;
fail:
    skv_error_prefix("%s: CUDA model upload", m->path ? m->path : "model");
    skv_cuda_model_free(dm);
    return NULL;
}

/* ---------------------------------------------------------------- states */

static void bufs_free(dev_bufs *b, int L) {
    if (!b) return;
    if (b->k) for (int l = 0; l < L; l++) skv_cuda_free(b->k[l]);
    if (b->v) for (int l = 0; l < L; l++) skv_cuda_free(b->v[l]);
    free(b->k); free(b->v);
    skv_cuda_free(b->x); skv_cuda_free(b->xb); skv_cuda_free(b->q); skv_cuda_free(b->kx);
    skv_cuda_free(b->vx); skv_cuda_free(b->att); skv_cuda_free(b->hb); skv_cuda_free(b->hb2);
    skv_cuda_free(b->logits); skv_cuda_free(b->pos); skv_cuda_free(b->colsum); skv_cuda_free(b->lastrow);
    free(b->emb); free(b->hpos);
    free(b);
}

void skv_cuda_state_free(skv_cuda_state *s) {
    if (!s) return;
    bufs_free(s->dev, s->m->cfg.n_layer);
    free(s->logits);
    free(s);
}

void skv_cuda_state_reset(skv_cuda_state *s) { if (s) s->n_past = 0; }

/* Device float buffer of rows x cols; NULL + error (size overflow or out of memory). */
static float *dalloc(size_t rows, size_t cols, const char *what, bool *ok) {
    size_t n;
    if (!*ok) return NULL;
    if (!skv_mul_ok(rows, cols, &n) || !skv_mul_ok(n, sizeof(float), &n)) {
        skv_error("size of %s overflows", what);
        *ok = false;
        return NULL;
    }
    float *p = skv_cuda_malloc(n ? n : 256, what);
    if (!p) *ok = false;
    return p;
}

/* with_cache: allocate the KV cache (S_cap tokens); false for a batch workspace. */
static skv_cuda_state *state_alloc(const skv_cuda_model *dm, int S_cap, int T_max, bool kv_f16, bool with_cache) {
    const skv_model *m = dm->m;
    const skv_config *c = &m->cfg;
    const size_t C = c->dim, Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim,
                 F = c->ffn_dim, V = c->vocab, T = T_max, L = c->n_layer;
    /* the whole state's device bytes first, for a clear out-of-memory report */
    size_t act = T * (C + (C > Q ? C : Q) + Q + 2 * KV + Q + 2 * F + V) * sizeof(float) + T * sizeof(int);
    size_t per = 0, kv = 0, need = 0;
    if (with_cache && (!skv_mul_ok(KV, (size_t)S_cap, &per) || !skv_mul_ok(per, kv_f16 ? 2 : 4, &per) ||
                       !skv_mul_ok(per, 2 * L, &kv))) {
        skv_error("skv_cuda_state_new: KV cache size overflows (S_cap %d)", S_cap);
        return NULL;
    }
    if (!skv_add_ok(act, kv, &need)) { skv_error("skv_cuda_state_new: size overflows"); return NULL; }
    char what[256];
    snprintf(what, sizeof what, "a sequence state (KV cache %d tokens x %zu layers %s: %zu bytes; activations for "
             "%d tokens: %zu bytes)", S_cap, L, kv_f16 ? "fp16" : "fp32", kv, T_max, act);
    if (check_fits(need, what) != 0) return NULL;

    skv_cuda_state *s = skv_calloc(1, sizeof *s, "CUDA state");
    if (!s) return NULL;
    s->dm = dm;
    s->m = m;
    s->S_cap = S_cap;
    s->T_max = T_max;
    s->kv_f16 = kv_f16;
    dev_bufs *b = skv_calloc(1, sizeof *b, "CUDA state buffers");
    s->dev = b;
    bool ok = b != NULL;
    if (ok) {
        b->x = dalloc(T, C, "activations x", &ok);
        b->xb = dalloc(T, C > Q ? C : Q, "activations xb", &ok);
        b->q = dalloc(T, Q, "queries", &ok);
        b->kx = dalloc(T, KV, "keys", &ok);
        b->vx = dalloc(T, KV, "values", &ok);
        b->att = dalloc(T, Q, "attention output", &ok);
        b->hb = dalloc(T, F, "ffn hidden", &ok);
        b->hb2 = dalloc(T, F, "ffn hidden 2", &ok);
        b->logits = dalloc(T, V, "logits", &ok);
        b->pos = ok ? skv_cuda_malloc(T * sizeof(int), "positions") : NULL;
        ok = ok && b->pos;
    }
    if (ok) {
        b->emb = skv_malloc(T * C * sizeof(float), "embedding rows");
        b->hpos = skv_malloc(T * sizeof(int), "positions");
        s->logits = skv_malloc(T * V * sizeof(float), "logits");
        ok = b->emb && b->hpos && s->logits;
    }
    if (ok && with_cache) {
        b->k = skv_calloc(L, sizeof(void *), "kv cache table");
        b->v = skv_calloc(L, sizeof(void *), "kv cache table");
        ok = b->k && b->v;
        for (size_t l = 0; ok && l < L; l++) {
            b->k[l] = skv_cuda_malloc(per, "kv cache (K)");
            b->v[l] = skv_cuda_malloc(per, "kv cache (V)");
            ok = b->k[l] && b->v[l];
        }
    }
    if (!ok) {
        skv_error_prefix("skv_cuda_state_new (S_cap %d, T_max %d)", S_cap, T_max);
        skv_cuda_state_free(s);
        return NULL;
    }
    return s;
}

skv_cuda_state *skv_cuda_state_new(const skv_cuda_model *dm, int S_cap, int T_max, bool kv_f16) {
    if (!dm || S_cap < 1 || T_max < 1) {
        skv_error("skv_cuda_state_new: bad arguments (S_cap %d, T_max %d)", S_cap, T_max);
        return NULL;
    }
    if (T_max > S_cap) T_max = S_cap;
    if (T_max > 65535) T_max = 65535;   /* grid limit of the row-wise kernels */
    return state_alloc(dm, S_cap, T_max, kv_f16, true);
}

int skv_cuda_state_fill_synthetic(skv_cuda_state *s, int n) {
    if (!s || n < 0 || n > s->S_cap) return skv_error("skv_cuda_state_fill_synthetic: bad length %d", n);
    dev_bufs *b = s->dev;
    if (!b->k) return skv_error("skv_cuda_state_fill_synthetic: a batch workspace has no cache");
    const skv_config *c = &s->m->cfg;
    const size_t per = (size_t)c->n_kv_head * c->head_dim * s->S_cap * (s->kv_f16 ? 2 : 4);
    for (int l = 0; l < c->n_layer; l++)
        if (skv_cuda_memset(b->k[l], 0, per) != 0 || skv_cuda_memset(b->v[l], 0, per) != 0) return -1;
    if (skv_cuda_sync() != 0) return -1;
    s->n_past = n;
    return 0;
}

/* ---------------------------------------------------------------- forward */

/* Copy a host (H, S_cap) score buffer to the device one (made on first use). */
static float *score_buf(skv_cuda_state *s, float **dev, const float *host) {
    const skv_config *c = &s->m->cfg;
    const size_t n = (size_t)c->n_head * s->S_cap * sizeof(float);
    if (!*dev && !(*dev = skv_cuda_malloc(n, "attention scores (H, S_cap)"))) return NULL;
    if (skv_cuda_upload(*dev, host, n) != 0) return NULL;
    return *dev;
}

/* Layer l of sequence s: write this block's kx/vx (T rows, already rotated) into its cache at
 * pos0 and attend with q -> att. colsum / lastrow: host (H, S_cap) or NULL. */
static int attend(skv_cuda_state *s, int l, float *att, const float *q, const float *kx, const float *vx,
                  int T, int pos0, float *colsum, float *lastrow) {
    const skv_config *c = &s->m->cfg;
    dev_bufs *b = s->dev;
    const int Hkv = c->n_kv_head, d = c->head_dim;
    if (skv_cuda_kv_write(b->k[l], kx, T, Hkv, d, s->S_cap, pos0, s->kv_f16) != 0 ||
        skv_cuda_kv_write(b->v[l], vx, T, Hkv, d, s->S_cap, pos0, s->kv_f16) != 0)
        return -1;
    skv_attn_args a = {
        .T = T, .H = c->n_head, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = s->S_cap, .kv_f16 = s->kv_f16,
    };
    if (colsum && !(a.colsum = score_buf(s, &b->colsum, colsum))) return -1;
    if (lastrow && !(a.lastrow = score_buf(s, &b->lastrow, lastrow))) return -1;
    if (skv_cuda_attention(att, q, b->k[l], b->v[l], &a) != 0) return -1;
    const size_t n = (size_t)c->n_head * s->S_cap * sizeof(float);
    if (colsum && skv_cuda_download(colsum, b->colsum, n) != 0) return -1;
    if (lastrow && skv_cuda_download(lastrow, b->lastrow, n) != 0) return -1;
    return 0;
}

/* rmsnorm + q/k/v products + bias + rope over the T rows of w (positions already in w->pos). */
static int qkv(const skv_cuda_model *dm, int l, dev_bufs *w, int T) {
    const skv_config *c = &dm->m->cfg;
    const dev_layer *D = &dm->layers[l];
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    if (skv_cuda_rmsnorm(w->xb, w->x, D->attn_norm, T, c->dim, c->norm_eps) != 0 ||
        skv_cuda_matmul(w->q, w->xb, &D->wq, T) != 0 ||     /* (T, H*d) */
        skv_cuda_matmul(w->kx, w->xb, &D->wk, T) != 0 ||    /* (T, Hkv*d) */
        skv_cuda_matmul(w->vx, w->xb, &D->wv, T) != 0)      /* (T, Hkv*d) */
        return -1;
    if (D->bq && (skv_cuda_add_bias(w->q, D->bq, T, H * d) != 0 || skv_cuda_add_bias(w->kx, D->bk, T, Hkv * d) != 0 ||
                  skv_cuda_add_bias(w->vx, D->bv, T, Hkv * d) != 0))
        return -1;
    if (skv_cuda_rope(w->q, w->pos, T, H, d, c->rope_theta, c->rope_mode) != 0 ||
        skv_cuda_rope(w->kx, w->pos, T, Hkv, d, c->rope_theta, c->rope_mode) != 0)
        return -1;
    return 0;
}

/* x += att Wo^T; then the MLP block: x += (silu(xb Wgate^T) * (xb Wup^T)) Wdown^T. */
static int wo_mlp(const skv_cuda_model *dm, int l, dev_bufs *w, int T) {
    const skv_config *c = &dm->m->cfg;
    const dev_layer *D = &dm->layers[l];
    const size_t C = c->dim, F = c->ffn_dim;
    if (skv_cuda_matmul(w->xb, w->att, &D->wo, T) != 0 || skv_cuda_add(w->x, w->xb, T * C) != 0 ||
        skv_cuda_rmsnorm(w->xb, w->x, D->ffn_norm, T, (int)C, c->norm_eps) != 0 ||
        skv_cuda_matmul(w->hb, w->xb, &D->w_gate, T) != 0 ||           /* (T, F) */
        skv_cuda_matmul(w->hb2, w->xb, &D->w_up, T) != 0 ||            /* (T, F) */
        skv_cuda_swiglu(w->hb, w->hb, w->hb2, (int)(T * F)) != 0 ||
        skv_cuda_matmul(w->xb, w->hb, &D->w_down, T) != 0 ||           /* (T, C) */
        skv_cuda_add(w->x, w->xb, T * C) != 0)
        return -1;
    return 0;
}

/* Embedding rows of tokens (n) into w->x and positions hpos into w->pos. */
static int embed(const skv_model *m, dev_bufs *w, const int *tokens, int n) {
    const int C = m->cfg.dim;
    for (int t = 0; t < n; t++) skv_weight_row(&m->tok_embd, tokens[t], w->emb + (size_t)t * C);
    if (skv_cuda_upload(w->x, w->emb, (size_t)n * C * sizeof(float)) != 0) return -1;
    return skv_cuda_upload(w->pos, w->hpos, (size_t)n * sizeof(int));
}

/* Final norm and LM head over rows x (nr, C) of w -> device logits (nr, vocab). */
static int lm_head(const skv_cuda_model *dm, dev_bufs *w, const float *x, int nr) {
    const skv_config *c = &dm->m->cfg;
    if (skv_cuda_rmsnorm(w->xb, x, dm->out_norm, nr, c->dim, c->norm_eps) != 0) return -1;
    return skv_cuda_matmul(w->logits, w->xb, &dm->output, nr);
}

skv_cuda_state *skv_cuda_state_new_nocache(const skv_cuda_model *dm, int S_cap, int T_max) {
    if (!dm || S_cap < 1 || T_max < 1) {
        skv_error("skv_cuda_state_new_nocache: bad arguments (S_cap %d, T_max %d)", S_cap, T_max);
        return NULL;
    }
    if (T_max > S_cap) T_max = S_cap;
    if (T_max > 65535) T_max = 65535;
    return state_alloc(dm, S_cap, T_max, false, false);
}

int skv_cuda_state_load(skv_cuda_state *s, const skv_state *cpu, int n_layers) {
    if (!s || !cpu) return skv_error("skv_cuda_state_load: bad arguments");
    dev_bufs *b = s->dev;
    const skv_config *c = &s->m->cfg;
    if (!b->k) return skv_error("skv_cuda_state_load: the device state has no KV cache");
    if (cpu->m != s->m) return skv_error("skv_cuda_state_load: the CPU state runs another model");
    if (cpu->S_cap != s->S_cap || cpu->kv_f16 != s->kv_f16)
        return skv_error("skv_cuda_state_load: CPU cache (%d tokens, %s) and device cache (%d tokens, %s) differ",
                         cpu->S_cap, cpu->kv_f16 ? "fp16" : "fp32", s->S_cap, s->kv_f16 ? "fp16" : "fp32");
    if (cpu->n_past < 0 || cpu->n_past > s->S_cap) return skv_error("skv_cuda_state_load: bad length %d", cpu->n_past);
    if (n_layers <= 0 || n_layers > c->n_layer) n_layers = c->n_layer;
    /* (Hkv, S_cap, d) per layer on both sides */
    const size_t per = (size_t)c->n_kv_head * s->S_cap * c->head_dim * (s->kv_f16 ? 2 : 4);
    for (int l = 0; l < n_layers; l++) {
        if (!cpu->k[l] || !cpu->v[l]) return skv_error("skv_cuda_state_load: the CPU state has no cache at layer %d", l);
        if (skv_cuda_upload(b->k[l], cpu->k[l], per) != 0 || skv_cuda_upload(b->v[l], cpu->v[l], per) != 0)
            return skv_error_prefix("skv_cuda_state_load (layer %d)", l);
    }
    s->n_past = cpu->n_past;
    return 0;
}

static int forward_impl(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn hook,
                        void *hctx);

int skv_cuda_forward(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts) {
    if (opts && opts->attn)
        return skv_error("skv_cuda_forward: the attention hook (compressed KV cache policies) runs on the CPU "
                         "only; use the CPU forward (policy full only on the GPU)");
    return forward_impl(s, tokens, T, opts, NULL, NULL);
}

int skv_cuda_forward_dev(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn attn,
                         void *ctx) {
    if (!attn) return skv_error("skv_cuda_forward_dev: no attention hook");
    if (opts && (opts->attn || opts->colsum || opts->lastrow))
        return skv_error("skv_cuda_forward_dev: colsum / lastrow / a CPU hook cannot be combined with the device hook");
    return forward_impl(s, tokens, T, opts, attn, ctx);
}

static int forward_impl(skv_cuda_state *s, const int *tokens, int T, const skv_fwd_opts *opts, skv_cuda_attn_fn hook,
                        void *hctx) {
    if (!s) return skv_error("skv_cuda_forward: no state");
    const skv_model *m = s->m;
    const skv_config *c = &m->cfg;
    const int C = c->dim, V = c->vocab;
    skv_fwd_opts none = {0};
    if (!opts) opts = &none;
    if (!hook && !((dev_bufs *)s->dev)->k)
        return skv_error("skv_cuda_forward: the state has no KV cache (made for a device attention hook)");
    if (T < 1 || T > s->T_max)
        return skv_error("skv_cuda_forward: block of %d tokens (allowed 1 .. %d)", T, s->T_max);
    if (s->n_past + T > s->S_cap)
        return skv_error("skv_cuda_forward: KV cache full (%d + %d tokens > capacity %d)", s->n_past, T, s->S_cap);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return skv_error("skv_cuda_forward: token id %d out of range (vocab %d)", tokens[t], V);
    const int n_layers = opts->n_layers > 0 && opts->n_layers < c->n_layer ? opts->n_layers : c->n_layer;
    const int pos0 = s->n_past;
    dev_bufs *w = s->dev;

    for (int t = 0; t < T; t++) w->hpos[t] = pos0 + t;
    if (embed(m, w, tokens, T) != 0) return skv_error_prefix("skv_cuda_forward: embeddings");
    for (int l = 0; l < n_layers; l++) {
        if (qkv(s->dm, l, w, T) != 0 ||
            (hook ? hook(hctx, l, w->q, w->kx, w->vx, pos0, T, w->att)
                  : attend(s, l, w->att, w->q, w->kx, w->vx, T, pos0, opts->colsum ? opts->colsum[l] : NULL,
                           opts->lastrow ? opts->lastrow[l] : NULL)) != 0 ||
            (!skv_fwd_tail_skips_mlp(l, n_layers, c->n_layer) && wo_mlp(s->dm, l, w, T) != 0))
            return skv_error_prefix("skv_cuda_forward (layer %d, %d tokens at %d)", l, T, pos0);
    }
    int rows = 0;
    if (n_layers == c->n_layer && opts->logits != SKV_LOGITS_NONE) {
        rows = opts->logits == SKV_LOGITS_LAST ? 1 : T;
        const float *x = opts->logits == SKV_LOGITS_LAST ? w->x + (size_t)(T - 1) * C : w->x;
        if (lm_head(s->dm, w, x, rows) != 0) return skv_error_prefix("skv_cuda_forward: LM head");
    }
    /* the download waits for every queued kernel; without logits wait explicitly, so that a
     * fault inside a kernel is reported by this call */
    if (rows ? skv_cuda_download(s->logits, w->logits, (size_t)rows * V * sizeof(float)) : skv_cuda_sync())
        return skv_error_prefix("skv_cuda_forward (%d tokens at %d)", T, pos0);
    s->n_past += T;
    return 0;
}

/* ---------------------------------------------------------------- batched decode */

skv_cuda_batch *skv_cuda_batch_new(const skv_cuda_model *dm, int n_max) {
    if (!dm || n_max < 1 || n_max > 65535) {
        skv_error("skv_cuda_batch_new: bad arguments (n_max %d)", n_max);
        return NULL;
    }
    skv_cuda_batch *b = skv_calloc(1, sizeof *b, "CUDA batch");
    if (!b) return NULL;
    b->dm = dm;
    b->n_max = n_max;
    if (!(b->ws = state_alloc(dm, n_max, n_max, false, false))) { free(b); return NULL; }
    return b;
}

void skv_cuda_batch_free(skv_cuda_batch *b) {
    if (!b) return;
    skv_cuda_state_free(b->ws);
    free(b);
}

int skv_cuda_forward_batch(skv_cuda_batch *b, skv_cuda_state **states, const int *tokens, int n,
                           const skv_fwd_opts *opts) {
    if (!b || !states || !tokens || n < 1 || n > b->n_max)
        return skv_error("skv_cuda_forward_batch: batch of %d (allowed 1 .. %d)", n, b ? b->n_max : 0);
    const skv_model *m = b->dm->m;
    const skv_config *c = &m->cfg;
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim, V = c->vocab;
    const int Q = H * d, KV = Hkv * d;
    const int nl0 = opts ? opts[0].n_layers : 0;
    bool any_logits = false;
    for (int i = 0; i < n; i++) {
        const skv_cuda_state *s = states[i];
        if (!s || s->dm != b->dm || !((dev_bufs *)s->dev)->k)
            return skv_error("skv_cuda_forward_batch: entry %d is not a state of this model", i);
        if (s->n_past + 1 > s->S_cap)
            return skv_error("skv_cuda_forward_batch: entry %d: KV cache full (%d tokens, capacity %d)", i, s->n_past,
                             s->S_cap);
        if (tokens[i] < 0 || tokens[i] >= V)
            return skv_error("skv_cuda_forward_batch: entry %d: token id %d out of range (vocab %d)", i, tokens[i], V);
        if (opts && opts[i].n_layers != nl0)
            return skv_error("skv_cuda_forward_batch: entry %d runs %d layers, entry 0 runs %d", i, opts[i].n_layers,
                             nl0);
        if (opts && opts[i].attn)
            return skv_error("skv_cuda_forward_batch: entry %d: the attention hook runs on the CPU only", i);
        if (!opts || opts[i].logits != SKV_LOGITS_NONE) any_logits = true;
    }
    const int n_layers = nl0 > 0 && nl0 < c->n_layer ? nl0 : c->n_layer;
    dev_bufs *w = b->ws->dev;

    for (int i = 0; i < n; i++) w->hpos[i] = states[i]->n_past;
    if (embed(m, w, tokens, n) != 0) return skv_error_prefix("skv_cuda_forward_batch: embeddings");
    for (int l = 0; l < n_layers; l++) {
        if (qkv(b->dm, l, w, n) != 0) return skv_error_prefix("skv_cuda_forward_batch (layer %d)", l);
        for (int i = 0; i < n; i++) {
            const skv_fwd_opts *o = opts ? &opts[i] : NULL;
            if (attend(states[i], l, w->att + (size_t)i * Q, w->q + (size_t)i * Q, w->kx + (size_t)i * KV,
                       w->vx + (size_t)i * KV, 1, states[i]->n_past, o && o->colsum ? o->colsum[l] : NULL,
                       o && o->lastrow ? o->lastrow[l] : NULL) != 0)
                return skv_error_prefix("skv_cuda_forward_batch (layer %d, entry %d)", l, i);
        }
        if (!skv_fwd_tail_skips_mlp(l, n_layers, c->n_layer) && wo_mlp(b->dm, l, w, n) != 0)
            return skv_error_prefix("skv_cuda_forward_batch (layer %d)", l);
    }
    /* LM head over all n rows (cheaper than compacting them on the device), then each
     * entry that asked copies its row */
    if (n_layers == c->n_layer && any_logits) {
        if (lm_head(b->dm, w, w->x, n) != 0) return skv_error_prefix("skv_cuda_forward_batch: LM head");
        for (int i = 0; i < n; i++) {
            if (opts && opts[i].logits == SKV_LOGITS_NONE) continue;
            if (skv_cuda_download(states[i]->logits, w->logits + (size_t)i * V, (size_t)V * sizeof(float)) != 0)
                return skv_error_prefix("skv_cuda_forward_batch (entry %d logits)", i);
        }
    } else if (skv_cuda_sync() != 0) {
        return skv_error_prefix("skv_cuda_forward_batch");
    }
    for (int i = 0; i < n; i++) states[i]->n_past++;
    return 0;
}

#endif  /* SKV_CUDA */
