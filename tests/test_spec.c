/* test_spec.c: speculative decoding (smallkv_options.draft; runtime/api/speculate.c,
 * skv_session_verify / skv_session_truncate) against plain greedy decoding, on SmolLM2 as
 * its own drafter (skipped without models/SmolLM2-135M-Instruct.Q4_1.gguf):
 *   - a verify pass's rows equal single steps bit for bit, and a truncated session steps on
 *     exactly like one that never saw the dropped rows; a session that replays the first
 *     rows of a fork's verify pass (skv_session_verify_replay) steps on like one that
 *     stepped them;
 *   - smallkv_generate with draft K = 1, 2, 4 gives the same tokens as draft 0 over NGEN
 *     tokens (300; 96 under AddressSanitizer), and the same final logits and length;
 *     acceptance statistics add up; again
 *     with about a third of the proposals replaced by a wrong token (api_spec_set_draft_hook),
 *     so that rejections roll both caches back mid-draft;
 *   - a callback that stops early and max_tokens leave the same state as plain decoding
 *     (a second generate continues identically);
 *   - the same for h2o, snapkv and quest (cold tier, query-aware) at 25-30 %, whose
 *     verify pass runs on a fork (every row's selection is the step's: evictions included);
 *   - the same for smallkv (score now and acc) at 20 % with the self-pair profile: the SLM
 *     that picks the hot set drafts in the same pass, each verify row reads the SLM rows of
 *     its own position, and a rejection rolls the SLM's cache and rows back; stops and a
 *     fork of a drafting smallkv session continue identically;
 *   - an adaptive draft length (draft_adapt) gives the same tokens for full and smallkv, and
 *     so does a draft vocabulary (draft_vocab: the drafter's LM head over a prefix of ids,
 *     whose logits equal the whole head's there);
 *   - sampling (temperature 0.8) with a drafter sampling from another distribution: the
 *     second and third tokens follow the LLM's own distribution (chi-square), for full and
 *     smallkv, while many proposals are rejected and resampled (under AddressSanitizer a
 *     tenth of the trials and no statistics);
 *   - smallkv_generate_batch: six sequences (own prompts, policies, draft lengths) verifying
 *     together, in two passes a round, give each the tokens and state it gets alone;
 *   - refusals: online head matching, a compressed SLM cache, no SLM, too many drafts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "include/smallkv.h"
#include "runtime/api/api.h"
#include "runtime/model/model.h"
#include "runtime/session/sampling.h"
#include "runtime/session/session.h"
#include "tests/support/test_util.h"

#define SMOL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOL_PROFILE "profiles/smollm2-135m-self.skvprof"
/* generated tokens a run; under AddressSanitizer fewer (every fork's buffers are poisoned and
 * checked: 300 took most of the sanitizer pass's half hour, and memory checks need no long
 * sequences), still past the evictions of the compressed policies */
#if defined(__SANITIZE_ADDRESS__)
#define NGEN 96
#else
#define NGEN 300
#endif

static smallkv_pair *pair, *solo, *prof;   /* prof: the self pair with its profile (smallkv) */
static int adapt;                          /* sessions draft with draft_adapt */
static int dvocab;                         /* sessions draft from ids < dvocab (0: all) */
static float temp;                         /* sessions sample at this temperature (0: greedy) */
static smallkv_pair *one_pair;             /* every session of this pair (one LLM to batch) */

static int setup(void **st) {
    (void)st;
    if (access(SMOL, R_OK)) return 0;
    pair = smallkv_pair_load(SMOL, SMOL);
    solo = smallkv_pair_load(SMOL, NULL);
    prof = smallkv_pair_load(SMOL, SMOL);
    return pair && solo && prof && !smallkv_pair_load_profile(prof, SMOL_PROFILE) ? 0 : -1;
}
static int teardown(void **st) {
    (void)st;
    smallkv_pair_free(pair);
    smallkv_pair_free(solo);
    smallkv_pair_free(prof);
    return 0;
}

typedef struct { int ids[NGEN]; int n, stop_at; } collect;
static int on_token(int id, const char *b, size_t len, void *u) {
    (void)b; (void)len;
    collect *c = u;
    if (c->n < NGEN) c->ids[c->n] = id;
    c->n++;
    return c->stop_at > 0 && c->n >= c->stop_at;
}

