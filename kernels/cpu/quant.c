/* quant.c: the scalar reference (de)quantisers (the type table is kernels/types.c).
 *
 * These are the readable references every fast kernel is checked against. Block
 * layouts are described in quant.h. Each dequantiser maps one block to its weights
 * in storage order; each quantiser is the simple "scale from the max" scheme (good
 * enough for tests and for activations, not a replacement for llama.cpp's searched
 * k-quant scales). Callers must pass a supported type and n a multiple of the block
 * size (skv_row_bytes checks both); otherwise the error is recorded and dequant fills
 * dst with NaN so the misuse cannot go unnoticed. */
#include "quant.h"
#include "common/util.h"
#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static inline float h2f(uint16_t h) { return skv_f16_to_f32(h); }
static inline uint16_t f2h(float f) { return skv_f32_to_f16(f); }

static inline int nearest_int(float x) { return (int)lrintf(x); }

static inline int clampi(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Q4_K / Q5_K: 8 sub-blocks, each a 6-bit scale and a 6-bit min, packed in 12 bytes.
 *   sub-blocks 0..3: scale = s[j] & 63,           min = s[j+4] & 63
 *   sub-blocks 4..7: scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
 *                    min   = (s[j+4] >> 4) | (s[j]   >> 6) << 4   */
static inline void k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Inverse of k_scale_min: sc[8], m[8] in 0..63 -> 12 bytes. */
static void k_pack_scales(const int *sc, const int *m, uint8_t *s) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* ---------------------------------------------------------------- dequantisers */

static void dq_q4_0(const block_q4_0 *b, float *y) {
    float d = h2f(b->d);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = d * (float)((b->qs[j] & 15) - 8);
        y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
    }
}

static void dq_q4_1(const block_q4_1 *b, float *y) {
    float d = h2f(b->d), m = h2f(b->m);
    for (int j = 0; j < QK4_1 / 2; j++) {
        y[j] = d * (float)(b->qs[j] & 15) + m;
        y[j + 16] = d * (float)(b->qs[j] >> 4) + m;
    }
}

/* Q5_x: bit j of the little-endian u32 qh is the 5th bit of weight j (j = 0..31). */
static void dq_q5_0(const block_q5_0 *b, float *y) {
    float d = h2f(b->d);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void dq_q5_1(const block_q5_1 *b, float *y) {
    float d = h2f(b->d), m = h2f(b->m);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < 16; j++) {
        int lo = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void dq_q8_0(const block_q8_0 *b, float *y) {
    float d = h2f(b->d);
    for (int j = 0; j < QK8_0; j++) y[j] = d * (float)b->qs[j];
}

/* Q4_K: 4 chunks of 64 weights; chunk c uses qs[32c .. 32c+31]: low nibbles are
 * sub-block 2c, high nibbles sub-block 2c+1. */
static void dq_q4_K(const block_q4_K *b, float *y) {
    float d = h2f(b->d), dmin = h2f(b->dmin);
    for (int c = 0; c < 4; c++) {
        int sc0, m0, sc1, m1;
        k_scale_min(2 * c, b->scales, &sc0, &m0);
        k_scale_min(2 * c + 1, b->scales, &sc1, &m1);
        const uint8_t *q = b->qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d * (float)sc0 * (float)(q[l] & 15) - dmin * (float)m0;
            y[64 * c + 32 + l] = d * (float)sc1 * (float)(q[l] >> 4) - dmin * (float)m1;
        }
    }
}

/* Q5_K: as Q4_K; the 5th bit of weight 32s + l (sub-block s) is bit s of qh[l]. */
static void dq_q5_K(const block_q5_K *b, float *y) {
    float d = h2f(b->d), dmin = h2f(b->dmin);
    for (int c = 0; c < 4; c++) {
        int sc0, m0, sc1, m1;
        k_scale_min(2 * c, b->scales, &sc0, &m0);
        k_scale_min(2 * c + 1, b->scales, &sc1, &m1);
        const uint8_t *q = b->qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            int lo = (q[l] & 15) | (((b->qh[l] >> (2 * c)) & 1) << 4);
            int hi = (q[l] >> 4) | (((b->qh[l] >> (2 * c + 1)) & 1) << 4);
            y[64 * c + l] = d * (float)sc0 * (float)lo - dmin * (float)m0;
            y[64 * c + 32 + l] = d * (float)sc1 * (float)hi - dmin * (float)m1;
        }
    }
}

