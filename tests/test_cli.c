/* test_cli.c: the `smallkv` command line, run as a program (popen): messages and exit
 * statuses of `smallkv generate` and `smallkv profile` for the error cases (missing files,
 * a profile made for other models, empty prompt, prompt longer than the context, budget
 * out of range, unknown policy, smallkv without a profile, bad usage), a few short
 * successful runs (SmolLM2, a few tokens), and `smallkv policies`, whose --markdown output
 * must be docs/policies.md byte for byte. Exit codes: 0 ok, 1 error, 2 bad usage.
 * The binary is $BUILD/bin/smallkv (BUILD defaults to build); cases skip when it or the
 * model is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "include/smallkv.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

static char bin[256], smol[256], prof[256], tiny[256], bigctx[256], smallctx[256];

static int setup(void **st) {
    (void)st;
    test_bin_path(bin, sizeof bin, "smallkv");
    test_model_file(smol, sizeof smol, TEST_SMOL);
    snprintf(prof, sizeof prof, "profiles/smollm2-135m-self.skvprof");
    snprintf(tiny, sizeof tiny, "/tmp/skv_test_cli_%d.gguf", (int)getpid());
    tiny_model *t = tiny_model_new(SKV_ARCH_LLAMA, 5, 0, SKV_F32);
    if (!t || tiny_model_write_gguf(t, tiny, SKV_F32)) return -1;
    tiny_model_free(t);
    /* a context file longer than SmolLM2's 8192-token context, and a short one */
    snprintf(bigctx, sizeof bigctx, "/tmp/skv_test_cli_big_%d.txt", (int)getpid());
    snprintf(smallctx, sizeof smallctx, "/tmp/skv_test_cli_small_%d.txt", (int)getpid());
    FILE *f = fopen(bigctx, "w");
    if (!f) return -1;
    for (int i = 0; i < 10000; i++) fputs("hello world ", f);
    fclose(f);
    f = fopen(smallctx, "w");
    if (!f) return -1;
    fputs("Alice has three apples. Bob has five pears. The sky is green in this story.", f);
    fclose(f);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    unlink(tiny);
    unlink(bigctx);
    unlink(smallctx);
    return 0;
}

static void need(bool model) {
    if (access(bin, X_OK) != 0) { print_message("no %s: skipping\n", bin); skip(); }
    if (model && access(smol, R_OK) != 0) TEST_SKIP_MISSING(smol);
}

/* Run "bin ARGS" with stderr merged; output (truncated) into out; returns the exit status. */
static int run(char *out, size_t cap, const char *fmt, ...) {
    char args[4096], cmd[4608];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    print_message("$ smallkv %s -> %d\n%s", args, rc, out);
    return rc;
}

static char out[1 << 16];

/* an error: exit 1 and one line on stderr that contains `what` */
static void expect_error(const char *what, const char *args) {
    assert_int_equal(run(out, sizeof out, "%s", args), 1);
    assert_non_null(strstr(out, what));
    assert_int_equal((int)(strchr(out, '\n') - out + 1), (int)strlen(out));   /* one line */
}

static void test_missing_files(void **st) {
    (void)st;
    need(false);
    expect_error("/nonexistent/model.gguf", "generate --llm /nonexistent/model.gguf --prompt hi");
    expect_error("/nonexistent/model.gguf", "generate /nonexistent/model.gguf --prompt hi");
    need(true);
    char a[4096];
    snprintf(a, sizeof a, "generate --llm %s --slm %s --profile /nonexistent/p.skvprof --prompt hi", smol, smol);
    expect_error("/nonexistent/p.skvprof", a);
    snprintf(a, sizeof a, "generate --llm %s --context /nonexistent/ctx.txt --prompt hi", smol);
    expect_error("/nonexistent/ctx.txt", a);
}

/* A copy of SmolLM2 with the last byte of the file (inside the last tensor) changed:
 * same shapes and tokenizer, different weights, so a different weight fingerprint. */
static int altered_copy(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    int rc = -1;
    if (!in || !out) goto done;
    static char buf[1 << 20];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) goto done;
    if (fseek(out, -1, SEEK_END) || fseek(in, -1, SEEK_END)) goto done;
    int c = fgetc(in);
    if (fseek(out, -1, SEEK_END) || fputc(c ^ 0x5a, out) == EOF) goto done;
    rc = 0;
