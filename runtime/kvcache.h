/* kvcache.h: the LLM's two-tier KV cache for the compressed runtime.
 *
 * A *lane* is one (layer, KV head): lane = layer * Hkv + kvh. Per lane:
 *   hot tier   variable-length sets of slots, in one flat arena per layer:
 *                KV region: K (cap_kv, d) + V (cap_kv, d) + pos (cap_kv)   critical/sink/recent
 *                V  region: V (cap_v, d)  + pos (cap_v)                    marginal (V only)
 *              lane j of layer l owns slots off_kv[j] .. off_kv[j]+cap_kv[j]-1 of the
 *              layer's KV arena (same for V-only). Used slots are dense at the front
 *              (n_kv, n_v); order inside a lane is arbitrary. Eviction frees a slot by
 *              moving the lane's last slot into it (one slot copy, never the whole cache).
 *   cold tier  every K/V the LLM produced, per layer (Hkv, cold_cap, d), append-only,
 *              keys rotated: the same layout skv_attention reads, so an exact (prefill)
 *              attention can run straight over it. Restore = copy one token's K/V from
 *              cold into a hot slot.
 * Costs: a KV slot costs 1 token, a V-only slot 1/2 (method.md section 1).
 * Element type: fp32 or fp16 (both tiers). Capacities grow on demand with a little
 * headroom (about 1/8), so the hot arena stays about the size of the budget. */
#ifndef SKV_KVCACHE_H
#define SKV_KVCACHE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int L, Hkv, d;
    bool f16;
    size_t esz;              /* bytes per element: 2 or 4 */
    /* hot tier, per layer l: flat arenas */
    void **hk, **hv;         /* [L] -> (sum_j cap_kv, d) */
    void **hm;               /* [L] -> (sum_j cap_v, d)   V of V-only slots */
    int **pos_kv, **pos_v;   /* [L] -> positions of each slot */
    int *off_kv, *off_v;     /* [L*Hkv] slot offset of a lane within its layer's arena */
    int *cap_kv, *cap_v;     /* [L*Hkv] capacity in slots */
    int *n_kv, *n_v;         /* [L*Hkv] used slots */
    /* cold tier */
    int cold_cap;            /* tokens per lane allocated */
    int cold_n;              /* tokens stored (positions 0 .. cold_n-1) */
    void **ck, **cv;         /* [L] -> (Hkv, cold_cap, d) */
    bool no_headroom;        /* grow capacities to exactly what is asked (tests) */
    /* scratch for skv_kvcache_apply: stamps per position */
    int *mark; int mark_cap; int stamp;
} skv_kvcache;

typedef struct {
    size_t hot_used, hot_cap;     /* bytes of used / allocated hot slots (K, V, positions excluded) */
    size_t cold_used, cold_cap;   /* bytes of stored / allocated cold K+V */
    double hot_tokens;            /* sum over lanes of n_kv + n_v / 2 */
} skv_kv_bytes;

skv_kvcache *skv_kvcache_new(int L, int Hkv, int d, bool f16);
void skv_kvcache_free(skv_kvcache *c);
/* Deep copy (hot and cold). NULL + error. */
skv_kvcache *skv_kvcache_clone(const skv_kvcache *c);

/* ---- cold tier ---- */
/* Make room for n tokens per lane (doubling). -1 + error. */
int skv_kvcache_cold_reserve(skv_kvcache *c, int n);
/* Store T tokens of one layer at positions pos0 .. : k, v (T, Hkv, d). Needs cold_cap.
 * Sets cold_n = max(cold_n, pos0 + T). -1 + error. */
int skv_kvcache_cold_write(skv_kvcache *c, int layer, int pos0, int T, const float *k, const float *v);
/* Pointer to the cold K / V row of a token (element type per c->f16). */
const void *skv_kvcache_cold_k(const skv_kvcache *c, int layer, int kvh, int pos);
const void *skv_kvcache_cold_v(const skv_kvcache *c, int layer, int kvh, int pos);

/* ---- hot tier ---- */
static inline int skv_lane(const skv_kvcache *c, int layer, int kvh) { return layer * c->Hkv + kvh; }
/* Lane views (element pointers to the lane's first slot). */
void *skv_kvcache_hot_k(const skv_kvcache *c, int layer, int kvh);
void *skv_kvcache_hot_v(const skv_kvcache *c, int layer, int kvh);
void *skv_kvcache_hot_m(const skv_kvcache *c, int layer, int kvh);
int *skv_kvcache_hot_pos_kv(const skv_kvcache *c, int layer, int kvh);
int *skv_kvcache_hot_pos_v(const skv_kvcache *c, int layer, int kvh);

/* Grow the layer's lanes so that lane kvh holds need_kv[kvh] KV and need_v[kvh] V-only
 * slots (Hkv entries each). Relayouts the layer's arena only when a lane is short.
 * -1 + error (out of memory: the cache is unchanged). */
int skv_kvcache_hot_reserve(skv_kvcache *c, int layer, const int *need_kv, const int *need_v);

/* Make the lane's hot set exactly: K+V for positions kv_pos[0..n_kv), V only for
 * v_pos[0..n_v) (disjoint, each < cold_n, no duplicates). Slots whose position is no
 * longer wanted are freed; wanted positions not present are restored from cold.
 * Needs the capacity (skv_kvcache_hot_reserve). Returns the number of restored rows
 * (K+V counts 1, V-only counts 1), -1 + error on bad input. */
int skv_kvcache_apply(skv_kvcache *c, int layer, int kvh, const int *kv_pos, int n_kv,
                      const int *v_pos, int n_v);

/* Append one token (already in cold) to the lane's KV region; needs capacity. */
int skv_kvcache_hot_append(skv_kvcache *c, int layer, int kvh, int pos);

/* Byte accounting of both tiers. */
void skv_kvcache_bytes(const skv_kvcache *c, skv_kv_bytes *b);

/* Row conversions for the element type. */
void skv_kv_store_row(void *dst, const float *src, int d, bool f16);
void skv_kv_load_row(float *dst, const void *src, int d, bool f16);

#endif
