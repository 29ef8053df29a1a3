/* xtok.c: attention hook that scores matched positions only, for cross-tokenizer
 * calibration (contract in xtok.h). */
#include "xtok.h"
#include "kernels/cpu/attention.h"
#include "common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int skv_xtok_init(skv_xtok_side *x, const skv_model *m, int cap, bool rows) {
    memset(x, 0, sizeof *x);
    x->L = m->cfg.n_layer; x->H = m->cfg.n_head; x->Hkv = m->cfg.n_kv_head;
    x->d = m->cfg.head_dim; x->cap = cap;
    if (cap < 2 || x->Hkv <= 0 || x->H % x->Hkv) return skv_error("cross-tokenizer calibration: bad shape (cap %d, %d/%d heads)", cap, x->H, x->Hkv);
    size_t kv = (size_t)x->Hkv * cap * x->d, sc = (size_t)x->L * x->H * cap;
    x->s = skv_state_new_nocache(m, cap, cap, false);   /* the hook owns the keys and values */
    x->kbuf = skv_malloc(kv * sizeof(float), "window keys");
    x->vbuf = skv_malloc(kv * sizeof(float), "window values");
    x->colsum = skv_malloc(sc * sizeof(float), "matched column sums");
    x->F = skv_malloc(sc * sizeof(float), "matched score vectors");
    if (!x->s || !x->kbuf || !x->vbuf || !x->colsum || !x->F) return -1;
    if (rows) {
        x->lastrow = skv_malloc(sc * sizeof(float), "matched last rows");
        x->R = skv_malloc(sc * sizeof(float), "matched last-row vectors");
        if (!x->lastrow || !x->R) return -1;
    }
    return 0;
}

void skv_xtok_free(skv_xtok_side *x) {
    skv_state_free(x->s);
    free(x->kbuf); free(x->vbuf); free(x->colsum); free(x->lastrow); free(x->F); free(x->R);
    memset(x, 0, sizeof *x);
}

/* Restricted rows of one query head over the matched keys (xtok.h), into cs / lr. */
static void matched_rows(const skv_xtok_side *x, const float *q, int h, float *cs, float *lr, float *p) {
    const int H = x->H, d = x->d, g = h / (H / x->Hkv), M = x->M;
    const float scale = 1.0f / sqrtf((float)d);
    const float *K = x->kbuf + (size_t)g * x->cap * d;
    for (int a = 0; a < M; a++) {
        const float *qa = q + ((size_t)x->pos[a] * H + h) * d;
        float mx = -INFINITY;
        for (int b = 0; b <= a; b++) {
            const float *kb = K + (size_t)x->pos[b] * d;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int t = 0;
            for (; t + 4 <= d; t += 4) { s0 += qa[t] * kb[t]; s1 += qa[t + 1] * kb[t + 1]; s2 += qa[t + 2] * kb[t + 2]; s3 += qa[t + 3] * kb[t + 3]; }
            for (; t < d; t++) s0 += qa[t] * kb[t];
            p[b] = ((s0 + s1) + (s2 + s3)) * scale;
            if (p[b] > mx) mx = p[b];
        }
        double sum = 0;
        for (int b = 0; b <= a; b++) { p[b] = expf(p[b] - mx); sum += p[b]; }
        float inv = (float)(1.0 / sum);
        for (int b = 0; b <= a; b++) cs[b] += p[b] * inv;
        if (lr && a == M - 1)
            for (int b = 0; b <= a; b++) lr[b] = p[b] * inv;
    }
}

static int hook(void *ctx, int layer, const float *q, const float *k, const float *v, int pos0, int T, float *out) {
    skv_xtok_side *x = ctx;
    if (pos0 != 0 || T > x->cap) return skv_error("cross-tokenizer calibration: window block at %d+%d (one block of at most %d expected)", pos0, T, x->cap);
    const int Hkv = x->Hkv, d = x->d;
    for (int t = 0; t < T; t++)   /* (T, Hkv, d) -> (Hkv, cap, d) */
        for (int g = 0; g < Hkv; g++) {
            memcpy(x->kbuf + ((size_t)g * x->cap + t) * d, k + ((size_t)t * Hkv + g) * d, (size_t)d * sizeof(float));
            memcpy(x->vbuf + ((size_t)g * x->cap + t) * d, v + ((size_t)t * Hkv + g) * d, (size_t)d * sizeof(float));
        }
    skv_attn_args a = {.T = T, .H = x->H, .Hkv = Hkv, .d = d, .pos0 = 0, .S_cap = x->cap, .kv_f16 = false};
    skv_attention(out, q, x->kbuf, x->vbuf, &a);
    float *cs = x->colsum + (size_t)layer * x->H * x->cap;
    float *lr = x->lastrow ? x->lastrow + (size_t)layer * x->H * x->cap : NULL;
    int fail = 0;
    #pragma omp parallel for schedule(dynamic, 1) reduction(|:fail)
    for (int h = 0; h < x->H; h++) {
        float *p = malloc((size_t)(x->M > 0 ? x->M : 1) * sizeof(float));
        if (!p) { fail = 1; continue; }
        matched_rows(x, q, h, cs + (size_t)h * x->cap, lr ? lr + (size_t)h * x->cap : NULL, p);
        free(p);
    }
    return fail ? skv_error("cross-tokenizer calibration: out of memory for attention rows") : 0;
}

int skv_xtok_forward(skv_xtok_side *x, const int *tokens, int T, const int *pos, int M) {
    if (T < 1 || T > x->cap || M < 0 || M > T) return skv_error("cross-tokenizer calibration: %d tokens, %d matched (at most %d)", T, M, x->cap);
    for (int a = 0; a < M; a++)
        if (pos[a] < 0 || pos[a] >= T || (a && pos[a] <= pos[a - 1])) return skv_error("cross-tokenizer calibration: matched positions not ascending within the window");
    x->pos = pos; x->M = M;
    size_t sc = (size_t)x->L * x->H * x->cap;
    memset(x->colsum, 0, sc * sizeof(float));
    if (x->lastrow) memset(x->lastrow, 0, sc * sizeof(float));
    skv_state_reset(x->s);
    skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .attn = hook, .attn_ctx = x};
    return skv_forward(x->s, tokens, T, &fo);
}

int skv_xtok_pack(skv_xtok_side *x, int drop, bool normalized) {
    int n = x->M - drop;
    if (drop < 0 || n <= 0) return skv_error("cross-tokenizer calibration: no matched keys left after dropping %d sinks (%d matched)", drop, x->M);
    for (int lh = 0; lh < x->L * x->H; lh++) {
        const float *c = x->colsum + (size_t)lh * x->cap, *r = x->lastrow ? x->lastrow + (size_t)lh * x->cap : NULL;
        float *f = x->F + (size_t)lh * n, *rr = x->R ? x->R + (size_t)lh * n : NULL;
        for (int k = 0; k < n; k++) {
            int b = drop + k;
            f[k] = normalized ? c[b] / (float)(x->M - b) : c[b];
            if (rr) rr[k] = r[b];
        }
    }
    return 0;
}
