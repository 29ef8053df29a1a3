/* test_matmul.c: the fast matmul paths (kernels/cpu/matmul.c, vecdot*.c) against the
 * scalar reference skv_matmul_ref, on random weights built with skv_quant_row.
 *
 * Tolerances (relative L2 error of y over each check):
 *   - integer decode dots vs. the exact dot of the dequantised weight row with the
 *     dequantised Q8 activation: 1e-5 (both are exact up to float rounding), which
 *     checks every block-layout detail of the AVX2 kernels (1-row and 4-row);
 *   - decode GEMV (T < skv_matmul_gemm_min_t(type), Q8 activations) vs. reference: 5e-3 for 32-wide types and
 *     k-quants (quantising x to 8 bits; measured 0.8e-3 .. 1.7e-3, printed by the
 *     `report` case), 1e-5 for F32/F16/BF16 weights (float activations);
 *   - prefill GEMM (larger T, float dequantised tiles) vs. reference: 1e-5. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include <omp.h>
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vecdot.h"
#include "runtime/model/model.h"
#include "common/util.h"

static uint64_t rng = 88172645463325252ULL;
static float frand(void) {           /* uniform in [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

static const int types[] = { SKV_F32, SKV_F16, SKV_BF16, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1,
                             SKV_Q8_0, SKV_Q4_K, SKV_Q5_K, SKV_Q6_K };
#define NTYPES (int)(sizeof(types) / sizeof(types[0]))

static int is_float(int t) { return t == SKV_F32 || t == SKV_F16 || t == SKV_BF16; }

/* random W (rows, cols) in `type`; caller frees data */
static skv_weight make_weight(int type, int64_t rows, int64_t cols) {
    skv_weight W = { .type = type, .rows = rows, .cols = cols };
    size_t rb = skv_row_bytes(type, cols);
    uint8_t *data = malloc(rb * rows);
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        float amp = 0.05f + 0.1f * (float)(r % 7);
        for (int64_t k = 0; k < cols; k++) tmp[k] = amp * frand();
        skv_quant_row(type, tmp, data + r * rb, cols);
    }
    free(tmp);
    W.data = data;
    return W;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += (double)(a[i] - b[i]) * (a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

static double worst_gemv[SKV_TYPE_COUNT];

static void check_one(int type, int64_t rows, int64_t cols, int T) {
    skv_weight W = make_weight(type, rows, cols);
    float *x = malloc(sizeof(float) * T * cols), *y = malloc(sizeof(float) * T * rows),
          *yr = malloc(sizeof(float) * T * rows);
    for (int64_t i = 0; i < T * cols; i++) x[i] = frand();
    skv_matmul(y, x, &W, T);
    skv_matmul_ref(yr, x, &W, T);
    double e = rel_err(y, yr, (size_t)T * rows);
    int gemv_path = T < skv_matmul_gemm_min_t(type);
    double tol = (gemv_path && !is_float(type)) ? 5e-3 : 1e-5;
    if (gemv_path && e > worst_gemv[type]) worst_gemv[type] = e;
    if (e > tol) fail_msg("%s rows=%lld cols=%lld T=%d: rel err %.3g > %.3g", skv_type_name(type),
                          (long long)rows, (long long)cols, T, e, tol);
    free(x); free(y); free(yr); free((void *)W.data);
}

static void test_matmul_all_types(void **state) {
    (void)state;
    const int Ts[] = { 1, 2, 7, 64 };
    const int64_t rowss[] = { 1, 17, 35 };
    for (int ti = 0; ti < NTYPES; ti++) {
        int type = types[ti];
        int blk = skv_type_block(type);
        int64_t colss[3] = { 512, 256 * 3, blk >= 256 ? 256 : 96 };   /* 96: a ragged KC slice */
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 3; ri++)
                for (int k = 0; k < 4; k++) check_one(type, rowss[ri], colss[ci], Ts[k]);
    }
}

