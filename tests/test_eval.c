/* test_eval.c: the evaluation harness (runtime/eval_*.c, runtime/cli/eval*.c):
 *   - KL / top-1 / perplexity on hand-made distributions, the p95 quantile;
 *   - bootstrap intervals: constant data, a 50 % accuracy over 100 units, weights, the
 *     same interval for the same seed, bad arguments refused; Wilson intervals;
 *   - answer extraction and exact match (gsm8k, bbh, passkey); the multi_news corpus;
 *   - the results store: add, replace, atomic save, reload;
 *   - policy specs parse into canonical labels, bad modifiers are refused;
 *   - fidelity on a tiny random model: full vs the full-cache reference is exact (KL 0,
 *     top-1 100%), a 30% H2O cache is not;
 *   - fidelity batched (cells decoded together) equals one by one, and cells derived from
 *     one shared prefill equal their own prefills (the runner derives, test_session checks
 *     derive against a prefill of its own);
 *   - generation of many cells together (one shared prefill, batched decoding, a cell that
 *     cannot derive prefilling itself) gives each cell the text it gets alone (SmolLM2);
 *     with drafts (speculative decoding, `smallkv eval --draft K`) the same texts, the verify
 *     passes counted, and a cell that cannot draft refused;
 *   - resume: `smallkv eval` rerun on its own output adds only the missing cells and leaves
 *     the finished ones untouched (SmolLM2; skipped without the model or the binary);
 *   - passkey phrasings: phrasing 0 is token for token the original needle and question,
 *     every phrasing holds the key, the questions differ, a phrasing out of range is refused;
 *     `smallkv eval passkey --variants N`: N units per cell with their own keys, resumable;
 *   - eval cells go through the public API: a cell built by the runner (its own prefill, or
 *     derived from the shared one) gives the logits and memory of a smallkv_session_new
 *     session, step for step; --device cuda without CUDA is a clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "eval/bootstrap.h"
#include "eval/data.h"
#include "eval/metrics.h"
#include "eval/runner.h"
#include "runtime/policies/smallkv.h"
#include "eval/store.h"
#include "runtime/format/profile.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/api/api.h"
#include "tests/support/test_util.h"
#include "common/util.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

static void test_kl_math(void **st) {
    (void)st;
    float r[3] = {logf(0.5f), logf(0.25f), logf(0.25f)};
    float q[3] = {logf(0.25f) + 7, logf(0.5f) + 7, logf(0.25f) + 7};   /* shifted logits: same distribution */
    skv_step_cmp c;
    skv_compare_logits(r, q, 3, 1, &c);
    double kl = 0.5 * log(0.5 / 0.25) + 0.25 * log(0.25 / 0.5);
    assert_true(fabs(c.kl - kl) < 1e-6);
    assert_false(c.top1);
    assert_true(fabs(c.nll_ref - log(4.0)) < 1e-6);
    assert_true(fabs(c.nll_pol - log(2.0)) < 1e-6);
    /* identical distributions: KL 0, top-1 agrees */
    skv_compare_logits(r, r, 3, 0, &c);
    assert_true(c.kl == 0);
    assert_true(c.top1);
    /* accumulate: steps with nll log 4 and log 2 -> ppl = exp(mean) = sqrt(8) */
    skv_fid_acc a = {0};
    skv_compare_logits(r, q, 3, 1, &c);
    assert_int_equal(skv_fid_add(&a, &c), 0);
    skv_compare_logits(r, r, 3, 0, &c);   /* nll log 2 both */
    assert_int_equal(skv_fid_add(&a, &c), 0);
    skv_fid_summary s;
    skv_fid_summarize(&a, &s);
    assert_int_equal(s.steps, 2);
    assert_true(fabs(s.kl_mean - kl / 2) < 1e-6);
    assert_true(fabs(s.top1 - 0.5) < 1e-12);
    assert_true(fabs(s.ppl_ref - sqrt(8.0)) < 1e-5);   /* nll_ref: log 4, log 2 */
    assert_true(fabs(s.ppl_pol - 2.0) < 1e-5);         /* nll_pol: log 2, log 2 */
    assert_true(fabs(s.ppl_ratio - 2.0 / sqrt(8.0)) < 1e-5);
    skv_fid_free(&a);
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i;
    assert_true(skv_quantile(v, 100, 0.95) == 95);
    assert_true(skv_quantile(v, 100, 1.0) == 100);
    assert_true(skv_quantile(v, 0, 0.95) == 0);
}

static void test_bootstrap(void **st) {
    (void)st;
    double x[100], lo, hi, lo2, hi2;
    for (int i = 0; i < 100; i++) x[i] = 0.25;
    assert_int_equal(skv_bootstrap_ci(x, NULL, 100, 500, 0.05, 1, &lo, &hi), 0);
    assert_true(lo == 0.25 && hi == 0.25);
    for (int i = 0; i < 100; i++) x[i] = i % 2;   /* 50 of 100 correct: about +-0.1 */
    assert_int_equal(skv_bootstrap_ci(x, NULL, 100, 2000, 0.05, 7, &lo, &hi), 0);
    assert_true(lo > 0.35 && lo < 0.45 && hi > 0.55 && hi < 0.65);
    assert_int_equal(skv_bootstrap_ci(x, NULL, 100, 2000, 0.05, 7, &lo2, &hi2), 0);
    assert_true(lo == lo2 && hi == hi2);
    /* weighted: a 3-weight 0 and a 1-weight 1; replicates are 0, 0.25 or 1 */
    double y[2] = {0, 1}, w[2] = {3, 1};
    assert_int_equal(skv_bootstrap_ci(y, w, 2, 1000, 0.05, 3, &lo, &hi), 0);
    assert_true(lo == 0 && hi == 1);
    assert_int_equal(skv_bootstrap_ci(y, w, 1, 1000, 0.05, 3, &lo, &hi), 0);   /* one item: the point */
    assert_true(lo == 0 && hi == 0);
    assert_int_equal(skv_bootstrap_ci(y, w, 2, 5, 0.05, 3, &lo, &hi), -1);
    assert_int_equal(skv_bootstrap_ci(y, w, 2, 100, 1.5, 3, &lo, &hi), -1);
    /* Wilson: 0 / 4 still has a width; 50 / 100 about 0.40 - 0.60 */
    skv_wilson_ci(0, 4, &lo, &hi);
    assert_true(lo == 0 && hi > 0.45 && hi < 0.52);
    skv_wilson_ci(50, 100, &lo, &hi);
    assert_true(fabs(lo - 0.4038) < 1e-3 && fabs(hi - 0.5962) < 1e-3);
}

