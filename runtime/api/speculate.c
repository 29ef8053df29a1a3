/* speculate.c: speculative decoding behind smallkv_generate (smallkv_options.draft = K > 0).
 *
 * Each round, after the LLM's greedy token x is emitted:
 *   draft   the pair's SLM, in a full-cache session of its own (the drafter), catches up on
 *           the tokens it has not seen (the history, ending with x) and proposes d1..dk
 *           greedily (k <= K, fewer near max_tokens or the end of the context);
 *   verify  the LLM appends x, d1..dk in one forward pass (skv_session_verify), each row
 *           exactly the decode step it stands for, so row i's logits are those plain
 *           decoding would have after d_i;
 *   accept  d_i is accepted while it equals the argmax of row i-1 (sampling: see below); the accepted tokens are
 *           emitted as plain greedy decoding emits them (stop tokens, the callback, max_tokens
 *           end the round where they would have ended plain decoding), and the row after the
 *           last accepted one gives the LLM's own next token;
 *   rollback both sessions forget the rows past the last kept one. The full policy's cache
 *           only appends, so dropping its tail (skv_session_truncate) leaves exactly the
 *           cache plain decoding would have. A compressing policy evicts as it goes and has
 *           state, so the verify pass runs on a fork (skv_session_fork: hot tier and policy
 *           state copied, cold tier shared); if every row is kept the fork replaces the
 *           session, else the untouched session replays the kept rows from the q / k / v
 *           the fork's pass captured (skv_session_verify_replay: per layer and row the
 *           policy's selection, the decode attention and its update, without the matrix
 *           products) and the fork is dropped. The kept row's logits become the session's.
 * A session that runs an SLM for its policy (SmallKV: the SLM that already runs over every
 * token to pick the hot set) drafts with it instead of a drafter session (session.h
 * skv_session_draft_*): the SLM steps over x, d1 .. dk once, proposing from its logits and keeping each
 * step's attention rows for the verify row at that position, then forgets the rows past the
 * kept ones. Its pass is then shared: no SLM work but the k - j rejected steps' is added.
 * Exactness therefore rests on skv_session_verify's per-row equality with a step (tested
 * in tests/test_spec.c token for token and logit for logit). The drafter's own numerics do
 * not matter for the output, only for the acceptance rate.
 *
 * Sampling (temperature T > 0) is speculative sampling (Leviathan et al. 2023, Chen et al.
 * 2023): the drafter draws d_i from q_i = softmax(its logits / T) and keeps q_i; d_i is
 * accepted with probability min(1, p_i(d_i) / q_i(d_i)), p_i = softmax(row i-1 / T); at the
 * first rejection the round's next token is drawn from normalise(max(0, p_i - q_i)) (it
 * opens the next round in place of a draw from the kept row); after k acceptances the next
 * round draws from row k as usual. Every emitted token is then distributed exactly as plain
 * sampling's, though the random stream (and so the text for a given seed) differs. */
#include "api.h"
#include "common/util.h"
#include "runtime/session/sampling.h"
#include <stdlib.h>
#include <string.h>

/* the distributions the accept rule compares, when sampling */
static int alloc_sampling(smallkv_session *s, int K) {
    if (s->temp <= 0 || s->spec_q) return 0;
    const size_t V = (size_t)s->p->llm->cfg.vocab;
    if (s->p->slm->cfg.vocab != (int)V)
        return skv_error("draft: sampled drafts need one vocabulary (SLM %d, LLM %zu tokens)", s->p->slm->cfg.vocab, V);
    s->spec_q = skv_malloc((size_t)K * V * sizeof(float), "draft distributions");
    s->spec_p = skv_malloc(V * sizeof(float), "verify distribution");
    return s->spec_q && s->spec_p ? 0 : -1;
}

int api_spec_sampling(smallkv_session *s) { return s->draft ? alloc_sampling(s, s->draft) : 0; }

