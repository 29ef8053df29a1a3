/* matmul.c: y (T, rows) = x (T, cols) @ W^T for every storage type: the scalar reference,
 * the decode GEMV (T small) and the prefill GEMM (T large), and the embedding row gather.
 *
 *   skv_matmul_ref  plain loops over skv_dequant_row chunks, double accumulators.
 *   GEMV (T < skv_matmul_gemm_min_t(type)): each x row is quantised once (vecdot.h: Q8_0/Q8_K or float),
 *       then OpenMP over chunks of up to GEMV_CHUNK contiguous weight rows (one thread when
 *       the work is under GEMV_PAR_BYTES); at T = 1 the 32-wide types, Q4_K and Q6_K use the
 *       4-row kernels (skv_vec_dot4_for), the rest the 1-row dots; at T > 1 each weight row is unpacked once
 *       for up to 4 activation rows (skv_vec_dotn_for), bit-identical to the T = 1 results.
 *       A matrix with a pair-packed copy (W->pack, runtime/model/model_pack.c) runs its 4-row
 *       groups on that copy (skv_vec_dot4_packed_for), bit-identical to the stored rows.
 *       A matrix in 8-row groups (W->x8) runs pairs of groups through the multi-row int8 kernel
 *       (gemm_x8.h) from skv_gemm16_min_t rows, the same bits as the 8-row decode kernel; in
 *       gemm mode SKV_GEMM_INT8_ALL (matmul.h) it does so at every T (no float GEMM).
 *   skv_matmul_multi: several matrices over the same x (q/k/v, gate/up) share one
 *       quantised copy of x and one parallel region (fewer fork/joins per token).
 *   skv_gemv_team: the same T = 1 GEMV called by every thread of an enclosing parallel
 *       region (the decode forward's one region per token): each thread quantises x into
 *       its own buffer and computes the row chunks in its share of the weight bytes.
 *   GEMM (larger T): OpenMP over panels of NR=16 weight rows (split along T
 *       too when there are few panels). For each KC-wide slice of the panel the 16 rows
 *       are dequantised once into a packed (KC, 16) float panel, then a 6x16 register-
 *       blocked FMA micro-kernel runs over all T rows of x: 12 accumulators, 2 panel loads
 *       and 6 broadcasts per k. Panel rows are dequantised with skv_dequant_row_avx2
 *       (bit-exact with the scalar skv_dequant_row) and transposed 8x8 in registers.
 * SKV_MATMUL_REF=1 in the environment (or skv_matmul_set_ref(1)) routes skv_matmul to
 * the reference. */
#include "matmul.h"
#include "gemm_x8.h"
#include "vecdot.h"
#include "dequant.h"
#include "ops.h"
#include "common/util.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#define NR 16          /* weight rows per packed panel (2 AVX vectors) */
#define MR 6           /* x rows per micro-kernel tile */
#define KC 256         /* k slice: a multiple of every block size */

/* Smallest T that takes the GEMM path. Panels are dequantised with the AVX2
 * dequantisers (dequant.h, ~0.1-0.3 ns per weight), so the crossover is where T integer
 * dots per weight cost more than the float micro-kernel. Since the GEMV unpacks each weight
 * block once for 4 activation rows (skv_vec_dotn), measured on 2 threads (1.5B/0.5B/SmolLM2
 * shapes, GEMV time / GEMM time = 1): Q5_0 ~20, Q4_1 ~32, Q8_0 ~12-16, Q4_K and Q6_K
 * above 128 (the GEMM only wins at prefill sizes); capped at 64 here so that prefill
 * blocks keep the float-activation GEMM. F32/F16 ~5, BF16 ~2 (no multi-row kernel). */
int skv_matmul_gemm_min_t(int type) {
    switch (type) {
    case SKV_F32: case SKV_F16: return 4;
    case SKV_BF16: return 2;
    case SKV_Q5_0: case SKV_Q5_1: return 16;
    case SKV_Q4_0: case SKV_Q4_1: return 24;
    case SKV_Q5_K: return 32;
    case SKV_Q4_K: case SKV_Q6_K: return 64;
    default: return 12;   /* Q8_0 */
    }
}

