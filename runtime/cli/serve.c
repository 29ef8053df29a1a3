/* serve.c: `smallkv serve`: its flags to a serve_config, then the server (runtime/serve/). */
#include "cli.h"
#include "runtime/serve/serve.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: smallkv serve --llm MODEL [--slm S --profile P] [options]\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions,\n"
    "GET /v1/models[/ID], GET /health, GET /metrics (Prometheus), GET / (a chat page),\n"
    "and llama-server's POST /tokenize, POST /detokenize, GET /props (docs/serve.md).\n"
    "Conversations keep their compressed KV cache: a request extending an earlier one\n"
    "continues from its session. A request may choose \"smallkv\": {\"policy\", \"budget\"}.\n"
    "  --policy SPEC        default policy (default full; smallkv with --slm and --profile)\n"
    "  --budget F           default budget in (0, 1] (default 0.2)\n"
    "  --host ADDR          IPv4 address to bind (default 127.0.0.1)\n"
    "  --port N             port (default 8080; 0: any free port, printed)\n"
    "  --api-key KEY        require Authorization: Bearer KEY (also $SMALLKV_API_KEY)\n"
    "  --cache-bytes N      session cache bound, bytes (K, M, G suffixes; default 512M)\n"
    "  --share-prefix N     under policy full, a prompt prefix of N or more tokens that a\n"
    "                       cached session also starts with is kept as a shared session\n"
    "                       every request with that prefix forks (0: never; default 64)\n"
    "  --queue N            waiting requests before 429 (default 16)\n"
    "  --batch N            sequences decoded together (default 8)\n"
    "  --ctx N              tokens per conversation, prompt and reply (default 2048)\n"
    "  --max-tokens N       reply length when a request gives none (default 256)\n"
    "  --max-body N         request body limit, bytes (default 1M)\n"
    "  --max-conns N        simultaneous connections (default 256)\n"
    "  --max-conns-per-ip N connections from one address (default 64). Over either cap a\n"
    "                       new connection replaces the one (from its address, at that cap)\n"
    "                       that has waited longest, 1 s or more, for its client's headers\n"
    "                       or body; with none it is refused\n"
    "  --header-timeout S   seconds for a request's headers to arrive, from the connection's\n"
    "                       start or its previous reply; then it is closed (default 10)\n"
    "  --body-timeout S     seconds for the body to arrive after the headers (default 30)\n"
    "  --timeout S          seconds per request from its headers (body, queue, generation;\n"
    "                       504 after) and per idle connection (default 300)\n"
    "  --threads N          CPU threads (default all)\n"
    "  --prefill-attn M     exact (default) or bf16: AMX-BF16 tile products for long prompts,\n"
    "                       faster time to first token (docs/performance.md)\n";

static bool parse_bytes(const char *v, size_t *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || x < 0) return false;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i') end++;
    if (*end == 'B') end++;
    if (*end) return false;
    *out = (size_t)(x * mul);
    return true;
}

int cmd_serve(int argc, char **argv) {
    serve_config c = { .policy = NULL, .budget = 0.2, .host = "127.0.0.1", .port = 8080, .cache_bytes = 512u << 20,
                       .queue = 16, .batch = 8, .ctx = 2048, .max_body = 1u << 20, .max_conns = 256, .max_conns_per_ip = 64,
                       .header_timeout = 10, .body_timeout = 30, .timeout = 300, .share_prefix = 64,
                       .default_max_tokens = 256 };
    c.api_key = getenv("SMALLKV_API_KEY");
    if (c.api_key && !*c.api_key) c.api_key = NULL;
    int threads = 0;
    float budget = 0.2f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        bool ok = true;
        if (!strcmp(a, "--llm")) ok = cli_str(argc, argv, &i, &c.llm);
        else if (!strcmp(a, "--slm")) ok = cli_str(argc, argv, &i, &c.slm);
        else if (!strcmp(a, "--profile")) ok = cli_str(argc, argv, &i, &c.profile);
        else if (!strcmp(a, "--policy")) ok = cli_str(argc, argv, &i, &c.policy);
        else if (!strcmp(a, "--budget")) { if ((ok = cli_float(argc, argv, &i, 1e-6, 1, &budget))) c.budget = strtod(argv[i], NULL); }
        else if (!strcmp(a, "--host")) ok = cli_str(argc, argv, &i, &c.host);
        else if (!strcmp(a, "--port")) ok = cli_int(argc, argv, &i, 0, 65535, &c.port);
        else if (!strcmp(a, "--api-key")) ok = cli_str(argc, argv, &i, &c.api_key);
        else if (!strcmp(a, "--queue")) ok = cli_int(argc, argv, &i, 1, 100000, &c.queue);
        else if (!strcmp(a, "--batch")) ok = cli_int(argc, argv, &i, 1, 64, &c.batch);
        else if (!strcmp(a, "--ctx")) ok = cli_int(argc, argv, &i, 16, 1 << 20, &c.ctx);
        else if (!strcmp(a, "--max-tokens")) ok = cli_int(argc, argv, &i, 1, 1 << 20, &c.default_max_tokens);
        else if (!strcmp(a, "--max-conns")) ok = cli_int(argc, argv, &i, 1, 10000, &c.max_conns);
        else if (!strcmp(a, "--max-conns-per-ip")) ok = cli_int(argc, argv, &i, 1, 10000, &c.max_conns_per_ip);
        else if (!strcmp(a, "--header-timeout")) ok = cli_int(argc, argv, &i, 1, 86400, &c.header_timeout);
        else if (!strcmp(a, "--body-timeout")) ok = cli_int(argc, argv, &i, 1, 86400, &c.body_timeout);
        else if (!strcmp(a, "--share-prefix")) ok = cli_int(argc, argv, &i, 0, 1 << 20, &c.share_prefix);
        else if (!strcmp(a, "--timeout")) ok = cli_int(argc, argv, &i, 1, 86400, &c.timeout);
        else if (!strcmp(a, "--threads")) ok = cli_int(argc, argv, &i, 1, 1024, &threads);
        else if (!strcmp(a, "--prefill-attn")) ok = cli_prefill_attn(argc, argv, &i);
        else if (!strcmp(a, "--cache-bytes") || !strcmp(a, "--max-body")) {
            size_t *dst = !strcmp(a, "--cache-bytes") ? &c.cache_bytes : &c.max_body;
            if ((ok = cli_str(argc, argv, &i, &v)) && !parse_bytes(v, dst))
                return cli_usage_error(USAGE, "serve: %s: '%s' is not a byte count", a, v);
        } else return cli_usage_error(USAGE, "serve: unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (!c.llm) return cli_usage_error(USAGE, "serve: missing --llm MODEL");
    if (c.profile && !c.slm) return cli_usage_error(USAGE, "serve: --profile needs --slm");
    if (c.max_body < 16) return cli_usage_error(USAGE, "serve: --max-body must be at least 16 bytes");
    if (!c.policy) c.policy = c.slm && c.profile ? "smallkv" : "full";
    if (c.default_max_tokens >= c.ctx) c.default_max_tokens = c.ctx - 1;
    const char *base = strrchr(c.llm, '/');
    c.model_name = base && base[1] ? base + 1 : c.llm;
    cli_set_threads(threads);
    return serve_run(&c) ? CLI_ERR : CLI_OK;
}