/* the corpora read from the data folder; multi_news from its JSON lines */
static void test_corpora(void **st) {
    (void)st;
    if (!test_data_file("longbench/multi_news.jsonl")) TEST_SKIP_DATA("longbench");
    size_t n = 0;
    char *t = skv_eval_corpus(test_data_dir(), "multi_news", &n);
    assert_non_null(t);
    assert_true(n > 1000000 && strlen(t) == n);
    assert_null(strstr(t, "NEWLINE_CHAR"));
    assert_non_null(strstr(t, "Passage 1:\nMembers of Occupy Philadelphia"));
    free(t);
    assert_null(skv_eval_corpus(test_data_dir(), "no_such_corpus", &n));
    assert_non_null(strstr(skv_last_error(), "multi_news"));
}

static void test_answers(void **st) {
    (void)st;
    char b[64];
    assert_true(skv_extract_gsm8k(" She has 3 + 4 = 7 apples. The answer is 1,234.\n\nQuestion:", b, sizeof b));
    assert_string_equal(b, "1234");
    assert_true(skv_extract_gsm8k("so 12.50 dollars", b, sizeof b));
    assert_string_equal(b, "12.5");
    assert_true(skv_extract_gsm8k("The answer is $18.00.", b, sizeof b));
    assert_string_equal(b, "18");
    assert_false(skv_extract_gsm8k("no digits here", b, sizeof b));
    assert_true(skv_gsm8k_gold("x\n#### 72", b, sizeof b));
    assert_string_equal(b, "72");
    assert_true(skv_extract_bbh("steps... So the answer is (D).\n\nQ: next", b, sizeof b));
    assert_string_equal(b, "(D)");
    assert_true(skv_bbh_match(b, "(D)"));
    assert_true(skv_bbh_match("D", "(D)"));
    assert_false(skv_bbh_match("(C)", "(D)"));
    assert_true(skv_extract_bbh("So the answer is -24.", b, sizeof b));
    assert_true(skv_bbh_match(b, "-24"));
    assert_false(skv_bbh_match("24", "-24"));
    assert_true(skv_first_digits(" 58213. Remember", b, sizeof b));
    assert_string_equal(b, "58213");
}

/* few-shot text as chat turns: the description opens the first user turn, each example's
 * user turn ends with its answer mark, the assistant turn is the rest, the question last */
static void test_fewshot_turns(void **st) {
    (void)st;
    char **t = NULL;
    const char *bbh = "Infer the date.\n\nQ: Today is 1/2/2000. Options:\n(A) x\nA: Let's think step by step.\n"
                      "It is 1/2/2000. So the answer is (A).\n\nQ: Q: twice?\nA: Let's think step by step.\nYes. "
                      "So the answer is (B).";
    int n = skv_fewshot_turns(bbh, "Q: ", "\nA: Let's think step by step.", "Q: last\nA: Let's think step by step.", &t);
    assert_int_equal(n, 5);
    assert_string_equal(t[0], "Infer the date.\n\nQ: Today is 1/2/2000. Options:\n(A) x\nA: Let's think step by step.");
    assert_string_equal(t[1], "It is 1/2/2000. So the answer is (A).");
    assert_string_equal(t[2], "Q: Q: twice?\nA: Let's think step by step."); /* "Q: " inside a line is no new example */
    assert_string_equal(t[3], "Yes. So the answer is (B).");
    assert_string_equal(t[4], "Q: last\nA: Let's think step by step.");
    skv_fewshot_turns_free(t, n);
    const char *gsm = "Question: 2+2?\nAnswer: 2+2=4. The answer is 4.\n\nQuestion: 3*3?\nAnswer: 9. The answer is 9.\n\n";
    n = skv_fewshot_turns(gsm, "Question: ", "\nAnswer:", "Question: 1+1?\nAnswer:", &t);
    assert_int_equal(n, 5);
    assert_string_equal(t[0], "Question: 2+2?\nAnswer:");
    assert_string_equal(t[1], "2+2=4. The answer is 4.");
    assert_string_equal(t[3], "9. The answer is 9.");
    assert_string_equal(t[4], "Question: 1+1?\nAnswer:");
    skv_fewshot_turns_free(t, n);
    /* no examples: the description opens the question's turn */
    n = skv_fewshot_turns("Solve it.", "Q: ", "\nA:", "Q: 1\nA:", &t);
    assert_int_equal(n, 1);
    assert_string_equal(t[0], "Solve it.\n\nQ: 1\nA:");
    skv_fewshot_turns_free(t, n);
    /* an example without its answer mark is an error, not a silently merged turn */
    assert_int_equal(skv_fewshot_turns("Q: a\nno answer\n\nQ: b\nA: c", "Q: ", "\nA:", "Q: x\nA:", &t), -1);
    assert_null(t);
    assert_non_null(strstr(skv_last_error(), "few-shot example 0"));
}

/* The report never folds another protocol into a row: per-attention-head cells and cells
 * whose budget is a share of the prompt are rows of their own, chat-template prompts and
 * records of the int8 prefill a group of their own, and the full cache of that prompt form is the "vs full" reference. */
static void test_report_protocols(void **st) {
    (void)st;
    char bin[512], out[256], rep[300], cmd[1200];
    test_bin_path(bin, sizeof bin, "smallkv");
    if (access(bin, X_OK)) { print_message("needs %s: skipping\n", bin); skip(); }
    snprintf(out, sizeof out, "/tmp/skv_test_report_%d.json", (int)getpid());
    snprintf(rep, sizeof rep, "%s.md", out);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    fputs("{\"format\":\"smallkv-eval\",\"version\":1,\"records\":[", f);
    /* 4 problems: full right on all; h2o per KV head right on 0 and 1, per attention head on
     * 0 only; h2o with the prompt's budget right on none; a plain-prompt full cache wrong on all */
    for (int i = 0; i < 4; i++) {
        static const struct { const char *key, *pol, *gran, *base; int chat; double b; int ok_below; } R[] = {
            {"full", "full", "kv_head", "prompt", 2, 1, 4},         {"h2o", "h2o", "kv_head", "length", 2, 0.1, 2},
            {"h2o|gran=head", "h2o", "attention_head", "length", 2, 0.1, 1},
            {"h2o|base=prompt", "h2o", "kv_head", "prompt", 2, 0.1, 0}, {"full-plain", "full", "kv_head", "length", 0, 1, 0},
            {"full-int8", "full", "kv_head", "length", 1, 1, 3},   /* chat 1 here: int8 prefill, plain prompt */
        };
        for (size_t k = 0; k < sizeof R / sizeof R[0]; k++)
            fprintf(f, "%s{\"key\":\"gsm8k|test#%d|%s\",\"task\":\"gsm8k\",\"unit\":{\"subset\":\"test\",\"index\":%d},"
                    "\"policy\":\"%s\",\"budget\":%g,\"budget_base\":\"%s\",\"granularity\":\"%s\"%s,"
                    "\"models\":{\"llm\":{\"name\":\"M\"}},\"metrics\":{\"correct\":%s}}",
                    i || k ? "," : "", i, R[k].key, i, R[k].pol, R[k].b, R[k].base, R[k].gran,
                    R[k].chat == 2 ? ",\"chat_template\":true,\"fewshot_turns\":true" :
                    R[k].chat == 1 ? ",\"settings\":{\"gemm\":\"int8\"}" : "", i < R[k].ok_below ? "true" : "false");
    }
    fputs("]}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s eval report %s -o %s >/dev/null 2>&1", bin, out, rep);
    assert_int_equal(system(cmd), 0);
    size_t len = 0;
    char *md = skv_read_file(rep, &len);
    assert_non_null(md);
    const char *g = strstr(md, "**M, test, chat template, few-shot turns**");
    assert_non_null(g);
    assert_non_null(strstr(md, "**M, test**"));
    const char *gi = strstr(md, "**M, test, int8 prefill**");   /* int8 prefill: a group of its own */
    assert_non_null(gi);
    assert_non_null(strstr(gi, "| full | 1 | 4 | 75.0% (3/4) |"));
    assert_non_null(strstr(g, "| full | 1 | 4 | 100.0% (4/4) |"));
    assert_non_null(strstr(g, "| h2o | 0.1 | 4 | 50.0% (2/4) |"));
    assert_non_null(strstr(g, "| h2o (per attention head) | 0.1 | 4 | 25.0% (1/4) |"));
    assert_non_null(strstr(g, "| h2o (budget of the prompt) | 0.1 | 4 | 0.0% (0/4) |"));
    assert_non_null(strstr(g, "| -75.0 ["));   /* per head vs the chat prompt's full cache */
    free(md);
    unlink(rep);
    unlink(out);
}