#define PROMPT "Once upon a time, in a small town by the sea, there lived"

static smallkv_session *session_prompt(int draft, const char *policy, double budget, const char *prompt) {
    smallkv_options o;
    smallkv_options_default(&o);
    o.draft = draft;
    o.draft_adapt = adapt && draft > 0;
    o.draft_vocab = draft > 0 ? dvocab : 0;
    o.temperature = temp;
    o.policy = policy;
    o.budget = budget;
    o.max_ctx = 512;
    smallkv_session *s = smallkv_session_new(one_pair ? one_pair : strncmp(policy, "smallkv", 7) ? pair : prof, &o);
    assert_non_null(s);
    int ids[64];
    int n = smallkv_tokenize(pair, prompt, SMALLKV_TOK_BOS, ids, 64);
    assert_true(n > 4 && n <= 64);
    assert_int_equal(smallkv_prefill(s, ids, n), 0);
    return s;
}
static smallkv_session *session_pol(int draft, const char *policy, double budget) {
    return session_prompt(draft, policy, budget, PROMPT);
}

/* skv_session_verify rows == steps, bit for bit; truncate then step == never stepped */
static void test_verify_rows(void **st) {
    (void)st;
    if (!pair) skip();
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.max_ctx = 256;
    int prompt[40], tok[6];
    test_prompt(prompt, 40, m->cfg.vocab, 11);
    test_prompt(tok, 6, m->cfg.vocab, 12);
    skv_session *a = skv_session_new(m, &o), *b = skv_session_new(m, &o);
    assert_non_null(a); assert_non_null(b);
    assert_int_equal(skv_session_prefill(a, prompt, 40), 0);
    assert_int_equal(skv_session_prefill(b, prompt, 40), 0);
    assert_true(skv_session_verify_max(a) >= 6);
    const int V = m->cfg.vocab;
    float *rows = malloc((size_t)6 * V * sizeof(float));
    assert_int_equal(skv_session_verify(a, tok, 6), 0);
    memcpy(rows, a->st->logits, (size_t)6 * V * sizeof(float));
    for (int t = 0; t < 6; t++) {
        assert_int_equal(skv_session_step(b, tok[t]), 0);
        assert_memory_equal(rows + (size_t)t * V, b->st->logits, (size_t)V * sizeof(float));
    }
    /* drop the last 3 rows of a, step two other tokens on both: same bits */
    assert_int_equal(skv_session_truncate(a, 43), 0);
    assert_int_equal(a->n, 43);
    skv_session *c = skv_session_new(m, &o);
    assert_int_equal(skv_session_prefill(c, prompt, 40), 0);
    for (int t = 0; t < 3; t++) assert_int_equal(skv_session_step(c, tok[t]), 0);
    for (int t = 0; t < 2; t++) {
        assert_int_equal(skv_session_step(a, tok[5 - t]), 0);
        assert_int_equal(skv_session_step(c, tok[5 - t]), 0);
        assert_memory_equal(a->st->logits, c->st->logits, (size_t)V * sizeof(float));
    }
    /* out of range */
    assert_int_equal(skv_session_truncate(a, 0), -1);
    assert_int_equal(skv_session_truncate(a, a->n + 1), -1);
    assert_int_equal(skv_session_verify(a, tok, skv_session_verify_max(a) + 1), -1);
    /* a compressing policy cannot truncate (it evicts as it goes) */
    skv_session_opts oh = o;
    assert_int_equal(skv_policy_spec_parse("h2o", &oh.pol), 0);
    oh.budget = 0.5;
    skv_session *h = skv_session_new(m, &oh);
    assert_int_equal(skv_session_prefill(h, prompt, 40), 0);
    assert_int_equal(skv_session_truncate(h, 30), -1);
    assert_non_null(strstr(smallkv_last_error(), "h2o"));
    free(rows);
    skv_session_free(a); skv_session_free(b); skv_session_free(c); skv_session_free(h);
    skv_model_free(m);
}

/* skv_session_verify_replay: a fork verifies 6 rows; the untouched session replays the
 * first 3 (no LLM pass) and then steps on exactly like a session that stepped those 3
 * tokens (hot sets, cold tier and policy state included), for a compressing policy with a
 * cold tier (quest, query-aware) and one without (h2o); bad calls are refused */