done:
    if (in) fclose(in);
    if (out && fclose(out)) rc = -1;
    return rc;
}

static void test_profile_other_models(void **st) {
    (void)st;
    need(true);
    if (access(prof, R_OK) != 0) skip();
    char a[4096], alt[256];
    snprintf(alt, sizeof alt, "/tmp/skv_test_cli_alt_%d.gguf", (int)getpid());
    assert_int_equal(altered_copy(smol, alt), 0);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --profile %s --prompt hi -n 1", alt, smol, prof);
    expect_error("made for a different LLM", a);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --profile %s --prompt hi -n 1", smol, alt, prof);
    expect_error("made for a different SLM", a);
    unlink(alt);
    /* a model without a tokenizer cannot be fingerprinted: still one clear line */
    snprintf(a, sizeof a, "generate --llm %s --slm %s --profile %s --prompt hi -n 1", tiny, tiny, prof);
    expect_error("tokenizer", a);
}

static void test_prompt_errors(void **st) {
    (void)st;
    need(true);
    char a[4096];
    snprintf(a, sizeof a, "generate --llm %s --prompt ''", smol);
    expect_error("empty", a);
    snprintf(a, sizeof a, "generate --llm %s --ctx 8 --prompt 'one two three four five six seven eight nine ten'", smol);
    expect_error("more than the --ctx limit", a);
    snprintf(a, sizeof a, "generate --llm %s --context %s --prompt hi", smol, bigctx);
    expect_error("more than the model's context", a);
}

static void test_budget_policy(void **st) {
    (void)st;
    need(true);
    char a[4096];
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --budget 0 --prompt hi", smol);
    expect_error("--budget 0 is not a fraction in (0, 1]", a);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --budget 1.5 --prompt hi", smol);
    expect_error("--budget 1.5 is not a fraction", a);
    snprintf(a, sizeof a, "generate --llm %s --policy nosuch --budget 0.2 --prompt hi -n 1", smol);
    expect_error("unknown KV policy 'nosuch'", a);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --policy smallkv --prompt hi", smol, smol);
    expect_error("needs --profile", a);
    snprintf(a, sizeof a, "generate --llm %s --policy smallkv --prompt hi", smol);
    expect_error("needs --slm", a);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --combine nosuch --prompt hi -n 1", smol);
    expect_error("unknown combine", a);
}

/* policy options as flags (from the policies' option tables) and in --policy specs */
static void test_policy_flags(void **st) {
    (void)st;
    need(true);
    char a[4096];
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --heavy 0.3 --reduce max --budget 0.5 --prompt hi -n 1 --threads 2", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o:heavy=0.3,sinks=2 --budget 0.5 --prompt hi -n 1 --threads 2", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    /* a flag the chosen policy lacks: a note, not a silent drop */
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --window 8 --budget 0.5 --prompt hi -n 1 --threads 2", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_non_null(strstr(out, "note: policy h2o has no option --window"));
    snprintf(a, sizeof a, "generate --llm %s --policy h2o:bogus=1 --prompt hi -n 1", smol);
    expect_error("policy h2o has no option 'bogus' (its options: heavy, reduce, sinks)", a);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --heavy 2 --prompt hi -n 1", smol);
    expect_error("heavy=2 is not a number in [0, 1]", a);
    /* --NAME=VALUE is the same as --NAME VALUE; a switch can be turned off that way */
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --heavy=0.3 --reduce=max --budget 0.5 --prompt hi -n 1 --threads 2", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --heavy=2 --prompt hi -n 1", smol);
    expect_error("heavy=2 is not a number in [0, 1]", a);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --key-norm=maybe --prompt hi -n 1", smol);
    expect_error("key_norm takes no value or one of", a);
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --heavy= --prompt hi -n 1", smol);
    expect_error("heavy= is not a number", a);
    snprintf(a, sizeof a, "eval fidelity --llm %s --policies h2o --heavy=2 -o /tmp/skv_test_cli_unused.json", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 2);
    assert_non_null(strstr(out, "heavy=2 is not a number in [0, 1]"));
    /* the help lists every policy with its options */
    assert_int_equal(run(out, sizeof out, "generate --help"), 0);
    assert_non_null(strstr(out, "heavy=F"));
    assert_non_null(strstr(out, "score=acc|now|mean"));
    assert_non_null(strstr(out, "ems_gamma=F"));
}