int api_spec_init(smallkv_session *s, const skv_session_opts *so, int K, int vocab) {
    if (K < 0) return skv_error("draft %d: must be >= 0", K);
    if (K == 0) return 0;
    if (vocab < 0) return skv_error("draft vocabulary %d: must be >= 0 (0: every token)", vocab);
    if (!s->p->slm) return skv_error("draft %d: speculative decoding needs an SLM (the drafter)", K);
    if (!s->s || s->be != skv_backend_get("cpu"))
        return skv_error("draft %d: speculative decoding runs on the CPU only", K);
    const int vmax = skv_session_verify_max(s->s);
    if (K + 1 > vmax || K > 63)
        return skv_error("draft %d: at most %d for this LLM (a verify pass of more rows would leave the exact "
                         "per-row decode path)", K, (vmax - 1 < 63 ? vmax - 1 : 63));
    /* a session that runs an SLM for its policy (SmallKV) drafts with it */
    if (s->s->slm && skv_session_draft_enable(s->s, K, vocab)) return skv_error_prefix("draft %d", K);
    if (!skv_session_verify_ok(s->s))
        return skv_error("draft %d: policy %s is not supported with speculative decoding (it runs work of its "
                         "own before or after each token, which a verify pass does not replay exactly)", K,
                         so->pol.desc->name);
    if (!(s->hist = skv_malloc((size_t)so->max_ctx * sizeof(int), "draft history"))) return -1;
    s->draft = s->draft_cur = K;
    if (skv_session_drafting(s->s)) return 0;
    skv_session_opts d = *so;
    if (skv_policy_spec_default("full", &d.pol)) return -1;
    d.budget = 1;
    d.slm = NULL; d.map = NULL; d.map_depth = 0;
    d.head_rows = vocab;
    if (!(s->drafter = skv_session_new(s->p->slm, &d))) {
        free(s->hist);
        s->hist = NULL;
        s->draft = 0;
        return skv_error_prefix("draft: the SLM's session");
    }
    return 0;
}

void api_spec_note(smallkv_session *s, const int *ids, int n) {
    if (!s->draft) return;
    memcpy(s->hist + s->hist_n, ids, (size_t)n * sizeof(int));
    s->hist_n += n;
}

int api_spec_prefill(smallkv_session *s, const int *ids, int n) {
    if (!s->draft || !s->drafter || s->drafter->n != s->hist_n - n) return 0;   /* behind anyway: it catches up later */
    return skv_session_prefill(s->drafter, ids, n);
}

int api_spec_fork(smallkv_session *dst, const smallkv_session *src) {
    if (!src->draft) return 0;
    const int cap = src->s->o.max_ctx;
    if (!(dst->hist = skv_malloc((size_t)cap * sizeof(int), "draft history"))) return -1;
    memcpy(dst->hist, src->hist, (size_t)src->hist_n * sizeof(int));
    dst->hist_n = src->hist_n;
    dst->draft = src->draft;
    dst->draft_adapt = src->draft_adapt;
    dst->draft_cur = src->draft_cur;
    if (alloc_sampling(dst, src->draft)) return -1;
    if (!src->drafter) return 0;   /* the policy drafts: forked with the LLM's session */
    if (src->drafter->n > 0 && !(dst->drafter = skv_session_fork(src->drafter))) return -1;
    if (!dst->drafter) {
        if (!(dst->drafter = skv_session_new(src->drafter->m, &src->drafter->o))) return -1;
    }
    return 0;
}

void api_spec_free(smallkv_session *s) {
    skv_session_free(s->drafter);
    free(s->hist);
    free(s->spec_q);
    free(s->spec_p);
    s->drafter = NULL;
    s->hist = NULL;
    s->spec_q = s->spec_p = NULL;
}

static int (*draft_hook)(int, int, void *);
static void *draft_hook_user;
static float draft_temp_factor = 1;
void api_spec_set_draft_hook(int (*hook)(int pos, int tok, void *user), void *user) {
    draft_hook = hook;
    draft_hook_user = user;
}
void api_spec_set_draft_temp_factor(float factor) { draft_temp_factor = factor > 0 ? factor : 1; }

/* A proposal from the SLM's logits after draft step i (position pos): greedy (through the
 * test hook), or a draw from q_i = softmax(logits / T), q_i kept for the accept rule. */
static int pick(const float *logits, int pos, int i, void *user) {
    smallkv_session *s = user;
    if (s->temp <= 0) {
        const int d = skv_argmax(logits, s->p->slm->cfg.vocab);
        return draft_hook ? draft_hook(pos, d, draft_hook_user) : d;
    }
    const int V = s->p->llm->cfg.vocab;
    float *q = s->spec_q + (size_t)i * V;
    skv_softmax_temp(logits, V, s->temp * draft_temp_factor, q);
    return skv_sample_probs(q, V, &s->rng);
}

