/* smallkv.c: the `smallkv` command: dispatch to the subcommands, and `smallkv info`.
 *   smallkv info MODEL            config, weight types and sizes, KV bytes per token
 *   smallkv generate MODEL ...    runtime/cli/generate.c
 *   smallkv ppl MODEL FILE ...    runtime/cli/ppl.c
 *   smallkv profile show P        runtime/cli/profile.c */
#include "cli.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/quant.h"
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
    "  eval TASK --llm MODEL [--slm S --profile P] -o RESULTS.json\n"
    "                                 evaluate policies and budgets (fidelity, passkey, gsm8k,\n"
    "                                 bbh, calibration); resumable\n"
    "  eval report RESULTS.json ... -o REPORT.md\n"
    "                                 tables and plots from evaluation results\n"
    "MODEL is a GGUF file or a Hugging Face directory (config.json + *.safetensors).\n"
    "Run 'smallkv COMMAND --help' for a command's options.\n";

static const char *INFO_USAGE =
    "usage: smallkv info MODEL\n"
    "Print the architecture, shape, RoPE settings, weight storage types (tensor counts and\n"
    "bytes), KV-cache bytes per token (fp16 and fp32) and tokenizer of MODEL.\n";

typedef struct { int count; size_t bytes; } type_stat;

static void tally(type_stat *st, const skv_weight *w) {
    if (!w->data || w->type < 0 || w->type >= SKV_TYPE_COUNT) return;
    st[w->type].count++;
    st[w->type].bytes += skv_row_bytes(w->type, w->cols) * (size_t)w->rows;
}

static void human(size_t b, char *buf, size_t n) {
    if (b >= (1u << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1u << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { fputs(INFO_USAGE, stdout); return CLI_OK; }
        if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(INFO_USAGE, "info: unknown option '%s'", argv[i]);
        if (path) return cli_usage_error(INFO_USAGE, "info: one MODEL only");
        path = argv[i];
    }
    if (!path) return cli_usage_error(INFO_USAGE, "info: missing MODEL");
    skv_model *m = skv_model_load_ex(path, SKV_LOAD_NO_PACK | SKV_LOAD_MAPPED);   /* shapes only; the decode layouts are computed, not made */
    if (!m) return cli_fail(NULL);
    const skv_config *c = &m->cfg;
    type_stat st[SKV_TYPE_COUNT];
    memset(st, 0, sizeof st);
    tally(st, &m->tok_embd);
    tally(st, &m->out_norm);
    if (!c->tied_embeddings) tally(st, &m->output);
    for (int l = 0; l < c->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                  &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) tally(st, ws[i]);
    }
    char b1[32], b2[32];
    printf("model           %s\n", path);
    printf("name            %s\n", m->name ? m->name : "?");
    printf("architecture    %s\n", c->arch == SKV_ARCH_LLAMA ? "llama" : "qwen2");
    printf("layers          %d\n", c->n_layer);
    printf("dim             %d\n", c->dim);
    printf("heads           %d (kv heads %d, group %d)\n", c->n_head, c->n_kv_head, c->n_head / c->n_kv_head);
    printf("head dim        %d\n", c->head_dim);
    printf("ffn dim         %d\n", c->ffn_dim);
    printf("vocab           %d\n", c->vocab);
    printf("context         %d\n", c->ctx_max);
    printf("rope            theta %g, mode %s\n", c->rope_theta,
           c->rope_mode == SKV_ROPE_ADJACENT ? "adjacent (GGUF llama)" : "halves (HF layout)");
    printf("norm eps        %g\n", c->norm_eps);
    printf("tied embeddings %s\n", c->tied_embeddings ? "yes" : "no");
    printf("qkv biases      %s\n", c->has_qkv_bias ? "yes" : "no");
    printf("weights:\n");
    size_t total = 0;
    for (int t = 0; t < SKV_TYPE_COUNT; t++) {
        if (!st[t].count) continue;
        human(st[t].bytes, b1, sizeof b1);
        printf("  %-6s %4d tensors %14zu bytes (%s)\n", skv_type_name(t), st[t].count, st[t].bytes, b1);
        total += st[t].bytes;
    }
    human(total, b1, sizeof b1);
    printf("total weights   %zu bytes (%s)\n", total, b1);
    size_t x8b, pk;
    skv_model_layout_plan(m, &x8b, &pk);
    human(x8b, b1, sizeof b1);
    printf("8-row groups    %zu bytes (%s)%s\n", x8b, b1,
           x8b ? " of matrices regrouped in place at load for the decode kernels (no extra memory)" : "");
    human(pk, b1, sizeof b1);
    printf("decode copies   %zu bytes (%s)%s\n", pk, b1,
           pk ? " made at load: the other Q4/Q5 matrices regrouped in block pairs" : "");
    printf("                (SKV_PACK=0: neither; SKV_MMAP=1: no groups, copies of every Q4/Q5 matrix)\n");
    printf("group kernels   %s\n", skv_cpu_vnni() ? "AVX-512 VNNI (this CPU; SKV_CPU=avx2 for AVX2, same bits)" : "AVX2");
    size_t k16 = skv_model_kv_bytes_per_token(m, 2), k32 = skv_model_kv_bytes_per_token(m, 4);
    human(k16, b1, sizeof b1);
    human(k32, b2, sizeof b2);
    printf("KV per token    %zu bytes fp16 (%s), %zu bytes fp32 (%s)\n", k16, b1, k32, b2);
    printf("tokenizer       %s\n", m->tok ? skv_tokenizer_name(m->tok) : "(none)");
    skv_model_free(m);
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
    return cli_usage_error(USAGE, "unknown command '%s'", cmd);
}
