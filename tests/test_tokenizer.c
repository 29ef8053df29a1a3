/* test_tokenizer.c: the BPE tokenizer against golden ids from HF `tokenizers`
 * (tests/golden/gen_tokenizer_golden.py), round trips, special tokens, chat prompts, the
 * tokenizer.json loader (a json derived here from the GGUF, and bad files), fingerprints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/smallkv.h"
#include "runtime/format/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_internal.h"
#include "common/util.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_env.h"

/* ---------------------------------------------------------------- fixtures */

typedef struct {
    gguf_file *f;
    skv_tokenizer *t;
    int tried;
} model_tok;

static model_tok g_smol, g_q05, g_q15;

static skv_tokenizer *get_tok(model_tok *m, const char *file) {
    if (!m->tried) {
        m->tried = 1;
        char path[512];
        if (!test_model_path(path, sizeof path, file)) return NULL;
        m->f = gguf_open(path);
        if (!m->f) fail_msg("gguf_open %s: %s", path, skv_last_error());
        m->t = skv_tokenizer_from_gguf(m->f);
        if (!m->t) fail_msg("tokenizer from %s: %s", path, skv_last_error());
    }
    return m->t;
}
static skv_tokenizer *smol(void) { return get_tok(&g_smol, TEST_SMOL); }
static skv_tokenizer *q05(void) { return get_tok(&g_q05, TEST_QWEN05); }
static skv_tokenizer *q15(void) { return get_tok(&g_q15, TEST_QWEN15); }

static int group_teardown(void **state) {
    model_tok *all[] = { &g_smol, &g_q05, &g_q15 };
    for (int i = 0; i < 3; i++) { skv_tokenizer_free(all[i]->t); gguf_close(all[i]->f); }
    return test_tmpdir_teardown(state);
}

/* ---------------------------------------------------------------- golden files */

/* Undo the escaping of gen_tokenizer_golden.py (\n \r \t \\ \xHH) in place; returns length. */
static size_t unescape(char *s) {
    size_t i = 0, k = 0;
    while (s[i]) {
        if (s[i] != '\\') { s[k++] = s[i++]; continue; }
        char c = s[i + 1];
        if (c == 'n') { s[k++] = '\n'; i += 2; }
        else if (c == 'r') { s[k++] = '\r'; i += 2; }
        else if (c == 't') { s[k++] = '\t'; i += 2; }
        else if (c == '\\') { s[k++] = '\\'; i += 2; }
        else if (c == 'x') { char h[3] = { s[i + 2], s[i + 3], 0 }; s[k++] = (char)strtol(h, NULL, 16); i += 4; }
        else { s[k++] = s[i++]; }
    }
    s[k] = 0;
    return k;
}

typedef struct { int n; char **line; size_t *len; char *buf; } lines;

static lines read_lines(const char *path) {
    lines L = { 0 };
    size_t n;
    L.buf = skv_read_file(path, &n);
    if (!L.buf) fail_msg("%s", skv_last_error());
    int cap = 0;
    for (size_t i = 0; i < n; i++) cap += L.buf[i] == '\n';
    L.line = calloc((size_t)cap + 1, sizeof(char *));
    L.len = calloc((size_t)cap + 1, sizeof(size_t));
    char *p = L.buf;
    while (*p) {
        char *e = strchr(p, '\n');
        if (!e) break;
        *e = 0;
        L.line[L.n] = p;
        L.len[L.n] = strlen(p);
        L.n++;
        p = e + 1;
    }
    return L;
}
static void free_lines(lines *L) { free(L->line); free(L->len); free(L->buf); }

static lines read_strings(void) {
    lines L = read_lines("tests/golden/tokenizer_strings.txt");
    for (int i = 0; i < L.n; i++) L.len[i] = unescape(L.line[i]);
    return L;
}

static int parse_ids(const char *s, int *ids, int max) {
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (n < max) ids[n] = (int)v;
        n++;
        s = end;
    }
    return n;
}

static int all_bytes_have_tokens(const skv_tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[(unsigned char)s[i]] < 0) return 0;
    return 1;
}