/* How many of the k proposals tok[1..k] the verify rows lg accept. Greedy: those equal to
 * each row's argmax. Sampled: the accept rule; at a rejection *next is the resampled token
 * that opens the next round (-1 when every proposal was accepted). */
static int accept(smallkv_session *s, const float *lg, const int *tok, int k, int *next) {
    const int V = s->p->llm->cfg.vocab;
    int j = 0;
    *next = -1;
    if (s->temp <= 0) {
        while (j < k && skv_argmax(lg + (size_t)j * V, V) == tok[j + 1]) j++;
        return j;
    }
    for (; j < k; j++) {
        int ok;
        skv_softmax_temp(lg + (size_t)j * V, V, s->temp, s->spec_p);
        const int t = skv_spec_accept(s->spec_p, s->spec_q + (size_t)j * V, V, tok[j + 1], &s->rng, &ok);
        if (!ok) {
            *next = t;
            break;
        }
    }
    return j;
}

/* One sequence's generation, round by round: open (emit the round's first token, draft,
 * fork), verify (alone or with other lanes), close (accept, emit, roll back). */
typedef struct {
    smallkv_session *s;
    smallkv_token_cb cb;
    void *user;
    int max_tokens, produced, resampled;
    bool done;
    /* the open round: tok = x, d1 .. dk verified on v (s->s itself when it truncates) */
    int n0, k, tok[64];
    skv_session *v;
    double t0, secs;  /* the round's start; its time outside the verify pass */
} spec_lane;

static void drop_round(spec_lane *L) {
    if (L->k > 0 && L->v && L->v != L->s->s) skv_session_free(L->v);
    L->v = NULL;
    L->k = 0;
}

/* L->k > 0 afterwards: a round waits for its drafts (draft_lanes), fork (round_fork) and
 * verify; 0: a plain step ran, or L is done. */
static int round_open(spec_lane *L) {
    smallkv_session *s = L->s;
    const int cap = s->s->o.max_ctx, K = s->draft;
    L->k = 0;
    L->v = NULL;
    if (L->produced >= L->max_tokens) { L->done = true; return 0; }
    /* the round's first token: the resample of the last rejection, or the LLM's own */
    const int next = L->resampled >= 0 ? L->resampled : smallkv_sample(s, s->temp, &s->rng);
    L->resampled = -1;
    if (api_emit_token(s, next, L->cb, L->user, &L->produced) || L->produced == L->max_tokens) {
        L->done = true;
        return 0;
    }
    const int n0 = s->s->n;
    if (n0 >= cap) return skv_error("the context of %d tokens is full", cap);
    int k = s->draft_adapt ? s->draft_cur : K;
    if (k > L->max_tokens - L->produced) k = L->max_tokens - L->produced;
    if (k > cap - n0 - 1) k = cap - n0 - 1;
    if (k < 1) return smallkv_step(s, next);   /* nothing to draft: a plain step */
    L->t0 = skv_now();
    s->hist[n0] = next;
    L->tok[0] = next;
    L->n0 = n0;
    L->k = k;
    return 0;
}

/* The proposals tok[1..k] of the open lanes ls[open[0..no)]: the sessions' own SLMs of one
 * model and depth together (skv_session_draft_batch), the drafter sessions stepping together
 * (skv_session_step_batch), the rest one by one. Each lane's proposals, and its drafter's
 * state, are those it would have drafting alone. */