static int force_ref = -1;   /* -1: read SKV_MATMUL_REF on first use */
static int gemm_mode = -1;   /* -1: read SKV_GEMM_MODE on first use */

void skv_matmul_set_gemm_mode(int mode) {
    __atomic_store_n(&gemm_mode, mode < 0 ? 0 : mode > 2 ? 2 : mode, __ATOMIC_RELAXED);
}

int skv_matmul_gemm_mode(void) {
    int f = __atomic_load_n(&gemm_mode, __ATOMIC_RELAXED);
    if (f < 0) {
        const char *e = getenv("SKV_GEMM_MODE");
        f = e && *e >= '0' && *e <= '2' && !e[1] ? *e - '0' : SKV_GEMM_INT8_ALL;
        __atomic_store_n(&gemm_mode, f, __ATOMIC_RELAXED);
    }
    return f;
}

void skv_matmul_set_ref(int on) { force_ref = on ? 1 : 0; }

static int use_ref(void) {
    int f = __atomic_load_n(&force_ref, __ATOMIC_RELAXED);
    if (f < 0) {
        const char *e = getenv("SKV_MATMUL_REF");
        f = (e && *e && strcmp(e, "0") != 0) ? 1 : 0;
        __atomic_store_n(&force_ref, f, __ATOMIC_RELAXED);
    }
    return f;
}

/* ---------------- stored row slices ---------------- */

/* Stored bytes of row r of W, columns k0 .. k0+kc-1 (kc <= KC, both multiples of the
 * block): a pointer into W's data, or for a matrix in 8-row groups (W->x8) the slice
 * rebuilt into buf (SLICE_BYTES). */
#define SLICE_BYTES (KC * 4)   /* skv_row_bytes of KC columns of any type (F32 is the largest) */
static const uint8_t *row_slice(const skv_weight *W, int64_t r, int64_t k0, int64_t kc, uint8_t *buf) {
    const size_t rb = skv_row_bytes(W->type, W->cols);
    if (!W->x8) return (const uint8_t *)W->data + (size_t)r * rb + skv_row_bytes(W->type, k0);
    const int64_t B = skv_type_block(W->type);
    skv_x8_row(W->type, (const uint8_t *)W->data + (size_t)(r / 8) * 8 * rb, (int)(r % 8), k0 / B, kc / B, buf);
    return buf;
}

/* ---------------- reference ---------------- */

void skv_matmul_ref(float *y, const float *x, const skv_weight *W, int T) {
    const int64_t rows = W->rows, cols = W->cols;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float buf[KC];
        uint8_t sl[SLICE_BYTES];
        for (int t = 0; t < T; t++) {
            double acc = 0.0;
            for (int64_t k0 = 0; k0 < cols; k0 += KC) {
                int64_t kc = cols - k0 < KC ? cols - k0 : KC;
                skv_dequant_row(W->type, row_slice(W, r, k0, kc, sl), buf, kc);
                const float *xr = x + (size_t)t * cols + k0;
                for (int64_t k = 0; k < kc; k++) acc += (double)buf[k] * xr[k];
            }
            y[(size_t)t * rows + r] = (float)acc;
        }
    }
}

void skv_weight_row(const skv_weight *W, int64_t row, float *out) {
    if (!W->x8) {
        const size_t rb = skv_row_bytes(W->type, W->cols);
        skv_dequant_row_avx2(W->type, (const uint8_t *)W->data + (size_t)row * rb, out, W->cols);
        return;
    }
    uint8_t sl[SLICE_BYTES];
    for (int64_t k0 = 0; k0 < W->cols; k0 += KC) {
        const int64_t kc = W->cols - k0 < KC ? W->cols - k0 : KC;
        skv_dequant_row_avx2(W->type, row_slice(W, row, k0, kc, sl), out + k0, kc);
    }
}

