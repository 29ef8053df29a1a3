/* attention.c: causal GQA attention over a contiguous fp32/fp16 KV cache (attention.h),
 * with the optional per-head colsum / lastrow score outputs.
 *
 * Every row of the usual shapes (d a multiple of 8 up to 256) runs the grouped decode kernel
 * below (dec_tasks); a prefill runs its rows in blocks of 8 that share each key chunk
 * (dec_block), with each row's arithmetic a decode step's, so a prefill row has a decode step's
 * bits (unless the opt-in bf16 prefill attention, attention_bf16.h, takes the block's rows
 * first: long blocks without colsum, on CPUs with AMX-BF16). The general path, for the other shapes:
 * one task = one (query head h, query row t): scores s[k] = q.K[k] / sqrt(d) for keys
 * k <= pos0 + t (kv head h / (H/Hkv)), softmax, out = sum_k A[k] V[k]. Each thread owns one
 * score row of S = pos0 + T floats; the (T x S) matrix never exists.
 * OpenMP: over (h, t) pairs; when colsum is requested, over heads only, each head's rows
 * processed in order t = 0..T-1, so colsum is race-free and identical for any thread
 * count. skv_attention_team runs the same tasks inside an enclosing parallel region (the
 * decode forward's one region per token). Dots and the V sum are AVX2 (fp16 via
 * _mm256_cvtph_ps); exp is a vectorised Cephes-style polynomial (relative error ~2e-7). skv_attention_ref is the plain scalar
 * version with expf. */
#include "attention.h"
#include "simd_math.h"
#include "kvquant.h"
#include "attention_bf16.h"
#include "common/util.h"
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

void skv_kv_store(void *cache, bool f16, size_t off, const float *src, int d) {
    if (f16) {
        uint16_t *o = (uint16_t *)cache + off;
        for (int i = 0; i < d; i++) o[i] = skv_f32_to_f16(src[i]);
    } else {
        memcpy((float *)cache + off, src, (size_t)d * sizeof(float));
    }
}

void skv_kv_store_any(void *row, const float *src, int d, int bits, bool f16) {
    if (bits) skv_kvq_quantize_row(row, src, d, bits);
    else skv_kv_store(row, f16, 0, src, d);
}

void skv_kv_store_key(void *row, const float *src, const float *norm, int h, int Hkv, int d, int bits, bool f16) {
    if (bits && norm) skv_kvq_quantize_key(row, src, norm + (size_t)h * d, norm + ((size_t)Hkv + h) * d, d, bits);
    else skv_kv_store_any(row, src, d, bits, f16);
}

/* The new key / value row pos0 of KV head h (a->knew, a->vnew) into the caches. */
static void store_new_row(void *kc, void *vc, const skv_attn_args *a, int h) {
    const size_t off = ((size_t)h * a->S_cap + (size_t)a->pos0) * a->d;
    skv_kv_store(kc, a->kv_f16, off, a->knew + (size_t)h * a->d, a->d);
    skv_kv_store(vc, a->kv_f16, off, a->vnew + (size_t)h * a->d, a->d);
}

/* ---------------- reference ---------------- */