static int draft_lanes(spec_lane *ls, const int *open, int no) {
    bool done[no];
    for (int a = 0; a < no; a++) done[a] = false;
    /* the sessions' own SLMs (SmallKV), those of one SLM and depth together */
    for (int a = 0; a < no; a++) {
        spec_lane *L = &ls[open[a]];
        if (done[a] || !skv_session_drafting(L->s->s)) continue;
        const skv_slm_guide *g = L->s->s->slm;
        skv_session *ss[64];
        int first[64], ks[64], *dr[64], np = 0;
        void *us[64];
        for (int b = a; b < no && np < 64; b++) {
            spec_lane *M = &ls[open[b]];
            const skv_slm_guide *h = M->s->s->slm;
            if (done[b] || !skv_session_drafting(M->s->s) || h->m != g->m || h->run_layers != g->run_layers) continue;
            ss[np] = M->s->s;
            first[np] = M->tok[0];
            ks[np] = M->k;
            dr[np] = M->tok + 1;
            us[np++] = M->s;
            done[b] = true;
        }
        if (skv_session_draft_batch(ss, first, ks, dr, pick, us, np)) return -1;
    }
    /* drafter sessions: caught up on the history (a prompt's worth by prefill), then one
     * token each per batched step until each lane has its k proposals */
    skv_session *qs[no];
    int ln[no], got[no], nq = 0;
    for (int a = 0; a < no; a++) {
        if (done[a]) continue;
        spec_lane *L = &ls[open[a]];
        smallkv_session *s = L->s;
        skv_session *q = s->drafter;
        const int n = L->n0 + 1;
        if (q->n > n && skv_session_truncate(q, n)) return -1;
        if ((n - q->n > 16 || q->n == 0) && skv_session_prefill(q, s->hist + q->n, n - q->n)) return -1;
        qs[nq] = q;
        ln[nq] = a;
        got[nq++] = 0;
    }
    for (;;) {
        skv_session *bq[no];
        int bt[no], nb = 0;
        for (int i = 0; i < nq; i++) {
            spec_lane *L = &ls[open[ln[i]]];
            const int n = L->n0 + 1, p = qs[i]->n;
            if (got[i] < L->k && p == n + got[i]) {   /* logits for position n + got: a proposal */
                L->tok[1 + got[i]] = pick(skv_session_logits(qs[i]), p, got[i], L->s);
                got[i]++;
            }
            /* the token at the drafter's next position: the history's, then its proposals */
            if (got[i] < L->k && qs[i]->n < n + got[i]) {
                bq[nb] = qs[i];
                bt[nb++] = p < n ? L->s->hist[p] : L->tok[1 + p - n];
            }
        }
        if (!nb) return 0;
        if (skv_session_step_batch(bq, bt, nb)) return -1;
    }
}

/* After the drafts: the session the lane's rows are verified on. */
static int round_fork(spec_lane *L) {
    smallkv_session *s = L->s;
    const double tf = skv_now();
    /* a policy whose cache only appends rolls back by truncation; the others verify a fork
     * (cache and policy state copied) and, after a rejection, replay the kept rows on the
     * untouched session */
    L->v = skv_policy_has(s->s->pol, SKV_POLICY_KEEPS_ALL) ? s->s : skv_session_fork(s->s);
    if (!L->v) return -1;
    /* one clock read ends both, so the fork's time stays a part of the round's */
    const double t1 = skv_now();
    s->spec_fork_s += t1 - tf;
    L->secs = t1 - L->t0;   /* a batched draft: each lane waited for all of it */
    return 0;
}

/* After the verify of L's rows (verify_s: the time the pass took). */
static int round_close(spec_lane *L, double verify_s) {
    smallkv_session *s = L->s;
    const int V = s->p->llm->cfg.vocab, k = L->k, n0 = L->n0, *tok = L->tok;
    skv_session *v = L->v;
    const double t0 = skv_now();
    L->k = 0;
    L->v = NULL;
    s->spec_passes++;
    s->spec_drafted += k;
    const int j = accept(s, v->st->logits, tok, k, &L->resampled);
    s->spec_accepted += j;
    /* adaptive length: longer after a round wholly accepted, shorter after a rejection */
    if (s->draft_adapt) s->draft_cur = j == k ? (k + 2 < s->draft ? k + 2 : s->draft) : (k > 1 ? k - 1 : 1);
    /* emit d1..dj as plain decoding would; keep = rows plain decoding would have stepped */
    int keep = 1;
    for (int i = 1; i <= j; i++) {
        if (api_emit_token(s, tok[i], L->cb, L->user, &L->produced) || L->produced == L->max_tokens) {
            L->done = true;
            break;
        }
        keep = i + 1;
    }
    if (v == s->s) {   /* the cache only appends: its tail is dropped */
        if (skv_session_truncate(s->s, n0 + keep)) return -1;
    } else if (keep == k + 1) {   /* everything kept: the fork is the session */
        skv_session_free(s->s);
        s->s = v;
        s->att = NULL;            /* the CPU backend attaches the session itself */
    } else {   /* the kept rows replayed on the untouched session: attention only */
        const int rc = skv_session_verify_replay(s->s, v, keep);
        skv_session_free(v);
        if (rc) return -1;
    }
    if (skv_session_draft_keep(s->s, keep)) return -1;
    float *l0 = s->s->st->logits;   /* the last kept row's logits become the session's */
    if (keep > 1) memmove(l0, l0 + (size_t)(keep - 1) * V, (size_t)V * sizeof(float));
    /* the drafter keeps what agrees with the kept rows (it never saw the last proposal) */
    if (s->drafter && s->drafter->n > n0 + keep && skv_session_truncate(s->drafter, n0 + keep)) return -1;
    memcpy(s->hist + n0, tok, (size_t)keep * sizeof(int));
    s->hist_n = n0 + keep;
    const double close_s = skv_now() - t0;
    s->spec_verify_s += verify_s;
    s->spec_close_s += close_s;
    s->decode_s += L->secs + verify_s + close_s;
    s->decode_tokens += keep;
    return 0;
}

