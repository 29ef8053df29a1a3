/* mapping.c: argmax head mapping, the retained-similarity curve R(s), depth choice, and a
 * profile built from them out of merged calibration sums. */
#include "mapping.h"
#include "calibrate/stability.h"
#include "common/util.h"
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

/* ---- a profile from calibration sums ---- */

static void fill_map_sim(skv_profile *p) {
    for (int mi = 0; mi < p->n_metrics; mi++)
        for (int i = 0; i < p->n_llm; i++)
            p->map_sim[(size_t)mi * p->n_llm + i] = p->sim[((size_t)mi * p->n_llm + i) * p->n_slm + p->map[i]];
}

int skv_profile_set_depth(skv_profile *p, int depth) {
    if (depth < 1 || depth > p->slm.n_layer) return skv_error("depth %d outside 1..%d SLM layers", depth, p->slm.n_layer);
    const float *S = skv_profile_sim(p, p->metric);
    if (!S) return skv_error("profile has no '%s' similarities", skv_metric_name(p->metric));
    p->depth = depth;
    skv_map_argmax(S, p->n_llm, p->n_slm, depth * p->slm.n_head, p->map);
    fill_map_sim(p);
    return 0;
}

skv_profile *skv_profile_build(const skv_calib *c, int metric, double eps, int max_depth, const char *tool) {
    if (skv_calib_metric_index(c, metric) < 0) {
        skv_error("calibration has no '%s' similarities (recorded:%s%s%s)", skv_metric_name(metric),
                  c->set.metrics & 1 ? " jaccard" : "", c->set.metrics & 2 ? " cosine" : "", c->set.metrics & 4 ? " rowcos" : "");
        return NULL;
    }
    if (!(eps >= 0 && eps < 1)) { skv_error("eps %g must be in [0, 1)", eps); return NULL; }
    if (max_depth < 0) { skv_error("max depth %d must be >= 0", max_depth); return NULL; }
    if (c->n_windows <= 0) { skv_error("calibration has no windows"); return NULL; }
    skv_profile *p = skv_calloc(1, sizeof *p, "profile");
    if (!p) return NULL;
    p->slm = c->slm; p->llm = c->llm; p->calib = c->set;
    p->windows = c->n_windows; p->tokens = c->tokens;
    snprintf(p->tool, sizeof p->tool, "%s", tool ? tool : "");
    p->metric = metric; p->eps = eps; p->max_depth = max_depth;
    p->n_llm = c->n_llm; p->n_slm = c->n_slm;
    p->n_metrics = c->n_metrics;
    memcpy(p->metric_ids, c->metric_ids, sizeof p->metric_ids);
    if (skv_profile_alloc_arrays(p)) { skv_profile_free(p); return NULL; }
    size_t mat = (size_t)p->n_llm * p->n_slm;
    for (int mi = 0; mi < p->n_metrics; mi++)
        skv_calib_mean(c, p->metric_ids[mi], p->sim + mi * mat, p->sim_std + mi * mat);
    const float *S = skv_profile_sim(p, metric);
    int l = p->slm.n_layer, h = p->slm.n_head;
    skv_map_curve(S, p->n_llm, l, h, p->curve);
    p->depth_eps = skv_map_choose_depth(p->curve, l, eps);
    p->depth = (max_depth > 0 && max_depth < p->depth_eps) ? max_depth : p->depth_eps;
    skv_map_argmax(S, p->n_llm, p->n_slm, p->n_slm, p->map_full);
    skv_map_argmax(S, p->n_llm, p->n_slm, p->depth * h, p->map);
    fill_map_sim(p);
    /* halves with a window each: how much the mapping depends on the sample */
    if (c->half && skv_calib_odd_windows(c) > 0 && skv_calib_odd_windows(c) < c->n_windows &&
        skv_map_stability(c, metric, p->depth, &p->stability)) {
        skv_profile_free(p);
        return NULL;
    }
    return p;
}