/* Float types with cols not a multiple of 8 (scalar tails) and a bigger GEMM shape. */
static void test_matmul_odd_shapes(void **state) {
    (void)state;
    check_one(SKV_F32, 13, 37, 1);
    check_one(SKV_F32, 13, 37, 9);
    check_one(SKV_F16, 5, 21, 1);
    check_one(SKV_BF16, 5, 21, 3);
    check_one(SKV_Q4_1, 101, 576, 33);
    check_one(SKV_Q6_K, 67, 1024, 13);
    check_one(SKV_Q4_K, 19, 512, 130);    /* k-quant GEMM path */
    check_one(SKV_Q5_K, 7, 256, 129);
    check_one(SKV_Q6_K, 21, 512, 131);
    check_one(SKV_Q5_0, 9, 96, 65);
    check_one(SKV_Q5_0, 203, 96, 1);      /* GEMV: 4-row kernels, 64-row chunks, row tail, odd blocks */
    check_one(SKV_Q8_0, 130, 160, 2);
    check_one(SKV_Q4_1, 66, 576, 1);
}

/* Each integer kernel against the exact dot of dequantised weights and the
 * dequantised activation (isolates the kernel from activation quantisation error). */
static void test_vecdot_exact(void **state) {
    (void)state;
    for (int ti = 0; ti < 2 * NTYPES; ti++) {
        int type = types[ti % NTYPES];
        /* second pass: an odd number of blocks (the 2-blocks-per-step kernels' tail) */
        const int64_t n = ti < NTYPES ? 1024 : skv_type_block(type) >= 256 ? 768 : 992 + (type == SKV_F32 ? 5 : 0);
        skv_weight W = make_weight(type, 4, n);
        float x[1024], xh[1024], w[1024];   /* n <= 1024 */
        for (int i = 0; i < n; i++) x[i] = frand() * (i % 5 == 0 ? 3.0f : 1.0f);
        uint8_t act[8192] __attribute__((aligned(32)));
        assert_true(skv_vec_act_bytes(type, n) <= sizeof act);
        skv_vec_quant_act(type, x, act, n);
        int at = skv_vec_act_type(type);
        for (int i = 0; i < n; i++) {
            if (at == SKV_Q8_0) { const skv_q8a *b = (const skv_q8a *)act + i / 32; xh[i] = b->d * b->qs[i % 32]; }
            else if (at == SKV_Q8_K) { const block_q8_K *b = (const block_q8_K *)act + i / 256; xh[i] = b->d * b->qs[i % 256]; }
            else xh[i] = x[i];
        }
        if (at == SKV_Q8_K)   /* bsums must match the quants */
            for (int b = 0; b < n / 256; b++)
                for (int g = 0; g < 16; g++) {
                    const block_q8_K *bl = (const block_q8_K *)act + b;
                    int s = 0;
                    for (int j = 0; j < 16; j++) s += bl->qs[16 * g + j];
                    assert_int_equal(s, bl->bsums[g]);
                }
        skv_vec_dot_fn dot = skv_vec_dot_for(type);
        assert_non_null(dot);
        size_t rb = skv_row_bytes(type, n);
        skv_vec_dot4_fn dot4 = skv_vec_dot4_for(type);   /* the 4-row kernel, where the type has one */
        float got4[4] = { 0 };
        if (dot4) dot4(n, W.data, rb, act, got4);
        for (int r = 0; r < 4; r++) {
            skv_weight_row(&W, r, w);
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) { ref += (double)w[i] * xh[i]; mag += fabs((double)w[i] * xh[i]); }
            float got = dot(n, (const uint8_t *)W.data + r * rb, act);
            if (fabs(got - ref) > 1e-5 * mag)
                fail_msg("%s row %d: dot %.7g vs exact %.7g (mag %.3g)", skv_type_name(type), r, got, ref, mag);
            if (dot4 && fabs(got4[r] - ref) > 1e-5 * mag)
                fail_msg("%s row %d: 4-row dot %.7g vs exact %.7g (mag %.3g)", skv_type_name(type), r, got4[r], ref, mag);
        }
        free((void *)W.data);
    }
}

static void test_weight_row_and_ref_switch(void **state) {
    (void)state;
    skv_weight W = make_weight(SKV_Q5_0, 9, 256);
    float row[256], exp_row[256];
    skv_weight_row(&W, 4, row);
    skv_dequant_row(SKV_Q5_0, (const uint8_t *)W.data + 4 * skv_row_bytes(SKV_Q5_0, 256), exp_row, 256);
    assert_memory_equal(row, exp_row, sizeof row);
    float x[256], y1[9], y2[9];
    for (int i = 0; i < 256; i++) x[i] = frand();
    skv_matmul_set_ref(1);
    skv_matmul(y1, x, &W, 1);
    skv_matmul_set_ref(0);
    skv_matmul_ref(y2, x, &W, 1);
    assert_memory_equal(y1, y2, sizeof y1);
    free((void *)W.data);
}

