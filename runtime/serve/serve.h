/* serve.h: the pieces of `smallkv serve` (an OpenAI-compatible HTTP server over the public
 * API) and how they talk: the configuration, a job (one request's generation, shared by the
 * HTTP thread that answers it and the engine thread that decodes it), and each file's
 * entry points. Files:
 *   http.c      libmicrohttpd daemon: routing, limits, API key, body collection, replies
 *   request.c   JSON request parsing and validation (cJSON), OpenAI-style error objects,
 *               the UTF-8 checks and repair the engine and the replies share
 *   respond.c   response bodies: completion objects, stream chunks, models, props, tokens
 *   engine.c    the worker thread: bounded queue, batched decoding, stop rules, cancel
 *   sample.c    the sampler for requests that ask for more than a temperature (or a mask)
 *   logprobs.c  log probabilities: each generated token's and its top alternatives', and
 *               their JSON in OpenAI's chat and completions shapes
 *   json_constrain.c  JSON mode: a pushdown automaton over bytes and the vocabulary mask
 *   cache.c     the session cache: conversations and shared prefixes by token prefix, an
 *               LRU bounded by bytes
 *   conns.c     the connection guard: per-address and total caps, header and body deadlines
 *   metrics.c   counters and gauges, Prometheus text
 *   page.c      the static chat page served at GET /
 * Threads: the engine thread alone touches sessions; HTTP threads tokenise (the pair is
 * read-only for that) and wait on their job's condition variable. */
#ifndef SKV_SERVE_H
#define SKV_SERVE_H
#include "include/smallkv.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *llm, *slm, *profile;
    const char *policy;        /* default policy spec */
    double budget;             /* default budget */
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* 0: any free port (printed) */
    const char *api_key;       /* NULL: none */
    size_t cache_bytes;        /* session cache bound */
    int queue;                 /* waiting requests before 429 */
    int batch;                 /* sequences decoded together */
    int ctx;                   /* context per session (tokens) */
    size_t max_body;           /* request body limit, bytes */
    int max_conns;             /* connection limit */
    int max_conns_per_ip;      /* connections from one address */
    int header_timeout;        /* seconds to a request's headers (new or kept-alive connection) */
    int body_timeout;          /* seconds from the headers to the end of the body */
    int timeout;               /* seconds per request (from its headers: body, queue, generation), idle connection */
    int share_prefix;          /* shortest prompt prefix kept as a shared session (0: none) */
    int default_max_tokens;
    const char *model_name;    /* id in /v1/models */
} serve_config;

enum { SERVE_MAX_STOP = 4, SERVE_MAX_TOP = 20 };

/* What request.c makes of a body. */
typedef struct {
    bool chat;                 /* /v1/chat/completions (else /v1/completions) */
    int *ids; int n_ids;       /* prompt tokens */
    int max_tokens;
    float temperature;
    unsigned long long seed;
    float top_p, min_p;        /* 1, 0: off */
    int top_k;                 /* 0: off */
    float presence, frequency; /* penalties on the tokens generated so far */
    int n_bias; int *bias_id; float *bias;   /* logit_bias */
    char *stop[SERVE_MAX_STOP]; int n_stop;
    bool logprobs;             /* chat logprobs: true; completions logprobs: N (any N) */
    int top_logprobs;          /* alternatives per token: chat top_logprobs, completions N */
    bool json;                 /* response_format {"type": "json_object"}: a constrained reply */
    bool stream, stream_usage;
    char policy[160];
    double budget;
} serve_params;

typedef struct serve_job {
    serve_params prm;
    double t_start, deadline;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* written by the engine under mu */
    char *text; size_t len, cap;   /* generated text, well-formed UTF-8 (stop strings cut off) */
    char pend[4]; size_t n_pend;   /* a character cut short by the last token (held back) */
    int n_out, reused;             /* tokens generated; prompt tokens reused from a session */
    bool started, done, cancelled;
    const char *finish;            /* "stop", "length" */
    char err[256]; int err_status; /* when done with an error: message, HTTP status */
    size_t hot, cold, slm, full;   /* the session's memory by tier at the end */
    int length;                    /* tokens in the session at the end */
    int refs;                      /* HTTP side + engine */
    const smallkv_pair *pair;      /* set by the engine before started (token bytes for logprobs) */
    struct serve_lp *lp; int n_lp, cap_lp;   /* a log probability per generated token (prm.logprobs) */
    struct serve_job *next;        /* queue link */
} serve_job;

/* ---- request.c ---- */
/* Parse and check a body for chat (or completion); 0, or the HTTP status with *err set
 * to an OpenAI error object (JSON text, heap) naming the field. */
int serve_parse(const serve_config *cfg, smallkv_pair *p, bool chat, const char *body, size_t len,
                serve_params *out, char **err);
void serve_params_free(serve_params *p);
/* {"error":{"message":...,"type":...,"param":...,"code":...}} as heap JSON text */
char *serve_error_json(const char *message, const char *type, const char *param, const char *code);
/* POST /tokenize {"content", "add_special"} and POST /detokenize {"tokens"}: the ids (heap,
 * *n of them) or the HTTP status with *err as in serve_parse. */
