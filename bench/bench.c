/* bench.c: `make bench`: speed of the CPU decoder for each model in models/ (GGUF files),
 * printed as a Markdown table.
 *
 * Read bandwidth BW: --threads threads summing a 1 GiB float buffer (huge pages), best of 3
 * at the start, and best of 2 between the decode windows, the passes alternating between
 * plain loads and loads with a software prefetch (read_probe.h) (the AMD VM's bandwidth
 * moved between two states, ~35 and ~60-70 GB/s on 2 threads, within seconds, so each window
 * is set against the bandwidth of its own moment).
 * Per model, at --threads (default 2), fp16 KV cache:
 *   prefill      one block of 512 tokens (logits of the last row only); effective GFLOP/s
 *                = 2 x P x 512 / time, where P = the parameters of the per-layer matrices
 *                (the LM head runs for one row, attention score FLOPs are not counted)
 *   decode @S    tokens/s of single-token steps, each with exactly S tokens in the cache
 *                (S = 512 after the real prefill; S = 2048 with a synthetic cache, the
 *                arithmetic is the same whatever the cached values are); the best of
 *                5 windows of >= 0.1 s, each after its own read probe
 *   bytes/token  weights read per step (all layer matrices + norms + LM head, one embedding
 *                row) + KV read (2 x L x Hkv x d x 2 bytes x S)
 *   % of bound   tok/s x bytes per token / BW: the median over the decode windows whose
 *                probes before and after agree within 15 %, each against the mean of those
 *                two probes (decode_speed); the probes' range is printed too.
 * Last-level cache: where the bytes one step reads (at 512 tokens, or at 2048 too) fit in
 *   the CPU's last-level cache (sysconf, else sysfs; an Intel Xeon VM here reports 260 MB of
 *   L3), a part of them can stay there between steps, and the % of bound may pass 100 %: a
 *   note under the table names those models, whose figure is then not a memory-bandwidth one.
 * Shared cores: at the start and after each model, how fast the threads run a dependent
 *   add loop together against one alone (cpu_probe.h); this VM sometimes backs its two vCPUs
 *   with one physical CPU, which a note under the table reports.
 * Pair rows (issue 4), when models/qwen2.5-coder-{0.5b,1.5b}.gguf exist (LLM 1.5B, SLM 0.5B),
 * at a context of S = 4096 tokens (1024 with --quick), all with SYNTHETIC caches (zeroed
 * K/V of S tokens: the arithmetic and memory traffic do not depend on the values; a real
 * 4096-token prefill of the 1.5B model takes minutes on 2 cores):
 *   attention vs hot set  the compensated attention kernel (skv_compensate) of one decode
 *                         step over all LLM layers and KV heads with a hot set of 10/20/40/
 *                         100% of S, and its share of a full-cache LLM decode step;
 *   SLM share             one SLM step to the profile's depth (all layers without a profile)
 *                         vs an LLM step at 20% (estimated: full step - its full-cache
 *                         attention (skv_attention, all threads) + the compensated attention
 *                         at 20% (skv_compensate, KV heads one after another: an upper bound,
 *                         the session splits a layer's KV heads over the threads from 2^19
 *                         multiply-adds per head, runtime/session/session.c));
 *                         share = SLM / (SLM + LLM@20%);
 *   verify pass           speculative decoding's verify (skv_session_verify: every row runs
 *                         the decode attention a step runs, the path --draft takes) of 1, 2,
 *                         4, 8 rows against one plain decode step (skv_session_step), on a
 *                         full-cache session of SV = 1024 real tokens (512 with --quick),
 *                         each pass truncated back to SV; the fastest of the repetitions
 *                         (the machine is shared);
 *   batched decode        skv_forward_batch of the LLM at batch 1, 4, 8 (plain states, full
 *                         synthetic cache of S tokens each): aggregate tokens/s.
 * Compute probe and multi-row rows (issue 44, bench_multirow.h): the measured int8 / fp32
 * peaks (compute_probe.h) at the start; after the main table, prefill at 512 tokens (4096 too
 * with --long) of the Qwen pair with the float GEMM and the int8 multi-row kernel, the verify
 * pass cost (4 / 8 rows vs a step) and batch 1 / 4 / 8 throughput, before / after, back to back.
 * Usage: bench [--threads N] [--models DIR] [--quick] [--long] [--pair-only] [--multirow-only] */
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/compensate.h"
#include "runtime/engine/forward.h"
#include "runtime/session/session.h"
#include "runtime/format/profile.h"
#include "runtime/model/model.h"
#include "common/util.h"
#include "read_probe.h"
#include "cpu_probe.h"
#include "bench_multirow.h"
#include <dirent.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double read_bandwidth(void) { return skv_read_probe(3); }

