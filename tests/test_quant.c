/* test_quant.c: the type table, every scalar dequantiser against hand-built blocks with
 * hand-computed values, quantise -> dequantise round trips, and gguf-py golden rows
 * from the real model files (tests/golden/dequant.txt, made by gen_dequant.py).
 *
 * Documented round-trip error bounds (max |x - deq(q(x))| over a row, amax = max |x|
 * of the block, range = max - min of the block), asserted below with a 2% margin for
 * fp16 rounding of the scales:
 *   F32 0 | F16 2^-11 relative | BF16 2^-8 relative
 *   Q8_0 amax/254 | Q8_K amax/254
 *   Q4_0 amax/8 (the largest weight sets d = max/-8; the opposite extreme clamps at +7)
 *   Q5_0 amax/16 (same reason) | Q4_1 range/30 | Q5_1 range/62
 *   Q4_K, Q5_K, Q6_K (simple quantisers, 6-/8-bit scale quantisation adds error):
 *   Q4_K amax/10, Q5_K amax/20, Q6_K amax/40 on uniform random rows (measured ~half). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/quant.h"
#include "runtime/format/gguf.h"
#include "common/util.h"
#include "tests/support/test_env.h"

static void expect_near(float got, float want, float tol, const char *what, int i) {
    if (!(fabsf(got - want) <= tol)) {
        print_error("%s[%d]: got %.9g want %.9g (tol %g)\n", what, i, got, want, tol);
        fail();
    }
}

/* ---------------------------------------------------------------- type table */

static void test_type_table(void **state) {
    (void)state;
    assert_string_equal(skv_type_name(SKV_Q4_K), "Q4_K");
    assert_string_equal(skv_type_name(SKV_BF16), "BF16");
    assert_string_equal(skv_type_name(-1), "unknown");
    assert_string_equal(skv_type_name(999), "unknown");
    assert_true(skv_type_supported(SKV_Q6_K));
    assert_false(skv_type_supported(SKV_Q2_K));
    assert_false(skv_type_supported(4));
    assert_false(skv_type_supported(SKV_TYPE_COUNT));
    assert_int_equal(skv_type_block(SKV_Q5_1), 32);
    assert_int_equal(skv_type_block(SKV_Q5_K), 256);
    assert_int_equal(skv_type_block(SKV_F16), 1);
    assert_int_equal(skv_type_block_bytes(SKV_Q8_K), 292);
    assert_int_equal(skv_row_bytes(SKV_F32, 7), 28);
    assert_int_equal(skv_row_bytes(SKV_BF16, 3), 6);
    assert_int_equal(skv_row_bytes(SKV_Q4_0, 64), 36);
    assert_int_equal(skv_row_bytes(SKV_Q4_1, 576), 18 * 20);
    assert_int_equal(skv_row_bytes(SKV_Q5_0, 896), 28 * 22);
    assert_int_equal(skv_row_bytes(SKV_Q5_1, 32), 24);
    assert_int_equal(skv_row_bytes(SKV_Q8_0, 576), 18 * 34);
    assert_int_equal(skv_row_bytes(SKV_Q4_K, 1536), 6 * 144);
    assert_int_equal(skv_row_bytes(SKV_Q5_K, 256), 176);
    assert_int_equal(skv_row_bytes(SKV_Q6_K, 4864), 19 * 210);
    skv_clear_error();
    assert_int_equal(skv_row_bytes(SKV_Q4_K, 896), 0);
    assert_non_null(strstr(skv_last_error(), "block size 256"));
    assert_int_equal(skv_row_bytes(SKV_Q2_K, 256), 0);
    assert_non_null(strstr(skv_last_error(), "unsupported tensor type Q2_K"));
    assert_int_equal(skv_row_bytes(SKV_Q8_0, 0), 0);
    assert_int_equal(skv_row_bytes(SKV_Q8_0, -32), 0);
    assert_int_equal(skv_row_bytes(SKV_F32, INT64_MAX), 0); /* byte size overflows */
}

/* ---------------------------------------------------------------- hand-built blocks */

