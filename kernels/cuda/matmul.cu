/* matmul.cu: weight x activation products on the device (mirror of kernels/cpu/matmul.c).
 *
 *   y (T, rows) = x (T, cols) @ W^T        W: [rows x cols] in its storage type (quant.h)
 *
 * Weights are uploaded once (skv_cuda_weight_upload): the stored blocks byte for byte,
 * and/or an fp16 (rows, cols) copy dequantised on the device.
 *   decode (T small): gemv_q<TYPE>, one warp per output row; each lane dequantises whole
 *     32-weight chunks of the row in registers (dq_chunk, the same formulas as quant.c)
 *     and dots them with the fp32 activation. No activation quantisation (the CPU path
 *     quantises x to Q8; this one is closer to skv_matmul_ref).
 *   prefill (T >= skv_cuda_gemm_min_t()): x is scaled per row by a power of two so that
 *     max|x| <= 32768, rounded to fp16, multiplied with the fp16 weight copy by
 *     cublasGemmEx (fp32 accumulation, fp32 output), and the rows scaled back.
 * Reference: skv_matmul_ref (CPU); tests/test_cuda.c compares against it. */
#include "common.cuh"
#include <string.h>

/* ---------------------------------------------------------------- kernels */

/* The chunk decoders below are __host__ __device__: skv_cuda_dequant_row_host runs the
 * very same code on the CPU so that tests can check the block layouts without a GPU. */
#define HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define DQ_UNROLL _Pragma("unroll")
#else
#define DQ_UNROLL
#endif

HD float hf(uint16_t h) { return __half2float(__ushort_as_half(h)); }
HD float bf(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)h << 16);
#else
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* Q4_K / Q5_K packed 6-bit scale and min of sub-block j (see quant.c k_scale_min). */
HD void k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

HD uint16_t ld16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
HD uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Chunk c (weights 32c .. 32c+31) of a row stored as TY, into w[32].
 * For the 32-wide types a chunk is one block; for the k-quants it is sub-block c % 8 of
 * super-block c / 8. Block offsets follow the structs in quant.h (read bytewise: blocks
 * of 18/22/34/210 bytes leave fields unaligned). */
