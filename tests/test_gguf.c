/* test_gguf.c: the GGUF reader on the real SmolLM2 / Qwen files, on files written by
 * tests/support/gguf_writer (every value type, every supported tensor type), and on
 * corrupt files: each must be refused with a clear message and never crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/cpu/quant.h"
#include "runtime/format/gguf.h"
#include "common/util.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_env.h"


/* Open `path` both ways (mapped and read into memory), expect failure with a message that
 * starts with the path and contains `want`. */
static void expect_fail(const char *path, const char *want) {
    for (int resident = 0; resident < 2; resident++) {
        skv_clear_error();
        gguf_file *f = resident ? gguf_open_resident(path) : gguf_open(path);
        if (f) {
            gguf_close(f);
            print_error("%s: opened (%s), expected an error containing '%s'\n", path, resident ? "resident" : "mapped", want);
            fail();
        }
        const char *msg = skv_last_error();
        if (strncmp(msg, path, strlen(path)) != 0 || !strstr(msg, want)) {
            print_error("error message '%s'\n  should start with '%s' and contain '%s'\n", msg, path, want);
            fail();
        }
    }
}

/* ---------------------------------------------------------------- real files */

static void test_smollm2(void **state) {
    (void)state;
    char path[1024];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) TEST_SKIP_MISSING(path);
    double t0 = skv_now();
    gguf_file *f = gguf_open(path);
    double dt = skv_now() - t0;
    if (!f) print_error("%s\n", skv_last_error());
    assert_non_null(f);
    print_message("opened %s in %.2f ms\n", path, dt * 1e3);
    assert_true(f->version == 2 || f->version == 3);
    assert_int_equal(f->n_tensors, 272);
    assert_int_equal(f->alignment, 32);
    assert_int_equal(f->data_offset % 32, 0);
    char *arch = gguf_get_str(f, "general.architecture");
    assert_non_null(arch);
    assert_string_equal(arch, "llama");
    free(arch);
    uint32_t u;
    assert_int_equal(gguf_get_u32(f, "llama.block_count", &u), 0);
    assert_int_equal(u, 30);
    assert_int_equal(gguf_get_u32(f, "llama.attention.head_count", &u), 0);
    assert_int_equal(u, 9);
    assert_int_equal(gguf_get_u32(f, "llama.attention.head_count_kv", &u), 0);
    assert_int_equal(u, 3);
    assert_int_equal(gguf_get_u32(f, "llama.embedding_length", &u), 0);
    assert_int_equal(u, 576);
    float eps;
    assert_int_equal(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    assert_true(eps > 0 && eps < 1e-3f);
    const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    assert_non_null(tok);
    assert_int_equal(tok->v.arr.n, 49152);
    assert_true(tok->v.arr.strs[0].len > 0);
    const gguf_kv *tt = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
    assert_non_null(tt);
    assert_int_equal(tt->v.arr.n, 49152);
    assert_null(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_INT32));
    assert_non_null(strstr(skv_last_error(), "expected an array of int32"));
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SKV_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 49152);
    assert_int_equal(t->nbytes, (size_t)49152 * 18 * 34);
    t = gguf_find_tensor(f, "blk.29.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SKV_Q4_1);
    assert_int_equal(t->ne[0], 1536);
    assert_null(gguf_find_tensor(f, "blk.30.ffn_down.weight"));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *x = &f->tensors[i];
        assert_true((const uint8_t *)x->data >= (const uint8_t *)f->map + f->data_offset);
        assert_true((const uint8_t *)x->data + x->nbytes <= (const uint8_t *)f->map + f->size);
    }
    assert_int_equal(gguf_get_u32(f, "no.such.key", &u), -1);
    assert_non_null(strstr(skv_last_error(), "key 'no.such.key' not found"));
    assert_int_equal(gguf_get_u32(f, "general.architecture", &u), -1);
    assert_non_null(strstr(skv_last_error(), "is string, expected an integer"));
    gguf_close(f);
}

/* kB of the mapping that starts at p which this process has touched (smaps Rss), or -1 */
static long mapping_rss_kb(const void *p) {
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    char line[512];
    long rss = -1;
    bool in = false;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {   /* a mapping's header line */
            in = lo == (unsigned long)(uintptr_t)p;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) break;
    }
    fclose(fp);
    return rss;
}

/* Opening maps the file and parses the metadata only: the tensor data is not read (the
 * mapping's resident pages stay a small part of the file). */
