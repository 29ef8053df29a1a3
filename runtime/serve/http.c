/* http.c: the HTTP side of `smallkv serve` on libmicrohttpd (a thread per connection, so a
 * slow client holds only its own thread and /health answers beside it): routes, the API
 * key, CORS (every answer allows any origin; OPTIONS preflights get 204), body collection
 * with a size limit, connection / header / time limits (each connection's phase goes to
 * the connection guard, conns.c, which enforces the deadlines and caps), 429 when the
 * engine's queue is full, non-streamed replies (the thread waits on its job) and
 * server-sent-event streams (a content reader that waits for new text); a client that goes
 * away cancels its sequence. Every error this file answers is an OpenAI error object.
 * serve_run loads the pair and runs until SIGINT / SIGTERM. */
#include "serve.h"
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const serve_config *cfg;
    smallkv_pair *p;
    serve_engine *e;
    serve_conns *cs;
    serve_metrics m;
    unsigned long next_id;
    pthread_mutex_t id_mu;
} server;

/* headers larger than this get our 431; libmicrohttpd's own (not JSON) answers only those
 * beyond the connection's memory (MEM_LIMIT), which it needs to read them at all */
enum { MAX_HEADERS = 32 * 1024, MEM_LIMIT = 128 * 1024 };

typedef struct {
    char *body; size_t len, cap;
    bool too_big;
    double t_headers;         /* when the headers were in (serve_mono_s): the request's time starts */
} conn_ctx;

typedef struct {
    server *sv;
    serve_job *j;
    int fd;
    char id[48];
    size_t sent;              /* text bytes sent */
    int lp_sent;              /* log probabilities sent (j->lp) */
    bool first, finished;     /* role chunk sent; final chunks queued */
    char *out; size_t out_len, out_off;
} stream_ctx;

/* ---- replies ---- */

