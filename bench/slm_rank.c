/* slm_rank.c: how well an SLM with a quantised cache ranks tokens, against the same SLM with
 * its fp16 cache (the ranking SmallKV's selection reads: each decode step's attention row of
 * every SLM head, kernels/cpu/kvquant.h for the formats).
 *   usage: slm_rank SLM [--data DIR] [--corpora LIST] [--docs N] [--tokens N] [--prefill P]
 *                       [--every S] [--depth D] [--caches LIST]
 * For each document (eval/data.h: N tokens of the corpus), the fp16 state and one state per
 * quantised cache (q8, q4, k8v4: 8-bit keys, 4-bit values; keys normalised per channel, or
 * with a -plain suffix as plain rows: kvquant.h) prefill P tokens and decode the rest teacher-forced; every S-th step, for every
 * head of the first D layers, the top-k keys of the two rows are compared at k = 5, 10 and
 * 20 % of the keys:
 *   overlap   |top-k(fp16) & top-k(quantised)| / k
 *   mass      the fp16 row's attention mass on top-k(quantised) over its mass on its own top-k
 *             (1: the quantised ranking keeps as much attention as the exact one)
 * Printed as a table: mean and 5th percentile over (document, step, head). Deterministic. */
#include "eval/data.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/topk.h"
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF 3
static const double FRAC[NF] = {0.05, 0.10, 0.20};
#define MAXB 6

typedef struct { double *v; size_t n, cap; } samples;
static int push(samples *s, double x) {
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, c * sizeof *v);
        if (!v) return -1;
        s->v = v; s->cap = c;
    }
    s->v[s->n++] = x;
    return 0;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void summary(samples *s, double *mean, double *p5) {
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->v[i];
    *mean = s->n ? sum / s->n : 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    *p5 = s->n ? s->v[(size_t)(0.05 * (s->n - 1))] : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: slm_rank SLM [--data DIR] [--corpora LIST] [--docs N] [--tokens N] [--prefill P]\n"
            "                    [--every S] [--depth D] [--caches LIST]\n"
            "  SLM            the small model (GGUF or HF directory)\n"
            "  --data DIR     data folder (default $SKV_DATA_DIR or data; scripts/fetch-data.sh)\n"
            "  --corpora LIST fidelity corpora (default wikitext2,pg-essays)\n"
            "  --docs N       documents per corpus (default 2)\n"
            "  --tokens N     document length (default 2048); --prefill P its prefill (default 1024)\n"
            "  --every S      compare every S-th decode step (default 16)\n"
            "  --depth D      SLM layers compared (default: all)\n"
            "  --caches LIST  quantised caches: q8, q4, k8v4, each also NAME-plain (keys not normalised)\n"
            "                 (default q8,k8v4,q4,q4-plain)\n");
}

