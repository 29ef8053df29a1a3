/* test_arch.c: the model families beyond plain Llama/Qwen2 (Llama 3 RoPE scaling, Mistral
 * sliding windows, Qwen3 q/k norms, Gemma 3 text) on tiny random models (tiny_model_new_family):
 *   - against Hugging Face transformers: tests/golden/hf_arch_logits.txt, written by
 *     tests/golden/gen_hf_arch_logits.py from the directories `SKV_HF_EXPORT=dir
 *     build/tests/test_arch` writes (CI never runs transformers); 256 tokens, a prefill of
 *     160 then 96 decode steps, logits within 2e-4 (fp32 rounding over 256 positions);
 *   - GGUF and Hugging Face loads of the same weights give the same logits;
 *   - the batched forward gives the single-sequence logits (the window path included);
 *   - a compressed-cache session keeps a sliding-window layer's window exactly (policies
 *     compress the global layers only) and matches the plain forward with the full policy;
 *   - Gemma's SentencePiece tokenizer (GGUF model 'llama'): merges by score, byte fallback,
 *     user-defined pieces, and on the real Gemma 3 270M when it is in models/;
 *   - configs and GGUF files with a feature the engine lacks are refused, naming it. */
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
#include "runtime/engine/forward.h"
#include "runtime/session/session.h"
#include "runtime/policies/policy.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include "runtime/format/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

static const char *const k_fams[] = {"llama3", "mistral", "qwen3", "gemma3"};
enum { N_TOK = 256, N_PRE = 160, COL_STEP = 15, SEED = 46 };
#define GOLDEN_TOL 2e-4f

/* the token ids, the same as gen_hf_arch_logits.py's */
static void tokens(int *t) {
    for (int i = 0; i < N_TOK; i++) t[i] = (i * 131 + 7) % 300;
}

static int export_dirs(const char *root) {
    char d[1024];
    for (size_t i = 0; i < sizeof k_fams / sizeof k_fams[0]; i++) {
        snprintf(d, sizeof d, "%s/%s", root, k_fams[i]);
        mkdir(d, 0755);
        tiny_model *t = tiny_model_new_family(k_fams[i], SEED);
        if (!t || tiny_model_write_hf(t, d, SKV_F32, 1) != 0) {
            fprintf(stderr, "export: %s\n", skv_last_error());
            return 1;
        }
        tiny_model_free(t);
        printf("wrote %s\n", d);
    }
    return 0;
}

/* logits (N_TOK, vocab): a prefill of N_PRE rows, then one decode step per token */
static float *run_logits(const skv_model *m) {
    const int V = m->cfg.vocab;
    int tok[N_TOK];
    tokens(tok);
    float *out = malloc((size_t)N_TOK * V * sizeof *out);
    skv_state *s = skv_state_new(m, N_TOK, N_PRE, false);
    assert_non_null(out);
    assert_non_null(s);
    skv_fwd_opts all = {.logits = SKV_LOGITS_ALL}, last = {.logits = SKV_LOGITS_LAST};
    assert_int_equal(skv_forward(s, tok, N_PRE, &all), 0);
    memcpy(out, s->logits, (size_t)N_PRE * V * sizeof *out);
    for (int i = N_PRE; i < N_TOK; i++) {
        assert_int_equal(skv_forward(s, &tok[i], 1, &last), 0);
        memcpy(out + (size_t)i * V, s->logits, (size_t)V * sizeof *out);
    }
    skv_state_free(s);
    return out;
}

/* the "model <fam>" block: N_TOK rows of the columns 0, COL_STEP, ... below vocab */
static float *read_golden(const char *fam, int ncol) {
    size_t len;
    char *text = skv_read_file("tests/golden/hf_arch_logits.txt", &len);
    if (!text) return NULL;
    char key[64];
    snprintf(key, sizeof key, "\nmodel %s\n", fam);
    char *p = strstr(text, key);
    float *out = p ? malloc((size_t)N_TOK * ncol * sizeof *out) : NULL;
    if (out) p = strchr(p + 1, '\n') + 1;
    for (int r = 0; out && r < N_TOK; r++) {
        while (*p && *p != ' ') p++;   /* "p<i>" */
        for (int j = 0; j < ncol && out; j++) {
            char *end;
            out[(size_t)r * ncol + j] = strtof(p, &end);
            if (end == p) { free(out); out = NULL; }
            p = end;
        }
        if (out) p = strchr(p, '\n') + 1;
    }
    free(text);
    return out;
}

