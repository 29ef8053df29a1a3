/* test_backend_ops.c: one table of kernel ops, each run on every backend against one CPU
 * reference, in the manner of llama.cpp's test-backend-ops.
 *
 * Each row of `ops` below is an op with its shapes and, per backend, its tolerance; main()
 * makes one cmocka case per (row, backend), named like "matmul Q4_K 67x768 T=37 [cpu]", so
 * the summary counts them. Backends:
 *   cpu   the fast paths (skv_matmul, skv_attention and skv_attention_team, skv_compensate,
 *         skv_rmsnorm / rope / swiglu / softmax, skv_topk, skv_kv_store)
 *   cuda  the launchers of kernels/cuda/backend.h on device buffers; compiled only with
 *         make CUDA=1 (SKV_CUDA). Without it, or with no usable device, each cuda case says
 *         why and skips (cmocka skip()), never passes.
 * References: skv_matmul_ref, skv_attention_ref, skv_compensate_ref; the ops without a
 * scalar reference get a plain loop here (marked REFERENCE), in double where it matters.
 *
 * Check: every output element must satisfy |got - ref| <= abs + rel * scale, with scale =
 * |ref|, except matmul, where scale = sum_k |x_k w_k| of that element (the size of its
 * rounding, which |y| is not when the products cancel). A failure prints, per output, the
 * max abs and rel error and the worst element. SKV_OPS_VERBOSE=1 prints them for passing
 * cases too (to measure a backend's errors). Inputs: a fixed-seed LCG, reseeded per row, so
 * each case gives the same numbers alone or in the whole run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/compensate.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/topk.h"
#include "kernels/cpu/vecdot.h"
#ifdef SKV_CUDA
#include "kernels/cuda/backend.h"
#endif

enum { BE_CPU, BE_CUDA, NB };
static const char *const be_name[NB] = {"cpu", "cuda"};
typedef enum { OP_MATMUL, OP_ATTN, OP_COMP, OP_RMSNORM, OP_ROPE, OP_SWIGLU, OP_SOFTMAX, OP_TOPK, OP_KV } op_kind;
typedef struct { double rel, abs; } tol;

typedef struct {
    op_kind op;
    union {
        struct { int type, rows, cols, T, x8; } mm;                  /* y (T, rows) = x (T, cols) W^T */
        struct { int T, H, Hkv, d, pos0, S_cap, f16, scores; } at;   /* q (T, H, d), cache (Hkv, S_cap, d) */
        struct { int g, d, n_hot, n_marg, f16, combine, pm, mult; } cp;  /* q (g, d), hot (n_hot, d) */
        struct { int T, n, heads, mode; } el;   /* rmsnorm/softmax (T, n); rope (T, heads, n); swiglu (n) */
        struct { int H, n, k, levels; } tk;     /* score (H, n); levels > 0: values on a grid (ties) */
        struct { int T, Hkv, d, S_cap, pos0, f16; } kv;   /* src (T, Hkv, d) -> cache rows pos0.. */
    };
    tol tol[NB];
} op_row;

/* ---- tolerances (rel, abs) ----
 * CPU: measured with SKV_OPS_VERBOSE=1 (AVX-512 VNNI, and SKV_CPU=avx2: the same maxima),
 * then 3x to 10x margin (the inputs are fixed, so only another CPU or build moves them):
 *   MM_F   float products (F32/F16/BF16 weights, or the prefill GEMM on dequantised tiles):
 *          only the summation order differs from skv_matmul_ref (<= 9e-8 of S)
 *   MM_Q8  the decode GEMV (T < skv_matmul_gemm_min_t(type), or any T on 8-row groups in the
 *          default int8 gemm mode) quantises the activations to
 *          Q8_0 / Q8_K for its integer dots: an input error, not rounding (<= 7.3e-4 of S)
 *   ATTN   polynomial exp (~2e-7 rel), another summation order (<= 5.4e-7 abs on out,
 *          4e-7 rel on colsum); COMP the same (<= 1.2e-7 abs)
 *   OPS    float against the double loops (<= 2.1e-7 rel); ROPE the same, but a rotation
 *          cancels, so abs (<= 4.8e-7 for |x| <= 3)
 * CUDA: not measured (written without a GPU): tests/test_cuda.c's bounds against the CPU
 * kernels, plus the CPU's own distance to the double loops for the elementwise ops:
 *   CU_GEMV fp32 activations, weights dequantised in registers: 3e-5 S + 1e-6
 *   CU_GEMM T >= skv_cuda_gemm_min_t() = 8: fp16 weights and activations, fp32 sums: 2e-3 S
 *   CU_ATTN out 2e-5 abs, scores 1e-5 abs + 1e-4 rel; CU_COMP 2e-5 abs; CU_OPS 2e-6 rel + 1e-6 */
