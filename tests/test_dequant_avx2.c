/* test_dequant_avx2.c: the AVX2 row dequantisers (kernels/cpu/dequant_avx2.c) against the
 * scalar reference skv_dequant_row, bit for bit, for every supported weight type:
 *   - rows quantised from random floats with skv_quant_row;
 *   - rows of raw random bytes (every scale / min / bit pattern, f16 subnormals; both
 *     sides NaN counts as equal), read from a deliberately misaligned address;
 *   - all 65536 F16 and BF16 values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/quant.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static float frand(void) { return (float)((next() >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f; }

static const int types[] = { SKV_F32, SKV_F16, SKV_BF16, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1,
                             SKV_Q8_0, SKV_Q4_K, SKV_Q5_K, SKV_Q6_K };
#define NTYPES (int)(sizeof(types) / sizeof(types[0]))

/* a and b equal as bits, or both NaN; fails naming the first differing index */
static void expect_same(int type, const char *what, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x == y || (isnan(a[i]) && isnan(b[i]))) continue;
        fail_msg("%s %s: weight %lld: avx2 %.9g (0x%08x) vs ref %.9g (0x%08x)", skv_type_name(type), what,
                 (long long)i, a[i], x, b[i], y);
    }
}

static void check_row(int type, const uint8_t *src, int64_t n, const char *what) {
    float *got = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    skv_dequant_row_avx2(type, src, got, n);
    skv_dequant_row(type, src, ref, n);
    expect_same(type, what, got, ref, n);
    free(got);
    free(ref);
}

static void test_quantised_rows(void **state) {
    (void)state;
    for (int ti = 0; ti < NTYPES; ti++) {
        int type = types[ti], blk = skv_type_block(type);
        const int64_t ns[] = { blk >= 256 ? 256 : 32, 512, 1536, blk == 1 ? 37 : 2048 };
        for (int k = 0; k < 4; k++) {
            int64_t n = ns[k];
            size_t rb = skv_row_bytes(type, n);
            float *x = malloc(sizeof(float) * n);
            uint8_t *q = malloc(rb);
            for (int64_t i = 0; i < n; i++) x[i] = frand() * (i % 13 == 0 ? 4.0f : 0.3f);
            skv_quant_row(type, x, q, n);
            check_row(type, q, n, "quantised row");
            free(x);
            free(q);
        }
    }
}

static void test_random_bytes_misaligned(void **state) {
    (void)state;
    for (int ti = 0; ti < NTYPES; ti++) {
        int type = types[ti];
        const int64_t n = 1024;
        size_t rb = skv_row_bytes(type, n);
        uint8_t *buf = malloc(rb + 3);
        for (int rep = 0; rep < 20; rep++) {
            for (size_t i = 0; i < rb + 3; i++) buf[i] = (uint8_t)(next() >> 32);
            check_row(type, buf + 1 + rep % 3, n, "random bytes");
        }
        free(buf);
    }
}

static void test_all_half_values(void **state) {
    (void)state;
    uint16_t *h = malloc(2 * 65536);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    check_row(SKV_F16, (const uint8_t *)h, 65536, "all values");
    check_row(SKV_BF16, (const uint8_t *)h, 65536, "all values");
    free(h);
}

/* A row length the type cannot have goes to the reference (NaN fill), not past the row. */
static void test_bad_length(void **state) {
    (void)state;
    uint8_t q[64] = { 0 };
    float y[40];
    skv_dequant_row_avx2(SKV_Q4_0, q, y, 40);
    for (int i = 0; i < 40; i++) assert_true(isnan(y[i]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantised_rows),
        cmocka_unit_test(test_random_bytes_misaligned),
        cmocka_unit_test(test_all_half_values),
        cmocka_unit_test(test_bad_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
