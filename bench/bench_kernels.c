/* bench_kernels.c: speed of the CPU kernels against the machine's limits.
 *   - streaming-read bandwidth (read_probe.h, the probe `make bench` uses): the decode ceiling;
 *   - decode GEMV (T = 1) per type and shape, cycling through enough copies of the matrix
 *     to defeat the caches: GB/s of weight bytes read, and % of the streaming bandwidth, on
 *     the stored rows, then (where the type has them) the pair-packed copies ("packed",
 *     vecdot_pack.c) and the 8-row groups ("x8", vecdot_x8.c: what a model load uses); and
 *     the batched-decode GEMV at T = 4 where T = 4 is below the type's GEMM crossover;
 *   - prefill GEMM (T = 512): effective GFLOP/s = 2*rows*cols*T / time;
 *   - decode attention at S = 2048/4096 (fp16 cache);
 *   - an SLM's decode attention with its last row (Qwen2.5-0.5B shapes, S = 2048 / 8192) over
 *     fp16 and quantised caches (q8, k8v4, q4).
 * Built by `make` (build/bin/bench_kernels).
 * Run: OMP_NUM_THREADS=2 build/bin/bench_kernels
 *      OMP_NUM_THREADS=1 build/bin/bench_kernels --gemv [reps]   decode GEMV only (T = 1, the
 *      model shapes, no GEMM/attention), best of `reps` timed passes (default 5): the
 *      single-thread kernel throughput to compare two builds side by side;
 *      `--gemv reps hot`: one copy of each matrix (cache-resident), the instruction-bound rate.
 *      `--attention`: the attention rows only.
 *      `--prefill-attention`: a prefill block's attention (256 rows at the end of S = 512 ..
 *      16384 keys, Qwen2.5-1.5B's and 0.5B's head shapes), ms and GFLOP/s.
 *      `--multirow`: the 16-row multi-row kernels alone (gemm_x8.h: a 1536 x 1536 matrix in
 *      8-row groups, T = 256 activation rows), VNNI then AMX where the CPU has them,
 *      alternating, best of 12 rounds of 5 calls: ms and GOP/s (2 x rows x cols x T).
 *      SKV_CPU=avx2 pins the AVX2 kernels where the CPU would use AVX-512 VNNI ones.
 *      `--rows`: the 8-row group kernels alone at T = 1 / 2 / 4 / 8 activation rows (verify
 *      passes, batched decode), streamed and from one copy, both builds the CPU runs. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/gemm_x8.h"
#include "kernels/cpu/vecdot.h"
#include "runtime/model/model.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kvquant.h"
#include "common/util.h"
#include "read_probe.h"

static uint64_t rng = 1234567;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

static skv_weight make_weight(int type, int64_t rows, int64_t cols) {
    skv_weight W = { .type = type, .rows = rows, .cols = cols };
    size_t rb = skv_row_bytes(type, cols);
    uint8_t *data = skv_aligned_alloc(rb * rows, "bench weight");
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = 0.1f * frand();
        skv_quant_row(type, tmp, data + r * rb, cols);
    }
    free(tmp);
    W.data = data;
    return W;
}

static int gemv_only = 0, gemv_reps = 1, gemv_hot = 0;

/* seconds per skv_matmul at T rows, cycling through the copies: best of gemv_reps passes of
 * iters calls */
static double gemv_time(const skv_weight *Ws, int copies, int iters, const float *x, float *y, int T) {
    double best = 1e30;
    for (int rep = 0; rep < gemv_reps; rep++) {
        const double t0 = skv_now();
        for (int it = 0; it < iters; it++) skv_matmul(y, x, &Ws[it % copies], T);
        const double d = (skv_now() - t0) / iters;
        if (d < best) best = d;
    }
    return best;
}