static void test_usage(void **st) {
    (void)st;
    need(false);
    assert_int_equal(run(out, sizeof out, "generate --prompt hi"), 2);
    assert_non_null(strstr(out, "missing --llm"));
    assert_int_equal(run(out, sizeof out, "generate --llm x --bogus"), 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    assert_int_equal(run(out, sizeof out, "generate --llm x"), 2);
    assert_int_equal(run(out, sizeof out, "generate --llm x --prompt hi -n"), 2);
    /* the prefill attention mode: a bad name is a usage error in every command that takes it */
    assert_int_equal(run(out, sizeof out, "generate --llm x --prompt hi --prefill-attn fp8"), 2);
    assert_non_null(strstr(out, "'fp8' is not exact or bf16"));
    assert_int_equal(run(out, sizeof out, "ppl x y --prefill-attn"), 2);
    assert_int_equal(run(out, sizeof out, "serve --prefill-attn half"), 2);
    assert_int_equal(run(out, sizeof out, "eval --llm x --prefill-attn half passkey -o /tmp/x.json"), 2);
    assert_int_equal(run(out, sizeof out, "generate --help"), 0);
    assert_non_null(strstr(out, "--context FILE"));
    assert_int_equal(run(out, sizeof out, "profile --help"), 0);
    assert_int_equal(run(out, sizeof out, "profile show"), 2);
    assert_int_equal(run(out, sizeof out, "profile frob x"), 2);
    expect_error("/nonexistent/p.skvprof", "profile show /nonexistent/p.skvprof");
    /* the top-level help names every command main() dispatches, and each has its own help */
    const char *cmds[] = {"info", "generate", "ppl", "profile", "policies", "eval"};
    assert_int_equal(run(out, sizeof out, "--help"), 0);
    char top[sizeof out];
    memcpy(top, out, sizeof top);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char line[32], c[32];
        snprintf(line, sizeof line, "\n  %s ", cmds[i]);
        if (!strstr(top, line)) fail_msg("'smallkv --help' does not list '%s'", cmds[i]);
        snprintf(c, sizeof c, "%s --help", cmds[i]);
        assert_int_equal(run(out, sizeof out, c), 0);
        assert_non_null(strstr(out, "usage: smallkv"));
    }
    assert_int_equal(run(out, sizeof out, "frobnicate"), 2);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
    /* few-shot turns only where there are few-shot examples, and without padding */
    assert_int_equal(run(out, sizeof out, "eval --llm x --chat-turns passkey -o /tmp/x.json"), 2);
    assert_non_null(strstr(out, "--chat-turns is for gsm8k and bbh"));
    assert_int_equal(run(out, sizeof out, "eval --llm x --chat-turns --pad-to 2048 gsm8k -o /tmp/x.json"), 2);
    assert_non_null(strstr(out, "do not combine"));
}

static void test_profile_show(void **st) {
    (void)st;
    need(false);
    if (access(prof, R_OK) != 0) skip();
    char a[4096];
    snprintf(a, sizeof a, "profile show %s", prof);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_non_null(strstr(out, "LLM:"));
    assert_non_null(strstr(out, "depth"));
}

/* The whole stdout of "bin ARGS" (stderr apart), malloc'd, its length in *len, its exit
 * status in *rc. */
static char *run_stdout(const char *args, size_t *len, int *rc) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    assert_non_null(b);
    while ((k = fread(b + n, 1, cap - n - 1, p)) > 0)
        if ((n += k) + 1 == cap) { b = realloc(b, cap *= 2); assert_non_null(b); }
    b[n] = 0;
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    *len = n;
    return b;
}

/* `smallkv policies`: the policy list of `generate --help`; --markdown: docs/policies.md,
 * which must be the current output byte for byte (the page is generated, never edited) */
