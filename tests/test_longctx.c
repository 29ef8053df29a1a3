/* test_longctx.c: the long-context evaluation tasks (eval/longctx.c, eval/metrics.c,
 * runtime/cli/eval.c; docs/lab/long-context-tasks.md):
 *   - niah prompts (SmolLM2's tokenizer, pg-essays): exactly the requested length, every
 *     needle's tokens at its depth (just after the first sentence end at or after it), the
 *     template's question and key, distinct keys / values, the same unit for the same seed and
 *     another for another seed, wrapped (chat) prompts, bad arguments refused;
 *   - scoring: needle recall (single, multivalue fractions) and the generation stop rule;
 *   - LongBench: pred.py's middle truncation on token arrays, str.format rules, the multi_news
 *     records and template, a truncated prompt's length and ends;
 *   - ROUGE-L against the Python `rouge` package (1.0.1, what LongBench's metrics.py calls);
 *   - the CLI: niah, longbench and bbh --pad-to units and keys (unpadded keys unchanged),
 *     usage errors (exit 2);
 *   - MPI: `mpirun -n 2 smallkv-mpi eval` merges into the records of a one-process run, in
 *     its order; a rerun with 3 ranks resumes from the results file and a stray shard file
 *     (skipped without `make MPI=1` or mpirun). */
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
#include "eval/data.h"
#include "eval/longctx.h"
#include "eval/metrics.h"
#include "eval/store.h"
#include "runtime/model/model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include "tests/support/test_env.h"

/* ---- niah prompts ---- */

static skv_model *g_model;        /* SmolLM2, for its tokenizer */
static int *g_fill, g_nfill;      /* pg-essays tokens */

static int group_setup(void **st) {
    test_tmpdir_setup(st);
    char model[512];
    if (test_model_path(model, sizeof model, TEST_SMOL) && test_data_file("pg-essays/addiction.txt")) {
        g_model = skv_model_load_gguf(model);
        size_t len = 0;
        char *text = skv_eval_corpus(test_data_dir(), "pg-essays", &len);
        if (g_model && text) g_nfill = skv_eval_tokenize(g_model->tok, text, len < 200000 ? len : 200000, false, &g_fill);
        free(text);
    }
    return 0;
}

static int group_teardown(void **st) {
    skv_model_free(g_model);
    free(g_fill);
    return test_tmpdir_teardown(st);
}

#define NEED_MODEL() do { if (!g_model || g_nfill < 8000) { print_message("needs %s and pg-essays: skipping\n", TEST_SMOL); skip(); } } while (0)

static bool sentence_end_tok(const skv_tokenizer *t, int id) {
    size_t l;
    const char *b = skv_token_bytes(t, id, &l);
    return b && l && (memchr(b, '.', l) || memchr(b, '!', l) || memchr(b, '?', l));
}

