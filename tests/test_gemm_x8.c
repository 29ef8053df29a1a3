/* test_gemm_x8.c: the multi-row kernels (kernels/cpu/gemm_x8.h) and the int8 GEMM switch of
 * skv_matmul (matmul.h).
 *   - the fast 16-row kernels (VNNI, and AMX where the CPU has it) against the scalar
 *     reference, bit for bit, for every x8 type, on
 *     random weights and on random quant bytes (every nibble, 6-bit and sign pattern), with
 *     activations of random floats and of +-1 (the int8 extremes), for many widths (slices
 *     of the tile and partial ones) and T = 1 .. 130 (partial row blocks of 4 and of 64);
 *   - the reference against the decode kernel (skv_vec_dot8n, AVX2 build): bit for bit, row
 *     by row (so a verify or batch row is a decode step);
 *   - skv_matmul on a matrix in 8-row groups, in each gemm mode (matmul.h): every T below the
 *     GEMM threshold, and every T in SKV_GEMM_INT8_ALL, gives each row the bits of T = 1; in
 *     that mode T = 70 is within the decode path's tolerance (5e-3 relative L2) of
 *     skv_matmul_ref; with SKV_CPU=avx2 the same checks run on the 8-row decode kernel;
 *   - the default mode is SKV_GEMM_INT8_ALL (prefill in int8). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/gemm_x8.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vecdot.h"
#include "common/util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t next(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)(next() >> 8) * (2.0f / 16777216.0f) - 1.0f; }   /* [-1, 1) */

static const int xtypes[] = {SKV_Q4_K, SKV_Q6_K, SKV_Q8_0, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1};
#define NX (int)(sizeof xtypes / sizeof xtypes[0])

/* rows x cols stored rows of random weights; wrand: then every quant byte random (the fp16
 * scales kept, as test_matmul.c's VNNI check) */
static uint8_t *make_rows(int type, int64_t rows, int64_t cols, int wrand) {
    const size_t rb = skv_row_bytes(type, cols), bs = skv_type_block_bytes(type);
    uint8_t *d = malloc(rb * rows);
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = (0.05f + 0.1f * (float)(r % 7)) * frand();
        skv_quant_row(type, tmp, d + r * rb, cols);
    }
    if (wrand) {
        const size_t hdr = type == SKV_Q6_K ? 0 : type == SKV_Q4_1 || type == SKV_Q5_1 || type == SKV_Q4_K ? 4 : 2;
        const size_t end = type == SKV_Q6_K ? bs - 2 : bs;
        for (size_t b = 0; b < rb * rows / bs; b++)
            for (size_t k = hdr; k < end; k++) d[b * bs + k] = (uint8_t)next();
    }
    free(tmp);
    return d;
}

static uint8_t *to_x8(int type, const uint8_t *rowsd, int64_t rows, int64_t cols) {
    const size_t rb = skv_row_bytes(type, cols);
    uint8_t *x = malloc(rb * rows);
    for (int64_t g = 0; g < rows / 8; g++) skv_x8_pack_group(type, rowsd + g * 8 * rb, x + g * 8 * rb, cols);
    return x;
}

/* T activation rows quantised for the type; ext: every value +-1 (quantised to +-127) */
static uint8_t *make_act(int type, int64_t cols, int T, int ext, size_t *ab) {
    *ab = skv_vec_act_bytes(type, cols);
    uint8_t *act = skv_aligned_alloc(*ab * (size_t)T, "test");
    float *x = malloc(sizeof(float) * cols);
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < cols; i++) x[i] = ext ? (next() & 1 ? 1.0f : -1.0f) : frand();
        skv_vec_quant_act(type, x, act + (size_t)t * *ab, cols);
    }
    free(x);
    return act;
}

static void test_ref_matches_decode_kernel(void **state) {
    (void)state;
    const int64_t rows = 16;
    for (int ti = 0; ti < NX; ti++)
        for (int wrand = 0; wrand < 2; wrand++) {
            const int type = xtypes[ti];
            const int64_t cols = type == SKV_Q4_K || type == SKV_Q6_K ? 768 : 576;
            uint8_t *st = make_rows(type, rows, cols, wrand), *xd = to_x8(type, st, rows, cols);
            size_t ab;
            const int T = 5;
            uint8_t *act = make_act(type, cols, T, wrand, &ab);
            const size_t gb = 8 * skv_row_bytes(type, cols);
            float yr[5 * 16], o[8];
            skv_gemm_x8_ref(type, cols, xd, gb, 2, act, ab, T, yr, 16);
            for (int g = 0; g < 2; g++)
                for (int t = 0; t < T; t++) {
                    skv_vec_dot8n_avx2_for(type)(cols, xd + g * gb, act + t * ab, ab, 1, o);
                    if (memcmp(o, yr + t * 16 + 8 * g, sizeof o))
                        fail_msg("%s (random bytes %d) group %d row %d: reference != decode kernel bits", skv_type_name(type),
                                 wrand, g, t);
                }
            free(act); free(st); free(xd);
        }
}

/* the fast kernels this CPU runs: VNNI, and AMX (K-quants; VNNI for the rest) where present */
static skv_gemm16_fn fast_kernel(int k, int type) {
    if (k == 0) return skv_cpu_vnni() ? skv_gemm16_vnni_for(type) : NULL;
    return skv_cpu_amx() ? skv_gemm16_amx_for(type) : NULL;
}

