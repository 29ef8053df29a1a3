/* vecdot_x8.c: the 8-row interleaved decode layout of Q4_K matrices and its GEMV kernel.
 *
 * The stored layout keeps each row's blocks together, so a one-row kernel spends most of
 * its instructions on per-row work that does not scale with the bytes: unpacking each
 * super-block's 6-bit scales, picking a scale per sub-block, horizontal sums. Here the
 * rows go in groups of 8 and every 32-bit lane of a vector belongs to one row, so that
 * work is done once for 8 rows, and the integer products of a sub-block add up in int16
 * before one multiply by the 8 rows' scales.
 *
 * Group g (rows 8g .. 8g+7) takes the same bytes as those 8 stored rows, at the same
 * offset (8g rows x row bytes); super-block column i of the group is one x8 block:
 *   d[8], dmin[8]   the rows' fp16 scales                       32 bytes
 *   sc[12][8]       byte k of row r's packed 6-bit scales at 8k + r   96 bytes
 *   qs[4][8][8][4]  (j, t, r): row r's qs[32j + 4t .. 32j + 4t + 3]   1024 bytes
 * 1152 bytes = 8 x 144, so a matrix is repacked in place (runtime/model_pack.c) and
 * costs no memory. In qs, byte b of row r's group j holds weight b of sub-block 2j (low
 * nibble) and weight b of sub-block 2j + 1 (high nibble), as in the stored block.
 *
 * The kernel: for each x8 block and each j, eight 32-byte vectors (t = 0..7) each hold 4
 * bytes of every row; their low nibbles times the broadcast activation bytes
 * qy[64j + 4t ..] (maddubs) add up in int16 (8 x 2 x 15 x 127 = 30480 < 32767) to one
 * vector for sub-block 2j, the high nibbles to one for 2j + 1; madd with ones and a 32-bit
 * multiply by the rows' sub-block scales give 8 int32 row sums. The mins term
 * sum_s m_s * (bsums[2s] + bsums[2s+1]) is one madd per pair of sub-blocks. Per x8 block
 * two float FMAs fold d*dy and dmin*dy. Integer sums are exact, so the result differs from
 * the stored-layout kernels only by float rounding (one conversion per super-block and
 * row instead of eight lanes). One thread, 1536 x 8960 from cache: 24 -> 36 GB/s. */
#include <string.h>
#include "vecdot.h"
#include "vecdot_simd.h"

typedef struct {
    uint16_t d[8], dmin[8];
    uint8_t sc[12 * 8];
    uint8_t qs[4 * 8 * 8 * 4];
} block_q4_K_x8;
_Static_assert(sizeof(block_q4_K_x8) == 8 * sizeof(block_q4_K), "x8 block is 8 stored blocks");

int skv_x8_supported(int type, int64_t rows, int64_t cols) {
    return type == SKV_Q4_K && rows > 0 && rows % 8 == 0 && cols > 0 && cols % QK_K == 0;
}

/* 8 stored blocks (row r's at src[r]) -> one x8 block */
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

/* row r of one x8 block -> its stored block */
static void q4k_from_x8(const block_q4_K_x8 *src, int r, block_q4_K *b) {
    b->d = src->d[r];
    b->dmin = src->dmin[r];
    for (int k = 0; k < 12; k++) b->scales[k] = src->sc[8 * k + r];
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < 8; t++) memcpy(b->qs + 32 * j + 4 * t, src->qs + 256 * j + 32 * t + 4 * r, 4);
}

void skv_x8_pack_group(int type, const void *src, void *dst, int64_t cols) {
    (void)type;   /* Q4_K, the only x8 type */
    const int64_t nb = cols / QK_K;
    const block_q4_K *rows = src;
    block_q4_K_x8 *out = dst;
    for (int64_t i = 0; i < nb; i++) {
        const block_q4_K *col[8];
        for (int r = 0; r < 8; r++) col[r] = rows + (size_t)r * (size_t)nb + (size_t)i;
        q4k_to_x8(col, out + i);
    }
}

void skv_x8_row(int type, const void *group, int64_t cols, int r, int64_t b0, int64_t nb, void *dst) {
    (void)type;
    (void)cols;
    const block_q4_K_x8 *g = group;
    block_q4_K *out = dst;
    for (int64_t i = 0; i < nb; i++) q4k_from_x8(g + b0 + i, r, out + i);
}

