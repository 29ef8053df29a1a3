/* request.c: a request body to serve_params (cJSON): every field's type and range checked,
 * unknown fields refused, the prompt tokenised (chat messages with the model's template),
 * its length checked against the context; the OpenAI-style error object. */
#include "serve.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *serve_error_json(const char *message, const char *type, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param); else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code); else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static int fail(char **err, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char **err, int status, const char *param, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *err = serve_error_json(msg, "invalid_request_error", param, code);
    return status;
}

void serve_params_free(serve_params *p) {
    free(p->ids);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

/* the fields each endpoint takes; the OpenAI ones we accept but do not use are listed too */
static const char *CHAT_FIELDS[] = { "model", "messages", "max_tokens", "max_completion_tokens", "temperature",
                                     "seed", "stop", "stream", "stream_options", "smallkv", "n", "top_p",
                                     "user", "presence_penalty", "frequency_penalty", NULL };
static const char *COMPL_FIELDS[] = { "model", "prompt", "max_tokens", "temperature", "seed", "stop", "stream",
                                      "stream_options", "smallkv", "n", "top_p", "user", "presence_penalty",
                                      "frequency_penalty", NULL };

static bool known(const char **list, const char *k) {
    for (; *list; list++) if (!strcmp(*list, k)) return true;
    return false;
}

/* an integer-valued number in [lo, hi] */
static int get_int(cJSON *v, const char *name, double lo, double hi, double *out, char **err) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return fail(err, 400, name, "invalid_type", "'%s' must be an integer", name);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(err, 400, name, "invalid_value", "'%s' must be in [%.0f, %.0f] (got %.0f)", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

static int parse_stop(cJSON *v, serve_params *o, char **err) {
    if (cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return fail(err, 400, "stop", "invalid_value", "'stop' must not be empty");
        o->stop[o->n_stop++] = strdup(v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v)) return fail(err, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > SERVE_MAX_STOP)
        return fail(err, 400, "stop", "invalid_value", "'stop' takes at most %d strings", SERVE_MAX_STOP);
    cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s) || !*s->valuestring)
            return fail(err, 400, "stop", "invalid_type", "'stop' entries must be non-empty strings");
        o->stop[o->n_stop++] = strdup(s->valuestring);
    }
    return 0;
}

static int parse_smallkv(cJSON *v, smallkv_pair *p, serve_params *o, char **err) {
    (void)p;
    if (!cJSON_IsObject(v)) return fail(err, 400, "smallkv", "invalid_type", "'smallkv' must be an object");
    cJSON *f;
    cJSON_ArrayForEach(f, v) {
        if (!strcmp(f->string, "policy")) {
            if (!cJSON_IsString(f) || strlen(f->valuestring) >= sizeof o->policy)
                return fail(err, 400, "smallkv.policy", "invalid_type", "'smallkv.policy' must be a policy spec string");
            snprintf(o->policy, sizeof o->policy, "%s", f->valuestring);
        } else if (!strcmp(f->string, "budget")) {
            if (!cJSON_IsNumber(f) || !(f->valuedouble > 0 && f->valuedouble <= 1))
                return fail(err, 400, "smallkv.budget", "invalid_value", "'smallkv.budget' must be a number in (0, 1]");
            o->budget = f->valuedouble;
        } else {
            return fail(err, 400, "smallkv", "unknown_field", "unknown field 'smallkv.%s' (policy, budget)", f->string);
        }
    }
    return 0;
}

/* message content: a string, or an array of {"type":"text","text":...} parts (joined) */
static char *content_text(cJSON *c) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) return NULL;
    size_t n = 1;
    cJSON *part;
    cJSON_ArrayForEach(part, c) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t)) return NULL;
        n += strlen(t->valuestring);
    }
    char *s = malloc(n);
    if (!s) return NULL;
    s[0] = 0;
    cJSON_ArrayForEach(part, c) strcat(s, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    return s;
}

static int tokenize_chat(smallkv_pair *p, cJSON *msgs, serve_params *o, char **err) {
    if (!cJSON_IsArray(msgs)) return fail(err, 400, "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(msgs);
    if (n < 1) return fail(err, 400, "messages", "invalid_value", "'messages' must not be empty");
    if (n > 10000) return fail(err, 400, "messages", "invalid_value", "too many messages");
    smallkv_message *m = calloc((size_t)n, sizeof *m);
    int rc = 0, i = 0;
    cJSON *x;
    cJSON_ArrayForEach(x, msgs) {
        cJSON *r = cJSON_GetObjectItemCaseSensitive(x, "role"), *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(x) || !cJSON_IsString(r)) {
            rc = fail(err, 400, param, "invalid_type", "'%s' must be an object with a string 'role'", param);
            break;
        }
        if (strcmp(r->valuestring, "system") && strcmp(r->valuestring, "user") && strcmp(r->valuestring, "assistant")) {
            rc = fail(err, 400, param, "invalid_value", "'%s.role' is '%.40s' (system, user or assistant)", param, r->valuestring);
            break;
        }
        char *t = content_text(c);
        if (!t) {
            rc = fail(err, 400, param, "invalid_type", "'%s.content' must be a string or an array of text parts", param);
            break;
        }
        m[i].role = r->valuestring;
        m[i].content = t;
        i++;
    }
    if (!rc) {
        int k = smallkv_tokenize_messages(p, m, n, NULL, 0);
        if (k > 0 && (o->ids = malloc((size_t)k * sizeof(int))) && smallkv_tokenize_messages(p, m, n, o->ids, k) == k)
            o->n_ids = k;
        else
            rc = fail(err, 400, "messages", "invalid_value", "cannot tokenise the messages: %s", smallkv_last_error());
    }
    for (int k = 0; k < i; k++) free((char *)m[k].content);
    free(m);
    return rc;
}

