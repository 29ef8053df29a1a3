/* profile.h: the SmallKV profile (method.md section 4): which SLM head stands in for each
 * LLM head, how deep the SLM must run, and the similarity evidence behind both.
 *
 * File (container: secfile.h; full layout: profiles/FORMAT.md): magic "SKVPROF\0",
 * version SKV_PROFILE_VERSION, JSON header (model fingerprints, calibration metadata,
 * metric, eps, depth), zstd sections
 *   'MAP ' int32 (n_llm)                 f(i) restricted to SLM layers < depth (runtime uses this)
 *   'MAPF' int32 (n_llm)                 f(i) over all SLM layers
 *   'MSIM' float32 (n_metrics, n_llm)    S_m(i, f(i)) for every recorded metric (restricted map)
 *   'CURV' float32 (l)                   R(s), s = 1..l, for the mapping metric
 *   'SIMM' float32 (n_metrics, n_llm, n_slm)  mean similarity per metric
 *   'SSTD' float32 (n_metrics, n_llm, n_slm)  standard deviation over windows */
#ifndef SKV_PROFILE_H
#define SKV_PROFILE_H
#include <stdint.h>
#include <stdio.h>
#include "runtime/format/meta.h"

#define SKV_PROFILE_VERSION 1

/* How much the mapping depends on the sample (calibrate/stability.h): the two halves of the
 * calibration windows (even, odd) mapped on their own at the profile's depth. */
typedef struct {
    int present;                /* 0: not measured (calibration without halves) */
    int metric, depth;
    int64_t windows_even, windows_odd;
    double agree;               /* share of LLM heads mapped alike by both halves */
    double loss;                /* relative similarity lost using one half's map on the other */
} skv_profile_stability;

/* The depth chosen by measured fidelity (`smallkv eval depth --write-profile`): SmallKV run
 * at several SLM depths against the full cache, each depth with its own mapping. */
#define SKV_DEPTH_ROWS_MAX 64
typedef struct {
    int depth;
    double kl_mean, top1;       /* over the units, at `budget` */
    double slm_ms;              /* SLM milliseconds per decode step (< 0: not timed) */
} skv_depth_row;

typedef struct {
    int n;                      /* rows; 0: depth not chosen by fidelity */
    skv_depth_row rows[SKV_DEPTH_ROWS_MAX];
    double budget, max_kl_rise; /* chosen: smallest depth with KL <= KL(deepest) * (1 + rise) */
    int units, tokens, prefill; /* documents, their length and prefill */
    int chosen;
} skv_profile_depth_evidence;

typedef struct {
    char *path;                 /* file it was loaded from / written to (may be NULL) */
    skv_model_fp slm, llm;
    skv_calib_settings calib;   /* calibration settings: window, K, sinks, corpora + sha256 */
    int64_t windows, tokens;    /* calibration windows and tokens behind the means */
    char tool[64];
    int metric;                 /* mapping metric (skv_metric) */
    double eps;
    int depth;                  /* SLM layers to run (after the --max-depth cap) */
    int depth_eps;              /* smallest s with R(s) >= (1 - eps) R(l), before the cap */
    int max_depth;              /* cap asked for, 0 = none */
    int n_llm, n_slm;           /* L*H, l*h */
    int n_metrics;
    int metric_ids[SKV_METRIC_COUNT];
    int32_t *map;               /* (n_llm) */
    int32_t *map_full;          /* (n_llm) */
    float *map_sim;             /* (n_metrics, n_llm) */
    float *curve;               /* (slm.n_layer) */
    float *sim;                 /* (n_metrics, n_llm, n_slm) */
    float *sim_std;             /* (n_metrics, n_llm, n_slm) */
    skv_profile_stability stability;   /* header field "stability", optional */
    skv_profile_depth_evidence depth_ev;   /* header field "depth_evidence", optional */
} skv_profile;

/* Allocate a profile's arrays for its n_metrics, n_llm, n_slm and slm.n_layer. -1 + error. */
int skv_profile_alloc_arrays(skv_profile *p);
int skv_profile_write(skv_profile *p, const char *path);
skv_profile *skv_profile_load(const char *path);
void skv_profile_free(skv_profile *p);

/* 0 if the profile was made for these models; else -1 + error naming the model and field. */
int skv_profile_check_models(const skv_profile *p, const skv_model_fp *slm, const skv_model_fp *llm);
/* Index of metric m in p's metric list, -1 if absent; mean matrix of metric m or NULL. */
int skv_profile_metric_index(const skv_profile *p, int m);
const float *skv_profile_sim(const skv_profile *p, int m);
/* Mean of S_m(i, map(i)) over LLM heads. NaN if the metric is absent. */
double skv_profile_mean_matched(const skv_profile *p, int m);

/* `smallkv profile show`: human-readable dump. 0, or -1 + error if it does not load. */
int skv_profile_print(const char *path, FILE *out);
void skv_profile_print_loaded(const skv_profile *p, FILE *out);

#endif