int serve_parse_tokenize(smallkv_pair *p, const char *body, size_t len, int **ids, int *n, char **err);
int serve_parse_detokenize(smallkv_pair *p, const char *body, size_t len, int **ids, int *n, char **err);
/* Bytes of the well-formed UTF-8 character at s (1..4); 0 when s[0, n) is the start of one
 * cut short; -1 when s does not start one (overlong forms and surrogates are ill-formed). */
int serve_utf8_char(const char *s, size_t n);
/* s[0, n) as well-formed UTF-8 into out (room for 3 n bytes): each ill-formed byte becomes
 * U+FFFD; a character cut short at the end is left out and its length stored in *tail (with
 * tail NULL it becomes U+FFFD too). Returns the bytes written. */
size_t serve_utf8_fix(const char *s, size_t n, char *out, size_t *tail);

/* ---- respond.c ---- */
char *serve_completion_json(const serve_config *cfg, const serve_job *j, const char *id);
/* one stream chunk: delta (n bytes), and the log probabilities j->lp[lp_from, lp_to) */
char *serve_chunk_json(const serve_config *cfg, const serve_job *j, const char *id, const char *delta,
                       size_t n, bool first, const char *finish, bool usage, int lp_from, int lp_to);
char *serve_models_json(const serve_config *cfg);
char *serve_model_json(const serve_config *cfg);              /* GET /v1/models/{id} */
char *serve_props_json(const serve_config *cfg, const smallkv_pair *p);
char *serve_tokens_json(const int *ids, int n);               /* {"tokens": [...]} */
char *serve_detokenized_json(const smallkv_pair *p, const int *ids, int n);   /* {"content"} */

/* ---- sample.c ---- */
/* true when the request asks for nothing beyond a temperature (smallkv_sample does it) */
bool serve_sampling_plain(const serve_params *p);
/* The next token from logits (vocab V): logit_bias, then the penalties (counts: how often
 * each token was generated; NULL when no penalty is asked for), then greedy at temperature
 * 0, else top-k, top-p, min-p on softmax(logits / temperature) and a draw with *rng.
 * scratch: room for V entries, the caller's. */
typedef struct { float w; int id; } serve_cand;
int serve_sample(const float *logits, int V, const serve_params *p, const int *counts, serve_cand *scratch,
                 unsigned long long *rng);
/* The same over the tokens allowed[t] != 0 only (NULL: all); -1 when none is allowed. */
int serve_sample_masked(const float *logits, int V, const serve_params *p, const int *counts,
                        const unsigned char *allowed, serve_cand *scratch, unsigned long long *rng);

/* ---- logprobs.c ---- */
/* One generated token's log probability and its top alternatives: log-softmax of the
 * model's raw logits (before logit_bias, penalties, temperature, filters or a JSON mask). */
typedef struct serve_lp {
    int id; float lp;
    size_t off;                    /* byte offset of its text in j->text */
    int n_top;
    int top_id[SERVE_MAX_TOP]; float top_lp[SERVE_MAX_TOP];
} serve_lp;
/* Fill *out for token tok from logits (vocab V) with n_top alternatives (0..SERVE_MAX_TOP). */
void serve_logprob(const float *logits, int V, int tok, int n_top, serve_lp *out);
/* Append *e to j->lp (j->mu held); -1 when out of memory. */
int serve_logprob_push(serve_job *j, const serve_lp *e);
/* OpenAI's logprobs object for j->lp[from, to): chat {"content": [...], "refusal": null},
 * completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. A cJSON item. */
struct cJSON;
struct cJSON *serve_logprobs_json(const serve_job *j, int from, int to);

/* ---- json_constrain.c ---- */
/* JSON mode's automaton: the state after some bytes of a reply. A value; copy it to try
 * bytes without committing. */
enum { SERVE_JSON_DEPTH = 64, SERVE_JSON_WS = 16, SERVE_JSON_NUM = 40 };
typedef struct {
    uint64_t stack;            /* bit d: the container at depth d is an array (else an object) */
    uint8_t depth, st, sub, key, lit, hi_d, u_need, u_lo, u_hi, ws;
    uint16_t nlen;
} serve_json;
/* the vocabulary as the mask sees it: each token's bytes; banned[t] != 0 never allowed
 * (stop and control tokens) */
typedef struct { int n; const char **bytes; size_t *len; unsigned char *banned; } serve_json_vocab;
void serve_json_init(serve_json *s);
/* read n bytes: false when one of them cannot continue a JSON object (*s is then spoilt) */
bool serve_json_feed(serve_json *s, const char *bytes, size_t n);
bool serve_json_done(const serve_json *s);            /* the object has closed */
bool serve_json_valid(const char *s, size_t n);       /* exactly one JSON object (whitespace around it) */
/* allowed[t] = 1 for each token whose bytes all continue *s; returns how many */
int serve_json_mask(const serve_json *s, const serve_json_vocab *v, unsigned char *allowed);