#define MM_F    {1e-6, 1e-6}
#define MM_Q8   {2e-3, 1e-6}
#define ATTN    {2e-6, 2e-6}
#define COMP    {0.0, 1e-6}
#define OPS     {1e-6, 1e-7}
#define ROPE    {1e-6, 2e-6}
#define EXACT   {0.0, 0.0}
#define CU_GEMV {3e-5, 1e-6}
#define CU_GEMM {2e-3, 1e-5}
#define CU_ATTN {1e-4, 2e-5}
#define CU_COMP {0.0, 2e-5}
#define CU_OPS  {3e-6, 1e-6}
#define CU_ROPE {3e-6, 2e-6}

#define MM(ty, T, cpu, cuda) {OP_MATMUL, .mm = {ty, 67, 768, T, 0}, {cpu, cuda}}
#define MMX8(ty, T, cpu, cuda) {OP_MATMUL, .mm = {ty, 72, 768, T, 1}, {cpu, cuda}}
#define ATT(T, pos0, S_cap, f16, sc) {OP_ATTN, .at = {T, 6, 2, 64, pos0, S_cap, f16, sc}, {ATTN, CU_ATTN}}
#define CMP(f16, comb, nm, pm, mult) {OP_COMP, .cp = {3, 64, 300, nm, f16, comb, pm, mult}, {COMP, CU_COMP}}

/* Matmul: the CPU tolerance names the path T takes (GEMM from skv_matmul_gemm_min_t: F32/F16
 * 4, BF16 2, Q8_0 12, Q5_0/Q5_1 16, Q4_0/Q4_1 24, Q5_K 32, Q4_K/Q6_K 64); cols = 768 is 3
 * super-blocks (an odd count for the 2-blocks-a-step kernels), 67 rows leave a row tail. */
static const op_row ops[] = {
    MM(SKV_F32, 1, MM_F, CU_GEMV),   MM(SKV_F32, 8, MM_F, CU_GEMM),    MM(SKV_F32, 37, MM_F, CU_GEMM),
    MM(SKV_F16, 1, MM_F, CU_GEMV),   MM(SKV_F16, 8, MM_F, CU_GEMM),    MM(SKV_F16, 37, MM_F, CU_GEMM),
    MM(SKV_BF16, 1, MM_F, CU_GEMV),  MM(SKV_BF16, 8, MM_F, CU_GEMM),   MM(SKV_BF16, 37, MM_F, CU_GEMM),
    /* quantised: T = 1 the 4-row GEMV, T = 8 the multi-activation GEMV, T = 37 GEMM ... */
    MM(SKV_Q4_0, 1, MM_Q8, CU_GEMV), MM(SKV_Q4_0, 8, MM_Q8, CU_GEMM),  MM(SKV_Q4_0, 37, MM_F, CU_GEMM),
    MM(SKV_Q4_1, 1, MM_Q8, CU_GEMV), MM(SKV_Q4_1, 8, MM_Q8, CU_GEMM),  MM(SKV_Q4_1, 37, MM_F, CU_GEMM),
    MM(SKV_Q5_0, 1, MM_Q8, CU_GEMV), MM(SKV_Q5_0, 8, MM_Q8, CU_GEMM),  MM(SKV_Q5_0, 37, MM_F, CU_GEMM),
    MM(SKV_Q5_1, 1, MM_Q8, CU_GEMV), MM(SKV_Q5_1, 8, MM_Q8, CU_GEMM),  MM(SKV_Q5_1, 37, MM_F, CU_GEMM),
    MM(SKV_Q8_0, 1, MM_Q8, CU_GEMV), MM(SKV_Q8_0, 8, MM_Q8, CU_GEMM),  MM(SKV_Q8_0, 37, MM_F, CU_GEMM),
    MM(SKV_Q5_K, 1, MM_Q8, CU_GEMV), MM(SKV_Q5_K, 8, MM_Q8, CU_GEMM),  MM(SKV_Q5_K, 37, MM_F, CU_GEMM),
    /* ... but Q4_K / Q6_K stay on the GEMV up to T = 63 */
    MM(SKV_Q4_K, 1, MM_Q8, CU_GEMV), MM(SKV_Q4_K, 8, MM_Q8, CU_GEMM),  MM(SKV_Q4_K, 37, MM_Q8, CU_GEMM),
    MM(SKV_Q4_K, 64, MM_F, CU_GEMM), MM(SKV_Q6_K, 64, MM_F, CU_GEMM),
    MM(SKV_Q6_K, 1, MM_Q8, CU_GEMV), MM(SKV_Q6_K, 8, MM_Q8, CU_GEMM),  MM(SKV_Q6_K, 37, MM_Q8, CU_GEMM),
    /* the 8-row interleaved layout (vecdot_x8.c; CPU only: the device gets stored rows, as
     * runtime/backend/forward_cuda.c uploads them, so its cuda case is the stored product) */
    MMX8(SKV_Q4_0, 1, MM_Q8, CU_GEMV), MMX8(SKV_Q4_1, 1, MM_Q8, CU_GEMV), MMX8(SKV_Q5_0, 1, MM_Q8, CU_GEMV),
    MMX8(SKV_Q5_1, 1, MM_Q8, CU_GEMV), MMX8(SKV_Q8_0, 1, MM_Q8, CU_GEMV), MMX8(SKV_Q4_K, 1, MM_Q8, CU_GEMV),
    MMX8(SKV_Q6_K, 1, MM_Q8, CU_GEMV), MMX8(SKV_Q8_0, 8, MM_Q8, CU_GEMM), MMX8(SKV_Q4_K, 8, MM_Q8, CU_GEMM),
    MMX8(SKV_Q4_K, 64, MM_Q8, CU_GEMM),   /* int8 at every T on the groups (the default gemm mode) */
    /* attention, GQA 6/2, d = 64: prefill blocks and decode rows, with and without scores */
    ATT(37, 5, 48, 0, 1), ATT(37, 5, 48, 1, 1), ATT(37, 0, 37, 1, 0),
    ATT(1, 300, 310, 0, 1), ATT(1, 300, 310, 1, 1), ATT(1, 1000, 1001, 1, 0),
    /* compensated decode attention of one group (g = 3, d = 64, 300 hot slots) */
    CMP(0, SKV_COMBINE_SUM, 37, 1, 0), CMP(1, SKV_COMBINE_SUM, 37, 1, 1), CMP(0, SKV_COMBINE_MASS, 37, 1, 0),
    CMP(1, SKV_COMBINE_MASS, 37, 1, 1), CMP(0, SKV_COMBINE_RENORM, 37, 1, 1), CMP(1, SKV_COMBINE_RENORM, 37, 1, 0),
    CMP(0, SKV_COMBINE_RENORM, 37, 0, 0), CMP(1, SKV_COMBINE_SUM, 0, 0, 0),
    /* elementwise */
    {OP_RMSNORM, .el = {5, 576}, {OPS, CU_OPS}},       {OP_RMSNORM, .el = {3, 37}, {OPS, CU_OPS}},
    {OP_ROPE, .el = {5, 64, 9, SKV_ROPE_ADJACENT}, {ROPE, CU_ROPE}},
    {OP_ROPE, .el = {5, 64, 9, SKV_ROPE_HALVES}, {ROPE, CU_ROPE}},
    {OP_ROPE, .el = {2, 128, 3, SKV_ROPE_HALVES}, {ROPE, CU_ROPE}},
    {OP_SWIGLU, .el = {1, 4608}, {OPS, CU_OPS}},       {OP_SOFTMAX, .el = {4, 1000}, {OPS, CU_OPS}},
    {OP_SOFTMAX, .el = {1, 7}, {OPS, CU_OPS}},
    /* top-k: the same set of positions, exactly */
    {OP_TOPK, .tk = {4, 5000, 100, 0}, {EXACT, EXACT}}, {OP_TOPK, .tk = {3, 4096, 512, 8}, {EXACT, EXACT}},
    {OP_TOPK, .tk = {2, 50, 64, 0}, {EXACT, EXACT}},
    /* KV rows into a cache, bit for bit */
    {OP_KV, .kv = {7, 2, 64, 20, 9, 0}, {EXACT, EXACT}}, {OP_KV, .kv = {7, 2, 64, 20, 9, 1}, {EXACT, EXACT}},
};
#define NOPS (int)(sizeof ops / sizeof ops[0])

