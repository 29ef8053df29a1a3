/* attention_bf16.c: the opt-in bf16 prefill attention (attention_bf16.h): AMX-BF16 tile
 * products with an online softmax, and its plain reference.
 *
 * Per layer call: each KV head's cached K and V (fp16) are first packed into bf16 B tiles
 * (once, shared by the head's query heads and all query blocks), then one work unit per
 * (query head, block of 16 rows):
 *   Q block (16, d) -> bf16 A tiles (d/32 of them)
 *   per step of 64 keys: S (16, 64) = Q K^T in 4 C tiles (d/32 products each), scaled by
 *   1/sqrt(d), causal mask; per row the running max m and sum l (fp32), O rescaled when m
 *   grows; P = exp(S - m) rounded to bf16 (2 A tiles of 32 keys); O (16, d) += P V, one C tile
 *   per 16 output columns, added into O in memory.
 *   out = O / l.
 * Tile layouts (all tiles 16 rows x 64 bytes, the configuration of skv_amx_begin):
 *   K tile (16-key block kb, 32-dim chunk c): row i, column j = the bf16 pair
 *     (K[16kb+j][32c+2i], K[16kb+j][32c+2i+1]): B of Q K^T, dims paired along rows
 *   V tile (32-key block vb, 16-dim chunk e): row i, column j = (V[32vb+2i][16e+j],
 *     V[32vb+2i+1][16e+j]): B of P V, keys paired along rows
 * Units are independent, so the result does not depend on the thread count or schedule. */
#include "attention_bf16.h"
#include "cpu_caps.h"
#include "gemm_x8_tile.h"
#include "simd_math.h"
#include "common/util.h"
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#define KB 64   /* keys per step: 4 score tiles of 16 keys */
#define QR 16   /* query rows per unit: one tile's rows */

static int prefill_mode = -1;   /* -1: read SKV_PREFILL_ATTN on first use */

int skv_attention_prefill_mode_parse(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "exact")) return SKV_PREFILL_ATTN_EXACT;
    if (!strcmp(name, "bf16")) return SKV_PREFILL_ATTN_BF16;
    return -1;
}

void skv_attention_set_prefill_mode(int mode) {
    __atomic_store_n(&prefill_mode, mode == SKV_PREFILL_ATTN_BF16 ? mode : SKV_PREFILL_ATTN_EXACT, __ATOMIC_RELAXED);
}

