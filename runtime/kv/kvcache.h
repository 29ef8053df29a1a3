/* kvcache.h: the LLM's two-tier KV cache for the compressed runtime.
 *
 * A *lane* is one (layer, KV head): lane = layer * Hkv + kvh. Per lane:
 *   hot tier   variable-length sets of slots, in one flat arena per layer:
 *                KV region: K (cap_kv, d) + V (cap_kv, d) + pos (cap_kv) + mult (cap_kv)
 *                           critical/sink/recent (EMS: merged class centres)
 *                V  region: V (cap_v, d)  + pos (cap_v)                    marginal (V only)
 *              lane j of layer l owns slots off_kv[j] .. off_kv[j]+cap_kv[j]-1 of the
 *              layer's KV arena (same for V-only). Used slots are dense at the front
 *              (n_kv, n_v); order inside a lane is arbitrary. Eviction frees a slot by
 *              moving the lane's last slot into it (one slot copy, never the whole cache).
 *              mult[s] (default 1) is how many tokens a KV slot stands for (EMS merging):
 *              attention gives the slot mult[s] places in the softmax.
 *   cold tier  (only for policies that restore: SmallKV) every K/V the LLM produced,
 *              append-only, keys rotated, per layer (Hkv, cold_cap, d) for positions
 *              cold_base .. cold_n-1 (the *own* buffer: the layout skv_attention reads
 *              when cold_base == 0), plus, after a fork, a refcounted read-only chain of
 *              shared segments for positions < cold_base (copy-on-write: a fork appends to
 *              its own buffer; skv_kvcache_cold_flatten makes a private contiguous copy
 *              when a prefill needs one).
 *              Policies that never restore use the own buffer only as the staging area of
 *              their first prefill and release it afterwards (skv_kvcache_cold_release):
 *              evicted tokens are gone.
 *   fresh rows the current block's K/V (f32, not owned; skv_kvcache_set_fresh): apply
 *              takes rows of new positions from there when the cold tier lacks them.
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
    int **mult;              /* [L] -> multiplicity of each KV slot (1 unless merged) */
    int n_tok;               /* sequence length known to the cache (positions < n_tok are valid) */
    int settled;             /* positions < settled were placed before: loading one is a restore */
    long restores;           /* rows promoted from the cold tier for positions < settled */
    /* cold tier */
    int cold_cap;            /* tokens per lane allocated in the own buffer */
    int cold_base;           /* the own buffer starts at this position (0 unless forked / released) */
    int cold_n;              /* positions < cold_n are stored (own buffer from cold_base) */
    void **ck, **cv;         /* [L] -> (Hkv, cold_cap, d), rows cold_base .. */
    struct skv_coldseg *shared;   /* positions < cold_base (NULL: those are gone) */
    /* fresh rows of the current block (not owned) */
    const float *fk, *fv; int f_layer, f_pos0, f_T;
    bool no_headroom;        /* grow capacities to exactly what is asked (tests) */
    /* scratch for skv_kvcache_apply: stamps per position */
    int *mark; int mark_cap; int stamp;
    /* slot-write log for a mirror of the hot tier (NULL: off, the CPU runtime) */
    struct skv_kvlog *log;
} skv_kvcache;

/* ---- slot-write log (a mirror of the hot tier elsewhere, e.g. on the GPU) ----
 * With c->log set (skv_kvlog_enable), every change to the contents of a hot slot is
 * recorded: a KV slot (its K row, V row and multiplicity) or a V-only slot (its V row),
 * by layer and slot index within the layer's arena, and every relayout of a layer's KV or
 * V-only region (new offsets and capacities: the mirror then takes the whole region).
 * Copying the recorded slots from the hot tier as it is *after* the changes reproduces it
 * (runtime/kv/kvmirror.h does that). Logging never changes what the cache does; if the log
 * cannot grow it marks itself lost and the mirror takes everything. Not copied by clone. */
enum { SKV_KVOP_KV = 0, SKV_KVOP_V = 1, SKV_KVOP_RELAYOUT_KV = 2, SKV_KVOP_RELAYOUT_V = 3 };
typedef struct { int layer, kind, slot; } skv_kvop;   /* slot: -1 for a relayout */
typedef struct skv_kvlog {
    skv_kvop *ops;
    int n, cap;
    bool lost;               /* an op could not be recorded: resynchronise everything */
} skv_kvlog;
/* Start logging (empty log, lost = true so that the first sync takes everything). -1 + error. */
int skv_kvlog_enable(skv_kvcache *c);
void skv_kvlog_disable(skv_kvcache *c);
/* Record every used KV slot of a lane (for code that writes slots directly: EMS's
 * after_apply). No-op without a log. */
void skv_kvlog_lane(skv_kvcache *c, int layer, int kvh);

/* A shared, read-only, refcounted piece of a cold tier: positions start .. start+n-1,
 * per layer (Hkv, cap, d); positions below start live in parent. */
typedef struct skv_coldseg {
    int refs;
    struct skv_coldseg *parent;
    int L, start, n, cap;
    size_t bytes;            /* K+V bytes of the n stored tokens */
    void **ck, **cv;
} skv_coldseg;

typedef struct {
    size_t hot_used, hot_cap;     /* bytes of used / allocated hot slots (K, V; positions excluded) */
    size_t cold_used, cold_cap;   /* bytes of stored / allocated cold K+V this cache reads
                                     (own buffer + the shared chain) */
    size_t cold_shared;           /* part of cold_used/cold_cap in shared segments (counted once
                                     over caches by skv_kvcache_cold_unique) */
    double hot_tokens;            /* sum over lanes of n_kv + n_v / 2 */
} skv_kv_bytes;