/* ---------------------------------------------------------------- helpers */

static uint32_t rng;
static float frand(void) { rng = rng * 1664525u + 1013904223u; return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f; }

/* every buffer of a case is kept here and freed by release(), at the end of the case or at
 * the start of the next one (after a failure's longjmp) */
static void *kept[64];
static int n_kept;
#ifdef SKV_CUDA
static void *kept_dev[16];
static int n_kept_dev;
#endif
static void *keep(void *p) {
    assert_true(p != NULL && n_kept < 64);
    return kept[n_kept++] = p;
}
static void release(void) {
    while (n_kept > 0) free(kept[--n_kept]);
#ifdef SKV_CUDA
    while (n_kept_dev > 0) skv_cuda_free(kept_dev[--n_kept_dev]);
#endif
}
static float *fbuf(size_t n) { return keep(calloc(n + 1, sizeof(float))); }
/* n floats as a cache of fp16 (rounded) or fp32 */
static void *to_cache(const float *x, size_t n, int f16) {
    void *c = keep(malloc((n + 1) * (f16 ? 2 : 4)));
    for (size_t i = 0; i < n; i++) skv_kv_store(c, f16, i, x + i, 1);
    return c;
}
static void from_cache(float *x, const void *c, size_t n, int f16) {
    for (size_t i = 0; i < n; i++) x[i] = f16 ? skv_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

static int verbose;
/* |got - ref| <= abs + rel * scale (scale NULL: |ref|) for all n; returns 1 (printing the max
 * errors and the worst element) if not */
static int check(const char *what, const float *got, const float *ref, const float *scale, size_t n, tol t) {
    double max_abs = 0, max_rel = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        const double s = scale ? scale[i] : fabs(ref[i]), e = fabs((double)got[i] - ref[i]);
        const double over = e == 0 ? 0 : e / (t.abs + t.rel * s);   /* > 1 (or NaN): out of tolerance */
        if (e > max_abs) max_abs = e;
        if (s > 0 && e / s > max_rel) max_rel = e / s;
        if (!(over <= worst)) { worst = over; wi = i; }
    }
    const int bad = !(worst <= 1.0);
    if (bad || verbose)
        print_message("    %-10s max abs err %.3g, max rel err %.3g (tol rel %.1g abs %.1g)%s [%zu]: got %.9g want %.9g\n",
                      what, max_abs, max_rel, t.rel, t.abs, bad ? " FAILED at" : ", worst", wi, got[wi], ref[wi]);
    return bad;
}