int skv_attention_prefill_mode(void) {
    int m = __atomic_load_n(&prefill_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        m = skv_attention_prefill_mode_parse(getenv("SKV_PREFILL_ATTN"));
        if (m < 0) m = SKV_PREFILL_ATTN_EXACT;
        __atomic_store_n(&prefill_mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

int skv_attn_bf16_rows(const skv_attn_args *a) {
    if (a->T < SKV_ATTN_BF16_MIN_T || skv_attention_prefill_mode() != SKV_PREFILL_ATTN_BF16) return 0;
    if (!a->kv_f16 || a->k_bits || a->v_bits || a->knew || a->colsum) return 0;
    if (a->d % 32 || a->d > 256 || a->H % a->Hkv) return 0;
    if (!skv_cpu_amx_bf16()) return 0;
    return a->lastrow ? a->T - 1 : a->T;
}

static size_t pad64f(size_t floats) { return (floats + 15) & ~(size_t)15; }
static size_t s_pad(const skv_attn_args *a) { return ((size_t)a->pos0 + a->T + KB - 1) / KB * KB; }
/* per thread: Q tiles (16 x d bf16), S (16 x 64 fp32), P tiles (2 x 16 x 32 bf16), 4 C tiles,
 * O (16 x d fp32), m (16), the sums by lane (16 x 16) */
static size_t thread_floats(int d) {
    return pad64f((size_t)QR * d / 2) + pad64f(QR * KB) + pad64f(QR * KB / 2) + pad64f(1024) + pad64f((size_t)QR * d) +
           pad64f(QR) + pad64f(QR * 16);
}

size_t skv_attn_bf16_ws_floats(const skv_attn_args *a, int nth) {
    if (!skv_attn_bf16_rows(a)) return 0;
    /* K and V of every KV head as bf16: 2 x 2 bytes an element = one float */
    return 16 + pad64f((size_t)a->Hkv * s_pad(a) * a->d) + (size_t)nth * thread_floats(a->d);
}

/* ---- the reference ---- */
static float bf16(float x) { return skv_bf16_to_f32(skv_f32_to_bf16(x)); }   /* rounded to nearest even */

void skv_attn_bf16_ref(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a) {
    const uint16_t *K = kc, *V = vc;
    const int H = a->H, d = a->d, grp = H / a->Hkv;
    const float scale = 1.0f / sqrtf((float)d);
    const size_t S = (size_t)a->pos0 + a->T;
    float *s = malloc(S * sizeof(float));
    if (!s) return;
    for (int t = 0; t < a->T; t++)
        for (int h = 0; h < H; h++) {
            const float *qr = q + ((size_t)t * H + h) * d;
            const size_t base = (size_t)(h / grp) * a->S_cap * d;
            const int n = a->pos0 + t + 1;
            float mx = -INFINITY;
            for (int k = 0; k < n; k++) {
                float acc = 0;
                for (int i = 0; i < d; i++)
                    acc += bf16(qr[i]) * bf16(skv_f16_to_f32(K[base + (size_t)k * d + i]));
                s[k] = acc * scale;
                if (s[k] > mx) mx = s[k];
            }
            float l = 0;
            for (int k = 0; k < n; k++) {
                const float p = expf(s[k] - mx);
                l += p;
                s[k] = bf16(p);
            }
            float *o = out + ((size_t)t * H + h) * d;
            for (int i = 0; i < d; i++) {
                float acc = 0;
                for (int k = 0; k < n; k++) acc += s[k] * bf16(skv_f16_to_f32(V[base + (size_t)k * d + i]));
                o[i] = acc / l;
            }
        }
    free(s);
}

/* ---- the tile kernel ---- */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")
#endif

#define KI static inline __attribute__((always_inline))
/* C tile c += A tile a x the B tile at p, loaded into B register b */
#define TDP(c, a, b, p)                \
    do {                               \
        _tile_loadd(b, (p), 64);       \
        _tile_dpbf16ps(c, a, b);       \
    } while (0)
/* C tiles c0, c1 += A tile a x the V tiles of output columns e, e + 1 at vb (B registers 5, 6
 * in turn: a load need not wait for the last product) */
#define PV2(c0, c1, a, vb, e)                          \
    do {                                               \
        TDP(c0, a, 5, (vb) + (size_t)(e) * 512);       \
        TDP(c1, a, 6, (vb) + (size_t)((e) + 1) * 512); \
    } while (0)

/* 32 floats -> 32 bf16 (round to nearest even) as 16 pairs */
KI __m512i to_bf16(const float *x) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}
KI __m512i f16_to_bf16(const uint16_t *x) {   /* 32 fp16 -> 32 bf16 */
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)x));
    const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + 16)));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* KV head kvh's keys and values (n valid, zero up to sp) into tiles: Kt (sp/16, d/32, 16, 32)
 * and Vt (sp/32, d/16, 16, 32) in bf16. Work shared by the team (omp for). */
static void pack_kv(uint16_t *Kt, uint16_t *Vt, const uint16_t *K, const uint16_t *V, int d, int n, int sp) {
    const int nc = d / 32, ne = d / 16;
    #pragma omp for schedule(static) nowait
    for (int kb = 0; kb < sp / 16; kb++)
        for (int j = 0; j < 16; j++) {
            const int k = kb * 16 + j;
            for (int c = 0; c < nc; c++) {
                uint32_t w[16] __attribute__((aligned(64)));
                if (k < n) _mm512_store_si512((void *)w, f16_to_bf16(K + (size_t)k * d + c * 32));
                else memset(w, 0, sizeof w);
                uint32_t *tile = (uint32_t *)(Kt + ((size_t)kb * nc + c) * 512);
                for (int i = 0; i < 16; i++) tile[i * 16 + j] = w[i];
            }
        }
    #pragma omp for schedule(static)
    for (int vb = 0; vb < sp / 32; vb++)
        for (int i = 0; i < 16; i++) {
            const int k = vb * 32 + 2 * i;
            for (int e = 0; e < ne; e += 2) {   /* 32 dims of rows k and k + 1 */
                __m512i r0 = _mm512_setzero_si512(), r1 = _mm512_setzero_si512();
                if (k < n) r0 = f16_to_bf16(V + (size_t)k * d + e * 16);
                if (k + 1 < n) r1 = f16_to_bf16(V + (size_t)(k + 1) * d + e * 16);
                /* interleave the two rows' 16-bit values: (r0[j], r1[j]) pairs */
                const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
                const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
                _mm512_store_si512((void *)(Vt + (((size_t)vb * ne + e) * 16 + i) * 32),
                                   _mm512_permutex2var_epi16(r0, idx_lo, r1));
                _mm512_store_si512((void *)(Vt + (((size_t)vb * ne + e + 1) * 16 + i) * 32),
                                   _mm512_permutex2var_epi16(r0, idx_hi, r1));
            }
        }
}