static void test_qwen_open_reads_metadata_only(void **state) {
    (void)state;
    const char *files[2] = { TEST_QWEN15, TEST_QWEN05 };
    const int tensors[2] = { 339, 291 }, blocks[2] = { 28, 24 };
    int opened = 0;
    for (int k = 0; k < 2; k++) {
        char path[1024];
        if (!test_model_path(path, sizeof path, files[k])) continue;
        double t0 = skv_now();
        gguf_file *f = gguf_open(path);
        double dt = skv_now() - t0;
        if (!f) print_error("%s\n", skv_last_error());
        assert_non_null(f);
        print_message("opened %s (%zu bytes) in %.2f ms\n", path, f->size, dt * 1e3);
        const long rss = mapping_rss_kb(f->map);
        print_message("  pages touched: %ld kB of %zu kB\n", rss, f->size >> 10);
        assert_true(rss >= 0 && (size_t)rss * 1024 < f->size / 10);
        assert_int_equal(f->n_tensors, tensors[k]);
        uint32_t u;
        assert_int_equal(gguf_get_u32(f, "qwen2.block_count", &u), 0);
        assert_int_equal(u, blocks[k]);
        assert_int_equal(gguf_get_u32(f, "qwen2.attention.head_count_kv", &u), 0);
        assert_int_equal(u, 2);
        const gguf_kv *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
        assert_non_null(tok);
        assert_int_equal(tok->v.arr.n, 151936);
        gguf_close(f);
        opened++;
    }
    if (!opened) skip();
}

/* ---------------------------------------------------------------- writer round trip */

static uint32_t g_rng = 777;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / (float)(1u << 23) - 1.0f;
}