/* bytes of the last-level cache (L3, else L2), 0 when neither sysconf nor sysfs says */
static double llc_bytes(void) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (v > 0) return (double)v;
    double best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        double n = 0;
        char unit = 0;
        if (fscanf(f, "%lf%c", &n, &unit) >= 1) {
            n *= unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : 1.0;
            if (n > best) best = n;
        }
        fclose(f);
    }
    return best;
}

static size_t wbytes(const skv_weight *w) {
    return w->data ? skv_row_bytes(w->type, w->cols) * (size_t)w->rows : 0;
}

/* Per-layer matrix parameters, and bytes a decode step reads from weights. */
static void model_sizes(const skv_model *m, double *params, double *step_bytes) {
    double p = 0, b = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) { p += (double)mats[i]->rows * mats[i]->cols; b += wbytes(mats[i]); }
        b += wbytes(&L->attn_norm) + wbytes(&L->ffn_norm) + wbytes(&L->bq) + wbytes(&L->bk) + wbytes(&L->bv);
    }
    b += wbytes(&m->output) + wbytes(&m->out_norm) + wbytes(&m->tok_embd) / m->cfg.vocab;
    *params = p;
    *step_bytes = b;
}

/* Decode steps at a fixed context: every step runs with S tokens in the cache (n_past reset
 * to S, so the step rewrites row S). After one warm-up step, 5 windows of at least min_steps
 * steps and 0.1 s each, with a read probe (2 passes) before the first and after each: the
 * VM's bandwidth moves between two states within seconds, so each window is set against the
 * mean of the probes on its two sides, and a window whose two probes differ by more than 15 %
 * (the state changed while it ran) is left out of the median unless every window is.
 * Result: the best window's tok/s, the median over the kept windows of (tok/s x bytes per
 * step / that window's bandwidth), and the probes' range. */
typedef struct { double tps, frac, bw_lo, bw_hi; } decode_result;
static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static decode_result decode_speed(skv_state *s, int S, int min_steps, double step_bytes) {
    decode_result r = {-1, 0, 1e30, 0};
    int tok = 42;
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    s->n_past = S;
    if (skv_forward(s, &tok, 1, &o) != 0) return r;
    double frac[5], steady[5], bw_prev = skv_read_probe(2);
    int n_steady = 0;
    r.tps = 0;
    r.bw_lo = r.bw_hi = bw_prev;
    for (int w = 0; w < 5; w++) {
        int steps = 0;
        const double t0 = skv_now();
        double dt = 0;
        while (steps < min_steps || dt < 0.1) {
            s->n_past = S;
            if (skv_forward(s, &tok, 1, &o) != 0) { r.tps = -1; return r; }
            steps++;
            dt = skv_now() - t0;
        }
        const double tps = steps / dt, bw_next = skv_read_probe(2), bw = 0.5 * (bw_prev + bw_next);
        if (bw_next < r.bw_lo) r.bw_lo = bw_next;
        if (bw_next > r.bw_hi) r.bw_hi = bw_next;
        if (tps > r.tps) r.tps = tps;
        frac[w] = bw > 0 ? tps * step_bytes / bw : 0;
        if (fabs(bw_next - bw_prev) <= 0.15 * fmax(bw_next, bw_prev)) steady[n_steady++] = frac[w];
        bw_prev = bw_next;
    }
    double *use = n_steady ? steady : frac;
    const int n = n_steady ? n_steady : 5;
    qsort(use, (size_t)n, sizeof use[0], cmp_dbl);
    r.frac = n % 2 ? use[n / 2] : 0.5 * (use[n / 2 - 1] + use[n / 2]);
    return r;
}

