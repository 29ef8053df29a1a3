/* test_family_pairs.c: a user's whole pipeline on each model family beyond plain Llama/Qwen2
 * (Llama 3 RoPE scaling, Mistral sliding windows, Qwen3 q/k norms, Gemma 3 with its sliding
 * and global layers), on tiny random models that carry a byte-level BPE tokenizer
 * (tiny_model.byte_bpe), so no model download is needed:
 *   calibrate (skv_calib_run on a text corpus, windows longer than the sliding window) ->
 *   profile (skv_profile_build, what mapgen writes) -> SmallKV through the public API.
 * What it checks, per family:
 *   - a self pair (SLM = LLM) maps every head to itself with cosine 1 and a Jaccard of 1 on
 *     the diagonal (both models' attention is captured alike, windowed layers included), and
 *     with its profile SmallKV decodes and the SLM's drafts are accepted;
 *   - a pair of two different random models (two seeds) calibrates, its profile loads
 *     against the pair (model fingerprints), and a SmallKV session at 25 % decodes with fewer
 *     LLM bytes hot than the full cache, the whole cache in the cold tier and an SLM cache,
 *     the same tokens on a second run;
 *   - the tools a user runs, on the built binaries (skipped when absent): `smallkv info`, `ppl`
 *     and `generate` on the model, then `calibrate` -> `mapgen` -> `smallkv generate --policy
 *     smallkv --profile` on the two-model pair;
 *   - SmallKV with the SLM drafting 2 tokens a round (the most the tiny LLM verifies on its
 *     exact per-row path) gives exactly its own greedy tokens (the family's verify pass). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "calibrate/calib_run.h"
#include "calibrate/mapping.h"
#include "common/util.h"
#include "include/smallkv.h"
#include "runtime/format/profile.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

enum { W_CAL = 64, N_WIN = 6, N_PROMPT = 200, N_GEN = 24 };

/* ~2.4 KB of plain English: the calibration corpus and the prompt */
static const char *TEXT =
    "The lighthouse keeper climbed the spiral stairs every evening at the same hour, carrying a "
    "can of oil and a cloth for the great lens. From the gallery he could see the whole bay: the "
    "fishing boats returning with their nets, the ferry crossing to the island, and the long "
    "breakwater where children waited for the waves to spill over the stones. He wrote the "
    "weather in a ledger that his grandmother had started, and the entries ran back for more than "
    "sixty years, a record of storms and calm mornings, of ships that passed and ships that did "
    "not come back. On clear nights he counted the stars above the headland and listened to the "
    "bell buoy ringing far out in the channel. In winter the wind shook the windows and the salt "
    "spray froze on the railings, and he stayed awake until dawn to keep the light turning. The "
    "town below depended on him, though few people ever climbed the hill to say so. Once a year "
    "the inspector came from the city, checked the clockwork and the lamp, signed the ledger and "
    "left again on the afternoon train. The keeper liked the quiet. He read old books about "
    "navigation, mended his own clothes, and grew potatoes and beans in a small garden behind the "
    "tower, sheltered from the wind by a stone wall. When the new electric lamp was installed, he "
    "feared he would no longer be needed, but the machine failed in its first storm and the "
    "harbour master asked him to stay. He kept the old oil lamp ready after that, cleaned and "
    "filled, on a shelf beside the door, and every evening he still climbed the stairs at the "
    "same hour, as if the light depended on his steps as much as on the wires and the engine "
    "humming in the shed below. Years later, when he finally retired, the town gave him a small "
    "house near the harbour, and he watched the beam sweep across the water from his kitchen.";

typedef struct {
    char slm[512], llm[512], corpus[512], calib[512], prof[512];
} pair_files;

static void write_text(const char *path, const char *text, size_t len) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static int write_model(const char *fam, uint64_t seed, const char *path) {
    tiny_model *t = tiny_model_new_family(fam, seed);
    if (!t) return -1;
    t->byte_bpe = 1;
    int rc = tiny_model_write_gguf(t, path, SKV_F32);
    tiny_model_free(t);
    return rc;
}

/* write the corpus and the two models (slm_seed == llm_seed: one file used twice) */
static void make_pair(const char *fam, uint64_t slm_seed, uint64_t llm_seed, pair_files *f) {
    const char *d = test_tmpdir();
    snprintf(f->corpus, sizeof f->corpus, "%s/corpus.txt", d);
    snprintf(f->slm, sizeof f->slm, "%s/%s-%llu.gguf", d, fam, (unsigned long long)slm_seed);
    snprintf(f->llm, sizeof f->llm, "%s/%s-%llu.gguf", d, fam, (unsigned long long)llm_seed);
    snprintf(f->calib, sizeof f->calib, "%s/%s.calib", d, fam);
    snprintf(f->prof, sizeof f->prof, "%s/%s.skvprof", d, fam);
    write_text(f->corpus, TEXT, strlen(TEXT));
    if (write_model(fam, slm_seed, f->slm)) fail_msg("%s: %s", fam, skv_last_error());
    if (llm_seed != slm_seed && write_model(fam, llm_seed, f->llm)) fail_msg("%s: %s", fam, skv_last_error());
}