/* Tokenize every golden string and compare with the golden ids; round trip each. */
static void check_golden(const skv_tokenizer *t, const char *golden_path) {
    lines S = read_strings(), G = read_lines(golden_path);
    assert_int_equal(S.n, G.n);
    assert_true(S.n >= 60);
    int want[4096], got[4096];
    int bad = 0;
    for (int i = 0; i < S.n; i++) {
        int nw = parse_ids(G.line[i], want, 4096);
        int ng = skv_tokenize(t, S.line[i], S.len[i], true, got, 4096);
        assert_true(ng >= 0 && ng <= 4096);
        if (ng != nw || memcmp(want, got, (size_t)ng * sizeof(int)) != 0) {
            print_message("string %d mismatch: got %d ids, want %d (line: %s)\n", i, ng, nw, G.line[i]);
            bad++;
        }
        char *back = skv_detokenize(t, got, ng);
        assert_non_null(back);
        if (all_bytes_have_tokens(t, S.line[i], S.len[i]))   /* else those bytes are dropped */
            assert_true(strlen(back) == S.len[i] && memcmp(back, S.line[i], S.len[i]) == 0);
        free(back);
    }
    assert_int_equal(bad, 0);
    free_lines(&S); free_lines(&G);
}

static void test_smollm2_golden(void **state) {
    (void)state;
    skv_tokenizer *t = smol();
    if (!t) skip();
    assert_int_equal(skv_tok_vocab_size(t), 49152);
    assert_string_equal(skv_tokenizer_name(t), "gpt2/smollm (49152 tokens)");
    check_golden(t, "tests/golden/tokenizer_smollm2.txt");
    assert_int_equal(skv_tok_bos(t), 1);
    assert_int_equal(skv_tok_eos(t), 2);
    assert_false(skv_tok_add_bos(t));
    assert_true(skv_tok_is_stop(t, 2));
    assert_true(skv_tok_is_stop(t, 0));
    assert_false(skv_tok_is_stop(t, 1));
    assert_false(skv_tok_is_stop(t, 1000));
}

static void test_qwen2_golden(void **state) {
    (void)state;
    skv_tokenizer *t = q05();
    if (!t) skip();
    assert_int_equal(skv_tok_vocab_size(t), 151936);
    check_golden(t, "tests/golden/tokenizer_qwen2.txt");
    assert_int_equal(skv_tok_eos(t), 151645);
    assert_true(skv_tok_is_stop(t, 151643));
    assert_true(skv_tok_is_stop(t, 151645));
    assert_false(skv_tok_is_stop(t, 151644));
    skv_tokenizer *t15 = q15();
    if (t15) check_golden(t15, "tests/golden/tokenizer_qwen2.txt");
}

/* ---------------------------------------------------------------- round trips, specials */

static void roundtrip_random(const skv_tokenizer *t) {
    uint64_t s = 0x1234567887654321ULL;
    char buf[600];
    static const char *pieces[] = { "<|im_start|>", "é", "日本", "😀", " ", "\n", "\r\n", "'s", "12", "\t", "<|im_end|>" };
    for (int iter = 0; iter < 400; iter++) {
        size_t n = 0, want = (size_t)(iter % 97) * 5;
        while (n < want) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            unsigned r = (unsigned)(s >> 33);
            if (r % 4 == 0) {   /* a known piece */
                const char *p = pieces[(r >> 4) % (sizeof pieces / sizeof pieces[0])];
                size_t l = strlen(p);
                if (n + l > sizeof buf) break;
                memcpy(buf + n, p, l); n += l;
            } else if (r % 4 == 1) {
                buf[n++] = (char)(r >> 8);                  /* any byte, invalid UTF-8 included */
                if (t->byte_id[(unsigned char)buf[n - 1]] < 0) buf[n - 1] = 'x';  /* unrepresentable */
            } else {
                buf[n++] = (char)(' ' + (r >> 8) % 95);     /* printable ASCII */
            }
        }
        for (int ps = 0; ps < 2; ps++) {
            int cnt = skv_tokenize(t, buf, n, ps, NULL, 0);
            if (cnt < 0) fail_msg("iter %d: %s", iter, skv_last_error());
            int *ids = malloc(((size_t)cnt + 1) * sizeof(int));
            assert_int_equal(skv_tokenize(t, buf, n, ps, ids, cnt), cnt);
            char *back = skv_detokenize(t, ids, cnt);
            assert_non_null(back);
            assert_true(strlen(back) <= n);   /* may hold NUL bytes: compare by bytes */
            assert_memory_equal(back, buf, n);
            free(back); free(ids);
        }
    }
}

