/* kvmirror.h: keeps a mirror of the hot tier (kvcache.h) up to date from the cache's
 * slot-write log, e.g. the GPU copy of the hot arenas in the CUDA session
 * (runtime/backend/session_cuda.c), or a second host copy in tests/test_kvlog.c.
 *
 * The mirror holds, per layer, the arrays of the cache's hot arena at the same slot
 * indices: K and V (sum_j cap_kv slots of d elements), mult (sum_j cap_kv ints) and the
 * V-only rows M (sum_j cap_v slots). A sync reads the log (kvcache.h) and calls the sink:
 *   resize(layer, region, slots)   the layer's KV (region 0) or V-only (region 1) arrays
 *                                  must hold `slots` slots now (relayout; contents may go)
 *   row(layer, array, slot, src, bytes)   copy one row of the host cache into the mirror
 * Rows always come from the cache as it is at sync time: a sync after the changes of a
 * step (or of several) makes every used slot of the mirror equal to the cache's, byte for
 * byte; unused slots are left alone. A layer whose region was relaid out (or a lost log, or
 * the first sync) is resized and taken whole. The log is emptied on success. */
#ifndef SKV_KVMIRROR_H
#define SKV_KVMIRROR_H
#include <stddef.h>
#include "kvcache.h"

enum { SKV_MIRROR_K = 0, SKV_MIRROR_V = 1, SKV_MIRROR_MULT = 2, SKV_MIRROR_M = 3 };

typedef struct {
    int (*resize)(void *ctx, int layer, int region, size_t slots);
    int (*row)(void *ctx, int layer, int array, size_t slot, const void *src, size_t bytes);
    void *ctx;
} skv_kvmirror_sink;

/* Bring the mirror up to date (the log must be enabled). Returns the number of rows
 * copied, or -1 + error (from the sink; the log is then marked lost so that the next sync
 * takes everything). */
long skv_kvmirror_sync(skv_kvcache *c, const skv_kvmirror_sink *sink);

/* Slots of a layer's KV (region 0) or V-only (region 1) arena: sum of the lanes' capacities. */
size_t skv_kvmirror_slots(const skv_kvcache *c, int layer, int region);

#endif
