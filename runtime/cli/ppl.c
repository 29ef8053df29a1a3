/* ppl.c: `smallkv ppl`: perplexity of a text file.
 *
 * Convention (the same as tests/golden/gen_logits.py): the file is tokenised as plain text
 * (no BOS, special-token text not parsed), cut to the first --max-tokens tokens, and split
 * into non-overlapping windows of --ctx tokens; a shorter tail is dropped (if the file is
 * shorter than one window, the whole file is one window). Each window starts with an empty
 * cache; every position after its first is scored: NLL of token t+1 given tokens 0..t of the
 * window. ppl = exp(total NLL / scored tokens). */
#include "cli.h"
#include "include/smallkv.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *PPL_USAGE =
    "usage: smallkv ppl MODEL FILE [options]\n"
    "  --ctx N          window length in tokens (default 512)\n"
    "  --max-tokens N   use only the first N tokens of FILE (default: all)\n"
    "  --threads N      OpenMP threads (default: all cores)\n"
    "  --kv f16|f32     KV cache element type (default f16)\n"
    "  --prefill-attn M exact (default) or bf16 (AMX-BF16 tile products; docs/performance.md)\n"
    "  --device cpu|cuda  where the forward pass runs (default cpu; cuda needs make CUDA=1)\n"
    "Non-overlapping windows of N tokens, each scored at every position after its first\n"
    "(the model sees only its window); a short tail is dropped. Prints 'ppl X' on stdout;\n"
    "a progress line goes to stderr when it is a terminal.\n";

static void progress(int done, int total, double tps, double ppl, void *u) {
    (void)u;
    fprintf(stderr, "\r[%d/%d windows] %.1f tok/s, ppl %.4f   ", done, total, tps, ppl);
    if (done == total) fputc('\n', stderr);
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
        else if (!strcmp(a, "--prefill-attn")) ok = cli_prefill_attn(argc, argv, &i);
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
    cli_set_threads(threads);
    smallkv_ppl_options o;
    smallkv_ppl_options_default(&o);
    o.ctx = ctx;
    o.max_tokens = max_tokens;
    o.kv_f32 = !strcmp(kv, "f32");
    o.device = device;
    if (isatty(2)) o.progress = progress;
    smallkv_ppl_result r;
    if (smallkv_perplexity(path, file, &o, &r)) return cli_fail(NULL);
    printf("ppl %.4f (%d windows of %d tokens, %ld scored tokens, %.1f s)\n", r.ppl, r.windows, r.window, r.scored,
           r.seconds);
    return CLI_OK;
}