static skv_model *load_hf(const char *dir, const char *fam, const char *sub) {
    char d[1024];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    mkdir(d, 0755);
    tiny_model *t = tiny_model_new_family(fam, SEED);
    assert_non_null(t);
    assert_int_equal(tiny_model_write_hf(t, d, SKV_F32, 1), 0);
    tiny_model_free(t);
    skv_model *m = skv_model_load_hf(d);
    if (!m) fail_msg("%s", skv_last_error());
    return m;
}

static void golden(const char *dir, const char *fam) {
    skv_model *m = load_hf(dir, fam, "hf");
    const int V = m->cfg.vocab, ncol = (V + COL_STEP - 1) / COL_STEP;
    float *ref = read_golden(fam, ncol);
    if (!ref) { skv_model_free(m); fail_msg("no golden block for %s", fam); }
    float *got = run_logits(m);
    float maxd[2] = {0, 0}, maxv = 0;
    for (int r = 0; r < N_TOK; r++)
        for (int j = 0; j < ncol; j++) {
            const float a = got[(size_t)r * V + j * COL_STEP], b = ref[(size_t)r * ncol + j];
            maxd[r >= N_PRE] = fmaxf(maxd[r >= N_PRE], fabsf(a - b));
            maxv = fmaxf(maxv, fabsf(b));
        }
    print_message("  %s: max |smallkv - transformers| prefill %.3g, decode %.3g (max |logit| %.3g)\n", fam,
                  (double)maxd[0], (double)maxd[1], (double)maxv);
    if (!(maxd[0] < GOLDEN_TOL && maxd[1] < GOLDEN_TOL))
        fail_msg("%s: logits differ from transformers by %g / %g", fam, (double)maxd[0], (double)maxd[1]);
    free(got);
    free(ref);
    skv_model_free(m);
}

static void test_golden_llama3(void **s) { golden(*s, "llama3"); }
static void test_golden_mistral(void **s) { golden(*s, "mistral"); }
static void test_golden_qwen3(void **s) { golden(*s, "qwen3"); }
static void test_golden_gemma3(void **s) { golden(*s, "gemma3"); }

/* the GGUF writer stores what the converters store (permuted llama Q/K, Gemma's 1 + w norms,
 * Llama 3's rope_freqs); both loads must run the same model */
static void gguf_vs_hf(const char *dir, const char *fam) {
    skv_model *mh = load_hf(dir, fam, "hf");
    char path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    tiny_model *t = tiny_model_new_family(fam, SEED);
    assert_int_equal(tiny_model_write_gguf(t, path, SKV_F32), 0);
    tiny_model_free(t);
    skv_model *mg = skv_model_load_gguf(path);
    if (!mg) fail_msg("%s", skv_last_error());
    assert_int_equal(mg->cfg.arch == SKV_ARCH_LLAMA ? SKV_ARCH_LLAMA : (int)mg->cfg.arch,
                     mh->cfg.arch == SKV_ARCH_MISTRAL ? SKV_ARCH_LLAMA : (int)mh->cfg.arch);
    assert_int_equal(mg->cfg.n_window_layers, mh->cfg.n_window_layers);
    float *a = run_logits(mg), *b = run_logits(mh), maxd = 0;
    for (size_t i = 0; i < (size_t)N_TOK * mg->cfg.vocab; i++) maxd = fmaxf(maxd, fabsf(a[i] - b[i]));
    print_message("  %s: max |GGUF - HF| %.3g\n", fam, (double)maxd);
    if (!(maxd < 1e-4f)) fail_msg("%s: GGUF and HF logits differ by %g", fam, (double)maxd);
    free(a);
    free(b);
    skv_model_free(mg);
    skv_model_free(mh);
}