/* ---------------- decode GEMV ---------------- */

/* Rows per work item: a multiple of 4 (the 4-row kernels), big enough that the hardware
 * prefetcher streams each item. Items are handed out statically, each thread a contiguous
 * run of them: the dynamic hand-out (one shared counter bumped per item, its cache line
 * moving between the cores every time) made whole-model decode 15-45 % slower on the
 * 2-core development VM (SmolLM2 155-161 -> 217-233 tok/s when it went). */
#define GEMV_CHUNK 64
/* Below this many weight bytes (all matrices of one call together) the GEMV runs on one
 * thread: the fork/join costs more than the work. */
#define GEMV_PAR_BYTES ((size_t)32 << 10)

/* One weight matrix of a GEMV call: y (T, rows) = act (T rows, ab bytes each) . W^T. */
typedef struct {
    float *y;
    const skv_weight *W;
    const uint8_t *act;
    size_t ab, rb;
    skv_vec_dot_fn dot;
    skv_vec_dot4_fn dot4;    /* over w4: the pair-packed copy when W has one, else W->data */
    const uint8_t *w4;
    skv_vec_dotn_fn dotn;
    skv_vec_dot8n_fn dot8;   /* W in 8-row groups (W->x8): every row and T through it */
    skv_gemm16_fn g16;       /* ... and from skv_gemm16_min_t rows the 16-row multi-row kernel (gemm_x8.h), same bits */
    int64_t c0;   /* first global chunk index of this matrix (set by gemv_run) */
} gemv_job;

/* The job of W (cols columns) writing y from the quantised activation act (ab bytes a row).
 * A matrix with a pair-packed copy (W->pack, runtime/model/model_pack.c) runs its 4-row groups on
 * that copy with the packed kernel: the same bits as the stored rows' 4-row kernel. */
static gemv_job make_job(float *y, const skv_weight *W, const uint8_t *act, size_t ab) {
    const bool packed = W->pack && skv_vec_dot4_packed_for(W->type);
    return (gemv_job){.y = y, .W = W, .act = act, .ab = ab, .rb = skv_row_bytes(W->type, W->cols),
                      .dot = skv_vec_dot_for(W->type), .dotn = skv_vec_dotn_for(W->type),
                      .dot4 = packed ? skv_vec_dot4_packed_for(W->type) : skv_vec_dot4_for(W->type),
                      .w4 = packed ? W->pack : W->data, .dot8 = W->x8 ? skv_vec_dot8n_for(W->type) : NULL,
                      .g16 = W->x8 && skv_matmul_gemm_mode() != SKV_GEMM_DECODE_ROWS ? skv_gemm16_for(W->type) : NULL};
}

/* rows r .. r1-1 of job j for all T activation rows.
 * T = 1: the 4-row kernels (or the 1-row dot); T > 1: each weight row is unpacked once
 * for up to SKV_DOTN_MAX activation rows (skv_vec_dotn), else the 1-row dot per t. */