static void check_unit(const skv_niah_unit *u, int length, const skv_niah_wrap *w) {
    const skv_tokenizer *t = g_model->tok;
    assert_int_equal(u->n_prompt, length);                       /* exactly the target */
    if (w && w->n_pre) assert_memory_equal(u->prompt, w->pre, (size_t)w->n_pre * sizeof(int));
    char *text = skv_detokenize(t, u->prompt, u->n_prompt);
    assert_non_null(text);
    const int W = u->n_filler;
    int used = 0;
    for (int i = 0; i < u->n_needles; i++) {
        /* the needle's own tokens at its position */
        char nd[160];
        snprintf(nd, sizeof nd, " One of the special magic numbers for %s is: %s.", u->keys[i], u->values[i]);
        int *ids = NULL;
        const int n = skv_eval_tokenize(t, nd, strlen(nd), false, &ids);
        assert_int_equal(n, u->len[i]);
        assert_memory_equal(u->prompt + u->pos[i], ids, (size_t)n * sizeof(int));
        free(ids);
        assert_non_null(strstr(text, nd + 1));
        /* depth: at the requested fraction of the filler, moved on to a sentence end (within
         * 160 tokens: the longest sentence the essays have near the points is far shorter) */
        const int want = (int)((long)W * u->depth_pct[i] / 100), got = u->filler_before[i];
        assert_true(got >= want && got <= want + 160);
        assert_true(got == 0 || got == W || sentence_end_tok(t, g_fill[got - 1]));
        /* the filler before the needle is the essays' prose, in order */
        assert_true(u->pos[i] >= u->body_start + got);
        used += u->len[i];
    }
    assert_true(u->body_start + u->n_filler + used <= length);
    /* the question asks for the first needle's key; keys / values as the kind has them */
    assert_string_equal(u->query, u->keys[0]);
    assert_non_null(strstr(text, u->n_gold > 1 ? "What are all the special magic numbers for " : "What is the special magic number for "));
    char q[128];
    snprintf(q, sizeof q, "for %s mentioned in the provided text %s", u->query, u->n_gold > 1 ? "are" : "is");
    const size_t tl = strlen(text), ql = strlen(q);
    if (!w || !w->n_mid) { assert_true(tl > ql); assert_string_equal(text + tl - ql, q); }   /* ends with the answer prefix */
    for (int i = 0; i < u->n_needles; i++) {
        assert_int_equal((int)strlen(u->values[i]), SKV_NIAH_VALUE_DIGITS);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(u->values[i], u->values[j]);
            if (u->kind == SKV_NIAH_MULTIKEY) assert_string_not_equal(u->keys[i], u->keys[j]);
            if (u->kind == SKV_NIAH_MULTIVALUE) assert_string_equal(u->keys[i], u->keys[j]);
        }
    }
    free(text);
}

static void test_niah_build(void **st) {
    (void)st;
    NEED_MODEL();
    const skv_tokenizer *t = g_model->tok;
    int bos = skv_tok_bos(t);
    const skv_niah_wrap plain = {.pre = &bos, .n_pre = skv_tok_add_bos(t) ? 1 : 0};
    const int lengths[] = {1024, 3000}, depths[] = {0, 10, 35, 50, 90, 100};
    for (int k = 0; k < SKV_NIAH_KINDS; k++)
        for (int li = 0; li < 2; li++)
            for (int di = 0; di < 6; di++) {
                skv_niah_unit u, v;
                const unsigned seed = skv_niah_seed((skv_niah_kind)k, lengths[li], depths[di], 0);
                if (skv_niah_build(t, g_fill, g_nfill, &plain, (skv_niah_kind)k, lengths[li], depths[di], 4, seed, &u))
                    fail_msg("%s", skv_last_error());
                assert_int_equal(u.n_needles, k == SKV_NIAH_SINGLE ? 1 : 4);
                assert_int_equal(u.n_gold, k == SKV_NIAH_MULTIVALUE ? 4 : 1);
                assert_int_equal(u.depth_pct[0], depths[di]);
                check_unit(&u, lengths[li], &plain);
                /* deterministic: the same unit again */
                assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &plain, (skv_niah_kind)k, lengths[li], depths[di], 4, seed, &v), 0);
                assert_int_equal(v.n_prompt, u.n_prompt);
                assert_memory_equal(v.prompt, u.prompt, (size_t)u.n_prompt * sizeof(int));
                skv_niah_free(&v);
                /* another seed (variant): other values */
                assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &plain, (skv_niah_kind)k, lengths[li], depths[di], 4,
                                                skv_niah_seed((skv_niah_kind)k, lengths[li], depths[di], 1), &v), 0);
                assert_string_not_equal(v.values[0], u.values[0]);
                skv_niah_free(&v);
                skv_niah_free(&u);
            }
    /* a chat-like wrap: its head first, its middle before the answer prefix, length exact */
    int pre[3] = {bos >= 0 ? bos : 1, 5, 6}, mid[4] = {7, 8, 9, 10};
    const skv_niah_wrap chat = {.pre = pre, .n_pre = 3, .mid = mid, .n_mid = 4};
    skv_niah_unit u;
    assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &chat, SKV_NIAH_MULTIKEY, 2048, 50, 3, 7, &u), 0);
    check_unit(&u, 2048, &chat);
    int *ans = NULL;
    const char *a = "The special magic number";
    const int na = skv_eval_tokenize(t, a, strlen(a), false, &ans);
    int at = -1;
    for (int i = 0; i + 4 <= u.n_prompt && at < 0; i++) if (!memcmp(u.prompt + i, mid, sizeof mid)) at = i;
    assert_true(at > u.pos[0]);
    assert_memory_equal(u.prompt + at + 4, ans, (size_t)na * sizeof(int));   /* no leading space in the answer turn */
    free(ans);
    skv_niah_free(&u);
    /* refused: too short, too many needles, filler too short, depth out of range */
    assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &plain, SKV_NIAH_MULTIVALUE, 90, 50, 4, 1, &u), -1);
    assert_non_null(strstr(skv_last_error(), "too few"));
    assert_null(u.prompt);
    assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &plain, SKV_NIAH_MULTIKEY, 1024, 50, 9, 1, &u), -1);
    assert_int_equal(skv_niah_build(t, g_fill, 500, &plain, SKV_NIAH_SINGLE, 1024, 50, 1, 1, &u), -1);
    assert_non_null(strstr(skv_last_error(), "filler"));
    assert_int_equal(skv_niah_build(t, g_fill, g_nfill, &plain, SKV_NIAH_SINGLE, 1024, 101, 1, 1, &u), -1);
    assert_int_equal(skv_niah_kind_parse("multivalue"), SKV_NIAH_MULTIVALUE);
    assert_int_equal(skv_niah_kind_parse("multi"), -1);
}

