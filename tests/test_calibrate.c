/* test_calibrate.c: the calibration run (calibrate/calib_run.c) and the calibrate tool:
 * identity mapping for the SmolLM2 self pair, shards merged == one run, a run killed with
 * SIGKILL and resumed == an uninterrupted run (bit for bit), pairs with two tokenizers
 * (aligned; mapgen refuses their profile), refusal of empty or unreadable corpora, the
 * window plan, and MPI (when built with `make MPI=1` and mpirun exists; skipped otherwise). Model tests skip when models/ lacks SmolLM2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "calibrate/calib.h"
#include "calibrate/calib_run.h"
#include "calibrate/mapping.h"
#include "common/util.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_env.h"
#include "tests/support/tiny_model.h"

#define W_TEST 32
#define N_TEST 6

static char g_corpus[320], g_full[320], g_smol[512], g_qwen[512], g_bin[512];
static bool g_have_smol, g_have_full;

/* ~2.9 KB of plain English: enough for six windows of 64 tokens (the tests use 32). */
static const char *TEXT =
    "The river town woke slowly. Fishermen pulled their boats onto the gravel while the baker "
    "opened his shutters and set the first loaves on the sill to cool. Children ran along the "
    "embankment, counting the barges that drifted down from the mountains with timber and salt. "
    "In the old library, a clerk named Marta catalogued maps that nobody had opened for a century; "
    "each one showed the river in a different place, as if the water had wandered across the valley "
    "like a restless animal. She wrote the dates in a ledger and wondered which map was true.\n"
    "By noon the market square was full. Traders argued about the price of wool, a musician played "
    "a tune on a battered violin, and the mayor gave a speech about the new bridge that would, he "
    "promised, bring prosperity to every household. Few people listened. They had heard about the "
    "bridge for twenty years, and the only thing that had changed was the colour of the mayor's coat.\n"
    "Marta closed the ledger and walked to the river. The water was low this summer, and she could "
    "see the stones of an older bridge beneath the surface, arranged in a line that matched one of "
    "her maps exactly. She laughed, because the oldest map had been right all along: the river had "
    "not moved at all; the town had. Over the centuries the houses had crept uphill, away from the "
    "floods, and each generation had drawn the river where it seemed to be from their own doorstep.\n"
    "That evening she told the story to the baker, who told it to the fishermen, who told it to the "
    "bargemen, and by the end of the week the whole valley knew that the maps were not wrong but "
    "merely honest about where their makers had stood. The mayor, hearing of it, declared a holiday "
    "in honour of the library, and for the first time in years people came to read the old books. "
    "They found recipes, quarrels, love letters and weather reports, the ordinary traces of lives "
    "that had been lived in the same streets, under the same sky, beside the same patient river.\n"
    "Years later, when the new bridge was finally built, its engineers consulted Marta's ledger to "
    "find the firmest ground. They placed the piers exactly where the old stones lay, and the bridge "
    "stood through every flood that followed, a reminder that the past is often a better guide than "
    "we expect, provided we remember where we were standing when we wrote it down.\n";

