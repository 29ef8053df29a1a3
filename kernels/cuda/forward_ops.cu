/* forward_ops.cu: the glue kernels the device forward pass needs beyond the CPU kernel
 * mirrors (mirror of the static helpers in runtime/engine/forward.c): bias add, residual add,
 * the KV cache write (fp32 -> fp16 or fp32, into the (Hkv, S_cap, d) layout), and the
 * device memory query used to report what does not fit. Driven by runtime/backend/forward_cuda.c. */
#include "common.cuh"

/* ---------------------------------------------------------------- kernels */

/* y (T, n) += b (n); one thread per element. */
__global__ void add_bias_k(float *y, const float *b, int64_t total, int n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] += b[i % n];
}

/* x (n) += y (n) */
__global__ void add_k(float *x, const float *y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

/* src (T, Hkv, d) -> cache (Hkv, S_cap, d) at rows pos0 .. pos0+T-1.
 * grid (T, Hkv), block over d. fp16: round to nearest even (__float2half_rn, as
 * skv_f32_to_f16 on the CPU). */
__global__ void kv_write_k(void *cache, const float *src, int Hkv, int d, int S_cap, int pos0, int f16) {
    const int t = blockIdx.x, h = blockIdx.y;
    const float *in = src + ((size_t)t * Hkv + h) * d;
    const size_t off = ((size_t)h * S_cap + pos0 + t) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        if (f16) ((__half *)cache)[off + i] = __float2half_rn(in[i]);
        else ((float *)cache)[off + i] = in[i];
    }
}

/* ---------------------------------------------------------------- launchers */

extern "C" int skv_cuda_add_bias(float *y, const float *b, int T, int n) {
    if (T <= 0 || n <= 0) return 0;
    const int64_t total = (int64_t)T * n;
    add_bias_k<<<skv_blocks(total, 256), 256>>>(y, b, total, n);
    CUDA_CHECK_LAUNCH("add_bias_k");
    return 0;
}

extern "C" int skv_cuda_add(float *x, const float *y, size_t n) {
    if (n == 0) return 0;
    add_k<<<skv_blocks((int64_t)n, 256), 256>>>(x, y, (int64_t)n);
    CUDA_CHECK_LAUNCH("add_k");
    return 0;
}

extern "C" int skv_cuda_kv_write(void *cache, const float *src, int T, int Hkv, int d, int S_cap, int pos0,
                                 int f16) {
    if (T <= 0) return 0;
    if (T > 2147483647 || Hkv <= 0 || Hkv > 65535 || d <= 0 || pos0 < 0 || (int64_t)pos0 + T > S_cap)
        return skv_error("CUDA kv write: rows %d..%d of a cache of %d (Hkv %d, d %d)", pos0, pos0 + T - 1,
                         S_cap, Hkv, d);
    dim3 grid((unsigned)T, (unsigned)Hkv);
    kv_write_k<<<grid, d < 128 ? 64 : 128>>>(cache, src, Hkv, d, S_cap, pos0, f16);
    CUDA_CHECK_LAUNCH("kv_write_k");
    return 0;
}

extern "C" int skv_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    if (!skv_cuda_available()) return -1;
    size_t f = 0, t = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}