static void test_roundtrip_random(void **state) {
    (void)state;
    skv_tokenizer *t = smol();
    if (!t) skip();
    /* SmolLM2 has no token for 21 bytes (e.g. 0x04, 0xC0, 0xFF): they are dropped, like HF */
    int missing = 0;
    for (int b = 0; b < 256; b++) missing += t->byte_id[b] < 0;
    assert_int_equal(missing, 21);
    int ids[8];
    int n = skv_tokenize(t, "a\x04" "b", 3, true, ids, 8);
    char *ab = skv_detokenize(t, ids, n);
    assert_string_equal(ab, "ab");
    free(ab);
    if (q05()) for (int b = 0; b < 256; b++) assert_true(q05()->byte_id[b] >= 0);
    roundtrip_random(t);
    if (q05()) roundtrip_random(q05());
}

static void test_special_tokens(void **state) {
    (void)state;
    skv_tokenizer *t = smol();
    if (!t) skip();
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int on[64], off[64];
    int non = skv_tokenize(t, s, strlen(s), true, on, 64);
    int noff = skv_tokenize(t, s, strlen(s), false, off, 64);
    assert_true(non > 0 && noff > non);
    assert_int_equal(on[0], 1);
    assert_int_equal(on[non - 1], 2);
    for (int i = 0; i < noff; i++) assert_true(off[i] != 1 && off[i] != 2);
    char *back = skv_detokenize(t, off, noff);
    assert_string_equal(back, s);
    free(back);
    /* parse_special=false gives the same ids as the text without any specials matched */
    int plain[64];
    int np = skv_tokenize(t, "<|im_start|>", 12, false, plain, 64);
    assert_true(np > 1);
    assert_memory_equal(plain, off, (size_t)np * sizeof(int));
    /* output buffer smaller than needed: the full count, only max written */
    int small[3] = { -7, -7, -7 };
    assert_int_equal(skv_tokenize(t, s, strlen(s), true, small, 2), non);
    assert_int_equal(small[0], on[0]);
    assert_int_equal(small[2], -7);
    assert_int_equal(skv_tokenize(t, "", 0, true, small, 3), 0);
    size_t l;
    assert_null(skv_token_bytes(t, -1, &l));
    assert_null(skv_token_bytes(t, 49152, &l));
    int badid = 999999;
    assert_null(skv_detokenize(t, &badid, 1));
    /* Qwen2: user-defined tokens (<tool_call>) are always matched, control ones only on request */
    skv_tokenizer *q = q05();
    if (q) {
        int ids[16];
        int n = skv_tokenize(q, "<tool_call><|im_end|>", 21, false, ids, 16);
        assert_true(n > 2);
        assert_int_equal(ids[0], 151657);
        n = skv_tokenize(q, "<tool_call><|im_end|>", 21, true, ids, 16);
        assert_int_equal(n, 2);
        assert_int_equal(ids[1], 151645);
    }
}

/* ---------------------------------------------------------------- chat */

