/* generate.c: `smallkv generate`: prefill the prompt in blocks, then decode one token at a
 * time, streaming each token's bytes to stdout; greedy unless --temp > 0. */
#include "cli.h"
#include "../forward.h"
#include "../tokenizer.h"
#include "../util.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *GEN_USAGE =
    "usage: smallkv generate MODEL --prompt TEXT [options]\n"
    "  --prompt TEXT    the prompt (required)\n"
    "  -n N             tokens to generate at most (default 128)\n"
    "  --chat           wrap the prompt in the model's chat template\n"
    "  --system S       system message for --chat (default: the template's)\n"
    "  --temp T         sampling temperature (default 0 = greedy)\n"
    "  --seed S         random seed for sampling (default 1234)\n"
    "  --threads N      OpenMP threads (default: all cores)\n"
    "  --ctx N          KV cache capacity in tokens (default: prompt + n, at most the model's context)\n"
    "  --kv f16|f32     KV cache element type (default f16)\n"
    "  --stats, --verbose  print prefill/decode speed and time to first token on stderr\n"
    "Generation stops at the model's stop token or after N tokens.\n";

/* xorshift64*: small reproducible generator for sampling. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* Sample from softmax(x / temp) (x is overwritten). */
static int sample(float *x, int n, float temp, uint64_t *rng) {
    if (temp <= 0) return argmax(x, n);
    float mx = x[argmax(x, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf((x[i] - mx) / temp); sum += x[i]; }
    double r = (rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int i = 0; i < n; i++) { acc += x[i]; if (acc >= r) return i; }
    return n - 1;
}

int cmd_generate(int argc, char **argv) {
    const char *path = NULL, *prompt = NULL, *system = NULL, *kv = "f16";
    int n_gen = 128, threads = 0, ctx = 0, seed = 1234;
    bool chat = false, stats = false;
    float temp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (cli_is_help(a)) { fputs(GEN_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) ok = cli_str(argc, argv, &i, &prompt);
        else if (!strcmp(a, "-n")) ok = cli_int(argc, argv, &i, 0, 1 << 24, &n_gen);
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--system")) ok = cli_str(argc, argv, &i, &system);
        else if (!strcmp(a, "--temp")) ok = cli_float(argc, argv, &i, 0, 100, &temp);
        else if (!strcmp(a, "--seed")) ok = cli_int(argc, argv, &i, 0, 2147483647L, &seed);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) ok = cli_int(argc, argv, &i, 1, 4096, &threads);
        else if (!strcmp(a, "--ctx")) ok = cli_int(argc, argv, &i, 1, 1 << 24, &ctx);
        else if (!strcmp(a, "--kv")) ok = cli_str(argc, argv, &i, &kv);
        else if (!strcmp(a, "--stats") || !strcmp(a, "--verbose") || !strcmp(a, "-v")) stats = true;
        else if (a[0] == '-' && a[1]) return cli_usage_error(GEN_USAGE, "generate: unknown option '%s'", a);
        else if (!path) path = a;
        else return cli_usage_error(GEN_USAGE, "generate: unexpected argument '%s'", a);
        if (!ok) return cli_usage_error(GEN_USAGE, NULL);
    }
    if (!path) return cli_usage_error(GEN_USAGE, "generate: missing MODEL");
    if (!prompt) return cli_usage_error(GEN_USAGE, "generate: missing --prompt");
    if (strcmp(kv, "f16") && strcmp(kv, "f32")) return cli_usage_error(GEN_USAGE, "generate: --kv must be f16 or f32, not '%s'", kv);
    if (system && !chat) return cli_usage_error(GEN_USAGE, "generate: --system needs --chat");
    cli_set_threads(threads);

    skv_model *m = cli_load(path);
    if (!m) return CLI_ERR;
    int rc = CLI_ERR;
    int *ids = NULL;
    char *text = NULL;
    skv_state *s = NULL;
    const skv_tokenizer *tok = m->tok;
    if (!tok) { fprintf(stderr, "smallkv: %s: the model has no tokenizer\n", path); goto done; }

    /* prompt -> ids */
    bool special = chat;
    if (chat) {
        text = skv_chat_prompt(tok, system, prompt);
        if (!text) { cli_fail(path); goto done; }
    } else {
        text = skv_strdup(prompt);
        if (!text) { cli_fail(NULL); goto done; }
    }
    int bos = (!chat && skv_tok_add_bos(tok) && skv_tok_bos(tok) >= 0) ? 1 : 0;
    int need = skv_tokenize(tok, text, strlen(text), special, NULL, 0);
    if (need < 0) { cli_fail("tokenize"); goto done; }
    ids = skv_malloc(((size_t)need + bos + 1) * sizeof(int), "prompt ids");
    if (!ids) { cli_fail(NULL); goto done; }
    if (bos) ids[0] = skv_tok_bos(tok);
    if (skv_tokenize(tok, text, strlen(text), special, ids + bos, need) != need) { cli_fail("tokenize"); goto done; }
    int n_prompt = need + bos;
    if (n_prompt == 0) { fprintf(stderr, "smallkv: the prompt is empty\n"); goto done; }

    int cap = ctx > 0 ? ctx : (n_prompt + n_gen < m->cfg.ctx_max ? n_prompt + n_gen : m->cfg.ctx_max);
    if (cap < n_prompt + 1) {
        fprintf(stderr, "smallkv: the prompt has %d tokens, more than the context %d allows\n", n_prompt, cap);
        goto done;
    }
    int T_max = n_prompt < 512 ? n_prompt : 512;
    s = skv_state_new(m, cap, T_max, strcmp(kv, "f16") == 0);
    if (!s) { cli_fail(NULL); goto done; }

    /* prefill in blocks of T_max, logits of the last prompt token */
    const int V = m->cfg.vocab;
    double t0 = skv_now();
    for (int p = 0; p < n_prompt; p += T_max) {
        int T = n_prompt - p < T_max ? n_prompt - p : T_max;
        skv_fwd_opts o = {.logits = p + T == n_prompt ? SKV_LOGITS_LAST : SKV_LOGITS_NONE};
        if (skv_forward(s, ids + p, T, &o) != 0) { cli_fail(NULL); goto done; }
    }
    double t1 = skv_now(), t_first = 0;
    uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
    int produced = 0, n_fwd = 0;
    while (produced < n_gen) {
        int next = sample(s->logits, V, temp, &rng);
        if (produced == 0) t_first = skv_now();
        if (skv_tok_is_stop(tok, next)) break;
        size_t len;
        const char *b = skv_token_bytes(tok, next, &len);
        if (b) { fwrite(b, 1, len, stdout); fflush(stdout); }
        produced++;
        if (produced == n_gen) break;
        if (s->n_past >= s->S_cap) { fprintf(stderr, "\nsmallkv: context of %d tokens is full\n", s->S_cap); break; }
        skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
        if (skv_forward(s, &next, 1, &o) != 0) { cli_fail(NULL); goto done; }
        n_fwd++;
    }
    double t2 = skv_now();
    fputc('\n', stdout);
    fflush(stdout);
    if (stats) {
        fprintf(stderr, "prompt %d tokens: prefill %.2f s (%.1f tok/s), TTFT %.3f s\n", n_prompt, t1 - t0,
                n_prompt / (t1 - t0), t_first - t0);
        if (n_fwd > 0)
            fprintf(stderr, "generated %d tokens: %d decode steps in %.2f s (%.2f tok/s)\n", produced, n_fwd,
                    t2 - t_first, n_fwd / (t2 - t_first));
        else
            fprintf(stderr, "generated %d tokens\n", produced);
    }
    rc = CLI_OK;
done:
    skv_state_free(s);
    free(ids);
    free(text);
    skv_model_free(m);
    return rc;
}