static void test_write_read_all_types(void **state) {
    (void)state;
    gw_writer *w = gw_new();
    assert_non_null(w);
    assert_int_equal(gw_set_alignment(w, 64), 0);
    assert_int_equal(gw_add_u8(w, "t.u8", 200), 0);
    assert_int_equal(gw_add_i8(w, "t.i8", -100), 0);
    assert_int_equal(gw_add_u16(w, "t.u16", 65000), 0);
    assert_int_equal(gw_add_i16(w, "t.i16", -32000), 0);
    assert_int_equal(gw_add_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(gw_add_i32(w, "t.i32", -7), 0);
    assert_int_equal(gw_add_u64(w, "t.u64", 0xfedcba9876543210ull), 0);
    assert_int_equal(gw_add_i64(w, "t.i64", -1234567890123ll), 0);
    assert_int_equal(gw_add_f32(w, "t.f32", 1.5e-5f), 0);
    assert_int_equal(gw_add_f64(w, "t.f64", 3.141592653589793), 0);
    assert_int_equal(gw_add_bool(w, "t.bool", true), 0);
    assert_int_equal(gw_add_str(w, "t.str", "h\xc3\xa9llo"), 0);
    assert_int_equal(gw_add_str(w, "t.empty", ""), 0);
    int32_t ai[3] = { -1, 0, 7 };
    float af[2] = { 0.25f, -8.0f };
    uint8_t ab[3] = { 1, 0, 1 };
    double ad[1] = { 2.5 };
    uint16_t au[2] = { 1, 65535 };
    const char *strs[4] = { "<s>", "", "hello world", "\xe2\x96\x81the" };
    assert_int_equal(gw_add_arr(w, "a.i32", GGUF_INT32, ai, 3), 0);
    assert_int_equal(gw_add_arr(w, "a.f32", GGUF_FLOAT32, af, 2), 0);
    assert_int_equal(gw_add_arr(w, "a.bool", GGUF_BOOL, ab, 3), 0);
    assert_int_equal(gw_add_arr(w, "a.f64", GGUF_FLOAT64, ad, 1), 0);
    assert_int_equal(gw_add_arr(w, "a.u16", GGUF_UINT16, au, 2), 0);
    assert_int_equal(gw_add_arr(w, "a.empty", GGUF_UINT8, NULL, 0), 0);
    assert_int_equal(gw_add_arr_str(w, "a.str", strs, 4), 0);

    /* One tensor of every supported type, shapes of 1..4 dims. */
    const int types[] = { SKV_F32, SKV_F16, SKV_BF16, SKV_Q4_0, SKV_Q4_1, SKV_Q5_0, SKV_Q5_1,
                          SKV_Q8_0, SKV_Q4_K, SKV_Q5_K, SKV_Q6_K, SKV_Q8_K };
    const int nt = (int)(sizeof types / sizeof types[0]);
    float src[512 * 6];
    for (int i = 0; i < 512 * 6; i++) src[i] = frand();
    for (int k = 0; k < nt; k++) {
        char name[64];
        snprintf(name, sizeof name, "tensor.%s", skv_type_name(types[k]));
        int nd = 1 + k % 4;
        int64_t ne[4] = { skv_type_block(types[k]) == 256 ? 256 : 64, 3, 2, 1 };
        if (nd == 1) ne[0] = 512;
        assert_int_equal(gw_add_tensor_f32(w, name, types[k], nd, ne, src), 0);
    }
    const char *path = test_tmp("all.gguf");
    assert_int_equal(gw_write(w, path), 0);

    gguf_file *f = gguf_open(path);
    if (!f) print_error("%s\n", skv_last_error());
    assert_non_null(f);
    assert_int_equal(f->version, 3);
    assert_int_equal(f->alignment, 64);
    assert_int_equal(f->data_offset % 64, 0);
    assert_int_equal(f->n_kv, 21);
    uint32_t u32; uint64_t u64; int64_t i64; float fl; bool b;
    assert_int_equal(gguf_get_u32(f, "t.u8", &u32), 0);  assert_int_equal(u32, 200);
    assert_int_equal(gguf_get_i64(f, "t.i8", &i64), 0);  assert_int_equal(i64, -100);
    assert_int_equal(gguf_get_u32(f, "t.u16", &u32), 0); assert_int_equal(u32, 65000);
    assert_int_equal(gguf_get_i64(f, "t.i16", &i64), 0); assert_int_equal(i64, -32000);
    assert_int_equal(gguf_get_u32(f, "t.u32", &u32), 0); assert_int_equal(u32, 4000000000u);
    assert_int_equal(gguf_get_i64(f, "t.i32", &i64), 0); assert_int_equal(i64, -7);
    assert_int_equal(gguf_get_u64(f, "t.u64", &u64), 0); assert_true(u64 == 0xfedcba9876543210ull);
    assert_int_equal(gguf_get_i64(f, "t.i64", &i64), 0); assert_true(i64 == -1234567890123ll);
    assert_int_equal(gguf_get_f32(f, "t.f32", &fl), 0);  assert_true(fl == 1.5e-5f);
    assert_int_equal(gguf_get_f32(f, "t.f64", &fl), 0);  assert_true(fl == (float)3.141592653589793);
    assert_true(gguf_find(f, "t.f64")->v.f64 == 3.141592653589793);
    assert_int_equal(gguf_get_bool(f, "t.bool", &b), 0); assert_true(b);
    char *s = gguf_get_str(f, "t.str");
    assert_non_null(s); assert_string_equal(s, "h\xc3\xa9llo"); free(s);
    s = gguf_get_str(f, "t.empty");
    assert_non_null(s); assert_string_equal(s, ""); free(s);
    /* getters refuse values that do not fit or have the wrong type */
    assert_int_equal(gguf_get_u32(f, "t.i32", &u32), -1);
    assert_non_null(strstr(skv_last_error(), "negative"));
    assert_int_equal(gguf_get_u32(f, "t.u64", &u32), -1);
    assert_non_null(strstr(skv_last_error(), "does not fit in 32 bits"));
    assert_int_equal(gguf_get_i64(f, "t.u64", &i64), -1);
    assert_int_equal(gguf_get_f32(f, "t.u8", &fl), -1);
    assert_int_equal(gguf_get_bool(f, "t.u8", &b), -1);
    assert_null(gguf_get_str(f, "t.u8"));
    assert_non_null(strstr(skv_last_error(), "all.gguf: key 't.u8' is uint8, expected a string"));
    /* arrays */
    const gguf_kv *kv = gguf_get_arr(f, "a.i32", GGUF_INT32);
    assert_non_null(kv);
    assert_int_equal(kv->v.arr.n, 3);
    int32_t ri[3];
    memcpy(ri, kv->v.arr.data, sizeof ri);
    assert_true(ri[0] == -1 && ri[1] == 0 && ri[2] == 7);
    kv = gguf_get_arr(f, "a.f32", GGUF_FLOAT32);
    assert_non_null(kv);
    float rf[2];
    memcpy(rf, kv->v.arr.data, sizeof rf);
    assert_true(rf[0] == 0.25f && rf[1] == -8.0f);
    kv = gguf_get_arr(f, "a.bool", GGUF_BOOL);
    assert_non_null(kv);
    assert_memory_equal(kv->v.arr.data, ab, 3);
    kv = gguf_get_arr(f, "a.f64", GGUF_FLOAT64);
    assert_non_null(kv);
    double rd;
    memcpy(&rd, kv->v.arr.data, 8);
    assert_true(rd == 2.5);
    kv = gguf_get_arr(f, "a.u16", GGUF_UINT16);
    assert_non_null(kv);
    assert_memory_equal(kv->v.arr.data, au, 4);
    kv = gguf_get_arr(f, "a.empty", GGUF_UINT8);
    assert_non_null(kv);
    assert_int_equal(kv->v.arr.n, 0);
    kv = gguf_get_arr(f, "a.str", GGUF_STRING);
    assert_non_null(kv);
    assert_int_equal(kv->v.arr.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kv->v.arr.strs[i].len, strlen(strs[i]));
        assert_memory_equal(kv->v.arr.strs[i].ptr, strs[i], strlen(strs[i]));
    }
    /* tensors: shapes, alignment, bytes identical to what was written */
    assert_int_equal(f->n_tensors, (uint64_t)nt);
    for (int k = 0; k < nt; k++) {
        const gguf_tensor *t = &f->tensors[k];
        assert_int_equal(t->type, types[k]);
        assert_int_equal(t->n_dims, w->tensors[k].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], (int64_t)w->tensors[k].ne[d]);
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal(t->nbytes, w->tensors[k].nbytes);
        assert_memory_equal(t->data, w->tensors[k].data, t->nbytes);
        assert_ptr_equal(gguf_find_tensor(f, t->name), t);
        /* and the first row dequantises back close to the source */
        float y[512];
        skv_dequant_row(t->type, t->data, y, t->ne[0]);
        for (int i = 0; i < t->ne[0]; i++) assert_true(fabsf(y[i] - src[i]) < 0.2f);
    }
    gguf_close(f);
    gw_free(w);
}