static void test_store(void **st) {
    (void)st;
    char path[256];
    snprintf(path, sizeof path, "/tmp/skv_test_eval_%d.json", (int)getpid());
    unlink(path);
    skv_eval_store *s = skv_store_open(path);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 0);
    assert_int_not_equal(access(path, F_OK), 0);   /* nothing written yet */
    for (int i = 0; i < 3; i++) {
        cJSON *r = cJSON_CreateObject();
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        cJSON_AddStringToObject(r, "key", key);
        cJSON_AddNumberToObject(r, "v", i);
        assert_int_equal(skv_store_add(s, r), 0);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "key", "k1");
    cJSON_AddNumberToObject(r, "v", 10);
    assert_int_equal(skv_store_add(s, r), 0);    /* replaces */
    assert_int_equal(skv_store_count(s), 3);
    assert_int_equal(skv_store_add(s, cJSON_CreateObject()), -1);   /* no key */
    skv_store_free(s);
    s = skv_store_open(path);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 3);
    assert_true(skv_store_has(s, "k0") && skv_store_has(s, "k2") && !skv_store_has(s, "k3"));
    assert_int_equal((int)cJSON_GetObjectItem(skv_store_find(s, "k1"), "v")->valuedouble, 10);
    skv_store_free(s);
    /* not a results file */
    FILE *f = fopen(path, "w");
    fputs("{\"records\": []}", f);
    fclose(f);
    assert_null(skv_store_open(path));
    unlink(path);
}

static void test_policy_specs(void **st) {
    (void)st;
    skv_eval_pol p;
    assert_int_equal(skv_eval_pol_parse("h2o", NULL, &p), 0);
    assert_string_equal(p.label, "h2o");
    assert_int_equal(skv_eval_pol_parse("smallkv:mass:online:nomarg:slmb=0.4", NULL, &p), 0);
    assert_string_equal(p.label, "smallkv:mass:online:nomarg:score=now:slmb=0.4");
    const skv_smallkv_opts *so = (const skv_smallkv_opts *)p.spec.opts;
    assert_true(so->mapping == 1 && so->no_marginal && so->combine == SKV_COMBINE_MASS);
    assert_int_equal(skv_eval_pol_parse("smallkv", NULL, &p), 0);
    assert_string_equal(p.label, "smallkv:renorm:profile:score=now");
    assert_int_equal(so->score, SKV_SLM_SCORE_NOW);
    /* the accumulated score carries no suffix: records from before the option keep their key */
    assert_int_equal(skv_eval_pol_parse("smallkv:score=acc", NULL, &p), 0);
    assert_string_equal(p.label, "smallkv:renorm:profile");
    assert_int_equal(skv_eval_pol_parse("smallkv:score=mean:online", NULL, &p), 0);
    assert_string_equal(p.label, "smallkv:renorm:online:score=mean");
    assert_int_equal(skv_eval_pol_parse("smallkv:score=soon", NULL, &p), -1);
    assert_int_equal(skv_eval_pol_parse("h2o:mass", NULL, &p), -1);
    assert_int_equal(skv_eval_pol_parse("nosuch", NULL, &p), -1);
    assert_int_equal(skv_eval_pol_parse("smallkv:depth=x", NULL, &p), -1);
}

static void test_fidelity_tiny(void **st) {
    (void)st;
    skv_model *m = tiny_model_load(SKV_ARCH_LLAMA, 42, "eval");
    assert_non_null(m);
    const int N = 96, P = 48, V = m->cfg.vocab;
    int toks[96];
    uint32_t seed = 7;
    for (int i = 0; i < N; i++) { seed = seed * 1664525u + 1013904223u; toks[i] = (int)((seed >> 8) % (uint32_t)V); }
    int *map = malloc(sizeof(int) * m->cfg.n_layer * m->cfg.n_head);
    for (int i = 0; i < m->cfg.n_layer * m->cfg.n_head; i++) map[i] = i;
    smallkv_pair *pair = api_pair_borrow(m, m);
    assert_non_null(pair);
    skv_eval_ctx c = {.pair = pair, .map = map, .kv_f16 = false, .T_max = 32};
    skv_eval_pol pf, ph, ps;
    assert_int_equal(skv_eval_pol_parse("full", NULL, &pf), 0);
    assert_int_equal(skv_eval_pol_parse("h2o", NULL, &ph), 0);
    assert_int_equal(skv_eval_pol_parse("smallkv:mass", NULL, &ps), 0);
    skv_fid_cell cells[3] = {{.pol = &pf, .budget = 1}, {.pol = &ph, .budget = 0.3}, {.pol = &ps, .budget = 0.3}};
    assert_int_equal(skv_eval_fidelity(&c, toks, N, P, cells, 3, NULL, NULL, NULL), 0);
    skv_fid_summary s[3];
    for (int i = 0; i < 3; i++) { skv_fid_summarize(&cells[i].acc, &s[i]); skv_fid_free(&cells[i].acc); }
    assert_int_equal(s[0].steps, N - 1 - P);
    assert_true(s[0].kl_mean == 0 && s[0].top1 == 1 && s[0].ppl_ratio == 1);
    assert_true(s[1].kl_mean > 0);
    assert_true(s[2].kl_mean >= 0 && isfinite(s[2].kl_mean));
    assert_true(cells[1].mem.hot_used < cells[0].mem.hot_used);
    /* batched: the same numbers (batches under skv_matmul_gemm_min_t(F32) = 4 rows use the
     * integer/float dots of one-by-one decode, see forward.h) */
    skv_fid_cell cb[3] = {{.pol = &pf, .budget = 1}, {.pol = &ph, .budget = 0.3}, {.pol = &ps, .budget = 0.3}};
    c.batch = 3;
    assert_int_equal(skv_eval_fidelity(&c, toks, N, P, cb, 3, NULL, NULL, NULL), 0);
    for (int i = 0; i < 3; i++) {
        skv_fid_summary sb;
        skv_fid_summarize(&cb[i].acc, &sb);
        skv_fid_free(&cb[i].acc);
        assert_true(sb.kl_mean == s[i].kl_mean && sb.top1 == s[i].top1 && sb.ppl_pol == s[i].ppl_pol);
        assert_true(cb[i].shared_prefill && !cb[i].timed && cells[i].timed);
        assert_int_equal(cb[i].restores, cells[i].restores);
    }
    c.batch = 0;
    /* bad arguments */
    assert_int_equal(skv_eval_fidelity(&c, toks, P + 1, P, cells, 1, NULL, NULL, NULL), -1);
    free(map);
    smallkv_pair_free(pair);
    skv_model_free(m);
}

