/* request.c: a request body to serve_params (cJSON): the raw bytes checked first (UTF-8,
 * no NUL in strings, nothing after the object: cJSON would let these through), every
 * field's type and range checked, each OpenAI field implemented, accepted and ignored, or
 * refused by name (the table below; docs/serve.md lists it), unknown fields refused, the
 * model id checked, the prompt tokenised (chat messages with the model's template) and its
 * length checked against the context; the bodies of /tokenize and /detokenize; the
 * OpenAI-style error object; and the UTF-8 checks and repair the engine and replies share
 * (here so that the fuzz target, which links this file alone, has them). */
#include "serve.h"
#include <cjson/cJSON.h>
#include <errno.h>
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

/* ---- UTF-8 ---- */

int serve_utf8_char(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) return 0;
    if (u[0] < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;   /* the second byte's range (RFC 3629 table) */
    if (u[0] >= 0xC2 && u[0] <= 0xDF) need = 1;
    else if (u[0] >= 0xE0 && u[0] <= 0xEF) { need = 2; if (u[0] == 0xE0) lo = 0xA0; if (u[0] == 0xED) hi = 0x9F; }
    else if (u[0] >= 0xF0 && u[0] <= 0xF4) { need = 3; if (u[0] == 0xF0) lo = 0x90; if (u[0] == 0xF4) hi = 0x8F; }
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        if (u[k] < (k == 1 ? lo : 0x80) || u[k] > (k == 1 ? hi : 0xBF)) return -1;
    }
    return need + 1;
}

/* A NUL byte counts as ill-formed too: cJSON strings end at it, so it would cut the text. */
size_t serve_utf8_fix(const char *s, size_t n, char *out, size_t *tail) {
    size_t o = 0, i = 0;
    if (tail) *tail = 0;
    while (i < n) {
        int k = serve_utf8_char(s + i, n - i);
        if (k == 0 && tail) { *tail = n - i; break; }
        if (k <= 0 || s[i] == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            if (k == 0) break;   /* one U+FFFD for the cut character */
            i++;
            continue;
        }
        memcpy(out + o, s + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
    }
    return o;
}

/* ---- the raw body ---- */

/* What cJSON lets through: bytes that are not UTF-8, raw control characters in strings,
 * and the escape \u0000 (a cJSON string ends at the NUL: the text after it would be lost). */
static int check_raw(const char *s, size_t n, char **err) {
    bool in_str = false;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            int k = serve_utf8_char(s + i, n - i);
            if (k <= 0) return fail(err, 400, NULL, "invalid_encoding", "the body is not UTF-8 (byte %zu)", i);
            i += (size_t)k;
            continue;
        }
        if (!in_str) {
            in_str = c == '"';
        } else if (c < 0x20) {
            return fail(err, 400, NULL, "invalid_json", "a raw control character in a string (byte %zu): escape it", i);
        } else if (c == '"') {
            in_str = false;
        } else if (c == '\\') {
            if (n - i >= 6 && !memcmp(s + i + 1, "u0000", 5))
                return fail(err, 400, NULL, "invalid_value", "a string holds NUL (\\u0000, byte %zu), which this server cannot carry", i);
            if (++i < n && (unsigned char)s[i] < 0x80) i++;   /* the escaped character */
            continue;
        }
        i++;
    }
    return 0;
}

/* the body as a JSON object, or NULL with *status and *err set */
static cJSON *parse_body(const char *body, size_t len, int *status, char **err) {
    if (len == 0) { *status = fail(err, 400, NULL, "invalid_json", "empty body: expected a JSON object"); return NULL; }
    if ((*status = check_raw(body, len, err))) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        *status = fail(err, 400, NULL, "invalid_json", "malformed JSON near byte %zu", at);
        return NULL;
    }
    while (end && end < body + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
    if (end && end < body + len) {
        *status = fail(err, 400, NULL, "invalid_json", "trailing data after the JSON value (byte %zu)", (size_t)(end - body));
    } else if (!cJSON_IsObject(root)) {
        *status = fail(err, 400, NULL, "invalid_json", "the body must be a JSON object");
    } else {
        return root;
    }
    cJSON_Delete(root);
    return NULL;
}

void serve_params_free(serve_params *p) {
    free(p->ids);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->bias_id);
    free(p->bias);
    memset(p, 0, sizeof *p);
}

/* ---- fields ---- */

/* Every field each endpoint takes (CH chat, CO completions). What becomes of each is in
 * parse_field: implemented, accepted and ignored (type-checked), or accepted only with its
 * do-nothing value and refused by name otherwise. Anything else is an unknown field. */