static void test_chat_golden(void **state) {
    (void)state;
    if (!smol()) skip();
    lines L = read_lines("tests/golden/tokenizer_chat.txt");
    int checked = 0;
    for (int i = 0; i < L.n; i++) {
        if (L.line[i][0] == '#') continue;
        char *f[4]; char *p = L.line[i];
        for (int k = 0; k < 4; k++) { f[k] = p; p = strchr(p, '\t'); if (k < 3) { assert_non_null(p); *p++ = 0; } }
        const skv_tokenizer *t = !strcmp(f[0], "smollm2") ? smol() : !strcmp(f[0], "qwen2") ? q05() : q15();
        if (!t) continue;
        const char *sys = strcmp(f[1], "\\N") ? f[1] : NULL;
        if (sys) unescape(f[1]);
        unescape(f[2]); unescape(f[3]);
        char *r = skv_chat_prompt(t, sys, f[2]);
        assert_non_null(r);
        assert_string_equal(r, f[3]);
        free(r);
        checked++;
    }
    assert_true(checked >= 3);
    free_lines(&L);
    /* unknown template -> error */
    skv_tokenizer *t = smol();
    char *saved = t->chat_template;
    t->chat_template = "{% for m in messages %}[[{{ m.content }}]]{% endfor %}";
    assert_null(skv_chat_prompt(t, NULL, "hi"));
    assert_non_null(strstr(skv_last_error(), "unknown template"));
    t->chat_template = NULL;
    assert_null(skv_chat_prompt(t, NULL, "hi"));
    t->chat_template = saved;
}

/* a whole conversation: each turn in ChatML, the default system turn first when the first
 * message is not one; unknown roles refused; the public smallkv_tokenize_messages gives the
 * same ids as the rendered text tokenised with special tokens, and its first turn's ids are
 * a prefix of a longer conversation's (what the server's session reuse relies on) */
