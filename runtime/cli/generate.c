/* generate.c: `smallkv generate`: text generation over the compressed KV cache, written
 * against the public API (include/smallkv.h).
 *   no --context: each --prompt is prefilled (exact attention, then the policy compresses)
 *                 and answered in its own session;
 *   --context F:  F is prefilled and compressed before any prompt is known; each --prompt
 *                 then enters as decode steps (query-agnostic setting) in a fork of that
 *                 compressed state, so every prompt continues from the same context.
 * Tokens stream to stdout; --stats prints memory per tier and speed on stderr. With --draft
 * K the answers come from smallkv_generate with the SLM drafting (speculative decoding). */
#include "cli.h"
#include "include/smallkv.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *GEN_USAGE =
    "usage: smallkv generate --llm MODEL [--slm SLM --profile P] [--policy NAME --budget F]\n"
    "                        [--prompt TEXT]... [--context FILE] [options]\n"
    "       smallkv generate MODEL --prompt TEXT [options]      (policy full)\n"
    "  --llm MODEL      the model that generates (GGUF file or Hugging Face directory)\n"
    "  --slm MODEL      small model guiding the cache (policy smallkv)\n"
    "  --profile P      SmallKV profile for the pair (profiles/*.skvprof)\n"
    "  --policy SPEC    a policy, optionally with options: NAME[:OPTION=VALUE...] (policies\n"
    "                   below; default full, smallkv when --slm is given)\n"
    "  --budget F       hot KV cache as a fraction of the sequence, in (0, 1] (default 0.2;\n"
    "                   1 for full)\n"
    "  --granularity G  kv (default): one token set per KV head; head: per attention head, the\n"
    "                   KV head storing their union (h2o, smallkv)\n"
    "  --budget-base B  length (default): of the current length at every step; prompt: of the\n"
    "                   prompt length at the first compression, fixed (H2O's generation code)\n"
    "  --prompt TEXT    a prompt (repeatable: each answered from the same context)\n"
    "  --context FILE   document prefilled and compressed before the prompts arrive\n"
    "  -n N             tokens to generate per prompt at most (default 128)\n"
    "  --chat           wrap each prompt in the model's chat template\n"
    "  --system S       system message for --chat\n"
    "  --temp T         sampling temperature (default 0 = greedy); --seed S (default 1234)\n"
    "  --threads N      OpenMP threads (default: all cores)\n"
    "  --ctx N          longest sequence in tokens (default: what the input needs, at most\n"
    "                   the model's context)\n"
    "  --kv f16|f32     KV element type (default f16)\n"
    "  --prefill-attn M exact (default: each prompt row gets a decode step's bits) or bf16:\n"
    "                   AMX-BF16 tile products for long prompts, faster time to first token\n"
    "                   (CPUs with AMX-BF16; docs/performance.md)\n"
    "  --stats          per-tier memory, prefill/decode tokens/s, TTFT and TPOT on stderr\n"
    "  --device cpu|cuda  where it runs (default cpu); cuda (make CUDA=1, a GPU): policy full\n"
    "                   wholly on the GPU; the other policies (those the help marks GPU decode)\n"
    "                   prefill on the CPU and decode on the GPU\n"
    "  --draft K        speculative decoding: the --slm model drafts up to K tokens (at most 10\n"
    "                   for quantised models) that the LLM checks in one pass (CPU); greedy, the\n"
    "                   output is plain greedy decoding's, token for token; with --temp T the\n"
    "                   SLM samples its drafts and speculative sampling keeps the output\n"
    "                   distributed as the LLM's own samples (other draws). Default policy:\n"
    "                   smallkv with --profile (its SLM pass both picks the hot set and drafts),\n"
    "                   else full\n"
    "  --draft-adapt    K is the most a round drafts: 2 more after a round wholly accepted,\n"
    "                   1 fewer after a rejection\n"
    "  --draft-vocab N  the SLM drafts from the logits of token ids < N only (0: all, the\n"
    "                   default): its LM head reads that share of its rows (BPE ids follow\n"
    "                   merge order: the frequent tokens first); output unchanged\n"
    "  --OPTION VALUE   any option of the chosen policy (listed below), e.g. --heavy 0.3,\n"
    "                   --score=acc, --no-saliency (a switch: on), --key-norm=false (off); an\n"
    "                   option the policy lacks is ignored with a note\n"
    "Exit status: 0 ok, 1 error (one line on stderr), 2 bad usage.\n"
    "Policies and their options:\n";