/* Q6_K: two halves of 128 weights; half h uses ql[64h..64h+63], qh[32h..32h+31].
 * Within a half, for l < 32:
 *   w[l]    = ql[l]    low  | qh[l] bits 0-1     w[l+32] = ql[l+32] low  | qh[l] bits 2-3
 *   w[l+64] = ql[l]    high | qh[l] bits 4-5     w[l+96] = ql[l+32] high | qh[l] bits 6-7
 * and weight i of the block uses scales[i / 16]. */
static void dq_q6_K(const block_q6_K *b, float *y) {
    float d = h2f(b->d);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        float *yh = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            const int8_t *sc = b->scales + 8 * h;
            yh[l] = d * (float)sc[l / 16] * (float)q0;
            yh[l + 32] = d * (float)sc[2 + l / 16] * (float)q1;
            yh[l + 64] = d * (float)sc[4 + l / 16] * (float)q2;
            yh[l + 96] = d * (float)sc[6 + l / 16] * (float)q3;
        }
    }
}

static void dq_q8_K(const block_q8_K *b, float *y) {
    for (int j = 0; j < QK_K; j++) y[j] = b->d * (float)b->qs[j];
}

void skv_dequant_row(int type, const void *src, float *dst, int64_t n) {
    if (skv_row_bytes(type, n) == 0) {
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
    const uint8_t *p = src;
    int64_t nb = n / skv_type_block(type);
    switch (type) {
    case SKV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case SKV_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = h2f(h);
        }
        return;
    case SKV_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = skv_bf16_to_f32(h);
        }
        return;
    default: break;
    }
    /* Blocks are read through memcpy'd copies: mmapped rows need not be aligned. */
    for (int64_t i = 0; i < nb; i++) {
        size_t bb = skv_type_block_bytes(type);
        const uint8_t *bp = p + (size_t)i * bb;
        float *y = dst + i * skv_type_block(type);
        switch (type) {
        case SKV_Q4_0: { block_q4_0 b; memcpy(&b, bp, sizeof b); dq_q4_0(&b, y); break; }
        case SKV_Q4_1: { block_q4_1 b; memcpy(&b, bp, sizeof b); dq_q4_1(&b, y); break; }
        case SKV_Q5_0: { block_q5_0 b; memcpy(&b, bp, sizeof b); dq_q5_0(&b, y); break; }
        case SKV_Q5_1: { block_q5_1 b; memcpy(&b, bp, sizeof b); dq_q5_1(&b, y); break; }
        case SKV_Q8_0: { block_q8_0 b; memcpy(&b, bp, sizeof b); dq_q8_0(&b, y); break; }
        case SKV_Q4_K: { block_q4_K b; memcpy(&b, bp, sizeof b); dq_q4_K(&b, y); break; }
        case SKV_Q5_K: { block_q5_K b; memcpy(&b, bp, sizeof b); dq_q5_K(&b, y); break; }
        case SKV_Q6_K: { block_q6_K b; memcpy(&b, bp, sizeof b); dq_q6_K(&b, y); break; }
        case SKV_Q8_K: { block_q8_K b; memcpy(&b, bp, sizeof b); dq_q8_K(&b, y); break; }
        default: break;
        }
    }
}

/* ---------------------------------------------------------------- quantisers */
/* Weights are quantised against the stored (fp16-rounded) scale and min, so the
 * round-trip error stays within half a step of what is actually stored. */

