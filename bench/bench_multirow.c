/* bench_multirow.c: the compute-bound rows of `make bench` (bench_multirow.h). Each row runs
 * the gemm modes of kernels/cpu/matmul.h back to back, alternating, best of the repetitions
 * (the machine is shared: compare the ratios within one run, not across runs):
 *   mode 0  SKV_GEMM_DECODE_ROWS  before issue 44: the 8-row decode kernel (<= 4 activation
 *           rows a call) below the GEMM threshold, the float GEMM from it
 *   mode 1  SKV_GEMM_MULTIROW     the default: the 16-row multi-row int8 kernel below the
 *           threshold (same bits as mode 0), the float GEMM from it
 *   mode 2  SKV_GEMM_INT8_ALL     the multi-row int8 kernel at every row count (opt-in: it
 *           changes prefill logits, every row then equal to a decode step)
 * Rows:
 *   prefill     T tokens in one skv_forward (logits of the last row), modes 0 and 2: tok/s,
 *               GFLOP/s = 2 x P x T / time (P: the per-layer matrices' parameters, as the main
 *               table), and that as a % of the measured fp32 FMA and int8 dpbusd peaks
 *   verify      skv_session_verify of 4 and 8 rows against one skv_session_step (full cache,
 *               512 prompt tokens), modes 0 and 1
 *   batch       skv_forward_batch of 1 / 4 / 8 plain states (synthetic 512-token caches),
 *               aggregate tokens/s, modes 0 and 1 */
#include "bench_multirow.h"
#include "compute_probe.h"
#include "matrix_params.h"
#include "kernels/cpu/matmul.h"
#include "runtime/engine/forward.h"
#include "runtime/session/session.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void skv_bench_peaks(int threads, double *i8, double *f32) {
    printf("\n### Compute probe (bench/compute_probe.c; GOP/s, a multiply-add = 2)\n\n| instruction | 1 thread | %d thread%s |\n|---|---:|---:|\n",
           threads, threads > 1 ? "s" : "");
    *i8 = *f32 = 0;
    for (int k = 0; k < SKV_PEAK_N; k++) {
        if (!skv_peak_supported(k)) { printf("| %s | - | - |\n", skv_peak_name(k)); continue; }
        const double p1 = skv_compute_peak(k, 1), pn = skv_compute_peak(k, threads);
        printf("| %s | %.1f | %.1f |\n", skv_peak_name(k), p1 / 1e9, pn / 1e9);
        double *best = k == SKV_PEAK_FMA256 || k == SKV_PEAK_FMA512 ? f32 : i8;
        if (pn > *best) *best = pn;
    }
    fflush(stdout);
}

/* seconds of one prefill of T tokens in gemm mode `mode` */
static double prefill_time(skv_state *s, const int *toks, int T, int mode) {
    skv_matmul_set_gemm_mode(mode);
    skv_state_reset(s);
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    const double t0 = skv_now();
    if (skv_forward(s, toks, T, &o)) return -1;
    return skv_now() - t0;
}

static int prefill_rows(const skv_model *m, const char *nm, int T, int reps, double i8, double f32) {
    skv_state *s = skv_state_new(m, T + 8, T, true);
    int *toks = malloc(sizeof(int) * T);
    if (!s || !toks) { skv_state_free(s); free(toks); return 1; }
    for (int i = 0; i < T; i++) toks[i] = (int)((1000 + (long)i * 7919) % m->cfg.vocab);
    const int modes[2] = {SKV_GEMM_DECODE_ROWS, SKV_GEMM_INT8_ALL};
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            const double t = prefill_time(s, toks, T, modes[k]);
            if (t < 0) { skv_state_free(s); free(toks); return 1; }
            if (t < best[k]) best[k] = t;
        }
    skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);
    const double P = bench_matrix_params(m);
    for (int k = 0; k < 2; k++) {
        const double g = 2.0 * P * T / best[k];
        printf("| %s | %d | %s | %.1f | %.1f | %.0f%% | %.0f%% | %s |\n", nm, T,
               k ? "int8 multi-row (mode 2, default)" : "float GEMM (modes 0, 1)", T / best[k], g / 1e9, f32 > 0 ? 100 * g / f32 : 0,
               i8 > 0 ? 100 * g / i8 : 0, k ? "" : "1.00");
    }
    printf("| %s | %d | speed-up | | | | | **%.2fx** |\n", nm, T, best[0] / best[1]);
    fflush(stdout);
    skv_state_free(s);
    free(toks);
    return 0;
}