static void test_gguf_llama3(void **s) { gguf_vs_hf(*s, "llama3"); }
static void test_gguf_mistral(void **s) { gguf_vs_hf(*s, "mistral"); }
static void test_gguf_qwen3(void **s) { gguf_vs_hf(*s, "qwen3"); }
static void test_gguf_gemma3(void **s) { gguf_vs_hf(*s, "gemma3"); }

/* two sequences decoded together past the window give their single-sequence logits */
static void test_batch_gemma3(void **st) {
    skv_model *m = load_hf(*st, "gemma3", "hf");
    const int V = m->cfg.vocab, n0 = 70;
    int tok[N_TOK];
    tokens(tok);
    skv_state *a = skv_state_new(m, 128, 80, false), *b = skv_state_new(m, 128, 80, false), *r = skv_state_new(m, 128, 80, false);
    skv_batch *bt = skv_batch_new(m, 4);
    assert_true(a && b && r && bt);
    assert_int_equal(skv_forward(a, tok, n0, NULL), 0);
    assert_int_equal(skv_forward(b, tok + 1, n0 - 10, NULL), 0);
    assert_int_equal(skv_forward(r, tok, n0, NULL), 0);
    skv_state *sts[2] = {a, b};
    float maxd = 0;
    for (int step = 0; step < 8; step++) {
        int two[2] = {tok[n0 + step], tok[n0 + step + 1]};
        assert_int_equal(skv_forward_batch(bt, sts, two, 2, NULL), 0);
        skv_fwd_opts last = {.logits = SKV_LOGITS_LAST};
        assert_int_equal(skv_forward(r, &two[0], 1, &last), 0);
        for (int i = 0; i < V; i++) maxd = fmaxf(maxd, fabsf(a->logits[i] - r->logits[i]));
    }
    if (!(maxd < 1e-4f)) fail_msg("batched and single decode differ by %g", (double)maxd);
    skv_batch_free(bt);
    skv_state_free(a); skv_state_free(b); skv_state_free(r);
    skv_model_free(m);
}

/* sessions over Gemma 3's windowed layer: "full" equals the plain forward past the window
 * (exact window prefill, window selection at decode); h2o at 50 % keeps the windowed layer's
 * 48 tokens whatever the budget, and the memory report counts what is hot */
static skv_session *open_session(const skv_model *m, const char *policy, double budget) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    assert_int_equal(skv_policy_spec_parse(policy, &o.pol), 0);
    o.budget = budget;
    o.max_ctx = 256;
    o.T_max = 64;
    skv_session *s = skv_session_new(m, &o);
    if (!s) fail_msg("session: %s", skv_last_error());
    return s;
}

static void test_session_window(void **st) {
    skv_model *m = load_hf(*st, "gemma3", "hf");
    const int V = m->cfg.vocab, np = 100, steps = 40;
    int tok[N_TOK];
    tokens(tok);
    skv_state *p = skv_state_new(m, 256, 64, true);
    skv_session *s = open_session(m, "full", 1.0);
    skv_fwd_opts last = {.logits = SKV_LOGITS_LAST};
    assert_int_equal(skv_forward(p, tok, 64, NULL), 0);
    assert_int_equal(skv_forward(p, tok + 64, np - 64, &last), 0);
    assert_int_equal(skv_session_prefill(s, tok, np), 0);
    float maxd = 0;
    for (int i = 0; i < V; i++) maxd = fmaxf(maxd, fabsf(p->logits[i] - skv_session_logits(s)[i]));
    for (int t = 0; t < steps; t++) {
        assert_int_equal(skv_forward(p, &tok[np + t], 1, &last), 0);
        assert_int_equal(skv_session_step(s, tok[np + t]), 0);
        for (int i = 0; i < V; i++) maxd = fmaxf(maxd, fabsf(p->logits[i] - skv_session_logits(s)[i]));
    }
    skv_session_mem r;
    skv_session_mem_report(s, &r);
    print_message("  full session vs plain forward past the window: max |logit diff| %.3g; hot %zu of %zu bytes\n",
                  (double)maxd, r.hot_used, r.full_equiv);
    if (!(maxd < 2e-3f)) fail_msg("session and plain forward differ by %g", (double)maxd);
    /* layer 0 keeps 48 of 140 positions, layer 1 all 140: hot = (48 + 140) / 280 of full */
    assert_int_equal(r.hot_used * 280, r.full_equiv * (48 + 140));
    skv_session_free(s);
    s = open_session(m, "h2o", 0.5);
    assert_int_equal(skv_session_prefill(s, tok, np), 0);
    for (int t = 0; t < 20; t++) assert_int_equal(skv_session_step(s, tok[np + t]), 0);
    skv_session_mem_report(s, &r);
    print_message("  h2o at 50 %%: hot %zu of %zu bytes\n", r.hot_used, r.full_equiv);
    assert_true(r.hot_used < r.full_equiv);
    skv_session_free(s);
    skv_state_free(p);
    skv_model_free(m);
}