/* ---- engine.c ---- */
typedef struct serve_engine serve_engine;
typedef struct serve_metrics serve_metrics;
typedef struct serve_cache serve_cache;
serve_engine *serve_engine_start(smallkv_pair *p, const serve_config *cfg, serve_metrics *m);
/* Queue a job (the engine takes a reference): 0, -1 when the queue is full, -2 when the
 * engine has stopped. */
int serve_engine_submit(serve_engine *e, serve_job *j);
/* End every queued and running job (503) and the thread; submit then answers -2. */
void serve_engine_stop(serve_engine *e);
void serve_engine_free(serve_engine *e);   /* after the HTTP side is gone */
serve_job *serve_job_new(serve_params *prm, int timeout_s);   /* takes prm's contents */
void serve_job_release(serve_job *j);
void serve_job_cancel(serve_job *j);

/* ---- cache.c ---- */
typedef struct {
    smallkv_session *s;
    int *hist; int n, cap;         /* tokens appended to s */
    char policy[160]; double budget;
    uint64_t last_use;
    bool shared;                   /* a prompt prefix: forked for each request that extends it, kept */
} serve_sess;
/* overhead: bytes each session holds beyond its KV tiers (counted against the bound) */
serve_cache *serve_cache_new(size_t max_bytes, size_t overhead);
void serve_cache_free(serve_cache *c);
/* The session whose history is the longest prefix of ids (same policy and budget; a proper
 * prefix unless it is a shared one), or NULL: a conversation is taken out, a shared prefix
 * stays and a fork of it is returned (*forked set). */
serve_sess *serve_cache_take(serve_cache *c, const int *ids, int n, const char *policy, double budget, bool *forked);
/* The longest prefix ids share with a cached session's history (same policy and budget). */
int serve_cache_common(const serve_cache *c, const int *ids, int n, const char *policy, double budget);
/* A copy of s that continues identically (smallkv_fork), not shared; NULL when it fails. */
serve_sess *serve_sess_fork(const serve_sess *s);
/* Give a session back (least recently used ones evicted to fit; one larger than the whole
 * bound is freed); returns the number evicted. */
int serve_cache_put(serve_cache *c, serve_sess *s);
void serve_sess_free(serve_sess *s);
size_t serve_sess_bytes(const serve_cache *c, const serve_sess *s);
/* memory of every cached session by tier, and the count */
void serve_cache_usage(const serve_cache *c, size_t *hot, size_t *cold, size_t *slm, size_t *total, int *n);

/* ---- conns.c ---- */
enum serve_conn_phase { SC_HEADERS, SC_BODY, SC_BUSY };   /* waiting for headers, reading the body, answering */
enum serve_conn_drop { SD_HEADER_TIMEOUT, SD_BODY_TIMEOUT, SD_EVICTED, SD_REFUSED, SD_N };
typedef struct serve_conns serve_conns;
typedef struct serve_conn serve_conn;    /* one connection (libmicrohttpd's socket context) */
double serve_mono_s(void);               /* CLOCK_MONOTONIC in seconds (the jobs' deadlines too) */
serve_conns *serve_conns_start(const serve_config *cfg, serve_metrics *m);   /* starts the reaper */
void serve_conns_stop(serve_conns *cs);  /* after libmicrohttpd has stopped */
/* the accept policy: false refuses a connection from ip (IPv4, network order) */
bool serve_conns_admit(serve_conns *cs, uint32_t ip);
serve_conn *serve_conns_add(serve_conns *cs, int fd, uint32_t ip);   /* waiting for headers */
void serve_conns_remove(serve_conns *cs, serve_conn *e);
/* a new phase from now (its deadline from the flags); returns now */
double serve_conn_phase(serve_conns *cs, serve_conn *e, enum serve_conn_phase ph);

/* ---- metrics.c ---- */
struct serve_metrics {
    pthread_mutex_t mu;
    unsigned long requests[6];     /* by result: serve_result */
    unsigned long prompt_tokens, completion_tokens, reused_tokens, evictions;
    double tokens_per_s;           /* decode tokens per second over the last steps */
    int queue_len, active;
    size_t hot, cold, slm, cache_bytes; int cache_sessions;
    size_t sess_overhead, kv_per_token;   /* measured at start (engine.c) */
    unsigned long prefix_kept, prefix_forks;   /* shared prefixes made, requests that continued one */
    int conns_open;                       /* conns.c */
    unsigned long conns_dropped[SD_N];    /* by enum serve_conn_drop */
};
enum serve_result { SR_OK, SR_CLIENT_ERROR, SR_REJECTED, SR_CANCELLED, SR_ERROR, SR_UNAUTHORIZED, SR_N };
void serve_metrics_init(serve_metrics *m);
void serve_metrics_count(serve_metrics *m, enum serve_result r);
char *serve_metrics_text(serve_metrics *m);   /* heap */
size_t serve_rss_bytes(void);                 /* resident memory of the process */

/* ---- page.c ---- */
extern const char serve_page_html[];

/* ---- http.c ---- */
/* Run until SIGINT / SIGTERM: 0, or -1 + message on stderr. */
int serve_run(const serve_config *cfg);

#endif