static int write_text(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(s, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static void base_opts(skv_calib_run_opts *o, const char *out) {
    skv_calib_run_defaults(o);
    o->slm_path = g_smol; o->llm_path = g_smol;
    o->corpora[0] = g_corpus; o->n_corpora = 1;
    o->out = out; o->window = W_TEST; o->windows = N_TEST;
    o->overwrite = true;
}

static int setup(void **state) {
    if (test_tmpdir_setup(state)) return -1;
    snprintf(g_corpus, sizeof g_corpus, "%s/corpus.txt", test_tmpdir());
    snprintf(g_full, sizeof g_full, "%s/full.calib", test_tmpdir());
    if (write_text(g_corpus, TEXT, strlen(TEXT))) return -1;
    test_model_file(g_qwen, sizeof g_qwen, TEST_QWEN05);
    test_bin_path(g_bin, sizeof g_bin, "calibrate");
    g_have_smol = test_model_path(g_smol, sizeof g_smol, TEST_SMOL) != NULL;
    if (g_have_smol) {   /* the uninterrupted reference run, shared by several tests */
        skv_calib_run_opts o;
        base_opts(&o, g_full);
        if (skv_calib_run(&o, NULL)) { fprintf(stderr, "reference run: %s\n", skv_last_error()); return -1; }
        g_have_full = true;
    }
    return 0;
}

static unsigned char *slurp(const char *path, size_t *n) {
    char *d = skv_read_file(path, n);
    if (!d) fail_msg("%s", skv_last_error());
    return (unsigned char *)d;
}

/* ---- window plan ---- */

static void test_plan(void **state) {
    (void)state;
    int64_t starts[64];
    int corpus[64];
    /* one corpus, all windows: window w = tokens [w*W, (w+1)*W) */
    int64_t one[1] = {1000};
    assert_int_equal(skv_calib_plan(one, 1, 100, 0, 0, starts, corpus, 64), 10);
    for (int w = 0; w < 10; w++) { assert_int_equal(starts[w], (int64_t)w * 100); assert_int_equal(corpus[w], 0); }
    /* evenly spaced: 4 of 10 slots -> 0, 2, 5, 7 */
    assert_int_equal(skv_calib_plan(one, 1, 100, 4, 0, starts, corpus, 64), 4);
    assert_int_equal(starts[0], 0); assert_int_equal(starts[1], 200);
    assert_int_equal(starts[2], 500); assert_int_equal(starts[3], 700);
    /* two corpora share evenly; a short corpus gives its spare quota away; no straddling */
    int64_t two[2] = {250, 1000};
    assert_int_equal(skv_calib_plan(two, 2, 100, 6, 0, starts, corpus, 64), 6);
    int n0 = 0;
    for (int w = 0; w < 6; w++) {
        n0 += corpus[w] == 0;
        if (corpus[w] == 0) assert_true(starts[w] + 100 <= 250);
        else assert_true(starts[w] >= 250 && (starts[w] - 250) % 100 == 0);
        if (w) assert_true(starts[w] > starts[w - 1]);
    }
    assert_int_equal(n0, 2);
    /* seeded: deterministic, distinct, ascending, different from another seed */
    int64_t a[8], b[8], c2[8];
    int ca[8];
    int64_t big[1] = {100000};
    assert_int_equal(skv_calib_plan(big, 1, 100, 8, 42, a, ca, 8), 8);
    assert_int_equal(skv_calib_plan(big, 1, 100, 8, 42, b, ca, 8), 8);
    assert_int_equal(skv_calib_plan(big, 1, 100, 8, 43, c2, ca, 8), 8);
    assert_memory_equal(a, b, sizeof a);
    assert_true(memcmp(a, c2, sizeof a) != 0);
    for (int w = 1; w < 8; w++) assert_true(a[w] > a[w - 1]);
    /* more windows asked than exist: capped */
    assert_int_equal(skv_calib_plan(one, 1, 100, 50, 0, starts, corpus, 64), 10);
}

/* ---- SmolLM2 self pair ---- */

static void test_identity(void **state) {
    (void)state;
    if (!g_have_full) skip();
    skv_calib *c = skv_calib_read(g_full);
    if (!c) fail_msg("%s", skv_last_error());
    assert_int_equal(c->n_windows, N_TEST);
    assert_int_equal(c->tokens, N_TEST * W_TEST);
    assert_int_equal(c->n_llm, 30 * 9);
    assert_int_equal(c->n_llm, c->n_slm);
    int n = c->n_llm;
    float *mean = malloc((size_t)n * n * sizeof *mean), *sd = malloc((size_t)n * n * sizeof *sd);
    int32_t *f = malloc((size_t)n * sizeof *f);
    assert_non_null(mean); assert_non_null(sd); assert_non_null(f);
    /* cosine: every head maps to itself with similarity ~1 */
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_COSINE, mean, sd), 0);
    skv_map_argmax(mean, n, n, n, f);
    for (int i = 0; i < n; i++) {
        assert_int_equal(f[i], i);
        assert_true(fabsf(mean[(size_t)i * n + i] - 1.0f) < 1e-5f);
    }
    /* jaccard and rowcos: the diagonal is 1 (others may tie at 1 for jaccard) */
    for (int m = SKV_METRIC_JACCARD; m <= SKV_METRIC_ROWCOS; m += 2) {
        assert_int_equal(skv_calib_mean(c, m, mean, sd), 0);
        for (int i = 0; i < n; i++) assert_true(fabsf(mean[(size_t)i * n + i] - 1.0f) < 1e-5f);
    }
    /* and off-diagonal pairs are not all alike (the scores carry information) */
    assert_int_equal(skv_calib_mean(c, SKV_METRIC_COSINE, mean, sd), 0);
    int below = 0;
    for (int i = 0; i < n; i++) below += mean[(size_t)i * n + (i + 1) % n] < 0.95f;
    assert_true(below > n / 4);
    free(mean); free(sd); free(f);
    skv_calib_free(c);
}