/* Every lane to its end. Each round, the open lanes' verify rows go through the LLM together
 * in groups whose rows stay below the exact per-row path's limit (skv_session_verify_max),
 * so each lane's output is what it would produce alone. */
static int run_lanes(spec_lane *ls, int n) {
    skv_batch *ws = NULL;
    int rc = 0;
    for (;;) {
        int open[n], no = 0, live = 0;
        for (int i = 0; i < n && !rc; i++) {
            if (ls[i].done) continue;
            if (round_open(&ls[i])) rc = -1;
            else if (ls[i].k > 0) open[no++] = i;
            live += !ls[i].done;
        }
        const double td = skv_now();
        if (!rc && no && draft_lanes(ls, open, no)) rc = -1;
        const double dd = skv_now() - td;   /* each lane waited for all the drafts */
        for (int i = 0; i < no; i++) ls[open[i]].s->spec_draft_s += dd;
        for (int i = 0; i < no && !rc; i++)
            if (round_fork(&ls[open[i]])) rc = -1;
        if (rc || !live) {
            for (int i = 0; i < no; i++) drop_round(&ls[open[i]]);
            break;
        }
        for (int a = 0; a < no && !rc;) {
            const int vmax = skv_session_verify_max(ls[open[a]].s->s);
            skv_session *vs[n];
            int toks[64], rows[n], ng = 0, R = 0;
            while (a + ng < no && ng < 64 && R + ls[open[a + ng]].k + 1 <= vmax) {
                spec_lane *L = &ls[open[a + ng]];
                memcpy(toks + R, L->tok, (size_t)(L->k + 1) * sizeof(int));
                vs[ng] = L->v;
                rows[ng] = L->k + 1;
                R += rows[ng++];
            }
            const double t0 = skv_now();
            rc = ng == 1 ? skv_session_verify(vs[0], toks, rows[0]) : skv_session_verify_batch(vs, toks, rows, ng, &ws);
            const double dt = skv_now() - t0;   /* each lane waited the whole pass */
            for (int g = 0; g < ng && !rc; g++)
                if (round_close(&ls[open[a + g]], dt)) rc = -1;
            a += ng;
        }
        for (int i = 0; i < no; i++) drop_round(&ls[open[i]]);   /* forks left by an error */
        if (rc) break;
    }
    skv_batch_free(ws);
    return rc;
}

int api_spec_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user) {
    spec_lane L = {.s = s, .cb = cb, .user = user, .max_tokens = max_tokens, .resampled = -1};
    return run_lanes(&L, 1) ? -1 : L.produced;
}

int api_spec_generate_batch(smallkv_session **ss, int n, int max_tokens, smallkv_token_cb *cbs, void **users,
                            int *produced) {
    spec_lane ls[n];
    for (int i = 0; i < n; i++)
        ls[i] = (spec_lane){.s = ss[i], .cb = cbs[i], .user = users[i], .max_tokens = max_tokens, .resampled = -1};
    const int rc = run_lanes(ls, n);
    for (int i = 0; i < n; i++) produced[i] = ls[i].produced;
    return rc;
}