static inline float kv_at(const void *c, bool f16, size_t i) {
    return f16 ? skv_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

void skv_attention_ref(float *out, const float *q, const void *kc, const void *vc,
                       const skv_attn_args *a) {
    const int T = a->T, H = a->H, d = a->d, S = a->pos0 + a->T, grp = a->H / a->Hkv;
    const float scale = 1.0f / sqrtf((float)d);
    float *p = skv_malloc((size_t)S * sizeof(float), "attention scores");
    if (!p) return;
    for (int h = 0; h < H; h++) {
        const size_t kvoff = (size_t)(h / grp) * a->S_cap * d;
        for (int t = 0; t < T; t++) {
            const float *qv = q + ((size_t)t * H + h) * d;
            const int n = a->pos0 + t + 1;
            float mx = -INFINITY;
            for (int k = 0; k < n; k++) {
                float s = 0.0f;
                for (int i = 0; i < d; i++) s += qv[i] * kv_at(kc, a->kv_f16, kvoff + (size_t)k * d + i);
                p[k] = s * scale;
                if (p[k] > mx) mx = p[k];
            }
            double sum = 0.0;
            for (int k = 0; k < n; k++) { p[k] = expf(p[k] - mx); sum += p[k]; }
            for (int k = 0; k < n; k++) p[k] = (float)(p[k] / sum);
            float *o = out + ((size_t)t * H + h) * d;
            for (int i = 0; i < d; i++) {
                float s = 0.0f;
                for (int k = 0; k < n; k++) s += p[k] * kv_at(vc, a->kv_f16, kvoff + (size_t)k * d + i);
                o[i] = s;
            }
            if (a->colsum)
                for (int k = 0; k < n; k++) a->colsum[(size_t)h * a->S_cap + k] += p[k];
            if (a->lastrow && t == T - 1)
                for (int k = 0; k < n; k++) a->lastrow[(size_t)h * a->S_cap + k] = p[k];
        }
    }
    free(p);
}

/* ---------------- fast path ---------------- */

/* One (head, row): out (d) and the normalised row p (n). K, V point at the kv head. */
static inline __attribute__((always_inline)) void attn_row(float *o, const float *qv, const void *K, const void *V, bool f16, int d, int n,
                     float scale, float *p) {
    const int d8 = d & ~7;
    /* scores: 8 keys at a time, 8 independent accumulators reduced by a transpose-add */
    float mx = -INFINITY;
    int k = 0;
    if (d8 == d) {
        __m256 vmx = _mm256_set1_ps(-INFINITY), vsc = _mm256_set1_ps(scale);
        for (; k + 8 <= n; k += 8) {
            const __m256 sv = _mm256_mul_ps(skv_dot8_keys(qv, K, f16, (size_t)k, d), vsc);
            _mm256_storeu_ps(p + k, sv);
            vmx = _mm256_max_ps(vmx, sv);
        }
        mx = skv_hmax8(vmx);
    }
    for (; k < n; k++) {
        const size_t row = (size_t)k * d;
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < d8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(qv + i), skv_load8(K, f16, row + i), acc);
        float s = skv_hsum8(acc);
        for (int i = d8; i < d; i++) s += qv[i] * kv_at(K, f16, row + i);
        s *= scale;
        p[k] = s;
        mx = s > mx ? s : mx;
    }
    const float inv = 1.0f / skv_exp_sum(p, n, mx);
    __m256 vinv = _mm256_set1_ps(inv);
    for (k = 0; k + 8 <= n; k += 8) _mm256_storeu_ps(p + k, _mm256_mul_ps(_mm256_loadu_ps(p + k), vinv));
    for (; k < n; k++) p[k] *= inv;
    /* out = sum_k p[k] V[k], 64 columns (8 registers) at a time */
    int i0 = 0;
    for (; i0 + 64 <= d; i0 += 64) {
        __m256 c[8];
        for (int j = 0; j < 8; j++) c[j] = _mm256_setzero_ps();
        for (k = 0; k < n; k++) {
            __m256 pk = _mm256_broadcast_ss(p + k);
            const size_t row = (size_t)k * d + i0;
            for (int j = 0; j < 8; j++) c[j] = _mm256_fmadd_ps(pk, skv_load8(V, f16, row + 8 * j), c[j]);
        }
        for (int j = 0; j < 8; j++) _mm256_storeu_ps(o + i0 + 8 * j, c[j]);
    }
    for (; i0 + 8 <= d; i0 += 8) {
        __m256 c = _mm256_setzero_ps();
        for (k = 0; k < n; k++) c = _mm256_fmadd_ps(_mm256_broadcast_ss(p + k), skv_load8(V, f16, (size_t)k * d + i0), c);
        _mm256_storeu_ps(o + i0, c);
    }
    for (; i0 < d; i0++) {
        float c = 0.0f;
        for (k = 0; k < n; k++) c += p[k] * kv_at(V, f16, (size_t)k * d + i0);
        o[i0] = c;
    }
}

/* The (head, row) tasks of skv_attention for T > 1 (and odd head sizes) as an orphaned
 * `omp for` (ends in a barrier); p: this thread's score row of pos0 + T + 8 floats. */
static void attn_tasks(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a, float *p) {
    const int T = a->T, H = a->H, d = a->d, grp = a->H / a->Hkv;
    const float scale = 1.0f / sqrtf((float)d);
    const size_t esz = a->kv_f16 ? 2 : 4;
    const bool per_head = a->colsum != NULL;
    const int64_t tasks = per_head ? H : (int64_t)H * T;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int h = (int)(per_head ? task : task / T);
        const int tb = per_head ? 0 : (int)(task % T), te = per_head ? T : tb + 1;
        const size_t kvoff = (size_t)(h / grp) * a->S_cap * d * esz;
        const void *K = (const uint8_t *)kc + kvoff, *V = (const uint8_t *)vc + kvoff;
        for (int t = tb; t < te; t++) {
            const int n = a->pos0 + t + 1;
            float *o = out + ((size_t)t * H + h) * d;
            const float *qv = q + ((size_t)t * H + h) * d;
            if (a->kv_f16) attn_row(o, qv, K, V, true, d, n, scale, p);   /* literal: specialised */
            else attn_row(o, qv, K, V, false, d, n, scale, p);
            if (a->colsum) {
                float *cs = a->colsum + (size_t)h * a->S_cap;
                for (int k = 0; k < n; k++) cs[k] += p[k];
            }
            if (a->lastrow && t == T - 1) {
                float *lr = a->lastrow + (size_t)h * a->S_cap;
                for (int k = 0; k < n; k++) lr[k] = p[k];
            }
        }
    }
}