/* ---- scoring ---- */

static void test_niah_scoring(void **st) {
    (void)st;
    const char *one[] = {"4821937"}, *four[] = {"1111111", "2222222", "3333333", "4444444"};
    assert_true(skv_recall_values(" 4821937.", one, 1) == 1);
    assert_true(skv_recall_values(" 482193", one, 1) == 0);
    assert_true(skv_recall_values("x", one, 0) == 0);
    assert_true(skv_recall_values("2222222, 4444444 and 1234567", four, 4) == 0.5);
    assert_true(skv_recall_values("4444444 3333333 2222222 1111111", four, 4) == 1);
    assert_true(fabs(skv_recall_values("1111111", four, 4) - 0.25) < 1e-12);
    const char *word[] = {"Blue-Apple"};
    assert_true(skv_recall_values("it is blue-apple", word, 1) == 1);   /* case-insensitive, as RULER */
    int want = 1;
    assert_false(skv_niah_stop(" 48219", &want));
    assert_false(skv_niah_stop(" 4821937", &want));        /* the number may go on */
    assert_true(skv_niah_stop(" 4821937.", &want));
    want = 3;
    assert_false(skv_niah_stop(": 1111111, 2222222,", &want));
    assert_true(skv_niah_stop(": 1111111, 2222222, 3333333.", &want));
    assert_true(skv_niah_stop(": 1111111.\n\nNext", &want));   /* a blank line after an answer */
    assert_false(skv_niah_stop("\n\nThe numbers", &want));     /* ... not before one */
}

/* ---- LongBench ---- */

