/* bench_prefill.c: time to first token on long prompts. One model, prompts of the given
 * lengths (token ids spread over the vocabulary, as llama-bench's -p uses arbitrary tokens),
 * each prefilled as a session does it: skv_forward over blocks of --block rows (default 256,
 * the session's), matrix products over the block, attention of its rows over the cache so
 * far; logits of the last row only; best of --reps runs. Prints a markdown table: tokens,
 * seconds, tokens/s, GFLOP/s of the weight matrices (2 x parameters x tokens; attention not
 * counted), the share of the time that grows with the position, and the peak resident set.
 * That share is attention's (with the cache writes): every block does the same matrix work,
 * so a least-squares line through the block times, t_k = a + b k, puts a x blocks on the
 * matrices and the rest on attention (an estimate; noise moves it a few points).
 *   build/bin/bench_prefill MODEL [--tokens 512,4096] [--threads N] [--reps R] [--block B]
 *                               [--gemm int8|float] [--attn exact|bf16|both]
 * --attn both runs each length with the exact and the opt-in bf16 prefill attention
 * (kernels/cpu/attention_bf16.h) in turn, rep by rep, so the two rows share the machine's
 * moment; bf16 rows say "exact" where the CPU lacks AMX-BF16.
 * scripts/llamacpp-prefill.sh runs it beside llama.cpp's llama-bench on the same file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <omp.h>
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cpu_caps.h"
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include "matrix_params.h"

static void usage(FILE *f) {
    fprintf(f, "usage: bench_prefill MODEL [--tokens 512,4096] [--threads N] [--reps R] [--block B] [--gemm int8|float]\n"
               "                     [--attn exact|bf16|both]\n"
               "  time to first token: a prompt of each length prefilled in blocks of B rows (default 256,\n"
               "  as a session does), best of R runs (default 2); --attn: the prefill attention (default\n"
               "  exact; both: the two in turn, one row each)\n");
}

/* one prefill of T tokens in blocks of B (nb blocks) from an empty cache: seconds, each block's
 * in bt; -1 on an error (printed) */
static double prefill_once(skv_state *s, const int *toks, long T, int B, int nb, double *bt) {
    skv_state_reset(s);
    const double t0 = skv_now();
    for (int k = 0; k < nb; k++) {
        const int n = (int)(T - (long)k * B < B ? T - (long)k * B : B);
        skv_fwd_opts o = {.logits = k == nb - 1 ? SKV_LOGITS_LAST : SKV_LOGITS_NONE};
        const double tb = skv_now();
        if (skv_forward(s, toks + (size_t)k * B, n, &o)) {
            fprintf(stderr, "bench_prefill: %s\n", skv_last_error());
            return -1;
        }
        bt[k] = skv_now() - tb;
    }
    return skv_now() - t0;
}