/* ---------------- decode: one query row, grouped by KV head, split over keys ----------------
 * A unit = (KV head, chunk of DEC_CHUNK keys), run for the grp = H/Hkv query heads of the KV
 * head in blocks of up to 3 (dec_heads, dec_run): each K and V element is read from the cache and
 * converted to fp32 in a register once per block and used there by every head of the block
 * (accumulators: 3 heads x 4 keys for the scores, 3 heads x 32 columns for the output).
 * Per head a unit leaves m (its max score), l = sum_k exp(s_k - m), o = sum_k exp(s_k - m)
 * V[k] and the exp(s_k - m) themselves in the head's score row. A second loop over heads
 * merges the chunks in order (flash-decoding): M = max m_c, L = sum_c l_c e^(m_c - M),
 * out = sum_c o_c e^(m_c - M) / L, and rescales the stored values to the probabilities for
 * colsum / lastrow. The chunking depends on the number of keys only, so the results are
 * the same for any thread count. Workspace (floats): H score rows of dec_prow(n), then
 * H * nch partials of dec_ps(d) (m, l, o[d], padding).
 * Why in registers: attn_row converts every fp16 row once per query head (~8 GB/s of KV on
 * two cores). Converting each 16-key tile once into an fp32 buffer shared by all heads
 * removes the repeats, but its stores and reloads cost as much as the arithmetic; converting
 * in registers runs the SmolLM2 shapes 1.25x and the Qwen2.5-0.5B shapes 1.3x faster than
 * the buffer (cold cache, 2 threads, docs/lab/performance-notebook.md), with the same bits:
 * every score and output element gets the same FMA chain and the same reduction.
 * Prefetch: the score and V passes prefetch the rows DEC_PF_KEYS ahead into L2
 * (prefetcht1). dec_prefetch must be always_inline: as an ordinary static function GCC 12
 * (-O2, IPA mod/ref) finds it free of side effects and deletes every call, so no prefetch
 * runs (inlining happens before that analysis). Measured with make bench-ab against no
 * prefetch: into L1 (T0) SmolLM2 decode was slower (1.04 / 1.09 at 512 / 2048 tokens), into
 * L2 (T1) 4-6 % faster in the AMD VM's fast-memory state (0.958 / 0.944; the Qwen pair
 * unchanged) (docs/lab/performance-notebook.md).
 * Runs: each thread takes a contiguous share of the units (as a static `omp for` would) and
 * does consecutive chunks of one KV head, up to DEC_RUN_BYTES of K, as one run: the scores of
 * all the run's chunks (one long pass over K), then their softmax parts, then their V sums
 * (one long pass over V). Every chunk's arithmetic is the one above, so the bits do not
 * change; what changes is that the cache is read in streams of up to 128 KiB instead of
 * alternating between K and V every 128 rows. Each switch cost ~0.4 us (the
 * hardware prefetcher starting a stream again): SmolLM2
 * shapes at 2048 keys from memory, one thread, 14.8 -> ~19.5 GB/s
 * (docs/lab/performance-notebook.md). */
#define DEC_CHUNK 128
#define DEC_RUN_BYTES ((size_t)128 << 10)   /* K (or V) bytes of one run: stays in L2 for the next head block */
#define DEC_TILE 16
#define DEC_DMAX 256
#define DEC_GMAX 64       /* query heads per KV head */
#define DEC_PF_KEYS 48    /* rows prefetched ahead of the one in use */

/* the grouped kernel's shapes; one query row (decode), or a prefill's rows in blocks
 * (dec_block) */
static bool dec_shapes(const skv_attn_args *a) { return a->d % 8 == 0 && a->d <= DEC_DMAX && a->H / a->Hkv <= DEC_GMAX; }
static bool dec_applies(const skv_attn_args *a) { return a->T == 1 && dec_shapes(a); }
static size_t dec_nch(size_t n) { return (n + DEC_CHUNK - 1) / DEC_CHUNK; }
/* one past the last key of chunk c of n keys */
static int dec_k1(size_t c, int n) { return (c + 1) * DEC_CHUNK < (size_t)n ? (int)((c + 1) * DEC_CHUNK) : n; }
/* strides padded to 16 floats (a cache line): units on different threads never write to
 * one line (on this VM a line moving between the two cores cost up to 15 % of a SmolLM2
 * decode step at 2048 tokens) */
static size_t dec_prow(size_t n) { return (n + 8 + 15) & ~(size_t)15; }
static size_t dec_ps(int d) { return ((size_t)d + 2 + 15) & ~(size_t)15; }
static size_t dec_ws_floats(int H, int d, size_t n) { return (size_t)H * dec_prow(n) + (size_t)H * dec_nch(n) * dec_ps(d); }

/* Prefetch n rows of the cache C (d values each) from row k into L2. always_inline: as an
 * ordinary function GCC deletes its calls (see the top comment). */