static void test_truncate_middle(void **st) {
    (void)st;
    int ids[10], out[10];
    for (int i = 0; i < 10; i++) ids[i] = 100 + i;
    assert_int_equal(skv_truncate_middle(ids, 10, 10, out), 10);   /* fits: unchanged */
    assert_memory_equal(out, ids, sizeof ids);
    assert_int_equal(skv_truncate_middle(ids, 10, 64, out), 10);
    assert_int_equal(skv_truncate_middle(ids, 10, 6, out), 6);     /* [:3] + [-3:] */
    const int want6[] = {100, 101, 102, 107, 108, 109};
    assert_memory_equal(out, want6, sizeof want6);
    assert_int_equal(skv_truncate_middle(ids, 10, 7, out), 6);     /* half = int(7 / 2) = 3 */
    assert_memory_equal(out, want6, sizeof want6);
    assert_int_equal(skv_truncate_middle(ids, 10, 2, out), 2);
    assert_int_equal(out[0], 100);
    assert_int_equal(out[1], 109);
    memcpy(out, ids, sizeof ids);                                  /* in place */
    assert_int_equal(skv_truncate_middle(out, 10, 4, out), 4);
    const int want4[] = {100, 101, 108, 109};
    assert_memory_equal(out, want4, sizeof want4);
}

static void test_longbench_prompt(void **st) {
    (void)st;
    cJSON *rec = cJSON_Parse("{\"context\": \"C{x}\", \"input\": \"Q\", \"length\": 3}");
    char *s = skv_format_fields("a {context} b {{lit}} {input}}}", rec);
    assert_non_null(s);
    assert_string_equal(s, "a C{x} b {lit} Q}");
    free(s);
    assert_null(skv_format_fields("{missing}", rec));
    assert_non_null(strstr(skv_last_error(), "missing"));
    assert_null(skv_format_fields("{length}", rec));   /* not a string */
    assert_null(skv_format_fields("a } b", rec));
    assert_null(skv_format_fields("a {context", rec));
    cJSON_Delete(rec);
    if (!test_data_file("longbench/multi_news.jsonl")) TEST_SKIP_DATA("longbench");
    char *tmpl = NULL;
    int max_gen = 0;
    cJSON *recs = skv_longbench_load(test_data_dir(), "multi_news", &tmpl, &max_gen);
    if (!recs) fail_msg("%s", skv_last_error());
    assert_int_equal(cJSON_GetArraySize(recs), 200);
    assert_int_equal(max_gen, 512);
    assert_non_null(strstr(tmpl, "{context}"));
    char *prompt = skv_format_fields(tmpl, cJSON_GetArrayItem(recs, 0));
    assert_non_null(prompt);
    assert_true(!strncmp(prompt, "You are given several news passages.", 36));
    char *t2 = NULL;
    assert_null(skv_longbench_load(test_data_dir(), "no_such_subset", &t2, &max_gen));   /* no template */
    assert_null(t2);
    if (g_model) {
        int n_full = 0;
        char *cut = skv_longbench_truncate(g_model->tok, prompt, 1000, &n_full);
        assert_non_null(cut);
        assert_true(n_full > 1000);
        int *ids = NULL;
        const int n = skv_eval_tokenize(g_model->tok, cut, strlen(cut), skv_tok_add_bos(g_model->tok), &ids);
        print_message("multi_news #0: %d tokens, truncated to %d (re-encoded)\n", n_full, n);
        assert_true(n >= 990 && n <= 1010);   /* decode + encode may join a few tokens at the seam */
        assert_true(!strncmp(cut, "You are given several news passages.", 36));
        const char *end = "Now, write a one-page summary of all the news.\n\nSummary:";
        assert_string_equal(cut + strlen(cut) - strlen(end), end);
        free(ids); free(cut);
        cut = skv_longbench_truncate(g_model->tok, prompt, 1 << 20, &n_full);   /* fits: the prompt itself */
        assert_string_equal(cut, prompt);
        free(cut);
    }
    free(prompt);
    free(tmpl);
    cJSON_Delete(recs);
}

/* ---- ROUGE-L ----
 * Reference values from the Python package LongBench's metrics.py uses:
 *   pip install rouge==1.0.1; Rouge().get_scores([hyp], [ref], avg=True)["rouge-l"]
 * (f, p, r printed with %.10f; "raises" where get_scores raises, which rouge_score turns
 * into 0). */
