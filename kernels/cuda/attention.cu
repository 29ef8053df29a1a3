/* attention.cu: causal GQA attention on the device (mirror of kernels/cpu/attention.c,
 * same contract: attention.h), with the optional per-head colsum / lastrow outputs.
 *
 *   q (T, H, d), kc/vc (Hkv, S_cap, d) fp32 or fp16 -> out (T, H, d)
 *   query row t (position pos0 + t) sees keys 0 .. pos0 + t; kv head = h / (H / Hkv)
 *
 * Kernels (CUDA cores, fp32 arithmetic; no tensor cores yet):
 *   attn_prefill (T > 1): FlashAttention-style. Block = (8 query rows, head h), one warp
 *     per row. Key/value tiles of 32 keys are staged in shared memory (fp16 converted to
 *     fp32); lane j scores key j of the tile, the warp keeps an online softmax (running
 *     max m, running sum l, rescaled accumulator; each lane owns d/32 output columns).
 *     Nothing of size T x S exists; the row's (m, l) is saved for the score pass.
 *   attn_decode + attn_decode_merge (T == 1): split-key ("flash decoding"): block =
 *     (head, key range), 4 warps each run the online softmax over interleaved 32-key
 *     tiles read from global memory, the warps merge in shared memory, the ranges merge
 *     in a second small kernel, which also saves (m, l).
 *   attn_scores (only when colsum or lastrow is requested): a second pass over the keys.
 *     Block = (32 keys, head): it recomputes each score and A = exp(s - m) / l from the
 *     saved (m, l), sums over the query rows in a fixed order (warps, then a fixed
 *     reduction) and adds to colsum: deterministic, no atomics. lastrow is written from
 *     the row t = T - 1 in the same pass.
 * Reference: skv_attention_ref (CPU); tests/test_cuda.c compares against it. */
#include "common.cuh"

#define ATT_ROWS 8        /* query rows (warps) per prefill block */
#define ATT_TILE 32       /* keys per tile = lanes */
#define DEC_WARPS 4
#define DMAX 256

/* ---------------------------------------------------------------- kernels */

/* One 32-key tile of the online softmax for one query row held by a warp.
 * s: this lane's (already scaled, or -inf) score; vrow(j, i) gives V[key j][col i].
 * Updates m, l and acc[NA] (lane owns columns lane + 32 a). */
template <int NA, typename VGet>
__device__ __forceinline__ void online_tile(float s, int nvalid, int d, float &m, float &l, float *acc, VGet vrow) {
    const int lane = threadIdx.x & 31;
    const float mt = warp_max(s);
    const float mn = fmaxf(m, mt);
    const float p = lane < nvalid ? expf(s - mn) : 0.0f;
    const float corr = expf(m - mn);              /* m = -inf on the first tile -> 0 */
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] *= corr;
    for (int j = 0; j < nvalid; j++) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int a = 0; a < NA; a++) {
            const int i = lane + 32 * a;
            if (i < d) acc[a] += pj * vrow(j, i);
        }
    }
    m = mn;
}

/* grid (ceil(T / ATT_ROWS), H), block ATT_ROWS * 32, dynamic shared:
 * Ks (32, d + 1) + Vs (32, d) + Qs (ATT_ROWS, d) floats. ml (H, T, 2) or NULL. */