static inline __attribute__((always_inline)) void dec_prefetch(const void *C, bool f16, int d, int k, int n) {
    const size_t rb = (size_t)d * (f16 ? 2 : 4);
    const char *p = (const char *)C + (size_t)k * rb;
    for (size_t b = 0; b < (size_t)n * rb; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
}

/* Scores of keys k .. k+3 (inside a complete 8-key group) for nb (<= 3) query heads q
 * (nb, d): per key the lane-wise FMA chain over d and the reduction tree of skv_dot8_keys
 * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), times scale, into p[g][k..k+3]. */
static inline __attribute__((always_inline)) void dec_scores4(const float *q, const void *K, bool f16, int d, int nb,
                                                              int k, __m128 vsc, float *const *p) {
    __m256 acc[3][4];
    _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++)
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) acc[g][j] = _mm256_setzero_ps();
    dec_prefetch(K, f16, d, k + DEC_PF_KEYS, 4);
    for (int i = 0; i < d; i += 8) {
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            const __m256 kv = skv_load8(K, f16, (size_t)(k + j) * d + i);
            _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++)
                acc[g][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * d + i), kv, acc[g][j]);
        }
    }
    _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++) {
        const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(acc[g][0], acc[g][1]), _mm256_hadd_ps(acc[g][2], acc[g][3]));
        const __m128 s = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
        _mm_storeu_ps(p[g] + k, _mm_mul_ps(s, vsc));
    }
}

/* o[g][i0 .. i0 + 8 nv) += sum over keys k0..k1-1 of p[g][k] V[k][i0 ..], keys in order */
static inline __attribute__((always_inline)) void dec_pv(const void *V, bool f16, int d, int nb, int nv, int i0,
                                                         int k0, int k1, float *const *p, float *const *o) {
    __m256 acc[3][4];
    _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++)
        _Pragma("GCC unroll 4") for (int r = 0; r < nv; r++) acc[g][r] = _mm256_loadu_ps(o[g] + i0 + 8 * r);
    for (int k = k0; k < k1; k++) {
        __m256 pk[3];
        _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++) pk[g] = _mm256_broadcast_ss(p[g] + k);
        _Pragma("GCC unroll 4") for (int r = 0; r < nv; r++) {
            const __m256 v = skv_load8(V, f16, (size_t)k * d + i0 + 8 * r);
            _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++) acc[g][r] = _mm256_fmadd_ps(pk[g], v, acc[g][r]);
        }
    }
    _Pragma("GCC unroll 3") for (int g = 0; g < nb; g++)
        _Pragma("GCC unroll 4") for (int r = 0; r < nv; r++) _mm256_storeu_ps(o[g] + i0 + 8 * r, acc[g][r]);
}

/* One load from every cache line of rows k0 .. k1-1 of C, in address order. The V passes
 * below read a row 32 columns at a time, so with rows of 4 or more lines (d = 128, fp16)
 * each pass takes every 4th line and the hardware prefetcher, which follows demand misses,
 * never sees a stream: the passes waited on DRAM (a 2048-key layer of Qwen2.5-1.5B, one
 * thread, K/V from memory: 268 us against 150 from cache). Touching the tile's lines in
 * order first brings that to ~205 us. */
static inline void dec_touch_rows(const void *C, size_t rb, int k0, int k1) {
    const uint8_t *base = (const uint8_t *)C + (size_t)k0 * rb;
    const size_t nb = (size_t)(k1 - k0) * rb;
    uint32_t a0 = 0, a1 = 0;   /* two chains, so the loads do not wait on each other */
    for (size_t b = 0; b < nb; b += 128) {
        a0 |= *(const volatile uint8_t *)(base + b);
        if (b + 64 < nb) a1 |= *(const volatile uint8_t *)(base + b + 64);   /* rb = 272, say: not past row k1 - 1 */
    }
    __asm__ volatile("" ::"r"(a0), "r"(a1));
}

/* o += e[k] V[k] over keys k0 .. k1-1 for a block of nb (<= 3) query heads, 16 keys at a
 * time, all columns (32 per pass) before the next 16 keys, so passes after the first find
 * the rows in L1. touch: the run's first head block, rows of 256 bytes or more
 * (dec_touch_rows); later blocks find the run in L2. */
static inline __attribute__((always_inline)) void dec_pv_chunk(const void *V, bool f16, int d, int nb, int k0, int k1,
                                                               bool touch, float *const *p, float *const *o) {
    const size_t rb = (size_t)d * (f16 ? 2 : 4);
    for (int kt = k0; kt < k1; kt += DEC_TILE) {
        const int ke = k1 - kt < DEC_TILE ? k1 : kt + DEC_TILE;
        dec_prefetch(V, f16, d, kt + DEC_PF_KEYS, ke - kt);
        if (touch && rb >= 256) dec_touch_rows(V, rb, kt, ke);
        int i0 = 0;
        for (; i0 + 32 <= d; i0 += 32) dec_pv(V, f16, d, nb, 4, i0, kt, ke, p, o);
        for (; i0 < d; i0 += 8) dec_pv(V, f16, d, nb, 1, i0, kt, ke, p, o);
    }
}

/* The two phases of a chunk that carry the arithmetic: the scores of its complete 4-key
 * groups (keys k0 .. k8-1) and the V sums, as out-of-line functions specialised for (nb,
 * cache type): inlined into the run's
 * chunk loops, GCC ran out of registers in the V loop (its 3 broadcasts went to the stack,
 * the kernel ran 1.5x slower from cache) */
