/* stability.h: how far a profile's head mapping depends on the calibration sample.
 *
 * The calibration data splits into two independent halves, the even- and the odd-numbered
 * windows (calib.h, section 'HALF'). Each half gives its own mean similarity matrix and so
 * its own mapping at the profile's depth. Two figures come out:
 *   agree  share of LLM heads whose SLM head is the same in both halves;
 *   loss   the similarity given up when one half's mapping is used on the other half's
 *          data, relative to that half's own best: mean_i (A(i, fA(i)) - A(i, fB(i))) /
 *          mean_i A(i, fA(i)), the larger of the two directions.
 * A low `agree` with a small `loss` means near-ties (several SLM heads fit a head about
 * equally well: either choice serves); a large `loss` means the sample is too small. */
#ifndef SKV_STABILITY_H
#define SKV_STABILITY_H
#include "calibrate/calib.h"
#include "runtime/format/profile.h"

/* The stability of metric m's mapping at `depth` SLM layers into *out (out->present set).
 * -1 + error when the calibration has no halves, lacks the metric, or a half is empty. */
int skv_map_stability(const skv_calib *c, int m, int depth, skv_profile_stability *out);

#endif