static int tokenize_prompt(smallkv_pair *p, cJSON *v, serve_params *o, char **err) {
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) v = cJSON_GetArrayItem(v, 0);
    if (!cJSON_IsString(v)) return fail(err, 400, "prompt", "invalid_type", "'prompt' must be a string");
    if (!*v->valuestring) return fail(err, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    int k = smallkv_tokenize(p, v->valuestring, SMALLKV_TOK_BOS, NULL, 0);
    if (k < 1 || !(o->ids = malloc((size_t)k * sizeof(int))) ||
        smallkv_tokenize(p, v->valuestring, SMALLKV_TOK_BOS, o->ids, k) != k)
        return fail(err, 400, "prompt", "invalid_value", "cannot tokenise the prompt: %s", smallkv_last_error());
    o->n_ids = k;
    return 0;
}

static int parse_obj(const serve_config *cfg, smallkv_pair *p, bool chat, cJSON *root, serve_params *o, char **err) {
    if (!cJSON_IsObject(root)) return fail(err, 400, NULL, "invalid_json", "the body must be a JSON object");
    cJSON *f;
    cJSON_ArrayForEach(f, root)
        if (!known(chat ? CHAT_FIELDS : COMPL_FIELDS, f->string))
            return fail(err, 400, f->string, "unknown_field", "unknown field '%.60s'", f->string);
    double d;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string;
        int rc = 0;
        if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
            if (!cJSON_IsNull(f)) {
                if (!(rc = get_int(f, k, 1, cfg->ctx, &d, err))) o->max_tokens = (int)d;
            }
        } else if (!strcmp(k, "temperature")) {
            if (!cJSON_IsNull(f)) {
                if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0 && f->valuedouble <= 2))
                    rc = fail(err, 400, k, "invalid_value", "'temperature' must be a number in [0, 2]");
                else o->temperature = (float)f->valuedouble;
            }
        } else if (!strcmp(k, "seed")) {
            if (!cJSON_IsNull(f) && !(rc = get_int(f, k, -9.007199254740992e15, 9.007199254740992e15, &d, err)))
                o->seed = (unsigned long long)(long long)d;
        } else if (!strcmp(k, "stop")) {
            rc = parse_stop(f, o, err);
        } else if (!strcmp(k, "stream")) {
            if (!cJSON_IsBool(f) && !cJSON_IsNull(f)) rc = fail(err, 400, k, "invalid_type", "'stream' must be a boolean");
            else o->stream = cJSON_IsTrue(f);
        } else if (!strcmp(k, "stream_options")) {
            cJSON *u = cJSON_GetObjectItemCaseSensitive(f, "include_usage");
            if (!cJSON_IsNull(f) && !cJSON_IsObject(f)) rc = fail(err, 400, k, "invalid_type", "'stream_options' must be an object");
            else o->stream_usage = cJSON_IsTrue(u);
        } else if (!strcmp(k, "smallkv")) {
            rc = parse_smallkv(f, p, o, err);
        } else if (!strcmp(k, "n")) {
            if (!cJSON_IsNull(f) && !(rc = get_int(f, k, 1, 1, &d, err))) {}
        } else if (!strcmp(k, "model") || !strcmp(k, "user")) {
            if (!cJSON_IsString(f) && !cJSON_IsNull(f)) rc = fail(err, 400, k, "invalid_type", "'%s' must be a string", k);
        } else if (!strcmp(k, "top_p") || !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
            if (!cJSON_IsNumber(f) && !cJSON_IsNull(f)) rc = fail(err, 400, k, "invalid_type", "'%s' must be a number", k);
        }
        if (rc) return rc;
    }
    /* the policy: known, and what it needs is loaded */
    unsigned needs = 0;
    if (smallkv_policy_check(o->policy, &needs))
        return fail(err, 400, "smallkv.policy", "invalid_value", "%s", smallkv_last_error());
    if ((needs & SMALLKV_NEEDS_SLM) && !cfg->slm)
        return fail(err, 400, "smallkv.policy", "invalid_value", "policy '%s' needs an SLM; the server has none (--slm)", o->policy);
    if ((needs & SMALLKV_NEEDS_PROFILE) && !cfg->profile)
        return fail(err, 400, "smallkv.policy", "invalid_value", "policy '%s' needs a profile; the server has none (--profile)", o->policy);
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, chat ? "messages" : "prompt");
    if (!prompt) return fail(err, 400, chat ? "messages" : "prompt", "missing_field", "missing field '%s'", chat ? "messages" : "prompt");
    int rc = chat ? tokenize_chat(p, prompt, o, err) : tokenize_prompt(p, prompt, o, err);
    if (rc) return rc;
    if (o->n_ids >= cfg->ctx)
        return fail(err, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                    "the prompt has %d tokens; this server's context is %d tokens (prompt and reply)", o->n_ids, cfg->ctx);
    return 0;
}

int serve_parse(const serve_config *cfg, smallkv_pair *p, bool chat, const char *body, size_t len,
                serve_params *o, char **err) {
    memset(o, 0, sizeof *o);
    *err = NULL;
    o->chat = chat;
    o->max_tokens = cfg->default_max_tokens;
    o->temperature = 1.0f;
    o->seed = 0;
    snprintf(o->policy, sizeof o->policy, "%s", cfg->policy);
    o->budget = cfg->budget;
    if (len == 0) return fail(err, 400, NULL, "invalid_json", "empty body: expected a JSON object");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return fail(err, 400, NULL, "invalid_json", "malformed JSON near byte %zu", at);
    }
    int rc = parse_obj(cfg, p, chat, root, o, err);
    cJSON_Delete(root);
    if (rc) serve_params_free(o);
    return rc;
}
