/* vecdot_x8.c: the 8-row interleaved decode layout (Q4_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1) and its GEMV kernels.
 *
 * The stored layout keeps each row's blocks together, so a one-row kernel spends most of
 * its instructions on per-row work that does not scale with the bytes: unpacking each
 * super-block's 6-bit scales, picking a scale per sub-block, horizontal sums. Here the
 * rows go in groups of 8 and every 32-bit lane of a vector belongs to one row, so that
 * work is done once for 8 rows, and the integer products of a sub-block add up in int16
 * before one multiply by the 8 rows' scales.
 *
 * Group g (rows 8g .. 8g+7) takes the same bytes as those 8 stored rows, at the same
 * offset (8g rows x row bytes); block column i of the group is one x8 block of 8 stored
 * blocks' bytes, so a matrix is repacked in place (runtime/model/model_pack.c) and costs no
 * memory. Every quant vector of an x8 block holds 4 bytes of each row (row r at bytes
 * 4r .. 4r+3), so a maddubs with 4 activation bytes broadcast to all lanes gives each
 * row's products in that row's lane.
 *
 * Q4_K (256 weights a block):
 *   d[8], dmin[8]   the rows' fp16 scales                       32 bytes
 *   sc[12][8]       byte k of row r's packed 6-bit scales at 8k + r   96 bytes
 *   qs[4][8][8][4]  (j, t, r): row r's qs[32j + 4t .. 32j + 4t + 3]   1024 bytes
 * In qs, byte b of row r's group j holds weight b of sub-block 2j (low nibble) and weight b
 * of sub-block 2j + 1 (high nibble), as in the stored block.
 *
 * The Q4_K kernel: for each x8 block and each j, eight 32-byte vectors (t = 0..7) each hold 4
 * bytes of every row; their low nibbles times the broadcast activation bytes
 * qy[64j + 4t ..] (maddubs) add up in int16 (8 x 2 x 15 x 127 = 30480 < 32767) to one
 * vector for sub-block 2j, the high nibbles to one for 2j + 1; madd with ones and a 32-bit
 * multiply by the rows' sub-block scales give 8 int32 row sums. The mins term
 * sum_s m_s * (bsums[2s] + bsums[2s+1]) is one madd per pair of sub-blocks. Per x8 block
 * two float FMAs fold d*dy and dmin*dy. Integer sums are exact, so the result differs from
 * the stored-layout kernels only by float rounding (one conversion per super-block and
 * row instead of eight lanes). One thread, the 8960 x 1536 matrix in cache: 22 -> 36 GB/s.
 *
 * Q6_K (256 weights a block):
 *   d[8]               the rows' fp16 scales                         16 bytes
 *   sc[16][8]          (g, r): row r's int8 scale of group g          128 bytes
 *   q[2][8][3][8][4]   (h, u, v, r): row r's 4 bytes at                1536 bytes
 *                      v = 0: ql[64h + 4u ..]  (A), 1: ql[64h + 32 + 4u ..] (B), 2: qh[32h + 4u ..] (H)
 * so the kernel reads each block front to back (with three interleaved streams of ql / qh
 * the hardware prefetcher lost track: 16 GB/s streamed against 35 for the stored rows).
 * The Q6_K kernel: per half h and u = 0..7, the vectors A, B and H give the 6-bit quants of
 * weights 128h + 32k + 4u .. +3 for k = 0..3
 * (A low / B low / A high / B high nibbles, with H's bit pairs 0-1 / 2-3 / 4-5 / 6-7 as bits
 * 4-5), as the stored block's dequantiser reads them. Four u's make a group of 16 weights:
 * their products with the activation (all 0..63 x 127: two maddubs sum in int16) add up to
 * one int32 per row, times the row's group scale; the -32 offset is
 * 32 * sum_g sc_g * bsums_g, one madd per pair of groups (as Q4_K's mins).
 *
 * The 32-wide types (32 weights a block; fp16 d, fp16 m for Q4_1/Q5_1):
 *   Q8_0:  d[8]                          16 bytes, qs[8 t][8 r][4]: row r's qs[4t .. 4t+3]
 *   Q4_0/Q4_1/Q5_0/Q5_1: d[8] (m[8]) (qh'[4 t]) qs[4 t][8 r][4]: row r's qs[4t .. 4t+3],
 *     whose low nibbles are weights 4t .. 4t+3 and high nibbles 16+4t .. 16+4t+3.
 *     qh'[t] (64 bits, Q5 only) holds the fifth bits of vector t's bytes: the low nibble's
 *     of byte j = 8k + b (row 2k + b/4) at bit 8b + k, the high nibble's at 8b + 4 + k, so
 *     the broadcast word shifted per qword left by (4, 3, 2, 1) or right by (0, 1, 2, 3)
 *     has every byte's bit at bit 4 (as the pair-packed layout, vecdot_pack.c).
 * Their kernel: per x8 block, the int16 products of the 4 vectors add up (Q4: all 8
 * maddubs, 8 x 2 x 15 x 127 < 32767; Q5: 4 at a time), one madd gives the 8 rows' integer
 * sums, and two FMAs add d*dy * sum and the offset term (-8 d*sy, -16 d*sy, or m*sy with
 * sy = dy * sum(qy), the activation's block sum). Q8_0 weights are signed: each vector
 * goes through |w| . sign(y, w) and its own madd (two products of 128 x 127 fill int16).
 *
 * Every kernel takes 1..4 activation rows (batched decode): the weights are unpacked once
 * and each row goes through the same operations in the same order whatever their number,
 * so a row's result does not depend on its batch. The scalar reference is the stored
 * layout's: skv_x8_row gives the stored blocks back (tests compare through it).
 *
 * The kernels themselves are in vecdot_x8_kernels.h, built twice: here for AVX2 and in
 * vecdot_x8_vnni.c for AVX-512 VNNI (dpbusd: the same int32 sums in one instruction, same
 * bits); skv_vec_dot8n_for picks by the CPU (cpu_caps.c). One thread, cache-resident,
 * AVX2 -> VNNI: Q5_0 28 -> 40 GB/s, Q4_K 36 -> 42, Q4_1 43 -> 47, Q8_0 53 -> 57. */