template <int TY>
HD void dq_chunk(const uint8_t *row, int64_t c, float *w) {
    if constexpr (TY == SKV_Q4_0) {
        const uint8_t *b = row + c * 18;
        const float d = hf(ld16(b));
        const uint8_t *qs = b + 2;
DQ_UNROLL
        for (int j = 0; j < 16; j++) {
            w[j] = d * (float)((qs[j] & 15) - 8);
            w[j + 16] = d * (float)((qs[j] >> 4) - 8);
        }
    } else if constexpr (TY == SKV_Q4_1) {
        const uint8_t *b = row + c * 20;
        const float d = hf(ld16(b)), m = hf(ld16(b + 2));
        const uint8_t *qs = b + 4;
DQ_UNROLL
        for (int j = 0; j < 16; j++) {
            w[j] = d * (float)(qs[j] & 15) + m;
            w[j + 16] = d * (float)(qs[j] >> 4) + m;
        }
    } else if constexpr (TY == SKV_Q5_0) {
        const uint8_t *b = row + c * 22;
        const float d = hf(ld16(b));
        const uint32_t qh = ld32(b + 2);
        const uint8_t *qs = b + 6;
DQ_UNROLL
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            w[j] = d * (float)(lo - 16);
            w[j + 16] = d * (float)(hi - 16);
        }
    } else if constexpr (TY == SKV_Q5_1) {
        const uint8_t *b = row + c * 24;
        const float d = hf(ld16(b)), m = hf(ld16(b + 2));
        const uint32_t qh = ld32(b + 4);
        const uint8_t *qs = b + 8;
DQ_UNROLL
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            w[j] = d * (float)lo + m;
            w[j + 16] = d * (float)hi + m;
        }
    } else if constexpr (TY == SKV_Q8_0) {
        const uint8_t *b = row + c * 34;
        const float d = hf(ld16(b));
        const int8_t *qs = (const int8_t *)(b + 2);
DQ_UNROLL
        for (int j = 0; j < 32; j++) w[j] = d * (float)qs[j];
    } else if constexpr (TY == SKV_Q4_K || TY == SKV_Q5_K) {
        /* Q4_K: d, dmin, scales[12], qs[128]; Q5_K: d, dmin, scales[12], qh[32], qs[128] */
        const int64_t sb = c >> 3;
        const int s = (int)(c & 7), cc = s >> 1;
        const uint8_t *b = row + sb * (TY == SKV_Q4_K ? 144 : 176);
        const float d = hf(ld16(b)), dmin = hf(ld16(b + 2));
        int sc, m;
        k_scale_min(s, b + 4, &sc, &m);
        const float ds = d * (float)sc, dm = dmin * (float)m;
        const uint8_t *q = b + (TY == SKV_Q4_K ? 16 : 48) + 32 * cc;
        const int shift = (s & 1) ? 4 : 0;
DQ_UNROLL
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 15;
            if constexpr (TY == SKV_Q5_K) v |= ((b[16 + l] >> s) & 1) << 4;
            w[l] = ds * (float)v - dm;
        }
    } else if constexpr (TY == SKV_Q6_K) {
        /* ql[128] @0, qh[64] @128, scales[16] @192, d @208. Sub-chunk s: half h = s / 4,
         * quarter r = s % 4 (see quant.c dq_q6_K). */
        const int64_t sb = c >> 3;
        const int s = (int)(c & 7), h = s >> 2, r = s & 3;
        const uint8_t *b = row + sb * 210;
        const float d = hf(ld16(b + 208));
        const uint8_t *ql = b + 64 * h + ((r & 1) ? 32 : 0);
        const uint8_t *qh = b + 128 + 32 * h;
        const int8_t *scales = (const int8_t *)(b + 192) + 8 * h + 2 * r;
        const int lshift = (r >= 2) ? 4 : 0, hshift = 2 * r;
        const float d0 = d * (float)scales[0], d1 = d * (float)scales[1];
DQ_UNROLL
        for (int l = 0; l < 32; l++) {
            int v = (((ql[l] >> lshift) & 15) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            w[l] = (l < 16 ? d0 : d1) * (float)v;
        }
    } else if constexpr (TY == SKV_F32) {
        const float *f = (const float *)row + 32 * c;
DQ_UNROLL
        for (int j = 0; j < 32; j++) w[j] = f[j];
    } else if constexpr (TY == SKV_F16) {
        const uint16_t *f = (const uint16_t *)row + 32 * c;
DQ_UNROLL
        for (int j = 0; j < 32; j++) w[j] = hf(f[j]);
    } else if constexpr (TY == SKV_BF16) {
        const uint16_t *f = (const uint16_t *)row + 32 * c;
DQ_UNROLL
        for (int j = 0; j < 32; j++) w[j] = bf(f[j]);
    }
}

#define GEMV_WARPS 4

/* y (T, rows) = x (T, cols) @ W^T for cols % 32 == 0. grid (ceil(rows / 4), T), block 128:
 * warp w of block bx computes row 4 bx + w for activation row blockIdx.y. */
template <int TY>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_q(float *y, const float *x, const uint8_t *W, int64_t rows, int64_t cols, size_t row_bytes) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + warp;
    const int64_t t = blockIdx.y;
    if (r >= rows) return;
    const uint8_t *row = W + (size_t)r * row_bytes;
    const float *xt = x + t * cols;
    const int64_t nch = cols / 32;
    float acc = 0.0f;
    for (int64_t c = lane; c < nch; c += 32) {
        float w[32];
        dq_chunk<TY>(row, c, w);
        const float4 *xv = (const float4 *)(xt + 32 * c);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float4 v = xv[j];
            acc += w[4 * j] * v.x + w[4 * j + 1] * v.y + w[4 * j + 2] * v.z + w[4 * j + 3] * v.w;
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) y[t * rows + r] = acc;
}

/* Float weights with any cols (x rows need not be 16-byte aligned): lanes stride. */
template <int TY>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_float(float *y, const float *x, const void *W, int64_t rows, int64_t cols) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + warp;
    const int64_t t = blockIdx.y;
    if (r >= rows) return;
    const float *xt = x + t * cols;
    float acc = 0.0f;
    for (int64_t i = lane; i < cols; i += 32) {
        float w;
        if constexpr (TY == SKV_F32) w = ((const float *)W)[r * cols + i];
        else if constexpr (TY == SKV_F16) w = h2f_bits(((const uint16_t *)W)[r * cols + i]);
        else w = __uint_as_float((uint32_t)((const uint16_t *)W)[r * cols + i] << 16);
        acc += w * xt[i];
    }
    acc = warp_sum(acc);
    if (lane == 0) y[t * rows + r] = acc;
}

