/* calib.h: the calibration accumulator (method.md section 3) and its file format.
 *
 * For every window the calibrate tool hands over the per-head score vectors of both
 * models; the accumulator adds every (LLM head i, SLM head j) pair's similarity for each
 * metric. Sums are kept in fixed point (int64 of round(v * 2^SKV_CALIB_FIX_BITS), v in
 * [-1, 1], plus the same for v^2), so partial runs merge exactly: shards added in any
 * order give bit-identical sums. Also kept per window: for each metric and LLM layer, the
 * mean over that layer's heads of the best-matching SLM head's similarity (`wstat`).
 *
 * File (see secfile.h for the container): magic "SKVCALIB", version SKV_CALIB_VERSION,
 * JSON header (models, settings, windows done, tokens, shards), sections
 *   'SUMS' int64 (n_metrics, 2, n_llm, n_slm): [m][0] = sum, [m][1] = sum of squares
 *   'WSTA' float32 (n_windows, n_metrics, L_llm), rows in ascending window order;
 *   'HALF' int64 (n_metrics, n_llm, n_slm): the sums over the odd-numbered windows alone
 *          (optional: files written before it lack it). With SUMS it splits the data into
 *          two independent halves (even and odd windows) for the mapping's stability
 *          (calibrate/stability.h).
 * Layout details: profiles/FORMAT.md. */
#ifndef SKV_CALIB_H
#define SKV_CALIB_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "runtime/format/meta.h"

#define SKV_CALIB_VERSION 1
#define SKV_CALIB_FIX_BITS 40
#define SKV_CALIB_ALIGN_METHOD "byte-span"   /* align.h */

/* Cross-tokenizer runs only (header object "alignment"; absent, and present = false, when
 * both models share one tokenizer): token counts over all windows, integers so shards
 * merge exactly. matched <= both token counts. */
typedef struct {
    bool present;
    int64_t llm_tokens, slm_tokens, matched;
} skv_calib_align;

typedef struct {
    skv_model_fp slm, llm;
    skv_calib_settings set;
    char tool[64];            /* writer's name and version, informational */
    int n_llm, n_slm;         /* heads: L*H and l*h */
    int n_metrics;
    int metric_ids[SKV_METRIC_COUNT];   /* enabled metrics in ascending id order */
    int64_t *sums;            /* (n_metrics, 2, n_llm, n_slm) fixed point */
    int64_t *half;            /* (n_metrics, n_llm, n_slm) fixed point sums over the odd
                                 windows, or NULL (a file without 'HALF', or a merge with one) */
    int64_t n_windows;
    int64_t cap_windows;
    int32_t *windows;         /* (n_windows) window indices done (any order in memory) */
    float *wstat;             /* (n_windows, n_metrics, L_llm) */
    int64_t tokens;           /* tokens processed (both models see the same tokens; with
                                 two tokenizers: the LLM's) */
    skv_calib_align align;    /* how the two tokenizations aligned (cross-tokenizer only) */
    int n_shards;
    int32_t *shards;          /* ascending shard indices merged into this accumulator */
} skv_calib;

/* New empty accumulator for shard `shard_index` of set->shard_count. NULL + error. */
skv_calib *skv_calib_new(const skv_model_fp *slm, const skv_model_fp *llm,
                         const skv_calib_settings *set, int shard_index, const char *tool);
void skv_calib_free(skv_calib *c);

/* Add one window. F_llm (n_llm, n_keys), F_slm (n_slm, n_keys): accumulated scores,
 * sinks dropped. row_llm/row_slm: same shapes, last-query attention rows (needed only
 * when ROWCOS is enabled, else may be NULL). Refuses a window index already present. */
int skv_calib_add_window(skv_calib *c, int window, int64_t tokens, int n_keys,
                         const float *F_llm, const float *F_slm,
                         const float *row_llm, const float *row_slm);
/* Lower level: add precomputed per-pair values S (n_metrics, n_llm, n_slm), each in [-1, 1]. */
int skv_calib_add_values(skv_calib *c, int window, int64_t tokens, const double *S);

bool skv_calib_has_window(const skv_calib *c, int window);
/* Windows with an odd / even index among those added. */
int64_t skv_calib_odd_windows(const skv_calib *c);
/* Mean of metric m over the even (odd = false) or odd (odd = true) windows alone: out
 * (n_llm, n_slm). -1 + error when the file has no halves, the metric is absent or that
 * half has no window. */
int skv_calib_half_mean(const skv_calib *c, int m, bool odd, float *mean);

/* Check that b can be merged into a: same models and settings. 0 or -1 + error. */
int skv_calib_compatible(const skv_calib *a, const skv_calib *b, const char *a_name, const char *b_name);
/* Add src into dst (models/settings equal, windows disjoint). dst is unchanged on error. */
int skv_calib_merge(skv_calib *dst, const skv_calib *src, const char *dst_name, const char *src_name);

int skv_calib_write(const skv_calib *c, const char *path);
skv_calib *skv_calib_read(const char *path);

/* Index of metric m in this file's metric list, -1 if not recorded. */
int skv_calib_metric_index(const skv_calib *c, int m);
/* Mean and standard deviation (population) of metric m: out (n_llm, n_slm). -1 if absent. */
int skv_calib_mean(const skv_calib *c, int m, float *mean, float *std);
/* One-paragraph human summary. */
void skv_calib_print_summary(const skv_calib *c, const char *path, FILE *out);

#endif