static void test_version2_and_no_tensors(void **state) {
    (void)state;
    gw_writer *w = gw_new();
    w->version = 2;
    gw_add_str(w, "general.architecture", "llama");
    const char *path = test_tmp("v2.gguf");
    assert_int_equal(gw_write(w, path), 0);
    gguf_file *f = gguf_open(path);
    assert_non_null(f);
    assert_int_equal(f->version, 2);
    assert_int_equal(f->n_tensors, 0);
    gguf_close(f);
    gw_free(w);
}

/* ---------------------------------------------------------------- corrupt files */

/* A small valid model: a few kvs (incl. a string array) and two tensors, the last of
 * which ends exactly at the end of the file. */
static gw_writer *small_model(void) {
    gw_writer *w = gw_new();
    assert_non_null(w);
    const char *toks[3] = { "a", "bc", "def" };
    gw_add_str(w, "general.architecture", "llama");
    gw_add_u32(w, "llama.block_count", 1);
    gw_add_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gw_add_f32(w, "llama.rope.freq_base", 10000.0f);
    float x[64 * 2];
    for (int i = 0; i < 128; i++) x[i] = frand();
    gw_add_tensor_f32(w, "blk.0.attn_q.weight", SKV_Q8_0, 2, (int64_t[]){ 64, 2 }, x);
    gw_add_tensor_f32(w, "output_norm.weight", SKV_F32, 1, (int64_t[]){ 8 }, x);
    return w;
}

static void write_model(gw_writer *w, const char *path) {
    assert_int_equal(gw_write(w, path), 0);
    gw_free(w);
}

static void test_truncated_everywhere(void **state) {
    (void)state;
    gw_writer *w = small_model();
    size_t n;
    uint8_t *buf = gw_build(w, &n);
    assert_non_null(buf);
    gw_free(w);
    const char *path = test_tmp("cut.gguf");
    assert_int_equal(gw_write_bytes(path, buf, n), 0);
    gguf_file *f = gguf_open(path);
    assert_non_null(f); /* the full file is valid */
    gguf_close(f);
    for (size_t cut = 0; cut < n; cut++) {
        assert_int_equal(gw_write_bytes(path, buf, cut), 0);
        skv_clear_error();
        f = gguf_open(path);
        if (f) {
            print_error("file cut at %zu of %zu bytes opened\n", cut, n);
            gguf_close(f);
            fail();
        }
        const char *msg = skv_last_error();
        assert_true(strncmp(msg, path, strlen(path)) == 0);
        assert_true(strstr(msg, "truncated") || strstr(msg, "past end of file") ||
                    strstr(msg, "cannot fit") || strstr(msg, "not a GGUF file"));
    }
    print_message("%zu truncated files refused\n", n);
    free(buf);
}

