/* forward.c: the decoder forward pass (prefill blocks and single-token decode) over a
 * contiguous fp16/fp32 KV cache, for every family runtime/model/ loads. The plain
 * Llama/Qwen2 block reads top to bottom like llama2.c's forward():
 *
 *   tokens (T) -> x (T, C) embeddings
 *   per layer l:
 *     xb  = rmsnorm(x) * attn_norm                         (T, C)
 *     q   = xb Wq^T (+bq)   kx = xb Wk^T (+bk)   vx = xb Wv^T (+bv)
 *                                                          (T, H, d) (T, Hkv, d) (T, Hkv, d)
 *     rope(q), rope(kx) at positions n_past .. n_past+T-1
 *     K[l], V[l] (Hkv, S_cap, d) <- kx, vx at rows n_past ..
 *     att = attention(q, K[l], V[l])                       (T, H, d)
 *     x  += att Wo^T                                       (T, C)
 *     xb  = rmsnorm(x) * ffn_norm
 *     hb  = silu(xb Wgate^T) * (xb Wup^T)                  (T, F)
 *     x  += hb Wdown^T
 *   xb = rmsnorm(x) * out_norm; logits = xb Woutput^T      (1 or T, vocab)
 * The other families add steps in block_qkv / block_out / skv_attention_window (skv_config): q/k norms per
 * head before RoPE, RoPE from the layer's frequency table, a query scale, a sliding window per
 * layer, post-attention / post-FFN norms, GeGLU, an embedding scale, final softcapping.
 * Every buffer lives in skv_state, allocated once in skv_state_new. A single decode token
 * without an attention hook, or with one that runs in a team (attn_team), takes
 * decode_one_region (the same steps in one OpenMP region; plain Llama/Qwen2 blocks only). */
#include "forward.h"
#include "common/hugemem.h"
#include "common/util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *falloc(size_t rows, size_t cols, const char *what, bool *ok) {
    size_t n;
    if (!*ok) return NULL;
    if (!skv_mul_ok(rows, cols, &n) || !skv_mul_ok(n, sizeof(float), &n)) {
        skv_error("skv_state_new: size of %s overflows", what);
        *ok = false;
        return NULL;
    }
    float *p = skv_aligned_alloc(n ? n : 64, what);
    if (!p) *ok = false;
    return p;
}

static skv_state *state_new(const skv_model *m, int S_cap, int T_max, bool kv_f16, int k_bits, int v_bits, bool cache) {
    if (!m || S_cap < 1 || T_max < 1) {
        skv_error("skv_state_new: bad arguments (S_cap %d, T_max %d)", S_cap, T_max);
        return NULL;
    }
    const size_t hd = (size_t)m->cfg.head_dim, esz = kv_f16 ? 2 : 4;
    const size_t row_k = k_bits ? skv_kvq_row_bytes(m->cfg.head_dim, k_bits) : hd * esz;
    const size_t row_v = v_bits ? skv_kvq_row_bytes(m->cfg.head_dim, v_bits) : hd * esz;
    if (k_bits && m->cfg.head_dim > SKV_KVQ_MAX_D) {
        skv_error("skv_state_new: a quantised key cache takes head sizes up to %d (this model's is %d)", SKV_KVQ_MAX_D,
                  m->cfg.head_dim);
        return NULL;
    }
    if (!row_k || !row_v) {
        skv_error("skv_state_new: a %d-bit KV cache needs a head size that is a multiple of %d (this model's is %d)",
                  row_k ? v_bits : k_bits, SKV_KVQ_GROUP, m->cfg.head_dim);
        return NULL;
    }
    if (T_max > S_cap) T_max = S_cap;
    const skv_config *c = &m->cfg;
    skv_state *s = skv_calloc(1, sizeof *s, "forward state");
    if (!s) return NULL;
    s->m = m;
    s->S_cap = S_cap;
    s->T_max = T_max;
    s->kv_f16 = kv_f16;
    s->k_bits = k_bits;
    s->v_bits = v_bits;
    s->k_row_bytes = row_k;
    s->v_row_bytes = row_v;
    const size_t C = c->dim, Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim,
                 F = c->ffn_dim, T = T_max;
    bool ok = true;
    s->x = falloc(T, C, "activations x", &ok);
    s->xb = falloc(T, C > Q ? C : Q, "activations xb", &ok);
    s->q = falloc(T, Q, "queries", &ok);
    s->kx = falloc(T, KV, "keys", &ok);
    s->vx = falloc(T, KV, "values", &ok);
    s->att = falloc(T, Q, "attention output", &ok);
    s->hb = falloc(T, F, "ffn hidden", &ok);
    s->hb2 = falloc(T, F, "ffn hidden 2", &ok);
    s->logits = falloc(T, (size_t)c->vocab, "logits", &ok);
    if (ok) s->pos = skv_malloc(T * sizeof(int), "positions");
    if (ok && k_bits && cache) {   /* each layer's key normalisation, fitted on its first block */
        s->k_norm = skv_calloc((size_t)c->n_layer * 2 * KV, sizeof(float), "key normalisation");
        s->k_norm_set = skv_calloc((size_t)c->n_layer, 1, "key normalisation");
        ok = s->k_norm && s->k_norm_set;
    }
    if (!s->pos) ok = false;
    if (ok) {
        s->k = skv_calloc((size_t)c->n_layer, sizeof(void *), "kv cache table");
        s->v = skv_calloc((size_t)c->n_layer, sizeof(void *), "kv cache table");
        ok = s->k && s->v;
    }
    size_t per = 0, per_k = 0, per_v = 0;
    if (ok && (!skv_mul_ok((size_t)c->n_kv_head, (size_t)S_cap, &per) || !skv_mul_ok(per, row_k, &per_k) ||
               !skv_mul_ok(per, row_v, &per_v))) {
        skv_error("skv_state_new: KV cache size overflows (S_cap %d)", S_cap);
        ok = false;
    }
    /* one block: K of every layer, then V; each layer's array 64-byte aligned */
    const size_t per64 = (per_k + 63) & ~(size_t)63, per64_v = (per_v + 63) & ~(size_t)63;
    size_t arena = 0;
    if (ok && cache) {
        if (!skv_mul_ok(per64 + per64_v, (size_t)c->n_layer, &arena)) {
            skv_error("skv_state_new: KV cache size overflows (S_cap %d)", S_cap);
            ok = false;
        } else if (!(s->kv_arena = skv_huge_alloc(arena, "kv cache"))) {
            ok = false;
        } else {
            s->kv_arena_bytes = arena;
            for (int l = 0; l < c->n_layer; l++) {
                s->k[l] = (uint8_t *)s->kv_arena + (size_t)l * per64;
                s->v[l] = (uint8_t *)s->kv_arena + (size_t)c->n_layer * per64 + (size_t)l * per64_v;
            }
        }
    }
    if (!ok) {
        skv_error_prefix("skv_state_new (S_cap %d, T_max %d)", S_cap, T_max);
        skv_state_free(s);
        return NULL;
    }
    return s;
}

