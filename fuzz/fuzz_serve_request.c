/* fuzz_serve_request.c: libFuzzer target for the server's request parser
 * (runtime/serve/request.c: cJSON parsing, every field's checks, chat-template
 * tokenisation), with the real SmolLM2 pair (loaded once from $SKV_MODELS_DIR, default
 * models/; without it the tokenising step fails cleanly and the rest is still fuzzed).
 *
 * Input: byte 0 = endpoint (bit 0: chat, else completion), the rest = the body. Checked
 * properties: serve_parse returns 0 (then the prompt is 1 .. ctx-1 valid token ids,
 * 1 <= max_tokens <= ctx, 0 <= temperature <= 2, budget in (0, 1], at most 4 stop strings)
 * or an HTTP 4xx with an error object that parses as JSON and has error.message. */
#include "fuzz_common.h"
#include "runtime/serve/serve.h"
#include <cjson/cJSON.h>

static smallkv_pair *g_pair;
static serve_config g_cfg = { .policy = "full", .budget = 0.2, .ctx = 256, .default_max_tokens = 16 };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dir = getenv("SKV_MODELS_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir && dir[0] ? dir : "models");
    if (!(g_pair = smallkv_pair_load(path, NULL)))
        fprintf(stderr, "fuzz_serve_request: no model (%s): prompts will not tokenise\n", smallkv_last_error());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool chat = data[0] & 1;
    serve_params p;
    char *err = NULL;
    int st = serve_parse(&g_cfg, g_pair, chat, (const char *)data + 1, size - 1, &p, &err);
    if (st == 0) {
        if (!g_pair || p.n_ids < 1 || p.n_ids >= g_cfg.ctx || p.max_tokens < 1 || p.max_tokens > g_cfg.ctx ||
            !(p.temperature >= 0 && p.temperature <= 2) || !(p.budget > 0 && p.budget <= 1) || p.n_stop > SERVE_MAX_STOP)
            abort();
        for (int i = 0; i < p.n_ids; i++)
            if (p.ids[i] < 0 || p.ids[i] >= smallkv_vocab(g_pair)) abort();
        if (err) abort();
        serve_params_free(&p);
        return 0;
    }
    if (st < 400 || st > 499 || !err) abort();
    cJSON *j = cJSON_Parse(err);
    if (!j || !cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"))) abort();
    cJSON_Delete(j);
    free(err);
    return 0;
}