static void test_shards_merge(void **state) {
    (void)state;
    if (!g_have_full) skip();
    skv_calib *acc = NULL;
    for (int i = 0; i < 3; i++) {
        char out[400];
        snprintf(out, sizeof out, "%s/shard%d.calib", test_tmpdir(), i);
        skv_calib_run_opts o;
        base_opts(&o, out);
        o.shard_index = i; o.shard_count = 3;
        skv_calib_run_stats st;
        if (skv_calib_run(&o, &st)) fail_msg("%s", skv_last_error());
        assert_int_equal(st.done, 2);
        skv_calib *c = skv_calib_read(out);
        if (!c) fail_msg("%s", skv_last_error());
        assert_int_equal(c->n_windows, 2);
        for (int k = 0; k < 2; k++) assert_int_equal(c->windows[k] % 3, i);
        if (!acc) { acc = c; continue; }
        /* merge in the order 0, 2, 1 is as good as any: merge exactly like mapgen does */
        assert_int_equal(skv_calib_merge(acc, c, "shard0", out), 0);
        skv_calib_free(c);
    }
    skv_calib *full = skv_calib_read(g_full);
    if (!full) fail_msg("%s", skv_last_error());
    assert_int_equal(acc->n_windows, full->n_windows);
    assert_int_equal(acc->tokens, full->tokens);
    size_t nsum = (size_t)full->n_metrics * 2 * full->n_llm * full->n_slm;
    assert_memory_equal(acc->sums, full->sums, nsum * sizeof(int64_t));
    /* per-window statistics agree once sorted by window (write both and compare sections) */
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/merged.calib", test_tmpdir());
    snprintf(b, sizeof b, "%s/full-rewritten.calib", test_tmpdir());
    acc->set.shard_count = full->set.shard_count;   /* headers differ only in the shard layout */
    acc->n_shards = full->n_shards; acc->shards[0] = full->shards[0];
    assert_int_equal(skv_calib_write(acc, a), 0);
    assert_int_equal(skv_calib_write(full, b), 0);
    size_t na, nb;
    unsigned char *da = slurp(a, &na), *db = slurp(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da); free(db);
    skv_calib_free(acc); skv_calib_free(full);
}

/* fork/exec args[0] (a path, or a name looked up in PATH); returns the raw wait status */
static int run_bin(const char *const *args) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) { dup2(devnull, 1); dup2(devnull, 2); }
        execvp(args[0], (char *const *)args);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return st;
}