static void bench_shape(int type, int64_t rows, int64_t cols, double bw, int do_gemm) {
    if (cols % skv_type_block(type) != 0) {   /* a shape the model loaders reject too */
        fprintf(stderr, "bench_kernels: %s: %lld columns are not a multiple of its block of %d\n", skv_type_name(type),
                (long long)cols, skv_type_block(type));
        return;
    }
    size_t bytes = skv_row_bytes(type, cols) * rows;
    int copies = (int)((size_t)160 << 20) / (int)bytes + 1;   /* > 160 MiB in total */
    if (copies > 64) copies = 64;
    if (gemv_hot) copies = 1;   /* --gemv N hot: one copy, cache-resident: the kernel's instruction rate */
    skv_weight W0 = make_weight(type, rows, cols);
    skv_weight *Ws = malloc(sizeof(skv_weight) * copies);
    for (int c = 0; c < copies; c++) {
        Ws[c] = W0;
        void *d = skv_aligned_alloc(bytes, "bench copy");
        memcpy(d, W0.data, bytes);
        Ws[c].data = d;
    }
    const int T = 512;
    float *x = malloc(sizeof(float) * T * cols), *y = malloc(sizeof(float) * T * rows);
    for (int64_t i = 0; i < T * cols; i++) x[i] = frand();
    /* decode */
    int iters = copies * 4;
    if (iters < 64) iters = 64;
    for (int c = 0; c < copies; c++) skv_matmul(y, x, &Ws[c], 1);
    double t0;
    const double dt = gemv_time(Ws, copies, iters, x, y, 1);
    double gbs = bytes / dt / 1e9;
    printf("%-5s %5lld x %-5lld  %6.2f MB  GEMV %7.1f us  %6.1f GB/s (%3.0f%% of read bw)", skv_type_name(type),
           (long long)rows, (long long)cols, bytes / 1e6, dt * 1e6, gbs, 100 * gbs / bw);
    if (skv_pack_supported(type, cols)) {   /* the same matrices with their pair-packed decode copies */
        for (int c = 0; c < copies; c++) {
            void *pk = skv_aligned_alloc(bytes, "bench pack");
            skv_pack_rows(type, Ws[c].data, pk, rows, cols);
            Ws[c].pack = pk;
        }
        const double dp = gemv_time(Ws, copies, iters, x, y, 1);
        printf("  packed %6.1f GB/s (%3.0f%%)", bytes / dp / 1e9, 100 * bytes / dp / 1e9 / bw);
        for (int c = 0; c < copies; c++) { free((void *)Ws[c].pack); Ws[c].pack = NULL; }
    }
    if (skv_x8_supported(type, rows, cols)) {   /* the same matrices regrouped into 8-row groups (vecdot_x8.c) */
        const size_t gb = 8 * skv_row_bytes(type, cols);
        uint8_t *tmp = malloc(gb);
        for (int c = 0; c < copies; c++) {
            uint8_t *d = (uint8_t *)(uintptr_t)Ws[c].data;
            for (int64_t g = 0; g < rows / 8; g++) {
                memcpy(tmp, d + g * gb, gb);
                skv_x8_pack_group(type, tmp, d + g * gb, cols);
            }
            Ws[c].x8 = 1;
        }
        free(tmp);
        const double dx = gemv_time(Ws, copies, iters, x, y, 1);
        printf("  x8 %6.1f GB/s (%3.0f%%)", bytes / dx / 1e9, 100 * bytes / dx / 1e9 / bw);
        if (!gemv_only && 4 < skv_matmul_gemm_min_t(type)) {
            t0 = skv_now();
            for (int it = 0; it < iters; it++) skv_matmul(y, x, &Ws[it % copies], 4);
            const double d4 = (skv_now() - t0) / iters;
            printf("  x8 T=4 %7.1f us", d4 * 1e6);
        }
        uint8_t *stored = malloc(bytes);
        for (int c = 0; c < copies; c++) {   /* back to the stored rows for what follows */
            skv_weight_stored_rows(&Ws[c], 0, rows, stored);
            memcpy((uint8_t *)(uintptr_t)Ws[c].data, stored, bytes);
            Ws[c].x8 = 0;
        }
        free(stored);
    }
    if (!gemv_only && 4 < skv_matmul_gemm_min_t(type)) {   /* batched decode: T = 4 activation rows per weight pass */
        t0 = skv_now();
        for (int it = 0; it < iters; it++) skv_matmul(y, x, &Ws[it % copies], 4);
        double d4 = (skv_now() - t0) / iters;
        printf("  T=4 %7.1f us (%.2fx T=1 time, %.2fx tokens/s)", d4 * 1e6, d4 / dt, 4 * dt / d4);
    }
    if (do_gemm && !gemv_only) {
        skv_matmul(y, x, &Ws[0], T);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            t0 = skv_now();
            skv_matmul(y, x, &Ws[rep % copies], T);
            double d = skv_now() - t0;
            if (d < best) best = d;
        }
        printf("  GEMM T=%d %7.2f ms %6.1f GFLOP/s", T, best * 1e3, 2.0 * rows * cols * T / best / 1e9);
    }
    printf("\n");
    for (int c = 0; c < copies; c++) free((void *)Ws[c].data);
    free(Ws); free((void *)W0.data); free(x); free(y);
}