/* Prints the measured decode-path (Q8 activation) error per type. */
/* The pair-packed copy (vecdot_pack.c): its 4-row kernel gives the stored rows' 4-row
 * results bit for bit (rows of 1, 14 and 130 block pairs: 130 > the kernels' 128-pair
 * chunk), and skv_matmul with W.pack set gives the same bits as without. */
static void test_packed_rows(void **state) {
    (void)state;
    const int ptypes[] = {SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1};
    const int64_t colss[] = {64, 896, 8320};
    for (int ti = 0; ti < 4; ti++)
        for (int ci = 0; ci < 3; ci++) {
            const int type = ptypes[ti];
            const int64_t cols = colss[ci], rows = 12;
            assert_true(skv_pack_supported(type, cols));
            skv_weight W = make_weight(type, rows, cols);
            const size_t rb = skv_row_bytes(type, cols);
            uint8_t *pk = malloc(rb * rows);
            skv_pack_rows(type, W.data, pk, rows, cols);
            float *x = malloc(sizeof(float) * cols), y0[12], y1[12];
            for (int64_t i = 0; i < cols; i++) x[i] = frand();
            uint8_t *act = skv_aligned_alloc(skv_vec_act_bytes(type, cols), "test");
            skv_vec_quant_act(type, x, act, cols);
            skv_vec_dot4_fn d4 = skv_vec_dot4_for(type), d4p = skv_vec_dot4_packed_for(type);
            for (int r = 0; r < rows; r += 4) {
                d4(cols, (const uint8_t *)W.data + r * rb, rb, act, y0 + r);
                d4p(cols, pk + r * rb, rb, act, y1 + r);
            }
            if (memcmp(y0, y1, sizeof y0)) fail_msg("packed dot4 differs: type %d cols %lld", type, (long long)cols);
            skv_matmul(y0, x, &W, 1);
            W.pack = pk;
            skv_matmul(y1, x, &W, 1);
            assert_memory_equal(y0, y1, sizeof y0);
            free(act); free(x); free(pk); free((void *)W.data);
        }
    assert_false(skv_pack_supported(SKV_Q8_0, 64));
    assert_false(skv_pack_supported(SKV_Q4_0, 96));   /* odd number of blocks */
    assert_null(skv_vec_dot4_packed_for(SKV_Q4_K));
}

/* The AVX-512 VNNI build of the 8-row kernels (vecdot_x8_vnni.c) gives the AVX2 build's bits:
 * every x8 type, 1 and 9 super-blocks a row, 1..4 activation rows a call; weights from the
 * quantiser and with every quant byte random (Q8_0's -128, Q5's fifth bits, Q4_K's 6-bit
 * and Q6_K's int8 scales all set), activations random and all +-127 (the int16 sums' worst case). Skipped
 * on a CPU without AVX-512 VNNI. */
