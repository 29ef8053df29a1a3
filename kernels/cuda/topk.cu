/* topk.cu: per-head top-k selection on the device (mirror of skv_topk in kernels/cpu/topk.c
 * followed by skv_sort_ints: the same chosen set, positions in ascending order).
 *
 *   score (H rows, stride) -> idx (H, k): the k positions with the highest score
 *
 * Every position gets a unique 64-bit key: the order-preserving bits of its score in the
 * high word (NaN mapped below -inf) and the position in the low word, so ties go to the
 * later position, as in skv_topk. One block per row finds the k-th largest key exactly
 * by an 8-pass radix select (8 bits a pass, histogram in shared memory), then writes the
 * positions whose key is >= it in ascending order (ballot + prefix count per chunk). */
#include "common.cuh"

#define TOPK_THREADS 256

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ uint64_t topk_key(float f, int i) {
    uint32_t u = __float_as_uint(f);
    if (isnan(f)) u = 0u;
    else u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint32_t)i;
}

/* grid H, block TOPK_THREADS. Requires 0 < k < n. */
__global__ void __launch_bounds__(TOPK_THREADS)
topk_k(int *idx, const float *score, int n, size_t stride, int k) {
    __shared__ unsigned hist[256];
    __shared__ unsigned long long s_prefix;
    __shared__ int s_rem;
    __shared__ int wcount[TOPK_THREADS / 32];
    __shared__ int s_base;
    const float *row = score + (size_t)blockIdx.x * stride;
    int *out = idx + (size_t)blockIdx.x * k;
    if (threadIdx.x == 0) { s_prefix = 0ull; s_rem = k; s_base = 0; }
    uint64_t mask = 0;
    for (int pass = 7; pass >= 0; pass--) {
        const int shift = 8 * pass;
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0u;
        __syncthreads();
        const uint64_t prefix = s_prefix;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const uint64_t key = topk_key(row[i], i);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int rem = s_rem, cum = 0, b = 255;
            for (; b > 0; b--) {
                if (cum + (int)hist[b] >= rem) break;
                cum += (int)hist[b];
            }
            s_rem = rem - cum;
            s_prefix = prefix | ((uint64_t)b << shift);
        }
        mask |= (uint64_t)255 << shift;
        __syncthreads();
    }
    const uint64_t thr = s_prefix;                 /* the k-th largest key */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int base = 0; base < n; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const bool sel = i < n && topk_key(row[i], i) >= thr;
        const unsigned bal = __ballot_sync(0xffffffffu, sel);
        if (lane == 0) wcount[warp] = __popc(bal);
        __syncthreads();
        int off = s_base;
        for (int w = 0; w < warp; w++) off += wcount[w];
        off += __popc(bal & ((1u << lane) - 1u));
        if (sel && off < k) out[off] = i;
        __syncthreads();
        if (threadIdx.x == 0) {
            int tot = 0;
            for (int w = 0; w < nw; w++) tot += wcount[w];
            s_base += tot;
        }
        __syncthreads();
    }
}

/* k >= n: all positions, then -1. */
__global__ void topk_all(int *idx, int n, int k) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= k) return;
    idx[(size_t)blockIdx.y * k + j] = j < n ? j : -1;
}

/* ---------------------------------------------------------------- launchers */

extern "C" int skv_cuda_topk(int *idx, const float *score, int H, int n, size_t stride, int k) {
    if (H <= 0 || k <= 0) return 0;
    if (n < 0) return skv_error("CUDA topk: negative row length %d", n);
    if (H > 65535) return skv_error("CUDA topk: %d rows (max 65535)", H);
    if (k >= n) {
        dim3 grid(skv_blocks(k, 256), (unsigned)H);
        topk_all<<<grid, 256>>>(idx, n, k);
        CUDA_CHECK_LAUNCH("topk_all");
        return 0;
    }
    topk_k<<<H, TOPK_THREADS>>>(idx, score, n, stride, k);
    CUDA_CHECK_LAUNCH("topk_k");
    return 0;
}