#ifdef SKV_CUDA
/* a device copy of host data (h NULL: uninitialised), and back after the queue drains */
static void *dev(const void *h, size_t bytes) {
    void *d = skv_cuda_malloc(bytes + 4, "test_backend_ops");
    if (!d || n_kept_dev == 16) fail_msg("%s", skv_last_error());
    kept_dev[n_kept_dev++] = d;
    if (h && skv_cuda_upload(d, h, bytes) != 0) fail_msg("%s", skv_last_error());
    return d;
}
static void back(void *h, const void *d, size_t bytes) {
    if (skv_cuda_sync() != 0 || skv_cuda_download(h, d, bytes) != 0) fail_msg("%s", skv_last_error());
}
#define CK(call) do { if ((call) != 0) fail_msg("%s: %s", #call, skv_last_error()); } while (0)
#endif

/* ---------------------------------------------------------------- matmul */

static int op_matmul(const op_row *r, int be) {
    const int type = r->mm.type, rows = r->mm.rows, cols = r->mm.cols, T = r->mm.T;
    const size_t rb = skv_row_bytes(type, cols);
    uint8_t *wq = keep(malloc(rb * rows)), *wx = keep(malloc(rb * rows));
    float *w = fbuf((size_t)rows * cols), *x = fbuf((size_t)T * cols);
    for (int i = 0; i < rows; i++) {   /* rows of different amplitude, as real matrices */
        const float amp = 0.05f + 0.1f * (float)(i % 7);
        for (int k = 0; k < cols; k++) w[(size_t)i * cols + k] = amp * frand();
        skv_quant_row(type, w + (size_t)i * cols, wq + i * rb, cols);
        skv_dequant_row(type, wq + i * rb, w + (size_t)i * cols, cols);   /* what the kernels see */
    }
    for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand();
    const skv_weight W = {.type = type, .rows = rows, .cols = cols, .data = wq};
    float *ref = fbuf((size_t)T * rows), *got = fbuf((size_t)T * rows), *S = fbuf((size_t)T * rows);
    skv_matmul_ref(ref, x, &W, T);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rows; i++) {
            double s = 0;
            for (int k = 0; k < cols; k++) s += fabs((double)x[(size_t)t * cols + k] * w[(size_t)i * cols + k]);
            S[(size_t)t * rows + i] = (float)s;
        }
    if (be == BE_CPU) {
        skv_weight X = W;
        if (r->mm.x8) {
            assert_true(skv_x8_supported(type, rows, cols));
            for (int g = 0; g < rows / 8; g++) skv_x8_pack_group(type, wq + g * 8 * rb, wx + g * 8 * rb, cols);
            X.data = wx;
            X.x8 = 1;
        }
        skv_matmul(got, x, &X, T);
    }
#ifdef SKV_CUDA
    if (be == BE_CUDA) {
        skv_cuda_weight dw;
        CK(skv_cuda_weight_upload(&dw, &W, 0));
        float *dx = dev(x, sizeof(float) * T * cols), *dy = dev(NULL, sizeof(float) * T * rows);
        CK(skv_cuda_matmul(dy, dx, &dw, T));
        back(got, dy, sizeof(float) * T * rows);
        skv_cuda_weight_free(&dw);
    }
#endif
    const int bad = check("y", got, ref, S, (size_t)T * rows, r->tol[be]);
    if (bad && be == BE_CPU)
        print_message("    cpu path: %s\n", T < skv_matmul_gemm_min_t(type) || r->mm.x8 ? "GEMV (Q8 activations if W is quantised)"
                                                                                       : "GEMM");
    return bad;
}

/* ---------------------------------------------------------------- attention */