static void test_dequant_float_types(void **state) {
    (void)state;
    uint16_t h[4] = { 0x3c00, 0xc000, 0x3555, 0x0001 }; /* 1, -2, 0.333251953125, 2^-24 */
    float y[4];
    skv_dequant_row(SKV_F16, h, y, 4);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.333251953125f && y[3] == ldexpf(1, -24));
    uint16_t b[3] = { 0x3f80, 0xc040, 0x3e20 }; /* 1, -3, 0.15625 */
    skv_dequant_row(SKV_BF16, b, y, 3);
    assert_true(y[0] == 1.0f && y[1] == -3.0f && y[2] == 0.15625f);
    float f[2] = { 1.5f, -7.25f };
    skv_dequant_row(SKV_F32, f, y, 2);
    assert_true(y[0] == 1.5f && y[1] == -7.25f);
}

static void test_dequant_q4_0(void **state) {
    (void)state;
    block_q4_0 b;
    b.d = 0x3800; /* 0.5 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    skv_dequant_row(SKV_Q4_0, &b, y, 32);
    /* low nibble of byte j -> weight j, high nibble -> weight j + 16 */
    assert_true(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f && y[9] == 0.5f);
    for (int j = 0; j < 16; j++) {
        expect_near(y[j], 0.5f * (float)(j - 8), 0, "q4_0", j);
        expect_near(y[j + 16], 0.5f * (float)(7 - j), 0, "q4_0", j + 16);
    }
}

static void test_dequant_q4_1(void **state) {
    (void)state;
    block_q4_1 b;
    b.d = 0x3400; /* 0.25 */
    b.m = 0xbc00; /* -1 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((j ^ 5) << 4));
    float y[32];
    skv_dequant_row(SKV_Q4_1, &b, y, 32);
    assert_true(y[0] == -1.0f && y[15] == 2.75f && y[16] == 0.25f && y[21] == -1.0f);
    for (int j = 0; j < 16; j++) {
        expect_near(y[j], 0.25f * (float)j - 1.0f, 0, "q4_1", j);
        expect_near(y[j + 16], 0.25f * (float)(j ^ 5) - 1.0f, 0, "q4_1", j + 16);
    }
}

static void test_dequant_q5_0_q5_1(void **state) {
    (void)state;
    block_q5_0 b;
    b.d = 0x3c00; /* 1 */
    /* qh (little-endian u32) = 0x8000_0001 | 0x0001_0000: weight 0, weight 16, weight 31 */
    uint32_t qh = 0x80010001u;
    memcpy(b.qh, &qh, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    skv_dequant_row(SKV_Q5_0, &b, y, 32);
    assert_true(y[0] == 0.0f);       /* (0 | 16) - 16 */
    assert_true(y[1] == -15.0f);     /* 1 - 16 */
    assert_true(y[15] == -1.0f);     /* 15 - 16 */
    assert_true(y[16] == 15.0f);     /* (15 | 16) - 16 */
    assert_true(y[17] == -2.0f);     /* 14 - 16 */
    assert_true(y[31] == 0.0f);      /* (0 | 16) - 16 */
    assert_true(y[30] == -15.0f);    /* 1 - 16 */

    block_q5_1 c;
    c.d = 0x3800;  /* 0.5 */
    c.m = 0x4000;  /* 2 */
    memcpy(c.qh, &qh, 4);
    memcpy(c.qs, b.qs, 16);
    skv_dequant_row(SKV_Q5_1, &c, y, 32);
    assert_true(y[0] == 10.0f);      /* 0.5 * 16 + 2 */
    assert_true(y[1] == 2.5f);       /* 0.5 * 1 + 2 */
    assert_true(y[16] == 17.5f);     /* 0.5 * 31 + 2 */
    assert_true(y[31] == 10.0f);     /* 0.5 * 16 + 2 */
    assert_true(y[30] == 2.5f);
}

static void test_dequant_q8_0_q8_K(void **state) {
    (void)state;
    block_q8_0 b;
    b.d = 0xb400; /* -0.25 */
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j * 8 - 128);
    float y[256];
    skv_dequant_row(SKV_Q8_0, &b, y, 32);
    assert_true(y[0] == 32.0f && y[16] == 0.0f && y[31] == -30.0f);
    block_q8_K k;
    k.d = 0.125f;
    for (int j = 0; j < 256; j++) k.qs[j] = (int8_t)(j - 128);
    skv_dequant_row(SKV_Q8_K, &k, y, 256);
    assert_true(y[0] == -16.0f && y[128] == 0.0f && y[255] == 15.875f);
}