static void bench_attention(int S, int H, int Hkv, int d) {
    skv_attn_args a = { .T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = S - 1, .S_cap = S, .kv_f16 = true };
    size_t n = (size_t)Hkv * S * d;
    uint16_t *k = malloc(n * 2), *v = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { k[i] = skv_f32_to_f16(frand()); v[i] = skv_f32_to_f16(frand()); }
    float *q = malloc(sizeof(float) * H * d), *o = malloc(sizeof(float) * H * d);
    for (int i = 0; i < H * d; i++) q[i] = frand();
    skv_attention(o, q, k, v, &a);
    int iters = 200;
    double t0 = skv_now();
    for (int i = 0; i < iters; i++) skv_attention(o, q, k, v, &a);
    double dt = (skv_now() - t0) / iters;
    printf("attention decode fp16 S=%d H=%d Hkv=%d d=%d: %7.1f us (%.1f GB/s of KV)\n", S, H, Hkv, d, dt * 1e6,
           2.0 * n * 2 / dt / 1e9);
    free(k); free(v); free(q); free(o);
}

/* An SLM's decode attention (its last row written, as SmallKV's guide asks) over an fp16
 * cache and over quantised rows (kernels/cpu/kvquant.h): time and bytes of KV read. */
static void bench_attention_slm(int S, int H, int Hkv, int d, int kb, int vb) {
    skv_attn_args a = {.T = 1, .H = H, .Hkv = Hkv, .d = d, .pos0 = S - 1, .S_cap = S, .kv_f16 = true,
                       .k_bits = kb, .v_bits = vb};
    const size_t rows = (size_t)Hkv * S, rk = skv_attn_row_bytes(&a, false), rv = skv_attn_row_bytes(&a, true);
    uint8_t *k = malloc(rows * rk), *v = malloc(rows * rv);
    float *x = malloc(sizeof(float) * d);
    for (size_t r = 0; r < rows; r++)
        for (int kv = 0; kv < 2; kv++) {
            for (int i = 0; i < d; i++) x[i] = frand();
            const int bits = kv ? vb : kb;
            uint8_t *dst = (kv ? v : k) + r * (kv ? rv : rk);
            skv_kv_store_any(dst, x, d, bits, true);
        }
    float *q = malloc(sizeof(float) * H * d), *o = malloc(sizeof(float) * H * d), *lr = calloc((size_t)H * S, sizeof(float));
    for (int i = 0; i < H * d; i++) q[i] = frand();
    a.lastrow = lr;
    skv_attention(o, q, k, v, &a);
    int iters = 100;
    double t0 = skv_now();
    for (int i = 0; i < iters; i++) skv_attention(o, q, k, v, &a);
    double dt = (skv_now() - t0) / iters;
    char name[16];
    if (!kb) snprintf(name, sizeof name, "f16");
    else if (kb == vb) snprintf(name, sizeof name, "q%d", kb);
    else snprintf(name, sizeof name, "k%dv%d", kb, vb);
    printf("SLM attention decode %-5s S=%d H=%d Hkv=%d d=%d: %7.1f us, %6.1f KiB of KV (%.2f x fp16)\n", name, S, H, Hkv,
           d, dt * 1e6, rows * (rk + rv) / 1024.0, (double)(rk + rv) / (4.0 * d));
    free(k); free(v); free(x); free(q); free(o); free(lr);
}

/* A prefill block's attention: T query rows at positions S - T .. S - 1 over an fp16 cache
 * of S keys (the last block of an S-token prompt): time and GFLOP/s (4 d flops per query
 * head and key: the dot and the weighted sum). */
static void bench_attention_prefill(int S, int T, int H, int Hkv, int d) {
    skv_attn_args a = {.T = T, .H = H, .Hkv = Hkv, .d = d, .pos0 = S - T, .S_cap = S, .kv_f16 = true};
    size_t n = (size_t)Hkv * S * d;
    uint16_t *k = malloc(n * 2), *v = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { k[i] = skv_f32_to_f16(frand()); v[i] = skv_f32_to_f16(frand()); }
    float *q = malloc(sizeof(float) * T * H * d), *o = malloc(sizeof(float) * T * H * d);
    for (size_t i = 0; i < (size_t)T * H * d; i++) q[i] = frand();
    skv_attention(o, q, k, v, &a);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = skv_now();
        skv_attention(o, q, k, v, &a);
        const double dt = skv_now() - t0;
        best = dt < best ? dt : best;
    }
    const double flops = 4.0 * d * H * ((double)T * (S - T) + (double)T * (T + 1) / 2);
    printf("attention prefill fp16 S=%d T=%d H=%d Hkv=%d d=%d: %8.2f ms %6.1f GFLOP/s\n", S, T, H, Hkv, d, best * 1e3,
           flops / best / 1e9);
    free(k); free(v); free(q); free(o);
}