static void test_chat_render(void **state) {
    (void)state;
    if (!smol()) skip();
    const char *roles[3] = { "user", "assistant", "user" }, *cont[3] = { "Hi", "Hello!", "Bye" };
    char *r = skv_chat_render(smol(), roles, cont, 3);
    assert_non_null(r);
    assert_string_equal(r, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                           "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    free(r);
    const char *r2[2] = { "system", "user" }, *c2[2] = { "Be brief.", "Hi" };
    r = skv_chat_render(smol(), r2, c2, 2);
    assert_string_equal(r, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    char *one = skv_chat_prompt(smol(), "Be brief.", "Hi");
    assert_string_equal(r, one);
    free(r); free(one);
    const char *bad[1] = { "tool" };
    assert_null(skv_chat_render(smol(), bad, cont, 1));
    assert_non_null(strstr(skv_last_error(), "role"));
    assert_null(skv_chat_render(smol(), roles, cont, 0));

    char path[1024];
    if (!test_model_path(path, sizeof path, TEST_SMOL)) skip();
    smallkv_pair *p = smallkv_pair_load(path, NULL);
    assert_non_null(p);
    smallkv_message m[3] = { { "user", "Hi" }, { "assistant", "Hello!" }, { "user", "Bye" } };
    int n1 = smallkv_tokenize_messages(p, m, 1, NULL, 0), n3 = smallkv_tokenize_messages(p, m, 3, NULL, 0);
    assert_true(n1 > 5 && n3 > n1);
    int a[256], b[256], c[256];
    assert_int_equal(smallkv_tokenize_messages(p, m, 3, a, 256), n3);
    assert_int_equal(smallkv_tokenize_messages(p, m, 1, b, 256), n1);
    assert_int_equal(memcmp(a, b, (size_t)n1 * sizeof(int)), 0);
    assert_int_equal(smallkv_tokenize_chat(p, NULL, "Hi", c, 256), n1);
    assert_int_equal(memcmp(b, c, (size_t)n1 * sizeof(int)), 0);
    smallkv_message badm[1] = { { "robot", "x" } };
    assert_int_equal(smallkv_tokenize_messages(p, badm, 1, NULL, 0), -1);
    assert_int_equal(smallkv_tokenize_messages(p, m, 0, NULL, 0), -1);
    smallkv_pair_free(p);
}

/* ---------------------------------------------------------------- json loader */

static char *byte_level(const char *b, size_t n) {   /* raw bytes -> GPT-2 byte-level spelling */
    char *s = malloc(n * 2 + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)skv_utf8_encode(skv_byte_to_unicode((uint8_t)b[i]), s + k);
    s[k] = 0;
    return s;
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Write t as a tokenizer.json (+ tokenizer_config.json) in dir: the shape HF saves, merges
 * half in "a b" form and half in [a, b] form. */
static void export_json(const skv_tokenizer *t, const char *dir, const char *pre_json) {
    cJSON *doc = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    cJSON *merges = cJSON_CreateArray(), *added = cJSON_CreateArray();
    for (int id = 0; id < t->n_vocab; id++) {
        if (t->tok_type[id] == SKV_TOKT_CONTROL || t->tok_type[id] == SKV_TOKT_USER) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", id);
            cJSON_AddStringToObject(a, "content", t->tok[id]);
            cJSON_AddBoolToObject(a, "special", t->tok_type[id] == SKV_TOKT_CONTROL);
            cJSON_AddItemToArray(added, a);
        }
        char *s = byte_level(t->tok[id], t->tok_len[id]);
        cJSON_AddNumberToObject(vocab, s, id);
        free(s);
    }
    for (int r = 0; r < t->n_merges; r++) {
        int a = t->merge_a[r], b = t->merge_b[r];
        char *sa = byte_level(t->tok[a], t->tok_len[a]), *sb = byte_level(t->tok[b], t->tok_len[b]);
        if (r % 2) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(sa));
            cJSON_AddItemToArray(pair, cJSON_CreateString(sb));
            cJSON_AddItemToArray(merges, pair);
        } else {
            char *m = malloc(strlen(sa) + strlen(sb) + 2);
            sprintf(m, "%s %s", sa, sb);
            cJSON_AddItemToArray(merges, cJSON_CreateString(m));
            free(m);
        }
        free(sa); free(sb);
    }
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(doc, "added_tokens", added);
    cJSON_AddNullToObject(doc, "normalizer");
    cJSON_AddItemToObject(doc, "pre_tokenizer", cJSON_Parse(pre_json));
    cJSON_AddItemToObject(doc, "model", model);
    char *text = cJSON_PrintUnformatted(doc);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_text(path, text);
    free(text);
    cJSON_Delete(doc);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "chat_template", t->chat_template);
    cJSON_AddStringToObject(cfg, "bos_token", t->tok[t->bos]);
    cJSON *eos = cJSON_CreateObject();
    cJSON_AddStringToObject(eos, "content", t->tok[t->eos]);
    cJSON_AddItemToObject(cfg, "eos_token", eos);
    cJSON_AddBoolToObject(cfg, "add_bos_token", t->add_bos);
    text = cJSON_PrintUnformatted(cfg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_text(path, text);
    free(text);
    cJSON_Delete(cfg);
}

static const char SMOL_PRE[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}";

static void test_json_derived(void **state) {
    (void)state;
    skv_tokenizer *g = smol();
    if (!g) skip();
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/smol", test_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    export_json(g, dir, SMOL_PRE);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    skv_tokenizer *j = skv_tokenizer_from_json(path);
    if (!j) fail_msg("%s", skv_last_error());
    assert_int_equal(skv_tok_vocab_size(j), skv_tok_vocab_size(g));
    assert_int_equal(skv_tok_bos(j), 1);
    assert_int_equal(skv_tok_eos(j), 2);
    assert_true(skv_tokenizer_hash(j) == skv_tokenizer_hash(g));
    check_golden(j, "tests/golden/tokenizer_smollm2.txt");
    char *a = skv_chat_prompt(j, NULL, "x"), *b = skv_chat_prompt(g, NULL, "x");
    assert_non_null(a);
    assert_string_equal(a, b);
    free(a); free(b);
    skv_tokenizer_free(j);
}

/* The tokenizer.json transformers saves (gen_tokenizer_golden.py writes it; not in CI). */
static void test_json_transformers(void **state) {
    (void)state;
    const char *path = "build/tokjson/smollm2/tokenizer.json";
    if (access(path, R_OK) != 0 || !smol()) skip();
    skv_tokenizer *j = skv_tokenizer_from_json(path);
    if (!j) fail_msg("%s", skv_last_error());
    check_golden(j, "tests/golden/tokenizer_smollm2.txt");
    assert_true(skv_tokenizer_hash(j) == skv_tokenizer_hash(smol()));
    skv_tokenizer_free(j);
}