static void test_x8_vnni_same_bits(void **state) {
    (void)state;
    if (!skv_cpu_vnni()) {
        print_message("    (VNNI kernels not in use: no AVX-512 VNNI on this CPU, or SKV_CPU=avx2)\n");
        skip();
    }
    const int xtypes[] = {SKV_Q4_K, SKV_Q6_K, SKV_Q8_0, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1};
    const int64_t colss[] = {256, 2304}, rows = 16;
    for (size_t ti = 0; ti < sizeof xtypes / sizeof xtypes[0]; ti++)
        for (int ci = 0; ci < 2; ci++)
            for (int wrand = 0; wrand < 2; wrand++)
                for (int xext = 0; xext < 2; xext++) {
                    const int type = xtypes[ti];
                    const int64_t cols = colss[ci];
                    skv_weight W = make_weight(type, rows, cols);
                    const size_t rb = skv_row_bytes(type, cols), bs = skv_type_block_bytes(type);
                    /* every byte but the fp16 scale(s): quant data and the k-quants' sub-block
                     * scales (Q6_K's d is its last 2 bytes, the others' first 2 or 4) */
                    const size_t hdr = type == SKV_Q6_K ? 0 : type == SKV_Q4_1 || type == SKV_Q5_1 || type == SKV_Q4_K ? 4 : 2;
                    const size_t end = type == SKV_Q6_K ? bs - 2 : bs;
                    uint8_t *wd = (uint8_t *)W.data, *xd = malloc(rb * rows);
                    if (wrand)
                        for (size_t b = 0; b < rb * rows / bs; b++)
                            for (size_t k = hdr; k < end; k++) wd[b * bs + k] = (uint8_t)(rand() & 0xff);
                    for (int64_t g = 0; g < rows / 8; g++) skv_x8_pack_group(type, wd + g * 8 * rb, xd + g * 8 * rb, cols);
                    const size_t ab = skv_vec_act_bytes(type, cols);
                    uint8_t *act = skv_aligned_alloc(4 * ab, "test");
                    float *x = malloc(sizeof(float) * cols);
                    for (int a = 0; a < 4; a++) {
                        for (int64_t i = 0; i < cols; i++) x[i] = xext ? (rand() & 1 ? 1.0f : -1.0f) : frand();
                        skv_vec_quant_act(type, x, act + a * ab, cols);
                    }
                    for (int nt = 1; nt <= 4; nt++)
                        for (int64_t g = 0; g < rows / 8; g++) {
                            float o2[32], o5[32];
                            skv_vec_dot8n_avx2_for(type)(cols, xd + g * 8 * rb, act, ab, nt, o2);
                            skv_vec_dot8n_vnni_for(type)(cols, xd + g * 8 * rb, act, ab, nt, o5);
                            if (memcmp(o2, o5, sizeof(float) * 8 * nt) != 0)
                                fail_msg("%s cols %lld nt %d (random bytes %d, +-127 %d): VNNI != AVX2 bits",
                                         skv_type_name(type), (long long)cols, nt, wrand, xext);
                        }
                    free(x); free(act); free(xd); free(wd);
                }
}

/* The 8-row groups (vecdot_x8.c) of a matrix regrouped in place (40 rows = 5 groups; 1, 4
 * and 9 super-blocks a row): the stored rows come back byte for byte (any row range) and
 * skv_weight_row / skv_matmul_ref / the GEMM (T = 70) give the same bits as on the stored
 * rows (the float GEMM; the int8 one within 5e-3); the 8-row kernel equals the exact dot of the dequantised rows and activation to
 * 1e-5 of the magnitude sum (so it has the stored kernels' integer sums); the GEMV at T = 1
 * is within 1e-5 (relative L2) of the stored rows' GEMV and each row of T = 5 (4 + 1
 * activation rows a kernel call) is bit-equal to T = 1 of that activation row. */