static int op_attention(const op_row *r, int be) {
    skv_attn_args a = {.T = r->at.T, .H = r->at.H, .Hkv = r->at.Hkv, .d = r->at.d, .pos0 = r->at.pos0,
                       .S_cap = r->at.S_cap, .kv_f16 = r->at.f16};
    const size_t nq = (size_t)a.T * a.H * a.d, nkv = (size_t)a.Hkv * a.S_cap * a.d, ns = (size_t)a.H * a.S_cap;
    float *q = fbuf(nq), *kf = fbuf(nkv), *vf = fbuf(nkv), *ref = fbuf(nq), *got = fbuf(nq);
    for (size_t i = 0; i < nq; i++) q[i] = 2.0f * frand();
    for (size_t i = 0; i < nkv; i++) { kf[i] = 2.0f * frand(); vf[i] = frand(); }
    void *kc = to_cache(kf, nkv, a.kv_f16), *vc = to_cache(vf, nkv, a.kv_f16);
    /* colsum accumulates onto what is there; lastrow past pos0 + T must stay -7 */
    float *cs0 = fbuf(ns), *cs_ref = fbuf(ns), *cs = fbuf(ns), *lr_ref = fbuf(ns), *lr = fbuf(ns);
    for (size_t i = 0; i < ns; i++) { cs0[i] = cs_ref[i] = fabsf(frand()); lr_ref[i] = -7.0f; }
    if (r->at.scores) { a.colsum = cs_ref; a.lastrow = lr_ref; }
    skv_attention_ref(ref, q, kc, vc, &a);
    int bad = 0;
    for (int pass = 0; pass < (be == BE_CPU ? 2 : 1); pass++) {
        memcpy(cs, cs0, ns * sizeof(float));
        for (size_t i = 0; i < ns; i++) lr[i] = -7.0f;
        if (r->at.scores) { a.colsum = cs; a.lastrow = lr; }
        if (be == BE_CPU && pass == 0) skv_attention(got, q, kc, vc, &a);
        if (be == BE_CPU && pass == 1) {   /* the same in a caller's parallel region, team of 3 */
            float *ws = keep(skv_aligned_alloc(skv_attention_ws_floats(&a, 3) * sizeof(float), "test"));
            #pragma omp parallel num_threads(3)
            skv_attention_team(got, q, kc, vc, &a, ws);
        }
#ifdef SKV_CUDA
        if (be == BE_CUDA) {
            const size_t esz = a.kv_f16 ? 2 : 4;
            float *dq = dev(q, nq * 4), *dout = dev(NULL, nq * 4), *dcs = dev(cs, ns * 4), *dlr = dev(lr, ns * 4);
            void *dk = dev(kc, nkv * esz), *dv = dev(vc, nkv * esz);
            skv_attn_args b = a;
            if (r->at.scores) { b.colsum = dcs; b.lastrow = dlr; }
            CK(skv_cuda_attention(dout, dq, dk, dv, &b));
            back(got, dout, nq * 4);
            back(cs, dcs, ns * 4);
            back(lr, dlr, ns * 4);
        }
#endif
        bad += check(pass ? "team out" : "out", got, ref, NULL, nq, r->tol[be]);
        if (r->at.scores) {
            bad += check(pass ? "team colsum" : "colsum", cs, cs_ref, NULL, ns, r->tol[be]);
            bad += check(pass ? "team lastrw" : "lastrow", lr, lr_ref, NULL, ns, r->tol[be]);
        }
    }
    return bad;
}

/* ---------------------------------------------------------------- compensated attention */