/* ---- resume, end to end through the CLI ---- */

static int count_new(const char *cmd) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[1024];
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, " new)");
        if (p) { while (p > line && p[-1] != '(') p--; n = atoi(p); }
    }
    return pclose(f) == 0 ? n : -2;
}

static char *record_text(const char *path, const char *policy) {
    skv_eval_store *s = skv_store_load(path);
    if (!s) return NULL;
    char *out = NULL;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records)
        if (!strcmp(cJSON_GetObjectItem(r, "policy")->valuestring, policy)) out = cJSON_PrintUnformatted(r);
    skv_store_free(s);
    return out;
}

static void test_generate_cells(void **st) {
    (void)st;
    char model[512];
    if (!test_model_path(model, sizeof model, TEST_SMOL)) TEST_SKIP_MISSING(model);
    skv_model *m = skv_model_load_gguf(model);
    assert_non_null(m);
    const char *text = "Alice keeps three red boxes in the attic. Bob keeps two blue boxes in the garage. "
                       "The red boxes hold old letters, the blue ones hold tools. Carol borrowed one blue box "
                       "last winter and never gave it back, so Bob now has only one box left in the garage. "
                       "Alice, meanwhile, bought a fourth red box for her photographs. ";
    int *ctx = NULL, *q = NULL;
    const int nc = skv_eval_tokenize(m->tok, text, strlen(text), skv_tok_add_bos(m->tok), &ctx);
    const char *qs = "Question: how many boxes does Alice have? Answer:";
    const int nq = skv_eval_tokenize(m->tok, qs, strlen(qs), false, &q);
    assert_true(nc > 50 && nq > 3);
    int *map = malloc(sizeof(int) * m->cfg.n_layer * m->cfg.n_head);
    for (int i = 0; i < m->cfg.n_layer * m->cfg.n_head; i++) map[i] = i;
    smallkv_pair *pair = api_pair_borrow(m, m);
    assert_non_null(pair);
    skv_eval_ctx c = {.pair = pair, .map = map, .kv_f16 = true, .T_max = 256, .batch = 8};
    const char *specs[] = {"full", "h2o", "snapkv", "smallkv", "smallkv:slmb=0.5"};
    enum { NP = 5 };
    skv_eval_pol pol[NP];
    skv_gen_cell cells[NP];
    for (int i = 0; i < NP; i++) {
        assert_int_equal(skv_eval_pol_parse(specs[i], NULL, &pol[i]), 0);
        cells[i] = (skv_gen_cell){.pol = &pol[i], .budget = 0.3};
    }
    assert_int_equal(skv_eval_generate_cells(&c, cells, NP, ctx, nc, q, nq, 12, NULL, NULL), 0);
    /* with drafts (the model drafting for itself; smallkv with its own SLM), each cell alone:
     * the same texts, the verify passes counted; a compressed SLM cache cannot draft */
    int *q2 = NULL;
    const char *qs2 = " In the attic, Alice keeps";   /* a continuation, not an early stop token */
    const int nq2 = skv_eval_tokenize(m->tok, qs2, strlen(qs2), false, &q2);
    skv_gen_cell pc[NP - 1], dc[NP - 1];
    for (int i = 0; i < NP - 1; i++) pc[i] = dc[i] = (skv_gen_cell){.pol = &pol[i], .budget = 0.3};
    assert_int_equal(skv_eval_generate_cells(&c, pc, NP - 1, ctx, nc, q2, nq2, 16, NULL, NULL), 0);
    assert_int_equal(skv_eval_generate_draft(&c, dc, NP - 1, ctx, nc, q2, nq2, 16, NULL, NULL, 3), 0);
    for (int i = 0; i < NP - 1; i++) {
        print_message("%-18s '%s'; draft 3: '%s', %d passes, %d / %d accepted\n", specs[i], pc[i].out.text, dc[i].out.text,
                      dc[i].out.spec_passes, dc[i].out.spec_accepted, dc[i].out.spec_drafted);
        assert_int_equal(pc[i].out.n_gen, 16);
        assert_string_equal(dc[i].out.text, pc[i].out.text);
        assert_int_equal(dc[i].out.n_gen, pc[i].out.n_gen);
        assert_true(dc[i].out.spec_passes > 0 && dc[i].out.spec_passes < dc[i].out.n_gen);
        assert_true(dc[i].out.spec_accepted <= dc[i].out.spec_drafted);
        assert_true(dc[i].out.mem.hot_used == pc[i].out.mem.hot_used);
        free(dc[i].out.text);
        free(pc[i].out.text);
    }
    skv_gen_cell bad = {.pol = &pol[NP - 1], .budget = 0.3};
    assert_int_equal(skv_eval_generate_draft(&c, &bad, 1, ctx, nc, q2, nq2, 12, NULL, NULL, 3), -1);
    free(q2);
    assert_non_null(strstr(skv_last_error(), "compressed SLM cache"));
    assert_null(bad.out.text);
    c.batch = 1;
    for (int i = 0; i < NP; i++) {
        skv_gen_out one;
        assert_int_equal(skv_eval_generate(&c, &pol[i], 0.3, ctx, nc, q, nq, 12, NULL, NULL, &one), 0);
        print_message("%-18s together: '%s'  alone: '%s'\n", specs[i], cells[i].out.text, one.text);
        assert_string_equal(cells[i].out.text, one.text);
        assert_int_equal(cells[i].out.n_gen, one.n_gen);
        assert_true(cells[i].shared_prefill == (i < NP - 1));   /* a compressed SLM prefills itself */
        assert_true(cells[i].out.mem.hot_used == one.mem.hot_used);
        free(one.text);
        free(cells[i].out.text);
    }
    free(ctx); free(q); free(map);
    smallkv_pair_free(pair);
    skv_model_free(m);
}

