/* test_hf.c: Hugging Face directory loading (config.json + safetensors, sharded or not) and
 * its agreement with GGUF: the same tiny random weights give the same logits from both.
 * Also every malformed file / config is refused with a message naming the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"
#include "runtime/format/safetensors.h"
#include "common/util.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

/* ---- scratch directories ---- */

/* each case gets its own: test_tmpdir_setup passes its path as *state */

/* dir/name in one of test_path's rotating buffers */
static const char *pj(const char *dir, const char *name) {
    const char *p = test_path(dir, name);
    assert_non_null(p);
    return p;
}

/* mkdir dir/sub and return its path (static buffer rotation) */
static const char *subdir(const char *dir, const char *sub) {
    const char *p = pj(dir, sub);
    assert_int_equal(mkdir(p, 0755), 0);
    return p;
}

/* Replace the first `from` in dir/config.json by `to`. */
static void edit_config(const char *dir, const char *from, const char *to) {
    size_t len;
    const char *path = pj(dir, "config.json");
    char *t = skv_read_file(path, &len);
    assert_non_null(t);
    char *at = strstr(t, from);
    assert_non_null(at);
    size_t n = len - strlen(from) + strlen(to) + 1;
    char *o = malloc(n);
    assert_non_null(o);
    memcpy(o, t, (size_t)(at - t));
    strcpy(o + (at - t), to);
    strcat(o, at + strlen(from));
    assert_int_equal(skv_write_file_atomic(path, o, strlen(o)), 0);
    free(t);
    free(o);
}

static void write_text(const char *path, const char *s) {
    assert_int_equal(skv_write_file_atomic(path, s, strlen(s)), 0);
}

/* Expect loading dir to fail with a message containing want (and print it). */
static void expect_refused(const char *dir, const char *want) {
    skv_clear_error();
    skv_model *m = skv_model_load_hf(dir);
    if (m) { skv_model_free(m); fail_msg("%s: loaded, expected refusal '%s'", dir, want); }
    const char *e = skv_last_error();
    if (!strstr(e, want)) fail_msg("error '%s' lacks '%s'", e, want);
    print_message("  refused: %s\n", e + (strncmp(e, "/tmp/", 5) == 0 ? strlen("/tmp/skv_test_hf_XXXXXX/") : 0));
}

/* ---- weight comparisons ---- */