static void test_rouge_l(void **st) {
    (void)st;
    static const struct { const char *hyp, *ref; double f, p, r; } C[] = {
        {"the cat sat on the mat", "the cat was on the mat", 0.7999999950, 0.8000000000, 0.8000000000},
        {"The cat sat. The dog ran away. It was fast.", "A dog ran. The cat sat on the mat.", 0.5555555506, 0.5555555556, 0.5555555556},
        {"Hello world. . bye", "hello world bye.", 0.5714285665, 0.5000000000, 0.6666666667},
        {"police said the suspect fled. the suspect was arrested on monday",
         "The suspect fled the scene, police said. He was arrested Monday.", 0.4999999951, 0.5555555556, 0.4545454545},
        {"caf\xc3\xa9\xc2\xa0" "au lait\tis  hot.\nyes", "yes. caf\xc3\xa9 au lait is hot", 0.9999999950, 1.0, 1.0},
        {"a a a b", "a b b b", 0.9999999950, 1.0, 1.0},   /* the package counts distinct words */
        {"same text here.", "same text here.", 0.9999999950, 1.0, 1.0},
        {"", "anything", 0, 0, 0},                        /* raises: "Hypothesis is empty." */
        {"...", "anything", 0, 0, 0},                     /* raises */
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        double f, p, r;
        assert_int_equal(skv_rouge_l(C[i].hyp, C[i].ref, &f, &p, &r), 0);
        if (fabs(f - C[i].f) > 1e-9 || fabs(p - C[i].p) > 1e-9 || fabs(r - C[i].r) > 1e-9)
            fail_msg("case %zu: f %.10f p %.10f r %.10f, want %.10f %.10f %.10f", i, f, p, r, C[i].f, C[i].p, C[i].r);
    }
    assert_int_equal(skv_rouge_l("x", "x", NULL, NULL, NULL), 0);
}

/* ---- the CLI ---- */