enum { CH = 1, CO = 2, BOTH = 3 };
static const struct { const char *name; int where; } FIELDS[] = {
    { "model", BOTH }, { "messages", CH }, { "prompt", CO }, { "max_tokens", BOTH }, { "max_completion_tokens", CH },
    { "temperature", BOTH }, { "top_p", BOTH }, { "top_k", BOTH }, { "min_p", BOTH }, { "presence_penalty", BOTH },
    { "frequency_penalty", BOTH }, { "logit_bias", BOTH }, { "seed", BOTH }, { "stop", BOTH }, { "stream", BOTH },
    { "stream_options", BOTH }, { "n", BOTH }, { "smallkv", BOTH },
    { "user", BOTH }, { "store", CH }, { "metadata", CH }, { "parallel_tool_calls", CH }, { "service_tier", CH },
    { "prompt_cache_key", CH }, { "safety_identifier", CH },
    { "logprobs", BOTH }, { "top_logprobs", CH }, { "response_format", BOTH }, { "tools", CH }, { "tool_choice", CH },
    { "functions", CH }, { "function_call", CH }, { "modalities", CH }, { "best_of", CO }, { "echo", CO }, { "suffix", CO },
    { "audio", CH }, { "prediction", CH }, { "web_search_options", CH }, { "reasoning_effort", CH }, { "verbosity", CH },
};

static bool known(bool chat, const char *k) {
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++)
        if (!strcmp(FIELDS[i].name, k)) return FIELDS[i].where & (chat ? CH : CO);
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

/* a number in [lo, hi], or (lo, hi] when open */
static int get_num(cJSON *v, const char *name, double lo, double hi, bool open, float *out, char **err) {
    if (!cJSON_IsNumber(v)) return fail(err, 400, name, "invalid_type", "'%s' must be a number", name);
    const double x = v->valuedouble;
    if (!(open ? x > lo : x >= lo) || !(x <= hi))
        return fail(err, 400, name, "invalid_value", "'%s' must be in %c%g, %g] (got %g)", name, open ? '(' : '[', lo, hi, x);
    *out = (float)x;
    return 0;
}

static int want_type(const char *name, int ok, const char *what, char **err) {
    return ok ? 0 : fail(err, 400, name, "invalid_type", "'%s' must be %s", name, what);
}

/* a field this server cannot act on, given a value that asks it to */
static int refuse(char **err, const char *name, const char *why) {
    return fail(err, 400, name, "unsupported_value", "'%s': %s", name, why);
}