static void test_policies_page(void **st) {
    (void)st;
    need(false);
    size_t n;
    int rc;
    char *text = run_stdout("policies", &n, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(text, smallkv_policies_help());
    free(text);

    char *md = run_stdout("policies --markdown", &n, &rc);
    assert_int_equal(rc, 0);
    const char *want = smallkv_policies_markdown();
    assert_non_null(want);
    assert_string_equal(md, want);
    FILE *f = fopen("docs/policies.md", "rb");
    if (!f) fail_msg("no docs/policies.md: run build/bin/smallkv policies --markdown > docs/policies.md");
    static char doc[1 << 17];
    size_t dn = fread(doc, 1, sizeof doc, f);
    fclose(f);
    size_t i = 0;
    while (i < n && i < dn && md[i] == doc[i]) i++;
    if (i < n || i < dn) {
        print_message("first difference at byte %zu of %zu (docs/policies.md: %zu bytes)\n", i, n, dn);
        free(md);
        fail_msg("docs/policies.md is stale: run build/bin/smallkv policies --markdown > docs/policies.md");
    }
    free(md);

    /* bad usage: exit 2, the reason first */
    assert_int_equal(run(out, sizeof out, "policies --bogus"), 2);
    assert_non_null(strstr(out, "smallkv: policies: unknown option '--bogus'\n"));
    assert_int_equal(run(out, sizeof out, "policies h2o"), 2);
    assert_non_null(strstr(out, "smallkv: policies: unexpected argument 'h2o'\n"));
    assert_int_equal(run(out, sizeof out, "policies --help"), 0);
    assert_non_null(strstr(out, "--markdown"));
}

static void test_runs(void **st) {
    (void)st;
    need(true);
    char a[4096];
    /* the old form: positional model, policy full */
    snprintf(a, sizeof a, "generate %s --prompt 'The capital of France is' -n 3 --threads 2", smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_non_null(strstr(out, "Paris"));
    /* smallkv with the online mapping needs no profile; --stats lines */
    snprintf(a, sizeof a, "generate --llm %s --slm %s --policy smallkv --mapping online --budget 0.5 "
             "--prompt 'The capital of France is' -n 3 --stats --threads 2", smol, smol);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_non_null(strstr(out, "SLM weights"));
    assert_non_null(strstr(out, "TTFT"));
    assert_non_null(strstr(out, "TPOT"));
    /* a compressed context answered twice, each from the same state */
    snprintf(a, sizeof a, "generate --llm %s --policy h2o --budget 0.5 --context %s --prompt ' Alice has' "
             "--prompt ' Bob has' -n 2 --stats --threads 2", smol, smallctx);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_non_null(strstr(out, ">  Alice has"));
    assert_non_null(strstr(out, ">  Bob has"));
    assert_non_null(strstr(out, "context prefill"));
    if (access(prof, R_OK) == 0) {
        snprintf(a, sizeof a, "generate --llm %s --slm %s --profile %s --budget 0.3 --window 8 --combine mass "
                 "--split adaptive --prompt 'The capital of France is' -n 2 --threads 2", smol, smol, prof);
        assert_int_equal(run(out, sizeof out, "%s", a), 0);
    }
}

/* --draft (and --draft-vocab): greedy output equals plain decoding's; sampled output (--temp) repeats with the
 * seed and changes with it; usage errors name the missing piece */
static void test_draft(void **st) {
    (void)st;
    need(true);
    char a[4096];
    static char plain[sizeof out], again[sizeof out];
    const char *q = "--prompt 'Once upon a time, in a small town by the sea, there lived' -n 40 --threads 2";
    snprintf(a, sizeof a, "generate --llm %s %s", smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    snprintf(plain, sizeof plain, "%s", out);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --draft 3 %s", smol, smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_string_equal(out, plain);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --draft 3 --temp 0.9 --seed 11 %s", smol, smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    snprintf(again, sizeof again, "%s", out);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_string_equal(out, again);
    assert_string_not_equal(out, plain);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --draft 3 --temp 0.9 --seed 12 %s", smol, smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_string_not_equal(out, again);
    snprintf(a, sizeof a, "generate --llm %s --draft 3 %s", smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 2);
    assert_non_null(strstr(out, "--draft needs --slm"));
    /* a draft vocabulary: the same greedy text; only with --draft */
    snprintf(a, sizeof a, "generate --llm %s --slm %s --draft 3 --draft-vocab 300 %s", smol, smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 0);
    assert_string_equal(out, plain);
    snprintf(a, sizeof a, "generate --llm %s --slm %s --draft-vocab 300 %s", smol, smol, q);
    assert_int_equal(run(out, sizeof out, "%s", a), 2);
    assert_non_null(strstr(out, "--draft-vocab needs --draft"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_profile_other_models),
        cmocka_unit_test(test_prompt_errors),
        cmocka_unit_test(test_budget_policy),
        cmocka_unit_test(test_policy_flags),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_profile_show),
        cmocka_unit_test(test_policies_page),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_draft),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
