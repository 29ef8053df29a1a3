/* sample.c: the sampler for requests that ask for more than a temperature: logit_bias,
 * presence and frequency penalties, top-k, top-p and min-p, a mask of allowed tokens (JSON
 * mode), over a session's logits
 * (smallkv_logits). The library samples with a temperature alone (smallkv_sample), so a
 * request that asks for nothing more keeps the library's own tokens. The filters follow
 * the order of Hugging Face's samplers: temperature, top-k, top-p (of what top-k kept),
 * min-p (relative to the top token). Engine thread only. */
#include "serve.h"
#include <math.h>
#include <stdlib.h>

bool serve_sampling_plain(const serve_params *p) {
    return p->n_bias == 0 && p->presence == 0 && p->frequency == 0 && p->top_k <= 0 && p->top_p >= 1 && p->min_p <= 0;
}

/* xorshift64*, 53 bits in [0, 1) */
static double uniform(unsigned long long *rng) {
    unsigned long long r = *rng ? *rng : 0x9E3779B97F4A7C15ULL;
    r ^= r >> 12; r ^= r << 25; r ^= r >> 27;
    *rng = r;
    return ((r * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

/* heaviest first; equal weights by token id, so a seed gives the same tokens every time */
static int by_weight(const void *a, const void *b) {
    const serve_cand *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int serve_sample(const float *logits, int V, const serve_params *p, const int *counts, serve_cand *c,
                 unsigned long long *rng) {
    return serve_sample_masked(logits, V, p, counts, NULL, c, rng);
}

int serve_sample_masked(const float *logits, int V, const serve_params *p, const int *counts,
                        const unsigned char *allowed, serve_cand *c, unsigned long long *rng) {
    for (int i = 0; i < V; i++) {
        float x = logits[i];
        if (counts && counts[i]) x -= (float)counts[i] * p->frequency + p->presence;
        c[i].w = x;
        c[i].id = i;
    }
    for (int b = 0; b < p->n_bias; b++) c[p->bias_id[b]].w += p->bias[b];
    if (allowed) {   /* only the allowed candidates, in id order, from here on */
        int k = 0;
        for (int i = 0; i < V; i++)
            if (allowed[i]) c[k++] = c[i];
        if (k == 0) return -1;
        V = k;
    }
    int best = 0;
    for (int i = 1; i < V; i++) if (c[i].w > c[best].w) best = i;
    if (p->temperature <= 0) return c[best].id;
    /* weights relative to the top token's (1) and their sum */
    const float top = c[best].w;
    double z = 0;
    for (int i = 0; i < V; i++) z += (c[i].w = expf((c[i].w - top) / p->temperature));
    int n = V;
    if (p->top_k > 0 || p->top_p < 1 || p->min_p > 0) {
        /* every filter keeps a run of the heaviest tokens: gather those at or above a
         * threshold (in place, the rest behind them), lowered until the gathered run holds
         * whatever the filters keep, and sort only that run */
        float thr = p->top_k <= 0 && p->top_p >= 1 ? p->min_p : 1.0f / 1024;
        for (;;) {
            double mass = 0;
            n = 0;
            for (int i = 0; i < V; i++) {
                if (c[i].w < thr) continue;
                mass += c[i].w;
                serve_cand t = c[n]; c[n] = c[i]; c[i] = t;
                n++;
            }
            if (thr <= 0 || (p->top_k > 0 ? n >= p->top_k : p->top_p >= 1 || mass >= p->top_p * z)) break;
            thr = thr > 1e-30f ? thr / 64 : 0;
        }
        qsort(c, (size_t)n, sizeof *c, by_weight);
        if (p->top_k > 0 && n > p->top_k) n = p->top_k;
        double zk = z;
        if (p->top_k > 0) {
            zk = 0;
            for (int j = 0; j < n; j++) zk += c[j].w;
        }
        if (p->top_p < 1) {
            double cum = 0;
            for (int j = 0; j < n; j++)
                if ((cum += c[j].w) >= p->top_p * zk) { n = j + 1; break; }
        }
        if (p->min_p > 0) {
            int j = 1;   /* the top token (weight 1) always stays */
            while (j < n && c[j].w >= p->min_p) j++;
            n = j;
        }
    }
    double sum = 0, acc = 0;
    for (int j = 0; j < n; j++) sum += c[j].w;
    const double u = uniform(rng) * sum;
    for (int j = 0; j < n; j++)
        if ((acc += c[j].w) > u) return c[j].id;
    return c[n - 1].id;
}