template <int NA>
__global__ void __launch_bounds__(ATT_ROWS * 32)
attn_prefill(float *out, const float *q, const void *kc, const void *vc, float *ml,
             int T, int H, int grp, int d, int pos0, int S_cap, bool f16, float scale) {
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_TILE * (d + 1), *Qs = Vs + ATT_TILE * d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, t0 = blockIdx.x * ATT_ROWS, t = t0 + warp;
    const size_t kvoff = (size_t)(h / grp) * S_cap * d;
    const bool active = t < T;
    for (int i = lane; i < d; i += 32) Qs[warp * d + i] = active ? q[((size_t)t * H + h) * d + i] : 0.0f;
    const int t_last = min(T - 1, t0 + ATT_ROWS - 1);
    const int kend = pos0 + t_last + 1;          /* keys this block needs */
    const int nrow = pos0 + t + 1;               /* keys this row sees */
    float m = -INFINITY, l = 0.0f, acc[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] = 0.0f;
    for (int k0 = 0; k0 < kend; k0 += ATT_TILE) {
        __syncthreads();                          /* previous tile consumed; Qs written */
        for (int idx = threadIdx.x; idx < ATT_TILE * d; idx += blockDim.x) {
            const int j = idx / d, i = idx % d, k = k0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (k < kend) {
                kv = kv_load(kc, f16, kvoff + (size_t)k * d + i);
                vv = kv_load(vc, f16, kvoff + (size_t)k * d + i);
            }
            Ks[j * (d + 1) + i] = kv;
            Vs[j * d + i] = vv;
        }
        __syncthreads();
        if (!active || k0 >= nrow) continue;      /* warp-uniform */
        const int nvalid = min(ATT_TILE, nrow - k0);
        float s = -INFINITY;
        if (lane < nvalid) {
            const float *kr = Ks + lane * (d + 1), *qr = Qs + warp * d;
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot += qr[i] * kr[i];
            s = dot * scale;
        }
        online_tile<NA>(s, nvalid, d, m, l, acc, [&](int j, int i) { return Vs[j * d + i]; });
    }
    if (!active) return;
    const float inv = 1.0f / l;
    float *o = out + ((size_t)t * H + h) * d;
#pragma unroll
    for (int a = 0; a < NA; a++) {
        const int i = lane + 32 * a;
        if (i < d) o[i] = acc[a] * inv;
    }
    if (ml && lane == 0) {
        ml[((size_t)h * T + t) * 2] = m;
        ml[((size_t)h * T + t) * 2 + 1] = l;
    }
}

/* T == 1. grid (H, nsplit), block DEC_WARPS * 32. Split s covers keys
 * [s * chunk, min(n, (s + 1) * chunk)); writes part (H, nsplit, d + 2): m, l, acc (unnormalised).
 * shared: q (d) + DEC_WARPS * (d + 2) floats. */
template <int NA>
__global__ void __launch_bounds__(DEC_WARPS * 32)
attn_decode(float *part, const float *q, const void *kc, const void *vc, int H, int grp, int d,
            int n, int chunk, int S_cap, bool f16, float scale) {
    extern __shared__ float sm[];
    float *qs = sm, *wpart = sm + d;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.x, sp = blockIdx.y, nsplit = gridDim.y;
    const size_t kvoff = (size_t)(h / grp) * S_cap * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(size_t)h * d + i];
    __syncthreads();
    const int kb = sp * chunk, ke = min(n, kb + chunk);
    float m = -INFINITY, l = 0.0f, acc[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] = 0.0f;
    for (int k0 = kb + warp * ATT_TILE; k0 < ke; k0 += DEC_WARPS * ATT_TILE) {
        const int nvalid = min(ATT_TILE, ke - k0);
        float s = -INFINITY;
        if (lane < nvalid) {
            const size_t r = kvoff + (size_t)(k0 + lane) * d;
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot += qs[i] * kv_load(kc, f16, r + i);
            s = dot * scale;
        }
        online_tile<NA>(s, nvalid, d, m, l, acc,
                        [&](int j, int i) { return kv_load(vc, f16, kvoff + (size_t)(k0 + j) * d + i); });
    }
    /* merge the warps */
    float *wp = wpart + warp * (d + 2);
    if (lane == 0) { wp[0] = m; wp[1] = l; }
#pragma unroll
    for (int a = 0; a < NA; a++) {
        const int i = lane + 32 * a;
        if (i < d) wp[2 + i] = acc[a];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wpart[w * (d + 2)]);
    float *dst = part + ((size_t)h * nsplit + sp) * (d + 2);
    for (int i = threadIdx.x; i < d + 2; i += blockDim.x) {
        if (i == 0) { dst[0] = M; continue; }
        float v = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) {
            const float mw = wpart[w * (d + 2)];
            if (mw == -INFINITY) continue;        /* warp had no keys */
            v += wpart[w * (d + 2) + i] * expf(mw - M);
        }
        dst[i] = v;                               /* i == 1: l, else acc column i - 2 */
    }
}

