/* sampling.c: argmax and temperature sampling of a logits row (sampling.h). */
#include "sampling.h"
#include <math.h>

int skv_argmax(const float *x, int V) {
    int b = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[b]) b = i;
    return b;
}

int skv_sample_logits(const float *x, int V, float temperature, unsigned long long *rng) {
    int tok = skv_argmax(x, V);
    if (temperature <= 0 || !rng) return tok;
    unsigned long long r = *rng ? *rng : 0x9E3779B97F4A7C15ULL;
    r ^= r >> 12; r ^= r << 25; r ^= r >> 27;
    *rng = r;
    /* 53 random bits of the xorshift64* output, scaled to [0, 1) */
    double u = ((r * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0), sum = 0, acc = 0;
    const float mx = x[tok];
    for (int i = 0; i < V; i++) sum += exp((x[i] - mx) / temperature);
    u *= sum;
    for (int i = 0; i < V; i++) {
        acc += exp((x[i] - mx) / temperature);
        if (acc >= u) return i;
    }
    return tok;
}