static void gemv_rows(const gemv_job *j, int64_t r, int64_t r1, int T) {
    const int64_t rows = j->W->rows, cols = j->W->cols;
    const uint8_t *base = j->W->data;
    if (j->dot8) {   /* 8-row groups (r, r1 multiples of 8), up to SKV_DOTN_MAX activation rows a call */
        float o[8 * SKV_DOTN_MAX];
        int64_t r16 = r;
        if (j->g16 && T >= skv_gemm16_min_t(j->W->type))   /* pairs of groups: the multi-row kernel, same bits */
            for (; r16 + 16 <= r1; r16 += 16)
                j->g16(cols, base + (size_t)r16 * j->rb, 8 * j->rb, j->act, j->ab, T, j->y + r16, rows);
        for (int64_t rr = r16; rr < r1; rr += 8)
            for (int t0 = 0; t0 < T; t0 += SKV_DOTN_MAX) {
                const int nt = T - t0 < SKV_DOTN_MAX ? T - t0 : SKV_DOTN_MAX;
                j->dot8(cols, base + (size_t)rr * j->rb, j->act + (size_t)t0 * j->ab, j->ab, nt, o);
                for (int t = 0; t < nt; t++) memcpy(j->y + (size_t)(t0 + t) * rows + rr, o + 8 * t, 8 * sizeof(float));
            }
        return;
    }
    if (T > 1 && j->dotn) {
        /* skv_vec_dotn mirrors the T = 1 kernel bit for bit: dot4 for the rows in whole groups
         * of 4, the 1-row dot for the rest (and for every row of types without dot4) */
        const int64_t rn = j->dot4 ? r + (r1 - r) / 4 * 4 : r1;
        float o[SKV_DOTN_MAX];
        for (int64_t rr = rn; rr < r1; rr++)
            for (int t = 0; t < T; t++)
                j->y[(size_t)t * rows + rr] = j->dot(cols, base + (size_t)rr * j->rb, j->act + (size_t)t * j->ab);
        for (int64_t rr = r; rr < rn; rr++) {
            const uint8_t *wr = base + (size_t)rr * j->rb;
            for (int t0 = 0; t0 < T; t0 += SKV_DOTN_MAX) {
                const int nt = T - t0 < SKV_DOTN_MAX ? T - t0 : SKV_DOTN_MAX;
                j->dotn(cols, wr, j->act + (size_t)t0 * j->ab, j->ab, nt, o);
                for (int t = 0; t < nt; t++) j->y[(size_t)(t0 + t) * rows + rr] = o[t];
            }
        }
        return;
    }
    for (int t = 0; t < T; t++) {
        const uint8_t *xa = j->act + (size_t)t * j->ab;
        float *yt = j->y + (size_t)t * rows;
        int64_t rr = r;
        if (j->dot4) {
            float o[4];
            for (; rr + 4 <= r1; rr += 4) {
                j->dot4(cols, j->w4 + (size_t)rr * j->rb, j->rb, xa, o);
                memcpy(yt + rr, o, sizeof o);
            }
        }
        for (; rr < r1; rr++) yt[rr] = j->dot(cols, base + (size_t)rr * j->rb, xa);
    }
}

/* All jobs' rows in one parallel region: chunks of `chunk` rows (GEMV_CHUNK, halved down to
 * 16 while there are fewer than 8 chunks per thread, so that e.g. 576 rows still balance
 * over 2 threads), numbered across the matrices in order, handed out statically. Chunks
 * are multiples of 4 rows, so the 4-row groups (and hence the results) do not depend on it. */
/* Split the jobs' rows into chunks for nth threads: sets each job's first chunk index c0
 * and *chunk (rows per chunk, at least 8 chunks per thread while chunks stay >= 16 rows);
 * returns the number of chunks. */
static int64_t plan_chunks(gemv_job *jobs, int nj, int nth, int64_t *chunk) {
    int64_t rows = 0;
    for (int i = 0; i < nj; i++) rows += jobs[i].W->rows;
    *chunk = GEMV_CHUNK;
    while (*chunk > 16 && rows < *chunk * 8 * nth) *chunk /= 2;
    int64_t chunks = 0;
    for (int i = 0; i < nj; i++) {
        jobs[i].c0 = chunks;
        chunks += (jobs[i].W->rows + *chunk - 1) / *chunk;
    }
    return chunks;
}

/* Chunk c of the jobs (their c0 from plan_chunks): its job index and rows [*r0, *r1). */
static int chunk_rows(const gemv_job *jobs, int n, int64_t chunk, int64_t c, int64_t *r0, int64_t *r1) {
    int i = n - 1;
    while (i > 0 && jobs[i].c0 > c) i--;
    const int64_t r = (c - jobs[i].c0) * chunk, nr = jobs[i].W->rows;
    *r0 = r;
    *r1 = r + chunk < nr ? r + chunk : nr;
    return i;
}

