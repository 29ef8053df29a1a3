/* ops.cu: the small elementwise kernels of the decoder on the device (mirror of
 * kernels/cpu/ops.c): RMSNorm, RoPE (ADJACENT / HALVES pairings), SwiGLU, softmax.
 * Same formulas as the CPU: RMSNorm and softmax reduce in double per row (one block per
 * row, fixed reduction order), RoPE computes its angles in double, SwiGLU and softmax
 * use expf (the build does not pass --use_fast_math). */
#include "common.cuh"

/* ---------------------------------------------------------------- kernels */

#define OPS_THREADS 256

/* Sum (double) of the block's v, result valid in every thread. red: 32 doubles. */
__device__ double block_sum_d(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();                               /* red free from a previous use */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < nw; w++) s += red[w];      /* same order in every thread */
    return s;
}

__device__ float block_max_f(float v, float *red) {
    v = warp_max(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = red[0];
    for (int w = 1; w < nw; w++) m = fmaxf(m, red[w]);
    return m;
}

/* out (T, n) = x / sqrt(mean(x^2) + eps) * w. grid T, block OPS_THREADS. */
__global__ void rmsnorm_k(float *out, const float *x, const float *w, int n, float eps) {
    __shared__ double red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * xr[i];
    ss = block_sum_d(ss, red);
    const float s = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * s * w[i];
}

/* x (T, n_heads, hd): one thread per (t, pair i), looping over heads. grid (ceil(half/128), T). */
__global__ void rope_k(float *x, const int *pos, int n_heads, int hd, float theta, int halves) {
    const int half = hd / 2, i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (i >= half) return;
    const double ang = (double)pos[t] * pow((double)theta, -(double)(2 * i) / hd);
    const float c = (float)cos(ang), s = (float)sin(ang);
    for (int h = 0; h < n_heads; h++) {
        float *v = x + ((size_t)t * n_heads + h) * hd;
        const int ia = halves ? i : 2 * i, ib = halves ? i + half : 2 * i + 1;
        const float a = v[ia], b = v[ib];
        v[ia] = a * c - b * s;
        v[ib] = a * s + b * c;
    }
}

__global__ void swiglu_k(float *out, const float *gate, const float *up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}

/* In-place softmax of one row per block. */
__global__ void softmax_k(float *x, int n) {
    __shared__ double redd[32];
    __shared__ float redf[32];
    float *r = x + (size_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, r[i]);
    mx = block_max_f(mx, redf);
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(r[i] - mx);
        r[i] = e;
        sum += e;
    }
    sum = block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    for (int i = threadIdx.x; i < n; i += blockDim.x) r[i] *= inv;
}

/* ---------------------------------------------------------------- launchers */

extern "C" int skv_cuda_rmsnorm(float *out, const float *x, const float *w, int T, int n, float eps) {
    if (T <= 0 || n <= 0) return 0;
    rmsnorm_k<<<T, OPS_THREADS>>>(out, x, w, n, eps);
    CUDA_CHECK_LAUNCH("rmsnorm_k");
    return 0;
}

extern "C" int skv_cuda_rope(float *x, const int *pos, int T, int n_heads, int head_dim, float theta,
                             skv_rope_mode mode) {
    if (T <= 0 || n_heads <= 0 || head_dim < 2) return 0;
    if (head_dim > 1024) return skv_error("CUDA rope: head_dim %d > 1024", head_dim);
    if (T > 65535) return skv_error("CUDA rope: %d positions in one call (max 65535)", T);
    dim3 grid(skv_blocks(head_dim / 2, 128), (unsigned)T);
    rope_k<<<grid, 128>>>(x, pos, n_heads, head_dim, theta, mode == SKV_ROPE_HALVES);
    CUDA_CHECK_LAUNCH("rope_k");
    return 0;
}

extern "C" int skv_cuda_swiglu(float *out, const float *gate, const float *up, int n) {
    if (n <= 0) return 0;
    swiglu_k<<<skv_blocks(n, 256), 256>>>(out, gate, up, n);
    CUDA_CHECK_LAUNCH("swiglu_k");
    return 0;
}

extern "C" int skv_cuda_softmax(float *x, int rows, int n) {
    if (rows <= 0 || n <= 0) return 0;
    softmax_k<<<rows, OPS_THREADS>>>(x, n);
    CUDA_CHECK_LAUNCH("softmax_k");
    return 0;
}
