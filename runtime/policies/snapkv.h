/* snapkv.h: what SnapKV shares with PyramidKV and Ada-KV (snapkv.c): the options, the
 * pooled scores of the prompt's last-window queries (generated tokens score +inf), and the
 * per-lane budget share the two others set. */
#ifndef SKV_POLICY_SNAPKV_H
#define SKV_POLICY_SNAPKV_H
#include "policy.h"

typedef struct {
    int pool;             /* max-pool kernel (padding pool/2) */
    int reduce;           /* skv_reduce */
    int sinks, window;
    float beta;           /* PyramidKV: top layer gets 1/beta of the mean budget */
    float alpha;          /* Ada-KV: floor blend */
} skv_snap_opts;

#define SKV_OPT_POOL {"pool", NULL, SKV_OPT_INT, offsetof(skv_snap_opts, pool), 7, 1, 1023, NULL, 0, 7, \
                      "max-pool kernel over the window's scores"}

typedef struct {
    skv_lanescore score;
    int *filled;          /* [lanes] positions < filled have a score */
    double *share;        /* [lanes] multiplier of (budget - window), mean 1 */
} skv_snap_state;

/* Fill p's state and hooks as SnapKV (PyramidKV / Ada-KV then adjust). */
int skv_snap_init(skv_policy *p);
/* Pool the obs sums of one layer into per-lane scores (positions < n - window). */
int skv_snap_prefill_scores(skv_policy *p, const skv_prefill_info *pi);

#endif
