/* mapping.h: head mapping and early-stop math (method.md section 4).
 * S is a mean similarity matrix (n_llm, n_slm) with n_slm = l * h SLM heads, flat index
 * layer * h + head. */
#ifndef SKV_MAPPING_H
#define SKV_MAPPING_H
#include <stdint.h>
#include "calibrate/calib.h"
#include "runtime/format/profile.h"

/* f[i] = argmax over SLM heads j < n_cand of S(i, j); ties go to the lowest j. */
void skv_map_argmax(const float *S, int n_llm, int n_slm, int n_cand, int32_t *f);
/* Retained similarity R(s) = mean_i max_{j in SLM layers < s} S(i, j), s = 1..l: curve[s-1]. */
void skv_map_curve(const float *S, int n_llm, int l, int h, float *curve);
/* Smallest s with R(s) >= (1 - eps) R(l); l if none qualifies. */
int skv_map_choose_depth(const float *curve, int l, double eps);

/* A profile from merged calibration sums: the similarity means of every recorded metric,
 * the curve and depth of `metric` (depth capped at max_depth when > 0), the argmax maps,
 * and the mapping's split-half stability when the sums have halves (stability.h).
 * NULL + error (metric not recorded, eps outside [0, 1), no windows). */
skv_profile *skv_profile_build(const skv_calib *c, int metric, double eps, int max_depth, const char *tool);

/* Run the SLM to `depth` layers: p->depth and the runtime's map ('MAP ': argmax of the
 * mapping metric over SLM layers < depth) and its similarities. -1 + error when depth is
 * outside 1..l. */
int skv_profile_set_depth(skv_profile *p, int depth);

#endif