/* browsers may call the API from any page; the key, not the origin, guards it */
static void cors(struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body) {
    if (!body) { status = 500; body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"); type = "application/json"; }
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    cors(r);
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_error(server *sv, struct MHD_Connection *c, unsigned status, const char *msg,
                                   const char *type, const char *code, enum serve_result res) {
    serve_metrics_count(&sv->m, res);
    return reply(c, status, "application/json", serve_error_json(msg, type, NULL, code));
}

/* a CORS preflight: the methods, and the request headers the page asked for (the openai
 * JavaScript client sends several of its own), else the two the API needs */
static enum MHD_Result preflight(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    cors(r);
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    if (!h || !*h || MHD_add_response_header(r, "Access-Control-Allow-Headers", h) != MHD_YES)
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;   /* ": " and CRLF */
    return MHD_YES;
}

/* the connection's entry in the guard (NULL when it could not be registered) */
static serve_conn *conn_entry(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* the peer closed its side (or the socket failed) */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd pf = { .fd = fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void wait_a_bit(serve_job *j) {   /* j->mu held */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* ---- streams ---- */

/* bytes of text that are safe to send: not a possible start of a stop string (unless the
 * job is done). The text is well-formed UTF-8 (engine.c); held-back bytes must not split a
 * character either, so the cut moves back to a character's start. */
static size_t safe_len(const serve_job *j) {
    if (j->done) return j->len;
    size_t n = j->len, hold = 0;
    for (int i = 0; i < j->prm.n_stop; i++) {
        size_t sl = strlen(j->prm.stop[i]);
        if (sl - 1 > hold) hold = sl - 1;
    }
    if (hold == 0) return n;
    n = n > hold ? n - hold : 0;
    while (n > 0 && ((unsigned char)j->text[n] & 0xC0) == 0x80) n--;
    return n;
}

static void out_add(stream_ctx *s, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0, need = s->out_len + la + lb + 3;
    char *o = realloc(s->out, need);
    if (!o) return;
    s->out = o;
    memcpy(o + s->out_len, a, la);
    if (b) memcpy(o + s->out_len + la, b, lb);
    memcpy(o + s->out_len + la + lb, "\n\n", 2);
    s->out_len += la + lb + 2;
}

static void add_chunk(stream_ctx *s, const char *delta, size_t n, const char *finish, bool usage, int lp_to) {
    char *js = serve_chunk_json(s->sv->cfg, s->j, s->id, delta, n, !s->first, finish, usage, s->lp_sent, lp_to);
    if (lp_to > s->lp_sent) s->lp_sent = lp_to;
    s->first = true;
    if (js) out_add(s, "data: ", js);
    free(js);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *s = cls;
    serve_job *j = s->j;
    while (s->out_off == s->out_len) {
        s->out_len = s->out_off = 0;
        if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        while (!j->done && safe_len(j) == s->sent && (s->first || !j->started)) {
            if (peer_gone(s->fd)) { j->cancelled = true; pthread_mutex_unlock(&j->mu); return MHD_CONTENT_READER_END_WITH_ERROR; }
            wait_a_bit(j);
        }
        size_t n = safe_len(j);
        if (j->done && j->err[0]) {
            char *e = serve_error_json(j->err, j->err_status < 500 ? "invalid_request_error" : "server_error", NULL, NULL);
            if (e) out_add(s, "data: ", e);
            free(e);
            out_add(s, "data: [DONE]", NULL);
            s->finished = true;
        } else {
            /* the log probabilities of the tokens whose text this chunk carries (all at the end) */
            int lp_to = s->lp_sent;
            while (lp_to < j->n_lp && (j->done || j->lp[lp_to].off < n)) lp_to++;
            if (n > s->sent || !s->first || lp_to > s->lp_sent)
                add_chunk(s, j->text ? j->text + s->sent : "", n - s->sent, NULL, false, lp_to);
            s->sent = n;
            if (j->done) {
                add_chunk(s, "", 0, j->finish ? j->finish : "stop", false, s->lp_sent);
                if (j->prm.stream_usage) add_chunk(s, "", 0, NULL, true, s->lp_sent);
                out_add(s, "data: [DONE]", NULL);
                s->finished = true;
            }
        }
        pthread_mutex_unlock(&j->mu);
    }
    size_t k = s->out_len - s->out_off < max ? s->out_len - s->out_off : max;
    memcpy(buf, s->out + s->out_off, k);
    s->out_off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    serve_job_cancel(s->j);   /* no-op for a finished job; a dropped client stops its sequence */
    serve_job_release(s->j);
    free(s->out);
    free(s);
}

/* ---- completions ---- */

static enum MHD_Result completion(server *sv, struct MHD_Connection *c, bool chat, conn_ctx *cc) {
    serve_params prm;
    char *err = NULL;
    int st = serve_parse(sv->cfg, sv->p, chat, cc->body ? cc->body : "", cc->len, &prm, &err);
    if (st) {
        serve_metrics_count(&sv->m, SR_CLIENT_ERROR);
        return reply(c, (unsigned)st, "application/json", err);
    }
    serve_job *j = serve_job_new(&prm, sv->cfg->timeout);
    if (!j) { serve_params_free(&prm); return reply_error(sv, c, 500, "out of memory", "server_error", NULL, SR_ERROR); }
    j->deadline = cc->t_headers + sv->cfg->timeout;   /* the time the body took counts */
    int sub = serve_engine_submit(sv->e, j);
    if (sub) {
        serve_job_release(j);
        if (sub == -2) return reply_error(sv, c, 503, "the server is shutting down", "server_error", "shutting_down", SR_ERROR);
        return reply_error(sv, c, 429, "too many requests waiting; retry later", "rate_limit_error", "queue_full", SR_REJECTED);
    }
    char id[48];
    pthread_mutex_lock(&sv->id_mu);
    snprintf(id, sizeof id, "%s-%lu", chat ? "chatcmpl" : "cmpl", ++sv->next_id);
    pthread_mutex_unlock(&sv->id_mu);
    const int fd = conn_fd(c);
    if (j->prm.stream) {
        stream_ctx *s = calloc(1, sizeof *s);
        if (!s) { serve_job_cancel(j); serve_job_release(j); return MHD_NO; }
        s->sv = sv; s->j = j; s->fd = fd;
        snprintf(s->id, sizeof s->id, "%s", id);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        if (!r) { stream_free(s); return MHD_NO; }
        cors(r);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (peer_gone(fd)) j->cancelled = true;
        wait_a_bit(j);
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result rc;
    if (j->cancelled) rc = MHD_NO;
    else if (j->err[0])
        rc = reply(c, (unsigned)j->err_status, "application/json",
                   serve_error_json(j->err, j->err_status < 500 ? "invalid_request_error" : "server_error", NULL,
                                    j->err_status == 504 ? "timeout" : NULL));
    else rc = reply(c, 200, "application/json", serve_completion_json(sv->cfg, j, id));
    serve_job_release(j);
    return rc;
}

/* POST /tokenize, /detokenize */
static enum MHD_Result tokens(server *sv, struct MHD_Connection *c, bool detok, conn_ctx *cc) {
    int *ids = NULL, n = 0;
    char *err = NULL;
    const char *body = cc->body ? cc->body : "";
    int st = detok ? serve_parse_detokenize(sv->p, body, cc->len, &ids, &n, &err)
                   : serve_parse_tokenize(sv->p, body, cc->len, &ids, &n, &err);
    if (st) {
        serve_metrics_count(&sv->m, SR_CLIENT_ERROR);
        return reply(c, (unsigned)st, "application/json", err);
    }
    char *out = detok ? serve_detokenized_json(sv->p, ids, n) : serve_tokens_json(ids, n);
    free(ids);
    return reply(c, 200, "application/json", out);
}

/* ---- routing ---- */

/* "Authorization: Bearer KEY", the scheme in any case (RFC 9110), compared in constant time */
static bool authorised(server *sv, struct MHD_Connection *c) {
    if (!sv->cfg->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return false;
    const char *k = h + 6, *want = sv->cfg->api_key;
    while (*k == ' ' || *k == '\t') k++;
    size_t lk = strlen(k), lw = strlen(want);
    unsigned diff = (unsigned)(lk ^ lw);
    for (size_t i = 0; i < lw; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < lk ? k[i] : 0);
    return diff == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {   /* the headers are in: check their size before any body is read */
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        cc->t_headers = serve_conn_phase(sv->cs, conn_entry(c), SC_BODY);
        size_t hb = 0;
        MHD_get_connection_values(c, MHD_HEADER_KIND, add_header_bytes, &hb);
        if (hb > MAX_HEADERS) {
            char msg[96];
            snprintf(msg, sizeof msg, "the request headers are larger than %d bytes", MAX_HEADERS);
            return reply_error(sv, c, 431, msg, "invalid_request_error", "headers_too_large", SR_CLIENT_ERROR);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_big) {
            if (cc->len + *upload_size > sv->cfg->max_body) {
                cc->too_big = true;
                free(cc->body); cc->body = NULL; cc->len = cc->cap = 0;
            } else {
                if (cc->len + *upload_size + 1 > cc->cap) {
                    size_t nc = cc->cap ? cc->cap : 4096;
                    while (nc < cc->len + *upload_size + 1) nc *= 2;
                    char *b = realloc(cc->body, nc);
                    if (!b) return MHD_NO;
                    cc->body = b; cc->cap = nc;
                }
                memcpy(cc->body + cc->len, upload, *upload_size);
                cc->len += *upload_size;
                cc->body[cc->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    serve_conn_phase(sv->cs, conn_entry(c), SC_BUSY);   /* the request is in: no deadline but its own */
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const char *model = !strncmp(url, "/v1/models/", 11) ? url + 11 : NULL;
    const bool open = !strcmp(url, "/") || !strcmp(url, "/health");
    const bool known = open || model || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") ||
                       !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions") || !strcmp(url, "/props") ||
                       !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize");
    if (!known) return reply_error(sv, c, 404, "no such endpoint", "invalid_request_error", "not_found", SR_CLIENT_ERROR);
    if (!strcmp(method, "OPTIONS")) return preflight(c);   /* browsers send no key with it */
    if (get && !strcmp(url, "/")) return reply(c, 200, "text/html; charset=utf-8", strdup(serve_page_html));
    if (get && !strcmp(url, "/health")) return reply(c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (!open && !authorised(sv, c))
        return reply_error(sv, c, 401, "missing or wrong API key (Authorization: Bearer KEY)", "invalid_request_error",
                           "invalid_api_key", SR_UNAUTHORIZED);
    if (get && !strcmp(url, "/v1/models")) return reply(c, 200, "application/json", serve_models_json(sv->cfg));
    if (get && model) {
        if (strcmp(model, sv->cfg->model_name)) {
            serve_metrics_count(&sv->m, SR_CLIENT_ERROR);
            char msg[320];
            snprintf(msg, sizeof msg, "the model '%.100s' does not exist; this server has '%.100s'", model, sv->cfg->model_name);
            return reply(c, 404, "application/json", serve_error_json(msg, "invalid_request_error", "model", "model_not_found"));
        }
        return reply(c, 200, "application/json", serve_model_json(sv->cfg));
    }
    if (get && !strcmp(url, "/props")) return reply(c, 200, "application/json", serve_props_json(sv->cfg, sv->p));
    if (get && !strcmp(url, "/metrics")) return reply(c, 200, "text/plain; version=0.0.4", serve_metrics_text(&sv->m));
    if (post && cc->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %zu bytes", sv->cfg->max_body);
        return reply_error(sv, c, 413, msg, "invalid_request_error", "body_too_large", SR_CLIENT_ERROR);
    }
    if (post && !strcmp(url, "/v1/chat/completions")) return completion(sv, c, true, cc);
    if (post && !strcmp(url, "/v1/completions")) return completion(sv, c, false, cc);
    if (post && !strcmp(url, "/tokenize")) return tokens(sv, c, false, cc);
    if (post && !strcmp(url, "/detokenize")) return tokens(sv, c, true, cc);
    return reply_error(sv, c, 405, "method not allowed", "invalid_request_error", "method_not_allowed", SR_CLIENT_ERROR);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    server *sv = cls;
    conn_ctx *cc = *con_cls;
    if (cc) { free(cc->body); free(cc); }
    *con_cls = NULL;
    serve_conn_phase(sv->cs, conn_entry(c), SC_HEADERS);   /* kept alive: the next request's headers are due */
}

static uint32_t ipv4_of(const struct sockaddr *a) {
    return a && a->sa_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_addr.s_addr : 0;
}

static enum MHD_Result admit(void *cls, const struct sockaddr *addr, socklen_t len) {
    (void)len;
    server *sv = cls;
    return serve_conns_admit(sv->cs, ipv4_of(addr)) ? MHD_YES : MHD_NO;
}

/* libmicrohttpd notifies a connection's close before it closes the descriptor */
static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode what) {
    server *sv = cls;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const int fd = conn_fd(c);
        *socket_ctx = fd >= 0 ? serve_conns_add(sv->cs, fd, ipv4_of(ad ? ad->client_addr : NULL)) : NULL;
    } else if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
        serve_conns_remove(sv->cs, *socket_ctx);
        *socket_ctx = NULL;
    }
}

/* libmicrohttpd's messages, less those about a client that went away before its request
 * was in: every slow client the guard closes would print one (/metrics counts them) */
static void log_err(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static const char *QUIET[] = { "Connection socket is closed when reading request",
                                   "Connection was closed by remote side with incomplete request",
                                   "Socket has been disconnected when reading request" };
    for (size_t i = 0; i < sizeof QUIET / sizeof QUIET[0]; i++)
        if (!strncmp(fmt, QUIET[i], strlen(QUIET[i]))) return;
    fputs("smallkv serve: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int serve_run(const serve_config *cfg) {
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port) };
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        fprintf(stderr, "smallkv: --host '%s' is not an IPv4 address\n", cfg->host);
        return -1;
    }
    /* blocks of 256 KiB and more are mapped, and unmapped when freed (no dynamic threshold):
     * a freed session gives its memory back, so resident memory follows the cache bound */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    server sv = { .cfg = cfg };
    serve_metrics_init(&sv.m);
    pthread_mutex_init(&sv.id_mu, NULL);
    if (!(sv.p = smallkv_pair_load(cfg->llm, cfg->slm))) { fprintf(stderr, "smallkv: %s\n", smallkv_last_error()); return -1; }
    if (cfg->profile && smallkv_pair_load_profile(sv.p, cfg->profile)) {
        fprintf(stderr, "smallkv: %s\n", smallkv_last_error());
        smallkv_pair_free(sv.p);
        return -1;
    }
    /* the default policy must open a session on this pair */
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = cfg->policy; o.budget = cfg->budget; o.max_ctx = cfg->ctx;
    smallkv_session *probe = smallkv_session_new(sv.p, &o);
    if (!probe) { fprintf(stderr, "smallkv: %s\n", smallkv_last_error()); smallkv_pair_free(sv.p); return -1; }
    smallkv_session_free(probe);
    /* signals are taken by this thread alone (sigwait); every other thread blocks them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!(sv.e = serve_engine_start(sv.p, cfg, &sv.m))) {
        fprintf(stderr, "smallkv: cannot start the engine thread\n");
        smallkv_pair_free(sv.p);
        return -1;
    }
    if (!(sv.cs = serve_conns_start(cfg, &sv.m))) {
        fprintf(stderr, "smallkv: cannot start the connection guard\n");
        serve_engine_free(sv.e);
        smallkv_pair_free(sv.p);
        return -1;
    }
    /* a thread per connection: a client that stalls blocks only its own thread. The caps
     * are the guard's accept policy (admit); libmicrohttpd's own limit sits above
     * --max-conns for the connections the guard has closed and it has not yet reaped */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, admit, &sv,
        handle, &sv, MHD_OPTION_EXTERNAL_LOGGER, log_err, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * cfg->max_conns + 16),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MEM_LIMIT,
        MHD_OPTION_NOTIFY_COMPLETED, completed, &sv, MHD_OPTION_NOTIFY_CONNECTION, notify_conn, &sv,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "smallkv: cannot listen on %s:%d: %s\n", cfg->host, cfg->port, strerror(errno));
        serve_conns_stop(sv.cs);
        serve_engine_free(sv.e);
        smallkv_pair_free(sv.p);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("smallkv serve: listening on http://%s:%u (model %s, policy %s, budget %g)\n", cfg->host,
           di ? di->port : (unsigned)cfg->port, cfg->model_name, cfg->policy, cfg->budget);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "smallkv serve: signal %d, stopping\n", sig);
    MHD_socket ls = MHD_quiesce_daemon(d);   /* no new connections (the listening socket is ours now) */
    serve_engine_stop(sv.e);   /* ends queued and running jobs: the waiting threads answer 503 */
    MHD_stop_daemon(d);        /* waits for the connection threads */
    serve_conns_stop(sv.cs);
    serve_engine_free(sv.e);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    smallkv_pair_free(sv.p);
    pthread_mutex_destroy(&sv.id_mu);
    return 0;
}
