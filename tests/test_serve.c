/* test_serve.c: `smallkv serve` end to end. The group starts the built binary on a free
 * loopback port (--port 0, the port read from its first line) with SmolLM2 as LLM and as
 * SLM with its self-pair profile (policy full by default, smallkv per request), an API key,
 * a 256 MiB session cache, a queue of 2 and a batch of 2, and talks to it with libcurl:
 * every endpoint, the chat page's safeguards, streaming, session reuse (a conversation's
 * second turn reports its first turn's tokens as cached, also under policy smallkv), shared
 * prefixes (policy full: questions on one document fork its cached prefix), evictions at
 * the cache bound, stop strings, the error objects for bad input (and 120 garbage bodies),
 * limits (body, headers), 429 with Retry-After when the queue is full, clients that go away
 * (their sequences are cancelled), the request time limit (504) and slow clients (raw
 * sockets that trickle headers or a body: deadlines, per-address and total caps, /health
 * answering meanwhile), each on a second server, bad command lines, and a clean exit on
 * SIGTERM. What real clients need: replies that are strict JSON
 * and well-formed UTF-8 even when generation stops inside a character (checked with this
 * file's own validators), the OpenAI request fields (implemented, ignored or refused by
 * name), log probabilities in OpenAI's chat and completions shapes (streamed equal to not,
 * the model's raw distribution whatever the sampler does, tokens cut inside a character),
 * JSON mode (replies that close parse as one object; max_tokens cuts with "length"), strict
 * input (NUL, trailing data, bad UTF-8, unknown model), CORS and preflight,
 * and llama-server's /tokenize, /detokenize, /props and /v1/models/{id}. Skips when the
 * model is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/support/test_env.h"

static const char *KEY = "sk-test";
static pid_t server_pid = -1;
static pid_t second_pid = -1;   /* a test's own server (stop_second; teardown when the test fails) */
static char first_base[64];     /* base while a second server is in use */
static char base[64];

typedef struct { char *s; size_t n; long abort_after; } buf;

static size_t on_data(char *p, size_t sz, size_t nm, void *u) {
    buf *b = u;
    size_t n = sz * nm;
    char *t = realloc(b->s, b->n + n + 1);
    if (!t) return 0;
    b->s = t;
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    if (b->abort_after > 0 && (long)b->n >= b->abort_after) return 0;   /* hang up */
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
    buf *b = u;
    return on_data(p, sz, nm, b);
}

typedef struct { long status; buf body, head; CURLcode rc; } resp;

static CURL *make(const char *method, const char *path, const char *body, const char *key, resp *r,
                  struct curl_slist **hs) {
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->head);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    *hs = curl_slist_append(NULL, "Content-Type: application/json");
    if (key) {
        char h[128];
        snprintf(h, sizeof h, "Authorization: Bearer %s", key);
        *hs = curl_slist_append(*hs, h);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hs);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    return c;
}

static resp call(const char *method, const char *path, const char *body, const char *key) {
    resp r = {0};
    struct curl_slist *hs;
    CURL *c = make(method, path, body, key, &r, &hs);
    r.rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    return r;
}

static void resp_free(resp *r) { free(r->body.s); free(r->head.s); }

/* the code of an OpenAI error object, asserting its shape */
static void assert_error(resp *r, long status, const char *code) {
    assert_int_equal(r->status, status);
    cJSON *j = cJSON_Parse(r->body.s);
    assert_non_null(j);
    cJSON *e = cJSON_GetObjectItem(j, "error");
    assert_true(cJSON_IsObject(e));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    assert_non_null(cJSON_GetObjectItem(e, "code"));
    if (code) assert_string_equal(cJSON_GetObjectItem(e, "code")->valuestring, code);
    cJSON_Delete(j);
}

/* a request with raw header lines (no key unless one is among them) */
static resp call_hdrs(const char *method, const char *path, const char *body, const char *const *lines) {
    resp r = {0};
    struct curl_slist *hs;
    CURL *c = make(method, path, body, NULL, &r, &hs);
    for (; *lines; lines++) hs = curl_slist_append(hs, *lines);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    r.rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    return r;
}

/* ---- strict checks of what the server sends (independent of the server's code) ---- */

/* well-formed UTF-8 (RFC 3629): each sequence decoded, no overlong form, no surrogate,
 * nothing above U+10FFFF, nothing cut short */
static bool utf8_ok(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    static const unsigned MIN[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], cp;
        size_t len;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < MIN[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

/* RFC 8259 JSON, nothing before or after the value; \u escapes must pair surrogates */
typedef struct { const char *s; size_t n, i; int depth; } jpos;
static int jpeek(jpos *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }
static void jws(jpos *p) { while (jpeek(p) == ' ' || jpeek(p) == '\t' || jpeek(p) == '\n' || jpeek(p) == '\r') p->i++; }
static bool jdigits(jpos *p) {
    size_t i0 = p->i;
    while (jpeek(p) >= '0' && jpeek(p) <= '9') p->i++;
    return p->i > i0;
}
static long jhex4(jpos *p) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int c = jpeek(p);
        if (c < 0 || !strchr("0123456789abcdefABCDEF", c)) return -1;
        v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        p->i++;
    }
    return v;
}
static bool jstring(jpos *p) {
    if (jpeek(p) != '"') return false;
    p->i++;
    for (;;) {
        int c = jpeek(p);
        if (c < 0x20) return false;   /* the end, or a raw control character */
        p->i++;
        if (c == '"') return true;
        if (c != '\\') continue;
        c = jpeek(p);
        p->i++;
        if (c == 'u') {
            long u = jhex4(p);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (jpeek(p) != '\\') return false;
                p->i++;
                if (jpeek(p) != 'u') return false;
                p->i++;
                long lo = jhex4(p);
                if (lo < 0xDC00 || lo > 0xDFFF) return false;
            }
        } else if (c < 0 || !strchr("\"\\/bfnrt", c)) {
            return false;
        }
    }
}
static bool jvalue(jpos *p);
static bool jcontainer(jpos *p, int close, bool keys) {
    p->i++;
    jws(p);
    if (jpeek(p) == close) { p->i++; return true; }
    for (;;) {
        jws(p);
        if (keys) {
            if (!jstring(p)) return false;
            jws(p);
            if (jpeek(p) != ':') return false;
            p->i++;
        }
        if (!jvalue(p)) return false;
        if (jpeek(p) == ',') { p->i++; continue; }
        if (jpeek(p) != close) return false;
        p->i++;
        return true;
    }
}
static bool jvalue(jpos *p) {
    if (++p->depth > 64) return false;
    jws(p);
    int c = jpeek(p);
    bool ok;
    if (c == '{') ok = jcontainer(p, '}', true);
    else if (c == '[') ok = jcontainer(p, ']', false);
    else if (c == '"') ok = jstring(p);
    else if (c == 't' || c == 'f' || c == 'n') {
        const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
        ok = p->n - p->i >= strlen(w) && !memcmp(p->s + p->i, w, strlen(w));
        p->i += strlen(w);
    } else {
        if (jpeek(p) == '-') p->i++;
        if (jpeek(p) == '0') p->i++;
        else if (!(jpeek(p) >= '1' && jpeek(p) <= '9') || !jdigits(p)) return false;
        ok = true;
        if (jpeek(p) == '.') { p->i++; ok = jdigits(p); }
        if (ok && (jpeek(p) == 'e' || jpeek(p) == 'E')) {
            p->i++;
            if (jpeek(p) == '+' || jpeek(p) == '-') p->i++;
            ok = jdigits(p);
        }
    }
    p->depth--;
    jws(p);
    return ok;
}
static bool json_strict(const char *s, size_t n) {
    jpos p = { s, n, 0, 0 };
    return utf8_ok(s, n) && jvalue(&p) && p.i == n;
}

static double metric(const char *name) {
    resp r = call("GET", "/metrics", NULL, KEY);
    assert_int_equal(r.status, 200);
    const char *p = r.body.s;
    double v = -1;
    size_t n = strlen(name);
    while ((p = strstr(p, name))) {
        if ((p == r.body.s || p[-1] == '\n') && p[n] == ' ') { v = atof(p + n + 1); break; }
        p += n;
    }
    resp_free(&r);
    return v;
}

/* start `smallkv serve --llm SmolLM2 --port 0 ARGS...` (NULL-terminated), its URL into
 * url; the pid, or -1 when it did not start */
static pid_t start_server(char *url, size_t n, ...) {
    char model[1024], bin[1024];
    if (!test_model_path(model, sizeof model, TEST_SMOL)) return -1;
    test_bin_path(bin, sizeof bin, "smallkv");
    const char *argv[40] = { bin, "serve", "--llm", model, "--port", "0" };
    int k = 6;
    va_list ap;
    va_start(ap, n);
    for (const char *a; k < 39 && (a = va_arg(ap, const char *));) argv[k++] = a;
    va_end(ap);
    argv[k] = NULL;
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        setenv("OMP_NUM_THREADS", "1", 1);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[512] = "";
    const char *u = fgets(line, sizeof line, f) ? strstr(line, "http://") : NULL;
    fclose(f);
    if (!u) { waitpid(pid, NULL, 0); return -1; }   /* the server did not start */
    size_t i = 0;
    while (u[i] && u[i] != ' ' && u[i] != '\n' && i < n - 1) { url[i] = u[i]; i++; }
    url[i] = 0;
    return pid;
}

static int setup(void **state) {
    (void)state;
    char model[1024];
    if (!test_model_path(model, sizeof model, TEST_SMOL)) return 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server_pid = start_server(base, sizeof base, "--slm", model, "--profile", "profiles/smollm2-135m-self.skvprof",
                              "--policy", "full", "--api-key", KEY, "--queue", "2", "--batch", "2", "--max-tokens", "8",
                              "--max-body", "65536", "--ctx", "512", "--cache-bytes", "256M", "--timeout", "60",
                              (const char *)NULL);
    return server_pid > 0 ? 0 : -1;
}

/* a second server with these flags (NULL-terminated) in base */
#define START_SECOND(...) do { \
        snprintf(first_base, sizeof first_base, "%s", base); \
        second_pid = start_server(base, sizeof base, __VA_ARGS__, (const char *)NULL); \
        if (second_pid <= 0) snprintf(base, sizeof base, "%s", first_base); \
        assert_true(second_pid > 0); \
    } while (0)