int main(int argc, char **argv) {
    const char *slm_path = NULL, *env_data = getenv("SKV_DATA_DIR");
    const char *data = env_data && *env_data ? env_data : "data";
    char corpora[256] = "wikitext2,pg-essays", caches[128] = "q8,k8v4,q4,q4-plain", corp_label[256];
    int docs = 2, N = 2048, P = 1024, every = 16, depth = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (a[0] == '-' && !v) { fprintf(stderr, "slm_rank: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--data")) data = argv[++i];
        else if (!strcmp(a, "--corpora")) snprintf(corpora, sizeof corpora, "%s", argv[++i]);
        else if (!strcmp(a, "--caches")) snprintf(caches, sizeof caches, "%s", argv[++i]);
        else if (!strcmp(a, "--docs")) docs = atoi(argv[++i]);
        else if (!strcmp(a, "--tokens")) N = atoi(argv[++i]);
        else if (!strcmp(a, "--prefill")) P = atoi(argv[++i]);
        else if (!strcmp(a, "--every")) every = atoi(argv[++i]);
        else if (!strcmp(a, "--depth")) depth = atoi(argv[++i]);
        else if (a[0] == '-') { fprintf(stderr, "slm_rank: unknown option %s\n", a); usage(); return 2; }
        else if (!slm_path) slm_path = a;
        else { fprintf(stderr, "slm_rank: one model only\n"); return 2; }
    }
    if (!slm_path) { usage(); return 2; }
    if (docs < 1 || N < 64 || P < 16 || P >= N || every < 1 || depth < 0) {
        fprintf(stderr, "slm_rank: bad --docs/--tokens/--prefill/--every/--depth\n");
        return 2;
    }
    int kbits[MAXB], vbits[MAXB], nb = 0;
    bool plain[MAXB];
    const char *names[MAXB];
    for (char *t = strtok(caches, ","); t; t = strtok(NULL, ",")) {
        if (nb == MAXB) { fprintf(stderr, "slm_rank: at most %d caches\n", MAXB); return 2; }
        const size_t n = strlen(t);
        plain[nb] = n > 6 && !strcmp(t + n - 6, "-plain");
        const size_t base = plain[nb] ? n - 6 : n;
        if (base == 2 && !strncmp(t, "q8", 2)) kbits[nb] = vbits[nb] = 8;
        else if (base == 2 && !strncmp(t, "q4", 2)) kbits[nb] = vbits[nb] = 4;
        else if (base == 4 && !strncmp(t, "k8v4", 4)) { kbits[nb] = 8; vbits[nb] = 4; }
        else { fprintf(stderr, "slm_rank: unknown cache '%s' (q8, q4, k8v4, each also NAME-plain)\n", t); return 2; }
        names[nb++] = t;
    }
    snprintf(corp_label, sizeof corp_label, "%s", corpora);
    skv_model *m = skv_model_load(slm_path);
    if (!m) { fprintf(stderr, "slm_rank: %s\n", skv_last_error()); return 1; }
    if (!m->tok) { fprintf(stderr, "slm_rank: %s has no tokenizer\n", slm_path); return 1; }
    const skv_config *c = &m->cfg;
    const int D = depth && depth < c->n_layer ? depth : c->n_layer, H = c->n_head;
    samples ov[MAXB][NF] = {{{0}}}, ms[MAXB][NF] = {{{0}}};
    float **rows[MAXB + 1];
    for (int b = 0; b <= nb; b++) {
        rows[b] = skv_rows_new(c->n_layer, (size_t)H * N, "rows");
        if (!rows[b]) return 1;
    }
    int *ca = malloc((size_t)N * sizeof(int)), *cb = malloc((size_t)N * sizeof(int));
    unsigned char *in = malloc((size_t)N);
    int rc = 1;
    if (!ca || !cb || !in) goto out;
    char *save = NULL;
    for (char *corpus = strtok_r(corpora, ",", &save); corpus; corpus = strtok_r(NULL, ",", &save)) {
        if (skv_eval_need(data, corpus)) { fprintf(stderr, "slm_rank: %s\n", skv_last_error()); goto out; }
        size_t len;
        char *text = skv_eval_corpus(data, corpus, &len);
        if (!text) { fprintf(stderr, "slm_rank: %s\n", skv_last_error()); goto out; }
        for (int d = 0; d < docs; d++) {
            int *tok = NULL;
            if (skv_eval_document(m->tok, text, len, N, d, &tok) != N) {
                fprintf(stderr, "slm_rank: %s\n", skv_last_error());
                free(text);
                goto out;
            }
            skv_state *st[MAXB + 1];
            st[0] = skv_state_new(m, N, 256, true);
            for (int b = 0; b < nb; b++)
                if ((st[b + 1] = skv_state_new_quant(m, N, 256, kbits[b], vbits[b]))) st[b + 1]->k_norm_off = plain[b];
            for (int b = 0; b <= nb; b++)
                if (!st[b]) { fprintf(stderr, "slm_rank: %s\n", skv_last_error()); free(tok); free(text); goto out; }
            for (int b = 0; b <= nb; b++) {
                skv_fwd_opts o = {.logits = SKV_LOGITS_NONE, .n_layers = D};
                for (int t = 0; t < P; t += 256)
                    if (skv_forward(st[b], tok + t, P - t < 256 ? P - t : 256, &o)) goto fwd_fail;
            }
            for (int pos = P; pos < N; pos++) {
                const bool cmp = (pos - P) % every == 0;
                for (int b = 0; b <= nb; b++) {
                    skv_fwd_opts o = {.logits = SKV_LOGITS_NONE, .n_layers = D, .lastrow = cmp ? rows[b] : NULL};
                    if (skv_forward(st[b], tok + pos, 1, &o)) goto fwd_fail;
                }
                if (!cmp) continue;
                const int n = pos + 1;
                for (int l = 0; l < D; l++)
                    for (int h = 0; h < H; h++) {
                        const float *ref = rows[0][l] + (size_t)h * N;
                        for (int f = 0; f < NF; f++) {
                            int k = (int)(FRAC[f] * n + 0.5);
                            if (k < 1) k = 1;
                            for (int i = 0; i < n; i++) ca[i] = i;
                            skv_topk(ref, ca, n, k);
                            double mass_ref = 0;
                            memset(in, 0, (size_t)n);
                            for (int i = 0; i < k; i++) { in[ca[i]] = 1; mass_ref += ref[ca[i]]; }
                            for (int b = 0; b < nb; b++) {
                                const float *q = rows[b + 1][l] + (size_t)h * N;
                                for (int i = 0; i < n; i++) cb[i] = i;
                                skv_topk(q, cb, n, k);
                                int hit = 0;
                                double mass = 0;
                                for (int i = 0; i < k; i++) { hit += in[cb[i]]; mass += ref[cb[i]]; }
                                if (push(&ov[b][f], (double)hit / k) || push(&ms[b][f], mass_ref > 0 ? mass / mass_ref : 1))
                                    goto fwd_fail;
                            }
                        }
                    }
            }
            for (int b = 0; b <= nb; b++) skv_state_free(st[b]);
            free(tok);
            fprintf(stderr, "slm_rank: %s document %d done\n", corpus, d);
            continue;
        fwd_fail:
            fprintf(stderr, "slm_rank: %s\n", skv_last_error());
            for (int b = 0; b <= nb; b++) skv_state_free(st[b]);
            free(tok);
            free(text);
            goto out;
        }
        free(text);
    }
    printf("SLM %s, %d layers x %d heads, %d documents per corpus (%s), %d tokens, prefill %d, every %d steps\n\n",
           m->name ? m->name : slm_path, D, H, docs, corp_label, N, P, every);
    printf("| cache | bytes / fp16 | k | top-k overlap (mean) | overlap p5 | mass kept (mean) | mass kept p5 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < NF; f++) {
            double om, o5, mm, m5;
            summary(&ov[b][f], &om, &o5);
            summary(&ms[b][f], &mm, &m5);
            printf("| %s | %.3f | %.0f %% | %.4f | %.4f | %.4f | %.4f |\n", names[b],
                   (double)(skv_kvq_row_bytes(c->head_dim, kbits[b]) + skv_kvq_row_bytes(c->head_dim, vbits[b])) /
                       (4.0 * c->head_dim),
                   100 * FRAC[f], om, o5, mm, m5);
        }
    rc = 0;
out:
    for (int b = 0; b <= nb; b++) skv_rows_free(rows[b], c->n_layer);
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < NF; f++) { free(ov[b][f].v); free(ms[b][f].v); }
    free(ca); free(cb); free(in);
    skv_model_free(m);
    return rc;
}