/* grid H, block 128: merge the nsplit partials of head h into out (1, H, d) and ml. */
__global__ void attn_decode_merge(float *out, float *ml, const float *part, int H, int d, int nsplit) {
    const int h = blockIdx.x;
    const float *ph = part + (size_t)h * nsplit * (d + 2);
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, ph[(size_t)s * (d + 2)]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) L += ph[(size_t)s * (d + 2) + 1] * expf(ph[(size_t)s * (d + 2)] - M);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < nsplit; s++) v += ph[(size_t)s * (d + 2) + 2 + i] * expf(ph[(size_t)s * (d + 2)] - M);
        out[(size_t)h * d + i] = v / L;
    }
    if (ml && threadIdx.x == 0) { ml[(size_t)h * 2] = M; ml[(size_t)h * 2 + 1] = L; }
}

/* Score pass. grid (ceil(S / 32), H), block ATT_ROWS * 32, shared Ks (32, d + 1) +
 * red (ATT_ROWS, 32). colsum/lastrow (H, S_cap), either may be NULL. */
__global__ void __launch_bounds__(ATT_ROWS * 32)
attn_scores(float *colsum, float *lastrow, const float *q, const void *kc, const float *ml,
            int T, int H, int grp, int d, int pos0, int S_cap, bool f16, float scale) {
    extern __shared__ float sm[];
    float *Ks = sm, *red = sm + ATT_TILE * (d + 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, k0 = blockIdx.x * ATT_TILE;
    const int S = pos0 + T;
    const size_t kvoff = (size_t)(h / grp) * S_cap * d;
    for (int idx = threadIdx.x; idx < ATT_TILE * d; idx += blockDim.x) {
        const int j = idx / d, i = idx % d, k = k0 + j;
        Ks[j * (d + 1) + i] = k < S ? kv_load(kc, f16, kvoff + (size_t)k * d + i) : 0.0f;
    }
    __syncthreads();
    const int k = k0 + lane;
    /* rows that see any key of this tile: pos0 + t >= k0 */
    int tb = k0 - pos0;
    if (tb < 0) tb = 0;
    if (!colsum) tb = T - 1;
    float part = 0.0f;
    for (int t = tb + warp; t < T; t += ATT_ROWS) {
        const float *qr = q + ((size_t)t * H + h) * d;
        const bool vis = k < S && k <= pos0 + t;
        float p = 0.0f;
        if (vis) {
            const float *kr = Ks + lane * (d + 1);
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot += qr[i] * kr[i];
            const float mt = ml[((size_t)h * T + t) * 2], lt = ml[((size_t)h * T + t) * 2 + 1];
            p = expf(dot * scale - mt) / lt;
        }
        part += p;
        if (lastrow && t == T - 1 && vis) lastrow[(size_t)h * S_cap + k] = p;
    }
    if (!colsum) return;
    red[warp * 32 + lane] = part;
    __syncthreads();
    if (warp == 0 && k < S) {
        float s = 0.0f;
        for (int w = 0; w < ATT_ROWS; w++) s += red[w * 32 + lane];
        colsum[(size_t)h * S_cap + k] += s;
    }
}

/* ---------------------------------------------------------------- launchers */

template <int NA>
static int launch_prefill(float *out, const float *q, const void *kc, const void *vc, float *ml,
                          const skv_attn_args *a, float scale) {
    const int grp = a->H / a->Hkv;
    const size_t shm = (size_t)(ATT_TILE * (a->d + 1) + ATT_TILE * a->d + ATT_ROWS * a->d) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attn_prefill<NA>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    dim3 grid(skv_blocks(a->T, ATT_ROWS), (unsigned)a->H);
    attn_prefill<NA><<<grid, ATT_ROWS * 32, shm>>>(out, q, kc, vc, ml, a->T, a->H, grp, a->d, a->pos0,
                                                   a->S_cap, a->kv_f16, scale);
    CUDA_CHECK_LAUNCH("attn_prefill");
    return 0;
}

template <int NA>
static int launch_decode(float *out, const float *q, const void *kc, const void *vc, float *ml, float *part,
                         int nsplit, int chunk, const skv_attn_args *a, float scale) {
    const int grp = a->H / a->Hkv, n = a->pos0 + 1;
    const size_t shm = (size_t)(a->d + DEC_WARPS * (a->d + 2)) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attn_decode<NA>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    dim3 grid((unsigned)a->H, (unsigned)nsplit);
    attn_decode<NA><<<grid, DEC_WARPS * 32, shm>>>(part, q, kc, vc, a->H, grp, a->d, n, chunk, a->S_cap,
                                                  a->kv_f16, scale);
    CUDA_CHECK_LAUNCH("attn_decode");
    attn_decode_merge<<<a->H, 128>>>(out, ml, part, a->H, a->d, nsplit);
    CUDA_CHECK_LAUNCH("attn_decode_merge");
    return 0;
}

extern "C" int skv_cuda_attention(float *out, const float *q, const void *kc, const void *vc,
                                  const skv_attn_args *a) {
    if (a->T <= 0) return 0;
    if (a->H <= 0 || a->Hkv <= 0 || a->H % a->Hkv != 0)
        return skv_error("CUDA attention: %d query heads are not a multiple of %d kv heads", a->H, a->Hkv);
    if (a->d <= 0 || a->d > DMAX) return skv_error("CUDA attention: head_dim %d not in 1..%d", a->d, DMAX);
    if (a->pos0 < 0 || (int64_t)a->pos0 + a->T > a->S_cap)
        return skv_error("CUDA attention: positions %d..%d exceed the cache capacity %d", a->pos0,
                         a->pos0 + a->T - 1, a->S_cap);
    const float scale = 1.0f / sqrtf((float)a->d);
    const bool scores = a->colsum || a->lastrow;
    const int n = a->pos0 + 1;                       /* decode: keys seen */
    int nsplit = 1, chunk = ATT_TILE;
    if (a->T == 1) {
        nsplit = (n + 255) / 256;                    /* ~256 keys per block */
        if (nsplit > 64) nsplit = 64;
        chunk = (n + nsplit - 1) / nsplit;
        chunk = (chunk + ATT_TILE - 1) / ATT_TILE * ATT_TILE;
        nsplit = (n + chunk - 1) / chunk;            /* every split non-empty */
    }
    size_t ml_bytes = (size_t)a->H * a->T * 2 * sizeof(float);
    ml_bytes = (ml_bytes + 255) & ~(size_t)255;
    const size_t part_bytes = a->T == 1 ? (size_t)a->H * nsplit * (a->d + 2) * sizeof(float) : 0;
    char *ws = (char *)skv_cuda_workspace(ml_bytes + part_bytes);
    if (!ws) return skv_error_prefix("CUDA attention (T=%d, H=%d)", a->T, a->H);
    float *ml = (float *)ws, *part = (float *)(ws + ml_bytes);
    const int na = (a->d + 31) / 32;
    int rc;
    if (a->T == 1) {
        rc = na <= 2 ? launch_decode<2>(out, q, kc, vc, ml, part, nsplit, chunk, a, scale)
           : na <= 4 ? launch_decode<4>(out, q, kc, vc, ml, part, nsplit, chunk, a, scale)
                     : launch_decode<8>(out, q, kc, vc, ml, part, nsplit, chunk, a, scale);
    } else {
        float *mlp = scores ? ml : NULL;
        rc = na <= 2 ? launch_prefill<2>(out, q, kc, vc, mlp, a, scale)
           : na <= 4 ? launch_prefill<4>(out, q, kc, vc, mlp, a, scale)
                     : launch_prefill<8>(out, q, kc, vc, mlp, a, scale);
    }
    if (rc != 0 || !scores) return rc;
    const size_t shm = (size_t)(ATT_TILE * (a->d + 1) + ATT_ROWS * 32) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attn_scores, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    dim3 grid(skv_blocks(a->pos0 + a->T, ATT_TILE), (unsigned)a->H);
    attn_scores<<<grid, ATT_ROWS * 32, shm>>>(a->colsum, a->lastrow, q, kc, ml, a->T, a->H, a->H / a->Hkv,
                                              a->d, a->pos0, a->S_cap, a->kv_f16, scale);
    CUDA_CHECK_LAUNCH("attn_scores");
    return 0;
}
