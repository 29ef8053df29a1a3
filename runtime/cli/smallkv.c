/* smallkv.c: the `smallkv` command: dispatch to the subcommands, and `smallkv info`.
 *   smallkv info MODEL            config, weight types and sizes, KV bytes per token
 *   smallkv generate MODEL ...    runtime/cli/generate.c
 *   smallkv ppl MODEL FILE ...    runtime/cli/ppl.c
 *   smallkv profile show P        runtime/cli/profile.c
 *   smallkv policies [--markdown] runtime/cli/policies.c
 *   smallkv serve --llm L ...     runtime/cli/serve.c, runtime/serve/ */
#include "cli.h"
#include "include/smallkv.h"
#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "usage: smallkv COMMAND [options]\n"
    "commands:\n"
    "  info MODEL                     show a model's configuration and storage\n"
    "  generate --llm MODEL [--slm S --profile P] --policy NAME --budget F --prompt TEXT\n"
    "                                 generate text over a compressed KV cache\n"
    "  generate MODEL --prompt TEXT   generate text (full cache, greedy by default)\n"
    "  ppl MODEL FILE                 perplexity of a text file\n"
    "  profile show PROFILE           print a SmallKV profile\n"
    "  policies [--markdown]          every KV-cache policy and its options (--markdown: the\n"
    "                                 page docs/policies.md)\n"
    "  serve --llm MODEL [--slm S --profile P] [--port N]\n"
    "                                 OpenAI-compatible HTTP server (chat, completions)\n"
    "  eval TASK --llm MODEL [--slm S --profile P] -o RESULTS.json\n"
    "                                 evaluate policies and budgets (fidelity, passkey, gsm8k,\n"
    "                                 bbh, niah, longbench, calibration, depth); resumable\n"
    "  eval report RESULTS.json ... -o REPORT.md\n"
    "                                 tables and plots from evaluation results\n"
    "MODEL is a GGUF file or a Hugging Face directory (config.json + *.safetensors).\n"
    "Run 'smallkv COMMAND --help' for a command's options.\n";

static const char *INFO_USAGE =
    "usage: smallkv info MODEL\n"
    "Print the architecture, shape, RoPE settings, weight storage types (tensor counts and\n"
    "bytes), KV-cache bytes per token (fp16 and fp32) and tokenizer of MODEL.\n";

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { fputs(INFO_USAGE, stdout); return CLI_OK; }
        if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(INFO_USAGE, "info: unknown option '%s'", argv[i]);
        if (path) return cli_usage_error(INFO_USAGE, "info: one MODEL only");
        path = argv[i];
    }
    if (!path) return cli_usage_error(INFO_USAGE, "info: missing MODEL");
    if (smallkv_print_model_info(path, stdout)) return cli_fail(NULL);
    return CLI_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(USAGE, "missing COMMAND");
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || strcmp(cmd, "help") == 0) { fputs(USAGE, stdout); return CLI_OK; }
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "ppl") == 0) return cmd_ppl(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "profile") == 0) return cmd_profile(argc - 1, argv + 1);
    if (strcmp(cmd, "policies") == 0) return cmd_policies(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    return cli_usage_error(USAGE, "unknown command '%s'", cmd);
}