typedef void (*dec_scores_fn)(const float *q, const void *K, int d, int k0, int k8, __m128 vsc, float *const *p);
typedef void (*dec_pv_fn)(const void *V, int d, int k0, int k1, bool touch, float *const *p, float *const *o);
#define DEC_PHASES(NB, F16, SUF)                                                                                   \
    static void dec_scores_##SUF(const float *q, const void *K, int d, int k0, int k8, __m128 vsc, float *const *p) { \
        for (int k = k0; k < k8; k += 4) dec_scores4(q, K, F16, d, NB, k, vsc, p);                               \
    }                                                                                                             \
    static void dec_pv_##SUF(const void *V, int d, int k0, int k1, bool touch, float *const *p, float *const *o) { \
        dec_pv_chunk(V, F16, d, NB, k0, k1, touch, p, o);                                                         \
    }
DEC_PHASES(1, false, 1f)
DEC_PHASES(2, false, 2f)
DEC_PHASES(3, false, 3f)
DEC_PHASES(1, true, 1h)
DEC_PHASES(2, true, 2h)
DEC_PHASES(3, true, 3h)
#undef DEC_PHASES
static const dec_scores_fn dec_scores_tab[2][3] = {{dec_scores_1f, dec_scores_2f, dec_scores_3f},
                                                   {dec_scores_1h, dec_scores_2h, dec_scores_3h}};
static const dec_pv_fn dec_pv_tab[2][3] = {{dec_pv_1f, dec_pv_2f, dec_pv_3f}, {dec_pv_1h, dec_pv_2h, dec_pv_3h}};

/* One run for nb (<= 3) query heads q (nb, d) of a KV head (K, V at that head): chunks
 * c0 .. c1-1 of the n keys; p[g] the head's score row, part[g] its partials, chunk c's
 * (m, l, o[d]) at part[g] + c * ps. Each chunk: scores s = q.K / sqrt(d) (4 keys at a time
 * over the complete 8-key groups, then the last < 8 keys one by one, skv_hsum8), then per
 * head m = max s, e = exp(s - m) in place, l = sum e, then o = sum e[k] V[k]; the run does
 * each phase for all its chunks before the next phase. first: the KV head's first head
 * block in this run (the V rows come from memory: dec_pv_chunk's touch). */
static void dec_run(const float *q, const void *K, const void *V, bool f16, int d, int nb, int c0, int c1, int n,
                    size_t ps, float scale, bool first, float *const *p, float *const *part) {
    const dec_scores_fn scores = dec_scores_tab[f16][nb - 1];
    const dec_pv_fn pv = dec_pv_tab[f16][nb - 1];
    const __m128 vsc = _mm_set1_ps(scale);
    for (int c = c0; c < c1; c++) {
        const int k0 = c * DEC_CHUNK, k1 = dec_k1((size_t)c, n);
        const int k8 = k0 + ((k1 - k0) & ~7);
        scores(q, K, d, k0, k8, vsc, p);
        for (int k = k8; k < k1; k++)
            for (int g = 0; g < nb; g++) {
                const float *qv = q + (size_t)g * d;
                __m256 acc = _mm256_setzero_ps();
                for (int i = 0; i < d; i += 8)
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(qv + i), skv_load8(K, f16, (size_t)k * d + i), acc);
                p[g][k] = skv_hsum8(acc) * scale;
            }
    }
    for (int c = c0; c < c1; c++) {
        const int k0 = c * DEC_CHUNK, k1 = dec_k1((size_t)c, n);
        for (int g = 0; g < nb; g++) {
            float *pg = p[g] + k0, *pc = part[g] + (size_t)c * ps;
            const float mx = skv_max_row(pg, k1 - k0);
            pc[0] = mx;
            pc[1] = skv_exp_sum(pg, k1 - k0, mx);
            memset(pc + 2, 0, (size_t)d * sizeof(float));
        }
    }
    for (int c = c0; c < c1; c++) {
        const int k0 = c * DEC_CHUNK, k1 = dec_k1((size_t)c, n);
        float *o[3];
        for (int g = 0; g < nb; g++) o[g] = part[g] + (size_t)c * ps + 2;
        pv(V, d, k0, k1, first, p, o);
    }
}

/* The KV head's grp query heads in blocks of 3, each block one dec_run; a remainder of 1
 * after at least one block goes as 2 + 2 (Qwen2.5-0.5B's 7 heads: 3, 2, 2): a lone head
 * has only 4 independent FMA chains, half what keeps both FMA pipes busy, and cost ~1.6x a
 * head in a block of 3. */
static void dec_heads(const float *q, const void *K, const void *V, bool f16, int d, int grp, int c0, int c1, int n,
                      size_t ps, float scale, float *const *p, float *const *part) {
    for (int g0 = 0; g0 < grp;) {
        const int left = grp - g0, nb = left == 4 ? 2 : left < 3 ? left : 3;
        dec_run(q + (size_t)g0 * d, K, V, f16, d, nb, c0, c1, n, ps, scale, g0 == 0, p + g0, part + g0);
        g0 += nb;
    }
}