/* O (16, d) columns 16e .. 16(e + nt) - 1 += the nt stored C tiles (16 x 16 each) */
KI void add_into(float *O, const float *Ct, int d, int e, int nt) {
    for (int j = 0; j < nt; j++)
        for (int r = 0; r < QR; r++) {
            float *o = O + (size_t)r * d + (e + j) * 16;
            _mm512_store_ps(o, _mm512_add_ps(_mm512_load_ps(o), _mm512_load_ps(Ct + j * 256 + r * 16)));
        }
}

/* one unit: query head h, rows t0 .. t0 + rows - 1 */
static void unit(float *out, const float *q, const uint16_t *Kt, const uint16_t *Vt, const skv_attn_args *a, int h,
                 int t0, int rows, float *tw) {
    const int H = a->H, d = a->d, nc = d / 32, ne = d / 16;
    const float scale = 1.0f / sqrtf((float)d);
    uint16_t *Qa = (uint16_t *)tw;                       /* (nc, 16, 32) bf16 */
    float *Sb = tw + pad64f((size_t)QR * d / 2);         /* (16, 64) */
    uint16_t *Pa = (uint16_t *)(Sb + pad64f(QR * KB));   /* (2, 16, 32) bf16 */
    float *Ct = Sb + pad64f(QR * KB) + pad64f(QR * KB / 2);
    float *O = Ct + pad64f(1024);                        /* (16, d) */
    float *m = O + pad64f((size_t)QR * d);
    float *lv = m + pad64f(QR);                          /* (16, 16): each row's running sum by lane */
    for (int r = 0; r < QR; r++) {
        const float *src = q + ((size_t)(t0 + (r < rows ? r : rows - 1)) * H + h) * d;
        for (int c = 0; c < nc; c++) _mm512_store_si512((void *)(Qa + ((size_t)c * 16 + r) * 32), to_bf16(src + c * 32));
        m[r] = -INFINITY;
    }
    memset(lv, 0, QR * 16 * sizeof(float));
    memset(O, 0, (size_t)QR * d * sizeof(float));
    const int n_last = a->pos0 + t0 + rows;   /* keys the last row sees */
    const int nb = (n_last + KB - 1) / KB;
    for (int b = 0; b < nb; b++) {
        const int k0 = b * KB;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint16_t *kt = Kt + (size_t)(k0 / 16) * nc * 512;
        for (int c = 0; c < nc; c++) {   /* two B registers in turn: a load need not wait for the last product */
            _tile_loadd(4, Qa + (size_t)c * 512, 64);
            TDP(0, 4, 5, kt + (size_t)(0 * nc + c) * 512);
            TDP(1, 4, 6, kt + (size_t)(1 * nc + c) * 512);
            TDP(2, 4, 5, kt + (size_t)(2 * nc + c) * 512);
            TDP(3, 4, 6, kt + (size_t)(3 * nc + c) * 512);
        }
        _tile_stored(0, Sb, KB * 4);
        _tile_stored(1, Sb + 16, KB * 4);
        _tile_stored(2, Sb + 32, KB * 4);
        _tile_stored(3, Sb + 48, KB * 4);
        const __m512 vsc = _mm512_set1_ps(scale);
        for (int r = 0; r < QR; r++) {
            const int lim = a->pos0 + t0 + (r < rows ? r : rows - 1) + 1;   /* keys < lim */
            __m512 s[4];
            __mmask16 mk[4];
            for (int j = 0; j < 4; j++) {
                const int kj = k0 + 16 * j;
                mk[j] = kj + 16 <= lim ? (__mmask16)0xffff : kj >= lim ? 0 : (__mmask16)((1u << (lim - kj)) - 1);
                s[j] = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), mk[j], _mm512_load_ps(Sb + r * KB + 16 * j), vsc);
            }
            const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
            if (mx > m[r]) {
                if (m[r] > -INFINITY) {
                    const __m512 va = _mm512_set1_ps(expf(m[r] - mx));
                    _mm512_store_ps(lv + r * 16, _mm512_mul_ps(_mm512_load_ps(lv + r * 16), va));
                    for (int i = 0; i < d; i += 16)
                        _mm512_store_ps(O + (size_t)r * d + i, _mm512_mul_ps(_mm512_load_ps(O + (size_t)r * d + i), va));
                }
                m[r] = mx;
            }
            const __m512 vm = _mm512_set1_ps(m[r]);
            __m512 sum = _mm512_setzero_ps();
            for (int j = 0; j < 4; j++) {
                s[j] = _mm512_maskz_mov_ps(mk[j], skv_exp16(_mm512_sub_ps(s[j], vm)));
                sum = _mm512_add_ps(sum, s[j]);
            }
            _mm512_store_ps(lv + r * 16, _mm512_add_ps(_mm512_load_ps(lv + r * 16), sum));
            _mm512_store_si512((void *)(Pa + (size_t)r * 32), (__m512i)_mm512_cvtne2ps_pbh(s[1], s[0]));
            _mm512_store_si512((void *)(Pa + (size_t)(16 + r) * 32), (__m512i)_mm512_cvtne2ps_pbh(s[3], s[2]));
        }
        _tile_loadd(4, Pa, 64);
        _tile_loadd(7, Pa + 512, 64);
        const uint16_t *vt = Vt + (size_t)(k0 / 32) * ne * 512, *vt1 = vt + (size_t)ne * 512;
        /* O += P V, 16 output columns a C tile; four (or two) C tiles in flight so that the
         * products overlap */
        int e = 0;
        for (; e + 4 <= ne; e += 4) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            PV2(0, 1, 4, vt, e);
            PV2(2, 3, 4, vt, e + 2);
            PV2(0, 1, 7, vt1, e);
            PV2(2, 3, 7, vt1, e + 2);
            _tile_stored(0, Ct, 64);
            _tile_stored(1, Ct + 256, 64);
            _tile_stored(2, Ct + 512, 64);
            _tile_stored(3, Ct + 768, 64);
            add_into(O, Ct, d, e, 4);
        }
        if (e < ne) {   /* d = 32 + 64 k: two columns of tiles left */
            _tile_zero(0);
            _tile_zero(1);
            PV2(0, 1, 4, vt, e);
            PV2(0, 1, 7, vt1, e);
            _tile_stored(0, Ct, 64);
            _tile_stored(1, Ct + 256, 64);
            add_into(O, Ct, d, e, 2);
        }
    }
    for (int r = 0; r < rows; r++) {
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_load_ps(lv + r * 16)));
        float *o = out + ((size_t)(t0 + r) * H + h) * d;
        for (int i = 0; i < d; i += 16) _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_load_ps(O + (size_t)r * d + i), inv));
    }
}