static void test_resume(void **st) {
    (void)st;
    char bin[512], model[512], out[256], cmd[2048];
    test_bin_path(bin, sizeof bin, "smallkv");
    test_model_file(model, sizeof model, TEST_SMOL);
    if (access(bin, X_OK) || access(model, R_OK)) {
        print_message("needs %s and %s: skipping\n", bin, model);
        skip();
    }
    if (!test_data_file("wikitext2/wiki.test.raw")) TEST_SKIP_DATA("wikitext2");
    snprintf(out, sizeof out, "/tmp/skv_test_eval_resume_%d.json", (int)getpid());
    unlink(out);
    const char *common = "--tokens 40 --prefill 32 --corpora wikitext2 --budgets 0.5 --threads 1";
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --policies full,h2o -o %s 2>/dev/null", bin, model, common, out);
    assert_int_equal(count_new(cmd), 2);
    char *h2o = record_text(out, "h2o");
    assert_non_null(h2o);
    /* the default int8 prefill is named in the key and the settings (earlier records ran
     * the float GEMM and name nothing) */
    assert_non_null(strstr(h2o, "|gemm=int8\""));
    assert_non_null(strstr(h2o, "\"gemm\":\"int8\""));
    /* the same grid again: nothing to do */
    assert_int_equal(count_new(cmd), 0);
    /* a bigger grid: only the missing cell runs, the finished ones stay as they were */
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --policies full,h2o,streamingllm -o %s 2>/dev/null", bin, model,
             common, out);
    assert_int_equal(count_new(cmd), 1);
    char *again = record_text(out, "h2o");
    assert_non_null(again);
    assert_string_equal(h2o, again);
    free(h2o);
    free(again);
    skv_eval_store *s = skv_store_load(out);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 3);
    skv_store_free(s);
    /* the report of those records: the interval columns (one document: no KL interval) */
    char rep[300];
    snprintf(rep, sizeof rep, "%s.md", out);
    snprintf(cmd, sizeof cmd, "%s eval report %s -o %s 2>/dev/null", bin, out, rep);
    assert_int_equal(system(cmd), 0);
    size_t len = 0;
    char *md = skv_read_file(rep, &len);
    assert_non_null(md);
    assert_non_null(strstr(md, "| KL 95% CI |"));
    assert_non_null(strstr(md, "Intervals: 95 %"));
    assert_non_null(strstr(md, "; 2 records, machine time "));   /* each piece's cost */
    assert_non_null(strstr(md, "; 1 record, machine time "));
    assert_non_null(strstr(md, "| h2o | 0.5 | 1 |"));
    free(md);
    unlink(rep);
    /* drafts are for the generation tasks: fidelity refuses them as bad usage */
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s --slm %s %s --policies full --draft 2 -o %s 2>/dev/null", bin, model,
             model, common, out);
    const int st2 = system(cmd);
    assert_true(WIFEXITED(st2) && WEXITSTATUS(st2) == 2);
    /* --gemm float: the float GEMM's cells are other cells (keys without gemm=int8); a bad
     * value is bad usage */
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --policies full,h2o --gemm float -o %s 2>/dev/null", bin, model,
             common, out);
    assert_int_equal(count_new(cmd), 2);
    s = skv_store_load(out);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 5);
    int n_float = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records) {
        const char *k = cJSON_GetObjectItem(r, "key")->valuestring;
        const char *g = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "settings"), "gemm")->valuestring;
        n_float += !strstr(k, "gemm=int8");
        assert_string_equal(g, strstr(k, "gemm=int8") ? "int8" : "float");
    }
    assert_int_equal(n_float, 2);
    skv_store_free(s);
    /* a policy's own budgets: h2o@0.25/0.5 runs h2o at those two, the others at --budgets;
     * the cells already there (h2o and streamingllm at 0.5) are not run again */
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --policies h2o@0.25/0.5,streamingllm -o %s 2>/dev/null", bin,
             model, common, out);
    assert_int_equal(count_new(cmd), 1);
    s = skv_store_load(out);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 6);
    int n_quarter = 0;
    cJSON_ArrayForEach(r, s->records) {
        if (cJSON_GetObjectItem(r, "budget")->valuedouble != 0.25) continue;
        n_quarter++;
        assert_string_equal(cJSON_GetObjectItem(r, "policy")->valuestring, "h2o");
        assert_non_null(strstr(cJSON_GetObjectItem(r, "key")->valuestring, "|h2o|b=0.25|"));
    }
    assert_int_equal(n_quarter, 1);
    skv_store_free(s);
    const char *bad[] = {"h2o@", "h2o@0", "h2o@0.2/", "h2o@1.5", "h2o@0.2,x@"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --policies %s -o %s >/dev/null 2>&1", bin, model, common,
                 bad[i], out);
        const int sb = system(cmd);
        assert_true(WIFEXITED(sb) && WEXITSTATUS(sb) == 2);
    }
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm %s %s --gemm fp8 -o %s >/dev/null 2>&1", bin, model, common, out);
    const int st3 = system(cmd);
    assert_true(WIFEXITED(st3) && WEXITSTATUS(st3) == 2);
    snprintf(rep, sizeof rep, "%s-fidelity-", out);   /* the SVG next to it */
    snprintf(cmd, sizeof cmd, "rm -f %s*.svg", rep);
    assert_int_equal(system(cmd), 0);
    unlink(out);
}

/* ---- passkey: phrasings and variants ---- */

/* the original wording, as literals: phrasing 0 must keep producing exactly these tokens */
static const char *PK_OLD_INTRO =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n";
static const char *PK_OLD_QUESTION = "\n\nWhat is the pass key? The pass key is";