/* Head h's chunks merged into out (d); colsum / lastrow from the rescaled scores. */
static void dec_merge(float *o, const float *p, const float *part, size_t nch, int d, int n, const skv_attn_args *a, int h) {
    const size_t ps = dec_ps(d);
    float M = -INFINITY;
    for (size_t c = 0; c < nch; c++) M = part[c * ps] > M ? part[c * ps] : M;
    float L = 0.0f;
    for (size_t c = 0; c < nch; c++) L += part[c * ps + 1] * expf(part[c * ps] - M);
    const float inv = 1.0f / L;
    for (int i = 0; i < d; i++) o[i] = 0.0f;
    for (size_t c = 0; c < nch; c++) {
        const __m256 f = _mm256_set1_ps(expf(part[c * ps] - M) * inv);
        const float *oc = part + c * ps + 2;
        for (int i = 0; i < d; i += 8)
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(f, _mm256_loadu_ps(oc + i), _mm256_loadu_ps(o + i)));
    }
    if (!a->colsum && !a->lastrow) return;
    float *cs = a->colsum ? a->colsum + (size_t)h * a->S_cap : NULL;
    float *lr = a->lastrow ? a->lastrow + (size_t)h * a->S_cap : NULL;
    for (size_t c = 0; c < nch; c++) {
        const float f = expf(part[c * ps] - M) * inv;
        const int k1 = dec_k1(c, n);
        for (int k = (int)(c * DEC_CHUNK); k < k1; k++) {
            const float v = p[k] * f;
            if (cs) cs[k] += v;
            if (lr) lr[k] = v;
        }
    }
}

/* The first unit of thread t's share of the Hkv x nch decode units (KV head major) of n keys:
 * the unit boundary nearest to t/nth of all the keys, so that shares are even in keys, not in
 * units (each KV head's last chunk can be short: at n = 513, SmolLM2's 3 x 5 units split 8 / 7
 * gave one thread 897 keys and the other 642; by keys it is 769 / 770). Which thread runs a
 * unit does not change its arithmetic, so the results do not depend on this split. */
static int64_t dec_share_begin(int64_t t, int64_t nth, int Hkv, size_t nch, int n) {
    const int64_t total = (int64_t)Hkv * n, units = (int64_t)Hkv * (int64_t)nch;
    if (t <= 0) return 0;
    if (t >= nth) return units;
    const int64_t want = total * t;               /* the boundary's keys x nth, ideally */
    const int64_t T = want / nth, h = T / n;      /* the KV head the ideal boundary falls in */
    if (h >= Hkv) return units;
    const int64_t c = (T - h * n) / DEC_CHUNK;    /* < nch */
    const int64_t b0 = h * n + c * DEC_CHUNK, b1 = h * n + ((c + 1) * DEC_CHUNK < n ? (c + 1) * DEC_CHUNK : n);
    const int64_t u0 = h * (int64_t)nch + c;      /* starts at key b0; u0 + 1 starts at b1 */
    return want - b0 * nth < b1 * nth - want ? u0 : u0 + 1;
}

/* The decode units, then the merge (an orphaned `omp for`), each ending in a barrier; ws: the
 * shared workspace (dec_ws_floats), 64-byte aligned, the same pointer on every thread.
 * A thread takes a contiguous share of the units (dec_share_begin) and does it as runs
 * (dec_run); the merge loop is static, so a thread merges the heads of mostly its own units
 * (few line transfers between cores). */
static void dec_tasks(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws) {
    const int H = a->H, Hkv = a->Hkv, d = a->d, grp = H / Hkv, n = a->pos0 + 1;
    const float scale = 1.0f / sqrtf((float)d);
    const size_t esz = a->kv_f16 ? 2 : 4, nch = dec_nch((size_t)n), prow = dec_prow((size_t)n), ps = dec_ps(d);
    float *part = ws + (size_t)H * prow;   /* (H, nch, ps) */
    const size_t chunk_bytes = (size_t)DEC_CHUNK * d * esz;
    const int64_t run = DEC_RUN_BYTES > chunk_bytes ? (int64_t)(DEC_RUN_BYTES / chunk_bytes) : 1;
    const int64_t nth = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t u_begin = dec_share_begin(t, nth, Hkv, nch, n), u_end = dec_share_begin(t + 1, nth, Hkv, nch, n);
    if (a->knew)   /* row pos0 = n - 1 is in the last chunk of its KV head; its unit's thread writes it */
        for (int h = 0; h < Hkv; h++) {
            const int64_t last = (int64_t)(h + 1) * (int64_t)nch - 1;
            if (last >= u_begin && last < u_end) store_new_row(kc, vc, a, h);
        }
    for (int64_t u = u_begin; u < u_end;) {
        const int kvh = (int)(u / (int64_t)nch), c0 = (int)(u % (int64_t)nch);
        int64_t c1 = c0 + run;
        if (c1 > (int64_t)nch) c1 = (int64_t)nch;
        if (c1 - c0 > u_end - u) c1 = c0 + (u_end - u);
        const size_t kvoff = (size_t)kvh * a->S_cap * d * esz;
        const void *K = (const uint8_t *)kc + kvoff, *V = (const uint8_t *)vc + kvoff;
        float *pr[DEC_GMAX], *pt[DEC_GMAX];
        for (int g = 0; g < grp; g++) {
            const int h = kvh * grp + g;
            pr[g] = ws + (size_t)h * prow;
            pt[g] = part + (size_t)h * nch * ps;
        }
        dec_heads(q + (size_t)kvh * grp * d, K, V, a->kv_f16, d, grp, c0, (int)c1, n, ps, scale, pr, pt);
        u += c1 - c0;
    }
    #pragma omp barrier
    #pragma omp for schedule(static)
    for (int h = 0; h < H; h++)
        dec_merge(out + (size_t)h * d, ws + (size_t)h * prow, part + (size_t)h * nch * ps, nch, d, n, a, h);
}