static float elem(const skv_weight *w, size_t i) {
    const uint8_t *p = w->data;
    if (w->type == SKV_F32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return w->type == SKV_F16 ? skv_f16_to_f32(h) : skv_bf16_to_f32(h);
}

static void check_weight(const skv_weight *w, const float *want, int64_t rows, int64_t cols, int type) {
    assert_non_null(w->data);
    assert_int_equal(w->type, type);
    assert_int_equal(w->rows, rows);
    if (cols) assert_int_equal(w->cols, cols);
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    for (size_t i = 0; i < n; i++)
        if (elem(w, i) != want[i]) fail_msg("element %zu: %g != %g", i, (double)elem(w, i), (double)want[i]);
}

static void check_model(const skv_model *m, const tiny_model *t, int type) {
    const skv_config *c = &m->cfg, *e = &t->cfg;
    assert_int_equal(c->arch, e->arch);
    assert_int_equal(c->n_layer, e->n_layer);
    assert_int_equal(c->dim, e->dim);
    assert_int_equal(c->n_head, e->n_head);
    assert_int_equal(c->n_kv_head, e->n_kv_head);
    assert_int_equal(c->head_dim, e->head_dim);
    assert_int_equal(c->ffn_dim, e->ffn_dim);
    assert_int_equal(c->vocab, e->vocab);
    assert_int_equal(c->ctx_max, e->ctx_max);
    assert_true(c->rope_theta == e->rope_theta);
    assert_true(c->norm_eps == e->norm_eps);
    assert_int_equal(c->rope_mode, SKV_ROPE_HALVES);
    assert_int_equal(c->tied_embeddings, e->tied_embeddings);
    assert_int_equal(c->has_qkv_bias, e->has_qkv_bias);
    int64_t C = c->dim, F = c->ffn_dim, V = c->vocab, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim;
    check_weight(&m->tok_embd, t->embd, V, C, type);
    check_weight(&m->out_norm, t->out_norm, C, 0, SKV_F32);
    if (e->tied_embeddings) assert_ptr_equal(m->output.data, m->tok_embd.data);
    else check_weight(&m->output, t->output, V, C, type);
    for (int l = 0; l < c->n_layer; l++) {
        const skv_layer *y = &m->layers[l];
        const tiny_layer *x = &t->layers[l];
        check_weight(&y->attn_norm, x->attn_norm, C, 0, SKV_F32);
        check_weight(&y->wq, x->wq, Q, C, type);
        check_weight(&y->wk, x->wk, KV, C, type);
        check_weight(&y->wv, x->wv, KV, C, type);
        check_weight(&y->wo, x->wo, C, Q, type);
        check_weight(&y->ffn_norm, x->ffn_norm, C, 0, SKV_F32);
        check_weight(&y->w_gate, x->gate, F, C, type);
        check_weight(&y->w_up, x->up, F, C, type);
        check_weight(&y->w_down, x->down, C, F, type);
        if (e->has_qkv_bias) {
            check_weight(&y->bq, x->bq, Q, 0, SKV_F32);
            check_weight(&y->bk, x->bk, KV, 0, SKV_F32);
            check_weight(&y->bv, x->bv, KV, 0, SKV_F32);
        } else {
            assert_null(y->bq.data);
        }
    }
}

static void load_and_check(const char *dir, skv_arch arch, int tied, int type, int shards) {
    tiny_model *t = tiny_model_new(arch, 7, tied, type);
    assert_non_null(t);
    if (tiny_model_write_hf(t, dir, type, shards) != 0) fail_msg("write: %s", skv_last_error());
    skv_model *m = skv_model_load_hf(dir);
    if (!m) fail_msg("load: %s", skv_last_error());
    check_model(m, t, type);
    assert_non_null(m->hf);
    assert_null(m->gguf);
    assert_null(m->tok);
    skv_model_free(m);
    tiny_model_free(t);
}

/* ---- loader tests ---- */

static void test_llama_f32(void **state) { load_and_check(*state, SKV_ARCH_LLAMA, 0, SKV_F32, 1); }
static void test_llama_bf16_tied(void **state) { load_and_check(*state, SKV_ARCH_LLAMA, 1, SKV_BF16, 1); }
static void test_qwen2_f16_tied(void **state) { load_and_check(*state, SKV_ARCH_QWEN2, 1, SKV_F16, 1); }
static void test_qwen2_bf16(void **state) { load_and_check(*state, SKV_ARCH_QWEN2, 0, SKV_BF16, 1); }
static void test_qwen2_f32_sharded(void **state) { load_and_check(*state, SKV_ARCH_QWEN2, 0, SKV_F32, 3); }
static void test_llama_f16_sharded(void **state) { load_and_check(*state, SKV_ARCH_LLAMA, 0, SKV_F16, 2); }

/* Sharded and single-file directories of one model hold byte-identical weights, and the
 * generic skv_model_load() dispatches a directory to this loader. */
static void test_sharded_equals_single(void **state) {
    const char *d1 = subdir(*state, "one"), *d2 = subdir(*state, "two");
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s", d1);
    snprintf(b, sizeof b, "%s", d2);
    tiny_model *t = tiny_model_new(SKV_ARCH_QWEN2, 3, 0, SKV_BF16);
    assert_non_null(t);
    assert_int_equal(tiny_model_write_hf(t, a, SKV_BF16, 1), 0);
    assert_int_equal(tiny_model_write_hf(t, b, SKV_BF16, 2), 0);
    skv_model *m1 = skv_model_load(a), *m2 = skv_model_load(b);
    if (!m1 || !m2) fail_msg("load: %s", skv_last_error());
    assert_memory_equal(&m1->cfg, &m2->cfg, sizeof m1->cfg);
    assert_int_equal(m1->weight_bytes, m2->weight_bytes);
    const skv_weight *w1 = &m1->tok_embd, *w2 = &m2->tok_embd;
    assert_memory_equal(w1->data, w2->data, (size_t)(w1->rows * w1->cols * 2));
    for (int l = 0; l < m1->cfg.n_layer; l++) {
        const skv_weight *x1 = &m1->layers[l].attn_norm, *x2 = &m2->layers[l].bq;
        const skv_weight *y1 = &m2->layers[l].attn_norm, *y2 = &m1->layers[l].bq;
        assert_memory_equal(x1->data, y1->data, (size_t)x1->rows * 4);
        assert_memory_equal(x2->data, y2->data, (size_t)x2->rows * 4);
        assert_memory_equal(m1->layers[l].w_down.data, m2->layers[l].w_down.data, 64 * 96 * 2);
    }
    assert_string_equal(m2->name, "two");
    skv_model_free(m1);
    skv_model_free(m2);
    tiny_model_free(t);
}

/* A header not padded to 8 bytes leaves F32 data misaligned: still loads (copied). */
static void test_unaligned_header(void **state) {
    const char *dir = *state;
    tiny_model *t = tiny_model_new(SKV_ARCH_LLAMA, 5, 1, SKV_F32);
    assert_non_null(t);
    assert_int_equal(tiny_model_write_hf(t, dir, SKV_F32, 1), 0);
    size_t len;
    char *f = skv_read_file(pj(dir, "model.safetensors"), &len);
    assert_non_null(f);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)(uint8_t)f[i] << (8 * i);
    /* trailing pad spaces -> drop them and add one leading space: odd-aligned data */
    size_t hl = (size_t)n;
    while (hl > 0 && f[8 + hl - 1] == ' ') hl--;
    char *h = malloc(hl + 2);
    h[0] = ' ';
    memcpy(h + 1, f + 8, hl);
    size_t nh = hl + 1;
    if (nh % 4 == 0) h[nh++] = ' ';
    assert_int_equal(tiny_write_raw(pj(dir, "model.safetensors"), nh, h, nh, f + 8 + n, len - 8 - n), 0);
    skv_model *m = skv_model_load_hf(dir);
    if (!m) fail_msg("load: %s", skv_last_error());
    check_model(m, t, SKV_F32);
    assert_int_equal((uintptr_t)m->layers[0].wq.data % 4, 0);
    skv_model_free(m);
    free(h);
    free(f);
    tiny_model_free(t);
}

