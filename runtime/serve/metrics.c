/* metrics.c: the server's counters and gauges (requests by result, tokens in / out / reused,
 * decode tokens per second, queue, KV memory by tier, session cache and shared prefixes,
 * connections, RSS) and their Prometheus text exposition for GET /metrics. */
#include "serve.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_count(serve_metrics *m, enum serve_result r) {
    pthread_mutex_lock(&m->mu);
    m->requests[r]++;
    pthread_mutex_unlock(&m->mu);
}

size_t serve_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
        fclose(f);
    }
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

char *serve_metrics_text(serve_metrics *m) {
    static const char *RES[SR_N] = { "ok", "client_error", "rejected", "cancelled", "error", "unauthorized" };
    size_t cap = 12288;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t o = 0;
#define OUT(...) o += (size_t)snprintf(s + o, o < cap ? cap - o : 0, __VA_ARGS__)
    pthread_mutex_lock(&m->mu);
    OUT("# HELP smallkv_requests_total Requests by result.\n# TYPE smallkv_requests_total counter\n");
    for (int i = 0; i < SR_N; i++) OUT("smallkv_requests_total{result=\"%s\"} %lu\n", RES[i], m->requests[i]);
    OUT("# HELP smallkv_prompt_tokens_total Prompt tokens received.\n# TYPE smallkv_prompt_tokens_total counter\n"
        "smallkv_prompt_tokens_total %lu\n", m->prompt_tokens);
    OUT("# HELP smallkv_reused_tokens_total Prompt tokens taken from a cached session instead of prefilled.\n"
        "# TYPE smallkv_reused_tokens_total counter\nsmallkv_reused_tokens_total %lu\n", m->reused_tokens);
    OUT("# HELP smallkv_completion_tokens_total Tokens generated.\n# TYPE smallkv_completion_tokens_total counter\n"
        "smallkv_completion_tokens_total %lu\n", m->completion_tokens);
    OUT("# HELP smallkv_tokens_per_second Decode tokens per second over the recent steps (all sequences).\n"
        "# TYPE smallkv_tokens_per_second gauge\nsmallkv_tokens_per_second %.2f\n", m->tokens_per_s);
    OUT("# HELP smallkv_queue_length Requests waiting.\n# TYPE smallkv_queue_length gauge\nsmallkv_queue_length %d\n", m->queue_len);
    OUT("# HELP smallkv_active_sequences Sequences decoding.\n# TYPE smallkv_active_sequences gauge\n"
        "smallkv_active_sequences %d\n", m->active);
    OUT("# HELP smallkv_kv_bytes KV memory of active and cached sessions by tier (hot, cold: LLM; slm: SLM cache and scores).\n"
        "# TYPE smallkv_kv_bytes gauge\nsmallkv_kv_bytes{tier=\"hot\"} %zu\nsmallkv_kv_bytes{tier=\"cold\"} %zu\n"
        "smallkv_kv_bytes{tier=\"slm\"} %zu\n", m->hot, m->cold, m->slm);
    OUT("# HELP smallkv_session_cache_bytes Bytes held by cached conversations.\n# TYPE smallkv_session_cache_bytes gauge\n"
        "smallkv_session_cache_bytes %zu\n", m->cache_bytes);
    OUT("# HELP smallkv_session_cache_sessions Cached conversations.\n# TYPE smallkv_session_cache_sessions gauge\n"
        "smallkv_session_cache_sessions %d\n", m->cache_sessions);
    OUT("# HELP smallkv_session_overhead_bytes Memory a session holds beyond its KV tiers (workspace; measured at start).\n"
        "# TYPE smallkv_session_overhead_bytes gauge\nsmallkv_session_overhead_bytes %zu\n", m->sess_overhead);
    OUT("# HELP smallkv_kv_bytes_per_token LLM KV bytes per token of an uncompressed cache.\n"
        "# TYPE smallkv_kv_bytes_per_token gauge\nsmallkv_kv_bytes_per_token %zu\n", m->kv_per_token);
    OUT("# HELP smallkv_session_cache_evictions_total Conversations evicted from the session cache.\n"
        "# TYPE smallkv_session_cache_evictions_total counter\nsmallkv_session_cache_evictions_total %lu\n", m->evictions);
    OUT("# HELP smallkv_shared_prefixes_total Prompt prefixes kept as shared sessions.\n"
        "# TYPE smallkv_shared_prefixes_total counter\nsmallkv_shared_prefixes_total %lu\n", m->prefix_kept);
    OUT("# HELP smallkv_shared_prefix_forks_total Requests that continued a fork of a shared prefix.\n"
        "# TYPE smallkv_shared_prefix_forks_total counter\nsmallkv_shared_prefix_forks_total %lu\n", m->prefix_forks);
    OUT("# HELP smallkv_connections_open Open HTTP connections.\n# TYPE smallkv_connections_open gauge\n"
        "smallkv_connections_open %d\n", m->conns_open);
    static const char *DROP[SD_N] = { "header_timeout", "body_timeout", "evicted", "refused" };
    OUT("# HELP smallkv_connections_dropped_total Connections the server closed or refused: headers or body late, "
        "evicted at a cap while waiting for headers, refused at the per-address cap.\n"
        "# TYPE smallkv_connections_dropped_total counter\n");
    for (int i = 0; i < SD_N; i++) OUT("smallkv_connections_dropped_total{reason=\"%s\"} %lu\n", DROP[i], m->conns_dropped[i]);
    pthread_mutex_unlock(&m->mu);
    OUT("# HELP smallkv_process_resident_bytes Resident memory of the server.\n# TYPE smallkv_process_resident_bytes gauge\n"
        "smallkv_process_resident_bytes %zu\n", serve_rss_bytes());
#undef OUT
    if (o >= cap) s[cap - 1] = 0;
    return s;
}