/* --multirow: the 16-row kernels over a rows x cols matrix in 8-row groups, T rows */
static void bench_multirow_kernels(int type) {
    const int64_t rows = 1536, cols = 1536;
    const int T = 256;
    skv_weight W = make_weight(type, rows, cols);
    const size_t rb = skv_row_bytes(type, cols);
    uint8_t *x8 = skv_aligned_alloc(rb * rows, "bench x8");
    for (int64_t g = 0; g < rows / 8; g++) skv_x8_pack_group(type, W.data + g * 8 * rb, x8 + g * 8 * rb, cols);
    const size_t ab = skv_vec_act_bytes(type, cols);
    uint8_t *act = skv_aligned_alloc(ab * T, "bench act");
    float *xf = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows * T);
    for (int t = 0; t < T; t++) {
        for (int64_t k = 0; k < cols; k++) xf[k] = frand();
        skv_vec_quant_act(type, xf, act + t * ab, cols);
    }
    const skv_gemm16_fn f[2] = {skv_cpu_vnni() ? skv_gemm16_vnni_for(type) : NULL,
                                skv_cpu_amx() ? skv_gemm16_amx_for(type) : NULL};
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 12; round++)
        for (int k = 0; k < 2; k++) {
            if (!f[k]) continue;
            const double t0 = skv_now();
            for (int it = 0; it < 5; it++)
                for (int64_t r = 0; r < rows; r += 16) f[k](cols, x8 + (r / 8) * rb, 8 * rb, act, ab, T, y + r, rows);
            const double dt = (skv_now() - t0) / 5;
            if (dt < best[k]) best[k] = dt;
        }
    for (int k = 0; k < 2; k++)
        if (f[k])
            printf("multirow %-5s %" PRId64 " x %" PRId64 " T=%d %s: %7.2f ms %7.1f GOP/s\n", skv_type_name(type), rows, cols, T,
                   k ? "AMX " : "VNNI", best[k] * 1e3, 2.0 * rows * cols * T / best[k] / 1e9);
        else
            printf("multirow %-5s %s: not on this CPU (or pinned off by SKV_CPU)\n", skv_type_name(type), k ? "AMX " : "VNNI");
    free(xf); free(y); free(act); free(x8); free((void *)W.data);
}

/* --rows: the 8-row group kernels alone at T = 1, 2, 4 and 8 activation rows (8 = two calls
 * of 4, as skv_matmul runs a verify pass or a batch), one thread, over enough copies of the
 * matrix to stream it from memory, then over one copy (2-11 MB: from the last-level cache
 * at best); both kernel builds this CPU runs (AVX2, AVX-512 VNNI), alternating, best of 5
 * rounds: us per pass and the time against T = 1. */
