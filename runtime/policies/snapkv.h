/* snapkv.h: what SnapKV shares with PyramidKV and Ada-KV (snapkv.c): the options, the
 * pooled scores of the prompt's last-window queries (generated tokens score +inf), the
 * per-lane budget share the two others set, and what decoding does (decode=keep|evict). */
#ifndef SKV_POLICY_SNAPKV_H
#define SKV_POLICY_SNAPKV_H
#include "policy.h"

typedef struct {
    int pool;             /* max-pool kernel (padding pool/2) */
    int reduce;           /* skv_reduce */
    int sinks, window;
    float beta;           /* PyramidKV: top layer gets 1/beta of the mean budget */
    float alpha;          /* Ada-KV: floor blend */
    int decode;           /* skv_snap_decode: what decoding does with the budget */
} skv_snap_opts;

/* SnapKV as published compresses the prompt once and keeps every generated token (keep: the
 * hot tier grows by one token per step); evict holds each lane to its budget while decoding
 * (this runtime's behaviour before keep existed: labels of those records omit the option). */
typedef enum { SKV_SNAP_KEEP = 0, SKV_SNAP_EVICT = 1 } skv_snap_decode;
extern const char *const skv_snap_decode_names[];
#define SKV_OPT_DECODE {"decode", NULL, SKV_OPT_ENUM, offsetof(skv_snap_opts, decode), SKV_SNAP_KEEP, 0, 0, \
                        skv_snap_decode_names, 0, SKV_SNAP_EVICT, \
                        "keep: the prompt compressed once, every generated token kept (as published); " \
                        "evict: hold the budget while decoding, dropping the lowest-scored tokens"}

#define SKV_OPT_POOL {"pool", NULL, SKV_OPT_INT, offsetof(skv_snap_opts, pool), 7, 1, 1023, NULL, 0, 7, \
                      "max-pool kernel over the window's scores"}

typedef struct {
    skv_lanescore score;
    int *filled;          /* [lanes] positions < filled have a score */
    double *share;        /* [lanes] multiplier of (budget - window), mean 1 */
    unsigned char *fresh; /* [lanes] a prefill just scored the lane: its next selection compresses */
} skv_snap_state;

/* Fill p's state and hooks as SnapKV (PyramidKV / Ada-KV then adjust). */
int skv_snap_init(skv_policy *p);
/* Pool the obs sums of one layer into per-lane scores (positions < n - window). */
int skv_snap_prefill_scores(skv_policy *p, const skv_prefill_info *pi);

#endif