/* Scales sc = {1,2,3,4,60,33,17,63}, mins m = {0,5,10,63,1,48,2,31}, packed by hand:
 *   s[0..3]  = sc[j] | (sc[j+4] >> 4) << 6      = C1 82 43 C4
 *   s[4..7]  = m[j]  | (m[j+4]  >> 4) << 6      = 00 C5 0A 7F
 *   s[8..11] = (sc[j+4] & 15) | (m[j+4] & 15) << 4 = 1C 01 21 FF */
static const uint8_t k_scales[12] = { 0xC1, 0x82, 0x43, 0xC4, 0x00, 0xC5, 0x0A, 0x7F,
                                      0x1C, 0x01, 0x21, 0xFF };
static const int k_sc[8] = { 1, 2, 3, 4, 60, 33, 17, 63 }, k_m[8] = { 0, 5, 10, 63, 1, 48, 2, 31 };

static void test_dequant_q4_K(void **state) {
    (void)state;
    block_q4_K b;
    b.d = 0x3c00;    /* 1 */
    b.dmin = 0x3800; /* 0.5 */
    memcpy(b.scales, k_scales, 12);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)((l & 15) | (((l + c) & 15) << 4));
    float y[256];
    skv_dequant_row(SKV_Q4_K, &b, y, 256);
    assert_true(y[0] == 0.0f);
    assert_true(y[1] == 1.0f);
    assert_true(y[33] == -0.5f);           /* sub 1: 2*1 - 0.5*5 */
    assert_true(y[96] == -27.5f);          /* sub 3: 4*1 - 0.5*63 */
    assert_true(y[133] == 299.5f);         /* sub 4: 60*5 - 0.5*1 */
    assert_true(y[170] == 372.0f);         /* sub 5: 33*12 - 0.5*48 */
    assert_true(y[255] == 110.5f);         /* sub 7: 63*2 - 0.5*31 */
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 32, s = i / 32;
        int q = (i % 64) < 32 ? (l & 15) : ((l + c) & 15);
        expect_near(y[i], (float)(k_sc[s] * q) - 0.5f * (float)k_m[s], 0, "q4_K", i);
    }
}

static void test_dequant_q5_K(void **state) {
    (void)state;
    block_q5_K b;
    b.d = 0x3c00;
    b.dmin = 0x3800;
    memcpy(b.scales, k_scales, 12);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)((l & 15) | (((l + c) & 15) << 4));
    memset(b.qh, 0, 32);
    b.qh[0] = 0xFF; b.qh[2] = 0x55; b.qh[3] = 0xAA;
    float y[256];
    skv_dequant_row(SKV_Q5_K, &b, y, 256);
    assert_true(y[0] == 16.0f);            /* sub 0, bit 0 of qh[0]: 1*16 */
    assert_true(y[32] == 29.5f);           /* sub 1, bit 1 of qh[0]: 2*16 - 2.5 */
    assert_true(y[1] == 1.0f);             /* qh[1] = 0 */
    assert_true(y[2] == 18.0f);            /* bit 0 of 0x55 set */
    assert_true(y[34] == 1.5f);            /* bit 1 of 0x55 clear: 2*2 - 2.5 */
    assert_true(y[3] == 3.0f);             /* bit 0 of 0xAA clear */
    assert_true(y[35] == 35.5f);           /* bit 1 of 0xAA set: 2*19 - 2.5 */
    assert_true(y[227] == 1370.5f);        /* sub 7, bit 7 of 0xAA: 63*(6|16) - 15.5 */
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 32, s = i / 32;
        int q = (i % 64) < 32 ? (l & 15) : ((l + c) & 15);
        q |= ((b.qh[l] >> s) & 1) << 4;
        expect_near(y[i], (float)(k_sc[s] * q) - 0.5f * (float)k_m[s], 0, "q5_K", i);
    }
}