static int run_cmd(const char *cmd) {
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char g_bin[512], g_mpibin[512], g_smol[512], g_data[512];

/* the absolute path of in (which must exist) into out */
static bool abs_path(const char *in, char *out, size_t n) {
    char *r = realpath(in, NULL);
    out[0] = 0;
    if (r && strlen(r) < n) snprintf(out, n, "%s", r);
    free(r);
    return out[0] != 0;
}

static bool cli_ready(void) {
    char b[600], m[600];
    test_bin_path(b, sizeof b, "smallkv");
    test_model_file(m, sizeof m, TEST_SMOL);
    if (!abs_path(b, g_bin, sizeof g_bin) || !abs_path(m, g_smol, sizeof g_smol) ||
        !abs_path(test_data_dir(), g_data, sizeof g_data) || access(g_bin, X_OK))
        return false;
    test_bin_path(b, sizeof b, "smallkv-mpi");
    abs_path(b, g_mpibin, sizeof g_mpibin);
    return test_data_file("pg-essays/addiction.txt") != NULL;
}

static const cJSON *find_prefix(const skv_eval_store *s, const char *prefix) {
    const cJSON *r;
    cJSON_ArrayForEach(r, s->records)
        if (!strncmp(cJSON_GetObjectItem(r, "key")->valuestring, prefix, strlen(prefix))) return r;
    return NULL;
}

/* The last progress line rank 0 wrote to dir/err.txt (off a terminal: a line per unit)
 * starts with tag and says 100.0 %: its share of the units, resumed ones included. */
static void last_progress_is_done(const char *dir, const char *tag) {
    char path[800], line[1024], last[1024] = "";
    snprintf(path, sizeof path, "%s/err.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, tag, strlen(tag))) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    if (!strstr(last, " 100.0%")) fail_msg("last progress line in %s: '%s'", path, last);
}

static void test_cli_tasks(void **st) {
    (void)st;
    if (!cli_ready()) { print_message("needs build/bin/smallkv, %s and pg-essays: skipping\n", TEST_SMOL); skip(); }
    char out[600], cmd[8192];
    snprintf(out, sizeof out, "%s", test_tmp("cli.json"));
    /* usage errors: exit 2, nothing written */
    const char *bad[] = {"niah --niah-kinds single,bogus", "niah --niah-kinds single,single", "niah --needles 9",
                         "passkey --pad-to 512", "longbench --subsets trec", "longbench --max-length 4",
                         "fidelity --chat", "niah --lengths 0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s eval %s --llm %s -o %s >/dev/null 2>&1", g_bin, bad[i], g_smol, out);
        if (run_cmd(cmd) != 2) fail_msg("'%s' did not exit 2", bad[i]);
    }
    assert_int_equal(access(out, F_OK), -1);
    /* niah: a single and a multivalue unit at 300 tokens */
    snprintf(cmd, sizeof cmd, "%s eval niah --llm %s --data %s --niah-kinds single,multivalue --needles 2 --lengths 200 "
             "--depths 50 --policies full --threads 1 --max-new 6 -o %s 2>/dev/null >/dev/null", g_bin, g_smol, g_data, out);
    assert_int_equal(run_cmd(cmd), 0);
    skv_eval_store *s = skv_store_load(out);
    assert_non_null(s);
    assert_int_equal(skv_store_count(s), 2);
    const cJSON *r = find_prefix(s, "niah|single,len=200,depth=50,v=0|full|");
    assert_non_null(r);
    const cJSON *m = cJSON_GetObjectItem(r, "metrics"), *u = cJSON_GetObjectItem(r, "unit");
    assert_int_equal((int)cJSON_GetObjectItem(m, "prompt_tokens")->valuedouble, 200);
    const double sc = cJSON_GetObjectItem(m, "score")->valuedouble;
    assert_true(sc == 0 || sc == 1);
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItem(m, "correct")), sc == 1);
    assert_string_equal(cJSON_GetObjectItem(u, "kind")->valuestring, "single");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(u, "needle_list")), 1);
    r = find_prefix(s, "niah|multivalue2,len=200,depth=50,v=0|full|");
    assert_non_null(r);
    assert_non_null(strchr(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "metrics"), "gold")->valuestring, ','));
    skv_store_free(s);
    unlink(out);
    /* longbench: one multi_news record cut to 160 tokens */
    if (test_data_file("longbench/multi_news.jsonl")) {
        snprintf(cmd, sizeof cmd, "%s eval longbench --llm %s --data %s --max-length 160 --limit 1 --policies full "
                 "--threads 1 --max-new 6 -o %s 2>/dev/null >/dev/null", g_bin, g_smol, g_data, out);
        assert_int_equal(run_cmd(cmd), 0);
        s = skv_store_load(out);
        assert_non_null(s);
        r = find_prefix(s, "longbench|multi_news#0,max_length=160|full|");
        assert_non_null(r);
        m = cJSON_GetObjectItem(r, "metrics");
        u = cJSON_GetObjectItem(r, "unit");
        const double f = cJSON_GetObjectItem(m, "rouge_l")->valuedouble;
        assert_true(f >= 0 && f <= 1);
        double want;   /* the record's score is ROUGE-L of its output against the answer */
        assert_int_equal(skv_rouge_l(cJSON_GetObjectItem(m, "output")->valuestring,
                                     cJSON_GetArrayItem(cJSON_GetObjectItem(u, "answers"), 0)->valuestring, &want, NULL, NULL), 0);
        assert_true(want == f);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(u, "truncated")));
        const int pt = (int)cJSON_GetObjectItem(m, "prompt_tokens")->valuedouble;
        assert_true(pt >= 150 && pt <= 170);
        skv_store_free(s);
        unlink(out);
    }
    /* bbh --pad-to: the prompt (about 240 tokens) padded to 320, a unit (and key) of its own;
     * without the flag the key is the old one */
    if (test_data_file("bbh/bbh/sports_understanding.json")) {
        for (int pad = 0; pad < 2; pad++) {
            snprintf(cmd, sizeof cmd, "%s eval bbh --llm %s --data %s --bbh-tasks sports_understanding --limit 1 %s --policies full "
                     "--threads 1 --max-new 1 -o %s 2>/dev/null >/dev/null", g_bin, g_smol, g_data, pad ? "--pad-to 320" : "", out);
            assert_int_equal(run_cmd(cmd), 0);
        }
        s = skv_store_load(out);
        assert_non_null(s);
        assert_int_equal(skv_store_count(s), 2);
        const cJSON *plain = find_prefix(s, "bbh|sports_understanding#0|full|b=1|"),
                    *padded = find_prefix(s, "bbh|sports_understanding#0,pad=320|full|b=1|");
        assert_non_null(plain);
        assert_non_null(padded);
        assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(plain, "unit"), "pad_to"));
        const int n0 = (int)cJSON_GetObjectItem(cJSON_GetObjectItem(plain, "metrics"), "prompt_tokens")->valuedouble;
        const int n1 = (int)cJSON_GetObjectItem(cJSON_GetObjectItem(padded, "metrics"), "prompt_tokens")->valuedouble;
        const int pt = (int)cJSON_GetObjectItem(cJSON_GetObjectItem(padded, "unit"), "pad_tokens")->valuedouble;
        print_message("bbh sports_understanding #0: %d tokens, padded %d (%d pad tokens)\n", n0, n1, pt);
        assert_true(n0 < 320);
        assert_true(n1 <= 320 && n1 >= 317);
        assert_true(pt > 0 && pt < n1 - n0 + 8);
        skv_store_free(s);
        unlink(out);
    }
}