#include "cpu_caps.h"
#define X8_VNNI 0
#define X8_FOR skv_vec_dot8n_avx2_for
#include "vecdot_x8_kernels.h"

int skv_x8_supported(int type, int64_t rows, int64_t cols) {
    const bool t = type == SKV_Q4_K || type == SKV_Q6_K || type == SKV_Q8_0 || type == SKV_Q4_0 ||
                   type == SKV_Q4_1 || type == SKV_Q5_0 || type == SKV_Q5_1;
    return t && rows > 0 && rows % 8 == 0 && cols > 0 && cols % skv_type_block(type) == 0;
}

/* ---- Q4_K: 8 stored blocks <-> one x8 block ---- */

static void q4k_to_x8(const block_q4_K *const src[8], block_q4_K_x8 *dst) {
    for (int r = 0; r < 8; r++) {
        const block_q4_K *b = src[r];
        dst->d[r] = b->d;
        dst->dmin[r] = b->dmin;
        for (int k = 0; k < 12; k++) dst->sc[8 * k + r] = b->scales[k];
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < 8; t++) memcpy(dst->qs + 256 * j + 32 * t + 4 * r, b->qs + 32 * j + 4 * t, 4);
    }
}

static void q4k_from_x8(const block_q4_K_x8 *src, int r, block_q4_K *b) {
    b->d = src->d[r];
    b->dmin = src->dmin[r];
    for (int k = 0; k < 12; k++) b->scales[k] = src->sc[8 * k + r];
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < 8; t++) memcpy(b->qs + 32 * j + 4 * t, src->qs + 256 * j + 32 * t + 4 * r, 4);
}

/* ---- Q6_K: 8 stored blocks <-> one x8 block ---- */

static void q6k_to_x8(const block_q6_K *const src[8], block_q6_K_x8 *dst) {
    for (int r = 0; r < 8; r++) {
        const block_q6_K *b = src[r];
        dst->d[r] = b->d;
        for (int g = 0; g < 16; g++) dst->sc[8 * g + r] = b->scales[g];
        for (int h = 0; h < 2; h++)
            for (int u = 0; u < 8; u++) {
                uint8_t *q = dst->q + 768 * h + 96 * u + 4 * r;
                memcpy(q, b->ql + 64 * h + 4 * u, 4);
                memcpy(q + 32, b->ql + 64 * h + 32 + 4 * u, 4);
                memcpy(q + 64, b->qh + 32 * h + 4 * u, 4);
            }
    }
}

static void q6k_from_x8(const block_q6_K_x8 *src, int r, block_q6_K *b) {
    b->d = src->d[r];
    for (int g = 0; g < 16; g++) b->scales[g] = src->sc[8 * g + r];
    for (int h = 0; h < 2; h++)
        for (int u = 0; u < 8; u++) {
            const uint8_t *q = src->q + 768 * h + 96 * u + 4 * r;
            memcpy(b->ql + 64 * h + 4 * u, q, 4);
            memcpy(b->ql + 64 * h + 32 + 4 * u, q + 32, 4);
            memcpy(b->qh + 32 * h + 4 * u, q + 64, 4);
        }
}

/* ---- the 32-wide types: 8 stored blocks <-> one x8 block ---- */

/* offsets in a stored block (d, m, qh, qs) and in an x8 block (m[8], qh'[4], qs); -1: none */
typedef struct { int m, qh, qs, xm, xqh, xqs; } geom32;
static geom32 geom(int type) {
    switch (type) {
    case SKV_Q8_0: return (geom32){-1, -1, 2, -1, -1, 16};
    case SKV_Q4_0: return (geom32){-1, -1, 2, -1, -1, 16};
    case SKV_Q4_1: return (geom32){2, -1, 4, 16, -1, 32};
    case SKV_Q5_0: return (geom32){-1, 2, 6, -1, 16, 48};
    default:       return (geom32){2, 4, 8, 16, 32, 64};   /* Q5_1 */
    }
}