static void test_bad_header(void **state) {
    (void)state;
    const char *path = test_tmp("bad.gguf");
    gw_writer *w = small_model();
    memcpy(&w->magic, "GGUX", 4);
    write_model(w, path);
    expect_fail(path, "not a GGUF file (bad magic");

    w = small_model(); w->version = 1; write_model(w, path);
    expect_fail(path, "GGUF version 1 is not supported");
    w = small_model(); w->version = 99; write_model(w, path);
    expect_fail(path, "unsupported GGUF version 99");
    w = small_model(); w->version = 0x03000000u; write_model(w, path);
    expect_fail(path, "big-endian");

    w = small_model(); w->n_kv_set = true; w->n_kv = UINT64_MAX; write_model(w, path);
    expect_fail(path, "kv count 18446744073709551615 cannot fit");
    w = small_model(); w->n_kv_set = true; w->n_kv = 1000; write_model(w, path);
    expect_fail(path, "cannot fit");
    w = small_model(); w->n_tensors_set = true; w->n_tensors = 1ull << 60; write_model(w, path);
    expect_fail(path, "tensor count 1152921504606846976 cannot fit");
    w = small_model(); w->n_tensors_set = true; w->n_tensors = 3; write_model(w, path);
    expect_fail(path, "");  /* reads the data section as a tensor info: refused somehow */

    assert_int_equal(gw_write_bytes(path, "", 0), 0);
    expect_fail(path, "empty");
    assert_int_equal(gw_write_bytes(path, "GGUF\3\0\0", 7), 0);
    expect_fail(path, "truncated");
    expect_fail(test_tmp("does-not-exist.gguf"), "cannot open");
    expect_fail(test_tmpdir(), "not a regular file");
}

static void raw_kv(gw_writer *w, const char *key, uint32_t type, const void *val, size_t n) {
    uint64_t kl = strlen(key);
    uint8_t buf[256];
    memcpy(buf, &kl, 8);
    memcpy(buf + 8, key, (size_t)kl);
    memcpy(buf + 8 + kl, &type, 4);
    memcpy(buf + 12 + kl, val, n);
    assert_int_equal(gw_add_raw_kv(w, buf, 12 + (size_t)kl + n), 0);
}

static void test_bad_metadata(void **state) {
    (void)state;
    const char *path = test_tmp("badkv.gguf");
    gw_writer *w;
    uint8_t v[32];
    uint64_t big = 1ull << 62;

    w = small_model(); memcpy(v, &big, 8); raw_kv(w, "x.str", GGUF_STRING, v, 8); write_model(w, path);
    expect_fail(path, "string length 4611686018427387904 runs past end of file");

    w = small_model(); uint32_t nested[4] = { GGUF_ARRAY, 1, 0, GGUF_UINT8 };
    raw_kv(w, "x.nested", GGUF_ARRAY, nested, 16); write_model(w, path);
    expect_fail(path, "key 'x.nested': nested arrays are not supported");

    w = small_model(); uint32_t et = GGUF_UINT32; memcpy(v, &et, 4); memcpy(v + 4, &big, 8);
    raw_kv(w, "x.arr", GGUF_ARRAY, v, 12); write_model(w, path);
    expect_fail(path, "key 'x.arr': array of 4611686018427387904 uint32 cannot fit");

    w = small_model(); et = GGUF_STRING; memcpy(v, &et, 4); memcpy(v + 4, &big, 8);
    raw_kv(w, "x.sarr", GGUF_ARRAY, v, 12); write_model(w, path);
    expect_fail(path, "array of 4611686018427387904 string cannot fit");

    w = small_model(); et = 13; memcpy(v, &et, 4); memcpy(v + 4, &big, 8);
    raw_kv(w, "x.arr", GGUF_ARRAY, v, 12); write_model(w, path);
    expect_fail(path, "unknown array element type 13");

    w = small_model(); raw_kv(w, "x.bad", 42, v, 4); write_model(w, path);
    expect_fail(path, "key 'x.bad': unknown value type 42");

    w = small_model(); v[0] = 2; raw_kv(w, "x.bool", GGUF_BOOL, v, 1); write_model(w, path);
    expect_fail(path, "bool value 2");

    w = small_model(); raw_kv(w, "", GGUF_UINT8, v, 1); write_model(w, path);
    expect_fail(path, "kv 4: key at offset");
    expect_fail(path, "is empty");

    w = small_model(); gw_add_u32(w, "llama.block_count", 2); write_model(w, path);
    expect_fail(path, "duplicate key 'llama.block_count'");

    w = small_model(); gw_add_u32(w, "general.alignment", 48); write_model(w, path);
    expect_fail(path, "general.alignment 48 is not a power of two");
    w = small_model(); gw_add_u32(w, "general.alignment", 0); write_model(w, path);
    expect_fail(path, "general.alignment 0 is not a power of two");
    w = small_model(); gw_add_str(w, "general.alignment", "32"); write_model(w, path);
    expect_fail(path, "key 'general.alignment' is string, expected an integer");
}