/* ---- malformed safetensors files ---- */

static const char *k_one = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";

static void st_refused(const char *path, const char *want) {
    skv_clear_error();
    safetensors_file *f = safetensors_open(path);
    if (f) { safetensors_close(f); fail_msg("opened, expected '%s'", want); }
    const char *e = skv_last_error();
    if (!strstr(e, want) || !strstr(e, path)) fail_msg("error '%s' lacks '%s' or the path", e, want);
}

static void raw(const char *path, const char *hdr, size_t data_len) {
    static const uint8_t zeros[4096];
    assert_true(data_len <= sizeof zeros);
    assert_int_equal(tiny_write_raw(path, strlen(hdr), hdr, strlen(hdr), zeros, data_len), 0);
}

static void test_safetensors_format(void **state) {
    const char *p = pj(*state, "x.safetensors");
    /* well-formed reference, __metadata__ ignored */
    raw(p, "{\"__metadata__\":{\"k\":\"v\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
           "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[22,22]},"
           "\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}", 32);
    safetensors_file *f = safetensors_open(p);
    if (!f) fail_msg("%s", skv_last_error());
    assert_int_equal(f->n_tensors, 4);
    const safetensors_tensor *a = safetensors_find(f, "a"), *b = safetensors_find(f, "b");
    assert_non_null(a); assert_non_null(b);
    assert_int_equal(a->type, SKV_F32); assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2); assert_int_equal(a->shape[1], 2);
    assert_int_equal(b->type, SKV_BF16); assert_int_equal(b->nbytes, 6);
    assert_int_equal(safetensors_find(f, "i")->type, -1);
    assert_string_equal(safetensors_find(f, "i")->dtype, "I64");
    assert_null(safetensors_find(f, "__metadata__"));
    assert_null(safetensors_find(f, "zz"));
    safetensors_close(f);

    /* too small, header length past the end, header too large */
    assert_int_equal(skv_write_file_atomic(p, "abc", 3), 0);
    st_refused(p, "too small");
    assert_int_equal(tiny_write_raw(p, 0, NULL, 0, NULL, 0), 0);   /* empty header */
    st_refused(p, "not valid JSON");
    assert_int_equal(tiny_write_raw(p, 1000, k_one, strlen(k_one), NULL, 0), 0);
    st_refused(p, "past end of file");
    assert_int_equal(tiny_write_raw(p, (uint64_t)200 * 1000 * 1000, k_one, strlen(k_one), NULL, 0), 0);
    st_refused(p, "header too large");
    assert_int_equal(tiny_write_raw(p, UINT64_MAX, k_one, strlen(k_one), NULL, 0), 0);
    st_refused(p, "header too large");
    /* not JSON / not an object / bad entries */
    raw(p, "{\"a\":{\"dtype\":\"F32\",", 0);
    st_refused(p, "not valid JSON");
    raw(p, "[1,2,3]", 0);
    st_refused(p, "not a JSON object");
    raw(p, "{\"a\":3}", 0);
    st_refused(p, "not a JSON object");
    raw(p, "{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    st_refused(p, "unknown dtype 'Q9'");
    raw(p, "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    st_refused(p, "missing dtype");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    st_refused(p, "bad shape");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8);
    st_refused(p, "bad shape");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8);
    st_refused(p, "overflow");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8);
    st_refused(p, "data_offsets must be");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    st_refused(p, "begin 8 > end 0");
    /* offsets against the file size and each other */
    raw(p, k_one, 12);
    st_refused(p, "past end of data");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    st_refused(p, "need 16");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
           "\"z\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[4,4]},"
           "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]}}", 16);
    st_refused(p, "overlap");
    raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    st_refused(p, "listed twice");
    /* missing file */
    skv_clear_error();
    assert_null(safetensors_open(pj(*state, "nope.safetensors")));
    assert_non_null(strstr(skv_last_error(), "cannot open"));
}