/* SIGTERM to the second server, base back to the first; true when it stopped cleanly */
static bool stop_second(void) {
    if (second_pid <= 0) return true;
    snprintf(base, sizeof base, "%s", first_base);
    kill(second_pid, SIGTERM);
    int st = 0;
    waitpid(second_pid, &st, 0);
    second_pid = -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int teardown(void **state) {
    (void)state;
    stop_second();
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        int st = 0;
        waitpid(server_pid, &st, 0);
        curl_global_cleanup();
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "server exit status %d\n", st);
            return -1;   /* a crash or a bad exit fails the group */
        }
    }
    return 0;
}

#define NEED_SERVER() do { if (server_pid <= 0) TEST_SKIP_MODEL(TEST_SMOL); } while (0)

static void test_endpoints(void **state) {
    (void)state;
    NEED_SERVER();
    resp r = call("GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body.s, "ok"));
    resp_free(&r);
    r = call("GET", "/v1/models", NULL, KEY);
    assert_int_equal(r.status, 200);
    cJSON *j = cJSON_Parse(r.body.s);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id")->valuestring, TEST_SMOL);
    cJSON_Delete(j);
    resp_free(&r);
    r = call("GET", "/", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body.s, "<html"));
    assert_non_null(strstr(r.body.s, "/v1/chat/completions"));
    resp_free(&r);
    r = call("GET", "/metrics", NULL, KEY);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_true(metric("smallkv_queue_length") >= 0);
    assert_true(metric("smallkv_process_resident_bytes") > 0);
    assert_true(metric("smallkv_session_cache_evictions_total") >= 0);
    assert_true(metric("smallkv_kv_bytes{tier=\"hot\"}") >= 0);
    assert_true(metric("smallkv_kv_bytes{tier=\"slm\"}") >= 0);
    assert_true(metric("smallkv_tokens_per_second") >= 0);
    r = call("GET", "/nope", NULL, KEY);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
    r = call("GET", "/v1/chat/completions", NULL, KEY);
    assert_error(&r, 405, "method_not_allowed");
    resp_free(&r);
}

/* the chat page: served without the key, self-contained, one request at a time with a stop
 * control, the key from a password field kept in sessionStorage (never from the URL), the
 * model's id from /v1/models, replies never set as HTML (tests/serve_page.sh runs it) */
static void test_page(void **state) {
    (void)state;
    NEED_SERVER();
    resp r = call("GET", "/", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head.s, "Content-Type: text/html; charset=utf-8"));
    const char *h = r.body.s;
    static const char *HAS[] = { "id=\"stop\"", "AbortController", "abort()", "$('send').disabled=on", "sessionStorage",
                                 "type=\"password\"", "fetch('/v1/models'", "id=\"model\"", "r.text()", "JSON.parse(t)" };
    for (size_t i = 0; i < sizeof HAS / sizeof HAS[0]; i++) {
        if (!strstr(h, HAS[i])) fprintf(stderr, "the page lacks %s\n", HAS[i]);
        assert_non_null(strstr(h, HAS[i]));
    }
    /* no key from the URL, no HTML from text, nothing from elsewhere */
    static const char *NOT[] = { "?key=", "get('key')", "location.search", "innerHTML", "outerHTML", "insertAdjacentHTML",
                                 "document.write", "<script src", "<link", "http://", "https://" };
    for (size_t i = 0; i < sizeof NOT / sizeof NOT[0]; i++) {
        if (strstr(h, NOT[i])) fprintf(stderr, "the page has %s\n", NOT[i]);
        assert_null(strstr(h, NOT[i]));
    }
    resp_free(&r);
}

static void test_api_key(void **state) {
    (void)state;
    NEED_SERVER();
    resp r = call("GET", "/v1/models", NULL, NULL);
    assert_error(&r, 401, "invalid_api_key");
    resp_free(&r);
    r = call("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "sk-wrong");
    assert_error(&r, 401, "invalid_api_key");
    resp_free(&r);
    r = call("GET", "/metrics", NULL, "sk-tes");
    assert_error(&r, 401, "invalid_api_key");
    resp_free(&r);
}

static cJSON *chat_ok(const char *body) {
    resp r = call("POST", "/v1/chat/completions", body, KEY);
    if (r.status != 200) fprintf(stderr, "%ld %s\n", r.status, r.body.s);
    assert_int_equal(r.status, 200);
    cJSON *j = cJSON_Parse(r.body.s);
    assert_non_null(j);
    resp_free(&r);
    return j;
}

static void test_chat_and_completion(void **state) {
    (void)state;
    NEED_SERVER();
    cJSON *j = chat_ok("{\"model\":\"" TEST_SMOL "\",\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],"
                       "\"temperature\":0,\"max_tokens\":6,\"seed\":3}");
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *m = cJSON_GetObjectItem(c, "message");
    assert_string_equal(cJSON_GetObjectItem(m, "role")->valuestring, "assistant");
    assert_true(strlen(cJSON_GetObjectItem(m, "content")->valuestring) > 0);
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length");
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    assert_int_equal(cJSON_GetObjectItem(u, "completion_tokens")->valueint, 6);
    assert_true(cJSON_GetObjectItem(u, "prompt_tokens")->valueint > 10);
    cJSON *mem = cJSON_GetObjectItem(j, "smallkv");
    assert_true(cJSON_GetObjectItem(mem, "hot_bytes")->valuedouble > 0);
    assert_string_equal(cJSON_GetObjectItem(mem, "policy")->valuestring, "full");
    cJSON_Delete(j);
    /* per-request policy and budget */
    j = chat_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],\"temperature\":0,"
                "\"max_tokens\":4,\"smallkv\":{\"policy\":\"h2o\",\"budget\":0.5}}");
    mem = cJSON_GetObjectItem(j, "smallkv");
    assert_string_equal(cJSON_GetObjectItem(mem, "policy")->valuestring, "h2o");
    assert_true(cJSON_GetObjectItem(mem, "hot_bytes")->valuedouble < cJSON_GetObjectItem(mem, "full_bytes")->valuedouble);
    cJSON_Delete(j);
    /* text completion */
    resp r = call("POST", "/v1/completions", "{\"prompt\":\"The capital of France is\",\"temperature\":0,\"max_tokens\":5}", KEY);
    assert_int_equal(r.status, 200);
    j = cJSON_Parse(r.body.s);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text")->valuestring, "Paris"));
    cJSON_Delete(j);
    resp_free(&r);
    /* a stop string cuts the text and ends with "stop" */
    r = call("POST", "/v1/completions", "{\"prompt\":\"The capital of France is\",\"temperature\":0,\"max_tokens\":8,\"stop\":[\"aris\"]}", KEY);
    assert_int_equal(r.status, 200);
    j = cJSON_Parse(r.body.s);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c, "text")->valuestring, " P");
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
    cJSON_Delete(j);
    resp_free(&r);
}

static void test_stream(void **state) {
    (void)state;
    NEED_SERVER();
    resp r = call("POST", "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],\"temperature\":0,"
                  "\"max_tokens\":6,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", KEY);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head.s, "text/event-stream"));
    /* every event is "data: JSON"; the deltas add up; a finish chunk, a usage chunk, [DONE] */
    char text[512] = "";
    int events = 0, finish = 0, usage = 0, done = 0;
    for (char *p = r.body.s, *e; (e = strstr(p, "\n\n")); p = e + 2) {
        *e = 0;
        assert_memory_equal(p, "data: ", 6);
        events++;
        if (!strcmp(p + 6, "[DONE]")) { done++; continue; }
        cJSON *j = cJSON_Parse(p + 6);
        assert_non_null(j);
        assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (c) {
            cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content");
            if (cJSON_IsString(d)) strncat(text, d->valuestring, sizeof text - strlen(text) - 1);
            if (cJSON_IsString(cJSON_GetObjectItem(c, "finish_reason"))) finish++;
        }
        if (cJSON_GetObjectItem(j, "usage")) {
            usage++;
            assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 6);
        }
        cJSON_Delete(j);
    }
    assert_true(events >= 8);
    assert_int_equal(finish, 1);
    assert_int_equal(usage, 1);
    assert_int_equal(done, 1);
    /* the same text as without streaming */
    cJSON *j = chat_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],\"temperature\":0,\"max_tokens\":6}");
    assert_string_equal(text, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                                                       "message"), "content")->valuestring);
    cJSON_Delete(j);
    resp_free(&r);
}

