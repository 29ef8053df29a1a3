/* bench_spec_batch.c: several sequences generating together (smallkv_generate_batch) against
 * the same sequences one after the other (smallkv_generate), plain and speculative, in one
 * process so that each ratio compares runs a few seconds apart on this shared machine.
 *
 *   bench_spec_batch --llm L [--slm S] [--profile P] [--policy SPEC] [--budget B]
 *                    [--drafts "0 2 4"] [-n N] [--chat] PROMPT_FILE...
 *
 * For each draft length: every prompt prefilled in a session of its own, then timed: the
 * sessions one by one, then fresh sessions of the same prompts all together. Prints one
 * row per draft length: sequences, tokens, tokens/s alone and together, the ratio, LLM
 * passes per token and whether every sequence printed the same tokens both ways (it must:
 * smallkv_generate_batch gives each sequence its solo output). Prefill is not timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "include/smallkv.h"

#define MAXSEQ 16
#define MAXTOK 1024

typedef struct { int ids[MAXSEQ][MAXTOK]; int n[MAXSEQ]; } streams;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int on_one(int id, const char *b, size_t len, void *u) {
    (void)b; (void)len;
    int *dst = u;   /* [0] count, then ids */
    if (dst[0] < MAXTOK) dst[1 + dst[0]] = id;
    dst[0]++;
    return 0;
}

static int on_batch(int seq, int id, const char *b, size_t len, void *u) {
    (void)b; (void)len;
    streams *s = u;
    if (s->n[seq] < MAXTOK) s->ids[seq][s->n[seq]] = id;
    s->n[seq]++;
    return 0;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    if (t && fread(t, 1, (size_t)n, f) != (size_t)n) { free(t); t = NULL; }
    if (t) t[n] = 0;
    fclose(f);
    return t;
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_spec_batch --llm L [--slm S] [--profile P] [--policy SPEC] [--budget B]\n"
               "                        [--drafts \"0 2 4\"] [-n N] [--chat] PROMPT_FILE...\n"
               "  tokens/s of the prompts' sequences generated one by one and all together\n"
               "  (smallkv_generate_batch), for each draft length (0: plain decoding); greedy\n");
}

typedef struct {
    smallkv_pair *p;
    smallkv_options o;
    int *ids[MAXSEQ], nids[MAXSEQ], nseq;
} setup;

static int open_all(const setup *su, smallkv_session **ss) {
    for (int i = 0; i < su->nseq; i++) {
        if (!(ss[i] = smallkv_session_new(su->p, &su->o))) return -1;
        if (smallkv_prefill(ss[i], su->ids[i], su->nids[i])) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *llm = NULL, *slm = NULL, *prof = NULL, *drafts = "0 2 4";
    setup su = {0};
    smallkv_options_default(&su.o);
    int n = 128, chat = 0;
    const char *files[MAXSEQ];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (a[0] == '-' && !v) { fprintf(stderr, "bench_spec_batch: %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "--llm")) llm = argv[++i];
        else if (!strcmp(a, "--slm")) slm = argv[++i];
        else if (!strcmp(a, "--profile")) prof = argv[++i];
        else if (!strcmp(a, "--policy")) su.o.policy = argv[++i];
        else if (!strcmp(a, "--budget")) su.o.budget = atof(argv[++i]);
        else if (!strcmp(a, "--drafts")) drafts = argv[++i];
        else if (!strcmp(a, "-n")) n = atoi(argv[++i]);
        else if (a[0] == '-') { fprintf(stderr, "bench_spec_batch: unknown option %s\n", a); usage(stderr); return 2; }
        else if (su.nseq < MAXSEQ) files[su.nseq++] = a;
        else { fprintf(stderr, "bench_spec_batch: at most %d prompts\n", MAXSEQ); return 2; }
    }
    if (!llm || su.nseq < 1 || n < 1 || n > MAXTOK) { usage(stderr); return 2; }
    if (!(su.p = smallkv_pair_load(llm, slm))) { fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error()); return 1; }
    if (prof && smallkv_pair_load_profile(su.p, prof)) {
        fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error());
        return 1;
    }
    su.o.max_ctx = 4096;
    for (int i = 0; i < su.nseq; i++) {
        char *t = read_text(files[i]);
        if (!t) { fprintf(stderr, "bench_spec_batch: cannot read %s\n", files[i]); return 1; }
        const int flags = SMALLKV_TOK_BOS | (chat ? SMALLKV_TOK_CHAT : 0);
        int k = smallkv_tokenize(su.p, t, flags, NULL, 0);
        if (k < 1 || !(su.ids[i] = malloc((size_t)k * sizeof(int))) || smallkv_tokenize(su.p, t, flags, su.ids[i], k) != k) {
            fprintf(stderr, "bench_spec_batch: %s: %s\n", files[i], smallkv_last_error());
            return 1;
        }
        su.nids[i] = k;
        free(t);
    }
    printf("| policy | budget | draft | sequences | tokens | tok/s one by one | tok/s together | together / one by one | LLM passes / token | same tokens |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    static streams solo, both;
    static int one[1 + MAXTOK];
    char *dl = strdup(drafts);
    for (char *tok = strtok(dl, " ,"); tok; tok = strtok(NULL, " ,")) {
        su.o.draft = atoi(tok);
        smallkv_session *a[MAXSEQ] = {0}, *b[MAXSEQ] = {0};
        if (open_all(&su, a)) { fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error()); return 1; }
        double t0 = now();
        int total = 0;
        for (int i = 0; i < su.nseq; i++) {
            one[0] = 0;
            const int g = smallkv_generate(a[i], n, on_one, one);
            if (g < 0) { fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error()); return 1; }
            solo.n[i] = g;
            memcpy(solo.ids[i], one + 1, (size_t)(g < MAXTOK ? g : MAXTOK) * sizeof(int));
            total += g;
        }
        const double t_solo = now() - t0;
        if (open_all(&su, b)) { fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error()); return 1; }
        memset(&both, 0, sizeof both);
        int produced[MAXSEQ];
        t0 = now();
        if (smallkv_generate_batch(b, su.nseq, n, on_batch, &both, produced)) {
            fprintf(stderr, "bench_spec_batch: %s\n", smallkv_last_error());
            return 1;
        }
        const double t_both = now() - t0;
        int same = 1, passes = 0, tb = 0;
        for (int i = 0; i < su.nseq; i++) {
            same = same && produced[i] == solo.n[i] && !memcmp(both.ids[i], solo.ids[i], (size_t)solo.n[i] * sizeof(int));
            smallkv_stats st;
            smallkv_get_stats(b[i], &st);
            passes += su.o.draft ? st.spec_passes : produced[i];
            tb += produced[i];
        }
        printf("| %s | %g | %d | %d | %d | %.2f | %.2f | %.2f | %.3f | %s |\n", su.o.policy ? su.o.policy : "full",
               su.o.budget, su.o.draft, su.nseq, total, total / t_solo, tb / t_both, (tb / t_both) / (total / t_solo),
               tb ? (double)passes / tb : 0.0, same ? "yes" : "NO");
        fflush(stdout);
        for (int i = 0; i < su.nseq; i++) { smallkv_session_free(a[i]); smallkv_session_free(b[i]); }
        if (!same) return 1;
    }
    free(dl);
    smallkv_pair_free(su.p);
    return 0;
}