static void test_passkey_phrasings(void **st) {
    (void)st;
    char model[512];
    if (!test_model_path(model, sizeof model, TEST_SMOL)) TEST_SKIP_MISSING(model);
    size_t flen = 0;
    if (!test_data_file("pg-essays/addiction.txt")) TEST_SKIP_DATA("pg-essays");
    char *filler = skv_eval_corpus(test_data_dir(), "pg-essays", &flen);
    assert_non_null(filler);
    skv_model *m = skv_model_load_gguf(model);
    assert_non_null(m);
    const skv_tokenizer *t = m->tok;
    const int L = 300, D = 50, key = skv_passkey_key(L, D, 1);
    char digits[16], old_needle[96];
    snprintf(digits, sizeof digits, "%d", key);
    snprintf(old_needle, sizeof old_needle, " The pass key is %d. Remember it. ", key);

    /* phrasing 0 = intro, filler up to a sentence end, the old needle, the rest of the filler */
    int *ctx = NULL, *q = NULL, nc = 0, nq = 0;
    assert_int_equal(skv_passkey_build(t, filler, flen, L, D, key, 0, &ctx, &nc, &q, &nq), 0);
    int *intro = NULL, *nd = NULL, *oq = NULL, *fill = NULL;
    const int ni = skv_eval_tokenize(t, PK_OLD_INTRO, strlen(PK_OLD_INTRO), skv_tok_add_bos(t), &intro);
    const int nn = skv_eval_tokenize(t, old_needle, strlen(old_needle), false, &nd);
    const int noq = skv_eval_tokenize(t, PK_OLD_QUESTION, strlen(PK_OLD_QUESTION), false, &oq);
    size_t use = (size_t)L * 8 + 4096;
    const int nf = skv_eval_tokenize(t, filler, use < flen ? use : flen, false, &fill);
    const int want = L - ni - nn;
    assert_true(ni > 0 && nn > 0 && noq > 0 && want > 0 && nf >= want);
    assert_int_equal(nc, L);
    assert_int_equal(nq, noq);
    assert_memory_equal(q, oq, (size_t)nq * sizeof(int));
    assert_memory_equal(ctx, intro, (size_t)ni * sizeof(int));
    int at = -1;
    for (int i = ni; i + nn <= nc && at < 0; i++)
        if (!memcmp(ctx + i, nd, (size_t)nn * sizeof(int))) at = i - ni;
    assert_true(at >= want * D / 100 && at < want);          /* at or after the depth */
    assert_memory_equal(ctx + ni, fill, (size_t)at * sizeof(int));
    assert_memory_equal(ctx + ni + at + nn, fill + at, (size_t)(want - at) * sizeof(int));
    free(ctx); free(q); free(intro); free(nd); free(oq); free(fill);

    /* every phrasing: the key's digits in the context, a question of its own */
    char *qtext[SKV_PASSKEY_PHRASINGS];
    for (int ph = 0; ph < SKV_PASSKEY_PHRASINGS; ph++) {
        assert_int_equal(skv_passkey_build(t, filler, flen, L, D, key, ph, &ctx, &nc, &q, &nq), 0);
        assert_int_equal(nc, L);
        assert_true(nq > 3);
        char *text = skv_detokenize(t, ctx, nc);
        assert_non_null(text);
        assert_non_null(strstr(text, digits));
        qtext[ph] = skv_detokenize(t, q, nq);
        assert_non_null(qtext[ph]);
        assert_null(strstr(qtext[ph], digits));
        for (int o = 0; o < ph; o++) assert_string_not_equal(qtext[ph], qtext[o]);
        print_message("phrasing %d: question '%s'\n", ph, qtext[ph] + 2);
        free(text); free(ctx); free(q);
    }
    assert_string_equal(qtext[0], PK_OLD_QUESTION);
    for (int ph = 0; ph < SKV_PASSKEY_PHRASINGS; ph++) free(qtext[ph]);

    /* out of range: refused, nothing returned */
    const int bad[] = {-1, SKV_PASSKEY_PHRASINGS, 100};
    for (int i = 0; i < 3; i++) {
        ctx = NULL; q = NULL;
        assert_int_equal(skv_passkey_build(t, filler, flen, L, D, key, bad[i], &ctx, &nc, &q, &nq), -1);
        assert_null(ctx);
        assert_null(q);
        assert_non_null(strstr(skv_last_error(), "phrasing"));
    }
    skv_model_free(m);
    free(filler);
}

/* records of a passkey results file: per (length, depth) cell, the units and their golds */
static void test_passkey_variants(void **st) {
    (void)st;
    char bin[512], model[512], out[256], cmd[2048];
    test_bin_path(bin, sizeof bin, "smallkv");
    test_model_file(model, sizeof model, TEST_SMOL);
    if (access(bin, X_OK) || access(model, R_OK)) {
        print_message("needs %s and %s: skipping\n", bin, model);
        skip();
    }
    if (!test_data_file("pg-essays/addiction.txt")) TEST_SKIP_DATA("pg-essays");
    snprintf(out, sizeof out, "/tmp/skv_test_eval_passkey_%d.json", (int)getpid());
    unlink(out);
    const char *common = "--lengths 256 --depths 0,50 --policies full --threads 1";
    /* out of range: a usage error */
    const int bad[] = {0, 9};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s eval passkey --llm %s %s --variants %d -o %s >/dev/null 2>&1", bin, model, common, bad[i], out);
        int rc = system(cmd);
        assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    }
    snprintf(cmd, sizeof cmd, "%s eval passkey --llm %s %s --variants 2 -o %s 2>/dev/null", bin, model, common, out);
    assert_int_equal(count_new(cmd), 4);   /* 2 cells x 2 variants */
    assert_int_equal(count_new(cmd), 0);   /* rerun: resumes, nothing new */
    skv_eval_store *s = skv_store_load(out);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 4);
    const int depths[2] = {0, 50};
    for (int d = 0; d < 2; d++) {
        char k0[64], k1[64], g[2][16] = {"", ""};
        snprintf(k0, sizeof k0, "passkey|len=256,depth=%d|", depths[d]);   /* variant 0: the old name */
        snprintf(k1, sizeof k1, "passkey|len=256,depth=%d,v=1|", depths[d]);
        int n = 0;
        const cJSON *r;
        cJSON_ArrayForEach(r, s->records) {
            const char *key = cJSON_GetObjectItem(r, "key")->valuestring;
            const cJSON *u = cJSON_GetObjectItem(r, "unit");
            if ((int)cJSON_GetObjectItem(u, "depth")->valuedouble != depths[d]) continue;
            const int v = strncmp(key, k0, strlen(k0)) ? 1 : 0;
            if (v) assert_true(!strncmp(key, k1, strlen(k1)));
            const cJSON *var = cJSON_GetObjectItem(u, "variant");
            if (v) assert_int_equal((int)var->valuedouble, 1);
            else assert_null(var);                       /* variant 0's unit as before */
            snprintf(g[v], sizeof g[v], "%s", cJSON_GetObjectItem(cJSON_GetObjectItem(r, "metrics"), "gold")->valuestring);
            n++;
        }
        assert_int_equal(n, 2);
        assert_true(strlen(g[0]) == 5 && strlen(g[1]) == 5);
        assert_string_not_equal(g[0], g[1]);             /* a key per variant */
        char want[16];
        snprintf(want, sizeof want, "%d", skv_passkey_key(256, depths[d], 1));
        assert_string_equal(g[0], want);                 /* variant 0: the old key */
    }
    skv_store_free(s);
    /* more variants later: only the new ones run */
    snprintf(cmd, sizeof cmd, "%s eval passkey --llm %s %s --variants 3 -o %s 2>/dev/null", bin, model, common, out);
    assert_int_equal(count_new(cmd), 2);
    /* the report: a cell counts all its variants; the heatmap shows found / units */
    char rep[300], svg[320];
    snprintf(rep, sizeof rep, "%s.md", out);
    snprintf(svg, sizeof svg, "%s-passkey.svg", out);
    snprintf(cmd, sizeof cmd, "%s eval report %s -o %s 2>/dev/null", bin, out, rep);
    assert_int_equal(system(cmd), 0);
    size_t len = 0;
    char *md = skv_read_file(rep, &len);
    assert_non_null(md);
    assert_non_null(strstr(md, "| full | 1 | 6 |"));
    free(md);
    char *sv = skv_read_file(svg, &len);
    assert_non_null(sv);
    assert_non_null(strstr(sv, "/3</text>"));
    free(sv);
    unlink(svg);
    unlink(rep);
    unlink(out);
}