static int op_compensate(const op_row *r, int be) {
    const int g = r->cp.g, d = r->cp.d, n = r->cp.n_hot, nm = r->cp.n_marg, f16 = r->cp.f16;
#ifdef SKV_CUDA
    if (be == BE_CUDA && r->cp.mult) {   /* not supported: the launcher refuses a->mult */
        print_message("skipped: skv_cuda_compensate refuses multiplicities (EMS merging runs on the CPU only)\n");
        skip();
    }
#endif
    float *kf = fbuf((size_t)n * d), *vf = fbuf((size_t)n * d), *mf = fbuf((size_t)nm * d), *q = fbuf((size_t)g * d),
          *pm = fbuf((size_t)g * nm), *w = fbuf(g), *ref = fbuf((size_t)g * d), *got = fbuf((size_t)g * d),
          *acc0 = fbuf(n), *acc_ref = fbuf(n), *acc = fbuf(n), *hp_ref = fbuf((size_t)g * n), *hp = fbuf((size_t)g * n),
          *scr = fbuf(n);
    int *mult = keep(calloc(n + 1, sizeof(int)));
    for (size_t i = 0; i < (size_t)n * d; i++) { kf[i] = 2.0f * frand(); vf[i] = frand(); }
    for (size_t i = 0; i < (size_t)nm * d; i++) mf[i] = frand();
    for (int i = 0; i < g * d; i++) q[i] = 2.0f * frand();
    for (int i = 0; i < g * nm; i++) pm[i] = fabsf(frand()) * 0.05f;   /* SLM mass, sums < 1 */
    for (int i = 0; i < g; i++) w[i] = 0.3f + 0.2f * (float)i;
    for (int i = 0; i < n; i++) { mult[i] = i % 5 == 0 ? 3 : 1; acc0[i] = acc_ref[i] = fabsf(frand()); }
    void *k = to_cache(kf, (size_t)n * d, f16), *v = to_cache(vf, (size_t)n * d, f16),
         *vm = to_cache(mf, (size_t)nm * d, f16);
    skv_comp_args a = {.g = g, .d = d, .n_hot = n, .n_marg = nm, .f16 = f16, .k = k, .v = v, .vm = vm,
                       .pm = r->cp.pm ? pm : NULL, .w = w, .mult = r->cp.mult ? mult : NULL,
                       .combine = (skv_combine)r->cp.combine, .slot_acc = acc_ref, .head_p = hp_ref, .scratch = scr};
    skv_compensate_ref(ref, q, &a);
    memcpy(acc, acc0, sizeof(float) * n);
    a.slot_acc = acc;
    a.head_p = hp;
    if (be == BE_CPU) skv_compensate(got, q, &a);
#ifdef SKV_CUDA
    if (be == BE_CUDA) {
        const size_t esz = f16 ? 2 : 4;
        skv_comp_args b = a;
        b.k = dev(k, esz * n * d); b.v = dev(v, esz * n * d); b.vm = dev(vm, esz * nm * d);
        b.pm = r->cp.pm ? dev(pm, sizeof(float) * g * nm) : NULL;
        b.w = dev(w, sizeof(float) * g);
        b.slot_acc = dev(acc, sizeof(float) * n);
        b.head_p = dev(NULL, sizeof(float) * g * n);
        b.scratch = NULL;
        float *dq = dev(q, sizeof(float) * g * d), *dout = dev(NULL, sizeof(float) * g * d);
        CK(skv_cuda_compensate(dout, dq, &b));
        back(got, dout, sizeof(float) * g * d);
        back(acc, b.slot_acc, sizeof(float) * n);
        back(hp, b.head_p, sizeof(float) * g * n);
    }
#endif
    int bad = check("out", got, ref, NULL, (size_t)g * d, r->tol[be]);
    bad += check("slot_acc", acc, acc_ref, NULL, n, r->tol[be]);
    bad += check("head_p", hp, hp_ref, NULL, (size_t)g * n, r->tol[be]);
    return bad;
}

/* ---------------------------------------------------------------- elementwise ops */

static int op_elementwise(const op_row *r, int be) {
    const int T = r->el.T, n = r->el.n, H = r->el.heads;
    const size_t N = (size_t)T * n * (r->op == OP_ROPE ? H : 1);   /* rope: x (T, H, head_dim n) */
    const int pos[8] = {0, 1, 17, 4000, 30000, 5, 6, 7};
    float *x = fbuf(2 * N), *wt = fbuf(n), *ref = fbuf(N), *got = fbuf(N);
    for (size_t i = 0; i < 2 * N; i++) x[i] = (r->op == OP_SOFTMAX ? 8.0f : 3.0f) * frand();
    for (int i = 0; i < n; i++) wt[i] = 1.0f + frand();
    /* REFERENCE: the plain formulas in double */
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        double ss = 0, mx = -INFINITY, sum = 0;
        switch (r->op) {
        case OP_RMSNORM:   /* x / sqrt(mean(x^2) + eps) * w */
            for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
            for (int i = 0; i < n; i++) ref[(size_t)t * n + i] = (float)(xr[i] / sqrt(ss / n + 1e-5) * wt[i]);
            break;
        case OP_SOFTMAX:   /* exp(x - max) / sum */
            for (int i = 0; i < n; i++) mx = fmax(mx, xr[i]);
            for (int i = 0; i < n; i++) sum += exp(xr[i] - mx);
            for (int i = 0; i < n; i++) ref[(size_t)t * n + i] = (float)(exp(xr[i] - mx) / sum);
            break;
        case OP_SWIGLU:    /* silu(gate) * up, gate = x[0..n), up = x[n..2n) */
            for (int i = 0; i < n; i++) ref[i] = (float)(xr[i] / (1.0 + exp(-(double)xr[i])) * x[n + i]);
            break;
        default:           /* rope: pair i of each head turned by pos * 10000^(-2i/n) */
            for (int h = 0; h < H; h++)
                for (int i = 0; i < n / 2; i++) {
                    const size_t o = ((size_t)t * H + h) * n;
                    const int halves = r->el.mode == SKV_ROPE_HALVES, ia = halves ? i : 2 * i,
                              ib = halves ? i + n / 2 : 2 * i + 1;
                    const double ang = pos[t] * pow(10000.0, -2.0 * i / n), xa = x[o + ia], xb = x[o + ib];
                    ref[o + ia] = (float)(xa * cos(ang) - xb * sin(ang));
                    ref[o + ib] = (float)(xa * sin(ang) + xb * cos(ang));
                }
        }
    }
    if (be == BE_CPU) {
        if (r->op == OP_RMSNORM) skv_rmsnorm(got, x, wt, T, n, 1e-5f);
        if (r->op == OP_SWIGLU) skv_swiglu(got, x, x + n, n);
        if (r->op == OP_SOFTMAX || r->op == OP_ROPE) memcpy(got, x, N * sizeof(float));   /* in place */
        if (r->op == OP_SOFTMAX)
            for (int t = 0; t < T; t++) skv_softmax(got + (size_t)t * n, n);
        if (r->op == OP_ROPE) skv_rope(got, pos, T, H, n, 10000.0f, (skv_rope_mode)r->el.mode);
    }
