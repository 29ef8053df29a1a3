/* conns.c: the connection guard. Every open connection is registered (from libmicrohttpd's
 * connection notifications) with its client address, its phase (waiting for a request's
 * headers, reading its body, answering) and the deadline of that phase. A reaper thread
 * closes a connection whose headers or body are late: a client that trickles bytes keeps
 * libmicrohttpd's idle timeout from ever firing, so only a deadline bounds it.
 * The caps, per address and in all, are the accept policy (libmicrohttpd, a thread per
 * connection, accepts and closes beyond its own limit rather than leaving connections in
 * the backlog, so the policy decides): a new connection over a cap takes the place of the
 * connection that has waited longest on its client, at least EVICT_AFTER (from the same
 * address when that address is at its cap), else it is refused. Waiting on the client
 * (for headers or the rest of a body) is what a slow client and an idle kept-alive
 * connection do; a request that is in, being answered, is never evicted: slow clients take
 * slots from each other and from idle connections, not from requests at work, and a new
 * client (a health check) gets in while they hold every slot.
 * A connection is closed with shutdown(), not close(): its thread in libmicrohttpd sees
 * the end of the stream and closes it itself. shutdown() is called under the registry lock
 * on a registered entry only, and an entry leaves the registry (under the lock) when
 * libmicrohttpd notifies the close, which it does before it closes the descriptor: so the
 * descriptor shut down is always that connection's, never a later one's with its number. */
#include "serve.h"
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

static const double EVICT_AFTER = 1.0;   /* seconds waiting on the client before a newcomer may take the slot */
enum { TICK_MS = 200 };                   /* the reaper's period: deadlines hold to within it */

struct serve_conn {
    int fd;
    uint32_t ip;               /* IPv4, network order */
    enum serve_conn_phase phase;
    double since, deadline;    /* monotonic seconds: phase start; 0 deadline: none */
    bool dropped;              /* shut down by the guard; the entry goes when libmicrohttpd closes it */
    serve_conn *prev, *next;
};

struct serve_conns {
    const serve_config *cfg;
    serve_metrics *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    serve_conn *head;
    int live;                  /* registered and not dropped */
    bool stop;
};

double serve_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void publish(serve_conns *cs) {   /* cs->mu held */
    pthread_mutex_lock(&cs->m->mu);
    cs->m->conns_open = cs->live;
    pthread_mutex_unlock(&cs->m->mu);
}

static void count(serve_conns *cs, enum serve_conn_drop why) {
    pthread_mutex_lock(&cs->m->mu);
    cs->m->conns_dropped[why]++;
    pthread_mutex_unlock(&cs->m->mu);
}

static void drop(serve_conns *cs, serve_conn *e, enum serve_conn_drop why) {   /* cs->mu held */
    shutdown(e->fd, SHUT_RDWR);
    e->dropped = true;
    cs->live--;
    count(cs, why);
    publish(cs);
}

static void set_phase(const serve_conns *cs, serve_conn *e, enum serve_conn_phase ph, double now) {
    const serve_config *c = cs->cfg;
    e->phase = ph;
    e->since = now;
    if (ph == SC_HEADERS) e->deadline = now + c->header_timeout;
    else if (ph == SC_BODY) e->deadline = now + (c->body_timeout < c->timeout ? c->body_timeout : c->timeout);
    else e->deadline = 0;
}

static void *reaper(void *arg) {
    serve_conns *cs = arg;
    pthread_mutex_lock(&cs->mu);
    while (!cs->stop) {
        if (!cs->head) pthread_cond_wait(&cs->cv, &cs->mu);
        else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += TICK_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        }
        const double now = serve_mono_s();
        for (serve_conn *e = cs->head; e; e = e->next)
            if (!e->dropped && e->phase != SC_BUSY && now > e->deadline)
                drop(cs, e, e->phase == SC_HEADERS ? SD_HEADER_TIMEOUT : SD_BODY_TIMEOUT);
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

serve_conns *serve_conns_start(const serve_config *cfg, serve_metrics *m) {
    serve_conns *cs = calloc(1, sizeof *cs);
    if (!cs) return NULL;
    cs->cfg = cfg;
    cs->m = m;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&cs->th, NULL, reaper, cs)) {
        pthread_mutex_destroy(&cs->mu);
        pthread_cond_destroy(&cs->cv);
        free(cs);
        return NULL;
    }
    return cs;
}

void serve_conns_stop(serve_conns *cs) {
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_cond_signal(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    pthread_join(cs->th, NULL);
    while (cs->head) {   /* none once libmicrohttpd has stopped; freed all the same */
        serve_conn *e = cs->head;
        cs->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&cs->mu);
    pthread_cond_destroy(&cs->cv);
    free(cs);
}

bool serve_conns_admit(serve_conns *cs, uint32_t ip) {
    pthread_mutex_lock(&cs->mu);
    const double now = serve_mono_s();
    int n = 0;
    serve_conn *mine = NULL, *any = NULL;   /* waited longest on the client: from ip, from anyone */
    for (serve_conn *e = cs->head; e; e = e->next) {
        if (e->dropped) continue;
        const bool idle = e->phase != SC_BUSY && now - e->since >= EVICT_AFTER;
        if (idle && (!any || e->since < any->since)) any = e;
        if (e->ip != ip) continue;
        n++;
        if (idle && (!mine || e->since < mine->since)) mine = e;
    }
    serve_conn *victim = n >= cs->cfg->max_conns_per_ip ? mine : cs->live >= cs->cfg->max_conns ? any : NULL;
    const bool ok = victim || (n < cs->cfg->max_conns_per_ip && cs->live < cs->cfg->max_conns);
    if (victim) drop(cs, victim, SD_EVICTED);
    pthread_mutex_unlock(&cs->mu);
    if (!ok) count(cs, SD_REFUSED);
    return ok;
}

serve_conn *serve_conns_add(serve_conns *cs, int fd, uint32_t ip) {
    serve_conn *e = calloc(1, sizeof *e);
    if (!e) return NULL;   /* not guarded: libmicrohttpd's idle timeout still applies */
    e->fd = fd;
    e->ip = ip;
    pthread_mutex_lock(&cs->mu);
    set_phase(cs, e, SC_HEADERS, serve_mono_s());
    e->next = cs->head;
    if (cs->head) cs->head->prev = e;
    cs->head = e;
    cs->live++;
    publish(cs);
    pthread_cond_signal(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    return e;
}

void serve_conns_remove(serve_conns *cs, serve_conn *e) {
    if (!e) return;
    pthread_mutex_lock(&cs->mu);
    if (e->prev) e->prev->next = e->next; else cs->head = e->next;
    if (e->next) e->next->prev = e->prev;
    if (!e->dropped) cs->live--;
    publish(cs);
    pthread_mutex_unlock(&cs->mu);
    free(e);
}

double serve_conn_phase(serve_conns *cs, serve_conn *e, enum serve_conn_phase ph) {
    const double now = serve_mono_s();
    if (!e) return now;
    pthread_mutex_lock(&cs->mu);
    set_phase(cs, e, ph, now);
    pthread_mutex_unlock(&cs->mu);
    return now;
}
