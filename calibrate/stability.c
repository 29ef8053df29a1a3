/* stability.c: split-half agreement and loss of a head mapping (stability.h). */
#include "stability.h"
#include "calibrate/mapping.h"
#include "common/util.h"
#include <stdlib.h>

/* mean_i (S(i, fs(i)) - S(i, fo(i))) / mean_i S(i, fs(i)): what S loses under fo */
static double rel_loss(const float *S, int n_llm, int n_slm, const int32_t *fs, const int32_t *fo) {
    double best = 0, lost = 0;
    for (int i = 0; i < n_llm; i++) {
        const float *row = S + (size_t)i * n_slm;   /* (n_slm) */
        best += row[fs[i]];
        lost += row[fs[i]] - row[fo[i]];
    }
    return best > 0 ? lost / best : 0.0;
}

int skv_map_stability(const skv_calib *c, int m, int depth, skv_profile_stability *out) {
    out->present = 0;
    int h = c->slm.n_head;
    if (depth < 1 || depth > c->slm.n_layer) return skv_error("stability: depth %d outside 1..%d", depth, c->slm.n_layer);
    size_t mat = (size_t)c->n_llm * c->n_slm;
    float *A = skv_malloc(mat * sizeof *A, "half means"), *B = skv_malloc(mat * sizeof *B, "half means");
    int32_t *fa = skv_malloc((size_t)c->n_llm * sizeof *fa, "half map"), *fb = skv_malloc((size_t)c->n_llm * sizeof *fb, "half map");
    int rc = -1;
    if (!A || !B || !fa || !fb) goto done;
    if (skv_calib_half_mean(c, m, false, A) || skv_calib_half_mean(c, m, true, B)) goto done;
    skv_map_argmax(A, c->n_llm, c->n_slm, depth * h, fa);
    skv_map_argmax(B, c->n_llm, c->n_slm, depth * h, fb);
    int same = 0;
    for (int i = 0; i < c->n_llm; i++) same += fa[i] == fb[i];
    double lab = rel_loss(A, c->n_llm, c->n_slm, fa, fb), lba = rel_loss(B, c->n_llm, c->n_slm, fb, fa);
    out->metric = m;
    out->depth = depth;
    out->windows_odd = skv_calib_odd_windows(c);
    out->windows_even = c->n_windows - out->windows_odd;
    out->agree = (double)same / c->n_llm;
    out->loss = lab > lba ? lab : lba;
    out->present = 1;
    rc = 0;
done:
    free(A); free(B); free(fa); free(fb);
    return rc;
}
