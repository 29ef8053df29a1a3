/* test_serve.c: `smallkv serve` end to end. The group starts the built binary on a free
 * loopback port (--port 0, the port read from its first line) with SmolLM2 as LLM and as
 * SLM with its self-pair profile (policy full by default, smallkv per request), an API key,
 * a 256 MiB session cache, a queue of 2 and a batch of 2, and talks to it with libcurl:
 * every endpoint, streaming, session reuse (a conversation's second turn reports its first
 * turn's tokens as cached, also under policy smallkv), evictions at the cache bound, stop
 * strings, the error objects for bad input (and 120 garbage bodies), limits (body,
 * headers), 429 with Retry-After when the queue is full, clients that go away (their
 * sequences are cancelled), the request time limit (504, on a second server), bad command
 * lines, and a clean exit on SIGTERM. Skips when the model is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/support/test_env.h"

static const char *KEY = "sk-test";
static pid_t server_pid = -1;
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

static int teardown(void **state) {
    (void)state;
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
    cJSON *j = chat_ok("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"Name three colours.\"}],"
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
        { "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", 400, "invalid_value" },
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
    /* a header over the connection's memory limit: refused, the server lives on */
    big = malloc(70000);
    strcpy(big, "X-Big: ");
    memset(big + 7, 'a', 69990);
    big[69997] = 0;
    CURL *c = curl_easy_init();
    struct curl_slist *hs = curl_slist_append(NULL, big);
    resp rr = {0};
    char url[128];
    snprintf(url, sizeof url, "%s/health", base);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &rr.body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rr.status);
    assert_true(rc != CURLE_OK || rr.status >= 400);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    resp_free(&rr);
    free(big);
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

/* bad command lines: usage errors exit 2, a model that does not load exits 1 with a
 * message; a port already taken is refused (exit 1) */
/* --timeout: a request that runs past it ends with 504 (code "timeout"), a stream with an
 * error event; a second server, on its own port */
static void test_timeout(void **state) {
    (void)state;
    NEED_SERVER();
    char url[64], saved[64];
    pid_t pid = start_server(url, sizeof url, "--timeout", "1", "--ctx", "4096", (const char *)NULL);
    assert_true(pid > 0);
    snprintf(saved, sizeof saved, "%s", base);
    snprintf(base, sizeof base, "%s", url);
    resp r = call("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":4000,\"temperature\":0}", NULL);
    assert_error(&r, 504, "timeout");
    resp_free(&r);
    r = call("POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":4000,\"temperature\":0,\"stream\":true}", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body.s, "data: {\"error\":{\"message\":\"request timed out"));
    assert_non_null(strstr(r.body.s, "data: [DONE]"));
    resp_free(&r);
    snprintf(base, sizeof base, "%s", saved);
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_command_line(void **state) {
    (void)state;
    char bin[1024], cmd[2400];
    test_bin_path(bin, sizeof bin, "smallkv");
    static const struct { const char *args; int status; } C[] = {
        { "", 2 }, { "--llm x.gguf --port 99999", 2 }, { "--llm x.gguf --budget 0", 2 }, { "--llm x.gguf --bogus", 2 },
        { "--llm x.gguf --cache-bytes lots", 2 }, { "--llm x.gguf --profile p", 2 }, { "--llm /nonexistent.gguf --port 0", 1 },
        { "--llm x.gguf --host nowhere --port 0", 1 },
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
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_chat_and_completion),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_session_reuse),
        cmocka_unit_test(test_smallkv_policy),
        cmocka_unit_test(test_evictions),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_command_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
