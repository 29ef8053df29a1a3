/* vecdot_n.c: multi-activation decode dots for small T (batched decode, short blocks):
 * one weight row against nt = 1..SKV_DOTN_MAX quantised activation rows,
 *
 *   out[t] = dot(weight row, activation row t)   t < nt, row t at xa + t*xstride bytes
 *
 * Each weight block is loaded and unpacked (nibbles, fifth bits, 6-bit scales) once and
 * multiplied against the nt activation blocks in registers, so the unpacking cost is paid
 * once per weight instead of once per (weight, activation row). The arithmetic per
 * (block, activation) and the float summation order are those of the T = 1 GEMV kernels
 * (the 4-row dot4 kernels of vecdot_q.c for the 32-wide types, the 1-row dots of
 * vecdot_k.c for the k-quants), so every out[t] is bit-identical to the T = 1 result:
 * batched decode gives exactly the logits of one-by-one decode (the Q8 activation
 * quantisation downstream would amplify any rounding difference).
 * Kernels are instantiated per nt (a literal) so the per-row accumulators stay in registers. */
#include "vecdot.h"
#include "vecdot_simd.h"

/* ---------------- 32-wide types ---------------- */


/* kind: 0 Q4_0, 1 Q4_1, 2 Q5_0, 3 Q5_1 (literal). Blocks are taken in pairs (lane 0 =
 * block i, lane 1 = block i+1, as dot4_32 in vecdot_q.c); an odd last block is paired
 * with itself and its lane-1 scale zeroed. Per pair and activation row t:
 *   acc[t] += (dw0*dy0 x4 | dw1*dy1 x4) * (maddubs(lo, ya) + maddubs(hi, yb))
 *   accc[t] += (., c0, ., c1)   with c = m*s (Q4_1/Q5_1) or dw*s (Q4_0/Q5_0). */
static inline __attribute__((always_inline)) void dotn32(int kind, size_t bsz, int nt, int64_t n, const uint8_t *w,
                                                         const uint8_t *xa, size_t xs, float *out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i dup02 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const int q5 = kind >= 2, hasm = kind == 1 || kind == 3;
    const size_t qoff = q5 ? (hasm ? 8 : 6) : (hasm ? 4 : 2);
    const int64_t nb = n / 32;
    __m256 acc[SKV_DOTN_MAX];
    __m128 accc[SKV_DOTN_MAX];
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) { acc[t] = _mm256_setzero_ps(); accc[t] = _mm_setzero_ps(); }
    for (int64_t i = 0; i + 1 < nb; i += 2) {
        const uint8_t *b0 = w + (size_t)i * bsz, *b1 = b0 + bsz;
        __m256i lo, hi;
        skv_quants_pair32(q5, b0, b1, qoff, &lo, &hi);
        __m128 sc = skv_half2_pair(b0, b1);
        if (!hasm) sc = _mm_moveldup_ps(sc);
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const skv_q8a *y = (const skv_q8a *)(const void *)(xa + (size_t)t * xs);
                const __m256i ya = skv_load2x16(y[i].qs, y[i + 1].qs), yb = skv_load2x16(y[i].qs + 16, y[i + 1].qs + 16);
                __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ya), _mm256_maddubs_epi16(hi, yb));
                __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                __m128 f = _mm_mul_ps(sc, skv_act_pair(y + i, y + i + 1));
                accc[t] = _mm_add_ps(accc[t], f);
                acc[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), dup02), p, acc[t]);
            }
        }
    }
    /* reduction exactly as dot4_32 (vecdot_q.c), unused rows zero */
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t >= nt) { acc[t] = _mm256_setzero_ps(); accc[t] = _mm_setzero_ps(); }
    const float off = skv_off32(kind);
    float r4[4];
    _mm_storeu_ps(r4, skv_rows4_32(acc[0], acc[1], acc[2], acc[3], accc[0], accc[1], accc[2], accc[3], off));
    for (int t = 0; t < nt; t++) out[t] = r4[t];
    if (nb & 1) {   /* odd block count: the last block as dot4_32 does it */
        const int64_t i = nb - 1;
        const uint8_t *b0 = w + (size_t)i * bsz;
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(b0 + qoff)), 4),
                                                      _mm_loadu_si128((const __m128i *)(b0 + qoff))), low4);
        if (q5) {   /* fifth bits in natural order: bit j -> weight j */
            uint32_t qh;
            __builtin_memcpy(&qh, b0 + qoff - 4, 4);
            const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
            const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
            __m256i hv = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
            hv = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, bits), bits), _mm256_set1_epi8(0x10));
            q = _mm256_or_si256(q, hv);
        }
        __m128 sc = skv_half2_pair(b0, b0);
        if (!hasm) sc = _mm_moveldup_ps(sc);
        for (int t = 0; t < nt; t++) {
            const skv_q8a *y = (const skv_q8a *)(const void *)(xa + (size_t)t * xs);
            __m128 f = _mm_mul_ps(sc, skv_act_pair(y + i, y + i));
            __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(
                _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y[i].qs)), ones));
            out[t] += _mm_cvtss_f32(f) * skv_hsum8(p) + off * _mm_cvtss_f32(_mm_shuffle_ps(f, f, 1));
        }
    }
}