static void expect_tokens(const skv_tokenizer *t, const char *text, const int *want, int n) {
    int got[64];
    const int k = skv_tokenize(t, text, strlen(text), false, got, 64);
    if (k != n) fail_msg("'%s': %d tokens, expected %d", text, k, n);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("'%s': token %d is %d, expected %d", text, i, got[i], want[i]);
    char *back = skv_detokenize(t, got, k);
    assert_non_null(back);
    assert_string_equal(back, text);
    free(back);
}

/* a hand-made SentencePiece vocabulary: "ab" (-1.5) merges before " a" (-3), then " ab"
 * (-0.5); 'c' and 'é' have no piece and fall back to their bytes; "\n" is user-defined */
static void test_spm_tokenizer(void **st) {
    static const char *const pieces[] = {"<pad>", "<eos>", "<bos>", "<0x63>", "<0xC3>", "<0xA9>",
                                         "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "ab", "\xe2\x96\x81" "a", "\n"};
    const int32_t types[13] = {3, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 4};
    const float scores[13] = {0, 0, 0, 0, 0, 0, -1, -2, -2, -1.5f, -0.5f, -3, 0};
    gw_writer *w = gw_new();
    gw_add_str(w, "general.architecture", "gemma3");
    gw_add_str(w, "tokenizer.ggml.model", "llama");
    gw_add_arr_str(w, "tokenizer.ggml.tokens", pieces, 13);
    gw_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, 13);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, 13);
    gw_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gw_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gw_add_bool(w, "tokenizer.ggml.add_space_prefix", false);
    char path[1024];
    snprintf(path, sizeof path, "%s/spm.gguf", (const char *)*st);
    assert_int_equal(gw_write(w, path), 0);
    gw_free(w);
    gguf_file *f = gguf_open(path);
    assert_non_null(f);
    skv_tokenizer *t = skv_tokenizer_from_gguf(f);
    if (!t) fail_msg("%s", skv_last_error());
    assert_true(skv_tok_add_bos(t));
    assert_int_equal(skv_tok_bos(t), 2);
    { const int want[] = {9, 10, 12, 3, 6, 4, 5}; expect_tokens(t, "ab ab\nc \xc3\xa9", want, 7); }
    skv_tokenizer_free(t);
    gguf_close(f);

    char gp[1024];
    if (!test_model_path(gp, sizeof gp, "gemma-3-270m-q4_k_m.gguf")) { print_message("  (no Gemma 3 270M in models/)\n"); return; }
    f = gguf_open(gp);
    assert_non_null(f);
    t = skv_tokenizer_from_gguf(f);
    if (!t) fail_msg("%s", skv_last_error());
    { const int want[] = {818, 5279, 529, 7001, 563}; expect_tokens(t, "The capital of France is", want, 5); }
    int ids[64];
    const char *txt = "Hello  world!\n\nIt's 2025: na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 \xe6\x9d\xb1\xe4\xba\xac";
    const int n = skv_tokenize(t, txt, strlen(txt), false, ids, 64);
    char *back = skv_detokenize(t, ids, n);
    assert_string_equal(back, txt);
    free(back);
    skv_tokenizer_free(t);
    gguf_close(f);
}