static void test_kill_and_resume(void **state) {
    (void)state;
    if (!g_have_full) skip();
    if (access(g_bin, X_OK) != 0) skip();
    char out[400];
    snprintf(out, sizeof out, "%s/resumed.calib", test_tmpdir());
    unlink(out);
    char win[16], wins[16];
    snprintf(win, sizeof win, "%d", W_TEST);
    snprintf(wins, sizeof wins, "%d", N_TEST);
    /* checkpoint every 2 windows, killed in the middle of the 3rd: its forward passes are lost */
    const char *kill_args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                               "--windows", wins, "--checkpoint-every", "2", "--test-kill-after", "3",
                               "-o", out, "-q", NULL};
    int st = run_bin(kill_args);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
    skv_calib *part = skv_calib_read(out);
    if (!part) fail_msg("%s", skv_last_error());
    assert_int_equal(part->n_windows, 2);
    skv_calib_free(part);
    /* without --resume the existing file is refused */
    const char *refuse_args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                                 "--windows", wins, "-o", out, "-q", NULL};
    st = run_bin(refuse_args);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    /* resume: a second interruption (one more window), then to the end */
    const char *more_args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                               "--windows", wins, "--resume", "--max-windows", "1", "-o", out, "-q", NULL};
    st = run_bin(more_args);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *resume_args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                                 "--windows", wins, "--resume", "-o", out, "-q", NULL};
    st = run_bin(resume_args);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    size_t na, nb;
    unsigned char *da = slurp(out, &na), *db = slurp(g_full, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);   /* bit for bit */
    free(da); free(db);
    /* resuming with different settings is refused */
    const char *bad_args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                              "--windows", wins, "--sinks", "2", "--resume", "-o", out, "-q", NULL};
    st = run_bin(bad_args);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

/* ---- MPI: 2 ranks reduce to the same file as mapgen merging shards 0/2 and 1/2 ---- */

static void test_mpi_two_ranks(void **state) {
    (void)state;
    if (!g_have_smol) skip();
    char mpibin[520];
    snprintf(mpibin, sizeof mpibin, "%s-mpi", g_bin);
    if (access(mpibin, X_OK) != 0 || system("command -v mpirun >/dev/null 2>&1") != 0) {
        fprintf(stderr, "(MPI test skipped: needs `make MPI=1` (%s) and mpirun)\n", mpibin);
        skip();
    }
    char out[400], win[16];
    snprintf(out, sizeof out, "%s/mpi.calib", test_tmpdir());
    snprintf(win, sizeof win, "%d", W_TEST);
    unlink(out);
    setenv("OMP_NUM_THREADS", "1", 1);
    const char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", mpibin,
                          "--slm", g_smol, "--llm", g_smol, "--corpus", g_corpus, "--window", win,
                          "--windows", "4", "-o", out, "-q", NULL};
    int st = run_bin(args);
    unsetenv("OMP_NUM_THREADS");
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char part[420];
    snprintf(part, sizeof part, "%s.part-1-of-2", out);
    assert_int_equal(access(part, F_OK), -1);   /* shard checkpoints folded into OUT */
    /* reference: the two shards run separately and merged as mapgen does */
    skv_calib *acc = NULL;
    for (int i = 0; i < 2; i++) {
        char sp[400];
        snprintf(sp, sizeof sp, "%s/mpiref%d.calib", test_tmpdir(), i);
        skv_calib_run_opts o;
        base_opts(&o, sp);
        o.windows = 4; o.shard_index = i; o.shard_count = 2;
        if (skv_calib_run(&o, NULL)) fail_msg("%s", skv_last_error());
        skv_calib *c = skv_calib_read(sp);
        if (!c) fail_msg("%s", skv_last_error());
        if (!acc) { acc = c; continue; }
        assert_int_equal(skv_calib_merge(acc, c, "shard0", sp), 0);
        skv_calib_free(c);
    }
    char ref[400];
    snprintf(ref, sizeof ref, "%s/mpiref.calib", test_tmpdir());
    assert_int_equal(skv_calib_write(acc, ref), 0);
    skv_calib_free(acc);
    size_t na, nb;
    unsigned char *da = slurp(out, &na), *db = slurp(ref, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da); free(db);
}

/* ---- refusals ---- */