static void test_dequant_q6_K(void **state) {
    (void)state;
    block_q6_K b;
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) b.qh[i] = (uint8_t)(i * 7);
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)((s % 2 ? -1 : 1) * (s + 1));
    b.d = 0x3800; /* 0.5 */
    float y[256];
    skv_dequant_row(SKV_Q6_K, &b, y, 256);
    /* half 0, l = 5: ql[5] = 0x05, ql[37] = 0x25, qh[5] = 35 = 0b00_10_00_11 */
    assert_true(y[5] == 10.5f);    /* (5 | 3<<4) - 32 = 21, scale[0] = 1 */
    assert_true(y[37] == -40.5f);  /* (5 | 0<<4) - 32 = -27, scale[2] = 3 */
    assert_true(y[69] == 0.0f);    /* (0 | 2<<4) - 32 = 0, scale[4] */
    assert_true(y[101] == -105.0f);/* (2 | 0<<4) - 32 = -30, scale[6] = 7 */
    /* half 1, l = 0: ql[64] = 0x40, ql[96] = 0x60, qh[32] = 224 = 0b11_10_00_00 */
    assert_true(y[128] == -144.0f);/* (0 | 0) - 32, scale[8] = 9 */
    assert_true(y[224] == 165.0f); /* (6 | 3<<4) - 32 = 22, scale[14] = 15 */
    assert_true(y[192] == 26.0f);  /* (ql[64] >> 4 = 4 | 2<<4) - 32 = 4, scale[12] = 13 */
}

/* Q6_K with a single non-zero scale (scale[12] = 13, weights 192..207) and a single
 * non-zero code: y[192] (half 1, l = 0, third quarter: ql[64] >> 4 = 4,
 * (qh[32] >> 4) & 3 = 2 -> q = 36 - 32 = 4) = 26; every weight whose scale is 0 is 0. */
static void test_dequant_q6_K_third_quarter(void **state) {
    (void)state;
    block_q6_K b;
    memset(&b, 0, sizeof b);
    b.ql[64] = 0x40;
    b.qh[32] = 224;
    b.scales[12] = 13;
    b.d = 0x3800;
    float y[256];
    skv_dequant_row(SKV_Q6_K, &b, y, 256);
    /* weights 193..207 share scale[12] and have q = 0 - 32: 0.5 * 13 * -32 = -208 */
    for (int i = 0; i < 256; i++)
        expect_near(y[i], i == 192 ? 26.0f : (i > 192 && i < 208) ? -208.0f : 0.0f, 0, "q6_K", i);
}

static void test_dequant_misuse_gives_nan(void **state) {
    (void)state;
    uint8_t raw[64] = { 0 };
    float y[40];
    skv_dequant_row(SKV_Q4_0, raw, y, 40); /* not a multiple of 32 */
    assert_true(isnan(y[0]) && isnan(y[39]));
    skv_dequant_row(SKV_Q2_K, raw, y, 40); /* unsupported */
    assert_true(isnan(y[0]));
}

/* ---------------------------------------------------------------- round trips */

static uint32_t g_rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / (float)(1u << 23) - 1.0f;
}

typedef enum { B_ZERO, B_REL, B_AMAX, B_RANGE } bound_kind;