static skv_calib *calibrate(const pair_files *f) {
    skv_calib_run_opts o;
    skv_calib_run_defaults(&o);
    o.slm_path = f->slm; o.llm_path = f->llm;
    o.corpora[0] = f->corpus; o.n_corpora = 1;
    o.out = f->calib; o.window = W_CAL; o.windows = N_WIN;
    o.overwrite = true;
    skv_calib_run_stats st;
    if (skv_calib_run(&o, &st)) fail_msg("calibrate %s: %s", f->llm, skv_last_error());
    assert_int_equal(st.done, N_WIN);
    skv_calib *c = skv_calib_read(f->calib);
    if (!c) fail_msg("%s", skv_last_error());
    assert_int_equal(c->n_windows, N_WIN);
    assert_false(c->align.present);   /* one tokenizer: no alignment */
    return c;
}

typedef struct { int *ids; int n; } token_sink;

static int collect(int id, const char *bytes, size_t len, void *user) {
    (void)bytes; (void)len;
    token_sink *k = user;
    if (k->n < N_GEN) k->ids[k->n++] = id;
    return 0;
}

/* prefill ids[0..n), then up to N_GEN greedy tokens into out; returns how many */
static int run_tokens(smallkv_pair *p, int draft, const int *ids, int n, int *out, smallkv_stats *st) {
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = "smallkv";
    o.budget = 0.25;
    o.draft = draft;
    smallkv_session *s = smallkv_session_new(p, &o);
    if (!s) fail_msg("smallkv (draft %d): %s", draft, smallkv_last_error());
    assert_int_equal(smallkv_prefill(s, ids, n), 0);
    token_sink k = {out, 0};
    int got = smallkv_generate(s, N_GEN, collect, &k);
    if (got < 0) fail_msg("generate (draft %d): %s", draft, smallkv_last_error());
    assert_int_equal(got, k.n);
    smallkv_get_stats(s, st);
    smallkv_session_free(s);
    return got;
}

/* the profile from calibration c (as mapgen builds it), then SmallKV on the pair, plain and
 * drafting; self: SLM = LLM, so drafts must be accepted */
static void decode_with_profile(const char *fam, const pair_files *f, skv_calib *c, int self) {
    skv_profile *prof = skv_profile_build(c, SKV_METRIC_JACCARD, 0.01, 0, "test_family_pairs");
    if (!prof) fail_msg("%s", skv_last_error());
    assert_true(prof->depth >= 1 && prof->depth <= 2);
    if (skv_profile_write(prof, f->prof)) fail_msg("%s", skv_last_error());
    skv_profile_free(prof);
    skv_calib_free(c);

    smallkv_pair *p = smallkv_pair_load(f->llm, f->slm);
    if (!p) fail_msg("%s", smallkv_last_error());
    if (smallkv_pair_load_profile(p, f->prof)) fail_msg("%s", smallkv_last_error());
    int ids[1024];
    int n = smallkv_tokenize(p, TEXT, 0, ids, 1024);
    assert_true(n > N_PROMPT);
    n = N_PROMPT;

    int a[N_GEN], b[N_GEN], d[N_GEN];
    smallkv_stats sa, sb, sd;
    int na = run_tokens(p, 0, ids, n, a, &sa);
    assert_true(na > 0);
    assert_int_equal(run_tokens(p, 0, ids, n, b, &sb), na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_int_equal(sa.length, N_PROMPT + na - 1);   /* the last token is not stepped */
    assert_true(sa.hot_bytes < sa.full_bytes);
    assert_true(sa.cold_bytes > 0);
    assert_true(sa.slm_cache_bytes > 0);
    assert_true(sa.slm_weight_bytes > 0);
    print_message("  %s%s: SmallKV at 25 %%: %d tokens, hot %zu of %zu bytes, cold %zu, SLM cache %zu, "
                  "restores %d\n", fam, self ? " (self pair)" : "", na, sa.hot_bytes, sa.full_bytes, sa.cold_bytes, sa.slm_cache_bytes,
                  sa.restores);

    /* the SLM drafting 2 a round: the same greedy tokens, whatever it proposes */
    assert_int_equal(run_tokens(p, 2, ids, n, d, &sd), na);
    assert_memory_equal(a, d, (size_t)na * sizeof *a);
    assert_true(sd.spec_passes > 0);
    if (self) assert_true(sd.spec_accepted > 0);
    print_message("  %s%s: draft 2: %d verify passes, %d of %d drafts accepted\n", fam, self ? " (self pair)" : "",
                  sd.spec_passes, sd.spec_accepted, sd.spec_drafted);
    smallkv_pair_free(p);
}

/* SLM = LLM: head i maps to head i, similarity 1 on the diagonal; then SmallKV on it */
static void self_pair(const char *fam) {
    pair_files f;
    make_pair(fam, 11, 11, &f);
    skv_calib *c = calibrate(&f);
    int n = c->n_llm;
    assert_int_equal(n, c->n_slm);
    assert_int_equal(n, 2 * 4);   /* 2 layers x 4 heads */
    float *mean = malloc((size_t)n * n * sizeof *mean), *sd = malloc((size_t)n * n * sizeof *sd);
    int32_t *map = malloc((size_t)n * sizeof *map);
    assert_non_null(mean); assert_non_null(sd); assert_non_null(map);
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_COSINE, mean, sd), 0);
    skv_map_argmax(mean, n, n, n, map);
    for (int i = 0; i < n; i++) {
        assert_int_equal(map[i], i);
        assert_true(fabsf(mean[(size_t)i * n + i] - 1.0f) < 1e-5f);
    }
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_JACCARD, mean, sd), 0);
    for (int i = 0; i < n; i++) assert_true(fabsf(mean[(size_t)i * n + i] - 1.0f) < 1e-5f);
    free(mean); free(sd); free(map);
    decode_with_profile(fam, &f, c, 1);
}