/* the fifth bit of weight w (0..31) of a stored Q5 block's qh */
static int qbit(const uint8_t *qh, int w) { return (qh[w / 8] >> (w % 8)) & 1; }

static void b32_to_x8(int type, const uint8_t *const src[8], uint8_t *dst) {
    const geom32 g = geom(type);
    const int q8 = type == SKV_Q8_0, nt = q8 ? 8 : 4;
    if (g.xqh >= 0) memset(dst + g.xqh, 0, 32);
    for (int r = 0; r < 8; r++) {
        const uint8_t *b = src[r];
        memcpy(dst + 2 * r, b, 2);
        if (g.m >= 0) memcpy(dst + g.xm + 2 * r, b + g.m, 2);
        for (int t = 0; t < nt; t++) memcpy(dst + g.xqs + 32 * t + 4 * r, b + g.qs + 4 * t, 4);
        if (g.xqh < 0) continue;
        for (int t = 0; t < 4; t++)
            for (int bp = 0; bp < 4; bp++) {   /* byte j = 4r + bp of vector t: qword k, byte-in-qword bb */
                const int k = r / 2, bb = 4 * (r % 2) + bp;
                uint8_t *q = dst + g.xqh + 8 * t;
                q[bb] |= (uint8_t)(qbit(b + g.qh, 4 * t + bp) << k);
                q[bb] |= (uint8_t)(qbit(b + g.qh, 16 + 4 * t + bp) << (4 + k));
            }
    }
}

/* bits k, 8+k, 16+k, 24+k of w as a 4-bit number (the multiply gathers the four
 * isolated bits into bits 24..27 with no carries between the partial products) */
static uint32_t gather4(uint32_t w, int k) { return (((w >> k) & 0x01010101u) * 0x01020408u) >> 24 & 15u; }

static void b32_from_x8(int type, const uint8_t *src, int r, uint8_t *b) {
    const geom32 g = geom(type);
    const int q8 = type == SKV_Q8_0, nt = q8 ? 8 : 4;
    memcpy(b, src + 2 * r, 2);
    if (g.m >= 0) memcpy(b + g.m, src + g.xm + 2 * r, 2);
    for (int t = 0; t < nt; t++) memcpy(b + g.qs + 4 * t, src + g.xqs + 32 * t + 4 * r, 4);
    if (g.xqh < 0) return;
    /* row r's 4 bytes of qh'[t] are bytes 4 (r % 2) .. +3 of the word: weight 4t + bp's bit
     * at bit k of byte bp, weight 16 + 4t + bp's at bit 4 + k (k = r / 2) */
    const int k = r / 2;
    uint32_t qh = 0;
    for (int t = 0; t < 4; t++) {
        uint32_t w;
        memcpy(&w, src + g.xqh + 8 * t + 4 * (r % 2), 4);
        qh |= gather4(w, k) << (4 * t) | gather4(w, 4 + k) << (16 + 4 * t);
    }
    const uint8_t q4[4] = {(uint8_t)qh, (uint8_t)(qh >> 8), (uint8_t)(qh >> 16), (uint8_t)(qh >> 24)};
    memcpy(b + g.qh, q4, 4);
}

void skv_x8_pack_group(int type, const void *src, void *dst, int64_t cols) {
    const int64_t nb = cols / skv_type_block(type);
    const size_t bs = skv_type_block_bytes(type);
    const uint8_t *rows = src;
    uint8_t *out = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *col[8];
        for (int r = 0; r < 8; r++) col[r] = rows + ((size_t)r * (size_t)nb + (size_t)i) * bs;
        if (type == SKV_Q4_K) q4k_to_x8((const block_q4_K *const *)(const void *)col, (block_q4_K_x8 *)(void *)(out + i * 8 * bs));
        else if (type == SKV_Q6_K) q6k_to_x8((const block_q6_K *const *)(const void *)col, (block_q6_K_x8 *)(void *)(out + i * 8 * bs));
        else b32_to_x8(type, col, out + i * 8 * bs);
    }
}

void skv_x8_row(int type, const void *group, int r, int64_t b0, int64_t nb, void *dst) {
    const size_t bs = skv_type_block_bytes(type);
    const uint8_t *g = group;
    uint8_t *out = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *x = g + (size_t)(b0 + i) * 8 * bs;
        if (type == SKV_Q4_K) q4k_from_x8((const block_q4_K_x8 *)(const void *)x, r, (block_q4_K *)(void *)(out + i * bs));
        else if (type == SKV_Q6_K) q6k_from_x8((const block_q6_K_x8 *)(const void *)x, r, (block_q6_K *)(void *)(out + i * bs));
        else b32_from_x8(type, x, r, out + i * bs);
    }
}

/* the kernels for this CPU: AVX-512 VNNI where it has it (and SKV_CPU is not "avx2"), the
 * AVX2 ones otherwise; both give the same bits */
skv_vec_dot8n_fn skv_vec_dot8n_for(int type) {
    return skv_cpu_vnni() ? skv_vec_dot8n_vnni_for(type) : skv_vec_dot8n_avx2_for(type);
}