static void test_session_reuse(void **state) {
    (void)state;
    NEED_SERVER();
    double before = metric("smallkv_reused_tokens_total");
    cJSON *a = chat_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi! Who are you?\"}],\"temperature\":0,\"max_tokens\":12}");
    cJSON *ua = cJSON_GetObjectItem(a, "usage");
    const int p1 = cJSON_GetObjectItem(ua, "prompt_tokens")->valueint;
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(ua, "prompt_tokens_details"), "cached_tokens")->valueint, 0);
    const char *reply = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0),
                                                                "message"), "content")->valuestring;
    /* the second turn: first turn + reply + a new user message */
    cJSON *req = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(req, "messages"), *m;
    const char *roles[3] = { "user", "assistant", "user" }, *conts[3] = { "Hi! Who are you?", reply, "Say it shorter." };
    for (int i = 0; i < 3; i++) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", roles[i]);
        cJSON_AddStringToObject(m, "content", conts[i]);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddNumberToObject(req, "max_tokens", 4);
    char *body = cJSON_PrintUnformatted(req);
    cJSON *b = chat_ok(body);
    cJSON *ub = cJSON_GetObjectItem(b, "usage");
    const int cached = cJSON_GetObjectItem(cJSON_GetObjectItem(ub, "prompt_tokens_details"), "cached_tokens")->valueint;
    /* at least the first prompt and all but the last reply token came from the session */
    assert_true(cached >= p1);
    assert_true(cached < cJSON_GetObjectItem(ub, "prompt_tokens")->valueint);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "smallkv"), "reused_tokens")->valueint, cached);
    assert_true(metric("smallkv_reused_tokens_total") >= before + cached);
    free(body);
    cJSON_Delete(req);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static cJSON *turn2(const char *user1, const char *reply, const char *user2, const char *extra) {
    cJSON *req = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(req, "messages");
    const char *roles[3] = { "user", "assistant", "user" }, *conts[3] = { user1, reply, user2 };
    for (int i = 0; i < 3; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", roles[i]);
        cJSON_AddStringToObject(m, "content", conts[i]);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddNumberToObject(req, "max_tokens", 4);
    cJSON_AddItemToObject(req, "smallkv", cJSON_Parse(extra));
    char *body = cJSON_PrintUnformatted(req);
    cJSON *r = chat_ok(body);
    free(body);
    cJSON_Delete(req);
    return r;
}

/* policy smallkv chosen per request: the SLM's memory shows, the LLM's hot tier is a
 * fraction of the full cache, and a second turn continues the session */
static void test_smallkv_policy(void **state) {
    (void)state;
    NEED_SERVER();
    cJSON *a = chat_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about the sea.\"}],\"temperature\":0,"
                       "\"max_tokens\":10,\"smallkv\":{\"policy\":\"smallkv\",\"budget\":0.2}}");
    cJSON *mem = cJSON_GetObjectItem(a, "smallkv");
    assert_string_equal(cJSON_GetObjectItem(mem, "policy")->valuestring, "smallkv");
    assert_true(cJSON_GetObjectItem(mem, "budget")->valuedouble == 0.2);
    assert_true(cJSON_GetObjectItem(mem, "slm_bytes")->valuedouble > 0);
    assert_true(cJSON_GetObjectItem(mem, "cold_bytes")->valuedouble > 0);
    assert_true(cJSON_GetObjectItem(mem, "hot_bytes")->valuedouble < 0.5 * cJSON_GetObjectItem(mem, "full_bytes")->valuedouble);
    const char *reply = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0),
                                                                "message"), "content")->valuestring;
    /* the same conversation under another budget does not take that session */
    cJSON *b = turn2("Tell me about the sea.", reply, "And rivers?", "{\"policy\":\"smallkv\",\"budget\":0.3}");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "smallkv"), "reused_tokens")->valueint, 0);
    cJSON_Delete(b);
    b = turn2("Tell me about the sea.", reply, "And rivers?", "{\"policy\":\"smallkv\",\"budget\":0.2}");
    const int p1 = cJSON_GetObjectItem(cJSON_GetObjectItem(a, "usage"), "prompt_tokens")->valueint;
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "smallkv"), "reused_tokens")->valueint >= p1);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* more conversations than the cache holds: the oldest are evicted and counted, the cache
 * stays within its bound */
static void test_evictions(void **state) {
    (void)state;
    NEED_SERVER();
    const double per = metric("smallkv_session_overhead_bytes"), before = metric("smallkv_session_cache_evictions_total");
    const int n = per > 0 ? (int)(256.0 * 1048576 / per) + 2 : 40;
    assert_true(n <= 300);
    for (int i = 0; i < n; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":\"Conversation number %d:\",\"max_tokens\":1,\"temperature\":0}", i);
        resp r = call("POST", "/v1/completions", body, KEY);
        assert_int_equal(r.status, 200);
        resp_free(&r);
    }
    assert_true(metric("smallkv_session_cache_evictions_total") >= before + 1);
    assert_true(metric("smallkv_session_cache_bytes") <= 256.0 * 1048576);
    assert_true(metric("smallkv_session_cache_sessions") >= 1);
}

static void test_bad_input(void **state) {
    (void)state;
    NEED_SERVER();
    static const struct { const char *path, *body; long status; const char *code; } C[] = {
        { "/v1/chat/completions", "{\"messages\":[", 400, "invalid_json" },
        { "/v1/chat/completions", "", 400, "invalid_json" },
        { "/v1/chat/completions", "[1,2]", 400, "invalid_json" },
        { "/v1/chat/completions", "{}", 400, "missing_field" },
        { "/v1/chat/completions", "{\"messages\":[]}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-3}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"9\"}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2.5}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":9}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"wat\":1}", 400, "unknown_field" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", 400, "unsupported_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"smallkv\":{\"policy\":\"nope\"}}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"smallkv\":{\"policy\":\"smallkv:bogus=1\"}}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"smallkv\":{\"policy\":5}}", 400, "invalid_type" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"smallkv\":{\"budget\":0}}", 400, "invalid_value" },
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"smallkv\":{\"budget\":0.5,\"x\":1}}", 400, "unknown_field" },
        { "/v1/completions", "{\"prompt\":7}", 400, "invalid_type" },
        { "/v1/completions", "{\"prompt\":\"\"}", 400, "invalid_value" },
        { "/v1/completions", "{\"prompt\":\"x\",\"messages\":[]}", 400, "unknown_field" },
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        resp r = call("POST", C[i].path, C[i].body, KEY);
        if (r.status != C[i].status) fprintf(stderr, "case %zu: %s -> %ld %s\n", i, C[i].body, r.status, r.body.s);
        assert_error(&r, C[i].status, C[i].code);
        resp_free(&r);
    }
    /* a prompt longer than the context (512 tokens) */
    size_t n = 6000;
    char *big = malloc(n + 64);
    strcpy(big, "{\"prompt\":\"");
    for (size_t i = strlen(big); i < n; i += 4) memcpy(big + i, "abc ", 4);
    strcpy(big + n, "\"}");
    resp r = call("POST", "/v1/completions", big, KEY);
    assert_error(&r, 400, "context_length_exceeded");
    resp_free(&r);
    free(big);
    /* a body over --max-body (64 KiB) */
    n = 100000;
    big = malloc(n + 1);
    memset(big, ' ', n);
    big[n] = 0;
    big[0] = '{';
    r = call("POST", "/v1/completions", big, KEY);
    assert_error(&r, 413, "body_too_large");
    resp_free(&r);
    free(big);
    /* headers over 32 KiB: our 431 error object while they fit the connection's memory,
     * libmicrohttpd's refusal beyond it; the server lives on */
    static const size_t HEADER[2] = { 70000, 300000 };
    for (int k = 0; k < 2; k++) {
        big = malloc(HEADER[k] + 8);
        strcpy(big, "X-Big: ");
        memset(big + 7, 'a', HEADER[k]);
        big[HEADER[k] + 7] = 0;
        const char *lines[] = { big, NULL };
        resp rr = call_hdrs("GET", "/health", NULL, lines);
        if (k == 0) assert_error(&rr, 431, "headers_too_large");
        else assert_true(rr.rc != CURLE_OK || rr.status >= 400);
        resp_free(&rr);
        free(big);
    }
    r = call("GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* garbage and mutated bodies: always an answer, never a server error */
    static const char VALID[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,\"stop\":[\"x\"],"
                                "\"smallkv\":{\"budget\":0.5}}";
    unsigned seed = 12345;
    char body[sizeof VALID + 8];
    int answered = 0;
    for (int k = 0; k < 120; k++) {
        memcpy(body, VALID, sizeof VALID);
        const int flips = 1 + k % 4;
        for (int f = 0; f < flips; f++) {
            seed = seed * 1103515245u + 12345u;
            int at = (int)((seed >> 8) % (sizeof VALID - 1));
            seed = seed * 1103515245u + 12345u;
            body[at] = k < 20 ? (char)(1 + (seed >> 16) % 255) : "{}[]\",:0123456789.-aeflnrstu \\"[(seed >> 16) % 29];
        }
        resp g = call("POST", "/v1/chat/completions", body, KEY);
        assert_true(g.rc == CURLE_OK);
        assert_true(g.status == 200 || (g.status >= 400 && g.status < 500));
        if (g.status != 200) assert_error(&g, g.status, NULL);
        answered++;
        resp_free(&g);
    }
    assert_int_equal(answered, 120);
}

/* ---- 1. replies are well-formed UTF-8 ---- */

/* a completion's text (chat: the message content) from a strict-JSON body, heap */
static char *body_text(const char *body, size_t n, bool chat, bool chunk) {
    if (!json_strict(body, n)) fprintf(stderr, "not strict JSON with well-formed UTF-8: %.*s\n", (int)n, body);
    assert_true(json_strict(body, n));
    cJSON *j = cJSON_ParseWithLength(body, n);
    assert_non_null(j);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, chunk ? "delta" : "message"), "content")
                    : cJSON_GetObjectItem(c, "text");
    char *out = strdup(cJSON_IsString(t) ? t->valuestring : "");
    cJSON_Delete(j);
    return out;
}

/* CJK and emoji prompts stopped after 1 to 3 tokens, where a reply often ends inside a
 * character: every body and every stream event is strict JSON with well-formed UTF-8 (no
 * cut bytes), and the stream's pieces add up to the reply */
static void test_utf8_replies(void **state) {
    (void)state;
    NEED_SERVER();
    static const char *PROMPTS[] = { "日本の首都は", "🎉🎉 Party time! 🎂" };
    int checked = 0;
    for (int pi = 0; pi < 2; pi++)
        for (int chat = 0; chat < 2; chat++)
            for (int mt = 1; mt <= 3; mt++) {
                char body[512], *whole = NULL, streamed[512] = "";
                for (int stream = 0; stream < 2; stream++) {
                    if (chat)
                        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,"
                                 "\"temperature\":0,\"stream\":%s}", PROMPTS[pi], mt, stream ? "true" : "false");
                    else
                        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"stream\":%s}",
                                 PROMPTS[pi], mt, stream ? "true" : "false");
                    resp r = call("POST", chat ? "/v1/chat/completions" : "/v1/completions", body, KEY);
                    assert_int_equal(r.status, 200);
                    if (!stream) {
                        whole = body_text(r.body.s, r.body.n, chat, false);
                    } else {
                        int done = 0;
                        for (char *p = r.body.s, *e; (e = strstr(p, "\n\n")); p = e + 2) {
                            assert_memory_equal(p, "data: ", 6);
                            const size_t n = (size_t)(e - p) - 6;
                            if (n == 6 && !memcmp(p + 6, "[DONE]", 6)) { done++; continue; }
                            char *t = body_text(p + 6, n, chat, true);
                            strncat(streamed, t, sizeof streamed - strlen(streamed) - 1);
                            free(t);
                        }
                        assert_int_equal(done, 1);
                    }
                    resp_free(&r);
                    checked++;
                }
                assert_true(utf8_ok(streamed, strlen(streamed)));
                assert_string_equal(streamed, whole);
                free(whole);
            }
    assert_int_equal(checked, 24);
}

/* ---- 2. the OpenAI request fields ---- */

/* the reply text of a request that must succeed, heap */
static char *text_of(const char *path, const char *body) {
    resp r = call("POST", path, body, KEY);
    if (r.status != 200) fprintf(stderr, "%s -> %ld %s\n", body, r.status, r.body.s);
    assert_int_equal(r.status, 200);
    char *t = body_text(r.body.s, r.body.n, strstr(path, "chat") != NULL, false);
    resp_free(&r);
    return t;
}