/* ---------------- prefill: a block of query rows sharing each key chunk ----------------
 * A block of B (<= DEC_BLOCK_ROWS) consecutive prompt rows t0 .. t0+B-1 at once: for each KV
 * head, the B x grp query vectors of the block (copied together, (Hkv, B, grp, d)) go through
 * dec_heads as one group over every key chunk that all B rows see whole (chunks c with
 * (c + 1) x DEC_CHUNK <= pos0 + t0 + 1), so each K and V run comes from memory once per block
 * instead of once per row (in the row-by-row form, ~30 % of the V pass waited on memory at
 * 8K keys); each row's last chunk or two (cut at its own position) run for that row alone.
 * A vector's arithmetic does not depend on which vectors share its head block, so every
 * (row, head) gets the partials (m, l, o) a decode step at that position computes, and the
 * same merge (dec_merge): a prefill row keeps a decode step's bits. colsum accumulates the
 * block's rows in order per head, as row-by-row calls would. Workspace (floats): B x H score
 * rows of dec_prow(S), B x H x dec_nch(S) partials of dec_ps(d), then the copied queries. */
#define DEC_BLOCK_ROWS 8

static int blk_rows(int T) { return T < DEC_BLOCK_ROWS ? T : DEC_BLOCK_ROWS; }
static size_t blk_ws_floats(int T, int H, int d, size_t S) {
    const size_t B = (size_t)blk_rows(T);
    return B * dec_ws_floats(H, d, S) + B * (size_t)H * d;
}

/* the score rows and partials of KV head kvh's query vectors for block rows r0 .. r1-1, in
 * the order (row, head of the group) that the copied queries have */
static void blk_ptrs(float *P, float *part, size_t prow, size_t pstride, int H, int grp, int kvh, int r0, int r1,
                     float **pr, float **pt) {
    for (int r = r0; r < r1; r++)
        for (int g = 0; g < grp; g++) {
            const size_t row = (size_t)r * H + (size_t)kvh * grp + g;
            pr[(r - r0) * grp + g] = P + row * prow;
            pt[(r - r0) * grp + g] = part + row * pstride;
        }
}