static void roundtrip(int type, bound_kind kind, float k, float shift, float *worst_ratio) {
    enum { N = 1024 };
    float x[N], y[N];
    uint8_t q[N * 4 + 64];
    *worst_ratio = 0.0f;
    for (int trial = 0; trial < 20; trial++) {
        float scale = trial < 10 ? 1.0f : (float)trial * 3.7f;
        for (int i = 0; i < N; i++) x[i] = scale * (frand() + shift);
        if (trial == 19) for (int i = 0; i < 64; i++) x[i] = 0.0f; /* all-zero blocks */
        skv_quant_row(type, x, q, N);
        skv_dequant_row(type, q, y, N);
        int bs = skv_type_block(type) > 1 ? skv_type_block(type) : 32;
        for (int b0 = 0; b0 < N; b0 += bs) {
            float mn = x[b0], mx = x[b0], amax = 0;
            for (int i = b0; i < b0 + bs; i++) {
                if (x[i] < mn) mn = x[i];
                if (x[i] > mx) mx = x[i];
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            }
            for (int i = b0; i < b0 + bs; i++) {
                float err = fabsf(x[i] - y[i]), lim;
                switch (kind) {
                case B_ZERO: lim = 0; break;
                case B_REL: lim = k * fabsf(x[i]); break;
                case B_AMAX: lim = k * amax; break;
                default: lim = k * (mx - mn); break;
                }
                float ref = kind == B_REL ? fabsf(x[i]) : kind == B_RANGE ? mx - mn : amax;
                if (ref > 0 && err / (k * ref) > *worst_ratio) *worst_ratio = err / (k * ref);
                if (!(err <= lim * 1.02f + 1e-30f)) {
                    print_error("%s: x[%d] = %g -> %g, err %g > bound %g\n", skv_type_name(type), i,
                                x[i], y[i], err, lim);
                    fail();
                }
            }
        }
    }
}

static void test_roundtrip(void **state) {
    (void)state;
    struct { int type; bound_kind kind; float k; } cases[] = {
        { SKV_F32, B_ZERO, 0 },
        { SKV_F16, B_REL, 1.0f / 2048 },
        { SKV_BF16, B_REL, 1.0f / 256 },
        { SKV_Q8_0, B_AMAX, 1.0f / 254 },
        { SKV_Q8_K, B_AMAX, 1.0f / 254 },
        { SKV_Q4_0, B_AMAX, 1.0f / 8 },
        { SKV_Q5_0, B_AMAX, 1.0f / 16 },
        { SKV_Q4_1, B_RANGE, 1.0f / 30 },
        { SKV_Q5_1, B_RANGE, 1.0f / 62 },
        { SKV_Q4_K, B_AMAX, 1.0f / 10 },
        { SKV_Q5_K, B_AMAX, 1.0f / 20 },
        { SKV_Q6_K, B_AMAX, 1.0f / 40 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float w0, w1;
        roundtrip(cases[c].type, cases[c].kind, cases[c].k, 0.0f, &w0);   /* centred */
        roundtrip(cases[c].type, cases[c].kind, cases[c].k, 0.6f, &w1);   /* shifted: min/max asym */
        print_message("round trip %-5s worst error / bound = %.2f, %.2f\n", skv_type_name(cases[c].type), w0, w1);
    }
}

static void test_q8_K_bsums(void **state) {
    (void)state;
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = frand() * 5.0f;
    block_q8_K b[2];
    skv_quant_row(SKV_Q8_K, x, b, 512);
    for (int k = 0; k < 2; k++)
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b[k].qs[16 * g + j];
            assert_int_equal(b[k].bsums[g], s);
        }
    /* symmetric: the largest magnitude maps to +-127 */
    int mx = 0;
    for (int j = 0; j < 256; j++) mx = abs(b[0].qs[j]) > mx ? abs(b[0].qs[j]) : mx;
    assert_int_equal(mx, 127);
}

/* ---------------------------------------------------------------- gguf-py golden rows */

/* Compare every golden entry whose model file starts with `prefix`. Skips when the
 * model is missing. */
