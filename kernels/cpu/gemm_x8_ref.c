/* gemm_x8_ref.c: the plain reference of the multi-row kernels (gemm_x8.h): each weight row of
 * each x8 group is read back as stored blocks (skv_x8_row) and dotted with each activation row
 * block by block, in the arithmetic of the decode kernels (vecdot_x8.c's top comment):
 *   integer part (exact):  Q4_K  sumi = sum_s sc_s * sum_l q_l y_l,  summ = sum_s m_s * bsum_s
 *                          Q6_K  tot  = sum_g sc_g * sum_l q_l y_l - 32 * sum_g sc_g * bsum_g
 *                                (q the unsigned 6-bit quants, 0..63)
 *                          Q4/Q5 isum = sum_l q_l y_l (q the unsigned 4/5-bit quants)
 *                          Q8_0  isum = sum_l w_l y_l
 *   float part, per block and in block order (fmaf: one rounding, as the vector FMA):
 *                          acc  = fmaf(d * dy, (float)int, acc)
 *                          Q4_K accm = fmaf(dmin * dy, (float)summ, accm); out = acc - accm
 *                          Q4/Q5 acco = fmaf(d or m, sy, acco); out = fmaf(-8 / -16 / 1, acco, acc)
 * which gives the fast kernels' bits exactly (tests/test_gemm_x8.c). */
#include "gemm_x8.h"
#include "vecdot.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int skv_gemm_x8_type(int type) {
    return type == SKV_Q4_K || type == SKV_Q6_K || type == SKV_Q8_0 || type == SKV_Q4_0 || type == SKV_Q4_1 ||
           type == SKV_Q5_0 || type == SKV_Q5_1;
}

int skv_gemm16_min_t(int type) { return type == SKV_Q4_K || type == SKV_Q6_K ? 24 : 16; }

/* Q4_K sub-block j's 6-bit scale and min (the stored 12-byte packing) */
static void scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static float dot_q4_K(const block_q4_K *b, const block_q8_K *y, int64_t nb) {
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < nb; i++) {
        int32_t sumi = 0, summ = 0;
        for (int s = 0; s < 8; s++) {
            int sc, m, dot = 0;
            scale_min(s, b[i].scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = b[i].qs[32 * (s / 2) + l];
                dot += (s % 2 ? byte >> 4 : byte & 15) * y[i].qs[32 * s + l];
            }
            sumi += sc * dot;
            summ += m * (y[i].bsums[2 * s] + y[i].bsums[2 * s + 1]);
        }
        acc = fmaf(skv_h2f(b[i].d) * y[i].d, (float)sumi, acc);
        accm = fmaf(skv_h2f(b[i].dmin) * y[i].d, (float)summ, accm);
    }
    return acc - accm;
}

static float dot_q6_K(const block_q6_K *b, const block_q8_K *y, int64_t nb) {
    float acc = 0;
    for (int64_t i = 0; i < nb; i++) {
        int q[256];
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t a = b[i].ql[64 * h + l], c = b[i].ql[64 * h + 32 + l], hb = b[i].qh[32 * h + l];
                q[128 * h + l] = (a & 15) | (hb & 3) << 4;
                q[128 * h + 32 + l] = (c & 15) | (hb >> 2 & 3) << 4;
                q[128 * h + 64 + l] = (a >> 4) | (hb >> 4 & 3) << 4;
                q[128 * h + 96 + l] = (c >> 4) | (hb >> 6 & 3) << 4;
            }
        int32_t sumi = 0, off = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * g + l] * y[i].qs[16 * g + l];
            sumi += b[i].scales[g] * dot;
            off += b[i].scales[g] * y[i].bsums[g];
        }
        acc = fmaf(skv_h2f(b[i].d) * y[i].d, (float)(sumi - 32 * off), acc);
    }
    return acc;
}

/* the 32-wide types: stored block bytes, the quant of weight l, the offset factor */
static float dot_32(int type, const uint8_t *w, const skv_q8a *y, int64_t nb) {
    const size_t bs = skv_type_block_bytes(type);
    const int hasm = type == SKV_Q4_1 || type == SKV_Q5_1, q5 = type == SKV_Q5_0 || type == SKV_Q5_1;
    float acc = 0, acco = 0;
    for (int64_t i = 0; i < nb; i++, w += bs) {
        uint16_t dh, mh = 0;
        memcpy(&dh, w, 2);
        if (hasm) memcpy(&mh, w + 2, 2);
        const uint8_t *qs = w + (hasm ? 4 : 2) + (q5 ? 4 : 0);
        uint32_t qh = 0;
        if (q5) memcpy(&qh, w + (hasm ? 4 : 2), 4);
        int32_t isum = 0;
        for (int l = 0; l < 32; l++) {
            if (type == SKV_Q8_0) {
                isum += (int8_t)w[2 + l] * y[i].qs[l];
                continue;
            }
            int q = l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
            if (q5) q |= (int)((qh >> l) & 1) << 4;
            isum += q * y[i].qs[l];
        }
        const float d = skv_h2f(dh);
        acc = fmaf(d * y[i].d, (float)isum, acc);
        if (type != SKV_Q8_0) acco = fmaf(hasm ? skv_h2f(mh) : d, y[i].s, acco);
    }
    if (type == SKV_Q8_0) return acc;
    const float off = type == SKV_Q4_0 ? -8.0f : type == SKV_Q5_0 ? -16.0f : 1.0f;
    return fmaf(off, acco, acc);
}

void skv_gemm_x8_ref(int type, int64_t cols, const void *w, size_t group_bytes, int ngroups, const uint8_t *act,
                     size_t ab, int T, float *y, int64_t ldy) {
    const int64_t nb = cols / skv_type_block(type);
    uint8_t *row = malloc(skv_row_bytes(type, cols));
    if (!row) abort();   /* a test-only path: a few KiB */
    for (int g = 0; g < ngroups; g++)
        for (int r = 0; r < 8; r++) {
            skv_x8_row(type, (const uint8_t *)w + (size_t)g * group_bytes, r, 0, nb, row);
            for (int t = 0; t < T; t++) {
                const void *x = act + (size_t)t * ab;
                float v;
                if (type == SKV_Q4_K) v = dot_q4_K((const block_q4_K *)row, x, nb);
                else if (type == SKV_Q6_K) v = dot_q6_K((const block_q6_K *)row, x, nb);
                else v = dot_32(type, row, x, nb);
                y[(size_t)t * ldy + 8 * g + r] = v;
            }
        }
    free(row);
}
