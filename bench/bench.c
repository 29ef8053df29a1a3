/* bench.c: `make bench`: speed of the CPU decoder for each model in models/ (GGUF files),
 * printed as a Markdown table.
 *
 * Per machine: read bandwidth BW (2 threads summing a 1 GiB float buffer, best of 3).
 * Per model, at --threads (default 2), fp16 KV cache:
 *   prefill      one block of 512 tokens (logits of the last row only); effective GFLOP/s
 *                = 2 x P x 512 / time, where P = the parameters of the per-layer matrices
 *                (the LM head runs for one row, attention score FLOPs are not counted)
 *   decode @S    tokens/s of single-token steps with S tokens already in the cache
 *                (S = 512 after the real prefill; S = 2048 with a synthetic cache, the
 *                arithmetic is the same whatever the cached values are)
 *   bytes/token  weights read per step (all layer matrices + norms + LM head, one embedding
 *                row) + KV read (2 x L x Hkv x d x 2 bytes x S)
 *   bound        BW / bytes per token; decode % = measured / bound.
 * Usage: bench [--threads N] [--models DIR] [--quick] */
#include "../runtime/forward.h"
#include "../runtime/model.h"
#include "../runtime/util.h"
#include <dirent.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double read_bandwidth(void) {
    const size_t n = (size_t)1 << 28;   /* 256 Mi floats = 1 GiB */
    float *buf = skv_aligned_alloc(n * sizeof(float), "bandwidth buffer");
    if (!buf) return 0;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = skv_now();
        float tot = 0;
        #pragma omp parallel reduction(+ : tot)
        {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            #pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += 32) {
                a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
                a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
                a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
                a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
            }
            float v[8];
            _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (int j = 0; j < 8; j++) tot += v[j];
        }
        double dt = skv_now() - t0;
        sink += tot;
        double bw = n * sizeof(float) / dt;
        if (bw > best) best = bw;
    }
    (void)sink;
    free(buf);
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

/* Decode `steps` tokens starting at the state's n_past; tok/s (after one warm-up step). */
static double decode_speed(skv_state *s, int steps) {
    int tok = 42;
    skv_fwd_opts o = {.logits = SKV_LOGITS_LAST};
    if (skv_forward(s, &tok, 1, &o) != 0) return -1;
    double t0 = skv_now();
    for (int i = 0; i < steps; i++)
        if (skv_forward(s, &tok, 1, &o) != 0) return -1;
    return steps / (skv_now() - t0);
}

int main(int argc, char **argv) {
    int threads = 2;
    bool quick = false;
    const char *dir = getenv("SKV_MODELS_DIR") ? getenv("SKV_MODELS_DIR") : "models";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--models") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: bench [--threads N] [--models DIR] [--quick]\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
        }
    }
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    double bw = read_bandwidth();
    fprintf(stderr, "read bandwidth: %.2f GB/s (%d threads)\n", bw / 1e9, threads);

    struct dirent **ents;
    int ne = scandir(dir, &ents, NULL, alphasort);
    if (ne < 0) { fprintf(stderr, "bench: %s: cannot list model directory\n", dir); return 1; }
    printf("\nsmallkv CPU bench: %d threads, fp16 KV cache, read bandwidth %.2f GB/s\n\n", threads, bw / 1e9);
    printf("| model | weights MB | prefill 512 tok/s | prefill GFLOP/s | decode@512 tok/s | MB/tok@512 | bound@512 tok/s | %% of bound | decode@2048 tok/s | MB/tok@2048 | bound@2048 tok/s | %% of bound |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
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
        int steps = big ? 8 : (quick ? 8 : 24);
        double kv_tok = (double)skv_model_kv_bytes_per_token(m, 2);
        double d512 = decode_speed(s, steps);
        double b512 = wb + kv_tok * 512;
        /* synthetic 2048-token cache */
        for (int l = 0; l < m->cfg.n_layer; l++) {
            size_t n = (size_t)m->cfg.n_kv_head * S * m->cfg.head_dim * 2;
            memset(s->k[l], 0, n);
            memset(s->v[l], 0, n);
        }
        s->n_past = 2048 - 1;
        double d2048 = decode_speed(s, steps);
        double b2048 = wb + kv_tok * 2048;
        fprintf(stderr, "%s: decode %.2f tok/s @512, %.2f tok/s @2048\n", nm, d512, d2048);
        printf("| %s | %.0f | %.1f | %.1f | %.2f | %.1f | %.2f | %.0f%% | %.2f | %.1f | %.2f | %.0f%% |\n", nm, wb / 1e6,
               pre_tps, gflops, d512, b512 / 1e6, bw / b512, 100.0 * d512 / (bw / b512), d2048, b2048 / 1e6,
               bw / b2048, 100.0 * d2048 / (bw / b2048));
        fflush(stdout);
        free(toks);
        skv_state_free(s);
        skv_model_free(m);
    }
    for (int e = 0; e < ne; e++) free(ents[e]);
    free(ents);
    return rc;
}