static void bench_rows(int type, int64_t rows, int64_t cols) {
    const size_t rb = skv_row_bytes(type, cols), bytes = rb * rows;
    const int copies = (int)(((size_t)160 << 20) / bytes) + 1;
    skv_weight W = make_weight(type, rows, cols);
    uint8_t **x8 = malloc(sizeof(uint8_t *) * copies);
    for (int c = 0; c < copies; c++) {
        x8[c] = skv_aligned_alloc(bytes, "bench x8");
        for (int64_t g = 0; g < rows / 8; g++) skv_x8_pack_group(type, W.data + g * 8 * rb, x8[c] + g * 8 * rb, cols);
    }
    const size_t ab = skv_vec_act_bytes(type, cols);
    uint8_t *act = skv_aligned_alloc(ab * 8, "bench act");
    float *xf = malloc(sizeof(float) * cols), out[8 * SKV_DOTN_MAX];
    for (int t = 0; t < 8; t++) {
        for (int64_t k = 0; k < cols; k++) xf[k] = frand();
        skv_vec_quant_act(type, xf, act + t * ab, cols);
    }
    const char *names[2] = {"AVX2", "VNNI"};
    const skv_vec_dot8n_fn f[2] = {skv_vec_dot8n_avx2_for(type), skv_cpu_vnni() ? skv_vec_dot8n_vnni_for(type) : NULL};
    const int Ts[4] = {1, 2, 4, 8};
    for (int hot = 0; hot < 2; hot++) {
        double best[2][4];
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 4; i++) best[k][i] = 1e30;
        const int ncopy = hot ? 1 : copies, passes = hot ? 40 : copies;
        for (int round = 0; round < 5; round++)
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < 2; k++) {
                    if (!f[k]) continue;
                    const double t0 = skv_now();
                    for (int p = 0; p < passes; p++)
                        for (int64_t g = 0; g < rows / 8; g++)
                            for (int t0r = 0; t0r < Ts[i]; t0r += SKV_DOTN_MAX) {
                                const int nt = Ts[i] - t0r < SKV_DOTN_MAX ? Ts[i] - t0r : SKV_DOTN_MAX;
                                f[k](cols, x8[p % ncopy] + g * 8 * rb, act + t0r * ab, ab, nt, out);
                            }
                    const double dt = (skv_now() - t0) / passes;
                    if (dt < best[k][i]) best[k][i] = dt;
                }
        for (int k = 0; k < 2; k++) {
            if (!f[k]) continue;
            printf("rows %-5s %5" PRId64 " x %-5" PRId64 " %-6s %-4s", skv_type_name(type), rows, cols, hot ? "1 copy" : "stream",
                   names[k]);
            for (int i = 0; i < 4; i++) printf("  T=%d %8.1f us (%4.2fx)", Ts[i], best[k][i] * 1e6, best[k][i] / best[k][0]);
            printf("\n");
        }
    }
    for (int c = 0; c < copies; c++) free(x8[c]);
    free(x8); free(act); free(xf); free((void *)W.data);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--gemv") == 0) {
        gemv_only = 1;
        gemv_reps = argc > 2 ? atoi(argv[2]) : 5;
        if (gemv_reps < 1) gemv_reps = 1;
        gemv_hot = argc > 3 && strcmp(argv[3], "hot") == 0;
    }
    const bool attention_only = argc > 1 && strcmp(argv[1], "--attention") == 0;
    if (argc > 1 && strcmp(argv[1], "--multirow") == 0) {
        const int types[] = {SKV_Q4_K, SKV_Q6_K, SKV_Q5_0, SKV_Q8_0};
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) bench_multirow_kernels(types[i]);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--rows") == 0) {   /* Qwen2.5-1.5B's FFN shapes, then 0.5B's */
        bench_rows(SKV_Q4_K, 8960, 1536);
        bench_rows(SKV_Q6_K, 1536, 8960);
        bench_rows(SKV_Q5_0, 4864, 896);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--prefill-attention") == 0) {   /* Qwen2.5-1.5B's and 0.5B's shapes */
        for (int S = 512; S <= 16384; S *= 2) bench_attention_prefill(S, 256, 12, 2, 128);
        bench_attention_prefill(8192, 256, 14, 2, 64);
        return 0;
    }
    printf("threads: %d\n", omp_get_max_threads());
    if (attention_only) goto attention;
    double bw = skv_read_probe(5) / 1e9;
    printf("streaming read bandwidth: %.1f GB/s\n", bw);
    bench_shape(SKV_Q5_0, 4864, 896, bw, 1);     /* qwen2.5-0.5b ffn gate/up */
    bench_shape(SKV_Q6_K, 896, 4864, bw, 1);     /* qwen2.5-0.5b ffn down */
    bench_shape(SKV_Q8_0, 4864, 896, bw, 1);
    bench_shape(SKV_Q4_K, 8960, 1536, bw, 0);    /* qwen2.5-1.5b ffn gate/up */
    bench_shape(SKV_Q6_K, 1536, 8960, bw, 0);
    bench_shape(SKV_Q4_1, 1536, 576, bw, 1);     /* SmolLM2 ffn gate/up */
    bench_shape(SKV_Q4_1, 576, 1536, bw, 1);     /* SmolLM2 ffn down */
    bench_shape(SKV_Q8_0, 49152, 576, bw, 0);    /* SmolLM2 LM head */
    bench_shape(SKV_F32, 1536, 576, bw, 1);
    bench_shape(SKV_Q5_K, 8960, 1536, bw, 0);    /* a Q5_K_M file's matrices: no x8 groups, the stored rows */
    bench_shape(SKV_F16, 4864, 896, bw, 0);      /* qwen2.5-0.5b ffn gate/up from HF safetensors */
    bench_shape(SKV_BF16, 4864, 896, bw, 0);
    if (gemv_only) return 0;
attention:
    bench_attention(2048, 14, 2, 64);
    bench_attention(4096, 14, 2, 64);
    bench_attention(4096, 12, 2, 128);
    for (int S = 2048; S <= 8192; S *= 4) {   /* Qwen2.5-0.5B's shapes, as SmallKV's SLM */
        bench_attention_slm(S, 14, 2, 64, 0, 0);
        bench_attention_slm(S, 14, 2, 64, 8, 8);
        bench_attention_slm(S, 14, 2, 64, 8, 4);
        bench_attention_slm(S, 14, 2, 64, 4, 4);
    }
    return 0;
}