static void replay_policy(const char *policy) {
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.max_ctx = 256;
    assert_int_equal(skv_policy_spec_parse(policy, &o.pol), 0);
    o.budget = 0.3;
    int prompt[60], tok[6], more[4];
    test_prompt(prompt, 60, m->cfg.vocab, 21);
    test_prompt(tok, 6, m->cfg.vocab, 22);
    test_prompt(more, 4, m->cfg.vocab, 23);
    skv_session *a = skv_session_new(m, &o), *b = skv_session_new(m, &o);
    assert_non_null(a); assert_non_null(b);
    assert_int_equal(skv_session_prefill(a, prompt, 60), 0);
    assert_int_equal(skv_session_prefill(b, prompt, 60), 0);
    const int V = m->cfg.vocab;
    skv_session *v = skv_session_fork(a);
    assert_non_null(v);
    assert_int_equal(skv_session_verify(v, tok, 6), 0);
    assert_int_equal(skv_session_verify_replay(a, v, 0), -1);
    assert_int_equal(skv_session_verify_replay(a, v, 7), -1);
    assert_int_equal(skv_session_verify_replay(a, a, 3), -1);   /* not a verified fork */
    const int restores0 = a->restores;
    assert_int_equal(skv_session_verify_replay(a, v, 3), 0);
    assert_int_equal(a->n, 63);
    for (int t = 0; t < 3; t++) {
        assert_int_equal(skv_session_step(b, tok[t]), 0);
        assert_memory_equal(a->st->logits + (size_t)t * V, b->st->logits, (size_t)V * sizeof(float));
    }
    assert_int_equal(a->restores, b->restores);
    assert_true(a->restores >= restores0);
    /* a second replay of the same fork no longer matches the session's length */
    assert_int_equal(skv_session_verify_replay(a, v, 3), -1);
    skv_session_free(v);
    for (int t = 0; t < 4; t++) {
        assert_int_equal(skv_session_step(a, more[t]), 0);
        assert_int_equal(skv_session_step(b, more[t]), 0);
        assert_memory_equal(a->st->logits, b->st->logits, (size_t)V * sizeof(float));
    }
    skv_session_mem ma, mb;
    skv_session_mem_report(a, &ma);
    skv_session_mem_report(b, &mb);
    assert_true(ma.hot_used == mb.hot_used && ma.hot_tokens == mb.hot_tokens);
    skv_session_free(a); skv_session_free(b);
    skv_model_free(m);
}
static void test_replay(void **st) {
    (void)st;
    if (!pair) skip();
    replay_policy("quest");
    replay_policy("h2o");
}

/* replaces the proposal at about a third of the positions by its neighbour id */
static int spoil(int pos, int tok, void *u) {
    (void)u;
    uint32_t h = (uint32_t)pos * 2654435761u;
    return (h >> 16) % 3 == 0 ? (tok + 1) % 1000 : tok;
}