/* best seconds of a decode step (T = 0) or a verify pass of T rows, per mode 0 / 1, alternating */
static int verify_rows(const skv_model *m, const char *nm, int reps) {
    const int SV = 512;
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.max_ctx = SV + 16;
    skv_session *s = skv_session_new(m, &o);
    int prompt[SV], toks[8];
    for (int i = 0; i < SV; i++) prompt[i] = (int)((7919LL * i + 13) % m->cfg.vocab);
    for (int i = 0; i < 8; i++) toks[i] = 42 + i;
    skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);   /* the set-up prefill only: quicker */
    if (!s || skv_session_prefill(s, prompt, SV)) { skv_session_free(s); return 1; }
    const int vmax = skv_session_verify_max(s), ts[3] = {0, 4, vmax < 8 ? vmax : 8};
    double best[2][3];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) best[k][i] = 1e30;
    for (int r = -1; r < reps; r++)   /* r = -1: warm-up */
        for (int k = 0; k < 2; k++) {
            skv_matmul_set_gemm_mode(k ? SKV_GEMM_MULTIROW : SKV_GEMM_DECODE_ROWS);
            for (int i = 0; i < 3; i++) {
                const double t0 = skv_now();
                const int rc = ts[i] == 0 ? skv_session_step(s, toks[0]) : skv_session_verify(s, toks, ts[i]);
                const double dt = skv_now() - t0;
                if (rc || skv_session_truncate(s, SV)) { skv_session_free(s); return 1; }
                if (r >= 0 && dt < best[k][i]) best[k][i] = dt;
            }
        }
    skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);
    for (int k = 0; k < 2; k++)
        printf("| %s | %s | %.1f | %.1f (%.2fx) | %.1f (%d rows, %.2fx) |\n", nm, k ? "multi-row (mode 1)" : "before (mode 0)",
               best[k][0] * 1e3, best[k][1] * 1e3, best[k][1] / best[k][0], best[k][2] * 1e3, ts[2], best[k][2] / best[k][0]);
    fflush(stdout);
    skv_session_free(s);
    return 0;
}

static int batch_rows(const skv_model *m, const char *nm, int steps) {
    const int S = 512, bs[3] = {1, 4, 8};
    skv_state *st[8] = {0};
    skv_batch *b = skv_batch_new(m, 8);
    int rc = 1, toks[8] = {42, 43, 44, 45, 46, 47, 48, 49};
    for (int i = 0; i < 8; i++)
        if (!(st[i] = skv_state_new(m, S + 16, 1, true))) goto out;
    if (!b) goto out;
    for (int i = 0; i < 8; i++) {
        const skv_config *c = &m->cfg;
        for (int l = 0; l < c->n_layer; l++) {
            const size_t n = (size_t)c->n_kv_head * st[i]->S_cap * c->head_dim * 2;
            memset(st[i]->k[l], 0, n);
            memset(st[i]->v[l], 0, n);
        }
    }
    double best[2][3];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) best[k][j] = 1e30;
    for (int r = -1; r < steps; r++)
        for (int k = 0; k < 2; k++) {
            skv_matmul_set_gemm_mode(k ? SKV_GEMM_MULTIROW : SKV_GEMM_DECODE_ROWS);
            for (int j = 0; j < 3; j++) {
                for (int i = 0; i < bs[j]; i++) st[i]->n_past = S - 1;
                const double t0 = skv_now();
                if (skv_forward_batch(b, st, toks, bs[j], NULL)) goto out;
                const double dt = skv_now() - t0;
                if (r >= 0 && dt < best[k][j]) best[k][j] = dt;
            }
        }
    for (int k = 0; k < 2; k++)
        printf("| %s | %s | %.2f | %.2f | %.2f | %.2fx |\n", nm, k ? "multi-row (mode 1)" : "before (mode 0)", 1 / best[k][0],
               4 / best[k][1], 8 / best[k][2], (8 / best[k][2]) / (1 / best[k][0]));
    fflush(stdout);
    rc = 0;
out:
    skv_matmul_set_gemm_mode(SKV_GEMM_INT8_ALL);
    for (int i = 0; i < 8; i++) skv_state_free(st[i]);
    skv_batch_free(b);
    return rc;
}

int skv_bench_multirow(const char *dir, bool quick, bool long_run, double i8, double f32) {
    const char *names[2] = {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"};
    skv_model *ms[2] = {0};
    for (int i = 0; i < 2; i++) {
        char p[2048];
        snprintf(p, sizeof p, "%s/%s.gguf", dir, names[i]);
        if (!(ms[i] = skv_model_load(p))) fprintf(stderr, "bench: multi-row rows: %s skipped: %s\n", names[i], skv_last_error());
    }
    int rc = 0;
    printf("\n### Multi-row products (issue 44; %d threads; modes: kernels/cpu/matmul.h; best of the repetitions, "
           "the modes alternating)\n\n| model | tokens | prefill path | tok/s | GFLOP/s | %% of fp32 FMA peak | "
           "%% of int8 peak | time vs float GEMM |\n|---|---:|---|---:|---:|---:|---:|---:|\n",
           omp_get_max_threads());
    for (int i = 0; i < 2 && !rc; i++)
        if (ms[i]) rc = prefill_rows(ms[i], names[i], 512, quick ? 1 : 2, i8, f32);
    if (!rc && long_run && ms[0]) rc = prefill_rows(ms[0], names[0], 4096, 1, i8, f32);
    printf("\n| model | verify path | decode step ms | verify 4 rows ms (vs step) | verify 8 rows ms (vs step) |\n"
           "|---|---|---:|---:|---:|\n");
    for (int i = 0; i < 2 && !rc; i++)
        if (ms[i]) rc = verify_rows(ms[i], names[i], quick ? 3 : 5);
    printf("\n| model | batch path | batch 1 tok/s | batch 4 tok/s | batch 8 tok/s | batch 8 / batch 1 |\n"
           "|---|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < 2 && !rc; i++)
        if (ms[i]) rc = batch_rows(ms[i], names[i], quick ? 3 : 6);
    if (rc) fprintf(stderr, "bench: multi-row rows: %s\n", skv_last_error());
    for (int i = 0; i < 2; i++) skv_model_free(ms[i]);
    return rc;
}