static int parse_stop(cJSON *v, serve_params *o, char **err) {
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

static int parse_smallkv(cJSON *v, serve_params *o, char **err) {
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

/* {"token id": bias in [-100, 100], ...}: added to the logits before sampling */
static int parse_bias(cJSON *v, smallkv_pair *p, serve_params *o, char **err) {
    if (!cJSON_IsObject(v)) return fail(err, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object");
    const int n = cJSON_GetArraySize(v), V = p ? smallkv_vocab(p) : 0;
    if (n == 0) return 0;
    if (!(o->bias_id = malloc((size_t)n * sizeof(int))) || !(o->bias = malloc((size_t)n * sizeof(float))))
        return fail(err, 500, NULL, NULL, "out of memory");
    cJSON *f;
    cJSON_ArrayForEach(f, v) {
        char *end;
        errno = 0;
        long id = strtol(f->string, &end, 10);
        if (errno || end == f->string || *end || id < 0 || id >= V)
            return fail(err, 400, "logit_bias", "invalid_value", "'logit_bias' key '%.40s' is not a token id in [0, %d)", f->string, V);
        if (!cJSON_IsNumber(f) || !(f->valuedouble >= -100 && f->valuedouble <= 100))
            return fail(err, 400, "logit_bias", "invalid_value", "'logit_bias' values must be numbers in [-100, 100]");
        o->bias_id[o->n_bias] = (int)id;
        o->bias[o->n_bias++] = (float)f->valuedouble;
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
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type"), *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(t)) return NULL;
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
    if (!m) return fail(err, 500, NULL, NULL, "out of memory");
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
        const char *role = r->valuestring;
        if (!strcmp(role, "developer")) role = "system";   /* OpenAI's newer name for the system turn */
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
            rc = fail(err, 400, param, "invalid_value", "'%s.role' is '%.40s' (system, developer, user or assistant)", param,
                      r->valuestring);
            break;
        }
        char *t = content_text(c);
        if (!t) {
            rc = fail(err, 400, param, "invalid_type", "'%s.content' must be a string or an array of text parts", param);
            break;
        }
        m[i].role = role;
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

/* token ids given by the client: integers in [0, vocab) */
static int take_ids(smallkv_pair *p, cJSON *v, const char *name, int **ids, int *n, char **err) {
    const int k = cJSON_GetArraySize(v), V = p ? smallkv_vocab(p) : 0;
    *n = 0;
    if (k > 0 && !(*ids = malloc((size_t)k * sizeof(int)))) return fail(err, 500, NULL, NULL, "out of memory");
    cJSON *t;
    cJSON_ArrayForEach(t, v) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || !(t->valuedouble >= 0 && t->valuedouble < V))
            return fail(err, 400, name, "invalid_value", "'%s' must hold token ids in [0, %d)", name, V);
        (*ids)[(*n)++] = (int)t->valuedouble;
    }
    return 0;
}

/* a string, or one prompt as [string], [token ids] or [[token ids]] */
static int tokenize_prompt(smallkv_pair *p, cJSON *v, serve_params *o, char **err) {
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && !cJSON_IsNumber(v->child)) v = v->child;
    if (cJSON_IsArray(v)) {
        if (!v->child) return fail(err, 400, "prompt", "invalid_value", "'prompt' must not be empty");
        if (!cJSON_IsNumber(v->child))
            return fail(err, 400, "prompt", "invalid_value", "'prompt' must be one prompt (batches are not supported)");
        return take_ids(p, v, "prompt", &o->ids, &o->n_ids, err);
    }
    if (!cJSON_IsString(v)) return fail(err, 400, "prompt", "invalid_type", "'prompt' must be a string or token ids");
    if (!*v->valuestring) return fail(err, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    int k = smallkv_tokenize(p, v->valuestring, SMALLKV_TOK_BOS, NULL, 0);
    if (k < 1 || !(o->ids = malloc((size_t)k * sizeof(int))) ||
        smallkv_tokenize(p, v->valuestring, SMALLKV_TOK_BOS, o->ids, k) != k)
        return fail(err, 400, "prompt", "invalid_value", "cannot tokenise the prompt: %s", smallkv_last_error());
    o->n_ids = k;
    return 0;
}

/* one field (not null); 0 or the status */
static int parse_field(const serve_config *cfg, smallkv_pair *p, cJSON *f, serve_params *o, char **err) {
    const char *k = f->string;
    double d;
    int rc = 0;
    /* implemented */
    if (!strcmp(k, "model")) {
        if ((rc = want_type(k, cJSON_IsString(f), "a string", err))) return rc;
        if (cfg->model_name && strcmp(f->valuestring, cfg->model_name))
            return fail(err, 404, k, "model_not_found", "the model '%.100s' does not exist; this server has '%.100s'",
                        f->valuestring, cfg->model_name);
    } else if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
        if (!(rc = get_int(f, k, 1, cfg->ctx, &d, err))) o->max_tokens = (int)d;
    } else if (!strcmp(k, "temperature")) {
        if (!cJSON_IsNumber(f)) return fail(err, 400, k, "invalid_value", "'temperature' must be a number in [0, 2]");
        rc = get_num(f, k, 0, 2, false, &o->temperature, err);
    } else if (!strcmp(k, "top_p")) {
        rc = get_num(f, k, 0, 1, true, &o->top_p, err);
    } else if (!strcmp(k, "min_p")) {
        rc = get_num(f, k, 0, 1, false, &o->min_p, err);
    } else if (!strcmp(k, "top_k")) {   /* llama.cpp's and vLLM's extension; 0 and -1: off */
        if (!(rc = get_int(f, k, -1, 2147483647.0, &d, err))) o->top_k = d > 0 ? (int)d : 0;
    } else if (!strcmp(k, "presence_penalty")) {
        rc = get_num(f, k, -2, 2, false, &o->presence, err);
    } else if (!strcmp(k, "frequency_penalty")) {
        rc = get_num(f, k, -2, 2, false, &o->frequency, err);
    } else if (!strcmp(k, "logit_bias")) {
        rc = parse_bias(f, p, o, err);
    } else if (!strcmp(k, "seed")) {
        if (!(rc = get_int(f, k, -9.007199254740992e15, 9.007199254740992e15, &d, err))) o->seed = (unsigned long long)(long long)d;
    } else if (!strcmp(k, "stop")) {
        rc = parse_stop(f, o, err);
    } else if (!strcmp(k, "stream")) {
        if (!(rc = want_type(k, cJSON_IsBool(f), "a boolean", err))) o->stream = cJSON_IsTrue(f);
    } else if (!strcmp(k, "stream_options")) {
        if (!(rc = want_type(k, cJSON_IsObject(f), "an object", err)))
            o->stream_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "include_usage"));
    } else if (!strcmp(k, "smallkv")) {
        rc = parse_smallkv(f, o, err);
    } else if (!strcmp(k, "n") || !strcmp(k, "best_of")) {
        if (!(rc = get_int(f, k, 1, 128, &d, err)) && d > 1) rc = refuse(err, k, "one choice per request (1)");
    /* accepted and ignored */
    } else if (!strcmp(k, "user") || !strcmp(k, "service_tier") || !strcmp(k, "prompt_cache_key") || !strcmp(k, "safety_identifier")) {
        rc = want_type(k, cJSON_IsString(f), "a string", err);
    } else if (!strcmp(k, "store") || !strcmp(k, "parallel_tool_calls")) {
        rc = want_type(k, cJSON_IsBool(f), "a boolean", err);
    } else if (!strcmp(k, "metadata")) {
        rc = want_type(k, cJSON_IsObject(f), "an object", err);
    } else if (!strcmp(k, "logprobs")) {   /* chat: a boolean; completions: a count 0..5 (false: none) */
        if (o->chat) {
            if (!(rc = want_type(k, cJSON_IsBool(f), "a boolean", err))) o->logprobs = cJSON_IsTrue(f);
        } else if (!cJSON_IsFalse(f) && !(rc = get_int(f, k, 0, 5, &d, err))) {
            o->logprobs = true;
            o->top_logprobs = (int)d;
        }
    } else if (!strcmp(k, "top_logprobs")) {   /* chat; needs logprobs: true (checked after) */
        if (!(rc = get_int(f, k, 0, SERVE_MAX_TOP, &d, err))) o->top_logprobs = (int)d;
    } else if (!strcmp(k, "response_format")) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
        if ((rc = want_type(k, cJSON_IsObject(f) && cJSON_IsString(t), "an object with a string 'type'", err))) return rc;
        if (!strcmp(t->valuestring, "json_object"))
            o->json = true;
        else if (!strcmp(t->valuestring, "json_schema"))
            rc = refuse(err, k, "structured outputs (json_schema) are not supported; 'json_object' gives any JSON object");
        else if (strcmp(t->valuestring, "text"))
            rc = fail(err, 400, k, "invalid_value", "'response_format.type' is '%.40s' (text or json_object)", t->valuestring);
    /* accepted with the value that asks for nothing, refused otherwise */
    } else if (!strcmp(k, "tools") || !strcmp(k, "functions")) {
        if (!(rc = want_type(k, cJSON_IsArray(f), "an array", err)) && cJSON_GetArraySize(f) > 0)
            rc = refuse(err, k, "tool and function calling are not supported");
    } else if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call")) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "none") && strcmp(f->valuestring, "auto")))
            rc = refuse(err, k, "tool and function calling are not supported ('none' or 'auto' only)");
    } else if (!strcmp(k, "modalities")) {
        cJSON *m;
        if ((rc = want_type(k, cJSON_IsArray(f), "an array", err))) return rc;
        cJSON_ArrayForEach(m, f)
            if (!cJSON_IsString(m) || strcmp(m->valuestring, "text")) return refuse(err, k, "text output only ([\"text\"])");
    } else if (!strcmp(k, "echo")) {
        if (!(rc = want_type(k, cJSON_IsBool(f), "a boolean", err)) && cJSON_IsTrue(f))
            rc = refuse(err, k, "echoing the prompt is not supported");
    } else if (!strcmp(k, "suffix")) {
        if (!(rc = want_type(k, cJSON_IsString(f), "a string", err)) && *f->valuestring)
            rc = refuse(err, k, "insertion (a suffix) is not supported");
    } else {   /* audio, prediction, web_search_options, reasoning_effort, verbosity */
        rc = fail(err, 400, k, "unsupported_parameter", "'%s' is not supported by this server", k);
    }
    return rc;
}