/* A tiny llama GGUF with its own (tiny) byte-level BPE vocabulary. */
static int write_tiny_with_tokenizer(const char *path) {
    tiny_model *m = tiny_model_new(SKV_ARCH_LLAMA, 7, 1, SKV_F32);
    if (!m) return -1;
    const skv_config *c = &m->cfg;
    gw_writer *w = gw_new();
    int rc = 0;
    rc |= gw_add_str(w, "general.architecture", "llama");
    rc |= gw_add_str(w, "general.name", "tiny-tok");
    rc |= gw_add_u32(w, "llama.block_count", (uint32_t)c->n_layer);
    rc |= gw_add_u32(w, "llama.context_length", (uint32_t)c->ctx_max);
    rc |= gw_add_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    rc |= gw_add_u32(w, "llama.feed_forward_length", (uint32_t)c->ffn_dim);
    rc |= gw_add_u32(w, "llama.attention.head_count", (uint32_t)c->n_head);
    rc |= gw_add_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_head);
    rc |= gw_add_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    rc |= gw_add_f32(w, "llama.rope.freq_base", c->rope_theta);
    rc |= gw_add_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    /* vocabulary: "a", "b", "ab", then filler tokens up to the model's vocab */
    int V = c->vocab;
    char **toks = calloc((size_t)V, sizeof *toks);
    int32_t *types = calloc((size_t)V, sizeof *types);
    if (!toks || !types) rc = -1;
    for (int i = 0; rc == 0 && i < V; i++) {
        toks[i] = malloc(16);
        if (!toks[i]) { rc = -1; break; }
        if (i == 0) strcpy(toks[i], "a");
        else if (i == 1) strcpy(toks[i], "b");
        else if (i == 2) strcpy(toks[i], "ab");
        else snprintf(toks[i], 16, "t%d", i);
        types[i] = 1;
    }
    static const char *merges[] = {"a b"};
    if (rc == 0) {
        rc |= gw_add_str(w, "tokenizer.ggml.model", "gpt2");
        rc |= gw_add_str(w, "tokenizer.ggml.pre", "qwen2");
        rc |= gw_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)V);
        rc |= gw_add_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        rc |= gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)V);
        rc |= gw_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    }
    int64_t C = c->dim, F = c->ffn_dim, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_kv_head * c->head_dim;
#define MAT(name, ptr, rows, cols) (rc |= gw_add_tensor_f32(w, name, SKV_F32, 2, (int64_t[]){(cols), (rows)}, ptr))
#define VEC(name, ptr, n) (rc |= gw_add_tensor_f32(w, name, SKV_F32, 1, (int64_t[]){(n)}, ptr))
    MAT("token_embd.weight", m->embd, (int64_t)V, C);
    for (int l = 0; l < c->n_layer && rc == 0; l++) {
        const tiny_layer *y = &m->layers[l];
        char n[96];
#define N(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        VEC(N("attn_norm.weight"), y->attn_norm, C);
        MAT(N("attn_q.weight"), y->wq, Q, C);   /* RoPE row order is irrelevant: random weights */
        MAT(N("attn_k.weight"), y->wk, KV, C);
        MAT(N("attn_v.weight"), y->wv, KV, C);
        MAT(N("attn_output.weight"), y->wo, C, Q);
        VEC(N("ffn_norm.weight"), y->ffn_norm, C);
        MAT(N("ffn_gate.weight"), y->gate, F, C);
        MAT(N("ffn_up.weight"), y->up, F, C);
        MAT(N("ffn_down.weight"), y->down, C, F);
#undef N
    }
    VEC("output_norm.weight", m->out_norm, C);
#undef MAT
#undef VEC
    if (rc == 0) rc = gw_write(w, path);
    gw_free(w);
    for (int i = 0; toks && i < V; i++) free(toks[i]);
    free(toks); free(types);
    tiny_model_free(m);
    return rc ? -1 : 0;
}

static void expect_refusal(const char *slm, const char *llm, const char *corpus, const char *needle1, const char *needle2) {
    char out[400];
    snprintf(out, sizeof out, "%s/refused.calib", test_tmpdir());
    unlink(out);
    skv_calib_run_opts o;
    skv_calib_run_defaults(&o);
    o.slm_path = slm; o.llm_path = llm;
    o.corpora[0] = corpus; o.n_corpora = 1;
    o.out = out; o.window = W_TEST; o.windows = 1;
    assert_int_equal(skv_calib_run(&o, NULL), -1);
    const char *e = skv_last_error();
    if (!strstr(e, needle1) || (needle2 && !strstr(e, needle2)))
        fail_msg("error '%s' lacks '%s' / '%s'", e, needle1, needle2 ? needle2 : "");
    assert_int_equal(access(out, F_OK), -1);   /* nothing written */
}