static void test_x8_rows(void **state) {
    (void)state;
    const int xtypes[] = {SKV_Q4_K, SKV_Q6_K, SKV_Q8_0, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1};
    const int64_t colss[] = {256, 1024, 2304}, rows = 40;   /* also 8, 32 and 72 blocks of 32 */
    for (size_t ti = 0; ti < sizeof xtypes / sizeof xtypes[0]; ti++)
        for (int ci = 0; ci < 3; ci++) {
            const int type = xtypes[ti];
            const int64_t cols = colss[ci];
            assert_true(skv_x8_supported(type, rows, cols));
            skv_weight W = make_weight(type, rows, cols), X = W;
            const size_t rb = skv_row_bytes(type, cols);
            uint8_t *xd = malloc(rb * rows), *back = malloc(rb * rows);
            for (int64_t g = 0; g < rows / 8; g++)
                skv_x8_pack_group(type, (const uint8_t *)W.data + g * 8 * rb, xd + g * 8 * rb, cols);
            X.data = xd;
            X.x8 = 1;
            skv_weight_stored_rows(&X, 0, rows, back);
            assert_memory_equal(back, W.data, rb * rows);
            skv_weight_stored_rows(&X, 13, 9, back);
            assert_memory_equal(back, (const uint8_t *)W.data + 13 * rb, rb * 9);
            float *wr0 = malloc(sizeof(float) * cols), *wr1 = malloc(sizeof(float) * cols);
            for (int64_t r = 0; r < rows; r += 13) {
                skv_weight_row(&W, r, wr0);
                skv_weight_row(&X, r, wr1);
                assert_memory_equal(wr0, wr1, sizeof(float) * cols);
            }
            enum { TG = 70 };
            float *x = malloc(sizeof(float) * TG * cols), *y0 = malloc(sizeof(float) * TG * rows),
                  *y1 = malloc(sizeof(float) * TG * rows);
            for (int64_t i = 0; i < TG * cols; i++) x[i] = frand();
            /* the float GEMM (gemm modes 0, 1) reads both layouts alike; in the default int8 mode
             * the groups take the int8 kernels at T = 70 too, within the decode tolerance */
            skv_matmul_set_gemm_mode(SKV_GEMM_MULTIROW);
            skv_matmul(y0, x, &W, TG);
            skv_matmul(y1, x, &X, TG);
            assert_memory_equal(y0, y1, sizeof(float) * TG * rows);
            skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);
            skv_matmul(y1, x, &X, TG);
            {
                double num = 0, den = 0;
                for (int64_t i = 0; i < TG * rows; i++) { num += (double)(y1[i] - y0[i]) * (y1[i] - y0[i]); den += (double)y0[i] * y0[i]; }
                if (sqrt(num / den) > 5e-3) fail_msg("%s: int8 GEMM rel err %.3g vs the float GEMM", skv_type_name(type), sqrt(num / den));
            }
            skv_matmul_ref(y0, x, &W, 2);
            skv_matmul_ref(y1, x, &X, 2);
            assert_memory_equal(y0, y1, sizeof(float) * 2 * rows);
            /* the kernel against the exact dot with the dequantised activation */
            uint8_t *act = skv_aligned_alloc(skv_vec_act_bytes(type, cols), "test");
            skv_vec_quant_act(type, x, act, cols);
            float out[8];
            for (int64_t g = 0; g < rows / 8; g++) {
                skv_vec_dot8n_for(type)(cols, xd + g * 8 * rb, act, 0, 1, out);
                for (int r = 0; r < 8; r++) {
                    skv_weight_row(&W, 8 * g + r, wr0);
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < cols; i++) {
                        double p;
                        if (type == SKV_Q4_K || type == SKV_Q6_K) {
                            const block_q8_K *b = (const block_q8_K *)act + i / 256;
                            p = (double)wr0[i] * b->d * b->qs[i % 256];
                        } else {
                            const skv_q8a *b = (const skv_q8a *)act + i / 32;
                            p = (double)wr0[i] * b->d * b->qs[i % 32];
                        }
                        ref += p;
                        mag += fabs(p);
                    }
                    if (fabs(out[r] - ref) > 1e-5 * mag)
                        fail_msg("%s x8 row %lld: %.7g vs exact %.7g (mag %.3g)", skv_type_name(type),
                                 (long long)(8 * g + r), out[r], ref, mag);
                }
            }
            /* GEMV: T = 1 close to the stored rows' kernels, T = 5 row by row = T = 1 */
            skv_matmul(y0, x, &W, 1);
            skv_matmul(y1, x, &X, 1);
            if (rel_err(y1, y0, (size_t)rows) > 1e-5) fail_msg("x8 GEMV vs stored: rel err %.3g", rel_err(y1, y0, (size_t)rows));
            skv_matmul(y0, x, &X, 5);
            for (int t = 0; t < 5; t++) {
                skv_matmul(y1, x + t * cols, &X, 1);
                assert_memory_equal(y0 + t * rows, y1, sizeof(float) * rows);
            }
            free(act); free(x); free(y0); free(y1); free(wr0); free(wr1); free(xd); free(back); free((void *)W.data);
        }
    assert_false(skv_x8_supported(SKV_Q4_K, 12, 256));   /* rows not a multiple of 8 */
    assert_false(skv_x8_supported(SKV_Q5_K, 8, 256));
    assert_false(skv_x8_supported(SKV_Q8_0, 8, 48));      /* a partial block */
    assert_null(skv_vec_dot8n_for(SKV_Q5_K));
}

/* skv_gemv_team: a group of matrices of different types (more bytes a row in some, so the
 * byte split puts the boundary elsewhere than a row split would) gives, for teams of 1, 2, 3
 * and 5 threads, the bits of skv_matmul_multi at T = 1 (every row computed by the same
 * kernel whichever thread takes it). */