static int parse_obj(const serve_config *cfg, smallkv_pair *p, bool chat, cJSON *root, serve_params *o, char **err) {
    cJSON *f;
    cJSON_ArrayForEach(f, root)
        if (!known(chat, f->string)) return fail(err, 400, f->string, "unknown_field", "unknown field '%.60s'", f->string);
    const char *pkey = chat ? "messages" : "prompt";
    cJSON_ArrayForEach(f, root) {
        if (cJSON_IsNull(f) || !strcmp(f->string, pkey)) continue;   /* null: as if absent */
        int rc = parse_field(cfg, p, f, o, err);
        if (rc) return rc;
    }
    if (chat && o->top_logprobs > 0 && !o->logprobs)
        return fail(err, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
    if (o->json && o->n_stop > 0)
        return fail(err, 400, "stop", "unsupported_value",
                    "'stop' cannot be used with response_format json_object: a stop string would cut the JSON");
    /* the policy: known, and what it needs is loaded */
    unsigned needs = 0;
    if (smallkv_policy_check(o->policy, &needs))
        return fail(err, 400, "smallkv.policy", "invalid_value", "%s", smallkv_last_error());
    if ((needs & SMALLKV_NEEDS_SLM) && !cfg->slm)
        return fail(err, 400, "smallkv.policy", "invalid_value", "policy '%s' needs an SLM; the server has none (--slm)", o->policy);
    if ((needs & SMALLKV_NEEDS_PROFILE) && !cfg->profile)
        return fail(err, 400, "smallkv.policy", "invalid_value", "policy '%s' needs a profile; the server has none (--profile)", o->policy);
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, pkey);
    if (!prompt || cJSON_IsNull(prompt)) return fail(err, 400, pkey, "missing_field", "missing field '%s'", pkey);
    int rc = chat ? tokenize_chat(p, prompt, o, err) : tokenize_prompt(p, prompt, o, err);
    if (rc) return rc;
    if (o->n_ids >= cfg->ctx)
        return fail(err, 400, pkey, "context_length_exceeded",
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
    o->top_p = 1.0f;
    snprintf(o->policy, sizeof o->policy, "%s", cfg->policy);
    o->budget = cfg->budget;
    int rc;
    cJSON *root = parse_body(body, len, &rc, err);
    if (!root) return rc;
    rc = parse_obj(cfg, p, chat, root, o, err);
    cJSON_Delete(root);
    if (rc) serve_params_free(o);
    return rc;
}

/* ---- /tokenize, /detokenize ---- */

/* a body with exactly the fields in names (NULL-terminated); NULL with *status, *err set */
static cJSON *small_body(const char *body, size_t len, const char *const *names, int *status, char **err) {
    cJSON *root = parse_body(body, len, status, err), *f;
    if (!root) return NULL;
    cJSON_ArrayForEach(f, root) {
        const char *const *q = names;
        while (*q && strcmp(*q, f->string)) q++;
        if (!*q) {
            *status = fail(err, 400, f->string, "unknown_field", "unknown field '%.60s'", f->string);
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

int serve_parse_tokenize(smallkv_pair *p, const char *body, size_t len, int **ids, int *n, char **err) {
    static const char *const NAMES[] = { "content", "add_special", NULL };
    int rc;
    *ids = NULL; *n = 0; *err = NULL;
    cJSON *root = small_body(body, len, NAMES, &rc, err);
    if (!root) return rc;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content"), *sp = cJSON_GetObjectItemCaseSensitive(root, "add_special");
    if (!cJSON_IsString(c)) rc = fail(err, 400, "content", c ? "invalid_type" : "missing_field", "'content' must be a string");
    else if (sp && !cJSON_IsBool(sp)) rc = fail(err, 400, "add_special", "invalid_type", "'add_special' must be a boolean");
    if (!rc) {
        const int flags = cJSON_IsTrue(sp) ? SMALLKV_TOK_BOS : 0;
        int k = smallkv_tokenize(p, c->valuestring, flags, NULL, 0);
        if (k < 0 || (k > 0 && (!(*ids = malloc((size_t)k * sizeof(int))) || smallkv_tokenize(p, c->valuestring, flags, *ids, k) != k)))
            rc = fail(err, 400, "content", "invalid_value", "cannot tokenise the content: %s", smallkv_last_error());
        else
            *n = k;
    }
    cJSON_Delete(root);
    if (rc) { free(*ids); *ids = NULL; *n = 0; }
    return rc;
}

int serve_parse_detokenize(smallkv_pair *p, const char *body, size_t len, int **ids, int *n, char **err) {
    static const char *const NAMES[] = { "tokens", NULL };
    int rc;
    *ids = NULL; *n = 0; *err = NULL;
    cJSON *root = small_body(body, len, NAMES, &rc, err);
    if (!root) return rc;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t)) rc = fail(err, 400, "tokens", t ? "invalid_type" : "missing_field", "'tokens' must be an array of token ids");
    else rc = take_ids(p, t, "tokens", ids, n, err);
    cJSON_Delete(root);
    if (rc) { free(*ids); *ids = NULL; *n = 0; }
    return rc;
}