/* one table row: the best run's seconds and its block times bbt */
static void print_row(const skv_model *m, const char *gemm, const char *attn, long T, int B, double P, double best,
                      const double *bbt) {
    /* t_k = a + b k over the whole blocks (the last may be short): a x nb on the matrices */
    double share = -1;
    const int nf = (int)(T / B);
    if (nf >= 4) {
        double sk = 0, st = 0, skk = 0, skt = 0;
        for (int k = 0; k < nf; k++) { sk += k; st += bbt[k]; skk += (double)k * k; skt += k * bbt[k]; }
        const double slope = (nf * skt - sk * st) / (nf * skk - sk * sk), icpt = (st - slope * sk) / nf;
        share = 1 - icpt * ((double)T / B) / best;
        if (share < 0) share = 0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char sh[16] = "-";   /* fewer than 4 whole blocks: no line to fit */
    if (share >= 0) snprintf(sh, sizeof sh, "%.0f %%", 100 * share);
    printf("| %s | %d | %s | %s | %ld | %.2f | %.1f | %.1f | %s | %.0f |\n", m->name, omp_get_max_threads(), gemm, attn, T,
           best, T / best, 2.0 * P * T / best / 1e9, sh, ru.ru_maxrss / 1024.0);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *path = NULL, *lens = "512,4096", *gemm = "int8", *attn = "exact";
    int threads = 0, reps = 2, block = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (i + 1 < argc && !strcmp(a, "--tokens")) lens = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--threads")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--reps")) reps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--gemm")) gemm = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--block")) block = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--attn")) attn = argv[++i];
        else if (a[0] != '-' && !path) path = a;
        else { usage(stderr); return 2; }
    }
    const bool both = !strcmp(attn, "both");
    if (!path || reps < 1 || block < 1 || (strcmp(gemm, "int8") && strcmp(gemm, "float")) ||
        (!both && skv_attention_prefill_mode_parse(attn) < 0)) { usage(stderr); return 2; }
    const int n_modes = both ? 2 : 1;
    const int modes[2] = {both ? SKV_PREFILL_ATTN_EXACT : skv_attention_prefill_mode_parse(attn), SKV_PREFILL_ATTN_BF16};
    if (threads > 0) omp_set_num_threads(threads);
    skv_matmul_set_gemm_mode(strcmp(gemm, "float") ? SKV_GEMM_INT8_ALL : SKV_GEMM_MULTIROW);
    skv_model *m = skv_model_load(path);
    if (!m) { fprintf(stderr, "bench_prefill: %s\n", skv_last_error()); return 1; }
    const double P = bench_matrix_params(m);
    printf("| model | threads | prefill | attention | tokens | seconds | tok/s | matrix GFLOP/s | attention share | peak RSS MiB |\n"
           "|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
    const char *p = lens;
    int rc = 0;
    while (*p && !rc) {
        char *end;
        const long T = strtol(p, &end, 10);
        if (end == p || T < 1 || T > (1 << 20) || (*end && *end != ',')) {
            fprintf(stderr, "bench_prefill: bad --tokens '%s'\n", lens);
            rc = 2;
            break;
        }
        p = *end ? end + 1 : end;
        if (T > m->cfg.ctx_max && m->cfg.ctx_max > 0)
            fprintf(stderr, "bench_prefill: %ld tokens is past the model's training context (%d)\n", T, m->cfg.ctx_max);
        const int B = block < T ? block : (int)T, nb = (int)((T + B - 1) / B);
        skv_state *s = skv_state_new(m, (int)T + 8, B, true);
        int *toks = malloc(sizeof(int) * (size_t)T);
        double *bt = malloc(sizeof(double) * (size_t)nb), *best_bt = malloc(sizeof(double) * (size_t)nb * 2);
        if (!s || !toks || !bt || !best_bt) {
            fprintf(stderr, "bench_prefill: %ld tokens: %s\n", T, s ? "out of memory" : skv_last_error());
            skv_state_free(s);
            free(toks); free(bt); free(best_bt);
            rc = 1;
            break;
        }
        for (long i = 0; i < T; i++) toks[i] = (int)((1000 + i * 7919) % m->cfg.vocab);
        double bests[2] = {1e30, 1e30};
        for (int r = 0; r < reps && !rc; r++)
            for (int mi = 0; mi < n_modes && !rc; mi++) {
                skv_attention_set_prefill_mode(modes[mi]);
                const double dt = prefill_once(s, toks, T, B, nb, bt);
                if (dt < 0) rc = 1;
                else if (dt < bests[mi]) { bests[mi] = dt; memcpy(best_bt + (size_t)mi * nb, bt, sizeof(double) * (size_t)nb); }
            }
        for (int mi = 0; mi < n_modes && !rc; mi++)
            print_row(m, gemm, modes[mi] == SKV_PREFILL_ATTN_BF16 && skv_cpu_amx_bf16() ? "bf16" : "exact", T, B, P,
                      bests[mi], best_bt + (size_t)mi * nb);
        skv_state_free(s);
        free(toks); free(bt); free(best_bt);
    }
    skv_model_free(m);
    return rc;
}
