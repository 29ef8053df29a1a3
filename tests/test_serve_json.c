/* test_serve_json.c: JSON mode's automaton (runtime/serve/json_constrain.c) and masked
 * sampling (runtime/serve/sample.c), without a model: documents it must accept (each also
 * parsed by cJSON, and every proper prefix accepted as a prefix but not as a whole), ones it
 * must reject (another top-level value, trailing commas, leading zeros, bad escapes and
 * surrogates, control characters and ill-formed UTF-8 in strings, trailing data, nesting
 * past the limit, whitespace and number runs past their bounds), the mask on a small
 * vocabulary, and generation: random logits over a byte-and-snippet vocabulary, masked at
 * each step, always give a prefix of a JSON object, and every reply that closes parses with
 * cJSON as an object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/serve/serve.h"

static bool valid(const char *s) { return serve_json_valid(s, strlen(s)); }

static void test_accepts(void **state) {
    (void)state;
    static const char *const OK[] = {
        "{}", " \n{ }\n", "{\"a\":1}", "{\"a\": [1, 2.5, -0.5e-3, 1E+9, 0, -0]}",
        "{\"t\":true,\"f\":false,\"n\":null}", "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD7FF\\uE000\"}",
        "{\"nested\":{\"a\":[{\"b\":[[],{}]}]}}", "{\"utf8\":\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89\"}",
        "{\"\":\"\"}", "{\"a\":[true,false,null,\"x\",{\"y\":-12.0e5}]}", "{\"k\" : \"v\" , \"k2\" :\t[ 1 ,2 ] }",
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        const char *d = OK[i];
        const size_t n = strlen(d);
        if (!valid(d)) fprintf(stderr, "rejected: %s\n", d);
        assert_true(valid(d));
        cJSON *j = cJSON_Parse(d);
        assert_true(cJSON_IsObject(j));
        cJSON_Delete(j);
        /* every proper prefix (up to the last non-space byte) continues, none is done */
        size_t end = n;
        while (end > 0 && strchr(" \t\r\n", d[end - 1])) end--;
        for (size_t k = 0; k < end; k++) {
            serve_json s;
            serve_json_init(&s);
            assert_true(serve_json_feed(&s, d, k));
            assert_false(serve_json_done(&s));
        }
    }
}

static void test_rejects(void **state) {
    (void)state;
    static const char *const BAD[] = {
        "", "[]", "1", "\"x\"", "true", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":[1,]}",
        "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":+1}", "{\"a\":tru}", "{\"a\":nul}",
        "{'a':1}", "{a:1}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\uDC00\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"x\ny\"}", "{\"a\":\"\x01\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xe3\x81\"}",
        "{\"a\":\"\xff\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\xc3\xa9:1}", "{}{}", "{} x", "{\"a\":1}}", "{\"a\":[}",
        "{\"a\":{]}", "{\"a\" 1}", "{\"a\"::1}", "{\"a\":1 \"b\":2}",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        if (valid(BAD[i])) fprintf(stderr, "accepted: %s\n", BAD[i]);
        assert_false(valid(BAD[i]));
    }
    /* nesting: SERVE_JSON_DEPTH containers, not one more */
    char deep[2 * SERVE_JSON_DEPTH + 16];
    int o = 0;
    for (int d = 0; d < SERVE_JSON_DEPTH; d++) o += sprintf(deep + o, d ? "[" : "{\"a\":");
    deep[o] = 0;
    serve_json s;
    serve_json_init(&s);
    assert_true(serve_json_feed(&s, deep, strlen(deep)));
    serve_json t = s;
    assert_false(serve_json_feed(&t, "[", 1));
    for (int d = 1; d < SERVE_JSON_DEPTH; d++) assert_true(serve_json_feed(&s, "]", 1));
    assert_true(serve_json_feed(&s, "}", 1));
    assert_true(serve_json_done(&s));
    /* whitespace and number runs are bounded (a masked reply cannot run in place) */
    char ws[SERVE_JSON_WS + 8] = "{";
    memset(ws + 1, ' ', SERVE_JSON_WS);
    serve_json_init(&s);
    assert_true(serve_json_feed(&s, ws, 1 + SERVE_JSON_WS));
    assert_false(serve_json_feed(&s, " ", 1));
    char num[SERVE_JSON_NUM + 16] = "{\"a\":";
    memset(num + 5, '7', SERVE_JSON_NUM);
    serve_json_init(&s);
    assert_true(serve_json_feed(&s, num, 5 + SERVE_JSON_NUM));
    t = s;
    assert_false(serve_json_feed(&t, "7", 1));
    assert_true(serve_json_feed(&s, "}", 1));
    assert_true(serve_json_done(&s));
    /* nothing after the object, not even whitespace, while generating */
    serve_json_init(&s);
    assert_true(serve_json_feed(&s, "{}", 2));
    assert_false(serve_json_feed(&s, " ", 1));
}

/* the vocabulary: every byte, and snippets that span states */
static const char *const SNIPPETS[] = {
    "{\"", "\":", "\": ", ", \"", "\"}", "}}", "]}", "[{", "true", "false", "null", "\\u00e9", "\\n", "12", "-0.", "e+5",
    "name", "\":\"", "\xc3\xa9", "\xe6\x97\xa5", "\xe6\x97", "\xa5", "\xf0\x9f\x8e\x89", "  ", "\n  ", "},{", "\"a\"", "<|x|>",
};
enum { NS = sizeof SNIPPETS / sizeof SNIPPETS[0], V = 256 + NS };
static char byte_tok[256];
static const char *vb[V];
static size_t vl[V];
static unsigned char banned[V];