/* greedy tokens with draft K equal draft 0's, token for token */
static void identical(bool spoiled, const char *policy, double budget) {
    if (!pair) skip();
    api_spec_set_draft_hook(spoiled ? spoil : NULL, NULL);
    collect ref = {0};
    smallkv_session *s0 = session_pol(0, policy, budget);
    int n0 = smallkv_generate(s0, NGEN, on_token, &ref);
    const bool full = !strcmp(policy, "full");
    assert_true(n0 > (full ? NGEN / 3 : 30));
    const int V = smallkv_vocab(pair);
    const int Ks[] = {1, 2, 4};
    for (size_t k = full ? 0 : 1; k < sizeof Ks / sizeof Ks[0]; k++) {   /* K = 2, 4 for the others */
        collect c = {0};
        smallkv_session *s = session_pol(Ks[k], policy, budget);
        int n = smallkv_generate(s, NGEN, on_token, &c);
        assert_int_equal(n, n0);
        assert_memory_equal(c.ids, ref.ids, (size_t)n0 * sizeof(int));
        assert_int_equal(smallkv_length(s), smallkv_length(s0));
        assert_memory_equal(smallkv_logits(s), smallkv_logits(s0), (size_t)V * sizeof(float));
        smallkv_stats stt;
        smallkv_get_stats(s, &stt);
        print_message("%s draft %d: %d tokens, %d LLM passes (%.3f per token), %d / %d drafts accepted, mean accepted %.2f\n",
                      policy, Ks[k], n, stt.spec_passes, (double)stt.spec_passes / n, stt.spec_accepted, stt.spec_drafted,
                      (double)stt.spec_accepted / stt.spec_passes);
        assert_true(stt.spec_passes > 0);
        assert_true(stt.spec_accepted <= stt.spec_drafted);
        assert_true(stt.spec_drafted <= Ks[k] * stt.spec_passes);
        /* the rounds' phases are parts of the decode time, and drafting and verifying took some */
        const double phases = stt.spec_draft_seconds + stt.spec_fork_seconds + stt.spec_verify_seconds +
                              stt.spec_rollback_seconds;
        assert_true(stt.spec_draft_seconds > 0 && stt.spec_verify_seconds > 0);
        assert_true(stt.spec_fork_seconds >= 0 && stt.spec_rollback_seconds >= 0);
        assert_true(phases <= stt.decode_seconds * (1 + 1e-9));
        /* the LLM steps every emitted token but the last: passes + accepted of them */
        smallkv_stats s0t;
        smallkv_get_stats(s0, &s0t);
        assert_int_equal(stt.decode_tokens, s0t.decode_tokens);
        assert_true(stt.spec_passes + stt.spec_accepted >= stt.decode_tokens);
        assert_true(stt.hot_bytes == s0t.hot_bytes);
        if (!spoiled) {
            /* the model drafts for itself: nearly everything is accepted */
            assert_true(stt.spec_accepted * 10 >= stt.spec_drafted * 8);
            assert_true(stt.spec_passes < n);
        } else {
            assert_true(stt.spec_accepted * 10 <= stt.spec_drafted * 9);
            /* but a drafter session resynchronises after each rejection (a third of it is
             * spoiled); smallkv's SLM is the guide, in step by construction, and its full cache
             * agrees less with an LLM at 20 % under score=acc */
            if (dvocab) assert_true(stt.spec_accepted > 0);   /* a small draft vocabulary misses more */
            /* (measured with draft 4: h2o 28 %, quest 18-27 % as the text changes with the
             * kernels' rounding; a drafter out of step would accept next to nothing) */
            else if (strncmp(policy, "smallkv", 7)) assert_true(stt.spec_accepted * 8 >= stt.spec_drafted);
            else assert_true(stt.spec_accepted * 8 >= stt.spec_drafted);
        }
        smallkv_session_free(s);
    }
    smallkv_session_free(s0);
    api_spec_set_draft_hook(NULL, NULL);
}
static void test_identical(void **st) { (void)st; identical(false, "full", 1); }
static void test_identical_rejected(void **st) { (void)st; identical(true, "full", 1); }
/* compressing policies: the verify pass runs on a fork, a rejection verifies the kept rows again */
static void test_identical_h2o(void **st) { (void)st; identical(true, "h2o", 0.3); }
static void test_identical_snapkv(void **st) { (void)st; identical(true, "snapkv", 0.3); }
static void test_identical_quest(void **st) { (void)st; identical(true, "quest", 0.3); }
static void test_identical_smallkv(void **st) { (void)st; identical(true, "smallkv", 0.2); }
static void test_identical_smallkv_acc(void **st) { (void)st; identical(true, "smallkv:score=acc", 0.2); }
/* the drafting SLM is the guide, with its 4-bit cache: drafts and rows from the same rows */
static void test_identical_smallkv_q4(void **st) { (void)st; identical(true, "smallkv:slmkv=q4", 0.2); }
/* an adaptive draft length changes how many rows a pass verifies, never the tokens */
static void test_identical_adapt(void **st) {
    (void)st;
    adapt = 1;
    identical(true, "full", 1);
    identical(true, "smallkv", 0.2);
    adapt = 0;
}

/* a draft vocabulary (the drafter's LM head over ids < N) changes acceptance, never the
 * tokens; the logits it computes are the whole head's, the rest -INFINITY */