static void golden(const char *prefix) {
    size_t len;
    char *txt = skv_read_file("tests/golden/dequant.txt", &len);
    assert_non_null(txt);
    int checked = 0, missing = 0;
    char *save = NULL;
    for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char model[256], name[256], tname[32];
        long long row;
        int n;
        if (sscanf(line, "entry %255s %255s %31s %lld %d", model, name, tname, &row, &n) != 5) continue;
        char *vals = strtok_r(NULL, "\n", &save);
        assert_non_null(vals);
        if (strncmp(model, prefix, strlen(prefix)) != 0) continue;
        char path[1024];
        test_model_file(path, sizeof path, model);
        gguf_file *f = gguf_open(path);
        if (!f) { missing++; continue; }
        const gguf_tensor *t = gguf_find_tensor(f, name);
        assert_non_null(t);
        assert_string_equal(skv_type_name(t->type), tname);
        assert_true(row < t->ne[1] || (t->n_dims == 1 && row == 0));
        size_t rb = skv_row_bytes(t->type, t->ne[0]);
        float *y = malloc((size_t)t->ne[0] * sizeof(float));
        assert_non_null(y);
        skv_dequant_row(t->type, (const uint8_t *)t->data + (size_t)row * rb, y, t->ne[0]);
        char *p = vals;
        for (int i = 0; i < n; i++) {
            char *end;
            float want = strtof(p, &end);
            assert_true(end != p);
            p = end;
            if (!(fabsf(y[i] - want) <= 1e-6f + 2e-6f * fabsf(want))) {
                print_error("%s %s row %lld [%d]: got %.9g, gguf-py %.9g\n", model, name, row, i, y[i], want);
                fail();
            }
        }
        free(y);
        gguf_close(f);
        checked++;
    }
    free(txt);
    if (checked == 0 && missing > 0) skip();
    assert_true(checked > 0);
    print_message("%s: %d golden rows match gguf-py\n", prefix, checked);
}

static int type_by_name(const char *name) {
    for (int t = 0; t < SKV_TYPE_COUNT; t++)
        if (skv_type_supported(t) && strcmp(skv_type_name(t), name) == 0) return t;
    return -1;
}

/* Random raw blocks (every bit pattern, incl. Q5_K and Q4_0/Q5_1 absent from the models)
 * dequantised by gguf-py. Needs no model file. */
static void test_golden_random_blocks(void **state) {
    (void)state;
    size_t len;
    char *txt = skv_read_file("tests/golden/dequant.txt", &len);
    assert_non_null(txt);
    int checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char tname[32];
        int n;
        if (sscanf(line, "block %31s %d", tname, &n) != 2) continue;
        char *hex = strtok_r(NULL, "\n", &save), *vals = strtok_r(NULL, "\n", &save);
        assert_non_null(hex);
        assert_non_null(vals);
        int type = type_by_name(tname);
        assert_true(type >= 0);
        size_t nb = strlen(hex) / 2;
        assert_int_equal(nb, skv_row_bytes(type, n));
        uint8_t *raw = malloc(nb);
        float *y = malloc((size_t)n * sizeof(float));
        assert_non_null(raw);
        assert_non_null(y);
        for (size_t i = 0; i < nb; i++) {
            unsigned v;
            assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
            raw[i] = (uint8_t)v;
        }
        skv_dequant_row(type, raw, y, n);
        char *p = vals;
        for (int i = 0; i < n; i++) {
            char *end;
            float want = strtof(p, &end);
            assert_true(end != p);
            p = end;
            if (!(fabsf(y[i] - want) <= 1e-6f + 2e-6f * fabsf(want))) {
                print_error("random %s block [%d]: got %.9g, gguf-py %.9g\n", tname, i, y[i], want);
                fail();
            }
        }
        free(raw);
        free(y);
        checked++;
    }
    free(txt);
    assert_int_equal(checked, 10);
}

static void test_golden_smollm2(void **state) { (void)state; golden("SmolLM2"); }
static void test_golden_qwen05(void **state) { (void)state; golden("qwen2.5-coder-0.5b"); }
static void test_golden_qwen15(void **state) { (void)state; golden("qwen2.5-coder-1.5b"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_dequant_float_types),
        cmocka_unit_test(test_dequant_q4_0),
        cmocka_unit_test(test_dequant_q4_1),
        cmocka_unit_test(test_dequant_q5_0_q5_1),
        cmocka_unit_test(test_dequant_q8_0_q8_K),
        cmocka_unit_test(test_dequant_q4_K),
        cmocka_unit_test(test_dequant_q5_K),
        cmocka_unit_test(test_dequant_q6_K),
        cmocka_unit_test(test_dequant_q6_K_third_quarter),
        cmocka_unit_test(test_dequant_misuse_gives_nan),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_q8_K_bsums),
        cmocka_unit_test(test_golden_random_blocks),
        cmocka_unit_test(test_golden_smollm2),
        cmocka_unit_test(test_golden_qwen05),
        cmocka_unit_test(test_golden_qwen15),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
