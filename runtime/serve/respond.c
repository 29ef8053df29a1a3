/* respond.c: the JSON bodies the server answers with (cJSON): a chat or text completion,
 * one server-sent-event chunk of a stream, the model list. Each carries a "smallkv"
 * object with the session's memory by tier and the prompt tokens reused. */
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
    cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
    add_usage(o, j);
    add_memory(o, j);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *serve_chunk_json(const serve_config *cfg, const serve_job *j, const char *id, const char *delta,
                       size_t n, bool first, const char *finish, bool usage) {
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
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
    }
    if (finish || usage) add_memory(o, j);
    if (usage) add_usage(o, j);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *serve_models_json(const serve_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(d, m);
    cJSON_AddStringToObject(m, "id", cfg->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "smallkv");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