/* Signed value of largest magnitude and the magnitude itself. */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) { amax = a; max = x[j]; }
    }
    if (amax_out) *amax_out = amax;
    return max;
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Q4_0: d = max / -8 so the largest-magnitude weight maps to q = 0 exactly. */
static void q_q4_0(const float *x, block_q4_0 *b) {
    float max = signed_absmax(x, 32, NULL);
    b->d = f2h(max / -8.0f);
    float d = h2f(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++) {
        int lo = clampi(nearest_int(x[j] * id) + 8, 0, 15);
        int hi = clampi(nearest_int(x[j + 16] * id) + 8, 0, 15);
        b->qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

static void q_q4_1(const float *x, block_q4_1 *b) {
    float mn, mx;
    minmax(x, 32, &mn, &mx);
    b->d = f2h((mx - mn) / 15.0f);
    b->m = f2h(mn);
    float d = h2f(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    mn = h2f(b->m);
    for (int j = 0; j < 16; j++) {
        int lo = clampi(nearest_int((x[j] - mn) * id), 0, 15);
        int hi = clampi(nearest_int((x[j + 16] - mn) * id), 0, 15);
        b->qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

static void q_q5_0(const float *x, block_q5_0 *b) {
    float max = signed_absmax(x, 32, NULL);
    b->d = f2h(max / -16.0f);
    float d = h2f(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int lo = clampi(nearest_int(x[j] * id) + 16, 0, 31);
        int hi = clampi(nearest_int(x[j + 16] * id) + 16, 0, 31);
        b->qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
        qh |= (uint32_t)(lo >> 4) << j;
        qh |= (uint32_t)(hi >> 4) << (j + 16);
    }
    memcpy(b->qh, &qh, 4);
}

static void q_q5_1(const float *x, block_q5_1 *b) {
    float mn, mx;
    minmax(x, 32, &mn, &mx);
    b->d = f2h((mx - mn) / 31.0f);
    b->m = f2h(mn);
    float d = h2f(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    mn = h2f(b->m);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int lo = clampi(nearest_int((x[j] - mn) * id), 0, 31);
        int hi = clampi(nearest_int((x[j + 16] - mn) * id), 0, 31);
        b->qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
        qh |= (uint32_t)(lo >> 4) << j;
        qh |= (uint32_t)(hi >> 4) << (j + 16);
    }
    memcpy(b->qh, &qh, 4);
}

static void q_q8_0(const float *x, block_q8_0 *b) {
    float amax;
    signed_absmax(x, 32, &amax);
    b->d = f2h(amax / 127.0f);
    float d = h2f(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) b->qs[j] = (int8_t)clampi(nearest_int(x[j] * id), -127, 127);
}

/* Q8_K: symmetric, d = amax / 127; bsums[g] = sum of qs[16g .. 16g+15]. */
static void q_q8_K(const float *x, block_q8_K *b) {
    float amax;
    signed_absmax(x, QK_K, &amax);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = d;
    for (int j = 0; j < QK_K; j++) b->qs[j] = (int8_t)clampi(nearest_int(x[j] * id), -127, 127);
    for (int g = 0; g < QK_K / 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += b->qs[16 * g + j];
        b->bsums[g] = (int16_t)s;
    }
}

/* Q4_K / Q5_K (nmax = 15 or 31): per sub-block of 32, an affine scale from min/max
 * (min clamped to <= 0, as the format stores a non-negative min to subtract); the 8
 * scales and 8 mins are then quantised to 6 bits against super-block d and dmin. */
static void q_kaffine(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                      uint8_t *scales, uint8_t *q /* 256 values 0..nmax */) {
    float sub_scale[8], sub_min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; s++) {
        float mn, mx;
        minmax(x + 32 * s, 32, &mn, &mx);
        if (mn > 0.0f) mn = 0.0f;
        sub_scale[s] = (mx - mn) / (float)nmax;
        sub_min[s] = -mn;
        if (sub_scale[s] > max_scale) max_scale = sub_scale[s];
        if (sub_min[s] > max_min) max_min = sub_min[s];
    }
    float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    *d_out = f2h(d);
    *dmin_out = f2h(dmin);
    d = h2f(*d_out);        /* quantise against the stored (rounded) values */
    dmin = h2f(*dmin_out);
    int sc[8], m[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = d > 0.0f ? clampi(nearest_int(sub_scale[s] / d), 0, 63) : 0;
        m[s] = dmin > 0.0f ? clampi(nearest_int(sub_min[s] / dmin), 0, 63) : 0;
        float ds = d * (float)sc[s], dm = dmin * (float)m[s];
        for (int l = 0; l < 32; l++) {
            float v = x[32 * s + l];
            q[32 * s + l] = (uint8_t)(ds > 0.0f ? clampi(nearest_int((v + dm) / ds), 0, nmax) : 0);
        }
    }
    k_pack_scales(sc, m, scales);
}

static void q_q4_K(const float *x, block_q4_K *b) {
    uint8_t q[QK_K];
    q_kaffine(x, 15, &b->d, &b->dmin, b->scales, q);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

static void q_q5_K(const float *x, block_q5_K *b) {
    uint8_t q[QK_K];
    q_kaffine(x, 31, &b->d, &b->dmin, b->scales, q);
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b->qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            b->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        }
}

/* Q6_K: per sub-block of 16 a symmetric scale amax / 31 (codes -31..31 of -32..31);
 * the 16 scales are quantised to int8 against d = (largest scale) / 127. */
static void q_q6_K(const float *x, block_q6_K *b) {
    float sub_scale[16], amax_scale = 0.0f;
    for (int s = 0; s < 16; s++) {
        float amax;
        signed_absmax(x + 16 * s, 16, &amax);
        sub_scale[s] = amax / 31.0f;
        if (sub_scale[s] > amax_scale) amax_scale = sub_scale[s];
    }
    b->d = f2h(amax_scale / 127.0f);
    float d = h2f(b->d);
    int q[QK_K];
    for (int s = 0; s < 16; s++) {
        int sc = d > 0.0f ? clampi(nearest_int(sub_scale[s] / d), -128, 127) : 0;
        b->scales[s] = (int8_t)sc;
        float ds = d * (float)sc;
        for (int l = 0; l < 16; l++)
            q[16 * s + l] = ds != 0.0f ? clampi(nearest_int(x[16 * s + l] / ds), -32, 31) + 32 : 32;
    }
    for (int h = 0; h < 2; h++) {
        const int *qq = q + 128 * h;
        uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
            ql[l + 32] = (uint8_t)((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
            qh[l] = (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                              ((qq[l + 96] >> 4) << 6));
        }
    }
}

void skv_quant_row(int type, const float *src, void *dst, int64_t n) {
    if (skv_row_bytes(type, n) == 0) return;
    uint8_t *p = dst;
    switch (type) {
    case SKV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case SKV_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f2h(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    case SKV_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = skv_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    default: break;
    }
    int bs = skv_type_block(type);
    size_t bb = skv_type_block_bytes(type);
    for (int64_t i = 0; i < n / bs; i++) {
        const float *x = src + i * bs;
        uint8_t *bp = p + (size_t)i * bb;
        switch (type) {
        case SKV_Q4_0: { block_q4_0 b; q_q4_0(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q4_1: { block_q4_1 b; q_q4_1(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q5_0: { block_q5_0 b; q_q5_0(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q5_1: { block_q5_1 b; q_q5_1(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q8_0: { block_q8_0 b; q_q8_0(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q4_K: { block_q4_K b; q_q4_K(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q5_K: { block_q5_K b; q_q5_K(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q6_K: { block_q6_K b; q_q6_K(x, &b); memcpy(bp, &b, sizeof b); break; }
        case SKV_Q8_K: { block_q8_K b; q_q8_K(x, &b); memcpy(bp, &b, sizeof b); break; }
        default: break;
        }
    }
}