skv_kvcache *skv_kvcache_new(int L, int Hkv, int d, bool f16);
void skv_kvcache_free(skv_kvcache *c);
/* Copy: the hot tier deep; the cold tier shared copy-on-write (the source's own buffer
 * becomes a shared segment of both, each appends to its own new buffer). NULL + error. */
skv_kvcache *skv_kvcache_clone(skv_kvcache *c);

/* ---- cold tier ---- */
/* Make room for positions < n in the own buffer (doubling). -1 + error. */
int skv_kvcache_cold_reserve(skv_kvcache *c, int n);
/* Free the own buffer and drop the shared chain: no token stays in cold (policies that
 * never restore, after their prefill). n_tok is kept. */
void skv_kvcache_cold_release(skv_kvcache *c);
/* Make the cold tier one private contiguous buffer from position 0 (copies the shared
 * chain, the copy-on-write step before an exact prefill over cold). -1 + error. */
int skv_kvcache_cold_flatten(skv_kvcache *c);
/* Forget positions >= n (speculative decoding's rollback, runtime/session/speculate.c):
 * every lane's slots for those positions must be the last ones of its K+V region, in any
 * order, with no V-only slot among them (true of a cache that only ever appended, as the
 * full policy's does), so the kept slots and their order are exactly as before the
 * positions were added. The cold tier must be released (none kept) or end at or below n.
 * -1 + error (the cache is unchanged) when that does not hold. */
int skv_kvcache_truncate(skv_kvcache *c, int n);
/* Physical cold bytes of n caches together, each shared segment counted once. */
size_t skv_kvcache_cold_unique(const skv_kvcache *const *cs, int n);
/* Rows of the current block for apply: k, v (T, Hkv, d) f32 at positions pos0 .. of layer. */
void skv_kvcache_set_fresh(skv_kvcache *c, int layer, int pos0, int T, const float *k, const float *v);
/* Store T tokens of one layer at positions pos0 .. (>= cold_base): k, v (T, Hkv, d).
 * Needs the capacity. Sets cold_n = max(cold_n, pos0 + T) (and n_tok). -1 + error. */
int skv_kvcache_cold_write(skv_kvcache *c, int layer, int pos0, int T, const float *k, const float *v);
/* Pointer to the cold K / V row of a token (element type per c->f16), NULL when the
 * cold tier does not hold it. */
const void *skv_kvcache_cold_k(const skv_kvcache *c, int layer, int kvh, int pos);
const void *skv_kvcache_cold_v(const skv_kvcache *c, int layer, int kvh, int pos);

/* Fresh row of a position of the current block (f32, (d)), NULL when not in it. */
const float *skv_kvcache_fresh_k(const skv_kvcache *c, int layer, int kvh, int pos);
const float *skv_kvcache_fresh_v(const skv_kvcache *c, int layer, int kvh, int pos);

/* ---- hot tier ---- */
static inline int skv_lane(const skv_kvcache *c, int layer, int kvh) { return layer * c->Hkv + kvh; }
/* Lane views (element pointers to the lane's first slot). */
void *skv_kvcache_hot_k(const skv_kvcache *c, int layer, int kvh);
void *skv_kvcache_hot_v(const skv_kvcache *c, int layer, int kvh);
void *skv_kvcache_hot_m(const skv_kvcache *c, int layer, int kvh);
int *skv_kvcache_hot_pos_kv(const skv_kvcache *c, int layer, int kvh);
int *skv_kvcache_hot_pos_v(const skv_kvcache *c, int layer, int kvh);
int *skv_kvcache_hot_mult(const skv_kvcache *c, int layer, int kvh);
/* Does any KV slot of the layer stand for more than one token? */
bool skv_kvcache_layer_merged(const skv_kvcache *c, int layer);

/* Grow the layer's lanes so that lane kvh holds need_kv[kvh] KV and need_v[kvh] V-only
 * slots (Hkv entries each). Relayouts the layer's arena only when a lane is short.
 * -1 + error (out of memory: the cache is unchanged). */
int skv_kvcache_hot_reserve(skv_kvcache *c, int layer, const int *need_kv, const int *need_v);

/* Make the lane's hot set exactly: K+V for positions kv_pos[0..n_kv), V only for
 * v_pos[0..n_v) (disjoint, each < n_tok, no duplicates). Slots whose position is no
 * longer wanted are freed (a K+V slot moving to V-only keeps its V, no cold read);
 * wanted positions not present are loaded from cold, else from the fresh rows, else it
 * is an error (the token was evicted permanently). Kept slots keep their contents and
 * multiplicity; loaded ones get multiplicity 1. Needs the capacity
 * (skv_kvcache_hot_reserve). Returns the number of loaded rows (K+V or V-only: 1 each;
 * those for positions < settled are also added to c->restores), -1 + error. */
int skv_kvcache_apply(skv_kvcache *c, int layer, int kvh, const int *kv_pos, int n_kv,
                      const int *v_pos, int n_v);

/* Append one token (from cold or the fresh rows) to the lane's KV region; needs capacity. */
int skv_kvcache_hot_append(skv_kvcache *c, int layer, int kvh, int pos);

/* Byte accounting of both tiers. */
void skv_kvcache_bytes(const skv_kvcache *c, skv_kv_bytes *b);

/* Row conversions for the element type. */
void skv_kv_store_row(void *dst, const float *src, int d, bool f16);
void skv_kv_load_row(float *dst, const void *src, int d, bool f16);

#endif