/* seconds per call of one decode step's compensated attention over all LLM lanes */
static double attn_time(const skv_model *m, int n_hot, int reps) {
    const skv_config *c = &m->cfg;
    const int g = c->n_head / c->n_kv_head, d = c->head_dim;
    uint16_t *K = skv_calloc((size_t)n_hot * d, 2, "bench K"), *V = skv_calloc((size_t)n_hot * d, 2, "bench V");
    float *q = skv_calloc((size_t)g * d, sizeof(float), "bench q"), *out = skv_calloc((size_t)g * d, sizeof(float), "bench out");
    float *scr = skv_calloc((size_t)n_hot, sizeof(float), "bench scratch");
    if (!K || !V || !q || !out || !scr) return -1;
    for (int i = 0; i < g * d; i++) q[i] = 0.01f * (float)(i % 17);
    skv_comp_args a = {.g = g, .d = d, .n_hot = n_hot, .f16 = true, .k = K, .v = V, .scratch = scr};
    double t0 = skv_now();
    for (int r = 0; r < reps; r++)
        for (int l = 0; l < c->n_layer * c->n_kv_head; l++) skv_compensate(out, q, &a);
    double dt = (skv_now() - t0) / reps;
    free(K); free(V); free(q); free(out); free(scr);
    return dt;
}

/* seconds of the full-cache decode attention (skv_attention, T = 1, the kernel a full-cache
 * step runs, on all threads) over all LLM layers at S keys */
static double full_attn_time(const skv_model *m, int S, int reps) {
    const skv_config *c = &m->cfg;
    const int H = c->n_head, Hkv = c->n_kv_head, d = c->head_dim;
    uint16_t *K = skv_calloc((size_t)Hkv * S * d, 2, "bench K"), *V = skv_calloc((size_t)Hkv * S * d, 2, "bench V");
    float *q = skv_calloc((size_t)H * d, sizeof(float), "bench q"), *out = skv_calloc((size_t)H * d, sizeof(float), "bench out");
    if (!K || !V || !q || !out) return -1;
    skv_attn_args a = {.T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = S - 1, .S_cap = S, .kv_f16 = true};
    double t0 = skv_now();
    for (int r = 0; r < reps; r++)
        for (int l = 0; l < c->n_layer; l++) skv_attention(out, q, K, V, &a);
    double dt = (skv_now() - t0) / reps;
    free(K); free(V); free(q); free(out);
    return dt;
}

/* synthetic cache: n_past = S - 1 (the K/V rows already zero from allocation are set) */
static void synth_fill(skv_state *s, int S) {
    const skv_config *c = &s->m->cfg;
    for (int l = 0; l < c->n_layer; l++) {
        size_t n = (size_t)c->n_kv_head * s->S_cap * c->head_dim * 2;
        memset(s->k[l], 0, n);
        memset(s->v[l], 0, n);
    }
    s->n_past = S - 1;
}

static double step_time(skv_state *s, int S, int n_layers, int steps) {
    int tok = 42;
    skv_fwd_opts o = {.logits = n_layers ? SKV_LOGITS_NONE : SKV_LOGITS_LAST, .n_layers = n_layers};
    synth_fill(s, S);
    if (skv_forward(s, &tok, 1, &o)) return -1;   /* warm-up */
    double t0 = skv_now();
    for (int i = 0; i < steps; i++) {
        s->n_past = S - 1;
        if (skv_forward(s, &tok, 1, &o)) return -1;
    }
    return (skv_now() - t0) / steps;
}

/* Seconds of one speculative verify pass of T rows (T = 0: one plain decode step) on a
 * session of S tokens, truncated back to S after each: the fastest of reps after a warm-up. */
static double session_pass_time(skv_session *s, int S, int T, int reps) {
    int toks[16];
    for (int i = 0; i < 16; i++) toks[i] = 42 + i;
    double best = 1e30;
    for (int i = -1; i < reps; i++) {   /* i = -1: warm-up */
        const double t0 = skv_now();
        const int rc = T == 0 ? skv_session_step(s, toks[0]) : skv_session_verify(s, toks, T);
        const double dt = skv_now() - t0;
        if (rc || skv_session_truncate(s, S)) return -1;
        if (i >= 0 && dt < best) best = dt;
    }
    return best;
}

/* The verify rows: a full-cache session of SV prompt tokens (ids spread over the vocabulary;
 * the arithmetic does not depend on them). 0, or -1 + error. */
