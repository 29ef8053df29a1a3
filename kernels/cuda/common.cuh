/* common.cuh: shared plumbing of the CUDA kernels: the C headers they mirror, checked
 * calls (CUDA_CHECK / CUBLAS_CHECK report device, call, file:line and code through
 * skv_error and make the launcher return -1), warp reductions, fp16 loads, and the one
 * grow-only device workspace and cuBLAS handle the launchers share.
 *
 * The .cu files are CUDA C++ only because nvcc requires it: they stay C-like (plain
 * structs, no classes, no exceptions, templates only to specialise kernels). All work
 * goes to the legacy default stream, so consecutive launches are ordered; the workspace
 * and the cuBLAS handle are process-wide and not thread-safe (one host thread drives
 * the device). */
#ifndef SKV_CUDA_COMMON_CUH
#define SKV_CUDA_COMMON_CUH

/* quant.h uses C11 _Static_assert; the C++ spelling is static_assert. */
#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert
#endif

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <math.h>

extern "C" {
#include "backend.h"
#include "common/util.h"
}

/* ---------------------------------------------------------------- checked calls */

/* Record "CUDA device N (name): CALL at FILE:LINE failed: message (code)"; returns -1.
 * Out-of-memory errors also give the device's free/total bytes. */
int skv_cuda_fail(const char *call, int code, const char *msg, const char *file, int line);
int skv_cublas_fail(const char *call, int status, const char *file, int line);

#define CUDA_CHECK(call) do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) \
            return skv_cuda_fail(#call, (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)

#define CUBLAS_CHECK(call) do { \
        cublasStatus_t s_ = (call); \
        if (s_ != CUBLAS_STATUS_SUCCESS) return skv_cublas_fail(#call, (int)s_, __FILE__, __LINE__); \
    } while (0)

/* After a <<<...>>> launch: launch-configuration errors are reported here; faults inside
 * the kernel surface at the next synchronising call (skv_cuda_sync). */
#define CUDA_CHECK_LAUNCH(name) CUDA_CHECK(cudaGetLastError())

/* ---------------------------------------------------------------- shared state */

/* Device scratch of at least `bytes` (grow-only; reused by every launcher; contents are
 * not kept between launcher calls). NULL + error (with sizes) if it cannot grow. */
void *skv_cuda_workspace(size_t bytes);
/* The process-wide cuBLAS handle (created on first use). NULL + error on failure. */
cublasHandle_t skv_cuda_cublas(void);

/* ---------------------------------------------------------------- device helpers */

#define SKV_WARP 32

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Element i of a KV row buffer stored as fp16 (f16 = true) or fp32. */
__device__ __forceinline__ float kv_load(const void *p, bool f16, size_t i) {
    return f16 ? __half2float(((const __half *)p)[i]) : ((const float *)p)[i];
}

/* fp16 bits -> float (weights store raw IEEE half bits as uint16). */
__device__ __forceinline__ float h2f_bits(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

/* Blocks needed to cover n items with `per` items per block (n >= 0). */
static inline unsigned skv_blocks(int64_t n, int per) {
    return (unsigned)((n + per - 1) / per);
}

#endif