/* two random models of the family (two seeds) */
static void pair_run(const char *fam) {
    pair_files f;
    make_pair(fam, 21, 22, &f);
    skv_calib *c = calibrate(&f);
    decode_with_profile(fam, &f, c, 0);
}

/* Run "TOOL ARGS" (a built binary) with stderr merged into out; the exit status. */
static char g_out[1 << 15];
static int tool(const char *name, const char *fmt, ...) {
    char bin[512], args[3072], cmd[4096];
    test_bin_path(bin, sizeof bin, name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[n] = 0;
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc) print_message("$ %s %s -> %d\n%s", name, args, rc, g_out);
    return rc;
}

/* the user's commands on the family's pair of tiny models */
static void cli_run(const char *fam) {
    char b1[512], b2[512], b3[512];
    if (access(test_bin_path(b1, sizeof b1, "smallkv"), X_OK) || access(test_bin_path(b2, sizeof b2, "calibrate"), X_OK) ||
        access(test_bin_path(b3, sizeof b3, "mapgen"), X_OK)) {
        print_message("the tools are not built (%s): skipping\n", b1);
        skip();
    }
    pair_files f;
    make_pair(fam, 21, 22, &f);
    assert_int_equal(tool("smallkv", "info %s", f.llm), 0);
    assert_non_null(strstr(g_out, "tiny"));
    assert_int_equal(tool("smallkv", "ppl %s %s --ctx 128 --max-tokens 512 --threads 1", f.llm, f.corpus), 0);
    char *pp = strstr(g_out, "ppl ");
    assert_non_null(pp);
    double ppl = strtod(pp + 4, NULL);
    assert_true(ppl > 1.0 && isfinite(ppl));   /* a random model: finite, above 1 */
    assert_int_equal(tool("smallkv", "generate %s --prompt 'The lighthouse keeper' -n 8 --threads 1", f.llm), 0);
    assert_int_equal(tool("calibrate", "--slm %s --llm %s --corpus %s --window %d --windows %d --threads 1 -q --force -o %s",
                          f.slm, f.llm, f.corpus, W_CAL, N_WIN, f.calib), 0);
    assert_int_equal(tool("mapgen", "%s -o %s", f.calib, f.prof), 0);
    char ctx[600];   /* a context that fits the tiny models' 512 positions: ~700 bytes */
    snprintf(ctx, sizeof ctx, "%s", test_tmp("context.txt"));
    write_text(ctx, TEXT, 700);
    assert_int_equal(tool("smallkv", "generate --llm %s --slm %s --profile %s --policy smallkv --budget 0.25 "
                          "--context %s --prompt 'The keeper' -n 12 --threads 1 --stats",
                          f.llm, f.slm, f.prof, ctx), 0);
    print_message("  %s: smallkv info / ppl %.1f / generate, calibrate -> mapgen -> generate --policy smallkv ran\n",
                  fam, ppl);
}

static void test_self_llama3(void **s) { (void)s; self_pair("llama3"); }
static void test_self_mistral(void **s) { (void)s; self_pair("mistral"); }
static void test_self_qwen3(void **s) { (void)s; self_pair("qwen3"); }
static void test_self_gemma3(void **s) { (void)s; self_pair("gemma3"); }
static void test_pair_llama3(void **s) { (void)s; pair_run("llama3"); }
static void test_pair_mistral(void **s) { (void)s; pair_run("mistral"); }
static void test_pair_qwen3(void **s) { (void)s; pair_run("qwen3"); }
static void test_pair_gemma3(void **s) { (void)s; pair_run("gemma3"); }
static void test_cli_llama3(void **s) { (void)s; cli_run("llama3"); }
static void test_cli_mistral(void **s) { (void)s; cli_run("mistral"); }
static void test_cli_qwen3(void **s) { (void)s; cli_run("qwen3"); }
static void test_cli_gemma3(void **s) { (void)s; cli_run("gemma3"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_self_llama3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_self_mistral, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_self_qwen3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_self_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_pair_llama3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_pair_mistral, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_pair_qwen3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_pair_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cli_llama3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cli_mistral, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cli_qwen3, test_tmpdir_setup, test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_cli_gemma3, test_tmpdir_setup, test_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