/* an error object with this status, code and param */
static void expect_error(const char *path, const char *body, long status, const char *param, const char *code) {
    resp r = call("POST", path, body, KEY);
    if (r.status != status) fprintf(stderr, "%s -> %ld %s\n", body, r.status, r.body.s);
    assert_error(&r, status, code);
    cJSON *j = cJSON_Parse(r.body.s), *pm = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param");
    if (param && (!cJSON_IsString(pm) || strcmp(pm->valuestring, param))) fprintf(stderr, "%s -> %s\n", body, r.body.s);
    if (param) assert_string_equal(cJSON_IsString(pm) ? pm->valuestring : "(null)", param);
    cJSON_Delete(j);
    resp_free(&r);
}

/* the token ids of text (POST /tokenize), into ids; the count */
static int tokenize(const char *text, bool special, int *ids, int cap) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "content", text);
    cJSON_AddBoolToObject(req, "add_special", special);
    char *body = cJSON_PrintUnformatted(req);
    resp r = call("POST", "/tokenize", body, KEY);
    assert_int_equal(r.status, 200);
    assert_true(json_strict(r.body.s, r.body.n));
    cJSON *j = cJSON_Parse(r.body.s), *t;
    int n = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(j, "tokens")) {
        assert_true(cJSON_IsNumber(t));
        if (n < cap) ids[n] = t->valueint;
        n++;
    }
    cJSON_Delete(j);
    cJSON_Delete(req);
    free(body);
    resp_free(&r);
    return n;
}

static void test_openai_fields(void **state) {
    (void)state;
    NEED_SERVER();
    static const char CHAT[] = "/v1/chat/completions", COMPL[] = "/v1/completions";
    char body[1024];
    /* the fields clients send that change nothing here: accepted, the reply unchanged */
    static const char MSG[] = "\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],\"max_tokens\":5,\"temperature\":0";
    snprintf(body, sizeof body, "{%s}", MSG);
    char *plain = text_of(CHAT, body);
    snprintf(body, sizeof body, "{%s,\"model\":\"" TEST_SMOL "\",\"store\":false,\"metadata\":{\"k\":\"v\"},\"parallel_tool_calls\":true,"
             "\"user\":\"u-1\",\"logprobs\":false,\"top_logprobs\":0,\"response_format\":{\"type\":\"text\"},\"logit_bias\":{},"
             "\"tools\":[],\"tool_choice\":\"none\",\"n\":1,\"modalities\":[\"text\"],\"service_tier\":\"auto\",\"stop\":null,"
             "\"top_p\":1,\"presence_penalty\":0,\"frequency_penalty\":0}", MSG);
    char *t = text_of(CHAT, body);
    assert_string_equal(t, plain);
    free(t);
    free(plain);
    /* role developer is the system turn */
    static const char SYS[] = "{\"messages\":[{\"role\":\"%s\",\"content\":\"Answer in French.\"},{\"role\":\"user\","
                              "\"content\":\"Name three colours.\"}],\"max_tokens\":6,\"temperature\":0}";
    snprintf(body, sizeof body, SYS, "system");
    plain = text_of(CHAT, body);
    snprintf(body, sizeof body, SYS, "developer");
    t = text_of(CHAT, body);
    assert_string_equal(t, plain);
    free(t);
    free(plain);
    /* completions: its ignored fields; the prompt as token ids is the same prompt */
    static const char Q[] = "The capital of France is";
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":0}", Q);
    char *greedy = text_of(COMPL, body);
    int ids[64];
    const int n = tokenize(Q, true, ids, 64);
    assert_true(n > 2 && n < 64);
    int o = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int i = 0; i < n; i++) o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", ids[i]);
    snprintf(body + o, sizeof body - (size_t)o, "],\"max_tokens\":4,\"temperature\":0,\"echo\":false,\"suffix\":\"\",\"best_of\":1,"
             "\"logprobs\":null,\"user\":\"u\"}");
    t = text_of(COMPL, body);
    assert_string_equal(t, greedy);
    free(t);
    /* top_k 1, a tiny top_p and min_p 1 each keep only the top token: greedy at any
     * temperature and seed */
    static const char *ONLY_TOP[] = { "\"top_k\":1", "\"top_p\":0.000001", "\"min_p\":1" };
    for (int i = 0; i < 3; i++)
        for (int seed = 1; seed <= 2; seed++) {
            snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":1.5,\"seed\":%d,%s}", Q, seed, ONLY_TOP[i]);
            t = text_of(COMPL, body);
            assert_string_equal(t, greedy);
            free(t);
        }
    /* sampling with filters: the same seed, the same tokens */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":6,\"temperature\":1.2,\"seed\":7,\"top_p\":0.9,\"top_k\":50,"
             "\"min_p\":0.01}", Q);
    char *s1 = text_of(COMPL, body), *s2 = text_of(COMPL, body);
    assert_string_equal(s1, s2);
    free(s1);
    free(s2);
    /* logit_bias: -100 takes the greedy first token (" Paris") away, +100 forces another */
    int paris, london;
    assert_int_equal(tokenize(" Paris", false, &paris, 1), 1);
    assert_int_equal(tokenize(" London", false, &london, 1), 1);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1,\"temperature\":0}", Q);
    t = text_of(COMPL, body);
    assert_string_equal(t, " Paris");
    free(t);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1,\"temperature\":0,\"logit_bias\":{\"%d\":-100}}", Q, paris);
    t = text_of(COMPL, body);
    assert_string_not_equal(t, " Paris");
    free(t);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1,\"temperature\":0.7,\"seed\":3,\"logit_bias\":{\"%d\":100}}", Q, london);
    t = text_of(COMPL, body);
    assert_string_equal(t, " London");
    free(t);
    free(greedy);
    /* the penalties end a repetition greedy decoding would continue */
    static const char REP[] = "{\"prompt\":\"Repeat after me: cat cat cat cat cat cat\",\"max_tokens\":8,\"temperature\":0%s}";
    snprintf(body, sizeof body, REP, "");
    char *cats = text_of(COMPL, body);
    assert_non_null(strstr(cats, "cat cat cat cat"));
    snprintf(body, sizeof body, REP, ",\"presence_penalty\":2");
    t = text_of(COMPL, body);
    assert_string_not_equal(t, cats);
    free(t);
    snprintf(body, sizeof body, REP, ",\"frequency_penalty\":2");
    t = text_of(COMPL, body);
    assert_string_not_equal(t, cats);
    free(t);
    free(cats);
    /* out of OpenAI's ranges (400 invalid_value / invalid_type), and what this server
     * cannot do (400 naming the field) */
    static const struct { bool chat; const char *extra, *param, *code; } E[] = {
        { true, "\"top_p\":0", "top_p", "invalid_value" },
        { true, "\"top_p\":1.5", "top_p", "invalid_value" },
        { true, "\"top_p\":\"1\"", "top_p", "invalid_type" },
        { true, "\"temperature\":2.5", "temperature", "invalid_value" },
        { true, "\"temperature\":-0.1", "temperature", "invalid_value" },
        { true, "\"frequency_penalty\":2.5", "frequency_penalty", "invalid_value" },
        { true, "\"presence_penalty\":-3", "presence_penalty", "invalid_value" },
        { true, "\"min_p\":1.5", "min_p", "invalid_value" },
        { true, "\"top_k\":-2", "top_k", "invalid_value" },
        { true, "\"top_k\":1.5", "top_k", "invalid_type" },
        { true, "\"logit_bias\":{\"x\":1}", "logit_bias", "invalid_value" },
        { true, "\"logit_bias\":{\"5\":101}", "logit_bias", "invalid_value" },
        { true, "\"logit_bias\":{\"99999999\":1}", "logit_bias", "invalid_value" },
        { true, "\"logit_bias\":[1]", "logit_bias", "invalid_type" },
        { true, "\"max_completion_tokens\":0", "max_completion_tokens", "invalid_value" },
        { true, "\"store\":\"yes\"", "store", "invalid_type" },
        { true, "\"metadata\":5", "metadata", "invalid_type" },
        { true, "\"n\":0", "n", "invalid_value" },
        { true, "\"n\":2", "n", "unsupported_value" },
        { true, "\"logprobs\":2", "logprobs", "invalid_type" },
        { true, "\"top_logprobs\":3", "top_logprobs", "invalid_value" },                    /* without logprobs */
        { true, "\"logprobs\":true,\"top_logprobs\":21", "top_logprobs", "invalid_value" },
        { true, "\"logprobs\":true,\"top_logprobs\":-1", "top_logprobs", "invalid_value" },
        { true, "\"response_format\":{\"type\":\"json_object\"},\"stop\":\"}\"", "stop", "unsupported_value" },
        { true, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{}}}", "response_format",
          "unsupported_value" },
        { true, "\"response_format\":{\"type\":\"yaml\"}", "response_format", "invalid_value" },
        { true, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "tools", "unsupported_value" },
        { true, "\"tool_choice\":\"required\"", "tool_choice", "unsupported_value" },
        { true, "\"functions\":[{\"name\":\"f\"}]", "functions", "unsupported_value" },
        { true, "\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}", "audio", "unsupported_parameter" },
        { true, "\"reasoning_effort\":\"low\"", "reasoning_effort", "unsupported_parameter" },
        { true, "\"modalities\":[\"text\",\"audio\"]", "modalities", "unsupported_value" },
        { false, "\"echo\":true", "echo", "unsupported_value" },
        { false, "\"logprobs\":6", "logprobs", "invalid_value" },
        { false, "\"logprobs\":true", "logprobs", "invalid_type" },
        { false, "\"logprobs\":1.5", "logprobs", "invalid_type" },
        { false, "\"suffix\":\"end\"", "suffix", "unsupported_value" },
        { false, "\"best_of\":2", "best_of", "unsupported_value" },
        { false, "\"store\":true", "store", "unknown_field" },
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", E[i].chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]" : "\"prompt\":\"x\"",
                 E[i].extra);
        expect_error(E[i].chat ? CHAT : COMPL, body, 400, E[i].param, E[i].code);
    }
    expect_error(CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0]", "invalid_value");
    expect_error(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}", 400,
                 "messages[0]", "invalid_type");
    expect_error(COMPL, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "invalid_value");
    expect_error(COMPL, "{\"prompt\":[5,99999999]}", 400, "prompt", "invalid_value");
    expect_error(COMPL, "{\"prompt\":[[]]}", 400, "prompt", "invalid_value");
}