static void gemv_run(gemv_job *jobs, int nj, int T) {
    size_t bytes = 0;
    for (int i = 0; i < nj; i++) bytes += (size_t)jobs[i].W->rows * jobs[i].rb;
    const int nth = omp_get_max_threads();
    int64_t chunk;
    const int64_t chunks = plan_chunks(jobs, nj, nth, &chunk);
    const int par = nth > 1 && bytes * (size_t)(T < 4 ? T : 4) >= GEMV_PAR_BYTES && chunks > 1;
    #pragma omp parallel for schedule(static) if (par)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t r0, r1;
        const int i = chunk_rows(jobs, nj, chunk, c, &r0, &r1);
        gemv_rows(&jobs[i], r0, r1, T);
    }
}

/* Whether W (with cols columns) runs as a GEMV at this T: below the GEMM threshold, or at any T
 * for a matrix in 8-row groups in SKV_GEMM_INT8_ALL. There the 16-row multi-row kernel takes
 * the rows where the CPU has it (AVX-512 VNNI) and the 8-row decode kernel elsewhere: the
 * same bits either way, so a prefill's logits do not depend on the CPU. */
static int gemv_ok(const skv_weight *W, int T) {
    const int blk = skv_type_block(W->type);
    if (!skv_vec_dot_for(W->type) || blk <= 0 || W->cols % (blk > 1 ? blk : 1) != 0) return 0;
    return T < skv_matmul_gemm_min_t(W->type) ||
           (W->x8 && skv_vec_dot8n_for(W->type) && skv_matmul_gemm_mode() == SKV_GEMM_INT8_ALL);
}

/* y[i] (T, rows_i) = x (T, cols) @ W[i]^T for n GEMV matrices sharing x: x is quantised
 * once per activation format, then all matrices run in one parallel region. -1 when out
 * of memory (nothing written). */
static int gemv_multi(float *const *ys, const skv_weight *const *Ws, int n, const float *x, int T) {
    enum { MAXJ = 8 };
    gemv_job jobs[MAXJ];
    int fmt[MAXJ];
    size_t off[MAXJ], total = 0;
    const int64_t cols = Ws[0]->cols;
    int nf = 0;
    for (int i = 0; i < n; i++) {   /* one activation buffer per distinct format */
        int f = skv_vec_act_type(Ws[i]->type), k = 0;
        while (k < nf && fmt[k] != f) k++;
        if (k == nf) {
            size_t sz;
            const size_t ab = skv_vec_act_bytes(Ws[i]->type, cols);
            if (!skv_mul_ok(ab, (size_t)T, &sz) || !skv_add_ok(total, (sz + 63) & ~(size_t)63, &off[nf])) return -1;
            fmt[nf] = f;
            off[nf] = total;
            total = off[nf] + ((sz + 63) & ~(size_t)63);
            nf++;
        }
    }
    uint8_t *act = skv_aligned_alloc(total ? total : 64, "matmul activations");
    if (!act) return -1;
    int done[MAXJ] = {0};
    for (int i = 0; i < n; i++) {
        int f = skv_vec_act_type(Ws[i]->type), k = 0;
        while (fmt[k] != f) k++;
        const size_t ab = skv_vec_act_bytes(Ws[i]->type, cols);
        if (!done[k]) {   /* quantise x on first use of this format (rows in parallel at prefill sizes) */
            uint8_t *a0 = act + off[k];
            const int wt = Ws[i]->type;
            #pragma omp parallel for schedule(static) if (T >= 16)
            for (int t = 0; t < T; t++) skv_vec_quant_act(wt, x + (size_t)t * cols, a0 + (size_t)t * ab, cols);
            done[k] = 1;
        }
        jobs[i] = make_job(ys[i], Ws[i], act + off[k], ab);
    }
    gemv_run(jobs, n, T);
    free(act);
    return 0;
}

/* ---------------- decode GEMV inside a team ---------------- */