static void test_bad_tensors(void **state) {
    (void)state;
    const char *path = test_tmp("badt.gguf");
    gw_writer *w;

    w = small_model(); w->tensors[0].n_dims = 0; write_model(w, path);
    expect_fail(path, "tensor 'blk.0.attn_q.weight': n_dims 0 is not in 1..4");
    w = small_model(); w->tensors[0].n_dims = 5; write_model(w, path);
    expect_fail(path, "n_dims 5 is not in 1..4");
    w = small_model(); w->tensors[0].n_dims = 0xffffffffu; write_model(w, path);
    expect_fail(path, "n_dims 4294967295 is not in 1..4");
    w = small_model(); w->tensors[0].ne[1] = 0; write_model(w, path);
    expect_fail(path, "dimension 1 has size 0");
    w = small_model(); w->tensors[0].ne[1] = UINT64_MAX; write_model(w, path);
    expect_fail(path, "dimension 1 has size 18446744073709551615");
    /* product overflow: each dim fits, the product does not */
    w = small_model(); w->tensors[0].n_dims = 4;
    w->tensors[0].ne[1] = 1ull << 40; w->tensors[0].ne[2] = 1ull << 40; w->tensors[0].ne[3] = 3;
    write_model(w, path);
    expect_fail(path, "overflows");
    w = small_model(); w->tensors[0].ne[1] = 1ull << 58; write_model(w, path);
    expect_fail(path, "overflows");  /* 2^58 rows x 68 bytes */
    /* elements fit in int64 (2^62), bytes do not fit in size_t (2^64) */
    w = small_model(); w->tensors[1].n_dims = 2; w->tensors[1].ne[1] = 1ull << 59; write_model(w, path);
    expect_fail(path, "tensor 'output_norm.weight': byte size (32 bytes x 576460752303423488 rows) overflows");
    w = small_model(); w->tensors[0].ne[1] = 1ull << 40; write_model(w, path);
    expect_fail(path, "runs past end of file");
    w = small_model(); w->tensors[0].ne[0] = 48; write_model(w, path);
    expect_fail(path, "tensor 'blk.0.attn_q.weight': row of 48 weights is not a positive multiple of the Q8_0 block size 32");
    w = small_model(); w->tensors[0].type = 99; write_model(w, path);
    expect_fail(path, "tensor 'blk.0.attn_q.weight': unsupported tensor type unknown (99)");
    w = small_model(); w->tensors[0].type = SKV_Q2_K; write_model(w, path);
    expect_fail(path, "unsupported tensor type Q2_K (10)");
    w = small_model(); w->tensors[1].offset = 1ull << 40; w->tensors[1].offset_fixed = true; write_model(w, path);
    expect_fail(path, "tensor 'output_norm.weight' data [offset 1099511627776, 32 bytes] runs past end of file (size");
    w = small_model(); w->tensors[1].offset = UINT64_MAX - 31; w->tensors[1].offset_fixed = true; write_model(w, path);
    expect_fail(path, "runs past end of file");
    w = small_model(); w->tensors[1].offset = 8; w->tensors[1].offset_fixed = true; write_model(w, path);
    expect_fail(path, "tensor 'output_norm.weight': data offset 8 is not a multiple of the alignment 32");
    w = small_model(); free(w->tensors[1].name); w->tensors[1].name = skv_strdup("blk.0.attn_q.weight");
    write_model(w, path);
    expect_fail(path, "duplicate tensor name 'blk.0.attn_q.weight'");
    w = small_model(); free(w->tensors[1].name); w->tensors[1].name = skv_strdup("");
    write_model(w, path);
    expect_fail(path, "tensor name at offset");
}