/* ---- 2b. log probabilities and JSON mode ---- */

/* a 200 reply, strict JSON, parsed */
static cJSON *post_ok(const char *path, const char *body) {
    resp r = call("POST", path, body, KEY);
    if (r.status != 200) fprintf(stderr, "%s -> %ld %s\n", body, r.status, r.body.s);
    assert_int_equal(r.status, 200);
    assert_true(json_strict(r.body.s, r.body.n));
    cJSON *j = cJSON_Parse(r.body.s);
    assert_non_null(j);
    resp_free(&r);
    return j;
}

static cJSON *choice0(cJSON *j) { return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0); }
static int completion_tokens(cJSON *j) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint;
}

/* a streamed request: its text into text, its logprobs merged into one object of the
 * non-streamed shape (chat: "content" entries; completions: the four arrays), heap */
static cJSON *stream_logprobs(const char *path, const char *body, bool chat, char *text, size_t cap) {
    resp r = call("POST", path, body, KEY);
    assert_int_equal(r.status, 200);
    cJSON *out = cJSON_CreateObject();
    static const char *const ARRS[] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
    if (chat) cJSON_AddArrayToObject(out, "content");
    else for (int k = 0; k < 4; k++) cJSON_AddArrayToObject(out, ARRS[k]);
    text[0] = 0;
    for (char *p = r.body.s, *e; (e = strstr(p, "\n\n")); p = e + 2) {
        assert_memory_equal(p, "data: ", 6);
        const size_t n = (size_t)(e - p) - 6;
        if (n == 6 && !memcmp(p + 6, "[DONE]", 6)) continue;
        assert_true(json_strict(p + 6, n));
        cJSON *j = cJSON_ParseWithLength(p + 6, n), *c = choice0(j);
        if (c) {
            cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content") : cJSON_GetObjectItem(c, "text");
            if (cJSON_IsString(t)) strncat(text, t->valuestring, cap - strlen(text) - 1);
            cJSON *lp = cJSON_GetObjectItem(c, "logprobs"), *x;
            assert_non_null(lp);   /* null or an object, always there */
            if (chat && cJSON_IsObject(lp))
                cJSON_ArrayForEach(x, cJSON_GetObjectItem(lp, "content"))
                    cJSON_AddItemToArray(cJSON_GetObjectItem(out, "content"), cJSON_Duplicate(x, true));
            if (!chat && cJSON_IsObject(lp))
                for (int k = 0; k < 4; k++)
                    cJSON_ArrayForEach(x, cJSON_GetObjectItem(lp, ARRS[k]))
                        cJSON_AddItemToArray(cJSON_GetObjectItem(out, ARRS[k]), cJSON_Duplicate(x, true));
        }
        cJSON_Delete(j);
    }
    resp_free(&r);
    return out;
}

/* chat: each entry's shape; the tokens' bytes spell the reply; with greedy decoding the
 * token is the first alternative; n_top alternatives, sorted; returns the entries' count */
static int check_chat_logprobs(cJSON *lp, const char *content, int n_top, bool greedy) {
    cJSON *e;
    char spelled[1024] = "";
    int k = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(lp, "content")) {
        cJSON *tok = cJSON_GetObjectItem(e, "token"), *l = cJSON_GetObjectItem(e, "logprob"),
              *b = cJSON_GetObjectItem(e, "bytes"), *top = cJSON_GetObjectItem(e, "top_logprobs"), *x;
        assert_true(cJSON_IsString(tok) && cJSON_IsNumber(l) && cJSON_IsArray(b) && cJSON_IsArray(top));
        assert_true(l->valuedouble <= 0);
        char bytes[256];
        int nb = 0;
        cJSON_ArrayForEach(x, b) {
            assert_true(x->valueint >= 0 && x->valueint < 256 && nb < 255);
            bytes[nb++] = (char)x->valueint;
        }
        bytes[nb] = 0;
        if (utf8_ok(bytes, (size_t)nb)) assert_string_equal(bytes, tok->valuestring);   /* whole characters: the same */
        else assert_non_null(strstr(tok->valuestring, "\xEF\xBF\xBD"));                 /* cut: U+FFFD */
        strncat(spelled, bytes, sizeof spelled - strlen(spelled) - 1);
        assert_int_equal(cJSON_GetArraySize(top), n_top);
        double prev = 0, mass = 0;
        cJSON_ArrayForEach(x, top) {
            const double v = cJSON_GetObjectItem(x, "logprob")->valuedouble;
            assert_true(v <= prev + 1e-6);
            prev = v;
            mass += exp(v);
            assert_true(cJSON_IsString(cJSON_GetObjectItem(x, "token")) && cJSON_IsArray(cJSON_GetObjectItem(x, "bytes")));
        }
        assert_true(mass <= 1.0001);
        if (greedy && n_top > 0) {
            cJSON *t0 = cJSON_GetArrayItem(top, 0);
            assert_string_equal(cJSON_GetObjectItem(t0, "token")->valuestring, tok->valuestring);
            assert_true(fabs(cJSON_GetObjectItem(t0, "logprob")->valuedouble - l->valuedouble) < 1e-6);
        }
        k++;
    }
    /* the tokens' bytes spell the reply (and at most a character the end cut short) */
    assert_memory_equal(spelled, content, strlen(content));
    assert_true(strlen(spelled) - strlen(content) < 4);
    return k;
}

static void test_logprobs(void **state) {
    (void)state;
    NEED_SERVER();
    static const char CHAT[] = "/v1/chat/completions", COMPL[] = "/v1/completions";
    char body[1024], text[1024];
    /* chat, top_logprobs 3, greedy: an entry per token, the reply spelled out */
    static const char MSG[] = "\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],\"max_tokens\":6";
    snprintf(body, sizeof body, "{%s,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}", MSG);
    cJSON *j = post_ok(CHAT, body), *c = choice0(j);
    const char *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring;
    cJSON *lp = cJSON_GetObjectItem(c, "logprobs");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(lp, "refusal")));
    assert_int_equal(check_chat_logprobs(lp, content, 3, true), completion_tokens(j));
    /* streamed: the same entries, spread over the chunks */
    snprintf(body, sizeof body, "{%s,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true}", MSG);
    cJSON *st = stream_logprobs(CHAT, body, true, text, sizeof text);
    assert_string_equal(text, content);
    assert_true(cJSON_Compare(cJSON_GetObjectItem(st, "content"), cJSON_GetObjectItem(lp, "content"), true));
    cJSON_Delete(st);
    /* logprobs true alone: no alternatives; false or absent: null */
    snprintf(body, sizeof body, "{%s,\"temperature\":0,\"logprobs\":true}", MSG);
    cJSON *j2 = post_ok(CHAT, body);
    assert_int_equal(check_chat_logprobs(cJSON_GetObjectItem(choice0(j2), "logprobs"), content, 0, true), completion_tokens(j2));
    cJSON_Delete(j2);
    snprintf(body, sizeof body, "{%s,\"temperature\":0,\"logprobs\":false}", MSG);
    j2 = post_ok(CHAT, body);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(choice0(j2), "logprobs")));
    cJSON_Delete(j2);
    /* the model's distribution, not the sampler's: at temperature 1.5 with top_k 2 the first
     * token's alternatives have the log probabilities they have at temperature 0 */
    snprintf(body, sizeof body, "{%s,\"temperature\":1.5,\"top_k\":2,\"seed\":9,\"logprobs\":true,\"top_logprobs\":3}", MSG);
    j2 = post_ok(CHAT, body);
    cJSON *a0 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "content"), 0), "top_logprobs");
    cJSON *b0 = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(choice0(j2), "logprobs"), "content"), 0),
                                    "top_logprobs");
    assert_true(cJSON_Compare(a0, b0, true));
    cJSON_Delete(j2);
    cJSON_Delete(j);

    /* completions, logprobs 2: the four arrays, an entry per token, offsets in characters */
    static const char Q[] = "\"prompt\":\"The capital of France is\",\"max_tokens\":5,\"temperature\":0,\"logprobs\":2";
    snprintf(body, sizeof body, "{%s}", Q);
    j = post_ok(COMPL, body);
    c = choice0(j);
    const char *t = cJSON_GetObjectItem(c, "text")->valuestring;
    lp = cJSON_GetObjectItem(c, "logprobs");
    cJSON *x;
    const int n = completion_tokens(j);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), n);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "token_logprobs")), n);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "top_logprobs")), n);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "text_offset")), n);
    char spelled[512] = "";
    int i = 0;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(lp, "tokens")) {
        assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "text_offset"), i)->valueint, (int)strlen(spelled));   /* ASCII */
        const double l = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "token_logprobs"), i)->valuedouble;
        cJSON *top = cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), i);
        assert_true(cJSON_IsObject(top) && cJSON_GetArraySize(top) >= 1 && cJSON_GetArraySize(top) <= 2);
        cJSON *mine = cJSON_GetObjectItem(top, x->valuestring);   /* greedy: the token is among the most likely */
        assert_non_null(mine);
        assert_true(fabs(mine->valuedouble - l) < 1e-6 && l <= 0);
        strncat(spelled, x->valuestring, sizeof spelled - strlen(spelled) - 1);
        i++;
    }
    assert_string_equal(spelled, t);
    snprintf(body, sizeof body, "{%s,\"stream\":true}", Q);
    st = stream_logprobs(COMPL, body, false, text, sizeof text);
    assert_string_equal(text, t);
    assert_true(cJSON_Compare(st, lp, true));
    cJSON_Delete(st);
    cJSON_Delete(j);
    /* logprobs 0: the tokens and theirs, no alternatives */
    j = post_ok(COMPL, "{\"prompt\":\"The capital of France is\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":0}");
    lp = cJSON_GetObjectItem(choice0(j), "logprobs");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 3);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(lp, "top_logprobs")));
    cJSON_Delete(j);
    /* a stop string: only the tokens that reach the reply ("." ends " Paris.") */
    j = post_ok(COMPL, "{\"prompt\":\"The capital of France is\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":1,\"stop\":\".\"}");
    assert_string_equal(cJSON_GetObjectItem(choice0(j), "text")->valuestring, " Paris");
    lp = cJSON_GetObjectItem(choice0(j), "logprobs");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 1);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "tokens"), 0)->valuestring, " Paris");
    cJSON_Delete(j);
    /* tokens cut inside a character: "bytes" exact, the token string with U+FFFD, strict
     * UTF-8 throughout, streamed and not */
    int cut = 0;
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"日本の首都は\"}],\"max_tokens\":4,"
                 "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2%s}", stream ? ",\"stream\":true" : "");
        cJSON *entries;
        if (stream) {
            entries = stream_logprobs(CHAT, body, true, text, sizeof text);
        } else {
            j = post_ok(CHAT, body);
            c = choice0(j);
            snprintf(text, sizeof text, "%s", cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring);
            entries = cJSON_Duplicate(cJSON_GetObjectItem(c, "logprobs"), true);
            cJSON_Delete(j);
        }
        assert_int_equal(check_chat_logprobs(entries, text, 2, true), 4);
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(entries, "content"))
            cut += strstr(cJSON_GetObjectItem(x, "token")->valuestring, "\xEF\xBF\xBD") != NULL;
        cJSON_Delete(entries);
    }
    assert_true(cut >= 2);   /* this prompt's reply has a character split over tokens */
}