/* Two tokenizers that share almost nothing: the tiny one knows only "a", "b", "ab" and
 * fillers and drops every other byte, so SmolLM2 and it align on a few tokens at most. The
 * run still ends cleanly: a file whose alignment says how little matched, or a clear error
 * (no aligned tokens) and no file; never a crash. */
static void cross_tiny_one(const char *slm, const char *llm, const char *out) {
    skv_calib_run_opts o;
    base_opts(&o, out);
    o.slm_path = slm; o.llm_path = llm; o.windows = 1;
    unlink(out);
    if (skv_calib_run(&o, NULL) == 0) {
        skv_calib *c = skv_calib_read(out);
        if (!c) fail_msg("%s", skv_last_error());
        assert_true(c->align.present);
        assert_true(c->align.matched < c->align.llm_tokens / 2);
        skv_calib_free(c);
    } else {
        assert_non_null(strstr(skv_last_error(), "align"));
        assert_int_equal(access(out, F_OK), -1);
    }
}

static void test_cross_tokenizer_tiny(void **state) {
    (void)state;
    if (!g_have_smol) skip();
    char tiny[400], out[400];
    snprintf(tiny, sizeof tiny, "%s/tiny-tok.gguf", test_tmpdir());
    snprintf(out, sizeof out, "%s/tiny-cross.calib", test_tmpdir());
    if (write_tiny_with_tokenizer(tiny)) fail_msg("%s", skv_last_error());
    cross_tiny_one(g_smol, tiny, out);
    cross_tiny_one(tiny, g_smol, out);
}

static const char *header_of(const unsigned char *d, size_t n, size_t *hl) {
    if (n < 40) return NULL;
    uint64_t h;
    memcpy(&h, d + 16, 8);
    *hl = (size_t)h;
    return (const char *)d + 40;
}

/* SmolLM2 (SLM) against Qwen2.5-Coder 0.5B (LLM): windows of Qwen tokens, SmolLM2 reads the
 * same text, heads compared over the aligned tokens; the file records the alignment and the
 * split halves; mapgen refuses a profile but writes the report with --report-only. */
