/* generate_pair.c: the public API (include/smallkv.h) end to end: load an LLM + SLM pair
 * and its profile, prefill a prompt under SmallKV at a 20% budget, stream a greedy answer
 * through the token callback, fork the session for a second answer, print statistics.
 *   usage: generate_pair LLM [SLM PROFILE] [PROMPT]
 * Without SLM/PROFILE it runs H2O at 20%. Build: make build/bin/generate_pair */
#include <smallkv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_token(int id, const char *bytes, size_t len, void *user) {
    (void)id; (void)user;
    fwrite(bytes, 1, len, stdout);
    fflush(stdout);
    return 0;   /* nonzero would stop */
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s LLM [SLM PROFILE] [PROMPT]\n", argv[0]); return 2; }
    const char *slm = argc >= 4 ? argv[2] : NULL, *profile = argc >= 4 ? argv[3] : NULL;
    const char *prompt = argc == 3 ? argv[2] : argc >= 5 ? argv[4] : "The three primary colours are";
    smallkv_pair *p = smallkv_pair_load(argv[1], slm);
    if (!p || (profile && smallkv_pair_load_profile(p, profile))) {
        fprintf(stderr, "error: %s\n", smallkv_last_error());
        smallkv_pair_free(p);
        return 1;
    }
    smallkv_options o;
    smallkv_options_default(&o);
    o.policy = slm ? "smallkv" : "h2o";
    o.budget = 0.2;
    smallkv_session *s = smallkv_session_new(p, &o);
    int n = s ? smallkv_tokenize(p, prompt, SMALLKV_TOK_BOS, NULL, 0) : -1;
    int *ids = n > 0 ? malloc(sizeof(int) * (size_t)n) : NULL;
    int rc = 1;
    if (!ids || smallkv_tokenize(p, prompt, SMALLKV_TOK_BOS, ids, n) != n || smallkv_prefill(s, ids, n)) goto done;
    smallkv_session *f = smallkv_fork(s);   /* same state: a second answer later */
    if (!f) goto done;
    printf("%s", prompt);
    if (smallkv_generate(s, 24, print_token, NULL) < 0) { smallkv_session_free(f); goto done; }
    printf("\n[fork] %s", prompt);
    if (smallkv_generate(f, 8, print_token, NULL) < 0) { smallkv_session_free(f); goto done; }
    printf("\n");
    smallkv_session_free(f);
    smallkv_stats st;
    smallkv_get_stats(s, &st);
    printf("hot %zu B, cold %zu B, full would be %zu B, SLM weights %zu B, SLM cache %zu B\n", st.hot_bytes,
           st.cold_bytes, st.full_bytes, st.slm_weight_bytes, st.slm_cache_bytes);
    printf("prefill %.1f tok/s, decode %.1f tok/s, TTFT %.3f s, TPOT %.1f ms\n", st.prefill_tps, st.decode_tps, st.ttft,
           st.tpot * 1e3);
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", smallkv_last_error());
    free(ids);
    smallkv_session_free(s);
    smallkv_pair_free(p);
    return rc;
}
