/* logits_hash.c: a fingerprint of every policy's decode, for refactors that must not change
 * behaviour: for each policy spec, one session of the pair (public API only) prefills a fixed
 * prompt, then decodes greedily (and in a batch of two forks, and through a fork) for a
 * fixed number of steps; every step's logits are hashed bit for bit (FNV-1a over the floats'
 * bytes). Two builds that print the same table decode identically.
 *   usage: logits_hash LLM SLM PROFILE [STEPS] [SPEC...]
 * Default specs: every policy of smallkv_policy_list() at budget 0.2, plus SmallKV's
 * variants (score=acc, mean, nosal, nomarg, sum, mass, online, slmb=0.5, adaptive split).
 * `make logits-hash` runs it on the test model (its self pair and profile). */
#include <smallkv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ULL; }
    return h;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* prefill, then `steps` greedy steps on s and on a fork of it after steps/2, the last
 * quarter as a batch of s and the fork; hash of every logits vector on the way */
static int run(smallkv_pair *p, const char *spec, const int *prompt, int n, int steps, uint64_t *out) {
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = spec;
    o.budget = 0.2;
    o.max_ctx = n + steps + 8;
    smallkv_session *s = smallkv_session_new(p, &o), *f = NULL;
    const int V = smallkv_vocab(p);
    uint64_t h = 0xcbf29ce484222325ULL;
    int rc = -1;
    if (!s || smallkv_prefill(s, prompt, n)) goto done;
    h = fnv(h, smallkv_logits(s), sizeof(float) * (size_t)V);
    for (int t = 0; t < steps; t++) {
        if (t == steps / 2 && !(f = smallkv_fork(s))) goto done;
        int tok = argmax(smallkv_logits(s), V);
        if (f && t >= steps * 3 / 4) {
            smallkv_session *b[2] = {s, f};
            int tk[2] = {tok, argmax(smallkv_logits(f), V)};
            if (smallkv_step_batch(b, tk, 2)) goto done;
        } else {
            if (smallkv_step(s, tok)) goto done;
            if (f && smallkv_step(f, argmax(smallkv_logits(f), V))) goto done;
        }
        h = fnv(h, smallkv_logits(s), sizeof(float) * (size_t)V);
        if (f) h = fnv(h, smallkv_logits(f), sizeof(float) * (size_t)V);
    }
    *out = h;
    rc = 0;
done:
    smallkv_session_free(f);
    smallkv_session_free(s);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s LLM SLM PROFILE [STEPS] [SPEC...]\n", argv[0]);
        return 2;
    }
    const int steps = argc > 4 ? atoi(argv[4]) : 48;
    if (steps < 4) { fprintf(stderr, "logits_hash: STEPS must be at least 4\n"); return 2; }
    smallkv_pair *p = smallkv_pair_load(argv[1], argv[2]);
    if (!p || smallkv_pair_load_profile(p, argv[3])) {
        fprintf(stderr, "logits_hash: %s\n", smallkv_last_error());
        smallkv_pair_free(p);
        return 1;
    }
    /* a fixed prompt: plain English, BOS first, repeated to 300 tokens */
    const char *text = "The lighthouse keeper wrote down the ships he saw each night, their names, their flags "
                       "and the hour they passed the point; years later the log was the only record of the "
                       "harbour's trade, and historians read it line by line. ";
    int ids[400], n = 0;
    while (n < 300) {
        int k = smallkv_tokenize(p, text, n ? 0 : SMALLKV_TOK_BOS, ids + n, 400 - n);
        if (k <= 0 || n + k > 400) break;
        n += k;
    }
    n = n > 300 ? 300 : n;
    char *specs[64];
    int ns = 0;
    if (argc > 5) {
        for (int i = 5; i < argc && ns < 64; i++) specs[ns++] = argv[i];
    } else {
        char *list = strdup(smallkv_policy_list());
        for (char *t = strtok(list, ", "); t && ns < 48; t = strtok(NULL, ", ")) specs[ns++] = t;
        static char *extra[] = {"smallkv:score=acc", "smallkv:score=mean", "smallkv:nosal", "smallkv:nomarg",
                                "smallkv:sum", "smallkv:mass", "smallkv:online", "smallkv:slmb=0.5",
                                "smallkv:split=adaptive", "h2o:heavy=0.3", "snapkv:decode=evict"};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) specs[ns++] = extra[i];
    }
    int rc = 0;
    printf("| policy | logits hash (%d prompt tokens, %d steps) |\n|---|---|\n", n, steps);
    for (int i = 0; i < ns; i++) {
        uint64_t h;
        if (run(p, specs[i], ids, n, steps, &h)) {
            printf("| %s | error: %s |\n", specs[i], smallkv_last_error());
            rc = 1;
        } else {
            printf("| %s | %016llx |\n", specs[i], (unsigned long long)h);
        }
        fflush(stdout);
    }
    smallkv_pair_free(p);
    return rc;
}