/* A tiny handmade vocabulary: BPE rules (rank order, leftmost ties) and error paths. */
static const char TINY_FMT[] =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\\u0120\":2,\"aa\":3,\"ab\":4,\"aab\":5,"
    "\"\\u0120a\":6%s},\"merges\":[%s]},\"added_tokens\":[{\"id\":7,\"content\":\"<x>\",\"special\":true}],"
    "\"pre_tokenizer\":%s}";

static skv_tokenizer *tiny(const char *name, const char *extra_vocab, const char *merges, const char *pre) {
    char path[400], text[2048];
    snprintf(path, sizeof path, "%s/%s.json", test_tmpdir(), name);
    snprintf(text, sizeof text, TINY_FMT, extra_vocab, merges, pre);
    write_text(path, text);
    return skv_tokenizer_from_json(path);
}

static void expect_ids(const skv_tokenizer *t, const char *s, const int *want, int n) {
    int got[64];
    int k = skv_tokenize(t, s, strlen(s), true, got, 64);
    assert_int_equal(k, n);
    assert_memory_equal(got, want, (size_t)n * sizeof(int));
}

static void test_json_tiny(void **state) {
    (void)state;
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    skv_tokenizer *t = tiny("ok", "", "\"a a\",[\"a\",\"b\"],\"aa b\",\"\\u0120 a\"", bl);
    if (!t) fail_msg("%s", skv_last_error());
    assert_int_equal(skv_tok_vocab_size(t), 8);
    assert_int_equal(skv_tok_bos(t), -1);
    { int w[] = { 3, 3, 0 }; expect_ids(t, "aaaaa", w, 3); }          /* leftmost first */
    { int w[] = { 5 }; expect_ids(t, "aab", w, 1); }                   /* a a (rank 0) before a b */
    { int w[] = { 3, 4 }; expect_ids(t, "aaab", w, 2); }
    { int w[] = { 4, 7, 2, 3, 0 }; expect_ids(t, "ab<x> aaa", w, 5); }  /* "a a" outranks "Ġ a" */
    { int w[] = { 2, 4 }; expect_ids(t, " ab", w, 2); }                /* "a b" outranks "Ġ a" */
    { int w[] = { 6 }; expect_ids(t, " a", w, 1); }
    { int w[] = { 4, 4 }; expect_ids(t, "acbcab", w, 2); }            /* bytes without a token dropped */
    skv_tokenizer_free(t);
}

static void expect_bad(const char *name, const char *text, const char *needle) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s.json", test_tmpdir(), name);
    write_text(path, text);
    skv_tokenizer *t = skv_tokenizer_from_json(path);
    if (t) fail_msg("%s: loaded a bad tokenizer.json", name);
    const char *e = skv_last_error();
    if (!strstr(e, path) || !strstr(e, needle)) fail_msg("%s: error '%s' lacks '%s'", name, e, needle);
}