int skv_gemv_team_ok(const skv_weight *const *Ws, int n) {
    if (n < 1 || n > 8 || use_ref()) return 0;
    for (int i = 0; i < n; i++)
        if (Ws[i]->rows <= 0 || Ws[i]->cols != Ws[0]->cols || !gemv_ok(Ws[i], 1)) return 0;
    return 1;
}

/* Bytes of each format's quantised x, rounded up to 64, summed over the distinct formats. */
size_t skv_gemv_act_bytes(const skv_weight *const *Ws, int n) {
    int fmt[8], nf = 0;
    size_t total = 0;
    for (int i = 0; i < n && i < 8; i++) {
        int f = skv_vec_act_type(Ws[i]->type), k = 0;
        while (k < nf && fmt[k] != f) k++;
        if (k < nf) continue;
        fmt[nf++] = f;
        total += (skv_vec_act_bytes(Ws[i]->type, Ws[i]->cols) + 63) & ~(size_t)63;
    }
    return total;
}

/* This thread's jobs for the n matrices: x quantised into act once per activation format. */
static void team_jobs(gemv_job *jobs, float *const *ys, const skv_weight *const *Ws, int n, const float *x,
                      uint8_t *act) {
    int fmt[8], nf = 0;
    size_t off[8], total = 0;
    const int64_t cols = Ws[0]->cols;
    for (int i = 0; i < n; i++) {
        int f = skv_vec_act_type(Ws[i]->type), k = 0;
        while (k < nf && fmt[k] != f) k++;
        const size_t ab = skv_vec_act_bytes(Ws[i]->type, cols);
        if (k == nf) {
            fmt[nf] = f;
            off[nf] = total;
            total += (ab + 63) & ~(size_t)63;
            skv_vec_quant_act(Ws[i]->type, x, act + off[nf], cols);
            nf++;
        }
        jobs[i] = make_job(ys[i], Ws[i], act + off[k], ab);
    }
}

/* The first chunk (global index) whose first byte is at or after byte `at` of the jobs'
 * rows laid end to end, a row of job i weighing rb[i] bytes; `chunks` when none is. */
static int64_t first_chunk_from(const gemv_job *jobs, int n, int64_t chunk, int64_t chunks, const size_t *rb,
                                size_t at) {
    size_t start = 0;   /* first byte of job i */
    for (int i = 0; i < n; i++) {
        const size_t cb = (size_t)chunk * rb[i];
        const int64_t nch = (jobs[i].W->rows + chunk - 1) / chunk,
                      k = at > start ? (int64_t)((at - start + cb - 1) / cb) : 0;
        if (k < nch) return jobs[i].c0 + k;
        start += (size_t)jobs[i].W->rows * rb[i];
    }
    return chunks;
}

/* Thread t's chunks [*c0, *c1): those that start in its share of the bytes, an even split
 * over nth threads, a row of job i weighing rb[i] bytes. */
static void team_share(const gemv_job *jobs, int n, int64_t chunk, int64_t chunks, const size_t *rb, int t, int nth,
                       int64_t *c0, int64_t *c1) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)jobs[i].W->rows * rb[i];
    *c0 = first_chunk_from(jobs, n, chunk, chunks, rb, total * (size_t)t / (size_t)nth);
    *c1 = first_chunk_from(jobs, n, chunk, chunks, rb, total * (size_t)(t + 1) / (size_t)nth);
}

void skv_gemv_team(float *const *ys, const skv_weight *const *Ws, int n, const float *x, uint8_t *act) {
    gemv_job jobs[8];
    size_t rb[8];
    team_jobs(jobs, ys, Ws, n, x, act);
    for (int i = 0; i < n; i++) rb[i] = jobs[i].rb;
    /* the chunking of gemv_run (results do not depend on it); each thread takes the
     * consecutive chunks that start in its share of the bytes (matrices of one group can
     * differ in type: Qwen2.5-0.5B's V is Q8_0 next to Q5_0 Q and K, and an even split of
     * rows left one thread ~12 % more bytes to read) */
    const int nth = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk, c0, c1;
    const int64_t chunks = plan_chunks(jobs, n, nth, &chunk);
    team_share(jobs, n, chunk, chunks, rb, t, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        int64_t r0, r1;
        const int i = chunk_rows(jobs, n, chunk, c, &r0, &r1);
        gemv_rows(&jobs[i], r0, r1, 1);
    }
    #pragma omp barrier
}