static serve_json_vocab make_vocab(void) {
    for (int b = 0; b < 256; b++) { byte_tok[b] = (char)b; vb[b] = &byte_tok[b]; vl[b] = 1; }
    for (int i = 0; i < NS; i++) { vb[256 + i] = SNIPPETS[i]; vl[256 + i] = strlen(SNIPPETS[i]); }
    memset(banned, 0, sizeof banned);
    banned[256 + NS - 1] = 1;   /* a control token: never allowed, even inside a string */
    return (serve_json_vocab){ V, vb, vl, banned };
}

static void test_mask(void **state) {
    (void)state;
    serve_json_vocab v = make_vocab();
    unsigned char allowed[V];
    serve_json s;
    serve_json_init(&s);
    int k = serve_json_mask(&s, &v, allowed);
    /* at the start: '{', the four whitespace bytes, and the snippets that start an object
     * ({", [{ no: '[' is not an object) or are whitespace */
    assert_true(allowed['{'] && allowed[' '] && allowed['\n'] && allowed['\t'] && allowed['\r']);
    assert_false(allowed['['] || allowed['"'] || allowed['1'] || allowed[0]);
    assert_true(allowed[256 + 0]);    /* {" */
    assert_false(allowed[256 + 7]);   /* [{ */
    int expect = 0;
    for (int t = 0; t < V; t++) {
        serve_json c = s;
        expect += !banned[t] && serve_json_feed(&c, vb[t], vl[t]);
    }
    assert_int_equal(k, expect);
    /* inside a string: any character but '"' closes, control bytes are out, a banned token stays out */
    assert_true(serve_json_feed(&s, "{\"", 2));
    serve_json_mask(&s, &v, allowed);
    assert_true(allowed['a'] && allowed['<'] && allowed['"'] && allowed[256 + 19] && allowed[256 + 20]);
    assert_false(allowed['\n'] || allowed[0x1f] || allowed[0x80] || allowed[0xff] || allowed[256 + 21] || allowed[V - 1]);
    /* after a cut character only its continuation */
    assert_true(serve_json_feed(&s, "\xe6\x97", 2));
    k = serve_json_mask(&s, &v, allowed);
    assert_true(allowed[0xa5] && allowed[256 + 21]);
    assert_false(allowed['a'] || allowed['"']);
    /* once the object closes, nothing */
    serve_json_init(&s);
    assert_true(serve_json_feed(&s, "{}", 2));
    assert_int_equal(serve_json_mask(&s, &v, allowed), 0);
    /* the sampler with nothing allowed: -1 */
    float logits[V];
    for (int t = 0; t < V; t++) logits[t] = 0;
    serve_params p = { .temperature = 1, .top_p = 1 };
    serve_cand cand[V];
    unsigned long long rng = 1;
    assert_int_equal(serve_sample_masked(logits, V, &p, NULL, allowed, cand, &rng), -1);
}

static unsigned long long lcg(unsigned long long *x) {
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> 33;
}

/* random logits, masked: every reply is a prefix; those that close parse as objects */
static void test_masked_generation(void **state) {
    (void)state;
    serve_json_vocab v = make_vocab();
    unsigned char allowed[V];
    float logits[V];
    serve_cand cand[V];
    int closed = 0, runs = 300;
    for (int run = 0; run < runs; run++) {
        unsigned long long x = 1000 + (unsigned long long)run, rng = 77 + (unsigned long long)run;
        serve_params p = { .temperature = run % 3 ? 1.0f : 0.0f, .top_p = run % 5 ? 1.0f : 0.9f, .top_k = run % 7 ? 0 : 20 };
        serve_json s;
        serve_json_init(&s);
        char out[4096];
        size_t n = 0;
        for (int step = 0; step < 400 && !serve_json_done(&s); step++) {
            for (int t = 0; t < V; t++) logits[t] = (float)(lcg(&x) % 1000) / 200.0f;
            logits['}'] += 2.0f; logits[']'] += 2.0f;   /* lean towards closing */
            const int k = serve_json_mask(&s, &v, allowed);
            assert_true(k > 0);
            const int t = serve_sample_masked(logits, V, &p, NULL, allowed, cand, &rng);
            assert_true(t >= 0 && t < V && allowed[t]);
            assert_true(n + vl[t] < sizeof out);
            memcpy(out + n, vb[t], vl[t]);
            n += vl[t];
            assert_true(serve_json_feed(&s, vb[t], vl[t]));
        }
        out[n] = 0;
        if (!serve_json_done(&s)) continue;
        closed++;
        assert_true(serve_json_valid(out, n));
        const char *end = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(out, n, &end, 0);
        if (!cJSON_IsObject(j) || end != out + n) fprintf(stderr, "does not parse: %s\n", out);
        assert_true(cJSON_IsObject(j));
        assert_ptr_equal(end, out + n);
        cJSON_Delete(j);
    }
    fprintf(stderr, "masked generation: %d of %d replies closed, all parse\n", closed, runs);
    assert_true(closed >= runs / 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_masked_generation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