/* 8 rows (one group, n columns) . one Q8_K activation row -> out[0..7] */
static void dot8_q4_K(int64_t n, const void *w, const void *xa, float out[8]) {
    const block_q4_K_x8 *b = w;
    const block_q8_K *y = xa;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, b++, y++) {
        /* the 8 rows' 6-bit scales and mins, [sub-block s][row r] bytes:
         *   s < 4:  sc = q[s] & 63,                          m = q[s+4] & 63
         *   s >= 4: sc = (q[s+4] & 15) | (q[s-4] >> 6) << 4, m = (q[s+4] >> 4) | (q[s] >> 6) << 4 */
        const __m256i q03 = _mm256_loadu_si256((const __m256i *)b->sc);
        const __m256i q47 = _mm256_loadu_si256((const __m256i *)(b->sc + 32));
        const __m256i q811 = _mm256_loadu_si256((const __m256i *)(b->sc + 64));
        const __m256i top03 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q03, 6), m3), 4);
        const __m256i top47 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q47, 6), m3), 4);
        uint8_t sc[64] __attribute__((aligned(32))), mn[64] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sc, _mm256_and_si256(q03, m63));
        _mm256_store_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(q811, m15), top03));
        _mm256_store_si256((__m256i *)mn, _mm256_and_si256(q47, m63));
        _mm256_store_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q811, 4), m15), top47));

        const int8_t *qy = y->qs;
        __m256i sumi = _mm256_setzero_si256();
        #pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            const uint8_t *q = b->qs + 256 * j;
            const int8_t *yj = qy + 64 * j;
            __m256i lo0 = _mm256_setzero_si256(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
            #pragma GCC unroll 4
            for (int t = 0; t < 8; t += 2) {
                int32_t ya, yb, yc, yd;
                memcpy(&ya, yj + 4 * t, 4);
                memcpy(&yb, yj + 32 + 4 * t, 4);
                memcpy(&yc, yj + 4 * t + 4, 4);
                memcpy(&yd, yj + 32 + 4 * t + 4, 4);
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(q + 32 * t));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(q + 32 * t + 32));
                lo0 = _mm256_add_epi16(lo0, _mm256_maddubs_epi16(_mm256_and_si256(v0, low4), _mm256_set1_epi32(ya)));
                hi0 = _mm256_add_epi16(hi0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), low4),
                                                                 _mm256_set1_epi32(yb)));
                lo1 = _mm256_add_epi16(lo1, _mm256_maddubs_epi16(_mm256_and_si256(v1, low4), _mm256_set1_epi32(yc)));
                hi1 = _mm256_add_epi16(hi1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), low4),
                                                                 _mm256_set1_epi32(yd)));
            }
            const __m256i s0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j)));
            const __m256i s1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8)));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(_mm256_madd_epi16(_mm256_add_epi16(lo0, lo1), ones16), s0));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(_mm256_madd_epi16(_mm256_add_epi16(hi0, hi1), ones16), s1));
        }
        /* mins: sub-block sums of the activation (bsums in pairs), lanes (bs_2p, bs_2p+1) */
        const __m128i bs8 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums),
                                           _mm_loadu_si128((const __m128i *)(y->bsums + 8)));
        const __m256i bsv = _mm256_castsi128_si256(bs8);
        __m256i summ = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m128i mp = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(mn + 16 * p)),
                                                 _mm_loadl_epi64((const __m128i *)(mn + 16 * p + 8)));
            summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_cvtepu8_epi16(mp),
                                                            _mm256_permutevar8x32_epi32(bsv, _mm256_set1_epi32(p))));
        }
        const __m256 dy = _mm256_set1_ps(y->d);
        const __m256 dv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d)), dy);
        const __m256 dmv = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin)), dy);
        acc = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(dmv, _mm256_cvtepi32_ps(summ), accm);
    }
    _mm256_storeu_ps(out, _mm256_sub_ps(acc, accm));
}

skv_vec_dot8_fn skv_vec_dot8_for(int type) { return type == SKV_Q4_K ? dot8_q4_K : NULL; }