/* out (rows, cols) fp16 from the stored blocks; one thread per 32-weight chunk. */
template <int TY>
__global__ void dequant_f16(__half *out, const uint8_t *W, int64_t rows, int64_t cols, size_t row_bytes) {
    const int64_t nch = cols / 32;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= rows * nch) return;
    const int64_t r = id / nch, c = id % nch;
    float w[32];
    dq_chunk<TY>(W + (size_t)r * row_bytes, c, w);
    __half *o = out + r * cols + 32 * c;
#pragma unroll
    for (int j = 0; j < 32; j++) o[j] = __float2half_rn(w[j]);
}

/* Float weights with any cols, one thread per weight. */
template <int TY>
__global__ void dequant_f16_float(__half *out, const void *W, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float w;
    if constexpr (TY == SKV_F32) w = ((const float *)W)[i];
    else w = __uint_as_float((uint32_t)((const uint16_t *)W)[i] << 16);
    out[i] = __float2half_rn(w);
}

/* Per activation row t: s[t] = smallest power of two with max|x| / s <= 32768 (1 when it
 * already fits), x16 = x / s. Exact scaling; keeps x16 finite. block 256, grid T. */
__global__ void act_to_f16(__half *x16, float *s, const float *x, int64_t cols) {
    __shared__ float red[32];
    const int64_t t = blockIdx.x;
    const float *xr = x + t * cols;
    float mx = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, fabsf(xr[i]));
    mx = warp_max(mx);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.0f;
        v = warp_max(v);
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    float sc = 1.0f;
    const float amax = red[0];
    if (amax > 32768.0f && isfinite(amax)) sc = exp2f(ceilf(log2f(amax / 32768.0f)));
    const float inv = 1.0f / sc;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) x16[t * cols + i] = __float2half_rn(xr[i] * inv);
    if (threadIdx.x == 0) s[t] = sc;
}

/* y (T, rows) row t *= s[t] */
__global__ void scale_rows(float *y, const float *s, int64_t rows, int64_t T) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * T) return;
    const float sc = s[i / rows];
    if (sc != 1.0f) y[i] *= sc;
}

/* ---------------------------------------------------------------- launchers */

static int g_force;       /* 0 auto, 1 GEMV, 2 GEMM */

extern "C" void skv_cuda_matmul_force(int path) { g_force = path; }
extern "C" int skv_cuda_gemm_min_t(void) { return 8; }

static bool is_float_type(int type) {
    return type == SKV_F32 || type == SKV_F16 || type == SKV_BF16;
}

extern "C" int skv_cuda_gemv_supported(int type) {
    switch (type) {
    case SKV_F32: case SKV_F16: case SKV_BF16:
    case SKV_Q4_0: case SKV_Q4_1: case SKV_Q5_0: case SKV_Q5_1: case SKV_Q8_0:
    case SKV_Q4_K: case SKV_Q5_K: case SKV_Q6_K:
        return 1;
    default:
        return 0;
    }
}

#define DISPATCH_QTYPE(type, LAUNCH)                 \
    switch (type) {                                  \
    case SKV_Q4_0: LAUNCH(SKV_Q4_0); break;          \
    case SKV_Q4_1: LAUNCH(SKV_Q4_1); break;          \
    case SKV_Q5_0: LAUNCH(SKV_Q5_0); break;          \
    case SKV_Q5_1: LAUNCH(SKV_Q5_1); break;          \
    case SKV_Q8_0: LAUNCH(SKV_Q8_0); break;          \
    case SKV_Q4_K: LAUNCH(SKV_Q4_K); break;          \
    case SKV_Q5_K: LAUNCH(SKV_Q5_K); break;          \
    case SKV_Q6_K: LAUNCH(SKV_Q6_K); break;          \
    case SKV_F32: LAUNCH(SKV_F32); break;            \
    case SKV_F16: LAUNCH(SKV_F16); break;            \
    case SKV_BF16: LAUNCH(SKV_BF16); break;          \
    default: return skv_error("CUDA matmul: no kernel for type %s", skv_type_name(type)); \
    }