static void test_fast_matches_ref(void **state) {
    (void)state;
    if (!skv_gemm16_for(SKV_Q4_K)) {
        print_message("    (multi-row kernel not in use: no AVX-512 VNNI on this CPU, or SKV_CPU=avx2)\n");
        skip();
    }
    if (!skv_cpu_amx()) print_message("    (no AMX on this CPU, or SKV_CPU=vnni: the VNNI kernels only)\n");
    const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 37, 64, 65, 130};
    const int64_t kcols[] = {256, 768, 2304}, wcols[] = {32, 576, 1024, 2304};
    const int64_t rows = 32;
    for (int ti = 0; ti < NX; ti++) {
        const int type = xtypes[ti], kq = type == SKV_Q4_K || type == SKV_Q6_K;
        for (int ci = 0; ci < (kq ? 3 : 4); ci++)
            for (int wrand = 0; wrand < 2; wrand++) {
                const int64_t cols = kq ? kcols[ci] : wcols[ci];
                uint8_t *st = make_rows(type, rows, cols, wrand), *xd = to_x8(type, st, rows, cols);
                size_t ab;
                uint8_t *act = make_act(type, cols, 130, wrand, &ab);
                const size_t gb = 8 * skv_row_bytes(type, cols);
                float *yf = malloc(sizeof(float) * 130 * rows), *yr = malloc(sizeof(float) * 130 * rows);
                skv_gemm_x8_ref(type, cols, xd, gb, (int)(rows / 8), act, ab, 130, yr, rows);
                for (int kern = 0; kern < 2; kern++) {
                    const skv_gemm16_fn f = fast_kernel(kern, type);
                    for (size_t k = 0; f && k < sizeof Ts / sizeof Ts[0]; k++) {
                        const int T = Ts[k];
                        memset(yf, 0xff, sizeof(float) * 130 * rows);
                        for (int64_t r = 0; r < rows; r += 16) f(cols, xd + (r / 8) * gb, gb, act, ab, T, yf + r, rows);
                        for (int t = 0; t < T; t++)
                            if (memcmp(yf + t * rows, yr + t * rows, sizeof(float) * rows))
                                fail_msg("%s %s cols %lld T %d (random bytes %d): row %d differs from the reference",
                                         kern ? "AMX" : "VNNI", skv_type_name(type), (long long)cols, T, wrand, t);
                    }
                }
                free(yf); free(yr); free(act); free(st); free(xd);
            }
    }
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += (double)(a[i] - b[i]) * (a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* skv_matmul rows equal T = 1 (below the threshold always; at any T with the int8 GEMM on) */
static void test_matmul_rows_are_decode_steps(void **state) {
    (void)state;
    const int64_t rows = 40;   /* 2 pairs of groups and one group alone */
    for (int ti = 0; ti < NX; ti++) {
        const int type = xtypes[ti];
        const int64_t cols = type == SKV_Q4_K || type == SKV_Q6_K ? 512 : 320;
        uint8_t *st = make_rows(type, rows, cols, 0), *xd = to_x8(type, st, rows, cols);
        skv_weight X = {.type = type, .rows = rows, .cols = cols, .data = xd, .x8 = 1};
        enum { TM = 70 };
        float *x = malloc(sizeof(float) * TM * cols), *y = malloc(sizeof(float) * TM * rows),
              *y1 = malloc(sizeof(float) * rows), *yr = malloc(sizeof(float) * TM * rows);
        for (int64_t i = 0; i < TM * cols; i++) x[i] = frand();
        for (int on = 0; on < 3; on++) {   /* each gemm mode */
            skv_matmul_set_gemm_mode(on);
            /* mode 2 at every T: the multi-row kernel, or without it (e.g. SKV_CPU=avx2) the
             * 8-row decode kernel, the same bits either way */
            const int tmax = on == SKV_GEMM_INT8_ALL ? TM : skv_matmul_gemm_min_t(type) - 1;
            for (int T = 2; T <= tmax; T += (T < 9 ? 1 : 17)) {
                skv_matmul(y, x, &X, T);
                for (int t = 0; t < T; t++) {
                    skv_matmul(y1, x + t * cols, &X, 1);
                    if (memcmp(y + t * rows, y1, sizeof(float) * rows))
                        fail_msg("%s T %d (gemm mode %d): row %d != its decode step", skv_type_name(type), T, on, t);
                }
            }
        }
        skv_matmul(y, x, &X, TM);   /* SKV_GEMM_INT8_ALL still on */
        skv_matmul_ref(yr, x, &X, TM);
        const double e = rel_err(y, yr, (size_t)TM * rows);
        if (e > 5e-3) fail_msg("%s int8 GEMM T %d: rel err %.3g vs reference", skv_type_name(type), TM, e);
        skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);   /* the default */
        free(x); free(y); free(y1); free(yr); free(st); free(xd);
    }
}

/* the default gemm mode, read once from SKV_GEMM_MODE (unset in the test run): int8 prefill */
static void test_default_mode_is_int8(void **state) {
    (void)state;
    const char *e = getenv("SKV_GEMM_MODE");
    if (e && *e) skip();
    assert_int_equal(skv_matmul_gemm_mode(), SKV_GEMM_INT8_ALL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_mode_is_int8),
        cmocka_unit_test(test_ref_matches_decode_kernel),
        cmocka_unit_test(test_fast_matches_ref),
        cmocka_unit_test(test_matmul_rows_are_decode_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