void skv_attn_bf16_team(float *out, const float *q, const void *kc, const void *vc, const skv_attn_args *a, int n,
                        float *ws) {
    const int H = a->H, Hkv = a->Hkv, d = a->d, grp = H / Hkv;
    const int sp = (int)s_pad(a), S = a->pos0 + a->T;
    ws = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);   /* the team's workspace is 32-byte aligned */
    uint16_t *KV = (uint16_t *)ws;   /* per KV head: K tiles then V tiles, sp x d each */
    const size_t per = (size_t)sp * d * 2;
    for (int kvh = 0; kvh < Hkv; kvh++) {
        const size_t off = (size_t)kvh * a->S_cap * d;
        pack_kv(KV + kvh * per, KV + kvh * per + (size_t)sp * d, (const uint16_t *)kc + off, (const uint16_t *)vc + off,
                d, S, sp);
    }
    skv_amx_begin();
    float *tw = ws + pad64f((size_t)Hkv * sp * d) + (size_t)omp_get_thread_num() * thread_floats(d);
    const int nblk = (n + QR - 1) / QR;
    /* the last blocks (the most keys) first, so the dynamic schedule ends evenly */
    #pragma omp for schedule(dynamic, 1)
    for (int u = 0; u < nblk * H; u++) {
        const int blk = nblk - 1 - u / H, h = u % H, t0 = blk * QR;
        const uint16_t *Kt = KV + (size_t)(h / grp) * per;
        unit(out, q, Kt, Kt + (size_t)sp * d, a, h, t0, n - t0 < QR ? n - t0 : QR, tw);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