/* fp16 copy of the blocks at q (device) into f16 (device). */
static int make_f16(__half *f16, const void *q, const skv_cuda_weight *dw) {
    const int64_t rows = dw->rows, cols = dw->cols;
    if (dw->type == SKV_F16) {
        CUDA_CHECK(cudaMemcpy(f16, q, (size_t)rows * cols * 2, cudaMemcpyDeviceToDevice));
        return 0;
    }
    if (is_float_type(dw->type) && cols % 32 != 0) {
        const int64_t n = rows * cols;
        if (dw->type == SKV_F32) dequant_f16_float<SKV_F32><<<skv_blocks(n, 256), 256>>>(f16, q, n);
        else dequant_f16_float<SKV_BF16><<<skv_blocks(n, 256), 256>>>(f16, q, n);
        CUDA_CHECK_LAUNCH("dequant_f16_float");
        return 0;
    }
    const int64_t n = rows * (cols / 32);
#define LAUNCH_DQ(TY) dequant_f16<TY><<<skv_blocks(n, 128), 128>>>(f16, (const uint8_t *)q, rows, cols, dw->row_bytes)
    DISPATCH_QTYPE(dw->type, LAUNCH_DQ)
#undef LAUNCH_DQ
    CUDA_CHECK_LAUNCH("dequant_f16");
    return 0;
}

extern "C" void skv_cuda_weight_free(skv_cuda_weight *dw) {
    if (!dw) return;
    if (dw->f16 && dw->f16 != dw->q) skv_cuda_free(dw->f16);
    skv_cuda_free(dw->q);
    dw->q = dw->f16 = NULL;
}

extern "C" int skv_cuda_weight_upload(skv_cuda_weight *dw, const skv_weight *W, int flags) {
    memset(dw, 0, sizeof *dw);
    if (!skv_cuda_available()) return -1;
    if (flags == 0) flags = SKV_CUDA_W_QUANT | SKV_CUDA_W_F16;
    if (!W || !W->data || W->rows <= 0 || W->cols <= 0)
        return skv_error("CUDA weight upload: empty weight");
    if (!skv_cuda_gemv_supported(W->type))
        return skv_error("CUDA weight upload: type %s has no CUDA kernel", skv_type_name(W->type));
    if (W->rows > INT32_MAX / 2 || W->cols > INT32_MAX / 2)
        return skv_error("CUDA weight upload: %lld x %lld is too large", (long long)W->rows, (long long)W->cols);
    const size_t rb = skv_row_bytes(W->type, W->cols);
    if (rb == 0) return skv_error_prefix("CUDA weight upload");
    size_t qbytes, nw, hbytes;
    if (!skv_mul_ok(rb, (size_t)W->rows, &qbytes) || !skv_mul_ok((size_t)W->rows, (size_t)W->cols, &nw) ||
        !skv_mul_ok(nw, 2, &hbytes))
        return skv_error("CUDA weight upload: %lld x %lld %s: size overflows", (long long)W->rows,
                         (long long)W->cols, skv_type_name(W->type));
    dw->type = W->type;
    dw->rows = W->rows;
    dw->cols = W->cols;
    dw->row_bytes = rb;
    void *q = skv_cuda_malloc(qbytes, "weight blocks");
    if (!q) return -1;
    if (skv_cuda_upload(q, W->data, qbytes) != 0) { skv_cuda_free(q); return -1; }
    if (flags & SKV_CUDA_W_F16) {
        if (W->type == SKV_F16 && (flags & SKV_CUDA_W_QUANT)) {
            dw->f16 = q;      /* the stored blocks already are the fp16 copy */
        } else {
            __half *h = (__half *)skv_cuda_malloc(hbytes, "weight fp16 copy");
            if (!h || make_f16(h, q, dw) != 0) {
                skv_cuda_free(h);
                skv_cuda_free(q);
                return -1;
            }
            dw->f16 = h;
        }
    }
    if (flags & SKV_CUDA_W_QUANT) {
        dw->q = q;
    } else {
        if (dw->f16 != q) {
            if (skv_cuda_sync() != 0) { skv_cuda_weight_free(dw); skv_cuda_free(q); return -1; }
            skv_cuda_free(q);
        }
    }
    return 0;
}