void skv_gemv_team_swiglu(float *h, float *g, float *u, const skv_weight *Wg, const skv_weight *Wu, const float *x,
                          uint8_t *act) {
    gemv_job jobs[2];
    const skv_weight *Ws[2] = {Wg, Wu};
    float *ys[2] = {g, u};
    team_jobs(jobs, ys, Ws, 2, x, act);
    /* chunks of rows of the pair, planned as for one matrix of this shape; a row weighs
     * its bytes in both matrices */
    const int nth = omp_get_num_threads(), t = omp_get_thread_num();
    const size_t pair_rb = jobs[0].rb + jobs[1].rb;
    int64_t chunk, c0, c1;
    const int64_t chunks = plan_chunks(jobs, 1, nth, &chunk);
    team_share(jobs, 1, chunk, chunks, &pair_rb, t, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        int64_t r0, r1;
        chunk_rows(jobs, 1, chunk, c, &r0, &r1);
        gemv_rows(&jobs[0], r0, r1, 1);
        gemv_rows(&jobs[1], r0, r1, 1);
        skv_swiglu(h + r0, g + r0, u + r0, (int)(r1 - r0));
    }
    #pragma omp barrier
}

/* ---------------- prefill GEMM ---------------- */

/* out (mr, NR) = x (mr rows, stride ldx) (kc) @ wp (kc, NR); mr is a literal at each call. */
static inline __attribute__((always_inline)) void tile(int mr, int kc, const float *x, int64_t ldx,
                                                       const float *wp, float out[MR][NR]) {
    __m256 c0[MR], c1[MR];
    #pragma GCC unroll 6
    for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(wp + (size_t)k * NR), b1 = _mm256_load_ps(wp + (size_t)k * NR + 8);
        #pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            if (i < mr) {
                __m256 a = _mm256_broadcast_ss(x + (size_t)i * ldx + k);
                c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
                c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
            }
        }
    }
    #pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < mr) {
            _mm256_storeu_ps(out[i], c0[i]);
            _mm256_storeu_ps(out[i] + 8, c1[i]);
        }
    }
}

static void tile_any(int mr, int kc, const float *x, int64_t ldx, const float *wp, float out[MR][NR]) {
    switch (mr) {
    case 6: tile(6, kc, x, ldx, wp, out); break;
    case 5: tile(5, kc, x, ldx, wp, out); break;
    case 4: tile(4, kc, x, ldx, wp, out); break;
    case 3: tile(3, kc, x, ldx, wp, out); break;
    case 2: tile(2, kc, x, ldx, wp, out); break;
    default: tile(1, kc, x, ldx, wp, out); break;
    }
}