/* JSON mode: every reply that ends on its own is one JSON object (checked by this file's
 * strict parser and cJSON), at several temperatures and seeds, streamed or not; max_tokens
 * cuts it with finish_reason "length"; without it the model answers otherwise */
static void test_json_mode(void **state) {
    (void)state;
    NEED_SERVER();
    static const char CHAT[] = "/v1/chat/completions";
    static const char MSG[] = "\"messages\":[{\"role\":\"user\",\"content\":\"Describe a cat as JSON with its name and age.\"}]";
    char body[1024];
    snprintf(body, sizeof body, "{%s,\"max_tokens\":40,\"temperature\":0}", MSG);
    cJSON *j = post_ok(CHAT, body);
    cJSON *parsed = cJSON_Parse(cJSON_GetObjectItem(cJSON_GetObjectItem(choice0(j), "message"), "content")->valuestring);
    assert_false(cJSON_IsObject(parsed));   /* unconstrained, the reply is not a bare object */
    cJSON_Delete(parsed);
    cJSON_Delete(j);
    int closed = 0;
    char greedy[2048] = "";
    for (int run = 0; run < 6; run++) {
        snprintf(body, sizeof body, "{%s,\"max_tokens\":96,\"temperature\":%s,\"seed\":%d,\"response_format\":{\"type\":\"json_object\"}}",
                 MSG, run == 0 ? "0" : run < 4 ? "0.8" : "1.3", run + 1);
        j = post_ok(CHAT, body);
        cJSON *c = choice0(j);
        const char *fin = cJSON_GetObjectItem(c, "finish_reason")->valuestring;
        const char *out = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring;
        if (!strcmp(fin, "stop")) {
            closed++;
            if (!json_strict(out, strlen(out))) fprintf(stderr, "not JSON: %s\n", out);
            assert_true(json_strict(out, strlen(out)));
            cJSON *o = cJSON_Parse(out);
            assert_true(cJSON_IsObject(o));
            cJSON_Delete(o);
        } else {
            assert_string_equal(fin, "length");
            assert_int_equal(completion_tokens(j), 96);
        }
        if (run == 0) snprintf(greedy, sizeof greedy, "%s", out);
        cJSON_Delete(j);
    }
    assert_true(closed >= 3);
    /* streamed: the same reply */
    snprintf(body, sizeof body, "{%s,\"max_tokens\":96,\"temperature\":0,\"seed\":1,\"response_format\":{\"type\":\"json_object\"},"
             "\"stream\":true}", MSG);
    char text[2048];
    cJSON_Delete(stream_logprobs(CHAT, body, true, text, sizeof text));
    assert_string_equal(text, greedy);
    /* cut by max_tokens: "length", a prefix of the greedy object */
    snprintf(body, sizeof body, "{%s,\"max_tokens\":3,\"temperature\":0,\"response_format\":{\"type\":\"json_object\"}}", MSG);
    j = post_ok(CHAT, body);
    assert_string_equal(cJSON_GetObjectItem(choice0(j), "finish_reason")->valuestring, "length");
    const char *cut = cJSON_GetObjectItem(cJSON_GetObjectItem(choice0(j), "message"), "content")->valuestring;
    assert_memory_equal(cut, greedy, strlen(cut));
    cJSON_Delete(j);
    /* completions take it too (vLLM's and llama-server's extension) */
    j = post_ok("/v1/completions", "{\"prompt\":\"List\",\"max_tokens\":64,\"temperature\":1,\"seed\":4,"
                                   "\"response_format\":{\"type\":\"json_object\"}}");
    const char *ct = cJSON_GetObjectItem(choice0(j), "text")->valuestring;
    if (!strcmp(cJSON_GetObjectItem(choice0(j), "finish_reason")->valuestring, "stop")) assert_true(json_strict(ct, strlen(ct)));
    else assert_non_null(strchr(ct, '{'));
    cJSON_Delete(j);
}

/* ---- 3. strict input, CORS, the key ---- */

static void test_strict_input(void **state) {
    (void)state;
    NEED_SERVER();
    static const char CHAT[] = "/v1/chat/completions", COMPL[] = "/v1/completions";
    /* what cJSON alone lets through: a NUL (which would cut the text), data after the
     * object, bytes that are not UTF-8, raw control characters */
    static const struct { const char *path, *body, *code; } E[] = {
        { CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "invalid_value" },
        { COMPL, "{\"prompt\":\"x\",\"stop\":[\"\\u0000\"]}", "invalid_value" },
        { CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]} x", "invalid_json" },
        { COMPL, "{\"prompt\":\"hi\"}{}", "invalid_json" },
        { COMPL, "{\"prompt\":\"a\xff\"}", "invalid_encoding" },
        { COMPL, "{\"prompt\":\"a\xc0\xaf\"}", "invalid_encoding" },           /* overlong '/' */
        { COMPL, "{\"prompt\":\"a\xed\xa0\x80\"}", "invalid_encoding" },       /* a surrogate */
        { COMPL, "{\"prompt\":\"a\xe3\x81\"}", "invalid_encoding" },           /* cut short */
        { COMPL, "{\"prompt\":\"a\xf4\x90\x80\x80\"}", "invalid_encoding" },   /* above U+10FFFF */
        { COMPL, "{\"prompt\":\"a\tb\"}", "invalid_json" },                    /* a raw control character */
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) expect_error(E[i].path, E[i].body, 400, NULL, E[i].code);
    /* still accepted: an escaped backslash before "u0000", escapes, whitespace after */
    char *t = text_of(COMPL, "{\"prompt\":\"a\\\\u0000b\",\"max_tokens\":1}");
    free(t);
    t = text_of(COMPL, "{\"prompt\":\"caf\\u00e9 \\ud83c\\udf89 \xe6\x97\xa5\",\"max_tokens\":1} \r\n");
    free(t);
    /* the model: the loaded one's id, else 404 model_not_found */
    t = text_of(COMPL, "{\"model\":\"" TEST_SMOL "\",\"prompt\":\"hi\",\"max_tokens\":1}");
    free(t);
    expect_error(CHAT, "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404, "model", "model_not_found");
    expect_error(COMPL, "{\"model\":\"x\",\"prompt\":\"x\"}", 404, "model", "model_not_found");
    /* the bearer scheme in any case */
    static const struct { const char *line; long status; } A[] = {
        { "Authorization: bearer sk-test", 200 }, { "Authorization: BEARER   sk-test", 200 },
        { "Authorization: Basic sk-test", 401 }, { "Authorization: Bearersk-test", 401 },
    };
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++) {
        const char *lines[] = { A[i].line, NULL };
        resp r = call_hdrs("GET", "/v1/models", NULL, lines);
        assert_int_equal(r.status, A[i].status);
        if (r.status != 200) assert_error(&r, 401, "invalid_api_key");
        resp_free(&r);
    }
    /* CORS: every answer allows any origin (errors and streams too); a preflight, without
     * the key, gets 204 with the methods and the headers it asked for */
    resp r = call("GET", "/v1/models", NULL, KEY);
    assert_non_null(strcasestr(r.head.s, "Access-Control-Allow-Origin: *"));
    resp_free(&r);
    r = call("GET", "/v1/models", NULL, "sk-wrong");
    assert_error(&r, 401, "invalid_api_key");
    assert_non_null(strcasestr(r.head.s, "Access-Control-Allow-Origin: *"));
    resp_free(&r);
    r = call("POST", COMPL, "{\"prompt\":\"hi\",\"max_tokens\":1,\"stream\":true}", KEY);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head.s, "Access-Control-Allow-Origin: *"));
    resp_free(&r);
    const char *pre[] = { "Origin: http://example.com", "Access-Control-Request-Method: POST",
                          "Access-Control-Request-Headers: authorization, content-type, x-stainless-os", NULL };
    r = call_hdrs("OPTIONS", CHAT, NULL, pre);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.body.n, 0);
    assert_non_null(strcasestr(r.head.s, "Access-Control-Allow-Origin: *"));
    assert_non_null(strcasestr(r.head.s, "Access-Control-Allow-Methods: GET, POST, OPTIONS"));
    assert_non_null(strcasestr(r.head.s, "x-stainless-os"));
    resp_free(&r);
    r = call_hdrs("OPTIONS", "/nope", NULL, pre);
    assert_error(&r, 404, "not_found");
    resp_free(&r);
}

/* ---- 4. llama-server's companions ---- */