static void test_identical_vocab(void **st) {
    (void)st;
    if (!pair) skip();
    skv_model *m = skv_model_load(SMOL);
    assert_non_null(m);
    skv_state *a = skv_state_new(m, 64, 16, true), *b = skv_state_new(m, 64, 16, true);
    assert_non_null(a); assert_non_null(b);
    int prompt[12];
    test_prompt(prompt, 12, m->cfg.vocab, 31);
    skv_fwd_opts fa = {.logits = SKV_LOGITS_LAST}, fb = {.logits = SKV_LOGITS_LAST, .head_rows = 1001};
    assert_int_equal(skv_forward(a, prompt, 12, &fa), 0);
    assert_int_equal(skv_forward(b, prompt, 12, &fb), 0);
    for (int t = 0; t < 2; t++) {   /* prefill (general path) and a step (one region) */
        assert_memory_equal(a->logits, b->logits, 1008 * sizeof(float));   /* rounded up to 8 rows */
        for (int i = 1008; i < m->cfg.vocab; i++) assert_true(isinf(b->logits[i]) && b->logits[i] < 0);
        assert_int_equal(skv_forward(a, prompt + 3, 1, &fa), 0);
        assert_int_equal(skv_forward(b, prompt + 3, 1, &fb), 0);
    }
    skv_state_free(a); skv_state_free(b);
    skv_model_free(m);
    dvocab = 300;   /* on this story: acceptance moves for both drafters */
    identical(true, "full", 1);
    identical(true, "smallkv", 0.2);
    dvocab = 0;
}

/* smallkv_generate_batch: sequences with their own prompts, policies and draft lengths (so
 * their own acceptance, a third of the proposals spoiled) verify together, in two passes a
 * round once their rows pass the exact path's limit; each gets the tokens, length and final
 * logits plain decoding gives it alone, also one that a callback stops early. Then plain
 * batched generation, and the refusals. */
typedef struct { collect c[8]; } batch_collect;
static int on_batch_token(int seq, int id, const char *b, size_t len, void *u) {
    batch_collect *bc = u;
    return on_token(id, b, len, &bc->c[seq]);
}
/* smallkv_generate_batch == each sequence alone: tokens, length and final logits equal its
 * plain (undrafted) run; with drafts its passes and acceptance equal its drafting run alone
 * (the drafters of the batch, stepping together, propose what each proposes alone). */