/* Every truncation and 400 random header mutations of a small valid file either open (with
 * all tensors inside the file) or fail with a message; never crash (run under ASan). */
static void test_safetensors_fuzz(void **state) {
    const char *p = pj(*state, "f.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {7, 8, 9, 10};
    tiny_tensor ts[2] = {{"alpha", SKV_F32, 2, {2, 3}, a}, {"beta.bias", SKV_BF16, 1, {4, 0}, b}};
    assert_int_equal(tiny_write_safetensors(p, ts, 2), 0);
    size_t len;
    char *orig = skv_read_file(p, &len);
    assert_non_null(orig);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(uint8_t)orig[i] << (8 * i);
    uint64_t rng = 12345;
    int opened = 0, refused = 0;
    for (size_t it = 0; it < len + 400; it++) {
        size_t n = len;
        char *buf = malloc(len);
        memcpy(buf, orig, len);
        if (it < len) n = it;                       /* truncation */
        else {                                      /* 1-3 random byte changes in the header */
            int k = 1 + (int)((rng >> 7) % 3);
            for (int j = 0; j < k; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (size_t)((rng >> 33) % (8 + hl));
                buf[at] = "0123456789{}[]\",:-. eFA"[(rng >> 20) % 24];
            }
        }
        assert_int_equal(skv_write_file_atomic(p, buf, n), 0);
        skv_clear_error();
        safetensors_file *f = safetensors_open(p);
        if (f) {
            opened++;
            unsigned sum = 0;
            for (size_t t = 0; t < f->n_tensors; t++) {
                const safetensors_tensor *x = &f->tensors[t];
                assert_true(x->end <= f->size - f->data_offset);
                for (size_t q = 0; q < x->nbytes; q++) sum += ((const uint8_t *)x->data)[q];
            }
            (void)sum;
            safetensors_close(f);
        } else {
            refused++;
            assert_non_null(strstr(skv_last_error(), p));
        }
        free(buf);
    }
    print_message("  %d opened, %d refused\n", opened, refused);
    assert_true(refused > 0 && opened > 0);
    free(orig);
}

/* ---- malformed model directories ---- */

static tiny_model *write_ok(const char *dir, skv_arch arch, int tied, int shards) {
    tiny_model *t = tiny_model_new(arch, 11, tied, SKV_F32);
    assert_non_null(t);
    assert_int_equal(tiny_model_write_hf(t, dir, SKV_F32, shards), 0);
    return t;
}

static void test_bad_config(void **state) {
    const char *root = *state;
    char d[1024];
    tiny_model *t;
#define FRESH(name, arch) (snprintf(d, sizeof d, "%s", subdir(root, name)), t = write_ok(d, arch, 0, 1), tiny_model_free(t))

    expect_refused(root, "no config.json");
    FRESH("a", SKV_ARCH_LLAMA);
    write_text(pj(d, "config.json"), "{\"model_type\": ");
    expect_refused(d, "not a valid JSON object");
    FRESH("b", SKV_ARCH_LLAMA);
    edit_config(d, "\"model_type\": \"llama\"", "\"model_type\": \"phi3\"");
    expect_refused(d, "unsupported model_type 'phi3'");
    FRESH("c", SKV_ARCH_LLAMA);   /* architectures fallback: drop model_type */
    edit_config(d, "\"model_type\": \"llama\",", "");
    skv_model *m = skv_model_load_hf(d);
    if (!m) fail_msg("%s", skv_last_error());
    assert_int_equal(m->cfg.arch, SKV_ARCH_LLAMA);
    skv_model_free(m);
    edit_config(d, "LlamaForCausalLM", "GPT2LMHeadModel");
    expect_refused(d, "unsupported architecture 'GPT2LMHeadModel'");
    FRESH("d", SKV_ARCH_LLAMA);
    edit_config(d, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2.0}");
    expect_refused(d, "rope_scaling has rope_type 'yarn'");
    /* transformers >= 5 style: rope_parameters carries theta */
    FRESH("d2", SKV_ARCH_QWEN2);
    edit_config(d, "\"rope_theta\": 50000.0,", "\"rope_parameters\": {\"rope_theta\": 250000.0, \"rope_type\": \"default\"},");
    edit_config(d, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"default\"}");
    m = skv_model_load_hf(d);
    if (!m) fail_msg("%s", skv_last_error());
    assert_true(m->cfg.rope_theta == 250000.0f);
    skv_model_free(m);
    edit_config(d, "\"rope_type\": \"default\"}", "\"rope_type\": \"llama3\", \"factor\": 8.0}");
    expect_refused(d, "rope_parameters (llama3) needs positive low_freq_factor");
    FRESH("d3", SKV_ARCH_LLAMA);
    edit_config(d, "\"rope_scaling\": null", "\"rope_scaling\": [1]");
    expect_refused(d, "rope_scaling must be an object or null");
    FRESH("e", SKV_ARCH_QWEN2);
    edit_config(d, "\"hidden_size\": 64,", "");
    expect_refused(d, "missing hidden_size");
    FRESH("f", SKV_ARCH_QWEN2);
    edit_config(d, "\"num_attention_heads\": 4", "\"num_attention_heads\": -4");
    expect_refused(d, "num_attention_heads must be a positive integer");
    FRESH("g", SKV_ARCH_QWEN2);
    edit_config(d, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    expect_refused(d, "not a multiple of num_key_value_heads");
    FRESH("h", SKV_ARCH_LLAMA);
    edit_config(d, "\"attention_bias\": false", "\"attention_bias\": true");
    expect_refused(d, "attention_bias");
    FRESH("i", SKV_ARCH_QWEN2);
    edit_config(d, "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    expect_refused(d, "use_sliding_window");
    FRESH("j", SKV_ARCH_LLAMA);
    edit_config(d, "\"silu\"", "\"gelu\"");
    expect_refused(d, "hidden_act");
    /* defaults: no num_key_value_heads -> = heads, so k_proj has the wrong shape */
    FRESH("k", SKV_ARCH_LLAMA);
    edit_config(d, "\"num_key_value_heads\": 2,", "");
    expect_refused(d, "self_attn.k_proj.weight': shape [32, 64], expected [64, 64]");
#undef FRESH
}

static void test_bad_tensors(void **state) {
    const char *root = *state;
    char d[1024];
    tiny_model *t;
#define FRESH(name, arch, tied, shards) \
    (snprintf(d, sizeof d, "%s", subdir(root, name)), t = write_ok(d, arch, tied, shards), tiny_model_free(t))

    FRESH("a", SKV_ARCH_LLAMA, 1, 1);   /* tied weights, config says untied */
    edit_config(d, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    expect_refused(d, "missing tensor 'lm_head.weight'");
    FRESH("b", SKV_ARCH_LLAMA, 0, 1);
    edit_config(d, "\"intermediate_size\": 96", "\"intermediate_size\": 128");
    expect_refused(d, "model.layers.0.mlp.gate_proj.weight': shape [96, 64], expected [128, 64]");
    FRESH("c", SKV_ARCH_QWEN2, 0, 1);
    edit_config(d, "\"vocab_size\": 300", "\"vocab_size\": 301");
    expect_refused(d, "model.embed_tokens.weight': shape [300, 64], expected [301, 64]");
    /* truncated file */
    FRESH("d", SKV_ARCH_QWEN2, 0, 1);
    assert_int_equal(truncate(pj(d, "model.safetensors"), 20000), 0);
    expect_refused(d, "model.safetensors: tensor");
    expect_refused(d, "file truncated?");
    assert_int_equal(truncate(pj(d, "model.safetensors"), 5), 0);
    expect_refused(d, "too small");
    /* no weights at all */
    FRESH("e", SKV_ARCH_QWEN2, 0, 1);
    assert_int_equal(unlink(pj(d, "model.safetensors")), 0);
    expect_refused(d, "no model.safetensors or model.safetensors.index.json");
    /* unsupported dtype of a needed tensor */
    snprintf(d, sizeof d, "%s", subdir(root, "f"));
    t = write_ok(d, SKV_ARCH_LLAMA, 1, 1);
    tiny_model_free(t);
    raw(pj(d, "model.safetensors"),
        "{\"model.embed_tokens.weight\":{\"dtype\":\"I8\",\"shape\":[300,64],\"data_offsets\":[0,19200]}}", 0);
    expect_refused(d, "past end of data");
    {
        static uint8_t zeros[19200];
        const char *h = "{\"model.embed_tokens.weight\":{\"dtype\":\"I8\",\"shape\":[300,64],\"data_offsets\":[0,19200]}}";
        assert_int_equal(tiny_write_raw(pj(d, "model.safetensors"), strlen(h), h, strlen(h), zeros, sizeof zeros), 0);
    }
    expect_refused(d, "model.embed_tokens.weight': dtype I8 not supported (need F32, F16 or BF16)");
    /* sharded: missing shard file, bad index, tensor listed but absent */
    FRESH("g", SKV_ARCH_QWEN2, 0, 2);
    assert_int_equal(unlink(pj(d, "model-00002-of-00002.safetensors")), 0);
    expect_refused(d, "model-00002-of-00002.safetensors: cannot open");
    FRESH("h", SKV_ARCH_QWEN2, 0, 2);
    write_text(pj(d, "model.safetensors.index.json"), "{\"weight_map\": [1]}");
    expect_refused(d, "weight_map");
    write_text(pj(d, "model.safetensors.index.json"), "{\"weight_map\": {\"x\": \"../evil\"}}");
    expect_refused(d, "not a plain file name");
    write_text(pj(d, "model.safetensors.index.json"),
               "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00002-of-00002.safetensors\"}}");
    expect_refused(d, "model-00002-of-00002.safetensors: tensor 'model.embed_tokens.weight' listed in the index but missing");
    write_text(pj(d, "model.safetensors.index.json"),
               "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_refused(d, "missing tensor 'model.norm.weight'");
#undef FRESH
}

/* A tokenizer.json that exists but does not load is an error; absent -> tok NULL (above). */
static void test_broken_tokenizer(void **state) {
    const char *d = *state;
    tiny_model *t = write_ok(d, SKV_ARCH_QWEN2, 1, 1);
    tiny_model_free(t);
    write_text(pj(d, "tokenizer.json"), "{ this is not json");
    skv_clear_error();
    skv_model *m = skv_model_load_hf(d);
    if (m) { skv_model_free(m); fail_msg("broken tokenizer.json accepted"); }
    print_message("  refused: %s\n", skv_last_error());
}

/* ---- GGUF vs HF logits ---- */

/* Prefill 6 tokens (all logits) then decode 3 tokens; logits of both models must agree. */
static void compare_logits(const skv_model *a, const skv_model *b, float tol) {
    skv_state *sa = skv_state_new(a, 32, 8, false), *sb = skv_state_new(b, 32, 8, false);
    if (!sa || !sb) fail_msg("state: %s", skv_last_error());
    const int V = a->cfg.vocab;
    int prompt[6] = {1, 17, 299, 42, 0, 150};
    skv_fwd_opts all = {.logits = SKV_LOGITS_ALL}, last = {.logits = SKV_LOGITS_LAST};
    if (skv_forward(sa, prompt, 6, &all) || skv_forward(sb, prompt, 6, &all)) fail_msg("%s", skv_last_error());
    float maxd = 0, maxv = 0;
    for (int i = 0; i < 6 * V; i++) {
        maxd = fmaxf(maxd, fabsf(sa->logits[i] - sb->logits[i]));
        maxv = fmaxf(maxv, fabsf(sa->logits[i]));
    }
    int tok = 7;
    for (int step = 0; step < 3; step++) {
        if (skv_forward(sa, &tok, 1, &last) || skv_forward(sb, &tok, 1, &last)) fail_msg("%s", skv_last_error());
        int best = 0;
        for (int i = 0; i < V; i++) {
            maxd = fmaxf(maxd, fabsf(sa->logits[i] - sb->logits[i]));
            maxv = fmaxf(maxv, fabsf(sa->logits[i]));
            if (sa->logits[i] > sa->logits[best]) best = i;
        }
        tok = best;
    }
    print_message("  max |logit| %.3f, max |gguf - hf| %.3g\n", (double)maxv, (double)maxd);
    assert_true(maxv > 0.1f);   /* not a degenerate all-zero model */
    if (!(maxd <= tol)) fail_msg("logits differ by %g (tolerance %g)", (double)maxd, (double)tol);
    skv_state_free(sa);
    skv_state_free(sb);
}

static void gguf_vs_hf(const char *dir, skv_arch arch, int tied, int type, float tol) {
    tiny_model *t = tiny_model_new(arch, 21, tied, type);
    assert_non_null(t);
    const char *hf = subdir(dir, "hf");
    char hfdir[1024], gg[1024];
    snprintf(hfdir, sizeof hfdir, "%s", hf);
    snprintf(gg, sizeof gg, "%s", pj(dir, "tiny.gguf"));
    if (tiny_model_write_hf(t, hfdir, type, 1) != 0) fail_msg("write hf: %s", skv_last_error());
    if (tiny_model_write_gguf(t, gg, type) != 0) fail_msg("write gguf: %s", skv_last_error());
    skv_model *mh = skv_model_load(hfdir), *mg = skv_model_load(gg);
    if (!mh || !mg) fail_msg("load: %s", skv_last_error());
    assert_int_equal(mg->cfg.rope_mode, arch == SKV_ARCH_LLAMA ? SKV_ROPE_ADJACENT : SKV_ROPE_HALVES);
    assert_int_equal(mh->cfg.rope_mode, SKV_ROPE_HALVES);
    assert_int_equal(mg->cfg.has_qkv_bias, mh->cfg.has_qkv_bias);
    assert_int_equal(mg->cfg.tied_embeddings, mh->cfg.tied_embeddings);
    assert_true(mg->cfg.rope_theta == mh->cfg.rope_theta);
    assert_true(mg->cfg.norm_eps == mh->cfg.norm_eps);
    if (type == SKV_F32) assert_int_equal(mg->weight_bytes, mh->weight_bytes); /* HF norms may be 16-bit */
    compare_logits(mg, mh, tol);
    skv_model_free(mh);
    skv_model_free(mg);
    tiny_model_free(t);
}

static void test_logits_llama_f32(void **s) { gguf_vs_hf(*s, SKV_ARCH_LLAMA, 0, SKV_F32, 1e-5f); }
static void test_logits_llama_f16(void **s) { gguf_vs_hf(*s, SKV_ARCH_LLAMA, 1, SKV_F16, 5e-5f); }
static void test_logits_qwen2_f32(void **s) { gguf_vs_hf(*s, SKV_ARCH_QWEN2, 1, SKV_F32, 1e-5f); }
static void test_logits_qwen2_bf16(void **s) { gguf_vs_hf(*s, SKV_ARCH_QWEN2, 0, SKV_BF16, 5e-5f); }

/* ---- agreement with Hugging Face transformers ---- */

/* The models behind tests/golden/hf_tiny_logits.txt (gen_hf_tiny_logits.py runs transformers
 * on directories written by `SKV_HF_EXPORT=dir build/tests/test_hf`). */
static tiny_model *golden_model(skv_arch arch) {
    return tiny_model_new(arch, 21, arch == SKV_ARCH_QWEN2, SKV_F32);
}
static const int k_golden_tokens[9] = {1, 17, 299, 42, 0, 150, 7, 8, 9};

static int export_golden_dirs(const char *root) {
    char d[1024];
    for (int a = 0; a < 2; a++) {
        skv_arch arch = a ? SKV_ARCH_QWEN2 : SKV_ARCH_LLAMA;
        snprintf(d, sizeof d, "%s/%s", root, a ? "qwen2" : "llama");
        mkdir(d, 0755);
        tiny_model *t = golden_model(arch);
        if (!t || tiny_model_write_hf(t, d, SKV_F32, 1) != 0) {
            fprintf(stderr, "export: %s\n", skv_last_error());
            return 1;
        }
        tiny_model_free(t);
        printf("wrote %s\n", d);
    }
    return 0;
}

/* Reads the "model <arch>" block of the golden file: 9 rows of vocab logits. */
static float *read_golden(const char *arch, int vocab) {
    size_t len;
    char *text = skv_read_file("tests/golden/hf_tiny_logits.txt", &len);
    if (!text) return NULL;
    char key[64];
    snprintf(key, sizeof key, "\nmodel %s\n", arch);
    char *p = strstr(text, key);
    float *out = p ? malloc(9 * (size_t)vocab * sizeof *out) : NULL;
    if (out) {
        p = strchr(p + 1, '\n') + 1;
        for (int i = 0; i < 9 * vocab && out; i++) {
            char *end;
            while (*p == '\n' || *p == ' ' || (*p == 'p' && p[1] >= '0' && p[1] <= '9')) {
                if (*p == 'p') while (*p && *p != ' ') p++; else p++;
            }
            out[i] = strtof(p, &end);
            if (end == p) { free(out); out = NULL; }
            p = end;
        }
    }
    free(text);
    return out;
}

static void golden_check(const char *dir, skv_arch arch) {
    const char *name = arch == SKV_ARCH_QWEN2 ? "qwen2" : "llama";
    tiny_model *t = golden_model(arch);
    assert_non_null(t);
    float *ref = read_golden(name, t->cfg.vocab);
    if (!ref) { tiny_model_free(t); skip(); }
    assert_int_equal(tiny_model_write_hf(t, dir, SKV_F32, 1), 0);
    skv_model *m = skv_model_load_hf(dir);
    if (!m) fail_msg("%s", skv_last_error());
    const int V = m->cfg.vocab;
    skv_state *s = skv_state_new(m, 32, 8, false);
    assert_non_null(s);
    skv_fwd_opts all = {.logits = SKV_LOGITS_ALL}, last = {.logits = SKV_LOGITS_LAST};
    float maxd = 0;
    assert_int_equal(skv_forward(s, k_golden_tokens, 6, &all), 0);
    for (int i = 0; i < 6 * V; i++) maxd = fmaxf(maxd, fabsf(s->logits[i] - ref[i]));
    for (int step = 0; step < 3; step++) {
        assert_int_equal(skv_forward(s, &k_golden_tokens[6 + step], 1, &last), 0);
        for (int i = 0; i < V; i++) maxd = fmaxf(maxd, fabsf(s->logits[i] - ref[(6 + step) * V + i]));
    }
    print_message("  %s: max |smallkv - transformers| %.3g\n", name, (double)maxd);
    if (!(maxd < 1e-4f)) fail_msg("logits differ from transformers by %g", (double)maxd);
    skv_state_free(s);
    skv_model_free(m);
    free(ref);
    tiny_model_free(t);
}

static void test_transformers_llama(void **s) { golden_check(*s, SKV_ARCH_LLAMA); }
static void test_transformers_qwen2(void **s) { golden_check(*s, SKV_ARCH_QWEN2); }

int main(void) {
    if (getenv("SKV_HF_EXPORT")) return export_golden_dirs(getenv("SKV_HF_EXPORT"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_safetensors_format, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_safetensors_fuzz, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_llama_f32, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_llama_bf16_tied, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_qwen2_f16_tied, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_qwen2_bf16, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_qwen2_f32_sharded, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_llama_f16_sharded, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_equals_single, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_unaligned_header, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_tensors, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_broken_tokenizer, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_logits_llama_f32, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_logits_llama_f16, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_logits_qwen2_f32, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_logits_qwen2_bf16, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_transformers_llama, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_transformers_qwen2, test_tmpdir_setup, test_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