skv_state *skv_state_new(const skv_model *m, int S_cap, int T_max, bool kv_f16) {
    return state_new(m, S_cap, T_max, kv_f16, 0, 0, true);
}

skv_state *skv_state_new_quant(const skv_model *m, int S_cap, int T_max, int k_bits, int v_bits) {
    if ((k_bits != 8 && k_bits != 4) || (v_bits != 8 && v_bits != 4)) {
        skv_error("skv_state_new_quant: %d-bit keys, %d-bit values (8 or 4 each)", k_bits, v_bits);
        return NULL;
    }
    return state_new(m, S_cap, T_max, true, k_bits, v_bits, true);
}

skv_state *skv_state_new_nocache(const skv_model *m, int S_cap, int T_max, bool kv_f16) {
    return state_new(m, S_cap, T_max, kv_f16, 0, 0, false);
}

void skv_state_free(skv_state *s) {
    if (!s) return;
    skv_huge_free(s->kv_arena, s->kv_arena_bytes);
    free(s->k); free(s->v);
    free(s->x); free(s->xb); free(s->q); free(s->kx); free(s->vx); free(s->att);
    free(s->hb); free(s->hb2); free(s->logits); free(s->pos);
    free(s->k_norm); free(s->k_norm_set);
    free(s->team_ws);
    free(s);
}

void skv_state_reset(skv_state *s) {
    s->n_past = 0;
    if (s->k_norm_set) memset(s->k_norm_set, 0, (size_t)s->m->cfg.n_layer);   /* a new sequence fits its own */
}

int skv_state_copy_cache(skv_state *dst, const skv_state *src, int layers) {
    const skv_config *c = &src->m->cfg;
    if (dst->m != src->m || dst->S_cap != src->S_cap || dst->kv_f16 != src->kv_f16 || dst->k_bits != src->k_bits ||
        dst->v_bits != src->v_bits || dst->k_norm_off != src->k_norm_off || !dst->kv_arena || !src->kv_arena ||
        layers < 0 || layers > c->n_layer)
        return skv_error("skv_state_copy_cache: the states' models, caches or layers differ");
    const size_t rows = (size_t)c->n_kv_head * src->S_cap;
    for (int l = 0; l < layers; l++) {
        memcpy(dst->k[l], src->k[l], rows * src->k_row_bytes);
        memcpy(dst->v[l], src->v[l], rows * src->v_row_bytes);
    }
    if (src->k_norm) {
        const size_t per = (size_t)2 * c->n_kv_head * c->head_dim;
        memcpy(dst->k_norm, src->k_norm, (size_t)c->n_layer * per * sizeof(float));
        memcpy(dst->k_norm_set, src->k_norm_set, (size_t)c->n_layer);
    }
    dst->n_past = src->n_past;
    return 0;
}