static int verify_rows(const skv_model *L, int SV, int reps) {
    skv_session_opts o;
    skv_session_opts_default(&o);
    o.max_ctx = SV + 16;
    skv_session *s = skv_session_new(L, &o);
    int *prompt = malloc(sizeof(int) * SV);
    int rc = -1;
    if (!s || !prompt) goto out;
    for (int i = 0; i < SV; i++) prompt[i] = (int)((7919LL * i + 13) % L->cfg.vocab);
    if (skv_session_prefill(s, prompt, SV)) goto out;
    const int vmax = skv_session_verify_max(s);
    printf("\n| verify pass (session, full cache, %d tokens): rows | ms/pass | vs 1 decode step | "
           "ms per row |\n|---:|---:|---:|---:|\n", SV);
    const double t1 = session_pass_time(s, SV, 0, reps);
    if (t1 < 0) goto out;
    printf("| decode step | %.1f | 1.00 | %.1f |\n", t1 * 1e3, t1 * 1e3);
    const int ts[] = {1, 2, 4, 8};
    for (int k = 0; k < 4; k++) {
        if (ts[k] > vmax) break;
        const double t = session_pass_time(s, SV, ts[k], reps);
        if (t < 0) goto out;
        printf("| %d | %.1f | %.2f | %.1f |\n", ts[k], t * 1e3, t / t1, t * 1e3 / ts[k]);
        fflush(stdout);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench: verify rows: %s\n", skv_last_error());
    free(prompt);
    skv_session_free(s);
    return rc;
}

static int pair_bench(const char *dir, bool quick) {
    char lp[2048], sp[2048];
    snprintf(lp, sizeof lp, "%s/qwen2.5-coder-1.5b.gguf", dir);
    snprintf(sp, sizeof sp, "%s/qwen2.5-coder-0.5b.gguf", dir);
    skv_model *L = skv_model_load(lp), *Sm = L ? skv_model_load(sp) : NULL;
    if (!L || !Sm) {
        fprintf(stderr, "bench: pair rows skipped: %s\n", skv_last_error());
        skv_model_free(L);
        return 0;
    }
    const int S = quick ? 1024 : 4096, steps = quick ? 3 : 6, reps = quick ? 5 : 20;
    int depth = Sm->cfg.n_layer;
    const char *prof = "profiles/qwen2.5-coder-0.5b-1.5b.skvprof";
    skv_profile *pr = skv_profile_load(prof);
    if (pr) { depth = pr->depth; skv_profile_free(pr); }
    else prof = NULL;
    printf("\n### Pair: LLM %s, SLM %s, context %d tokens (synthetic caches, see bench.c), SLM depth %d%s\n\n",
           "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", S, depth, prof ? " (profile)" : " (no profile: all layers)");
    skv_state *ls = skv_state_new(L, S + 16, 1, true), *ss = skv_state_new(Sm, S + 16, 1, true);
    int rc = 1;
    if (!ls || !ss) goto done;
    double llm_step = step_time(ls, S, 0, steps);
    double a_full = attn_time(L, S, reps);
    printf("| hot set | tokens | compensated attention ms/step (1 thread) | vs full | share of a full-cache LLM step |\n|---|---:|---:|---:|---:|\n");
    const double fr[] = {0.1, 0.2, 0.4, 1.0};
    double a20 = a_full;
    for (int i = 0; i < 4; i++) {
        int n = (int)(fr[i] * S);
        double a = fr[i] == 1.0 ? a_full : attn_time(L, n, reps);
        if (fr[i] == 0.2) a20 = a;
        printf("| %.0f%% | %d | %.3f | %.2f | %.1f%% |\n", 100 * fr[i], n, a * 1e3, a / a_full, 100 * a / llm_step);
    }
    double slm = step_time(ss, S, depth, steps);
    /* the full step runs skv_attention (all threads); a session step runs skv_compensate per
     * KV head: swap the one for the other at 20 % (the KV heads timed one after another) */
    double llm20 = llm_step - full_attn_time(L, S, reps) + a20;
    printf("\n| LLM step, full cache | LLM step @20%% (est.) | SLM step (%d layers) | SLM share of a SmallKV step |\n"
           "|---:|---:|---:|---:|\n| %.1f ms | %.1f ms | %.1f ms | %.1f%% |\n",
           depth, llm_step * 1e3, llm20 * 1e3, slm * 1e3, 100 * slm / (slm + llm20));
    fflush(stdout);
    skv_state_free(ss); ss = NULL;
    /* speculative verification: T rows in one pass against one decode step */
    if (verify_rows(L, quick ? 512 : 1024, quick ? 3 : 5)) goto done;
    /* batched decode */
    printf("\n| batch | step ms | tokens/s (all sequences) | tokens/s per sequence |\n|---:|---:|---:|---:|\n");
    const int bs[] = {1, 4, 8};
    skv_state *st[8] = {0};
    skv_batch *b = skv_batch_new(L, 8);
    for (int i = 0; i < 8; i++) st[i] = i == 0 ? ls : skv_state_new(L, S + 16, 1, true);
    for (int i = 0; i < 8; i++) if (!st[i]) goto bdone;
    if (!b) goto bdone;
    for (int k = 0; k < 3; k++) {
        const int n = bs[k];
        int toks[8] = {42, 43, 44, 45, 46, 47, 48, 49};
        for (int i = 0; i < n; i++) synth_fill(st[i], S);
        if (skv_forward_batch(b, st, toks, n, NULL)) goto bdone;   /* warm-up */
        double t0 = skv_now();
        for (int r = 0; r < steps; r++) {
            for (int i = 0; i < n; i++) st[i]->n_past = S - 1;
            if (skv_forward_batch(b, st, toks, n, NULL)) goto bdone;
        }
        double dt = (skv_now() - t0) / steps;
        printf("| %d | %.1f | %.2f | %.2f |\n", n, dt * 1e3, n / dt, 1 / dt);
        fflush(stdout);
    }
    rc = 0;
bdone:
    if (rc) fprintf(stderr, "bench: %s\n", skv_last_error());
    for (int i = 1; i < 8; i++) skv_state_free(st[i]);
    skv_batch_free(b);
done:
    skv_state_free(ls);
    skv_state_free(ss);
    skv_model_free(L);
    skv_model_free(Sm);
    return rc;
}

int main(int argc, char **argv) {
    int threads = 2;
    bool quick = false, pair_only = false, long_run = false, multirow_only = false;
    const char *dir = getenv("SKV_MODELS_DIR") ? getenv("SKV_MODELS_DIR") : "models";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--models") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--pair-only")) pair_only = true;
        else if (!strcmp(argv[i], "--long")) long_run = true;
        else if (!strcmp(argv[i], "--multirow-only")) multirow_only = true;
        else {
            fprintf(stderr, "usage: bench [--threads N] [--models DIR] [--quick] [--long] [--pair-only] [--multirow-only]\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
        }
    }
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    double bw = read_bandwidth();
    const double cores0 = skv_parallel_probe();
    double cores_min = cores0;
    fprintf(stderr, "read bandwidth: %.2f GB/s (%d threads); each thread runs at %.0f %% of its speed alone\n", bw / 1e9,
            threads, 100 * cores0);

    if (pair_only) return pair_bench(dir, quick);
    double i8_peak, f32_peak;
    skv_bench_peaks(threads, &i8_peak, &f32_peak);
    if (multirow_only) return skv_bench_multirow(dir, quick, long_run, i8_peak, f32_peak);
    struct dirent **ents;
    int ne = scandir(dir, &ents, NULL, alphasort);
    if (ne < 0) { fprintf(stderr, "bench: %s: cannot list model directory\n", dir); return 1; }
    printf("\nsmallkv CPU bench: %d threads, fp16 KV cache, 8-row group kernels %s, read bandwidth %.2f GB/s, "
           "threads together at %.0f %% of their speed alone (cpu_probe.h)\n\n",
           threads, skv_cpu_vnni() ? "AVX-512 VNNI" : "AVX2", bw / 1e9, 100 * cores0);
    printf("| model | weights MB | prefill 512 tok/s | prefill GFLOP/s | decode@512 tok/s | MB/tok@512 | probe GB/s@512 | %% of bound@512 | decode@2048 tok/s | MB/tok@2048 | probe GB/s@2048 | %% of bound@2048 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    const double llc = llc_bytes();
    char in_llc[512] = "";   /* the models (and contexts) whose step fits in the LLC */
    for (int e = 0; e < ne; e++) {
        const char *nm = ents[e]->d_name;
        size_t ln = strlen(nm);
        if (ln < 5 || strcmp(nm + ln - 5, ".gguf") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        skv_model *m = skv_model_load(path);
        if (!m) { fprintf(stderr, "bench: %s\n", skv_last_error()); rc = 1; continue; }
        double params, wb;
        model_sizes(m, &params, &wb);
        bool big = params > 1e9;
        const int S = 2048 + 64, T = 512;
        skv_state *s = skv_state_new(m, S, T, true);
        if (!s) { fprintf(stderr, "bench: %s\n", skv_last_error()); skv_model_free(m); rc = 1; continue; }
        int *toks = malloc(sizeof(int) * T);
        for (int i = 0; i < T; i++) toks[i] = (int)((1000 + (long)i * 7919) % m->cfg.vocab);
        /* prefill: best of 2 (1 for big models or --quick) */
        double best = 1e30;
        int reps = (big || quick) ? 1 : 2;
        for (int r = 0; r < reps; r++) {
            skv_state_reset(s);
            skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
            double t0 = skv_now();
            if (skv_forward(s, toks, T, &o) != 0) { fprintf(stderr, "bench: %s\n", skv_last_error()); break; }
            double dt = skv_now() - t0;
            if (dt < best) best = dt;
        }
        double pre_tps = T / best, gflops = 2.0 * params * T / best / 1e9;
        fprintf(stderr, "%s: prefill %.1f tok/s (%.1f GFLOP/s)\n", nm, pre_tps, gflops);
        int steps = big ? 4 : 8;
        double kv_tok = (double)skv_model_kv_bytes_per_token(m, 2);
        double b512 = wb + kv_tok * 512, b2048 = wb + kv_tok * 2048;
        const decode_result d512 = decode_speed(s, 512, steps, b512);
        /* synthetic 2048-token cache */
        for (int l = 0; l < m->cfg.n_layer; l++) {
            size_t n = (size_t)m->cfg.n_kv_head * S * m->cfg.head_dim * 2;
            memset(s->k[l], 0, n);
            memset(s->v[l], 0, n);
        }
        const decode_result d2048 = decode_speed(s, 2048, steps, b2048);
        const double cores = skv_parallel_probe();
        if (cores < cores_min) cores_min = cores;
        fprintf(stderr, "%s: decode %.2f tok/s @512 (%.0f %% of bound), %.2f tok/s @2048 (%.0f %%); threads together at %.0f %%\n",
                nm, d512.tps, 100 * d512.frac, d2048.tps, 100 * d2048.frac, 100 * cores);
        printf("| %s | %.0f | %.1f | %.1f | %.2f | %.1f | %.1f-%.1f | %.0f%% | %.2f | %.1f | %.1f-%.1f | %.0f%% |\n", nm,
               wb / 1e6, pre_tps, gflops, d512.tps, b512 / 1e6, d512.bw_lo / 1e9, d512.bw_hi / 1e9, 100 * d512.frac,
               d2048.tps, b2048 / 1e6, d2048.bw_lo / 1e9, d2048.bw_hi / 1e9, 100 * d2048.frac);
        fflush(stdout);
        if (llc > 0 && b512 <= llc && strlen(in_llc) + ln + 32 < sizeof in_llc)
            snprintf(in_llc + strlen(in_llc), sizeof in_llc - strlen(in_llc), "%s%s (%s)", in_llc[0] ? ", " : "", nm,
                     b2048 <= llc ? "512 and 2048 tokens" : "512 tokens");
        free(toks);
        skv_state_free(s);
        skv_model_free(m);
    }
    for (int e = 0; e < ne; e++) free(ents[e]);
    free(ents);
    if (threads > 1 && cores_min < 0.8)
        printf("\nNote: in at least one check the threads ran at %.0f %% of their speed alone: the vCPUs were sharing "
               "physical CPUs, so compute-bound phases (attention, prefill) ran slower than this code can.\n",
               100 * cores_min);
    if (in_llc[0])
        printf("\nNote: the bytes a decode step reads fit in this CPU's %.0f MB last-level cache for %s: "
               "a part of them stays there between steps, so their %% of bound is not a memory-bandwidth figure "
               "(it can pass 100 %%).\n",
               llc / 1e6, in_llc);
    if (skv_bench_multirow(dir, quick, long_run, i8_peak, f32_peak)) rc = 1;
    if (pair_bench(dir, quick)) rc = 1;
    return rc;
}