static void test_llama_endpoints(void **state) {
    (void)state;
    NEED_SERVER();
    /* /tokenize and /detokenize: a round trip, also through multi-byte characters */
    static const char TEXT[] = "Hello 日本 🎉!";
    int ids[64];
    const int n = tokenize(TEXT, false, ids, 64);
    assert_true(n > 3 && n < 64);
    char body[1024];
    for (int cut = 0; cut < 2; cut++) {   /* the whole list, then all but the last token */
        int o = snprintf(body, sizeof body, "{\"tokens\":[");
        for (int i = 0; i < n - cut; i++) o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", ids[i]);
        snprintf(body + o, sizeof body - (size_t)o, "]}");
        resp r = call("POST", "/detokenize", body, KEY);
        assert_int_equal(r.status, 200);
        assert_true(json_strict(r.body.s, r.body.n));
        cJSON *j = cJSON_Parse(r.body.s);
        const char *content = cJSON_GetObjectItem(j, "content")->valuestring;
        if (!cut) assert_string_equal(content, TEXT);
        else assert_true(strlen(content) > 0 && strlen(content) < strlen(TEXT) + 3);
        cJSON_Delete(j);
        resp_free(&r);
    }
    assert_true(tokenize(TEXT, true, ids, 64) >= n);
    assert_int_equal(tokenize("", false, ids, 64), 0);
    resp r = call("POST", "/detokenize", "{\"tokens\":[]}", KEY);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body.s, "{\"content\":\"\"}");
    resp_free(&r);
    static const struct { const char *path, *body, *param, *code; } E[] = {
        { "/tokenize", "{}", "content", "missing_field" },
        { "/tokenize", "{\"content\":5}", "content", "invalid_type" },
        { "/tokenize", "{\"content\":\"x\",\"add_special\":1}", "add_special", "invalid_type" },
        { "/tokenize", "{\"content\":\"x\",\"extra\":1}", "extra", "unknown_field" },
        { "/tokenize", "{\"content\":\"a\\u0000\"}", NULL, "invalid_value" },
        { "/detokenize", "{\"tokens\":[-1]}", "tokens", "invalid_value" },
        { "/detokenize", "{\"tokens\":[99999999]}", "tokens", "invalid_value" },
        { "/detokenize", "{\"tokens\":[1.5]}", "tokens", "invalid_value" },
        { "/detokenize", "{\"tokens\":\"1\"}", "tokens", "invalid_type" },
        { "/detokenize", "[1]", NULL, "invalid_json" },
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) expect_error(E[i].path, E[i].body, 400, E[i].param, E[i].code);
    r = call("GET", "/tokenize", NULL, KEY);
    assert_error(&r, 405, "method_not_allowed");
    resp_free(&r);
    r = call("POST", "/tokenize", "{\"content\":\"x\"}", NULL);
    assert_error(&r, 401, "invalid_api_key");
    resp_free(&r);
    /* /props: the model, the context, the default policy and budget */
    r = call("GET", "/props", NULL, KEY);
    assert_int_equal(r.status, 200);
    assert_true(json_strict(r.body.s, r.body.n));
    cJSON *j = cJSON_Parse(r.body.s);
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, TEST_SMOL);
    assert_int_equal(cJSON_GetObjectItem(j, "n_ctx")->valueint, 512);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "default_generation_settings"), "n_ctx")->valueint, 512);
    assert_true(cJSON_GetObjectItem(j, "model_context_length")->valueint >= 512);
    assert_string_equal(cJSON_GetObjectItem(j, "policy")->valuestring, "full");
    assert_true(cJSON_GetObjectItem(j, "budget")->valuedouble == 0.2);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "slm")));
    assert_int_equal(cJSON_GetObjectItem(j, "total_slots")->valueint, 2);
    cJSON_Delete(j);
    resp_free(&r);
    r = call("GET", "/props", NULL, NULL);
    assert_error(&r, 401, "invalid_api_key");
    resp_free(&r);
    /* /v1/models/{id} */
    r = call("GET", "/v1/models/" TEST_SMOL, NULL, KEY);
    assert_int_equal(r.status, 200);
    j = cJSON_Parse(r.body.s);
    assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, TEST_SMOL);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "model");
    cJSON_Delete(j);
    resp_free(&r);
    r = call("GET", "/v1/models/gpt-4o", NULL, KEY);
    assert_error(&r, 404, "model_not_found");
    resp_free(&r);
}

/* 8 long requests at once on a batch of 2 and a queue of 2: the rest get 429 with
 * Retry-After; nothing is lost (every one answers 200 or 429) */
static void test_queue_full(void **state) {
    (void)state;
    NEED_SERVER();
    enum { N = 8 };
    CURLM *mh = curl_multi_init();
    resp r[N];
    CURL *c[N];
    struct curl_slist *hs[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        c[i] = make("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0}", KEY,
                    &r[i], &hs[i]);
        curl_multi_add_handle(mh, c[i]);
    }
    int running = 1;
    while (running) {
        curl_multi_perform(mh, &running);
        if (running) curl_multi_poll(mh, NULL, 0, 200, NULL);
    }
    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        curl_easy_getinfo(c[i], CURLINFO_RESPONSE_CODE, &r[i].status);
        if (r[i].status == 200) ok++;
        else if (r[i].status == 429) {
            busy++;
            assert_non_null(strstr(r[i].head.s, "Retry-After: 1"));
            assert_error(&r[i], 429, "queue_full");
        } else fprintf(stderr, "request %d: %ld %s\n", i, r[i].status, r[i].body.s ? r[i].body.s : "");
        curl_multi_remove_handle(mh, c[i]);
        curl_easy_cleanup(c[i]);
        curl_slist_free_all(hs[i]);
        resp_free(&r[i]);
    }
    curl_multi_cleanup(mh);
    assert_int_equal(ok + busy, N);
    assert_true(ok >= 2);
    assert_true(busy >= 1);
    assert_true(metric("smallkv_requests_total{result=\"rejected\"}") >= busy);
}

/* a client that hangs up mid-stream, or stops waiting for a whole reply: its sequence is
 * cancelled (counted), the server goes on answering */
static void test_disconnect(void **state) {
    (void)state;
    NEED_SERVER();
    double before = metric("smallkv_requests_total{result=\"cancelled\"}");
    resp r = {0};
    r.body.abort_after = 1;
    struct curl_slist *hs;
    CURL *c = make("POST", "/v1/completions",
                   "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"temperature\":0,\"stream\":true}", KEY, &r, &hs);
    assert_int_equal(curl_easy_perform(c), CURLE_WRITE_ERROR);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    resp_free(&r);
    double after = before;
    for (int i = 0; i < 100 && after <= before; i++) {
        usleep(100000);
        after = metric("smallkv_requests_total{result=\"cancelled\"}");
    }
    assert_true(after >= before + 1);
    /* the same for a client that gives up waiting for a whole (non-streamed) reply */
    resp w = {0};
    c = make("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"temperature\":0}", KEY, &w, &hs);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 400L);
    assert_int_equal(curl_easy_perform(c), CURLE_OPERATION_TIMEDOUT);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    resp_free(&w);
    before = after;
    for (int i = 0; i < 100 && after <= before; i++) {
        usleep(100000);
        after = metric("smallkv_requests_total{result=\"cancelled\"}");
    }
    assert_true(after >= before + 1);
    assert_true(metric("smallkv_completion_tokens_total") > 0);
    resp q = call("GET", "/health", NULL, NULL);
    assert_int_equal(q.status, 200);
    resp_free(&q);
}

/* --timeout: a request that runs past it ends with 504 (code "timeout"), a stream with an
 * error event; a second server, on its own port */
static void test_timeout(void **state) {
    (void)state;
    NEED_SERVER();
    START_SECOND("--timeout", "1", "--ctx", "4096");
    resp r = call("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":4000,\"temperature\":0}", NULL);
    assert_error(&r, 504, "timeout");
    resp_free(&r);
    r = call("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":4000,\"temperature\":0,\"stream\":true}", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body.s, "data: {\"error\":{\"message\":\"request timed out"));
    assert_non_null(strstr(r.body.s, "data: [DONE]"));
    resp_free(&r);
    assert_true(stop_second());
}

/* ---- 6. shared prefixes ---- */

/* a system message of about 200 tokens and a question on it, greedy; the reply */
static cJSON *doc_chat(const char *question, const char *policy, double budget) {
    static const char DOC[] =
        "You answer questions about the harbour rules below, briefly.\n"
        "Rule 1: boats keep to the right of the channel and pass each other port to port.\n"
        "Rule 2: no vessel may anchor within fifty metres of the lighthouse pier.\n"
        "Rule 3: fishing boats returning after dusk show a green lantern at the bow.\n"
        "Rule 4: the harbour master's launch has right of way at all times.\n"
        "Rule 5: sails are lowered inside the breakwater; boats enter under oars or engine.\n"
        "Rule 6: fuel is sold at the east quay from six in the morning until noon.\n"
        "Rule 7: swimmers keep to the roped area by the beach and never cross the channel.\n"
        "Rule 8: a boat in distress sounds three long blasts and raises a red flag.\n";
    cJSON *req = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(req, "messages"), *m;
    const char *roles[2] = { "system", "user" }, *conts[2] = { DOC, question };
    for (int i = 0; i < 2; i++) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", roles[i]);
        cJSON_AddStringToObject(m, "content", conts[i]);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddNumberToObject(req, "max_tokens", 16);
    cJSON *kv = cJSON_AddObjectToObject(req, "smallkv");
    cJSON_AddStringToObject(kv, "policy", policy);
    cJSON_AddNumberToObject(kv, "budget", budget);
    char *body = cJSON_PrintUnformatted(req);
    cJSON *r = chat_ok(body);
    free(body);
    cJSON_Delete(req);
    return r;
}

static int cached_of(cJSON *j) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details"), "cached_tokens")->valueint;
}
static int prompt_of(cJSON *j) { return cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint; }
static const char *reply_of(cJSON *j) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message"),
                               "content")->valuestring;
}

/* Questions on one document under policy full (a budget of its own, so no other test's
 * sessions count): the second makes the prefix it shares with the first a shared session,
 * the third forks it (its cached tokens: the shared prefix); asked again, it forks that
 * prefix and keeps its whole prompt, and a third time forks that, prefilling nothing. A
 * fork continues identically: the three replies are the same tokens. (A fresh prefill of
 * the same prompt may differ from them by rounding, as a conversation's next turn may: the
 * prefill is split at another point; not asserted.) Under a compressing policy nothing is
 * shared. */