/* Random byte mutations of a small valid file: every result either opens (and then
 * all its tensor bytes are readable and dequantisable) or fails with a message naming
 * the file. Never a crash (run under ASan/UBSan too). */
static void test_mutations(void **state) {
    (void)state;
    gw_writer *w = small_model();
    size_t n;
    uint8_t *buf = gw_build(w, &n), *mut = malloc(n);
    assert_non_null(buf);
    assert_non_null(mut);
    gw_free(w);
    const char *path = test_tmp("mut.gguf");
    int opened = 0, refused = 0;
    for (int iter = 0; iter < 1500; iter++) {
        memcpy(mut, buf, n);
        int flips = 1 + iter % 3;
        for (int k = 0; k < flips; k++) {
            g_rng = g_rng * 1664525u + 1013904223u;
            size_t at = (g_rng >> 8) % n;
            g_rng = g_rng * 1664525u + 1013904223u;
            mut[at] = (uint8_t)(iter % 5 == 0 ? 0xff : (g_rng >> 24));
        }
        assert_int_equal(gw_write_bytes(path, mut, n), 0);
        skv_clear_error();
        gguf_file *f = gguf_open(path);
        if (!f) {
            assert_true(strncmp(skv_last_error(), path, strlen(path)) == 0);
            refused++;
            continue;
        }
        opened++;
        unsigned sum = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            for (size_t b = 0; b < t->nbytes; b++) sum += ((const uint8_t *)t->data)[b];
            if (t->ne[0] <= 4096) {
                float *y = malloc((size_t)t->ne[0] * sizeof(float));
                assert_non_null(y);
                skv_dequant_row(t->type, t->data, y, t->ne[0]);
                free(y);
            }
        }
        for (uint64_t i = 0; i < f->n_kv; i++) { /* every string is readable */
            const gguf_kv *kv = &f->kv[i];
            if (kv->type == GGUF_STRING) free(gguf_get_str(f, kv->key));
            if (kv->type == GGUF_ARRAY && kv->v.arr.type == GGUF_STRING)
                for (uint64_t j = 0; j < kv->v.arr.n; j++)
                    if (kv->v.arr.strs[j].len) sum += (unsigned char)kv->v.arr.strs[j].ptr[kv->v.arr.strs[j].len - 1];
        }
        (void)sum;
        gguf_close(f);
    }
    print_message("mutations: %d opened, %d refused\n", opened, refused);
    free(buf);
    free(mut);
}

/* gguf_open_resident (the model loader's open: the file read into huge-page memory) gives
 * the same metadata and the same tensor bytes as the mapped open, and aligned data. */
static void test_resident_equals_mapped(void **state) {
    (void)state;
    char path[1024];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) TEST_SKIP_MISSING(path);
    gguf_file *a = gguf_open(path), *b = gguf_open_resident(path);
    assert_non_null(a);
    assert_non_null(b);
    assert_false(a->resident);
    assert_true(b->resident);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->n_kv, b->n_kv);
    assert_int_equal(a->n_tensors, b->n_tensors);
    assert_int_equal(a->data_offset, b->data_offset);
    assert_memory_equal(a->map, b->map, a->size);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        assert_string_equal(a->tensors[i].name, b->tensors[i].name);
        assert_int_equal(a->tensors[i].nbytes, b->tensors[i].nbytes);
        assert_int_equal((uintptr_t)b->tensors[i].data % b->alignment, 0);
        assert_ptr_equal((const uint8_t *)b->tensors[i].data - (const uint8_t *)b->map,
                         (const uint8_t *)a->tensors[i].data - (const uint8_t *)a->map);
    }
    gguf_close(a);
    gguf_close(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_resident_equals_mapped),
        cmocka_unit_test(test_qwen_open_reads_metadata_only),
        cmocka_unit_test(test_write_read_all_types),
        cmocka_unit_test(test_version2_and_no_tensors),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