static void batch_generate(void) {
    static const struct { const char *policy; double budget; int draft, prompt, stop_at; } lanes[] = {
        {"full", 1, 2, 0, 0},        {"h2o", 0.3, 4, 1, 0},   {"smallkv", 0.2, 4, 2, 0},
        {"quest", 0.3, 4, 0, 57},    {"full", 1, 4, 2, 0},    {"smallkv:score=acc", 0.2, 3, 1, 0},
    };
    const char *prompts[] = {PROMPT, "The three laws of motion describe how a body moves when",
                                    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"};
    enum { NL = sizeof lanes / sizeof lanes[0] };
    const int V = smallkv_vocab(pair);
    api_spec_set_draft_hook(spoil, NULL);
    one_pair = prof;   /* sessions batch over one loaded LLM */
    for (int drafting = 1; drafting >= 0; drafting--) {
        smallkv_session *ref[NL], *ss[NL], *solo[NL];
        collect rc[NL];
        batch_collect *bc = calloc(1, sizeof *bc);
        int produced[NL], rows = 0;
        for (int i = 0; i < NL; i++) {
            rc[i] = (collect){.stop_at = lanes[i].stop_at};
            bc->c[i].stop_at = lanes[i].stop_at;
            ref[i] = session_prompt(0, lanes[i].policy, lanes[i].budget, prompts[lanes[i].prompt]);
            ss[i] = session_prompt(drafting ? lanes[i].draft : 0, lanes[i].policy, lanes[i].budget, prompts[lanes[i].prompt]);
            solo[i] = drafting ? session_prompt(lanes[i].draft, lanes[i].policy, lanes[i].budget, prompts[lanes[i].prompt])
                               : NULL;
            rows += lanes[i].draft + 1;
        }
        if (drafting) assert_true(rows > skv_session_verify_max(ss[0]->s));   /* two verify groups a round */
        const int brc = smallkv_generate_batch(ss, NL, 120, on_batch_token, bc, produced);
        if (brc) print_message("smallkv_generate_batch: %s\n", smallkv_last_error());
        assert_int_equal(brc, 0);
        for (int i = 0; i < NL; i++) {
            const int n = smallkv_generate(ref[i], 120, on_token, &rc[i]);
            assert_int_equal(produced[i], n);
            assert_int_equal(bc->c[i].n, rc[i].n);
            assert_memory_equal(bc->c[i].ids, rc[i].ids, (size_t)(n < NGEN ? n : NGEN) * sizeof(int));
            assert_int_equal(smallkv_length(ss[i]), smallkv_length(ref[i]));
            assert_memory_equal(smallkv_logits(ss[i]), smallkv_logits(ref[i]), (size_t)V * sizeof(float));
            if (lanes[i].stop_at) assert_int_equal(n, lanes[i].stop_at);
            smallkv_stats stt;
            smallkv_get_stats(ss[i], &stt);
            if (drafting) {
                collect sc = {.stop_at = lanes[i].stop_at};
                assert_int_equal(smallkv_generate(solo[i], 120, on_token, &sc), n);
                smallkv_stats so;
                smallkv_get_stats(solo[i], &so);
                assert_int_equal(stt.spec_passes, so.spec_passes);
                assert_int_equal(stt.spec_drafted, so.spec_drafted);
                assert_int_equal(stt.spec_accepted, so.spec_accepted);
                assert_true(stt.spec_passes > 0 && stt.spec_passes < n);
                print_message("batch lane %d (%s, draft %d): %d tokens, %d passes, %d / %d accepted\n", i,
                              lanes[i].policy, lanes[i].draft, n, stt.spec_passes, stt.spec_accepted, stt.spec_drafted);
            }
        }
        /* refusals: the same session twice; drafting and plain sessions mixed */
        smallkv_session *twice[2] = {ss[0], ss[0]}, *mixed[2] = {ss[1], ref[1]};
        assert_int_equal(smallkv_generate_batch(twice, 2, 4, NULL, NULL, produced), -1);
        assert_non_null(strstr(smallkv_last_error(), "one session"));
        if (drafting) {
            assert_int_equal(smallkv_generate_batch(mixed, 2, 4, NULL, NULL, produced), -1);
            assert_non_null(strstr(smallkv_last_error(), "all or none"));
        }
        for (int i = 0; i < NL; i++) {
            smallkv_session_free(ss[i]);
            smallkv_session_free(ref[i]);
            smallkv_session_free(solo[i]);
        }
        free(bc);
    }
    one_pair = NULL;
    api_spec_set_draft_hook(NULL, NULL);
}
static void test_batch_generate(void **st) {
    (void)st;
    if (!pair) skip();
    batch_generate();
    dvocab = 300;   /* the batched drafters' LM head limited to a draft vocabulary */
    batch_generate();
    dvocab = 0;
}

/* a callback stop and max_tokens leave plain decoding's state: a second generate continues
 * identically; a fork of a drafting session drafts too */
static void stops(const char *policy, double budget) {
    if (!pair) skip();
    const int V = smallkv_vocab(pair);
    collect r1 = {.stop_at = 37}, r2 = {0}, c1 = {.stop_at = 37}, c2 = {0};
    api_spec_set_draft_hook(spoil, NULL);
    smallkv_session *s0 = session_pol(0, policy, budget), *s = session_pol(4, policy, budget);
    assert_int_equal(smallkv_generate(s0, 100, on_token, &r1), 37);
    assert_int_equal(smallkv_generate(s, 100, on_token, &c1), 37);
    assert_memory_equal(c1.ids, r1.ids, 37 * sizeof(int));
    assert_int_equal(smallkv_length(s), smallkv_length(s0));
    assert_int_equal(smallkv_generate(s0, 23, on_token, &r2), 23);
    assert_int_equal(smallkv_generate(s, 23, on_token, &c2), 23);
    assert_memory_equal(c2.ids, r2.ids, 23 * sizeof(int));
    assert_int_equal(smallkv_length(s), smallkv_length(s0));
    assert_memory_equal(smallkv_logits(s), smallkv_logits(s0), (size_t)V * sizeof(float));
    smallkv_session *f0 = smallkv_fork(s0), *f = smallkv_fork(s);
    assert_non_null(f0); assert_non_null(f);
    collect r3 = {0}, c3 = {0};
    assert_int_equal(smallkv_generate(f0, 40, on_token, &r3), 40);
    assert_int_equal(smallkv_generate(f, 40, on_token, &c3), 40);
    assert_memory_equal(c3.ids, r3.ids, 40 * sizeof(int));
    smallkv_stats stt;
    smallkv_get_stats(f, &stt);
    assert_true(stt.spec_passes > 0);
    smallkv_session_free(f0); smallkv_session_free(f);
    smallkv_session_free(s0); smallkv_session_free(s);
    api_spec_set_draft_hook(NULL, NULL);
}
static void test_stops(void **st) { (void)st; stops("full", 1); }
static void test_stops_smallkv(void **st) { (void)st; stops("smallkv", 0.2); }

/* Chi-square of counts[0..V) (n draws) against probabilities p over the tokens expected at
 * least 5 times, the rest pooled; *df its degrees of freedom. */
static double chi_square(const int *counts, int n, const float *p, int V, int *df) {
    double x2 = 0, rest_e = 0, rest_o = 0;
    int bins = 0;
    for (int v = 0; v < V; v++) {
        const double e = (double)p[v] * n;
        if (e >= 5) {
            x2 += (counts[v] - e) * (counts[v] - e) / e;
            bins++;
        } else {
            rest_e += e;
            rest_o += counts[v];
        }
    }
    if (rest_e >= 5) {
        x2 += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    }
    *df = bins - 1;
    return x2;
}

/* the most frequent value of x[i] over the i with keep[i] (keep NULL: all) */
static int mode_of(const int *x, const int *y, int y_want, int n, int V) {
    int *c = calloc((size_t)V, sizeof(int)), best = 0;
    for (int i = 0; i < n; i++) if (!y || y[i] == y_want) c[x[i]]++;
    for (int v = 1; v < V; v++) if (c[v] > c[best]) best = v;
    free(c);
    return best;
}

/* the LLM's own distribution softmax(logits / T) after the prompt and the tokens pre */
static void exact_next(const char *policy, double budget, const int *pre, int n, float T, float *p) {
    const float save = temp;
    temp = 0;
    smallkv_session *s = session_pol(0, policy, budget);
    temp = save;
    for (int i = 0; i < n; i++) assert_int_equal(smallkv_step(s, pre[i]), 0);
    skv_softmax_temp(smallkv_logits(s), smallkv_vocab(pair), T, p);
    smallkv_session_free(s);
}

/* Sampled generation with drafts: the drafter samples at twice the temperature (so its
 * distribution is not the LLM's and many proposals are rejected and resampled), yet the
 * second token given the most frequent first one, and the third given the most frequent
 * first two (drafted second in a round), follow the LLM's own softmax(logits / T):
 * chi-square far below what a rule keeping the drafter's samples gives. Each trial is a fork
 * of one prefilled session with its own seed. */
/* Under AddressSanitizer every fork's buffers are poisoned and checked, which makes the
 * statistics too slow: there the trials only check memory and mechanics (a tenth of them). */
#if defined(__SANITIZE_ADDRESS__)
#define STATISTICS 0
#else
#define STATISTICS 1
#endif

static void sampled(const char *policy, double budget, int trials) {
    if (!STATISTICS) trials /= 10;
    if (!pair) skip();
    const int V = smallkv_vocab(pair);
    const float T = 0.8f;
    temp = T;
    api_spec_set_draft_temp_factor(2.0f);
    smallkv_session *base = session_pol(3, policy, budget);
    int *t1 = malloc((size_t)trials * sizeof(int)), *t2 = malloc((size_t)trials * sizeof(int)),
        *t3 = malloc((size_t)trials * sizeof(int)), *cnt = calloc((size_t)V, sizeof(int));
    float *p = malloc((size_t)V * sizeof(float));
    long drafted = 0, accepted = 0;
    int n = 0;
    for (int i = 0; i < trials; i++) {
        smallkv_session *f = smallkv_fork(base);
        assert_non_null(f);
        f->rng = 0x5eed0000ULL + (unsigned long long)i * 7919;
        collect c = {0};
        const int got = smallkv_generate(f, 3, on_token, &c);
        smallkv_stats stt;
        smallkv_get_stats(f, &stt);
        drafted += stt.spec_drafted;
        accepted += stt.spec_accepted;
        smallkv_session_free(f);
        if (got < 3) continue;   /* a stop token */
        t1[n] = c.ids[0]; t2[n] = c.ids[1]; t3[n] = c.ids[2];
        n++;
    }
    assert_true(n > trials * 9 / 10);
    /* the rule ran: a fair share of the proposals was rejected */
    assert_true(drafted > 0 && (drafted - accepted) * 10 >= drafted);
    int df;
    const int a = mode_of(t1, NULL, 0, n, V);
    int m = 0;
    memset(cnt, 0, (size_t)V * sizeof(int));
    for (int i = 0; i < n; i++) if (t1[i] == a) { cnt[t2[i]]++; m++; }
    exact_next(policy, budget, &a, 1, T, p);
    double x2 = chi_square(cnt, m, p, V, &df);
    print_message("%s: %d trials, %ld of %ld drafts accepted; token 2 | token 1 = %d (%d draws): chi2 %.1f, df %d\n",
                  policy, n, accepted, drafted, a, m, x2, df);
    if (STATISTICS) {
        assert_true(m >= 100 && df >= 1);
        assert_true(x2 < df + 6 * sqrt(2.0 * df) + 10);   /* far in the tail for a correct rule */
    }
    const int b = mode_of(t2, t1, a, n, V);
    int pre[2] = {a, b};
    m = 0;
    memset(cnt, 0, (size_t)V * sizeof(int));
    for (int i = 0; i < n; i++) if (t1[i] == a && t2[i] == b) { cnt[t3[i]]++; m++; }
    exact_next(policy, budget, pre, 2, T, p);
    x2 = chi_square(cnt, m, p, V, &df);
    print_message("%s: token 3 | tokens 1, 2 = %d, %d (%d draws): chi2 %.1f, df %d\n", policy, a, b, m, x2, df);
    if (STATISTICS && m >= 100 && df >= 1) assert_true(x2 < df + 6 * sqrt(2.0 * df) + 10);
    free(t1); free(t2); free(t3); free(cnt); free(p);
    smallkv_session_free(base);
    api_spec_set_draft_temp_factor(1);
    temp = 0;
}
static void test_sampled(void **st) { (void)st; sampled("full", 1, 600); }
static void test_sampled_smallkv(void **st) { (void)st; sampled("smallkv", 0.3, 400); }

static void test_refusals(void **st) {
    (void)st;
    if (!pair) skip();
    smallkv_options o;
    smallkv_options_default(&o);
    o.draft = 2;
    o.policy = "smallkv:mapping=online";   /* the policy changes once the mapping is found */
    o.budget = 0.5;
    assert_null(smallkv_session_new(pair, &o));
    assert_non_null(strstr(smallkv_last_error(), "online head matching"));
    o.policy = "smallkv:slmb=0.5";   /* the SLM's own H2O cache does not roll back */
    assert_null(smallkv_session_new(prof, &o));
    assert_non_null(strstr(smallkv_last_error(), "compressed SLM cache"));
    o.policy = "full";
    o.budget = 1;
    assert_null(smallkv_session_new(solo, &o));
    assert_non_null(strstr(smallkv_last_error(), "needs an SLM"));
    o.draft = 40;
    assert_null(smallkv_session_new(pair, &o));
    assert_non_null(strstr(smallkv_last_error(), "at most"));
    o.draft = -1;
    assert_null(smallkv_session_new(pair, &o));
    o.draft = 2;
    o.temperature = -1;
    assert_null(smallkv_session_new(pair, &o));
    assert_non_null(strstr(smallkv_last_error(), "temperature"));
    o.temperature = 0;
    o.draft = 0;   /* off: no SLM needed */
    smallkv_session *s = smallkv_session_new(solo, &o);
    assert_non_null(s);
    assert_int_equal(smallkv_set_sampling(s, 101, 1), -1);
    assert_int_equal(smallkv_set_sampling(s, 0.5f, 1), 0);
    smallkv_session_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_rows),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_identical),
        cmocka_unit_test(test_identical_rejected),
        cmocka_unit_test(test_identical_h2o),
        cmocka_unit_test(test_identical_snapkv),
        cmocka_unit_test(test_identical_quest),
        cmocka_unit_test(test_identical_smallkv),
        cmocka_unit_test(test_identical_smallkv_acc),
        cmocka_unit_test(test_identical_smallkv_q4),
        cmocka_unit_test(test_identical_adapt),
        cmocka_unit_test(test_identical_vocab),
        cmocka_unit_test(test_batch_generate),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_stops_smallkv),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_sampled_smallkv),
        cmocka_unit_test(test_refusals),
    };
    /* SKV_TEST_FILTER=test_replay (a cmocka pattern) runs only the matching cases */
    if (getenv("SKV_TEST_FILTER")) cmocka_set_test_filter(getenv("SKV_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