static void test_cross_tokenizer_qwen(void **state) {
    (void)state;
    if (!g_have_smol || access(g_qwen, R_OK) != 0) skip();
    char out[400], out2[400];
    snprintf(out, sizeof out, "%s/cross.calib", test_tmpdir());
    snprintf(out2, sizeof out2, "%s/cross-resumed.calib", test_tmpdir());
    skv_calib_run_opts o;
    base_opts(&o, out);
    o.llm_path = g_qwen;
    o.windows = 2;
    skv_calib_run_stats st;
    if (skv_calib_run(&o, &st)) fail_msg("%s", skv_last_error());
    assert_int_equal(st.done, 2);
    skv_calib *c = skv_calib_read(out);
    if (!c) fail_msg("%s", skv_last_error());
    assert_true(c->align.present);
    assert_int_equal(c->align.llm_tokens, 2 * W_TEST);
    assert_int_equal(c->tokens, 2 * W_TEST);
    assert_true(c->align.slm_tokens > W_TEST);
    /* English prose: most words are single tokens in both vocabularies */
    assert_true(c->align.matched > c->align.llm_tokens / 2);
    assert_true(c->align.matched <= c->align.llm_tokens && c->align.matched <= c->align.slm_tokens);
    assert_int_equal(c->n_windows, 2);
    assert_non_null(c->half);   /* split halves as for one tokenizer: window 1 is the odd half */
    assert_int_equal(skv_calib_odd_windows(c), 1);
    float *m0 = malloc((size_t)c->n_llm * c->n_slm * sizeof(float)), *m1 = malloc((size_t)c->n_llm * c->n_slm * sizeof(float));
    assert_non_null(m0); assert_non_null(m1);
    assert_int_equal(skv_calib_half_mean(c, SKV_METRIC_COSINE, false, m0), 0);
    assert_int_equal(skv_calib_half_mean(c, SKV_METRIC_COSINE, true, m1), 0);
    assert_true(m0[0] > 0 && m1[0] > 0 && m0[0] != m1[0]);
    free(m0); free(m1);
    skv_calib_free(c);
    size_t n = 0, hl = 0;
    unsigned char *d = slurp(out, &n);
    const char *h = header_of(d, n, &hl);
    assert_non_null(h);
    char *hdr = strndup(h, hl);
    assert_non_null(strstr(hdr, "\"alignment\":{\"method\":\"byte-span\""));
    free(hdr);
    free(d);
    /* shared-tokenizer files carry no alignment object */
    d = slurp(g_full, &n);
    h = header_of(d, n, &hl);
    hdr = strndup(h, hl);
    assert_null(strstr(hdr, "alignment"));
    free(hdr);
    free(d);
    /* one window, then resumed: the same file as the uninterrupted run */
    base_opts(&o, out2);
    o.llm_path = g_qwen;
    o.windows = 2;
    o.max_new_windows = 1;
    if (skv_calib_run(&o, NULL)) fail_msg("%s", skv_last_error());
    o.max_new_windows = 0;
    o.resume = true;
    if (skv_calib_run(&o, &st)) fail_msg("%s", skv_last_error());
    assert_int_equal(st.skipped, 1);
    size_t n2 = 0;
    unsigned char *a = slurp(out, &n), *b = slurp(out2, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(a, b, n);
    free(a); free(b);
    /* a cross file does not merge with a shared-tokenizer one */
    skv_calib *x = skv_calib_read(out), *y = skv_calib_read(g_full);
    assert_non_null(x); assert_non_null(y);
    assert_int_equal(skv_calib_compatible(x, y, "x", "y"), -1);
    skv_calib_free(x); skv_calib_free(y);
    /* mapgen: no profile (the runtime needs one token stream), but the report */
    char mapgen[512], prof[400], html[400];
    test_bin_path(mapgen, sizeof mapgen, "mapgen");
    if (access(mapgen, X_OK) != 0) skip();
    snprintf(prof, sizeof prof, "%s/cross.skvprof", test_tmpdir());
    snprintf(html, sizeof html, "%s/cross.html", test_tmpdir());
    const char *refuse[] = {mapgen, out, "-o", prof, NULL};
    int rs = run_bin(refuse);
    assert_true(WIFEXITED(rs) && WEXITSTATUS(rs) == 1);
    assert_int_equal(access(prof, F_OK), -1);
    const char *report[] = {mapgen, out, "--report-only", "--report", html, NULL};
    rs = run_bin(report);
    assert_true(WIFEXITED(rs) && WEXITSTATUS(rs) == 0);
    assert_int_equal(access(html, R_OK), 0);
    assert_int_equal(access(prof, F_OK), -1);
}

/* corpora are recorded by name, never by the path of one machine's copy */
static void test_corpus_names(void **state) {
    (void)state;
    if (!g_have_full) skip();
    skv_calib *c = skv_calib_read(g_full);
    if (!c) fail_msg("%s", skv_last_error());
    assert_string_equal(c->set.corpora[0].name, "corpus.txt");   /* default: the file name */
    skv_calib_free(c);
    /* a bad name is refused before anything runs */
    char out[400];
    snprintf(out, sizeof out, "%s/named.calib", test_tmpdir());
    skv_calib_run_opts o;
    base_opts(&o, out);
    const char *bad[] = {"dir/name", "", "..", "a b", "x;rm"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o.corpus_names[0] = bad[i];
        assert_int_equal(skv_calib_run(&o, NULL), -1);
        assert_non_null(strstr(skv_last_error(), "corpus name"));
        assert_int_equal(access(out, F_OK), -1);
    }
    /* the tool: NAME=FILE records NAME; the same corpus under another name merges */
    if (access(g_bin, X_OK) != 0) skip();
    char arg[400], win[16];
    snprintf(arg, sizeof arg, "essay-1=%s", g_corpus);
    snprintf(win, sizeof win, "%d", W_TEST);
    const char *args[] = {g_bin, "--slm", g_smol, "--llm", g_smol, "--corpus", arg, "--window", win,
                          "--windows", "1", "-o", out, "-q", NULL};
    int st = run_bin(args);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    c = skv_calib_read(out);
    if (!c) fail_msg("%s", skv_last_error());
    assert_string_equal(c->set.corpora[0].name, "essay-1");
    assert_int_equal(c->n_windows, 1);
    skv_calib_free(c);
}

/* --until-stable: windows in the spread order, stop at the first checkpoint where the
 * split halves agree (a self pair by cosine does once each half has 4 windows; top-3
 * Jaccard over 28 keys ties too often to stop there) */
static void test_until_stable(void **state) {
    (void)state;
    if (!g_have_smol) skip();
    char out[400];
    snprintf(out, sizeof out, "%s/stable.calib", test_tmpdir());
    skv_calib_run_opts o;
    base_opts(&o, out);
    o.windows = 12;
    o.checkpoint_every = 2;
    o.until_stable = 0.01;
    o.metrics = SKV_METRIC_BIT(SKV_METRIC_COSINE);
    skv_calib_run_stats st;
    if (skv_calib_run(&o, &st)) fail_msg("%s", skv_last_error());
    assert_true(st.stable);
    assert_int_equal(st.done, 2 * SKV_STABLE_MIN_HALF);
    assert_int_equal(st.stable_checks, 1);
    /* heads of the SLM's last layer lie beyond the eps depth: they map elsewhere, near-tied */
    assert_true(st.stable_loss <= 0.01 && st.stable_agree > 0.9);
    skv_calib *c = skv_calib_read(out);
    if (!c) fail_msg("%s", skv_last_error());
    /* pairs 0, 4, 2, 1 of 6 (bit-reversed): windows 0-5 and 8-9, 4 of each parity */
    int want[8] = {0, 1, 2, 3, 4, 5, 8, 9};
    assert_int_equal(c->n_windows, 8);
    for (int i = 0; i < 8; i++) assert_true(skv_calib_has_window(c, want[i]));
    assert_int_equal(skv_calib_odd_windows(c), 4);
    skv_calib_free(c);
    /* a loss outside (0, 1) is refused */
    o.until_stable = 1.5;
    assert_int_equal(skv_calib_run(&o, NULL), -1);
}

static void test_bad_corpora(void **state) {
    (void)state;
    char empty[400], missing[400], shorter[400];
    snprintf(empty, sizeof empty, "%s/empty.txt", test_tmpdir());
    snprintf(missing, sizeof missing, "%s/no-such-corpus.txt", test_tmpdir());
    snprintf(shorter, sizeof shorter, "%s/short.txt", test_tmpdir());
    assert_int_equal(write_text(empty, "", 0), 0);
    assert_int_equal(write_text(shorter, "Too short.", 10), 0);
    expect_refusal(g_smol, g_smol, empty, empty, "empty");
    expect_refusal(g_smol, g_smol, missing, missing, NULL);
    expect_refusal(g_smol, g_smol, test_tmpdir(), test_tmpdir(), NULL);   /* a directory is not a corpus */
    if (!g_have_smol) skip();   /* corpora are checked before the models load; this one needs the tokenizer */
    expect_refusal(g_smol, g_smol, shorter, shorter, "fewer than one window");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_shards_merge),
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_cross_tokenizer_tiny),
        cmocka_unit_test(test_cross_tokenizer_qwen),
        cmocka_unit_test(test_corpus_names),
        cmocka_unit_test(test_until_stable),
        cmocka_unit_test(test_bad_corpora),
        cmocka_unit_test(test_mpi_two_ranks),
    };
    return cmocka_run_group_tests(tests, setup, test_tmpdir_teardown);
}