static void test_shared_prefix(void **state) {
    (void)state;
    NEED_SERVER();
    const double kept0 = metric("smallkv_shared_prefixes_total"), forks0 = metric("smallkv_shared_prefix_forks_total");
    cJSON *a = doc_chat("What does rule 1 say?", "full", 0.35);
    assert_int_equal(cached_of(a), 0);
    assert_true(prompt_of(a) > 150);
    cJSON *b = doc_chat("What does rule 2 say?", "full", 0.35);
    assert_int_equal(cached_of(b), 0);   /* all prefilled, in two parts: the shared prefix, the rest */
    assert_true(metric("smallkv_shared_prefixes_total") == kept0 + 1);
    cJSON *c = doc_chat("What does rule 8 say?", "full", 0.35);
    const int shared = cached_of(c);
    assert_true(shared > 150 && shared < prompt_of(c));
    assert_true(metric("smallkv_shared_prefix_forks_total") == forks0 + 1);
    /* the same question again: the shared prefix, then its whole prompt kept; a third time
     * that prompt is forked, nothing prefilled */
    cJSON *again = doc_chat("What does rule 8 say?", "full", 0.35);
    assert_int_equal(cached_of(again), shared);
    assert_string_equal(reply_of(again), reply_of(c));
    assert_true(metric("smallkv_shared_prefixes_total") == kept0 + 2);
    cJSON *third = doc_chat("What does rule 8 say?", "full", 0.35);
    assert_int_equal(cached_of(third), prompt_of(third));
    assert_string_equal(reply_of(third), reply_of(c));
    assert_true(metric("smallkv_shared_prefix_forks_total") == forks0 + 3);
    /* a compressing policy: no prefix is shared */
    for (int i = 0; i < 3; i++) {
        cJSON *h = doc_chat(i == 0 ? "What does rule 1 say?" : i == 1 ? "What does rule 2 say?" : "What does rule 8 say?", "h2o", 0.5);
        assert_int_equal(cached_of(h), 0);
        cJSON_Delete(h);
    }
    assert_true(metric("smallkv_shared_prefixes_total") == kept0 + 2);
    cJSON *all[] = { a, b, c, again, third };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cJSON_Delete(all[i]);
}

/* ---- 5. slow clients ---- */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* a TCP connection to the server in base from the loopback address src (any 127.x.y.z is
 * this machine), and a first piece of a request sent on it; -1 when it fails */
static int raw_open(const char *src, const char *first) {
    const int port = atoi(strrchr(base, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in me = { .sin_family = AF_INET }, to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, src, &me.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    struct timeval tv = { .tv_sec = 2 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);   /* connect waits at most this */
    if (bind(fd, (struct sockaddr *)&me, sizeof me) || connect(fd, (struct sockaddr *)&to, sizeof to) ||
        send(fd, first, strlen(first), MSG_NOSIGNAL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* the server has closed fd (or refused it): the stream ended or was reset */
static bool raw_closed(int fd) {
    char b[512];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* GET /health from the loopback address src within ms milliseconds: the status (0: none) */
/* how long /health may take while slow clients hold connections: a second on an idle
 * machine; the sanitizer build on two loaded CI cores gets more */
#if defined(__SANITIZE_ADDRESS__)
#define HEALTH_MS 3000
#else
#define HEALTH_MS 1500
#endif
static long health_from(const char *src, long ms, double *took) {
    resp r = {0};
    struct curl_slist *hs;
    CURL *c = make("GET", "/health", NULL, NULL, &r, &hs);
    curl_easy_setopt(c, CURLOPT_INTERFACE, src);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    const double t0 = mono_s();
    r.rc = curl_easy_perform(c);
    *took = mono_s() - t0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (r.rc != CURLE_OK) fprintf(stderr, "GET /health from %s: %s after %.2f s\n", src, curl_easy_strerror(r.rc), *took);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    resp_free(&r);
    return r.rc == CURLE_OK ? r.status : 0;
}

/* send a piece on every open socket, note those the server closed (the time since t0) */
static int trickle(int *fd, double *closed_at, int n, const char *piece, double t0) {
    int open = 0;
    for (int i = 0; i < n; i++) {
        if (fd[i] < 0) continue;
        if (raw_closed(fd[i]) || (piece && send(fd[i], piece, strlen(piece), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)) {
            close(fd[i]);
            fd[i] = -1;
            closed_at[i] = mono_s() - t0;
        } else open++;
    }
    return open;
}

/* Clients that send their headers or body a line or a byte at a time (libmicrohttpd's idle
 * timeout never fires for them) on a second server: --max-conns 24, --max-conns-per-ip 12,
 * --header-timeout 3, --timeout 3. 20 slow connections from one address: 12 get in, the
 * rest are refused; /health answers from another address and from that one (taking the
 * place of a slow connection); the slow ones are closed at their header deadline. 30 from
 * as many addresses fill the total cap: /health waits in the backlog until the server closes
 * the connections that have waited on their clients, then answers. A body sent a byte per
 * 0.5 s is cut off at --timeout. */
static void test_slow_clients(void **state) {
    (void)state;
    NEED_SERVER();
    enum { N1 = 20, N2 = 30, HT = 3, TO = 3 };
    START_SECOND("--max-conns", "24", "--max-conns-per-ip", "12", "--header-timeout", "3", "--timeout", "3");
    double took;
    const double ev0 = metric("smallkv_connections_dropped_total{reason=\"evicted\"}");
    /* one address: its cap */
    int fd[N2];
    double closed_at[N2];
    double t0 = mono_s();
    for (int i = 0; i < N1; i++) {
        fd[i] = raw_open("127.0.0.1", "GET /health HTTP/1.1\r\nHost: x\r\n");
        closed_at[i] = -1;
        assert_true(fd[i] >= 0);
    }
    while (mono_s() - t0 < 1.2) { trickle(fd, closed_at, N1, "X-Slow: 1\r\n", t0); usleep(200000); }
    int open = trickle(fd, closed_at, N1, "X-Slow: 1\r\n", t0);
    assert_true(open >= 10 && open <= 12);   /* the cap (12); the others were refused */
    assert_int_equal(health_from("127.0.0.2", HEALTH_MS, &took), 200);
    assert_int_equal(health_from("127.0.0.1", HEALTH_MS, &took), 200);   /* in the place of a slow one */
    assert_true(metric("smallkv_connections_dropped_total{reason=\"refused\"}") >= 1);
    assert_true(metric("smallkv_connections_dropped_total{reason=\"evicted\"}") >= ev0 + 1);
    /* the rest are closed at their header deadline, however often they send a line */
    while ((open = trickle(fd, closed_at, N1, "X-Slow: 1\r\n", t0)) > 0 && mono_s() - t0 < HT + 3) usleep(200000);
    assert_int_equal(open, 0);
    int late = 0;
    for (int i = 0; i < N1; i++) {
        assert_true(closed_at[i] <= HT + 1.5);
        if (closed_at[i] >= HT - 0.5) late++;
    }
    assert_true(late >= 5);
    assert_true(metric("smallkv_connections_dropped_total{reason=\"header_timeout\"}") >= late);
    /* many addresses (a body each, sent but for its last byte): the total cap */
    const double ref0 = metric("smallkv_connections_dropped_total{reason=\"refused\"}");
    const double ev1 = metric("smallkv_connections_dropped_total{reason=\"evicted\"}");
    t0 = mono_s();
    for (int i = 0; i < N2; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 10 + i);
        fd[i] = raw_open(src, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n{}");
        closed_at[i] = -1;
        assert_true(fd[i] >= 0);
    }
    while (mono_s() - t0 < 1.2) { trickle(fd, closed_at, N2, NULL, t0); usleep(200000); }
    open = trickle(fd, closed_at, N2, NULL, t0);
    assert_true(open >= 22 && open <= 24);   /* the cap (24); the others were refused */
    assert_true(metric("smallkv_connections_dropped_total{reason=\"refused\"}") >= ref0 + N2 - 24);
    assert_int_equal(health_from("127.0.0.2", HEALTH_MS, &took), 200);
    assert_true(metric("smallkv_connections_dropped_total{reason=\"evicted\"}") >= ev1 + 1);
    for (int i = 0; i < N2; i++) if (fd[i] >= 0) close(fd[i]);
    /* a body a byte per 0.5 s: cut off at --timeout from the headers */
    int b = raw_open("127.0.0.3", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  "Content-Length: 200\r\n\r\n{");
    assert_true(b >= 0);
    t0 = mono_s();
    double cut = -1;
    for (int k = 1; cut < 0 && mono_s() - t0 < TO + 3; k++) {
        usleep(100000);
        trickle(&b, &cut, 1, k % 5 ? NULL : " ", t0);
    }
    if (b >= 0) close(b);
    if (!(cut >= TO - 0.5 && cut <= TO + 1.5)) fprintf(stderr, "a trickled body was cut off after %.2f s\n", cut);
    assert_true(cut >= TO - 0.5 && cut <= TO + 1.5);
    assert_true(metric("smallkv_connections_dropped_total{reason=\"body_timeout\"}") >= 1);
    assert_int_equal(health_from("127.0.0.3", HEALTH_MS, &took), 200);
    assert_true(stop_second());
}

/* bad command lines: usage errors exit 2, a model that does not load exits 1 with a
 * message; a port already taken is refused (exit 1) */
static void test_command_line(void **state) {
    (void)state;
    char bin[1024], cmd[2400];
    test_bin_path(bin, sizeof bin, "smallkv");
    static const struct { const char *args; int status; } C[] = {
        { "", 2 }, { "--llm x.gguf --port 99999", 2 }, { "--llm x.gguf --budget 0", 2 }, { "--llm x.gguf --bogus", 2 },
        { "--llm x.gguf --cache-bytes lots", 2 }, { "--llm x.gguf --profile p", 2 }, { "--llm /nonexistent.gguf --port 0", 1 },
        { "--llm x.gguf --host nowhere --port 0", 1 }, { "--llm x.gguf --max-conns-per-ip 0", 2 },
        { "--llm x.gguf --header-timeout 0", 2 }, { "--llm x.gguf --body-timeout x", 2 }, { "--llm x.gguf --share-prefix -1", 2 },
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s serve %s >/dev/null 2>&1", bin, C[i].args);
        int st = system(cmd);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) != C[i].status) fprintf(stderr, "%s -> %d\n", C[i].args, WEXITSTATUS(st));
        assert_int_equal(WEXITSTATUS(st), C[i].status);
    }
    if (server_pid <= 0) return;
    const char *port = strrchr(base, ':') + 1;
    char model[1024];
    test_model_path(model, sizeof model, TEST_SMOL);
    snprintf(cmd, sizeof cmd, "%s serve --llm %s --port %s >/dev/null 2>&1", bin, model, port);
    int st = system(cmd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_page),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_chat_and_completion),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_session_reuse),
        cmocka_unit_test(test_smallkv_policy),
        cmocka_unit_test(test_shared_prefix),
        cmocka_unit_test(test_evictions),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_utf8_replies),
        cmocka_unit_test(test_openai_fields),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_json_mode),
        cmocka_unit_test(test_strict_input),
        cmocka_unit_test(test_llama_endpoints),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_slow_clients),
        cmocka_unit_test(test_command_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
