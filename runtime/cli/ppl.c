/* ppl.c: `smallkv ppl`: perplexity of a text file.
 *
 * Convention (the same as tests/golden/gen_logits.py): the file is tokenised as plain text
 * (no BOS, special-token text not parsed), cut to the first --max-tokens tokens, and split
 * into non-overlapping windows of --ctx tokens; a shorter tail is dropped (if the file is
 * shorter than one window, the whole file is one window). Each window starts with an empty
 * cache; every position after its first is scored: NLL of token t+1 given tokens 0..t of the
 * window. ppl = exp(total NLL / scored tokens). */
#include "cli.h"
#include "runtime/backend/forward.h"
#include "runtime/backend/forward_cuda.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *PPL_USAGE =
    "usage: smallkv ppl MODEL FILE [options]\n"
    "  --ctx N          window length in tokens (default 512)\n"
    "  --max-tokens N   use only the first N tokens of FILE (default: all)\n"
    "  --threads N      OpenMP threads (default: all cores)\n"
    "  --kv f16|f32     KV cache element type (default f16)\n"
    "  --device cpu|cuda  where the forward pass runs (default cpu; cuda needs make CUDA=1)\n"
    "Non-overlapping windows of N tokens, each scored at every position after its first\n"
    "(the model sees only its window); a short tail is dropped. Prints 'ppl X' on stdout;\n"
    "a progress line goes to stderr when it is a terminal.\n";

/* -log softmax(row)[target], in double. */
static double nll_row(const float *row, int V, int target) {
    float mx = row[0];
    for (int i = 1; i < V; i++) if (row[i] > mx) mx = row[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    return log(sum) - ((double)row[target] - mx);
}

/* Tokenise the text, or only a prefix of it long enough for max_tokens (with margin, so
 * the cut cannot change the tokens kept). Returns the count; *out is heap. -1 on error. */
static int tokenize_file(const skv_tokenizer *tok, const char *text, size_t len, long max_tokens, int **out) {
    size_t use = len;
    if (max_tokens > 0 && (size_t)max_tokens * 16 + 65536 < len) use = (size_t)max_tokens * 16 + 65536;
    for (;;) {
        int n = skv_tokenize(tok, text, use, false, NULL, 0);
        if (n < 0) return -1;
        if (use < len && n < max_tokens + 256) { use = use * 2 < len ? use * 2 : len; continue; }
        int *ids = skv_malloc(((size_t)n + 1) * sizeof(int), "token ids");
        if (!ids) return -1;
        if (skv_tokenize(tok, text, use, false, ids, n) != n) { free(ids); return skv_error("tokenizer: inconsistent counts"); }
        *out = ids;
        return n;
    }
}

int cmd_ppl(int argc, char **argv) {
    const char *path = NULL, *file = NULL, *kv = "f16", *device = "cpu";
    int ctx = 512, max_tokens = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (cli_is_help(a)) { fputs(PPL_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--ctx")) ok = cli_int(argc, argv, &i, 2, 1 << 20, &ctx);
        else if (!strcmp(a, "--max-tokens")) ok = cli_int(argc, argv, &i, 2, 2147483647L, &max_tokens);
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) ok = cli_int(argc, argv, &i, 1, 4096, &threads);
        else if (!strcmp(a, "--kv")) ok = cli_str(argc, argv, &i, &kv);
        else if (!strcmp(a, "--device")) ok = cli_str(argc, argv, &i, &device);
        else if (a[0] == '-' && a[1]) return cli_usage_error(PPL_USAGE, "ppl: unknown option '%s'", a);
        else if (!path) path = a;
        else if (!file) file = a;
        else return cli_usage_error(PPL_USAGE, "ppl: unexpected argument '%s'", a);
        if (!ok) return cli_usage_error(PPL_USAGE, NULL);
    }
    if (!path || !file) return cli_usage_error(PPL_USAGE, "ppl: needs MODEL and FILE");
    if (strcmp(kv, "f16") && strcmp(kv, "f32")) return cli_usage_error(PPL_USAGE, "ppl: --kv must be f16 or f32, not '%s'", kv);
    if (strcmp(device, "cpu") && strcmp(device, "cuda"))
        return cli_usage_error(PPL_USAGE, "ppl: --device must be cpu or cuda, not '%s'", device);
    const bool cuda = !strcmp(device, "cuda");
    if (cuda && !skv_cuda_built()) { fprintf(stderr, "smallkv: --device cuda: built without CUDA (make CUDA=1)\n"); return CLI_ERR; }
    cli_set_threads(threads);

    size_t len;
    char *text = skv_read_file(file, &len);
    if (!text) return cli_fail(NULL);
    skv_model *m = cli_load(path);
    if (!m) { free(text); return CLI_ERR; }
    int rc = CLI_ERR, *ids = NULL;
    skv_state *s = NULL;
    skv_cuda_model *dm = NULL;
    skv_cuda_state *gs = NULL;
    if (!m->tok) { fprintf(stderr, "smallkv: %s: the model has no tokenizer\n", path); goto done; }
    int n = tokenize_file(m->tok, text, len, max_tokens, &ids);
    if (n < 0) { cli_fail(file); goto done; }
    if (max_tokens > 0 && n > max_tokens) n = max_tokens;
    if (n < 2) { fprintf(stderr, "smallkv: %s: only %d tokens, nothing to score\n", file, n); goto done; }
    int W = n / ctx, win = ctx;
    if (W == 0) { W = 1; win = n; }
    if (cuda) {
        if (!(dm = skv_cuda_model_upload(m, 0)) || !(gs = skv_cuda_state_new(dm, win, win, strcmp(kv, "f16") == 0))) {
            cli_fail("--device cuda");
            goto done;
        }
    } else {
        s = skv_state_new(m, win, win, strcmp(kv, "f16") == 0);
        if (!s) { cli_fail(NULL); goto done; }
    }

    const int V = m->cfg.vocab;
    const bool tty = isatty(2);
    double nll = 0, t0 = skv_now();
    long scored = 0;
    for (int w = 0; w < W; w++) {
        const int *x = ids + (size_t)w * win;
        skv_fwd_opts o = {.logits = SKV_LOGITS_ALL};
        if (cuda) skv_cuda_state_reset(gs);
        else skv_state_reset(s);
        if ((cuda ? skv_cuda_forward(gs, x, win, &o) : skv_forward(s, x, win, &o)) != 0) { cli_fail(NULL); goto done; }
        const float *logits = cuda ? gs->logits : s->logits;
        double wn = 0;
        #pragma omp parallel for reduction(+ : wn) schedule(static)
        for (int t = 0; t < win - 1; t++) wn += nll_row(logits + (size_t)t * V, V, x[t + 1]);
        nll += wn;
        scored += win - 1;
        if (tty) {
            double el = skv_now() - t0, tps = (double)(w + 1) * win / el;
            fprintf(stderr, "\r[%d/%d windows] %.1f tok/s, ETA %.0f s, ppl %.4f   ", w + 1, W, tps,
                    (double)(W - w - 1) * win / tps, exp(nll / scored));
        }
    }
    if (tty) fputc('\n', stderr);
    printf("ppl %.4f (%d windows of %d tokens, %ld scored tokens, %.1f s)\n", exp(nll / scored), W, win, scored,
           skv_now() - t0);
    rc = CLI_OK;
done:
    skv_state_free(s);
    skv_cuda_state_free(gs);
    skv_cuda_model_free(dm);
    free(ids);
    free(text);
    skv_model_free(m);
    return rc;
}