static void test_gemv_team(void **state) {
    (void)state;
    enum { N = 3 };
    const int64_t cols = 512, rows[N] = {200, 72, 136};
    const int ts[N] = {SKV_Q5_0, SKV_Q8_0, SKV_Q4_K};
    skv_weight W[N];
    const skv_weight *Ws[N];
    float *ys[N], *yr[N];
    for (int i = 0; i < N; i++) {
        W[i] = make_weight(ts[i], rows[i], cols);
        Ws[i] = &W[i];
        ys[i] = malloc(sizeof(float) * rows[i]);
        yr[i] = malloc(sizeof(float) * rows[i]);
    }
    assert_true(skv_gemv_team_ok(Ws, N));
    float *x = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols; i++) x[i] = frand();
    skv_matmul_multi(yr, Ws, N, x, 1);
    const size_t ab = skv_gemv_act_bytes(Ws, N);
    const int teams[4] = {1, 2, 3, 5};
    for (int k = 0; k < 4; k++) {
        uint8_t *act = skv_aligned_alloc(ab * (size_t)teams[k], "test");
        assert_non_null(act);
        for (int i = 0; i < N; i++) memset(ys[i], 0xff, sizeof(float) * rows[i]);   /* NaN: a row left out shows */
        #pragma omp parallel num_threads(teams[k])
        skv_gemv_team(ys, Ws, N, x, act + ab * (size_t)omp_get_thread_num());
        for (int i = 0; i < N; i++)
            if (memcmp(ys[i], yr[i], sizeof(float) * rows[i]))
                fail_msg("team of %d: matrix %d (%s) differs from skv_matmul_multi", teams[k], i, skv_type_name(ts[i]));
        free(act);
    }
    for (int i = 0; i < N; i++) { free(ys[i]); free(yr[i]); free((void *)W[i].data); }
    free(x);
}

/* skv_gemv_team_swiglu: the gate / up pair with SwiGLU applied per chunk gives, for teams
 * of 1, 2, 3 and 5, the bits of the two GEMVs (skv_matmul_multi) followed by skv_swiglu;
 * h may be g (the decode forward passes the same buffer). */
static void test_gemv_team_swiglu(void **state) {
    (void)state;
    const int64_t cols = 512, rows = 328;
    const int types[2][2] = {{SKV_Q5_0, SKV_Q5_0}, {SKV_Q4_K, SKV_Q8_0}};
    for (int p = 0; p < 2; p++) {
        skv_weight Wg = make_weight(types[p][0], rows, cols), Wu = make_weight(types[p][1], rows, cols);
        const skv_weight *Ws[2] = {&Wg, &Wu};
        assert_true(skv_gemv_team_ok(Ws, 2));
        float *x = malloc(sizeof(float) * cols), *gr = malloc(sizeof(float) * rows), *ur = malloc(sizeof(float) * rows),
              *hr = malloc(sizeof(float) * rows), *g = malloc(sizeof(float) * rows), *u = malloc(sizeof(float) * rows);
        for (int64_t i = 0; i < cols; i++) x[i] = frand();
        float *yr[2] = {gr, ur};
        skv_matmul_multi(yr, Ws, 2, x, 1);
        skv_swiglu(hr, gr, ur, (int)rows);
        const size_t ab = skv_gemv_act_bytes(Ws, 2);
        const int teams[4] = {1, 2, 3, 5};
        for (int k = 0; k < 4; k++) {
            uint8_t *act = skv_aligned_alloc(ab * (size_t)teams[k], "test");
            assert_non_null(act);
            memset(g, 0xff, sizeof(float) * rows);   /* NaN: a row left out shows */
            #pragma omp parallel num_threads(teams[k])
            skv_gemv_team_swiglu(g, g, u, &Wg, &Wu, x, act + ab * (size_t)omp_get_thread_num());
            if (memcmp(g, hr, sizeof(float) * rows))
                fail_msg("%s/%s, team of %d: differs from GEMVs + skv_swiglu", skv_type_name(types[p][0]),
                         skv_type_name(types[p][1]), teams[k]);
            free(act);
        }
        free(x); free(gr); free(ur); free(hr); free(g); free(u);
        free((void *)Wg.data); free((void *)Wu.data);
    }
}

static void test_report(void **state) {
    (void)state;
    for (int ti = 0; ti < NTYPES; ti++)
        printf("  decode rel err %-5s %.2e\n", skv_type_name(types[ti]), worst_gemv[types[ti]]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vecdot_exact),
        cmocka_unit_test(test_matmul_all_types),
        cmocka_unit_test(test_matmul_odd_shapes),
        cmocka_unit_test(test_weight_row_and_ref_switch),
        cmocka_unit_test(test_packed_rows),
        cmocka_unit_test(test_x8_rows),
        cmocka_unit_test(test_x8_vnni_same_bits),
        cmocka_unit_test(test_gemv_team),
        cmocka_unit_test(test_gemv_team_swiglu),
        cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