/* ---- depth: SmallKV at several SLM depths, the choice written into a profile ---- */

static void test_depth_task(void **st) {
    (void)st;
    char bin[512], model[512], out[256], prof[256], cmd[4096];
    test_bin_path(bin, sizeof bin, "smallkv");
    test_model_file(model, sizeof model, TEST_SMOL);
    if (access(bin, X_OK) || access(model, R_OK)) {
        print_message("needs %s and %s: skipping\n", bin, model);
        skip();
    }
    if (!test_data_file("wikitext2/wiki.test.raw")) TEST_SKIP_DATA("wikitext2");
    snprintf(out, sizeof out, "/tmp/skv_test_eval_depth_%d.json", (int)getpid());
    snprintf(prof, sizeof prof, "/tmp/skv_test_eval_depth_%d.skvprof", (int)getpid());
    unlink(out);
    unlink(prof);
    const char *given = "profiles/smollm2-135m-self.skvprof";
    /* without --profile: a usage error */
    snprintf(cmd, sizeof cmd, "%s eval depth --llm %s --slm %s -o %s >/dev/null 2>&1", bin, model, model, out);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof cmd, "%s eval depth --llm %s --slm %s --profile %s --tokens 48 --prefill 32 --corpora wikitext2 "
             "--slm-depths 10,20 --threads 1 -o %s --write-profile %s 2>/dev/null", bin, model, model, given, out, prof);
    assert_int_equal(count_new(cmd), 3);     /* depths 10, 20 and all 30 layers */
    skv_profile *p = skv_profile_load(prof);
    if (!p) fail_msg("%s", skv_last_error());
    const skv_profile_depth_evidence *e = &p->depth_ev;
    assert_int_equal(e->n, 3);
    assert_int_equal(e->rows[0].depth, 10);
    assert_int_equal(e->rows[1].depth, 20);
    assert_int_equal(e->rows[2].depth, 30);
    assert_true(e->budget == 0.2 && e->tokens == 48 && e->prefill == 32 && e->units == 1);
    /* the rule: the first row within (1 + 0.05) of the deepest's KL */
    int want = 30;
    for (int i = 0; i < 3; i++)
        if (e->rows[i].kl_mean <= e->rows[2].kl_mean * 1.05) { want = e->rows[i].depth; break; }
    assert_int_equal(e->chosen, want);
    assert_int_equal(p->depth, want);
    for (int i = 0; i < 3; i++) {
        assert_true(e->rows[i].slm_ms > 0);                    /* timed cell by cell */
        assert_true(e->rows[i].top1 >= 0 && e->rows[i].top1 <= 1);
    }
    assert_true(e->rows[0].slm_ms < e->rows[2].slm_ms);        /* a third of the layers costs less */
    for (int i = 0; i < p->n_llm; i++) assert_true(p->map[i] < p->depth * p->slm.n_head);
    skv_profile_free(p);
    unlink(out);
    unlink(prof);
}

/* the memory fields a record stores (add_mem in runtime/cli/eval.c): equal, timings aside */
static void assert_mem_equal(const skv_session_mem *a, const skv_session_mem *b) {
    assert_int_equal(a->hot_used, b->hot_used);
    assert_int_equal(a->hot_meta, b->hot_meta);
    assert_int_equal(a->cold_used, b->cold_used);
    assert_int_equal(a->slm_cache, b->slm_cache);
    assert_int_equal(a->slm_weights, b->slm_weights);
    assert_int_equal(a->slm_scores, b->slm_scores);
    assert_int_equal(a->full_equiv, b->full_equiv);
    assert_int_equal(a->pass_peak, b->pass_peak);
    assert_true(a->hot_tokens == b->hot_tokens && a->budget_tokens == b->budget_tokens);
}

/* An eval cell (built through the API over a borrowed pair: api_session_cell, or derived from
 * the shared prefill: api_session_derive) and a plain smallkv_session_new session of the same
 * policy, budget and pair are the same session: the same logits, bit for bit, after the
 * prefill and every step (one by one and batched), and the same memory report, because all
 * take their options from skv_session_opts_for with the profile's map and depth. */
