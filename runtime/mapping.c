/* mapping.c: argmax head mapping, the retained-similarity curve R(s), depth choice. */
#include "mapping.h"
#include <stddef.h>

void skv_map_argmax(const float *S, int n_llm, int n_slm, int n_cand, int32_t *f) {
    for (int i = 0; i < n_llm; i++) {
        const float *row = S + (size_t)i * n_slm;   /* (n_slm) */
        int best = 0;
        for (int j = 1; j < n_cand; j++)
            if (row[j] > row[best]) best = j;      /* strict: ties keep the lower j */
        f[i] = best;
    }
}

void skv_map_curve(const float *S, int n_llm, int l, int h, float *curve) {
    for (int s = 1; s <= l; s++) {
        double acc = 0;
        for (int i = 0; i < n_llm; i++) {
            const float *row = S + (size_t)i * l * h;
            float best = row[0];
            for (int j = 1; j < s * h; j++) if (row[j] > best) best = row[j];
            acc += best;
        }
        curve[s - 1] = (float)(acc / n_llm);
    }
}

int skv_map_choose_depth(const float *curve, int l, double eps) {
    double target = (1.0 - eps) * (double)curve[l - 1];
    for (int s = 1; s <= l; s++)
        if ((double)curve[s - 1] >= target) return s;
    return l;
}