/* y (T, n) += b (n) */
static void add_bias(float *y, const skv_weight *b, int T, int n) {
    const float *bb = b->data;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] += bb[i];
}

/* q (T, Q), k and v (T, KV) += the layer's q/k/v biases, when it has them (qwen2) */
static void add_qkv_bias(float *q, float *k, float *v, const skv_layer *L, int T, int Q, int KV) {
    if (!L->bq.data) return;
    add_bias(q, &L->bq, T, Q);
    add_bias(k, &L->bk, T, KV);
    add_bias(v, &L->bv, T, KV);
}

/* x (n) += y (n) */
static void add_into(float *x, const float *y, size_t n) {
    #pragma omp parallel for if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Layer l's key normalisation (2, Hkv, d) for a quantised key cache (kvquant.h), NULL for
 * other caches: fitted on the first block of rows k (T, Hkv, d) written into the layer, then
 * fixed while the sequence lasts. The row at position 0 is left out of the fit when others
 * are there: its key (the attention sink's) is unlike the rest. A first block of fewer than
 * SKV_KVQ_NORM_MIN_ROWS rows (a sequence begun token by token; k may then be NULL) keeps
 * plain rows. */
static const float *key_norm(skv_state *s, int l, const float *k, int T, int pos0) {
    if (!s->k_norm || s->k_norm_off) return NULL;
    const int Hkv = s->m->cfg.n_kv_head, d = s->m->cfg.head_dim;
    float *nm = s->k_norm + (size_t)l * 2 * Hkv * d;
    if (!s->k_norm_set[l]) {
        const int skip = pos0 == 0 && T > 1;
        for (int h = 0; h < Hkv; h++)
            skv_kvq_key_norm_fit(nm + (size_t)h * d, nm + ((size_t)Hkv + h) * d,
                                 k ? k + ((size_t)skip * Hkv + h) * d : NULL, k ? T - skip : 0, (size_t)Hkv * d, d);
        s->k_norm_set[l] = 1;
    }
    return nm;
}

/* rows pos0 .. pos0+T-1 of every KV head of one layer's K (v false) or V <- src (T, Hkv, d),
 * rotated keys; quantised keys normalised with norm (key_norm) when it is not NULL */
static void cache_write(const skv_state *s, bool v, void *cache, const float *src, int T, int Hkv, int d, int pos0,
                        const float *norm) {
    const int S_cap = s->S_cap, bits = v ? s->v_bits : s->k_bits;
    const size_t rb = v ? s->v_row_bytes : s->k_row_bytes;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hkv; h++) {
            uint8_t *row = (uint8_t *)cache + ((size_t)h * S_cap + pos0 + t) * rb;
            const float *x = src + ((size_t)t * Hkv + h) * d;
            if (v) skv_kv_store_any(row, x, d, bits, s->kv_f16);
            else skv_kv_store_key(row, x, norm, h, Hkv, d, bits, s->kv_f16);
        }
}

/* ------------------------------------------------------------------ the block, any family
 * The general path and the batches run the same steps on R stacked rows of a workspace w at
 * positions w->pos; the family features (skv_config) switch extra steps on. */

/* x (R, C) = embeddings of tokens (times embd_scale, Gemma) */
static void embed_rows(skv_state *w, const skv_model *m, const int *tokens, int R) {
    const int C = m->cfg.dim;
    const float sc = m->cfg.embd_scale;
    #pragma omp parallel for if (R > 4)
    for (int r = 0; r < R; r++) {
        float *x = w->x + (size_t)r * C;
        skv_weight_row(&m->tok_embd, tokens[r], x);
        if (sc != 0.0f)
            for (int i = 0; i < C; i++) x[i] *= sc;
    }
}

/* q (R, H*d), kx / vx (R, Hkv*d) of layer l from w->x: norm, products, biases, q/k norms,
 * RoPE at w->pos (the layer's frequencies), and a query scale other than 1/sqrt(d) folded
 * into q (the attention kernels divide by sqrt(d)) */
static void block_qkv(skv_state *w, const skv_model *m, int l, int R) {
    const skv_config *c = &m->cfg;
    const skv_layer *L = &m->layers[l];
    const int C = c->dim, H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    skv_rmsnorm(w->xb, w->x, L->attn_norm.data, R, C, c->norm_eps);
    float *ys[3] = {w->q, w->kx, w->vx};
    const skv_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
    skv_matmul_multi(ys, ws, 3, w->xb, R);
    add_qkv_bias(w->q, w->kx, w->vx, L, R, H * d, Hkv * d);
    if (L->q_norm.data) {   /* per head, in place */
        skv_rmsnorm(w->q, w->q, L->q_norm.data, R * H, d, c->norm_eps);
        skv_rmsnorm(w->kx, w->kx, L->k_norm.data, R * Hkv, d, c->norm_eps);
    }
    if (!skv_config_extra_feature(c)) {   /* plain llama / qwen2: the theta formula, as always */
        skv_rope(w->q, w->pos, R, H, d, c->rope_theta, c->rope_mode);
        skv_rope(w->kx, w->pos, R, Hkv, d, c->rope_theta, c->rope_mode);
        return;
    }
    const float *inv = skv_model_rope_freq(m, l);
    skv_rope_freq(w->q, w->pos, R, H, d, inv, c->rope_mode);
    skv_rope_freq(w->kx, w->pos, R, Hkv, d, inv, c->rope_mode);
    if (c->attn_scale != 0.0f) {
        const float f = c->attn_scale * sqrtf((float)d);
        if (f != 1.0f)
            for (size_t i = 0; i < (size_t)R * H * d; i++) w->q[i] *= f;
    }
}

/* the rest of layer l from the attention output w->att: output product, (post-attention
 * norm), residual, (pre-)norm, gated MLP, (post-FFN norm), residual */
static void block_out(skv_state *w, const skv_model *m, int l, int R) {
    const skv_config *c = &m->cfg;
    const skv_layer *L = &m->layers[l];
    const int C = c->dim, F = c->ffn_dim;
    skv_matmul(w->xb, w->att, &L->wo, R);
    if (L->post_attn_norm.data) skv_rmsnorm(w->xb, w->xb, L->post_attn_norm.data, R, C, c->norm_eps);
    add_into(w->x, w->xb, (size_t)R * C);
    skv_rmsnorm(w->xb, w->x, L->ffn_norm.data, R, C, c->norm_eps);
    float *ys[2] = {w->hb, w->hb2};
    const skv_weight *ws[2] = {&L->w_gate, &L->w_up};
    skv_matmul_multi(ys, ws, 2, w->xb, R);
    if (c->act == SKV_ACT_GELU_TANH) skv_geglu(w->hb, w->hb, w->hb2, R * F);
    else skv_swiglu(w->hb, w->hb, w->hb2, R * F);
    skv_matmul(w->xb, w->hb, &L->w_down, R);
    if (L->post_ffn_norm.data) skv_rmsnorm(w->xb, w->xb, L->post_ffn_norm.data, R, C, c->norm_eps);
    add_into(w->x, w->xb, (size_t)R * C);
}

/* final norm, LM head (hv) and softcapping over R rows of w->x -> logits (R, hv rows) */
static void head_rows(skv_state *w, const skv_model *m, const float *x, const skv_weight *hv, int R, float *logits) {
    const skv_config *c = &m->cfg;
    skv_rmsnorm(w->xb, x, m->out_norm.data, R, c->dim, c->norm_eps);
    skv_matmul(logits, w->xb, hv, R);
    if (c->final_softcap != 0.0f) skv_softcap(logits, (int)(R * hv->rows), c->final_softcap);
}

/* ------------------------------------------------------------------ decode, one region
 * A single token without an attention hook runs in ONE OpenMP parallel region instead of
 * five per layer: the matrix products (skv_gemv_team, skv_gemv_team_swiglu) and the
 * attention (skv_attention_team) share their work among the threads, and the small serial
 * steps run on every thread on its own copy (the residual x, rmsnorm, the quantised
 * activations, q/k/v bias and RoPE), so a layer has six barriers (q/k/v, attention (two: its
 * key chunks, then their merge per head), wo, gate/up + SwiGLU, down) and no thread idles
 * through a serial part: the attention stores the new K/V row on the thread that reads it
 * (skv_attn_args.knew), SwiGLU runs on the rows of the thread that made them. Every value
 * is computed by the same functions in the same order as in the general path, so the
 * logits are bit-identical. An attention hook that can run in a team
 * (opts->attn_team: the compressed-cache session's decode step) takes the attention's place
 * and is called by every thread; it does its serial parts under `omp single`. */

typedef struct {
    const skv_weight *qkv[3], *wo[1], *gu[2], *down[1];
} layer_mats;

static layer_mats mats_of(const skv_layer *L) {
    return (layer_mats){{&L->wq, &L->wk, &L->wv}, {&L->wo}, {&L->w_gate, &L->w_up}, {&L->w_down}};
}

/* Bytes of quantised activations one thread needs (largest group), or 0 when some matrix
 * product cannot run as a team GEMV (then the general path runs). */
static size_t team_act_bytes(const skv_model *m, int n_layers, bool head) {
    size_t mx = 0;
    for (int l = 0; l < n_layers; l++) {
        layer_mats g = mats_of(&m->layers[l]);
        const skv_weight *const *grp[4] = {g.qkv, g.wo, g.gu, g.down};
        const int n[4] = {3, 1, 2, 1};
        if (g.gu[0]->rows != g.gu[1]->rows) return 0;   /* skv_gemv_team_swiglu's pair */
        for (int i = 0; i < 4; i++) {
            if (!skv_gemv_team_ok(grp[i], n[i])) return 0;
            size_t b = skv_gemv_act_bytes(grp[i], n[i]);
            if (b > mx) mx = b;
        }
    }
    if (head) {
        const skv_weight *o[1] = {&m->output};
        if (!skv_gemv_team_ok(o, 1)) return 0;
        size_t b = skv_gemv_act_bytes(o, 1);
        if (b > mx) mx = b;
    }
    return mx;
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The LM head one row of logits uses: m->output, or its first head_rows rows (rounded up
 * to whole 8-row groups, which is where the x8 layout and the 4-row kernels split it). */
static skv_weight head_view(const skv_model *m, const skv_fwd_opts *o) {
    skv_weight w = m->output;
    if (o && o->logits == SKV_LOGITS_LAST && o->head_rows > 0) {
        const int64_t r = ((int64_t)o->head_rows + 7) / 8 * 8;
        if (r < w.rows) w.rows = r;
    }
    return w;
}

/* -INFINITY for the logits past the head's rows (none without a limit) */
static void head_fill(float *logits, const skv_weight *w, int vocab) {
    for (int i = (int)w->rows; i < vocab; i++) logits[i] = -INFINITY;
}

static int one_region = -1;   /* -1: read SKV_ONE_REGION on first use */

void skv_forward_set_one_region(int on) { __atomic_store_n(&one_region, on ? 1 : 0, __ATOMIC_RELAXED); }

static int one_region_on(void) {
    int f = __atomic_load_n(&one_region, __ATOMIC_RELAXED);
    if (f < 0) {
        const char *e = getenv("SKV_ONE_REGION");
        f = e && !strcmp(e, "0") ? 0 : 1;
        __atomic_store_n(&one_region, f, __ATOMIC_RELAXED);
    }
    return f;
}

/* One token at position s->n_past; 1 when it ran, 0 when this path does not apply, -1 on
 * error. Shapes as in skv_forward with T = 1. */
static int decode_one_region(skv_state *s, int token, const skv_fwd_opts *opts, int n_layers) {
    const skv_model *m = s->m;
    const skv_config *c = &m->cfg;
    const int C = c->dim, H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    const int Q = H * d, KV = Hkv * d, pos0 = s->n_past;
    const bool head = n_layers == c->n_layer && opts->logits != SKV_LOGITS_NONE;
    if ((opts->attn && !opts->attn_team) || d / 2 > 512 || !one_region_on() || skv_config_extra_feature(c)) return 0;
    const size_t ab = team_act_bytes(m, n_layers, head);
    if (!ab) return 0;
    /* per thread: x (C), xb (max(C, Q)), kv (2 KV), act (ab); then one attention workspace
     * shared by the team, sized for S_cap keys; kept in the state, so a decode step
     * allocates nothing */
    const size_t o_xb = up64((size_t)C * 4), o_kv = o_xb + up64((size_t)(C > Q ? C : Q) * 4),
                 o_act = o_kv + up64((size_t)KV * 2 * 4), per = o_act + up64(ab);
    const int nth = omp_get_max_threads();
    const skv_attn_args full = {.T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = s->S_cap - 1, .S_cap = s->S_cap,
                                .k_bits = s->k_bits, .v_bits = s->v_bits};
    const size_t o_att = per * (size_t)nth,
                 total = o_att + (opts->attn ? 0 : up64(skv_attention_ws_floats(&full, nth) * 4));
    if (s->team_ws_bytes < total) {
        free(s->team_ws);
        s->team_ws_bytes = 0;
        if (!(s->team_ws = skv_aligned_alloc(total, "decode workspace"))) return -1;
        s->team_ws_bytes = total;
    }
    uint8_t *ws = s->team_ws;
    float *att_ws = (float *)(ws + o_att);
    float cs[512], sn[512];
    skv_rope_table(cs, sn, pos0, d, c->rope_theta);
    if (!opts->attn)   /* decided before the team runs (a first block of one row: plain rows) */
        for (int l = 0; l < n_layers; l++) key_norm(s, l, NULL, 1, pos0);
    s->pos[0] = pos0;
    int failed = 0;
    s->attn_in_team = opts->attn != NULL;
    #pragma omp parallel num_threads(nth)
    {
        uint8_t *mine = ws + per * (size_t)omp_get_thread_num();
        float *x = (float *)mine, *xb = (float *)(mine + o_xb), *kv = (float *)(mine + o_kv);
        uint8_t *act = mine + o_act;
        int bad = 0;
        skv_weight_row(&m->tok_embd, token, x);
        for (int l = 0; l < n_layers; l++) {
            const skv_layer *L = &m->layers[l];
            layer_mats g = mats_of(L);
            skv_rmsnorm(xb, x, L->attn_norm.data, 1, C, c->norm_eps);
            float *qkv[3] = {s->q, s->kx, s->vx};
            skv_gemv_team(qkv, g.qkv, 3, xb, act);
            if (opts->attn) {
                #pragma omp single
                {
                    add_qkv_bias(s->q, s->kx, s->vx, L, 1, Q, KV);
                    skv_rope_apply(s->q, H, d, cs, sn, c->rope_mode);
                    skv_rope_apply(s->kx, Hkv, d, cs, sn, c->rope_mode);
                }
                /* the hook runs on every thread and agrees on its status (forward.h) */
                if (opts->attn(opts->attn_ctx, l, s->q, s->kx, s->vx, pos0, 1, s->att) != 0) {
                    bad = 1;
                    #pragma omp master
                    failed = 1;
                    break;
                }
            } else {
                /* every thread biases and rotates its own copy of q, k, v (xb is free until
                 * the next rmsnorm); the attention writes the new K/V row on the thread
                 * that reads it, so no barrier waits for one thread to do this serially */
                float *qp = xb, *kp = kv, *vp = kv + KV;
                memcpy(qp, s->q, (size_t)Q * sizeof(float));
                memcpy(kp, s->kx, (size_t)KV * sizeof(float));
                memcpy(vp, s->vx, (size_t)KV * sizeof(float));
                add_qkv_bias(qp, kp, vp, L, 1, Q, KV);
                skv_rope_apply(qp, H, d, cs, sn, c->rope_mode);
                skv_rope_apply(kp, Hkv, d, cs, sn, c->rope_mode);
                skv_attn_args a = {
                    .T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = s->S_cap, .kv_f16 = s->kv_f16, .k_bits = s->k_bits, .v_bits = s->v_bits,
                    .k_norm = key_norm(s, l, NULL, 1, pos0),   /* decided before the region: a read */
                    .colsum = opts->colsum ? opts->colsum[l] : NULL,
                    .lastrow = opts->lastrow ? opts->lastrow[l] : NULL,
                    .knew = kp, .vnew = vp,
                };
                skv_attention_team(s->att, qp, s->k[l], s->v[l], &a, att_ws);
            }
            if (skv_fwd_tail_skips_mlp(l, n_layers, c->n_layer)) break;   /* the same on every thread */
            float *y[2] = {s->xb, NULL};
            skv_gemv_team(y, g.wo, 1, s->att, act);
            for (int i = 0; i < C; i++) x[i] += s->xb[i];
            skv_rmsnorm(xb, x, L->ffn_norm.data, 1, C, c->norm_eps);
            skv_gemv_team_swiglu(s->hb, s->hb, s->hb2, &L->w_gate, &L->w_up, xb, act);
            skv_gemv_team(y, g.down, 1, s->hb, act);
            for (int i = 0; i < C; i++) x[i] += s->xb[i];
        }
        if (head && !bad) {
            skv_rmsnorm(xb, x, m->out_norm.data, 1, C, c->norm_eps);
            const skv_weight hv = head_view(m, opts), *o[1] = {&hv};
            float *lg[1] = {s->logits};
            skv_gemv_team(lg, o, 1, xb, act);
            #pragma omp master
            head_fill(s->logits, &hv, c->vocab);
        }
        #pragma omp master
        memcpy(s->x, x, (size_t)C * sizeof(float));
    }
    s->attn_in_team = false;
    if (failed) return -1;
    s->n_past += 1;
    return 1;
}

int skv_forward(skv_state *s, const int *tokens, int T, const skv_fwd_opts *opts) {
    const skv_model *m = s->m;
    const skv_config *c = &m->cfg;
    const int C = c->dim, H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    skv_fwd_opts none = {0};
    if (!opts) opts = &none;
    if (T < 1 || T > s->T_max)
        return skv_error("skv_forward: block of %d tokens (allowed 1 .. %d)", T, s->T_max);
    if (s->n_past + T > s->S_cap)
        return skv_error("skv_forward: KV cache full (%d + %d tokens > capacity %d)", s->n_past, T, s->S_cap);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab)
            return skv_error("skv_forward: token id %d out of range (vocab %d)", tokens[t], c->vocab);
    int n_layers = opts->n_layers > 0 && opts->n_layers < c->n_layer ? opts->n_layers : c->n_layer;
    const int pos0 = s->n_past;
    if (T == 1) {
        int r = decode_one_region(s, tokens[0], opts, n_layers);
        if (r) return r > 0 ? 0 : -1;
    }

    /* embeddings: x (T, C) */
    embed_rows(s, m, tokens, T);
    for (int t = 0; t < T; t++) s->pos[t] = pos0 + t;

    for (int l = 0; l < n_layers; l++) {
        block_qkv(s, m, l, T);   /* q (T, H*d), kx, vx (T, Hkv*d), rotated */
        if (opts->attn) {
            /* the compressed-cache runtime owns the K/V storage (forward.h) */
            if (opts->attn(opts->attn_ctx, l, s->q, s->kx, s->vx, pos0, T, s->att) != 0) return -1;
        } else {
            const float *kn = key_norm(s, l, s->kx, T, pos0);
            cache_write(s, false, s->k[l], s->kx, T, Hkv, d, pos0, kn);
            cache_write(s, true, s->v[l], s->vx, T, Hkv, d, pos0, NULL);
            skv_attn_args a = {
                .T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = pos0, .S_cap = s->S_cap, .kv_f16 = s->kv_f16, .k_bits = s->k_bits, .v_bits = s->v_bits,
                .k_norm = kn,
                .colsum = opts->colsum ? opts->colsum[l] : NULL,
                .lastrow = opts->lastrow ? opts->lastrow[l] : NULL,
            };
            skv_attention_window(s->att, s->q, s->k[l], s->v[l], &a, m->layers[l].window);   /* (T, H*d) */
        }
        if (skv_fwd_tail_skips_mlp(l, n_layers, c->n_layer)) break;
        block_out(s, m, l, T);
    }
    s->n_past += T;
    if (n_layers < c->n_layer || opts->logits == SKV_LOGITS_NONE) return 0;

    /* final norm and LM head, only for the rows asked for */
    if (opts->logits == SKV_LOGITS_LAST) {
        const skv_weight hv = head_view(m, opts);
        head_rows(s, m, s->x + (size_t)(T - 1) * C, &hv, 1, s->logits);
        head_fill(s->logits, &hv, c->vocab);
    } else {
        head_rows(s, m, s->x, &m->output, T, s->logits);
    }
    return 0;
}

/* ------------------------------------------------------------------ batched decode
 *   tokens (n) -> x (n, C), row i = sequence i at position states[i]->n_past
 *   per layer: the same matrix products as above with T = n (one weight pass);
 *   attention row by row: sequence i's q (1, H, d) against its own cache / attn hook;
 *   logits for the rows that ask for them, one LM-head product, copied to each state. */

skv_batch *skv_batch_new(const skv_model *m, int n_max) {
    if (!m || n_max < 1) { skv_error("skv_batch_new: bad arguments (n_max %d)", n_max); return NULL; }
    skv_batch *b = skv_calloc(1, sizeof *b, "batch workspace");
    if (!b) return NULL;
    b->m = m;
    b->n_max = n_max;
    b->ws = skv_state_new_nocache(m, n_max, n_max, false);   /* the workspace never caches K/V */
    if (!b->ws) { skv_batch_free(b); return NULL; }
    return b;
}

void skv_batch_free(skv_batch *b) {
    if (!b) return;
    skv_state_free(b->ws);
    free(b);
}

int skv_forward_batch(skv_batch *b, skv_state **states, const int *tokens, int n, const skv_fwd_opts *opts) {
    return skv_forward_batch_rows(b, states, tokens, NULL, n, opts);
}

int skv_forward_batch_rows(skv_batch *b, skv_state **states, const int *tokens, const int *rows, int n,
                           const skv_fwd_opts *opts) {
    /* every entry has a row at least, so n above the workspace is refused before reading them */
    if (!b || !states || !tokens || n < 1 || n > b->n_max)
        return skv_error("skv_forward_batch: batch of %d (allowed 1 .. %d)", n, b ? b->n_max : 0);
    const skv_model *m = b->m;
    const skv_config *c = &m->cfg;
    const int C = c->dim, H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim, V = c->vocab;
    const int Q = H * d, KV = Hkv * d;
    static const skv_fwd_opts none = {0};
    const int nl0 = opts ? opts[0].n_layers : 0;
    int nrow[n], R = 0;   /* stacked rows: entry i's nrow[i] rows follow entry i-1's */
    for (int i = 0; i < n; i++) {
        const skv_state *s = states[i];
        const int T = nrow[i] = rows ? rows[i] : 1;
        if (T < 1) return skv_error("skv_forward_batch: entry %d has %d rows", i, T);
        if (!s || s->m != m) return skv_error("skv_forward_batch: entry %d is not a state of this model", i);
        if (s->n_past + T > s->S_cap)
            return skv_error("skv_forward_batch: entry %d: KV cache full (%d + %d tokens, capacity %d)", i, s->n_past, T,
                             s->S_cap);
        if (T > s->T_max && opts && opts[i].logits == SKV_LOGITS_ALL)
            return skv_error("skv_forward_batch: entry %d: %d rows of logits, its state holds %d", i, T, s->T_max);
        for (int t = 0; t < T; t++)
            if (tokens[R + t] < 0 || tokens[R + t] >= V)
                return skv_error("skv_forward_batch: entry %d: token id %d out of range (vocab %d)", i, tokens[R + t], V);
        if (opts && opts[i].n_layers != nl0)
            return skv_error("skv_forward_batch: entry %d runs %d layers, entry 0 runs %d", i, opts[i].n_layers, nl0);
        R += T;
    }
    if (R > b->n_max) return skv_error("skv_forward_batch: %d rows (the workspace holds %d)", R, b->n_max);
    const int n_layers = nl0 > 0 && nl0 < c->n_layer ? nl0 : c->n_layer;
    skv_state *w = b->ws;

    embed_rows(w, m, tokens, R);
    for (int i = 0, r = 0; i < n; i++)
        for (int t = 0; t < nrow[i]; t++) w->pos[r++] = states[i]->n_past + t;

    for (int l = 0; l < n_layers; l++) {
        block_qkv(w, m, l, R);   /* row r at pos[r] */
        for (int i = 0, r = 0; i < n; i++) {
            skv_state *s = states[i];
            const int T = nrow[i];
            const skv_fwd_opts *o = opts ? &opts[i] : &none;
            const float *q = w->q + (size_t)r * Q, *k = w->kx + (size_t)r * KV, *v = w->vx + (size_t)r * KV;
            float *att = w->att + (size_t)r * Q;
            if (o->attn) {
                if (o->attn(o->attn_ctx, l, q, k, v, s->n_past, T, att) != 0)
                    return skv_error_prefix("skv_forward_batch: entry %d", i);
            } else {
                const float *kn = key_norm(s, l, k, T, s->n_past);
                cache_write(s, false, s->k[l], k, T, Hkv, d, s->n_past, kn);
                cache_write(s, true, s->v[l], v, T, Hkv, d, s->n_past, NULL);
                skv_attn_args a = {
                    .T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = s->n_past, .S_cap = s->S_cap, .kv_f16 = s->kv_f16, .k_bits = s->k_bits, .v_bits = s->v_bits,
                    .k_norm = kn,
                    .colsum = o->colsum ? o->colsum[l] : NULL,
                    .lastrow = o->lastrow ? o->lastrow[l] : NULL,
                };
                skv_attention_window(att, q, s->k[l], s->v[l], &a, m->layers[l].window);
            }
            r += T;
        }
        if (skv_fwd_tail_skips_mlp(l, n_layers, c->n_layer)) break;
        block_out(w, m, l, R);
    }
    for (int i = 0; i < n; i++) states[i]->n_past += nrow[i];
    if (n_layers < c->n_layer) return 0;

    /* LM head over the rows that want logits (an entry's last row, or all its rows with
     * SKV_LOGITS_ALL), stacked (nr, C) in entry order */
    int nr = 0;
    for (int i = 0, r = 0; i < n; i++) {
        const int T = nrow[i];
        const skv_logits_mode lm = opts ? opts[i].logits : SKV_LOGITS_LAST;
        for (int t = lm == SKV_LOGITS_ALL ? 0 : T - 1; lm != SKV_LOGITS_NONE && t < T; t++) {
            if (nr != r + t) memcpy(w->x + (size_t)nr * C, w->x + (size_t)(r + t) * C, (size_t)C * sizeof(float));
            nr++;
        }
        r += T;
    }
    if (!nr) return 0;
    /* the head's rows: the most any entry asks for (a drafter's head_rows limit when every
     * entry has one); each entry's logits past its own limit are -INFINITY, as in skv_forward */
    skv_weight hv = m->output;
    hv.rows = 0;
    for (int i = 0; i < n; i++) {
        const skv_weight e = head_view(m, opts ? &opts[i] : NULL);
        if ((opts ? opts[i].logits : SKV_LOGITS_LAST) != SKV_LOGITS_NONE && e.rows > hv.rows) hv.rows = e.rows;
    }
    const size_t HR = (size_t)hv.rows;
    head_rows(w, m, w->x, &hv, nr, w->logits);   /* (nr, HR) */
    for (int i = 0, j = 0; i < n; i++) {
        const int T = nrow[i];
        const skv_logits_mode lm = opts ? opts[i].logits : SKV_LOGITS_LAST;
        if (lm == SKV_LOGITS_NONE) continue;
        const int cnt = lm == SKV_LOGITS_ALL ? T : 1;
        const skv_weight e = head_view(m, opts ? &opts[i] : NULL);
        for (int r = 0; r < cnt; r++) {
            float *dst = states[i]->logits + (size_t)r * V;
            memcpy(dst, w->logits + (size_t)(j + r) * HR, HR * sizeof(float));
            head_fill(dst, &e, V);
        }
        j += cnt;
    }
    return 0;
}