#ifdef SKV_CUDA
    if (be == BE_CUDA) {
        float *dx = dev(x, 2 * N * sizeof(float)), *dw = dev(wt, n * sizeof(float)), *dy = dev(NULL, N * sizeof(float));
        int *dpos = dev(pos, sizeof pos);
        if (r->op == OP_RMSNORM) CK(skv_cuda_rmsnorm(dy, dx, dw, T, n, 1e-5f));
        if (r->op == OP_SWIGLU) CK(skv_cuda_swiglu(dy, dx, dx + n, n));
        if (r->op == OP_SOFTMAX) CK(skv_cuda_softmax(dx, T, n));
        if (r->op == OP_ROPE) CK(skv_cuda_rope(dx, dpos, T, H, n, 10000.0f, (skv_rope_mode)r->el.mode));
        back(got, r->op == OP_SOFTMAX || r->op == OP_ROPE ? dx : dy, N * sizeof(float));
    }
#endif
    return check("out", got, ref, NULL, N, r->tol[be]);
}

/* ---------------------------------------------------------------- top-k */

/* Per row: the k best positions (higher score; ties: the later position) in ascending order,
 * then -1 where k > n (skv_cuda_topk's layout). */
static int op_topk(const op_row *r, int be) {
    const int H = r->tk.H, n = r->tk.n, k = r->tk.k, kk = k < n ? k : n;
    const size_t stride = (size_t)n + 3;
    float *score = fbuf(H * stride);
    int *ref = keep(calloc((size_t)H * k, sizeof(int))), *got = keep(calloc((size_t)H * k, sizeof(int))),
        *cand = keep(calloc(n, sizeof(int)));
    char *chosen = keep(calloc(n, 1));
    for (size_t i = 0; i < H * stride; i++) {
        score[i] = frand();
        if (r->tk.levels) score[i] = floorf((score[i] + 1.0f) * (float)r->tk.levels);   /* many ties */
    }
    for (int h = 0; h < H; h++) {
        const float *s = score + h * stride;
        /* REFERENCE: k rounds of "take the best one left" */
        memset(chosen, 0, n);
        for (int j = 0; j < kk; j++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!chosen[i] && (best < 0 || s[i] >= s[best])) best = i;
            if (best < 0) break;   /* kk <= n: never, but the compiler cannot see it */
            chosen[best] = 1;
        }
        for (int i = 0, j = 0; j < k; i++)
            if (i >= n || chosen[i]) ref[h * k + j++] = i < n ? i : -1;
        if (be == BE_CPU) {
            for (int i = 0; i < n; i++) cand[i] = i;
            const int m = skv_topk(s, cand, n, k);
            skv_sort_ints(cand, m);
            for (int j = 0; j < k; j++) got[h * k + j] = j < m ? cand[j] : -1;
        }
    }
#ifdef SKV_CUDA
    if (be == BE_CUDA) {
        float *ds = dev(score, sizeof(float) * H * stride);
        int *di = dev(NULL, sizeof(int) * H * k);
        CK(skv_cuda_topk(di, ds, H, n, stride, k));
        back(got, di, sizeof(int) * H * k);
    }
#endif
    for (int i = 0; i < H * k; i++)
        if (got[i] != ref[i]) {
            print_message("    idx [%d] (row %d): got %d, want %d\n", i, i / k, got[i], ref[i]);
            return 1;
        }
    return 0;
}

/* ---------------------------------------------------------------- KV row store */

static int op_kv_store(const op_row *r, int be) {
    const int T = r->kv.T, Hkv = r->kv.Hkv, d = r->kv.d, S_cap = r->kv.S_cap, pos0 = r->kv.pos0, f16 = r->kv.f16;
    const size_t nsrc = (size_t)T * Hkv * d, nc = (size_t)Hkv * S_cap * d;
    float *src = fbuf(nsrc), *fill = fbuf(nc), *ref = fbuf(nc), *got = fbuf(nc);
    for (size_t i = 0; i < nsrc; i++) src[i] = 4.0f * frand();
    for (size_t i = 0; i < nc; i++) fill[i] = 0.5f + (float)(i % 3);   /* rows not written keep these */
    void *cache = to_cache(fill, nc, f16);
    /* REFERENCE: element (t, h, i) of src -> cache (h, pos0 + t, i), rounded to fp16 (nearest even)
     * or copied */
    from_cache(ref, cache, nc, f16);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hkv; h++)
            for (int i = 0; i < d; i++) {
                const float v = src[((size_t)t * Hkv + h) * d + i];
                ref[((size_t)h * S_cap + pos0 + t) * d + i] = f16 ? skv_f16_to_f32(skv_f32_to_f16(v)) : v;
            }
    if (be == BE_CPU)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < Hkv; h++)
                skv_kv_store(cache, f16, ((size_t)h * S_cap + pos0 + t) * d, src + ((size_t)t * Hkv + h) * d, d);