static int matmul_gemv(float *y, const float *x, const skv_cuda_weight *W, int T) {
    const int64_t rows = W->rows, cols = W->cols;
    dim3 grid(skv_blocks(rows, GEMV_WARPS), (unsigned)T);
    if (grid.x > 2147483647u || T > 65535) return skv_error("CUDA matmul: grid %u x %d too large", grid.x, T);
    if (is_float_type(W->type) && (cols % 32 != 0 || ((uintptr_t)x & 15) != 0)) {
        if (W->type == SKV_F32) gemv_float<SKV_F32><<<grid, GEMV_WARPS * 32>>>(y, x, W->q, rows, cols);
        else if (W->type == SKV_F16) gemv_float<SKV_F16><<<grid, GEMV_WARPS * 32>>>(y, x, W->q, rows, cols);
        else gemv_float<SKV_BF16><<<grid, GEMV_WARPS * 32>>>(y, x, W->q, rows, cols);
        CUDA_CHECK_LAUNCH("gemv_float");
        return 0;
    }
    if (((uintptr_t)x & 15) != 0) return skv_error("CUDA matmul: activation pointer is not 16-byte aligned");
#define LAUNCH_GEMV(TY) gemv_q<TY><<<grid, GEMV_WARPS * 32>>>(y, x, (const uint8_t *)W->q, rows, cols, W->row_bytes)
    DISPATCH_QTYPE(W->type, LAUNCH_GEMV)
#undef LAUNCH_GEMV
    CUDA_CHECK_LAUNCH("gemv_q");
    return 0;
}

/* Column-major view: Y^T (rows x T) = W_cm^T (rows x cols) * X^T (cols x T), where the
 * row-major W [rows x cols] is the column-major (cols x rows) matrix with ld = cols. */
static int matmul_gemm(float *y, const float *x, const skv_cuda_weight *W, int T) {
    const int64_t rows = W->rows, cols = W->cols;
    size_t xb;
    if (!skv_mul_ok((size_t)T * 2, (size_t)cols, &xb)) return skv_error("CUDA matmul: activation size overflows");
    const size_t xb_al = (xb + 255) & ~(size_t)255;
    char *ws = (char *)skv_cuda_workspace(xb_al + (size_t)T * sizeof(float));
    if (!ws) return skv_error_prefix("CUDA matmul (T=%d, cols=%lld)", T, (long long)cols);
    __half *x16 = (__half *)ws;
    float *sc = (float *)(ws + xb_al);
    act_to_f16<<<T, 256>>>(x16, sc, x, cols);
    CUDA_CHECK_LAUNCH("act_to_f16");
    cublasHandle_t hb = skv_cuda_cublas();
    if (!hb) return -1;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, T, (int)cols, &one,
                              W->f16, CUDA_R_16F, (int)cols, x16, CUDA_R_16F, (int)cols, &zero,
                              y, CUDA_R_32F, (int)rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    scale_rows<<<skv_blocks(rows * T, 256), 256>>>(y, sc, rows, T);
    CUDA_CHECK_LAUNCH("scale_rows");
    return 0;
}

extern "C" int skv_cuda_matmul(float *y, const float *x, const skv_cuda_weight *W, int T) {
    if (T <= 0) return 0;
    if (!W || (!W->q && !W->f16)) return skv_error("CUDA matmul: weight not uploaded");
    bool gemm;
    if (g_force == 1) gemm = false;
    else if (g_force == 2) gemm = true;
    else gemm = T >= skv_cuda_gemm_min_t();
    if (gemm && !W->f16) gemm = false;
    if (!gemm && !W->q) gemm = true;
    return gemm ? matmul_gemm(y, x, W, T) : matmul_gemv(y, x, W, T);
}

/* Host run of dq_chunk over one row (cols % 32 == 0): the kernels' decoders checked on the
 * CPU against skv_dequant_row (tests/test_cuda.c). -1 + error for other types/sizes. */
extern "C" int skv_cuda_dequant_row_host(int type, const void *row, float *dst, int64_t cols) {
    if (!skv_cuda_gemv_supported(type) || cols <= 0 || cols % 32 != 0)
        return skv_error("skv_cuda_dequant_row_host: type %s with %lld columns not supported",
                         skv_type_name(type), (long long)cols);
    const uint8_t *r = (const uint8_t *)row;
    for (int64_t c = 0; c < cols / 32; c++) {
#define DQ_HOST(TY) dq_chunk<TY>(r, c, dst + 32 * c)
        DISPATCH_QTYPE(type, DQ_HOST)
#undef DQ_HOST
    }
    return 0;
}
