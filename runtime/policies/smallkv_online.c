/* smallkv_online.c: SmallKV's online head matching (smallkv.h). Without a profile, the LLM
 * keeps its whole cache until the sequence reaches min_tokens; meanwhile its attention
 * column sums over the first W keys are added up (prefill sums, then each decode step's
 * per-head probabilities), and then every LLM head is matched to the SLM head whose
 * accumulated scores share the most top keys with it. */
#include "smallkv.h"
#include "common/util.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

skv_online *skv_online_new(int L, int H, int min_tokens, int max_tokens, int sinks) {
    skv_online *o = skv_calloc(1, sizeof *o, "online matching");
    if (!o) return NULL;
    o->L = L; o->H = H; o->W = max_tokens; o->min_tokens = min_tokens; o->sinks = sinks;
    o->llm = skv_rows_new(L, (size_t)H * max_tokens, "online matching");
    o->itmp = skv_malloc((size_t)max_tokens * sizeof(int), "online matching");
    if (!o->llm || !o->itmp) { skv_online_free(o); return NULL; }
    return o;
}

skv_online *skv_online_fork(const skv_online *a) {
    skv_online *o = skv_online_new(a->L, a->H, a->min_tokens, a->W, a->sinks);
    if (!o) return NULL;
    for (int l = 0; l < a->L; l++) memcpy(o->llm[l], a->llm[l], (size_t)a->H * a->W * sizeof(float));
    return o;
}

void skv_online_free(skv_online *o) {
    if (!o) return;
    skv_rows_free(o->llm, o->L);
    free(o->itmp);
    free(o);
}

void skv_online_add_prefill(skv_online *o, float *const *colsum, int stride, int n) {
    const int W = o->W, lim = n < W ? n : W;
    for (int l = 0; l < o->L; l++)
        for (int h = 0; h < o->H; h++)
            for (int k = 0; k < lim; k++) o->llm[l][(size_t)h * W + k] += colsum[l][(size_t)h * stride + k];
}

void skv_online_add_step(skv_online *o, int layer, int kvh, int g, const int *pos, int n_hot, const float *head_p) {
    const int W = o->W;
    for (int t = 0; t < g; t++) {
        float *row = o->llm[layer] + (size_t)(kvh * g + t) * W;
        for (int i = 0; i < n_hot; i++)
            if (pos[i] < W) row[pos[i]] += head_p[(size_t)t * n_hot + i];
    }
}

/* top-K key set (positions lo .. hi-1) of a score row as a bitmask */
static void topk_mask(const float *row, int lo, int hi, int K, int *tmp, uint64_t *mask, int words) {
    memset(mask, 0, (size_t)words * sizeof(uint64_t));
    int nc = 0;
    for (int k = lo; k < hi; k++) tmp[nc++] = k;
    int got = skv_topk(row, tmp, nc, K);
    for (int i = 0; i < got; i++) mask[tmp[i] / 64] |= 1ull << (tmp[i] % 64);
}

int skv_online_match(const skv_online *o, const skv_slm_view *v, int n, int *map) {
    const int W = o->W, hi = n < W ? n : W, lo = o->sinks < hi ? o->sinks : 0, sh = v->slm_heads;
    int K = (hi - lo) / 10;
    if (K < 1) K = 1;
    const int words = (W + 63) / 64, nslm = v->slm_layers * sh, nllm = o->L * o->H;
    uint64_t *sm = skv_calloc((size_t)nslm * words, sizeof(uint64_t), "online matching");
    uint64_t *lm = skv_calloc((size_t)words, sizeof(uint64_t), "online matching");
    if (!sm || !lm) { free(sm); free(lm); return -1; }
    for (int j = 0; j < nslm; j++)
        topk_mask(v->colsum[j / sh] + (size_t)(j % sh) * v->stride, lo, hi, K, o->itmp, sm + (size_t)j * words, words);
    for (int i = 0; i < nllm; i++) {
        topk_mask(o->llm[i / o->H] + (size_t)(i % o->H) * W, lo, hi, K, o->itmp, lm, words);
        int best = 0, bi = -1, bu = 1;
        for (int j = 0; j < nslm; j++) {
            int in = 0, un = 0;
            for (int w = 0; w < words; w++) {
                in += __builtin_popcountll(lm[w] & sm[(size_t)j * words + w]);
                un += __builtin_popcountll(lm[w] | sm[(size_t)j * words + w]);
            }
            if (bi < 0 || (long)in * bu > (long)best * un) { best = in; bu = un ? un : 1; bi = j; }
        }
        map[i] = bi;
    }
    free(sm);
    free(lm);
    return 0;
}
