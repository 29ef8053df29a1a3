/* sampling.c: argmax, temperature sampling of a logits row, and speculative sampling's
 * accept / resample rule (sampling.h). */
#include "sampling.h"
#include <math.h>

double skv_uniform(unsigned long long *rng) {
    unsigned long long r = *rng ? *rng : 0x9E3779B97F4A7C15ULL;
    r ^= r >> 12; r ^= r << 25; r ^= r >> 27;
    *rng = r;
    /* 53 random bits of the xorshift64* output, scaled to [0, 1) */
    return ((r * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

int skv_sample_logits(const float *x, int V, float temperature, unsigned long long *rng) {
    int tok = skv_argmax(x, V);
    if (temperature <= 0 || !rng) return tok;
    double u = skv_uniform(rng), sum = 0, acc = 0;
    const float mx = x[tok];
    for (int i = 0; i < V; i++) sum += exp((x[i] - mx) / temperature);
    u *= sum;
    for (int i = 0; i < V; i++) {
        acc += exp((x[i] - mx) / temperature);
        if (acc >= u) return i;
    }
    return tok;
}

void skv_softmax_temp(const float *x, int V, float temperature, float *p) {
    const float mx = x[skv_argmax(x, V)];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += (p[i] = (float)exp((x[i] - mx) / temperature));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++) p[i] *= inv;
}

int skv_sample_probs(const float *p, int V, unsigned long long *rng) {
    double sum = 0, acc = 0;
    for (int i = 0; i < V; i++) sum += p[i];
    const double u = skv_uniform(rng) * sum;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (p[i] <= 0) continue;
        last = i;
        acc += p[i];
        if (acc > u) return i;
    }
    return last;   /* rounding at the top end: the last token with mass */
}

int skv_spec_accept(float *p, const float *q, int V, int tok, unsigned long long *rng, int *accepted) {
    /* accept with probability min(1, p/q); q[tok] > 0 because tok was drawn from q */
    const double u = skv_uniform(rng);
    if (q[tok] <= 0 || u * q[tok] < p[tok]) {
        *accepted = 1;
        return tok;
    }
    *accepted = 0;
    /* rejected: a draw from the residual max(0, p - q), renormalised; it is empty only
     * when p == q, where a rejection cannot happen, so p itself stands in for rounding */
    double mass = 0;
    for (int i = 0; i < V; i++) {
        const float r = p[i] - q[i];
        mass += (p[i] = r > 0 ? r : 0);
    }
    if (!(mass > 0)) { p[tok] = 1; }
    return skv_sample_probs(p, V, rng);
}