static void test_json_bad(void **state) {
    (void)state;
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    char text[2048];
    assert_null(skv_tokenizer_from_json("/nonexistent/tokenizer.json"));
    assert_non_null(strstr(skv_last_error(), "/nonexistent/tokenizer.json"));
    expect_bad("notjson", "{\"model\": [1, 2", "invalid JSON");
    expect_bad("array", "[1,2,3]", "not a JSON object");
    expect_bad("nomodel", "{\"pre_tokenizer\":{}}", "no 'model'");
    expect_bad("novocab", "{\"model\":{\"type\":\"BPE\",\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "model.vocab");
    expect_bad("nomerges", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "model.merges");
    expect_bad("unigram", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "Unigram");
    expect_bad("badid", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "model.vocab");
    snprintf(text, sizeof text, TINY_FMT, "", "\"a q\"", bl);
    expect_bad("mergeunk", text, "merge 0");
    snprintf(text, sizeof text, TINY_FMT, "", "\"ab\"", bl);
    expect_bad("mergenospace", text, "no space");
    snprintf(text, sizeof text, TINY_FMT, "", "7", bl);
    expect_bad("mergenum", text, "merge 0");
    snprintf(text, sizeof text, TINY_FMT, "", "", "{\"type\":\"Metaspace\"}");
    expect_bad("metaspace", text, "pre_tokenizer");
    snprintf(text, sizeof text, TINY_FMT, "", "",
             "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
             "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"use_regex\":false}]}");
    expect_bad("otherregex", text, "pre_tokenizer");
    snprintf(text, sizeof text, TINY_FMT, "", "", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}");
    expect_bad("prefixspace", text, "pre_tokenizer");
}

/* ---------------------------------------------------------------- GGUF loader */

/* A small GGUF tokenizer written with the test writer; variant selects a defect. */
static skv_tokenizer *gguf_tok(int variant, gguf_file **fout) {
    static const char *toks[] = { "a", "b", "\xc4\xa0", "aa", "ab", "<s>", "\xc4\xa0" "a" };   /* Ġ = U+0120 */
    static const char *merges[] = { "a a", "a b", "\xc4\xa0 " "a" };
    static const char *bad_merges[] = { "a a", "a z" };
    int32_t types[7] = { 1, 1, 1, 1, 1, 3, 1 };
    gw_writer *w = gw_new();
    gw_add_str(w, "general.architecture", "llama");
    gw_add_str(w, "tokenizer.ggml.model", variant == 1 ? "llama" : "gpt2");
    gw_add_str(w, "tokenizer.ggml.pre", variant == 2 ? "no-such-pre" : "qwen2");
    if (variant != 3) gw_add_arr_str(w, "tokenizer.ggml.tokens", toks, 7);
    if (variant == 4) gw_add_arr_str(w, "tokenizer.ggml.merges", bad_merges, 2);
    else gw_add_arr_str(w, "tokenizer.ggml.merges", merges, 3);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, variant == 5 ? 6 : 7);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", 5);
    gw_add_u32(w, "tokenizer.ggml.eos_token_id", 5);
    gw_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    char path[400];
    snprintf(path, sizeof path, "%s/tok%d.gguf", test_tmpdir(), variant);
    assert_int_equal(gw_write(w, path), 0);
    gw_free(w);
    gguf_file *f = gguf_open(path);
    if (!f) fail_msg("%s", skv_last_error());
    skv_tokenizer *t = skv_tokenizer_from_gguf(f);
    *fout = f;
    return t;
}

static void test_gguf_small_and_bad(void **state) {
    (void)state;
    gguf_file *f;
    skv_tokenizer *t = gguf_tok(0, &f);
    if (!t) fail_msg("%s", skv_last_error());
    assert_int_equal(skv_tok_bos(t), 5);
    assert_true(skv_tok_add_bos(t));
    assert_null(skv_chat_prompt(t, NULL, "x"));      /* no template in the file */
    { int w[] = { 5, 3, 2, 4, 6 }; expect_ids(t, "<s>aa ab a", w, 5); }
    skv_tokenizer_free(t);
    gguf_close(f);
    static const char *needle[] = { "", "SentencePiece tokenizer without", "no-such-pre", "tokenizer.ggml.tokens",
                                    "merge 1", "token_type" };
    for (int v = 1; v <= 5; v++) {
        t = gguf_tok(v, &f);
        if (t) fail_msg("variant %d loaded", v);
        if (!strstr(skv_last_error(), needle[v]) || !strstr(skv_last_error(), test_tmpdir()))
            fail_msg("variant %d: error '%s' lacks '%s'", v, skv_last_error(), needle[v]);
        gguf_close(f);
    }
    assert_null(skv_tokenizer_from_gguf(NULL));
}

/* ---------------------------------------------------------------- hash, speed */

