/* respond.c: the JSON bodies the server answers with (cJSON): a chat or text completion,
 * one server-sent-event chunk of a stream (each completion body carries a "smallkv" object
 * with the session's memory by tier and the prompt tokens reused; "logprobs" is null unless
 * asked for, then logprobs.c's object for the tokens it carries), the model list and one
 * model, the server's properties (GET /props), and /tokenize's and /detokenize's answers. */
#include "serve.h"
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void add_usage(cJSON *o, const serve_job *j) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->prm.n_ids);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_out);
    cJSON_AddNumberToObject(u, "total_tokens", j->prm.n_ids + j->n_out);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->reused);
}

static void add_memory(cJSON *o, const serve_job *j) {
    cJSON *m = cJSON_AddObjectToObject(o, "smallkv");
    cJSON_AddStringToObject(m, "policy", j->prm.policy);
    cJSON_AddNumberToObject(m, "budget", j->prm.budget);
    cJSON_AddNumberToObject(m, "reused_tokens", j->reused);
    cJSON_AddNumberToObject(m, "length", j->length);
    cJSON_AddNumberToObject(m, "hot_bytes", (double)j->hot);
    cJSON_AddNumberToObject(m, "cold_bytes", (double)j->cold);
    cJSON_AddNumberToObject(m, "slm_bytes", (double)j->slm);
    cJSON_AddNumberToObject(m, "full_bytes", (double)j->full);
}

static cJSON *head(const serve_config *cfg, const serve_job *j, const char *id, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", cfg->model_name);
    (void)j;
    return o;
}

/* cJSON wants NUL-terminated text */
static cJSON *text_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (!t) return cJSON_CreateString("");
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *v = cJSON_CreateString(t);
    free(t);
    return v;
}

char *serve_completion_json(const serve_config *cfg, const serve_job *j, const char *id) {
    const bool chat = j->prm.chat;
    cJSON *o = head(cfg, j, id, chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", text_n(j->text ? j->text : "", j->len));
    } else {
        cJSON_AddItemToObject(c, "text", text_n(j->text ? j->text : "", j->len));
    }
    if (j->prm.logprobs) cJSON_AddItemToObject(c, "logprobs", serve_logprobs_json(j, 0, j->n_lp));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
    add_usage(o, j);
    add_memory(o, j);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *serve_chunk_json(const serve_config *cfg, const serve_job *j, const char *id, const char *delta,
                       size_t n, bool first, const char *finish, bool usage, int lp_from, int lp_to) {
    const bool chat = j->prm.chat;
    cJSON *o = head(cfg, j, id, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    if (!usage) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", 0);
        if (chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (first) cJSON_AddStringToObject(d, "role", "assistant");
            if (n || !finish) cJSON_AddItemToObject(d, "content", text_n(delta ? delta : "", n));
        } else {
            cJSON_AddItemToObject(c, "text", text_n(delta ? delta : "", n));
        }
        if (j->prm.logprobs && lp_to > lp_from) cJSON_AddItemToObject(c, "logprobs", serve_logprobs_json(j, lp_from, lp_to));
        else cJSON_AddNullToObject(c, "logprobs");
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
    }
    if (finish || usage) add_memory(o, j);
    if (usage) add_usage(o, j);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *model_obj(const serve_config *cfg) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", cfg->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "smallkv");
    return m;
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *serve_models_json(const serve_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(cfg));
    return print_free(o);
}

char *serve_model_json(const serve_config *cfg) { return print_free(model_obj(cfg)); }

/* llama-server's /props names where it has them (default_generation_settings.n_ctx,
 * total_slots), so clients written for it find the context size */
char *serve_props_json(const serve_config *cfg, const smallkv_pair *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cfg->model_name);
    cJSON_AddNumberToObject(o, "n_ctx", cfg->ctx);
    cJSON_AddNumberToObject(o, "model_context_length", smallkv_context_length(p));
    cJSON_AddNumberToObject(o, "vocab_size", smallkv_vocab(p));
    cJSON_AddStringToObject(o, "policy", cfg->policy);
    cJSON_AddNumberToObject(o, "budget", cfg->budget);
    cJSON_AddBoolToObject(o, "slm", cfg->slm != NULL);
    cJSON_AddBoolToObject(o, "profile", cfg->profile != NULL);
    cJSON_AddNumberToObject(o, "total_slots", cfg->batch);
    cJSON_AddNumberToObject(o, "queue", cfg->queue);
    cJSON_AddNumberToObject(o, "cache_bytes", (double)cfg->cache_bytes);
    cJSON *g = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", cfg->ctx);
    cJSON *pr = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(pr, "max_tokens", cfg->default_max_tokens);
    cJSON_AddNumberToObject(pr, "temperature", 1);
    cJSON_AddNumberToObject(pr, "top_p", 1);
    cJSON_AddNumberToObject(pr, "top_k", 0);
    cJSON_AddNumberToObject(pr, "min_p", 0);
    return print_free(o);
}

char *serve_tokens_json(const int *ids, int n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "tokens", n > 0 ? cJSON_CreateIntArray(ids, n) : cJSON_CreateArray());
    return print_free(o);
}

/* the tokens' bytes as well-formed UTF-8: a cut or ill-formed sequence becomes U+FFFD */
char *serve_detokenized_json(const smallkv_pair *p, const int *ids, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        smallkv_token_bytes(p, ids[i], &k);
        len += k;
    }
    char *raw = malloc(len + 1), *fixed = malloc(3 * len + 1);
    if (!raw || !fixed) { free(raw); free(fixed); return NULL; }
    len = 0;
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        const char *b = smallkv_token_bytes(p, ids[i], &k);
        if (b) memcpy(raw + len, b, k), len += k;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", text_n(fixed, serve_utf8_fix(raw, len, fixed, NULL)));
    free(raw);
    free(fixed);
    return print_free(o);
}