/* ---- MPI ---- */

/* the records of a results file, timing fields (and the date) left out, one JSON text each;
 * resumed: also how many cells ran together (a unit finished in part runs the rest alone,
 * as a one-process resume does) */
static int records_text(const char *path, bool resumed, char ***out) {
    static const char *timing[] = {"date", "unit_seconds", "prefill_seconds", "decode_seconds_all_cells", "seconds",
                                   "seconds_per_step", "slm_seconds", "unit_cells", "cells_together"};
    skv_eval_store *s = skv_store_load(path);
    if (!s) return -1;
    const int n = skv_store_count(s);
    *out = calloc((size_t)n + 1, sizeof **out);
    int i = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, s->records) {
        for (size_t k = 0; k < sizeof timing / sizeof *timing - (resumed ? 0 : 2); k++) cJSON_DeleteItemFromObject(r, timing[k]);
        (*out)[i++] = cJSON_PrintUnformatted(r);
    }
    skv_store_free(s);
    return n;
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static void free_texts(char **t, int n) { for (int i = 0; i < n; i++) free(t[i]); free(t); }

static void test_mpi_two_ranks(void **st) {
    (void)st;
    if (!cli_ready()) { print_message("needs build/bin/smallkv, %s and pg-essays: skipping\n", TEST_SMOL); skip(); }
    if (!g_mpibin[0] || access(g_mpibin, X_OK) || system("command -v mpirun >/dev/null 2>&1")) {
        print_message("MPI test skipped: needs `make MPI=1` (build/bin/smallkv-mpi) and mpirun\n");
        skip();
    }
    char dir[3][700], cmd[8192], args[3072];
    for (int i = 0; i < 3; i++) {
        snprintf(dir[i], sizeof dir[i], "%s/mpi%d", test_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir[i]);
        assert_int_equal(run_cmd(cmd), 0);
    }
    /* the same command line in every folder: the records' "command" fields agree */
    snprintf(args, sizeof args, "eval niah --llm %s --data %s --niah-kinds single,multikey --needles 2 --lengths 160 "
             "--depths 0,60,100 --policies full,streamingllm --budgets 0.5 --threads 1 --max-new 4 -o r.json", g_smol, g_data);
    const char *mpirun = "mpirun --allow-run-as-root --oversubscribe";
    /* one process */
    snprintf(cmd, sizeof cmd, "cd %s && %s %s >/dev/null 2>&1", dir[0], g_bin, args);
    assert_int_equal(run_cmd(cmd), 0);
    /* two ranks: the same records in the same order, the shard files gone */
    snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=1 %s -n 2 %s %s >/dev/null 2>err.txt", dir[1], mpirun, g_mpibin, args);
    assert_int_equal(run_cmd(cmd), 0);
    last_progress_is_done(dir[1], "[niah rank 0/2]");   /* rank 0's progress counts its own share */
    char pa[800], pb[800];
    snprintf(pa, sizeof pa, "%s/r.json", dir[0]);
    snprintf(pb, sizeof pb, "%s/r.json", dir[1]);
    char **ta = NULL, **tb = NULL;
    const int na = records_text(pa, false, &ta), nb = records_text(pb, false, &tb);
    assert_int_equal(na, 12);   /* 2 kinds x 3 depths x (full + streamingllm) */
    assert_int_equal(nb, na);
    for (int i = 0; i < na; i++)
        if (strcmp(ta[i], tb[i])) fail_msg("record %d differs:\n%s\n%s", i, ta[i], tb[i]);
    free_texts(tb, nb);
    snprintf(cmd, sizeof cmd, "ls %s | grep -q rank", dir[1]);
    assert_int_not_equal(run_cmd(cmd), 0);
    /* resume with another rank count: a results file with 4 of the records and a stray
     * shard file (an interrupted sharded run) with 3 more; 3 ranks add the other 5 */
    skv_eval_store *full = skv_store_load(pa), *part = skv_store_open(NULL), *stray = skv_store_open(NULL);
    assert_non_null(full);
    int i = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, full->records) {
        if (i < 4) assert_int_equal(skv_store_add(part, cJSON_Duplicate(r, 1)), 0);
        else if (i < 7) assert_int_equal(skv_store_add(stray, cJSON_Duplicate(r, 1)), 0);
        i++;
    }
    char p2[800], p2s[820];
    snprintf(p2, sizeof p2, "%s/r.json", dir[2]);
    snprintf(p2s, sizeof p2s, "%s/r.json.rank5", dir[2]);
    part->path = strdup(p2);
    stray->path = strdup(p2s);
    assert_int_equal(skv_store_save(part), 0);
    assert_int_equal(skv_store_save(stray), 0);
    skv_store_free(part); skv_store_free(stray); skv_store_free(full);
    snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=1 %s -n 3 %s %s 2>err.txt", dir[2], mpirun, g_mpibin, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[1024];
    int added = -1;
    while (fgets(line, sizeof line, f)) { const char *p = strstr(line, " new)"); if (p) { while (p > line && p[-1] != '(') p--; added = atoi(p); } }
    assert_int_equal(pclose(f), 0);
    assert_int_equal(added, 12 - 4);   /* new to r.json: the stray shard's 3 and 5 run now */
    assert_int_equal(access(p2s, F_OK), -1);
    last_progress_is_done(dir[2], "[niah rank 0/3]");   /* resumed records count as done work */
    char **tc = NULL;
    free_texts(ta, na);
    records_text(pa, true, &ta);
    const int nc = records_text(p2, true, &tc);
    assert_int_equal(nc, na);
    qsort(ta, (size_t)na, sizeof *ta, cmp_str);
    qsort(tc, (size_t)nc, sizeof *tc, cmp_str);
    for (int k = 0; k < na; k++)
        if (strcmp(ta[k], tc[k])) fail_msg("resumed record %d differs:\n%s\n%s", k, ta[k], tc[k]);
    free_texts(ta, na);
    free_texts(tc, nc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_niah_build),
        cmocka_unit_test(test_niah_scoring),
        cmocka_unit_test(test_truncate_middle),
        cmocka_unit_test(test_longbench_prompt),
        cmocka_unit_test(test_rouge_l),
        cmocka_unit_test(test_cli_tasks),
        cmocka_unit_test(test_mpi_two_ranks),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