static void test_cells_match_api(void **st) {
    (void)st;
    char model[512];
    if (!test_model_path(model, sizeof model, TEST_SMOL)) TEST_SKIP_MODEL(TEST_SMOL);
    smallkv_pair *p = smallkv_pair_load(model, model);
    assert_non_null(p);
    assert_int_equal(smallkv_pair_load_profile(p, "profiles/smollm2-135m-self.skvprof"), 0);
    smallkv_pair *borrowed = api_pair_borrow(p->llm, p->slm);   /* as `smallkv eval` holds its models */
    assert_non_null(borrowed);
    skv_eval_ctx c = {.pair = borrowed, .map = p->map, .map_depth = p->prof->depth, .kv_f16 = true, .T_max = 256};
    const int V = smallkv_vocab(p), P = 80, N = 96;
    int toks[96];
    test_prompt(toks, N, V, 7);
    const char *specs[] = {"full", "h2o", "quest", "smallkv", "smallkv:score=acc", "smallkv:slmb=0.5", "snapkv",
                           "snapkv:decode=evict", "smallkv:online", "kvzip", "kvzip:level=lane"};
    enum { NS = sizeof specs / sizeof specs[0] };
    skv_eval_pol pol[NS];
    const skv_eval_pol *pl[NS];
    for (int k = 0; k < NS; k++) {
        assert_int_equal(skv_eval_pol_parse(specs[k], NULL, &pol[k]), 0);
        pl[k] = &pol[k];
    }
    /* every cell three ways: plain API (a), an eval cell prefilled by itself (e), derived (d) */
    smallkv_session *a[NS], *e[NS], *d[NS];
    smallkv_session *base = skv_eval_base(&c, pl, NS, 128);
    assert_non_null(base);
    assert_int_equal(smallkv_prefill(base, toks, P), 0);
    int n_derived = 0;
    for (int k = 0; k < NS; k++) {
        smallkv_options o;
        smallkv_options_default(&o);
        o.policy = specs[k];
        o.budget = 0.2;
        o.max_ctx = 128;
        a[k] = smallkv_session_new(p, &o);
        if (!a[k]) print_message("%s: %s\n", specs[k], smallkv_last_error());
        assert_non_null(a[k]);
        e[k] = skv_eval_session(&c, &pol[k], 0.2, 128, 0);
        assert_non_null(e[k]);
        assert_int_equal(smallkv_prefill(a[k], toks, P), 0);
        assert_int_equal(smallkv_prefill(e[k], toks, P), 0);
        bool derived;
        d[k] = skv_eval_cell_session(&c, &pol[k], 0.2, 128, base, toks, P, &derived);
        assert_non_null(d[k]);
        n_derived += derived;
        assert_true(derived == (strcmp(specs[k], "smallkv:slmb=0.5") != 0));   /* a compressed SLM prefills itself */
    }
    smallkv_session_free(base);   /* as the runner does: derived cells hold what they need */
    assert_true(n_derived == NS - 1);
    for (int i = P; i <= N; i++) {
        for (int k = 0; k < NS; k++) {
            assert_memory_equal(smallkv_logits(a[k]), smallkv_logits(e[k]), sizeof(float) * (size_t)V);
            assert_memory_equal(smallkv_logits(a[k]), smallkv_logits(d[k]), sizeof(float) * (size_t)V);
        }
        if (i == N) break;
        int tk[NS];
        for (int k = 0; k < NS; k++) {
            tk[k] = toks[i];
            assert_int_equal(smallkv_step(a[k], toks[i]), 0);
        }
        /* the eval's lock step: one cell alone, the others batched */
        assert_int_equal(smallkv_step_batch(e, tk, NS), 0);
        assert_int_equal(smallkv_step_batch(d, tk, NS), 0);
    }
    for (int k = 0; k < NS; k++) {
        skv_session_mem ma, me, md;
        api_session_mem(a[k], &ma);
        api_session_mem(e[k], &me);
        api_session_mem(d[k], &md);
        assert_mem_equal(&ma, &me);
        assert_mem_equal(&ma, &md);
        smallkv_stats sa, sd;
        smallkv_get_stats(a[k], &sa);
        smallkv_get_stats(d[k], &sd);
        assert_int_equal(sa.restores, sd.restores);
        assert_int_equal(sd.length, N);
        /* SmallKV's head map (matched online for smallkv:online): the same */
        const int *om = api_session_head_map(d[k]), *oa = api_session_head_map(a[k]);
        assert_true((om != NULL) == (oa != NULL));
        if (om) assert_memory_equal(om, oa, sizeof(int) * (size_t)p->llm->cfg.n_layer * p->llm->cfg.n_head);
        smallkv_session_free(a[k]);
        smallkv_session_free(e[k]);
        smallkv_session_free(d[k]);
    }
    smallkv_pair_free(borrowed);
    smallkv_pair_free(p);
}

/* --device cuda where this build or machine has no GPU: a clear error, not a crash, from the
 * runner (the cell's session) and from `smallkv eval` (before any model loads; an unknown
 * device is a usage error). */
static void test_device_unavailable(void **st) {
    (void)st;
    if (api_device("cuda")) {
        print_message("this build and machine run CUDA: skipping\n");
        skip();
    }
    char why[256];
    snprintf(why, sizeof why, "%s", skv_last_error());
    print_message("device cuda: %s\n", why);
    assert_non_null(strstr(why, "device cuda"));
    skv_model *m = tiny_model_load(SKV_ARCH_LLAMA, 42, "eval_dev");
    assert_non_null(m);
    smallkv_pair *pair = api_pair_borrow(m, NULL);
    skv_eval_ctx c = {.pair = pair, .device = "cuda", .kv_f16 = true, .T_max = 32};
    skv_eval_pol full;
    assert_int_equal(skv_eval_pol_parse("full", NULL, &full), 0);
    assert_null(skv_eval_session(&c, &full, 1.0, 64, 0));
    assert_non_null(strstr(skv_last_error(), why));
    int toks[40];
    test_prompt(toks, 40, m->cfg.vocab, 3);
    skv_fid_cell cell = {.pol = &full, .budget = 1};
    assert_int_equal(skv_eval_fidelity(&c, toks, 40, 32, &cell, 1, NULL, NULL, NULL), -1);
    assert_non_null(strstr(skv_last_error(), why));
    skv_fid_free(&cell.acc);
    smallkv_pair_free(pair);
    skv_model_free(m);
    /* the command: exit 1 and the reason on stderr, no results file; --device gpu: usage (2) */
    char bin[512], out[256], err[256], cmd[2048];
    test_bin_path(bin, sizeof bin, "smallkv");
    if (access(bin, X_OK)) { print_message("needs %s: skipping the command\n", bin); return; }
    snprintf(out, sizeof out, "/tmp/skv_test_eval_dev_%d.json", (int)getpid());
    snprintf(err, sizeof err, "/tmp/skv_test_eval_dev_%d.err", (int)getpid());
    unlink(out);
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm /nonexistent.gguf --policies full --device cuda -o %s 2>%s", bin, out, err);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    size_t len;
    char *msg = skv_read_file(err, &len);
    assert_non_null(msg);
    print_message("smallkv eval --device cuda: %s", msg);
    assert_non_null(strstr(msg, "device cuda"));
    assert_non_null(strstr(msg, why));
    free(msg);
    assert_int_not_equal(access(out, F_OK), 0);
    snprintf(cmd, sizeof cmd, "%s eval fidelity --llm /nonexistent.gguf --device gpu -o %s >/dev/null 2>&1", bin, out);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    unlink(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kl_math),
        cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_corpora),
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_fewshot_turns),
        cmocka_unit_test(test_report_protocols),
        cmocka_unit_test(test_store),
        cmocka_unit_test(test_policy_specs),
        cmocka_unit_test(test_fidelity_tiny),
        cmocka_unit_test(test_generate_cells),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_passkey_phrasings),
        cmocka_unit_test(test_passkey_variants),
        cmocka_unit_test(test_depth_task),
        cmocka_unit_test(test_cells_match_api),
        cmocka_unit_test(test_device_unavailable),
    };
    if (getenv("SKV_TEST_FILTER")) cmocka_set_test_filter(getenv("SKV_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