/* Transpose 8 rows (8 floats each, stride ld) into 8 columns of the packed panel. */
static inline void transpose8(float *dst, const float *src, int ld) {
    __m256 r0 = _mm256_load_ps(src), r1 = _mm256_load_ps(src + ld), r2 = _mm256_load_ps(src + 2 * ld),
           r3 = _mm256_load_ps(src + 3 * ld), r4 = _mm256_load_ps(src + 4 * ld), r5 = _mm256_load_ps(src + 5 * ld),
           r6 = _mm256_load_ps(src + 6 * ld), r7 = _mm256_load_ps(src + 7 * ld);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_store_ps(dst + 0 * NR, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_store_ps(dst + 1 * NR, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_store_ps(dst + 2 * NR, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_store_ps(dst + 3 * NR, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_store_ps(dst + 4 * NR, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_store_ps(dst + 5 * NR, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_store_ps(dst + 6 * NR, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_store_ps(dst + 7 * NR, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* wp (kc, NR) = tmp (NR, kc)^T; kc is a multiple of 8 on the vector part. */
static void pack_panel(float *wp, float tmp[NR][KC], int kc) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        transpose8(wp + (size_t)k * NR, &tmp[0][k], KC);
        transpose8(wp + (size_t)k * NR + 8, &tmp[8][k], KC);
    }
    for (; k < kc; k++)
        for (int i = 0; i < NR; i++) wp[k * NR + i] = tmp[i][k];
}

static void gemm(float *y, const float *x, const skv_weight *W, int T) {
    const int64_t rows = W->rows, cols = W->cols;
    const int64_t panels = (rows + NR - 1) / NR;
    const int nth = omp_get_max_threads();
    /* split T into tsplit ranges when there are too few panels to feed the threads */
    int64_t tsplit = 1;
    while (panels * tsplit < 2 * nth && (int64_t)T / (tsplit * 2) >= 4 * MR) tsplit *= 2;
    const int64_t tchunk = ((T + tsplit - 1) / tsplit + MR - 1) / MR * MR;
    const int64_t tasks = panels * tsplit;

    #pragma omp parallel
    {
        float wp[KC * NR] __attribute__((aligned(32)));
        float tmp[NR][KC] __attribute__((aligned(32)));
        float out[MR][NR];
        uint8_t sl[SLICE_BYTES];
        #pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t p = task / tsplit, ts = task % tsplit;
            const int64_t r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
            const int64_t t0 = ts * tchunk, t1 = t0 + tchunk < T ? t0 + tchunk : T;
            if (t0 >= t1) continue;
            for (int64_t k0 = 0; k0 < cols; k0 += KC) {
                const int kc = (int)(cols - k0 < KC ? cols - k0 : KC);
                for (int64_t i = 0; i < nr; i++)
                    skv_dequant_row_avx2(W->type, row_slice(W, r0 + i, k0, kc, sl), tmp[i], kc);
                for (int64_t i = nr; i < NR; i++) memset(tmp[i], 0, sizeof(float) * (size_t)kc);
                pack_panel(wp, tmp, kc);
                for (int64_t t = t0; t < t1; t += MR) {
                    const int mr = (int)(t1 - t < MR ? t1 - t : MR);
                    tile_any(mr, kc, x + (size_t)t * cols + k0, cols, wp, out);
                    for (int i = 0; i < mr; i++) {
                        float *yr = y + (size_t)(t + i) * rows + r0;
                        if (k0 == 0) for (int64_t j = 0; j < nr; j++) yr[j] = out[i][j];
                        else for (int64_t j = 0; j < nr; j++) yr[j] += out[i][j];
                    }
                }
            }
        }
    }
}

/* ---------------- dispatch ---------------- */

void skv_matmul(float *y, const float *x, const skv_weight *W, int T) {
    if (T <= 0 || W->rows <= 0) return;
    if (use_ref()) { skv_matmul_ref(y, x, W, T); return; }
    if (gemv_ok(W, T)) {
        if (gemv_multi(&y, &W, 1, x, T) == 0) return;
        skv_matmul_ref(y, x, W, T);   /* out of memory for the activation copy */
        return;
    }
    gemm(y, x, W, T);
}

void skv_matmul_multi(float *const *ys, const skv_weight *const *Ws, int n, const float *x, int T) {
    if (T <= 0 || n <= 0) return;
    int all = n <= 8 && !use_ref();
    for (int i = 0; all && i < n; i++)
        all = Ws[i]->rows > 0 && Ws[i]->cols == Ws[0]->cols && gemv_ok(Ws[i], T);
    if (all && gemv_multi(ys, Ws, n, x, T) == 0) return;
    for (int i = 0; i < n; i++) skv_matmul(ys[i], x, Ws[i], T);
}