/* Q8_0: the sign trick (|q| . sign(qy, q)), |q| shared by the nt rows; blocks in pairs
 * with even/odd accumulators and the 4-row reduction, as row_q8_0 / skv_vec_dot4_q8_0. */
static inline __attribute__((always_inline)) void dotn_q8(int nt, int64_t n, const uint8_t *w, const uint8_t *xa,
                                                          size_t xs, float *out) {
    const __m256i ones = _mm256_set1_epi16(1);
    const block_q8_0 *b = (const block_q8_0 *)(const void *)w;
    const int64_t nb = n / QK8_0;
    __m256 acc0[SKV_DOTN_MAX], acc1[SKV_DOTN_MAX];
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs), q1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);
        const __m128 dw = _mm_moveldup_ps(skv_half2_pair(&b[i].d, &b[i + 1].d));
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const skv_q8a *y = (const skv_q8a *)(const void *)(xa + (size_t)t * xs);
                const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs), y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(y0, q0)), ones);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(y1, q1)), ones);
                __m128 f = _mm_mul_ps(dw, skv_act_pair(y + i, y + i + 1));
                acc0[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), _mm256_cvtepi32_ps(p0), acc0[t]);
                acc1[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_set1_epi32(2)),
                                          _mm256_cvtepi32_ps(p1), acc1[t]);
            }
        }
    }
    if (i < nb) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs), a0 = _mm256_sign_epi8(q0, q0);
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const skv_q8a *y = (const skv_q8a *)(const void *)(xa + (size_t)t * xs);
                __m256i y0 = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[i].qs), q0);
                __m256 p0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(a0, y0), ones));
                acc0[t] = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y[i].d), p0, acc0[t]);
            }
        }
    }
    __m256 a[SKV_DOTN_MAX];
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) a[t] = t < nt ? _mm256_add_ps(acc0[t], acc1[t]) : _mm256_setzero_ps();
    float r4[4];
    _mm_storeu_ps(r4, skv_hsum4x8(a[0], a[1], a[2], a[3]));
    for (int t = 0; t < nt; t++) out[t] = r4[t];
}

/* ---------------- k-quants ---------------- */

/* Q4_K / Q5_K (qh NULL for Q4_K): per super-block the 16 6-bit scales/mins are unpacked
 * once, each 32-weight sub-block's quants once; per activation row t:
 *   acc[t] += d*dy_t * sum_j sc_j*sum(q*qy_t)  -  dmin*dy_t * sum_j m_j*bsums_t. */
static inline __attribute__((always_inline)) void dotn_q45K(int nt, int64_t n, const uint8_t *w, size_t bsz,
                                                            int q5, const uint8_t *xa, size_t xs, float *out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    /* offsets inside the block: d, dmin at 0; scales at 4; Q5_K: qh at 16, qs at 48; Q4_K: qs at 16 */
    const size_t qsoff = q5 ? 48 : 16;
    __m256 acc[SKV_DOTN_MAX], accm[SKV_DOTN_MAX];
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *blk = w + (size_t)i * bsz;
        uint32_t dd;
        __builtin_memcpy(&dd, blk, 4);
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));   /* d, dmin */
        const __m128i sm16 = skv_kq_unpack_scales(blk + 4);
        const __m128i m8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm16, 8));
        const __m256i m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm16));
        const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        __m256i sumi[SKV_DOTN_MAX];
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) sumi[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(blk + qsoff + 32 * j));
            __m256i lo = _mm256_and_si256(v, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (q5) {
                __m256i bl = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one);
                __m256i bh = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
            }
            const __m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_kq_pick[2 * j]));
            const __m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_kq_pick[2 * j + 1]));
            #pragma GCC unroll 8
            for (int t = 0; t < SKV_DOTN_MAX; t++) {
                if (t < nt) {
                    const int8_t *qy = ((const block_q8_K *)(const void *)(xa + (size_t)t * xs))[i].qs;
                    __m256i y0 = _mm256_loadu_si256((const __m256i *)(qy + 64 * j));
                    __m256i y1 = _mm256_loadu_si256((const __m256i *)(qy + 64 * j + 32));
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
                }
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const block_q8_K *y = (const block_q8_K *)(const void *)(xa + (size_t)t * xs) + i;
                const __m128 dv = _mm_mul_ps(dm, _mm_set1_ps(y->d));
                __m256i mprod = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)y->bsums));
                accm[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dv)), _mm256_cvtepi32_ps(mprod), accm[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) out[t] = skv_hsum8(_mm256_sub_ps(acc[t], accm[t]));
}