static void test_hash(void **state) {
    (void)state;
    /* one reordered merge changes the hash; the same content gives the same hash */
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    skv_tokenizer *t1 = tiny("h1", "", "\"a a\",\"a b\"", bl), *t2 = tiny("h2", "", "\"a b\",\"a a\"", bl);
    skv_tokenizer *t3 = tiny("h3", "", "\"a a\",\"a b\"", bl);
    assert_non_null(t1); assert_non_null(t2); assert_non_null(t3);
    assert_true(skv_tokenizer_hash(t1) != skv_tokenizer_hash(t2));
    assert_true(skv_tokenizer_hash(t1) == skv_tokenizer_hash(t3));
    skv_tokenizer_free(t1); skv_tokenizer_free(t2); skv_tokenizer_free(t3);
    /* real models: SmolLM2 != Qwen2; Qwen2.5-Coder 0.5B == 1.5B */
    skv_tokenizer *s = smol(), *a = q05(), *b = q15();
    if (!s || !a) skip();
    print_message("hash smollm2 %016llx qwen2 0.5b %016llx 1.5b %016llx\n", (unsigned long long)skv_tokenizer_hash(s),
                  (unsigned long long)skv_tokenizer_hash(a), b ? (unsigned long long)skv_tokenizer_hash(b) : 0ULL);
    assert_true(skv_tokenizer_hash(s) != skv_tokenizer_hash(a));
    if (b) assert_true(skv_tokenizer_hash(a) == skv_tokenizer_hash(b));
}

static void test_speed_wikitext(void **state) {
    (void)state;
    const char *path = getenv("SKV_WIKITEXT");
    if (!path && !(path = test_data_file("wikitext2/wiki.test.raw"))) TEST_SKIP_DATA("wikitext2");
    skv_tokenizer *t = smol();
    if (!t || access(path, R_OK) != 0) skip();
    size_t n;
    char *text = skv_read_file(path, &n);
    assert_non_null(text);
    lines G = read_lines("tests/golden/tokenizer_wiki.txt");   /* "# ...", "smollm2 N HASH", "qwen2 N HASH" */
    assert_int_equal(G.n, 3);
    skv_tokenizer *list[2] = { t, q05() };
    for (int k = 0; k < 2; k++) {
        if (!list[k]) continue;
        double t0 = skv_now();
        int cnt = skv_tokenize(list[k], text, n, false, NULL, 0);
        double dt = skv_now() - t0;
        print_message("%s: %zu bytes -> %d tokens in %.3f s\n", skv_tokenizer_name(list[k]), n, cnt, dt);
        assert_true(cnt > 0);
        assert_true(dt < 30.0);   /* generous: sanitizer builds on a busy machine */
        int *ids = malloc((size_t)cnt * sizeof(int));
        assert_int_equal(skv_tokenize(list[k], text, n, false, ids, cnt), cnt);
        uint64_t h = 0xcbf29ce484222325ULL;
        for (int i = 0; i < cnt; i++)
            for (int b = 0; b < 4; b++) { h ^= ((uint32_t)ids[i] >> (8 * b)) & 0xff; h *= 0x100000001b3ULL; }
        char want_name[32]; int want_n = 0; unsigned long long want_h = 0;
        assert_int_equal(sscanf(G.line[1 + k], "%31s %d %llx", want_name, &want_n, &want_h), 3);
        assert_int_equal(cnt, want_n);
        assert_true(h == (uint64_t)want_h);
        char *back = skv_detokenize(list[k], ids, cnt);
        assert_true(back && strlen(back) == n && memcmp(back, text, n) == 0);
        free(back); free(ids);
    }
    free_lines(&G);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_golden),
        cmocka_unit_test(test_qwen2_golden),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_chat_golden),
        cmocka_unit_test(test_chat_render),
        cmocka_unit_test(test_json_derived),
        cmocka_unit_test(test_json_transformers),
        cmocka_unit_test(test_json_tiny),
        cmocka_unit_test(test_json_bad),
        cmocka_unit_test(test_gguf_small_and_bad),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_speed_wikitext),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, group_teardown);
}