/* config.json edits that must be refused, with the words the message must contain */
static void expect_refused(const char *dir, const char *fam, const char *from, const char *to, const char *words) {
    char d[1024], p[1100];
    snprintf(d, sizeof d, "%s/bad", dir);
    mkdir(d, 0755);
    tiny_model *t = tiny_model_new_family(fam, SEED);
    assert_int_equal(tiny_model_write_hf(t, d, SKV_F32, 1), 0);
    tiny_model_free(t);
    snprintf(p, sizeof p, "%s/config.json", d);
    size_t len;
    char *txt = skv_read_file(p, &len);
    char *at = txt ? strstr(txt, from) : NULL;
    if (!at) fail_msg("%s: no '%s' in the config", fam, from);
    char out[8192];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - txt), txt, to, at + strlen(from));
    free(txt);
    assert_int_equal(skv_write_file_atomic(p, out, strlen(out)), 0);
    skv_model *m = skv_model_load_hf(d);
    if (m) fail_msg("%s: '%s' was loaded", fam, to);
    if (!strstr(skv_last_error(), words)) fail_msg("%s: message '%s' lacks '%s'", fam, skv_last_error(), words);
}

static void test_refusals(void **s) {
    expect_refused(*s, "llama3", "\"llama3\"", "\"yarn\"", "rope_type 'yarn'");
    expect_refused(*s, "llama3", "\"llama3\"", "\"dynamic\"", "rope_type 'dynamic'");
    expect_refused(*s, "llama3", "\"llama3\"", "\"longrope\"", "rope_type 'longrope'");
    expect_refused(*s, "llama3", "\"low_freq_factor\": 1.0, ", "", "low_freq_factor");
    expect_refused(*s, "gemma3", "\"attn_logit_softcapping\": null", "\"attn_logit_softcapping\": 50.0",
                   "attention-logit softcapping");
    expect_refused(*s, "gemma3", "\"gemma3_text\"", "\"gemma3\"", "multimodal");
    expect_refused(*s, "gemma3", "\"gelu_pytorch_tanh\"", "\"gelu\"", "hidden_activation 'gelu'");
    expect_refused(*s, "gemma3", "\"attention_bias\": false", "\"use_bidirectional_attention\": true", "bidirectional");
    expect_refused(*s, "qwen3", "\"use_sliding_window\": false", "\"use_sliding_window\": true", "use_sliding_window");
    expect_refused(*s, "qwen3", "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias");
    expect_refused(*s, "mistral", "\"mistral\"", "\"phi3\"", "unsupported model_type 'phi3'");
}

/* GGUF files with a key the engine cannot honour are refused, naming it */
static void test_gguf_refusals(void **s) {
    static const struct { const char *fam, *key, *str; float val; const char *words; } cases[] = {
        {"llama3", "llama.rope.scaling.type", "yarn", 0, "'yarn'"},
        {"gemma3", "gemma3.attn_logit_softcapping", NULL, 50.0f, "attention-logit softcapping"},
        {"qwen3", "qwen3.attention.sliding_window", NULL, 0, NULL},   /* u32 below */
    };
    for (int c = 0; c < 2; c++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/bad.gguf", (const char *)*s);
        tiny_model *t = tiny_model_new_family(cases[c].fam, SEED);
        t->gguf_extra_key = cases[c].key;
        t->gguf_extra_str = cases[c].str;
        t->gguf_extra_f32 = cases[c].val;
        assert_int_equal(tiny_model_write_gguf(t, path, SKV_F32), 0);
        tiny_model_free(t);
        skv_model *m = skv_model_load_gguf(path);
        if (m) fail_msg("%s with %s was loaded", cases[c].fam, cases[c].key);
        if (!strstr(skv_last_error(), cases[c].words)) fail_msg("message '%s' lacks '%s'", skv_last_error(), cases[c].words);
    }
}

int main(void) {
    if (getenv("SKV_HF_EXPORT")) return export_dirs(getenv("SKV_HF_EXPORT"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_golden_llama3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_golden_mistral, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_golden_qwen3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_golden_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_gguf_llama3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_gguf_mistral, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_gguf_qwen3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_gguf_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_batch_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_session_window, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_spm_tokenizer, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_gguf_refusals, test_tmpdir_setup, test_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