#define MAX_POLICY_OPTS 32

#define MAX_PROMPTS 64

typedef struct {
    float temp;
    unsigned long long rng;
    bool stats;
    int n_gen;
    int draft;
} gen_cfg;

static void human(size_t b, char *buf, size_t n) {
    if (b >= (1u << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1u << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

static void print_stats(const smallkv_session *s, const smallkv_session *ctx_sess) {
    smallkv_stats st, cs;
    smallkv_get_stats(s, &st);
    char h[32], c[32], w[32], sc[32], ss[32], f[32];
    human(st.hot_bytes, h, sizeof h); human(st.cold_bytes, c, sizeof c); human(st.slm_weight_bytes, w, sizeof w);
    human(st.slm_cache_bytes, sc, sizeof sc); human(st.slm_score_bytes, ss, sizeof ss); human(st.full_bytes, f, sizeof f);
    if (strcmp(smallkv_session_device(s), "cpu")) fprintf(stderr, "[stats] device %s\n", smallkv_session_device(s));
    fprintf(stderr, "[stats] %d tokens; LLM KV hot %s (%.1f%% of the full cache %s, %.1f tokens per lane), cold %s\n",
            st.length, h, st.full_bytes ? 100.0 * st.hot_bytes / st.full_bytes : 0, f, st.hot_tokens, c);
    if (st.slm_weight_bytes)
        fprintf(stderr, "[stats] SLM weights %s, SLM KV %s, SLM scores %s; restores from cold %d\n", w, sc, ss, st.restores);
    else if (st.restores)
        fprintf(stderr, "[stats] restores from cold %d\n", st.restores);
    if (st.score_pass_peak_bytes) {   /* kvzip's context reconstruction */
        char pk[32];
        human(st.score_pass_peak_bytes, pk, sizeof pk);
        fprintf(stderr, "[stats] scoring pass (extra prefill) %.2f s, peak %s\n", st.score_pass_seconds, pk);
    }
    if (ctx_sess) {
        smallkv_get_stats(ctx_sess, &cs);
        fprintf(stderr, "[stats] context prefill %d tokens in %.2f s (%.1f tok/s)\n", cs.prefill_tokens,
                cs.prefill_seconds, cs.prefill_tps);
    }
    if (st.prefill_tokens)
        fprintf(stderr, "[stats] prefill %d tokens in %.2f s (%.1f tok/s)\n", st.prefill_tokens, st.prefill_seconds,
                st.prefill_tps);
    fprintf(stderr, "[stats] decode %d steps in %.2f s (%.2f tok/s); TTFT %.3f s, TPOT %.1f ms\n", st.decode_tokens,
            st.decode_seconds, st.decode_tps, st.ttft, st.tpot * 1e3);
    if (st.spec_passes)
        fprintf(stderr, "[stats] speculative: %d LLM passes for %d tokens (%.3f per token), %d of %d drafts accepted "
                "(%.1f%%), %.2f accepted per pass\n", st.spec_passes, st.decode_tokens,
                st.decode_tokens ? (double)st.spec_passes / st.decode_tokens : 0, st.spec_accepted, st.spec_drafted,
                st.spec_drafted ? 100.0 * st.spec_accepted / st.spec_drafted : 0, (double)st.spec_accepted / st.spec_passes);
    if (st.spec_passes)
        fprintf(stderr, "[stats] speculative rounds: draft %.2f s, fork %.2f s, verify %.2f s, accept + rollback "
                "%.2f s (of decode %.2f s)\n", st.spec_draft_seconds, st.spec_fork_seconds, st.spec_verify_seconds,
                st.spec_rollback_seconds, st.decode_seconds);
}

static int print_token(int id, const char *b, size_t len, void *user) {
    (void)id; (void)user;
    fwrite(b, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* Answer from the session's current logits: sample, stream, step. */
static int answer(smallkv_pair *p, smallkv_session *s, gen_cfg *g) {
    if (g->draft) {   /* the SLM drafting: greedy's tokens, or samples of the LLM's distribution */
        /* each answer gets its own seed from the run's (an LCG step), as the plain loop
         * below continues one stream across answers */
        if (g->temp > 0 && smallkv_set_sampling(s, g->temp, g->rng)) return -1;
        g->rng = g->rng * 6364136223846793005ULL + 1442695040888963407ULL;
        if (smallkv_generate(s, g->n_gen, print_token, NULL) < 0) return -1;
        fputc('\n', stdout);
        fflush(stdout);
        return 0;
    }
    for (int produced = 0; produced < g->n_gen; produced++) {
        int next = smallkv_sample(s, g->temp, &g->rng);
        if (next < 0) return -1;
        if (smallkv_is_stop(p, next)) break;
        size_t len;
        const char *b = smallkv_token_bytes(p, next, &len);
        if (b) { fwrite(b, 1, len, stdout); fflush(stdout); }
        if (produced + 1 == g->n_gen) break;
        if (smallkv_step(s, next)) return -1;
    }
    fputc('\n', stdout);
    fflush(stdout);
    return 0;
}

/* the whole file as a NUL-terminated string; NULL after printing why */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *t = NULL;
    size_t cap = 0, n = 0;
    if (!f) { fprintf(stderr, "smallkv: %s: cannot open\n", path); return NULL; }
    for (;;) {
        if (n + 65536 + 1 > cap) {
            char *q = realloc(t, cap = 2 * cap + 65536 + 1);
            if (!q) { fprintf(stderr, "smallkv: %s: out of memory\n", path); free(t); fclose(f); return NULL; }
            t = q;
        }
        size_t got = fread(t + n, 1, 65536, f);
        n += got;
        if (got < 65536) break;
    }
    if (ferror(f)) { fprintf(stderr, "smallkv: %s: read error\n", path); free(t); fclose(f); return NULL; }
    fclose(f);
    t[n] = 0;
    *len = n;
    return t;
}

static int tok_prompt(smallkv_pair *p, const char *text, bool chat, const char *system, int flags, int **out) {
    int need = chat ? smallkv_tokenize_chat(p, system, text, NULL, 0) : smallkv_tokenize(p, text, flags, NULL, 0);
    if (need < 0) return -1;
    int *ids = malloc(((size_t)need + 1) * sizeof(int));
    if (!ids) { fprintf(stderr, "smallkv: out of memory for %d prompt ids\n", need); return -1; }
    int got = chat ? smallkv_tokenize_chat(p, system, text, ids, need) : smallkv_tokenize(p, text, flags, ids, need);
    if (got != need) { free(ids); return -1; }
    *out = ids;
    return need;
}

int cmd_generate(int argc, char **argv) {
    const char *llm = NULL, *slm = NULL, *profile = NULL, *context = NULL, *system = NULL, *kv = "f16";
    const char *device = "cpu";
    const char *prompts[MAX_PROMPTS];
    int n_prompts = 0, threads = 0, ctx = 0, seed = 1234;
    bool chat = false, budget_set = false, policy_set = false;
    int draft_adapt = 0, draft_vocab = 0;
    float budget = 0.2f;
    smallkv_policy_opt popts[MAX_POLICY_OPTS];
    char popt_names[MAX_POLICY_OPTS][64];
    int n_popts = 0;
    gen_cfg g = {.n_gen = 128};
    smallkv_options o;
    smallkv_options_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        int takes = 0;
        char flag[64];
        const char *inline_value = NULL;
        if (cli_is_help(a)) { fputs(GEN_USAGE, stdout); fputs(smallkv_policies_help(), stdout); return CLI_OK; }
        else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) {
            if (n_prompts == MAX_PROMPTS) return cli_usage_error(GEN_USAGE, "generate: at most %d prompts", MAX_PROMPTS);
            ok = cli_str(argc, argv, &i, &prompts[n_prompts]);
            n_prompts += ok;
        }
        else if (!strcmp(a, "--llm")) ok = cli_str(argc, argv, &i, &llm);
        else if (!strcmp(a, "--slm")) ok = cli_str(argc, argv, &i, &slm);
        else if (!strcmp(a, "--profile")) ok = cli_str(argc, argv, &i, &profile);
        else if (!strcmp(a, "--context")) ok = cli_str(argc, argv, &i, &context);
        else if (!strcmp(a, "--policy")) { ok = cli_str(argc, argv, &i, &o.policy); policy_set = true; }
        else if (!strcmp(a, "--budget")) { ok = cli_float(argc, argv, &i, -1e9, 1e9, &budget); budget_set = true; }
        else if (!strcmp(a, "--granularity")) {
            const char *v = NULL;
            if ((ok = cli_str(argc, argv, &i, &v)) && strcmp(v, "kv") && strcmp(v, "head"))
                return cli_usage_error(GEN_USAGE, "generate: --granularity must be kv or head, not '%s'", v);
            o.per_head = ok && !strcmp(v, "head");
        }
        else if (!strcmp(a, "--budget-base")) {
            const char *v = NULL;
            if ((ok = cli_str(argc, argv, &i, &v)) && strcmp(v, "length") && strcmp(v, "prompt"))
                return cli_usage_error(GEN_USAGE, "generate: --budget-base must be length or prompt, not '%s'", v);
            o.budget_prompt = ok && !strcmp(v, "prompt");
        }
        else if (!strcmp(a, "-n")) ok = cli_int(argc, argv, &i, 0, 1 << 24, &g.n_gen);
        else if (!strcmp(a, "--draft")) ok = cli_int(argc, argv, &i, 0, 63, &g.draft);
        else if (!strcmp(a, "--draft-adapt")) draft_adapt = 1;
        else if (!strcmp(a, "--draft-vocab")) ok = cli_int(argc, argv, &i, 0, 1 << 24, &draft_vocab);
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--system")) ok = cli_str(argc, argv, &i, &system);
        else if (!strcmp(a, "--temp")) ok = cli_float(argc, argv, &i, 0, 100, &g.temp);
        else if (!strcmp(a, "--seed")) ok = cli_int(argc, argv, &i, 0, 2147483647L, &seed);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) ok = cli_int(argc, argv, &i, 1, 4096, &threads);
        else if (!strcmp(a, "--ctx")) ok = cli_int(argc, argv, &i, 2, 1 << 24, &ctx);
        else if (!strcmp(a, "--kv")) ok = cli_str(argc, argv, &i, &kv);
        else if (!strcmp(a, "--prefill-attn")) ok = cli_prefill_attn(argc, argv, &i);
        else if (!strcmp(a, "--device")) ok = cli_str(argc, argv, &i, &device);
        else if (!strcmp(a, "--stats") || !strcmp(a, "--verbose") || !strcmp(a, "-v")) g.stats = true;
        else if (cli_flag_name(a, flag, sizeof flag, &inline_value) && smallkv_policy_option(flag, &takes)) {
            /* a policy option: --NAME VALUE, --NAME=VALUE, or a bare --NAME turning a switch on */
            if (n_popts == MAX_POLICY_OPTS) return cli_usage_error(GEN_USAGE, "generate: at most %d policy options", MAX_POLICY_OPTS);
            memcpy(popt_names[n_popts], flag, sizeof flag);
            popts[n_popts] = (smallkv_policy_opt){.name = popt_names[n_popts], .value = inline_value};
            if (takes && !inline_value) ok = cli_str(argc, argv, &i, &popts[n_popts].value);
            n_popts += ok;
        }
        else if (a[0] == '-' && a[1]) return cli_usage_error(GEN_USAGE, "generate: unknown option '%s'", a);
        else if (!llm) llm = a;
        else return cli_usage_error(GEN_USAGE, "generate: unexpected argument '%s'", a);
        if (!ok) return cli_usage_error(GEN_USAGE, NULL);
    }
    if (!llm) return cli_usage_error(GEN_USAGE, "generate: missing --llm MODEL");
    if (!n_prompts && !context) return cli_usage_error(GEN_USAGE, "generate: give --prompt TEXT or --context FILE");
    if (strcmp(kv, "f16") && strcmp(kv, "f32")) return cli_usage_error(GEN_USAGE, "generate: --kv must be f16 or f32, not '%s'", kv);
    if (system && !chat) return cli_usage_error(GEN_USAGE, "generate: --system needs --chat");
    if (profile && !slm) return cli_usage_error(GEN_USAGE, "generate: --profile needs --slm");
    if (strcmp(device, "cpu") && strcmp(device, "cuda"))
        return cli_usage_error(GEN_USAGE, "generate: --device must be cpu or cuda, not '%s'", device);
    if (g.draft && !slm) return cli_usage_error(GEN_USAGE, "generate: --draft needs --slm MODEL (the drafter)");
    if (draft_adapt && !g.draft) return cli_usage_error(GEN_USAGE, "generate: --draft-adapt needs --draft K");
    if (draft_vocab && !g.draft) return cli_usage_error(GEN_USAGE, "generate: --draft-vocab needs --draft K");
    if (!policy_set) o.policy = slm && (profile || !g.draft) ? "smallkv" : "full";
    o.draft = g.draft;
    o.draft_adapt = draft_adapt;
    o.draft_vocab = draft_vocab;
    /* the policy: --policy and the options given as flags, passed by name; a flag the
     * policy does not have is noted and skipped */
    o.policy_opts = popts;
    o.n_policy_opts = n_popts;
    o.policy_opts_lenient = 1;
    unsigned needs = 0;
    unsigned long long skipped = 0;
    const char *label = NULL;
    o.budget = 1;   /* the budget is checked below, once the policy says whether it takes one */
    if (smallkv_options_check(&o, &needs, &skipped, &label)) { cli_fail(NULL); return CLI_ERR; }
    for (int i = 0; i < n_popts; i++)
        if (skipped >> i & 1) fprintf(stderr, "smallkv: note: policy %s has no option --%s (ignored)\n", o.policy, popts[i].name);
    if (!budget_set && (needs & SMALLKV_NO_BUDGET)) budget = 1;
    o.budget = budget;
    o.kv_f32 = !strcmp(kv, "f32");
    g.rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
    cli_set_threads(threads);

    /* checks that need no model: one line, exit 1 */
    if (!(budget > 0 && budget <= 1)) { fprintf(stderr, "smallkv: --budget %g is not a fraction in (0, 1]\n", budget); return CLI_ERR; }
    for (int i = 0; i < n_prompts; i++)
        if (!prompts[i][0]) { fprintf(stderr, "smallkv: prompt %d is empty\n", i + 1); return CLI_ERR; }
    const char *spec = label;
    const int pname_len = (int)strcspn(spec, ":,");
    if (needs & SMALLKV_NEEDS_SLM) {
        if (!slm) { fprintf(stderr, "smallkv: policy %.*s needs --slm MODEL\n", pname_len, spec); return CLI_ERR; }
        if (!profile && (needs & SMALLKV_NEEDS_PROFILE)) {
            fprintf(stderr, "smallkv: policy %.*s needs --profile P for the pair (or --mapping online)\n", pname_len, spec);
            return CLI_ERR;
        }
    } else if (slm && !g.draft) {
        fprintf(stderr, "smallkv: --slm is only used by a policy that runs a small model (policy is %.*s)\n", pname_len,
                spec);
        return CLI_ERR;
    }
    const char *files[] = {llm, slm, profile, context};
    for (int i = 0; i < 4; i++)
        if (files[i] && access(files[i], R_OK) != 0) { fprintf(stderr, "smallkv: %s: no such file or not readable\n", files[i]); return CLI_ERR; }
    if (strcmp(device, "cpu") && (needs & SMALLKV_NO_GPU)) {
        fprintf(stderr, "smallkv: --device %s: policy %.*s is not available there\n", device, pname_len, spec);
        return CLI_ERR;
    }
    o.device = device;

    int rc = CLI_ERR, n_ctx = 0, *cids = NULL, *pids[MAX_PROMPTS] = {0}, np[MAX_PROMPTS] = {0};
    char *ctext = NULL;
    smallkv_session *base = NULL, *s = NULL;
    smallkv_pair *p = smallkv_pair_load(llm, slm);
    if (!p) { cli_fail(NULL); goto done; }
    if (profile && smallkv_pair_load_profile(p, profile)) { cli_fail(NULL); goto done; }

    /* tokenise everything first: lengths decide the context size */
    if (context) {
        size_t len;
        if (!(ctext = read_text(context, &len))) goto done;
        if (!ctext[0]) { fprintf(stderr, "smallkv: %s: the context file is empty\n", context); goto done; }
        if ((n_ctx = tok_prompt(p, ctext, false, NULL, SMALLKV_TOK_BOS, &cids)) < 0) { cli_fail(context); goto done; }
    }
    int longest = 0;
    for (int i = 0; i < n_prompts; i++) {
        /* after a context the prompt continues it (no BOS) */
        np[i] = tok_prompt(p, prompts[i], chat, system, context ? 0 : SMALLKV_TOK_BOS, &pids[i]);
        if (np[i] < 0) { cli_fail("tokenize"); goto done; }
        if (np[i] == 0) { fprintf(stderr, "smallkv: prompt %d is empty (no tokens)\n", i + 1); goto done; }
        if (np[i] > longest) longest = np[i];
    }
    const int model_ctx = smallkv_context_length(p);
    const long need = (long)n_ctx + longest + g.n_gen + 1;
    const int cap = ctx > 0 ? ctx : (int)(need < model_ctx ? need : model_ctx);
    if (n_ctx + longest + 1 > cap) {
        fprintf(stderr, "smallkv: the input has %d tokens (context %d + prompt %d), more than the %s of %d tokens\n",
                n_ctx + longest, n_ctx, longest, ctx > 0 ? "--ctx limit" : "model's context", cap);
        goto done;
    }
    o.max_ctx = cap;
    if (!(base = smallkv_session_new(p, &o))) { cli_fail(NULL); goto done; }

    if (context) {
        if (smallkv_prefill(base, cids, n_ctx)) { cli_fail(context); goto done; }
        if (!n_prompts) {
            if (answer(p, base, &g)) { cli_fail(NULL); goto done; }
            if (g.stats) print_stats(base, NULL);
        }
        for (int i = 0; i < n_prompts; i++) {
            /* every prompt continues from the same compressed context */
            if (!(s = smallkv_fork(base))) { cli_fail(NULL); goto done; }
            if (n_prompts > 1) { printf("> %s\n", prompts[i]); fflush(stdout); }
            for (int k = 0; k < np[i]; k++)
                if (smallkv_step(s, pids[i][k])) { cli_fail(NULL); goto done; }
            if (answer(p, s, &g)) { cli_fail(NULL); goto done; }
            if (g.stats) print_stats(s, i == 0 ? base : NULL);
            smallkv_session_free(s);
            s = NULL;
        }
    } else {
        for (int i = 0; i < n_prompts; i++) {
            if (i > 0) {
                smallkv_session_free(base);
                if (!(base = smallkv_session_new(p, &o))) { cli_fail(NULL); goto done; }
            }
            if (n_prompts > 1) { printf("> %s\n", prompts[i]); fflush(stdout); }
            if (smallkv_prefill(base, pids[i], np[i])) { cli_fail(NULL); goto done; }
            if (answer(p, base, &g)) { cli_fail(NULL); goto done; }
            if (g.stats) print_stats(base, NULL);
        }
    }
    rc = CLI_OK;
done:
    smallkv_session_free(s);
    smallkv_session_free(base);
    smallkv_pair_free(p);
    for (int i = 0; i < n_prompts; i++) free(pids[i]);
    free(cids);
    free(ctext);
    return rc;
}