/* Q6_K: the four 6-bit quant vectors of each half are rebuilt once; per row t
 *   acc[t] += d*dy_t * (sum_g sc_g * sum(q*qy_t over g) - 32 * sum_g sc_g * bsums_t[g]). */
static inline __attribute__((always_inline)) void dotn_q6K(int nt, int64_t n, const uint8_t *w, const uint8_t *xa,
                                                           size_t xs, float *out) {
    const block_q6_K *b = (const block_q6_K *)(const void *)w;
    const __m256i low4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[SKV_DOTN_MAX];
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        const __m256i scw = _mm256_cvtepi8_epi16(sc8);
        __m256i sumi[SKV_DOTN_MAX];
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const block_q8_K *y = (const block_q8_K *)(const void *)(xa + (size_t)t * xs) + i;
                sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                    _mm256_slli_epi32(_mm256_madd_epi16(scw, _mm256_loadu_si256((const __m256i *)y->bsums)), 5));
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * h + 32));
            const __m256i hh = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                /* quants k of this half, built when used (keeps the registers for the nt sums) */
                const __m256i lk = (k & 1) ? l1 : l0;
                const __m256i lo = (k < 2) ? _mm256_and_si256(lk, low4) : _mm256_and_si256(_mm256_srli_epi16(lk, 4), low4);
                const __m256i hk = k == 0 ? _mm256_slli_epi16(hh, 4) : k == 1 ? _mm256_slli_epi16(hh, 2)
                                 : k == 2 ? hh : _mm256_srli_epi16(hh, 2);
                const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hk, m30));
                const __m256i scale = _mm256_shuffle_epi8(sc16, _mm256_load_si256((const __m256i *)skv_q6k_pick[k]));
                #pragma GCC unroll 8
                for (int t = 0; t < SKV_DOTN_MAX; t++) {
                    if (t < nt) {
                        const int8_t *qy = ((const block_q8_K *)(const void *)(xa + (size_t)t * xs))[i].qs;
                        __m256i yv = _mm256_loadu_si256((const __m256i *)(qy + 128 * h + 32 * k));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, yv), scale));
                    }
                }
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < SKV_DOTN_MAX; t++) {
            if (t < nt) {
                const block_q8_K *y = (const block_q8_K *)(const void *)(xa + (size_t)t * xs) + i;
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(skv_h2f(b[i].d) * y->d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < SKV_DOTN_MAX; t++) if (t < nt) out[t] = skv_hsum8(acc[t]);
}

/* ---------------- entry points: dispatch nt to a literal ---------------- */

#define CALLQ4_0(k) dotn32(0, sizeof(block_q4_0), k, n, w, xa, xs, out)
#define CALLQ4_1(k) dotn32(1, sizeof(block_q4_1), k, n, w, xa, xs, out)
#define CALLQ5_0(k) dotn32(2, sizeof(block_q5_0), k, n, w, xa, xs, out)
#define CALLQ5_1(k) dotn32(3, sizeof(block_q5_1), k, n, w, xa, xs, out)
static void dotn_q4_0(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ4_0) }
static void dotn_q4_1(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ4_1) }
static void dotn_q5_0(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ5_0) }
static void dotn_q5_1(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ5_1) }

#define CALLQ8(k) dotn_q8(k, n, w, xa, xs, out)
static void dotn_q8_0(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ8) }
#define CALLQ4K(k) dotn_q45K(k, n, w, sizeof(block_q4_K), 0, xa, xs, out)
static void dotn_q4_K(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ4K) }
#define CALLQ5K(k) dotn_q45K(k, n, w, sizeof(block_q5_K), 1, xa, xs, out)
static void dotn_q5_K(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ5K) }
#define CALLQ6K(k) dotn_q6K(k, n, w, xa, xs, out)
static void dotn_q6_K(int64_t n, const void *w, const void *xa, size_t xs, int nt, float *out) { SKV_DISPATCH_NT(CALLQ6K) }

skv_vec_dotn_fn skv_vec_dotn_for(int wtype) {
    switch (wtype) {
    case SKV_Q4_0: return dotn_q4_0;
    case SKV_Q4_1: return dotn_q4_1;
    case SKV_Q5_0: return dotn_q5_0;
    case SKV_Q5_1: return dotn_q5_1;
    case SKV_Q8_0: return dotn_q8_0;
    case SKV_Q4_K: return dotn_q4_K;
    case SKV_Q5_K: return dotn_q5_K;
    case SKV_Q6_K: return dotn_q6_K;
    default: return NULL;
    }
}