#ifdef SKV_CUDA
    if (be == BE_CUDA) {
        void *dc = dev(cache, nc * (f16 ? 2 : 4));
        float *ds = dev(src, nsrc * sizeof(float));
        CK(skv_cuda_kv_write(dc, ds, T, Hkv, d, S_cap, pos0, f16));
        back(cache, dc, nc * (f16 ? 2 : 4));
    }
#endif
    from_cache(got, cache, nc, f16);
    return check("cache", got, ref, NULL, nc, r->tol[be]);
}

/* ---------------------------------------------------------------- the cases */

typedef struct { int row, be; char name[96]; } op_case;

static void describe(char *buf, size_t n, const op_row *r, int be) {
    static const char *const comb[] = {"sum", "mass", "renorm"}, *const el[] = {"f32", "f16"};
    int l = 0;
    switch (r->op) {
    case OP_MATMUL:
        l = snprintf(buf, n, "matmul %s %dx%d T=%d%s", skv_type_name(r->mm.type), r->mm.rows, r->mm.cols, r->mm.T,
                     r->mm.x8 ? " x8" : "");
        break;
    case OP_ATTN:
        l = snprintf(buf, n, "attention %s T=%d H=%d/%d d=%d pos0=%d %s%s", r->at.T > 1 ? "prefill" : "decode", r->at.T,
                     r->at.H, r->at.Hkv, r->at.d, r->at.pos0, el[r->at.f16], r->at.scores ? " scores" : "");
        break;
    case OP_COMP:
        l = snprintf(buf, n, "compensate %s g=%d d=%d hot=%d marg=%d %s%s%s", comb[r->cp.combine], r->cp.g, r->cp.d,
                     r->cp.n_hot, r->cp.n_marg, el[r->cp.f16], r->cp.pm ? "" : " pm=NULL", r->cp.mult ? " mult" : "");
        break;
    case OP_RMSNORM: l = snprintf(buf, n, "rmsnorm T=%d n=%d", r->el.T, r->el.n); break;
    case OP_ROPE:
        l = snprintf(buf, n, "rope %s T=%d heads=%d d=%d", r->el.mode ? "halves" : "adjacent", r->el.T, r->el.heads, r->el.n);
        break;
    case OP_SWIGLU: l = snprintf(buf, n, "swiglu n=%d", r->el.n); break;
    case OP_SOFTMAX: l = snprintf(buf, n, "softmax rows=%d n=%d", r->el.T, r->el.n); break;
    case OP_TOPK: l = snprintf(buf, n, "topk H=%d n=%d k=%d%s", r->tk.H, r->tk.n, r->tk.k, r->tk.levels ? " ties" : ""); break;
    case OP_KV: l = snprintf(buf, n, "kv_store T=%d Hkv=%d d=%d %s", r->kv.T, r->kv.Hkv, r->kv.d, el[r->kv.f16]); break;
    }
    snprintf(buf + l, n - (size_t)l, " [%s]", be_name[be]);
}

static void run_case(void **state) {
    const op_case *c = *state;
    const op_row *r = &ops[c->row];
    if (c->be == BE_CUDA) {
#ifdef SKV_CUDA
        if (!skv_cuda_available()) {
            print_message("skipped: no usable CUDA device: %s\n", skv_last_error());
            skip();
        }
#else
        print_message("skipped: built without CUDA (make CUDA=1)\n");
        skip();
#endif
    }
    release();
    rng = 12345u + 7919u * (uint32_t)c->row;   /* the same inputs on every backend */
    int bad = 0;
    switch (r->op) {
    case OP_MATMUL: bad = op_matmul(r, c->be); break;
    case OP_ATTN: bad = op_attention(r, c->be); break;
    case OP_COMP: bad = op_compensate(r, c->be); break;
    case OP_RMSNORM: case OP_ROPE: case OP_SWIGLU: case OP_SOFTMAX: bad = op_elementwise(r, c->be); break;
    case OP_TOPK: bad = op_topk(r, c->be); break;
    case OP_KV: bad = op_kv_store(r, c->be); break;
    }
    release();
    if (bad) fail_msg("%s: %d output(s) out of tolerance", c->name, bad);
}

int main(void) {
    static op_case cases[NOPS * NB];
    static struct CMUnitTest tests[NOPS * NB];
    verbose = getenv("SKV_OPS_VERBOSE") && atoi(getenv("SKV_OPS_VERBOSE")) > 0;
    for (int i = 0; i < NOPS; i++)
        for (int be = 0; be < NB; be++) {
            op_case *c = &cases[i * NB + be];
            c->row = i;
            c->be = be;
            describe(c->name, sizeof c->name, &ops[i], be);
            tests[i * NB + be] = (struct CMUnitTest){.name = c->name, .test_func = run_case, .initial_state = c};
        }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