static void dec_block(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, int t0, float *ws) {
    const int H = a->H, Hkv = a->Hkv, d = a->d, grp = H / Hkv, T = a->T;
    const int B = T - t0 < DEC_BLOCK_ROWS ? T - t0 : DEC_BLOCK_ROWS, N = B * grp;
    const size_t S = (size_t)a->pos0 + (size_t)T, esz = a->kv_f16 ? 2 : 4;
    const size_t prow = dec_prow(S), nchS = dec_nch(S), ps = dec_ps(d);
    const float scale = 1.0f / sqrtf((float)d);
    const int Bmax = blk_rows(T);
    float *P = ws;                                              /* (B, H, prow) */
    float *part = P + (size_t)Bmax * H * prow;                  /* (B, H, nchS, ps) */
    float *qb = part + (size_t)Bmax * H * nchS * ps;            /* (Hkv, B, grp, d) */
    const int n_min = a->pos0 + t0 + 1, c_sh = n_min / DEC_CHUNK;
    #pragma omp for schedule(static)
    for (int u = 0; u < Hkv * B; u++) {
        const int kvh = u / B, r = u % B;
        memcpy(qb + ((size_t)kvh * B + r) * grp * d, q + ((size_t)(t0 + r) * H + (size_t)kvh * grp) * d,
               (size_t)grp * d * sizeof(float));
    }
    /* the shared chunks: each thread a contiguous share of the Hkv x c_sh units, as runs */
    const size_t chunk_bytes = (size_t)DEC_CHUNK * d * esz;
    const int64_t run = DEC_RUN_BYTES > chunk_bytes ? (int64_t)(DEC_RUN_BYTES / chunk_bytes) : 1;
    const int64_t nth = omp_get_num_threads(), th = omp_get_thread_num();
    float *pr[DEC_BLOCK_ROWS * DEC_GMAX], *pt[DEC_BLOCK_ROWS * DEC_GMAX];
    if (c_sh > 0) {
        const int nsh = c_sh * DEC_CHUNK;
        const int64_t u_begin = dec_share_begin(th, nth, Hkv, (size_t)c_sh, nsh),
                      u_end = dec_share_begin(th + 1, nth, Hkv, (size_t)c_sh, nsh);
        for (int64_t u = u_begin; u < u_end;) {
            const int kvh = (int)(u / c_sh), c0 = (int)(u % c_sh);
            int64_t c1 = c0 + run;
            if (c1 > c_sh) c1 = c_sh;
            if (c1 - c0 > u_end - u) c1 = c0 + (u_end - u);
            const size_t kvoff = (size_t)kvh * a->S_cap * d * esz;
            blk_ptrs(P, part, prow, nchS * ps, H, grp, kvh, 0, B, pr, pt);
            dec_heads(qb + (size_t)kvh * N * d, (const uint8_t *)kc + kvoff, (const uint8_t *)vc + kvoff, a->kv_f16, d,
                      N, c0, (int)c1, n_min, ps, scale, pr, pt);
            u += c1 - c0;
        }
    }
    /* each row's own last chunks */
    #pragma omp for schedule(static)
    for (int u = 0; u < Hkv * B; u++) {
        const int kvh = u / B, r = u % B, n = n_min + r, nch = (int)dec_nch((size_t)n);
        const size_t kvoff = (size_t)kvh * a->S_cap * d * esz;
        blk_ptrs(P, part, prow, nchS * ps, H, grp, kvh, r, r + 1, pr, pt);
        dec_heads(qb + ((size_t)kvh * B + r) * grp * d, (const uint8_t *)kc + kvoff, (const uint8_t *)vc + kvoff,
                  a->kv_f16, d, grp, c_sh, nch, n, ps, scale, pr, pt);
    }
    /* merge, per head the block's rows in order (colsum) */
    #pragma omp for schedule(static)
    for (int h = 0; h < H; h++)
        for (int r = 0; r < B; r++) {
            const int t = t0 + r, n = n_min + r;
            skv_attn_args ar = *a;
            ar.lastrow = t == T - 1 ? a->lastrow : NULL;
            const size_t row = (size_t)r * H + h;
            dec_merge(out + ((size_t)t * H + h) * d, P + row * prow, part + row * nchS * ps, dec_nch((size_t)n), d, n,
                      &ar, h);
        }
}

size_t skv_attn_row_bytes(const skv_attn_args *a, bool v) {
    const int bits = v ? a->v_bits : a->k_bits;
    return bits ? skv_kvq_row_bytes(a->d, bits) : (size_t)a->d * (a->kv_f16 ? 2 : 4);
}

size_t skv_attention_ws_floats(const skv_attn_args *a, int nth) {
    if (a->k_bits || a->v_bits) return skv_attention_q_ws_floats(a, nth);
    const size_t S = (size_t)a->pos0 + (size_t)a->T;
    const size_t general = (size_t)nth * (S + 8);
    if (!dec_shapes(a)) return general;
    const size_t dec = a->T == 1 ? dec_ws_floats(a->H, a->d, S) : blk_ws_floats(a->T, a->H, a->d, S);
    const size_t bf = skv_attn_bf16_ws_floats(a, nth);   /* used before the exact rows, not beside them */
    const size_t mx = dec > general ? dec : general;
    return bf > mx ? bf : mx;
}

static void attn_any(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws) {
    if (a->k_bits || a->v_bits) {
        skv_attention_q_team(out, q, kc, vc, a, ws);
        return;
    }
    if (dec_applies(a)) {
        dec_tasks(out, q, kc, vc, a, ws);
        return;
    }
    if (!a->knew && dec_shapes(a)) {
        const int nb = skv_attn_bf16_rows(a);   /* 0 unless the opt-in bf16 mode takes rows */
        if (nb > 0) skv_attn_bf16_team(out, q, kc, vc, a, nb, ws);
        for (int t0 = nb; t0 < a->T; t0 += DEC_BLOCK_ROWS) dec_block(out, q, kc, vc, a, t0, ws);
        return;
    }
    if (a->knew) {
        #pragma omp single
        for (int h = 0; h < a->Hkv; h++) store_new_row(kc, vc, a, h);
    }
    attn_tasks(out, q, kc, vc, a, ws + (size_t)omp_get_thread_num() * ((size_t)a->pos0 + a->T + 8));
}

void skv_attention(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a) {
    const int nth = omp_get_max_threads();
    float *ws = skv_aligned_alloc(skv_attention_ws_floats(a, nth) * sizeof(float), "attention workspace");
    if (!ws) return;
    skv_attn_args ro = *a;   /* this entry point only reads the cache */
    ro.knew = ro.vnew = NULL;
    #pragma omp parallel num_threads(nth)
    attn_any(out, q, (void *)kc, (void *)vc, &ro, ws);
    free(ws);
}

void skv_attention_team(float *out, const float *q, void *kc, void *vc, const skv_attn_args *a, float *ws) {
    attn_any(out, q, kc, vc, a, ws);
}
