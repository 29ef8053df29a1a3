/* device.cu: device discovery, checked buffers, error messages, and the shared state of
 * the CUDA backend (one grow-only workspace, one cuBLAS handle). No kernels here. */
#include "common.cuh"
#include <stdio.h>
#include <string.h>

static int g_avail = -1;              /* -1 unknown, 0 no device, 1 usable */
static char g_reason[256];
static void *g_ws;                    /* workspace */
static size_t g_ws_bytes;
static cublasHandle_t g_cublas;

/* "CUDA device 0 (NVIDIA H200)" or "CUDA device ?" when even that query fails. */
static void device_label(char *buf, size_t n) {
    int dev = -1;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
        snprintf(buf, n, "CUDA device %d (%s)", dev, p.name);
    else
        snprintf(buf, n, "CUDA device ?");
}

int skv_cuda_fail(const char *call, int code, const char *msg, const char *file, int line) {
    char dev[320];
    device_label(dev, sizeof dev);
    if (code == (int)cudaErrorMemoryAllocation) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        return skv_error("%s: %s at %s:%d failed: %s (code %d); device memory free %zu of %zu bytes",
                         dev, call, file, line, msg, code, fr, tot);
    }
    return skv_error("%s: %s at %s:%d failed: %s (code %d)", dev, call, file, line, msg, code);
}

int skv_cublas_fail(const char *call, int status, const char *file, int line) {
    char dev[320];
    device_label(dev, sizeof dev);
    return skv_error("%s: %s at %s:%d failed: cuBLAS status %d (%s)", dev, call, file, line, status,
                     cublasGetStatusString((cublasStatus_t)status));
}

extern "C" int skv_cuda_available(void) {
    if (g_avail < 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            snprintf(g_reason, sizeof g_reason, "no CUDA device: cudaGetDeviceCount failed: %s (code %d)",
                     cudaGetErrorString(e), (int)e);
            cudaGetLastError();   /* clear the sticky-free error state */
            g_avail = 0;
        } else if (n <= 0) {
            snprintf(g_reason, sizeof g_reason, "no CUDA device: cudaGetDeviceCount returned 0");
            g_avail = 0;
        } else {
            g_avail = 1;
        }
    }
    if (!g_avail) skv_error("%s", g_reason);
    return g_avail;
}

extern "C" int skv_cuda_device_info(char *buf, size_t n) {
    if (!skv_cuda_available()) return -1;
    int dev = 0;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, n, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

extern "C" void *skv_cuda_malloc(size_t bytes, const char *what) {
    if (bytes == 0) return NULL;
    if (!skv_cuda_available()) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        char dev[320];
        device_label(dev, sizeof dev);
        skv_error("%s: out of memory allocating %zu bytes (%s); device memory free %zu of %zu bytes: %s",
                  dev, bytes, what ? what : "buffer", fr, tot, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void skv_cuda_free(void *p) {
    if (p) cudaFree(p);
}

extern "C" int skv_cuda_upload(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return 0;
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return 0;
}

extern "C" int skv_cuda_download(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return 0;
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int skv_cuda_memset(void *dst, int byte, size_t bytes) {
    if (bytes == 0) return 0;
    CUDA_CHECK(cudaMemset(dst, byte, bytes));
    return 0;
}

extern "C" int skv_cuda_sync(void) {
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

void *skv_cuda_workspace(size_t bytes) {
    if (bytes <= g_ws_bytes) return g_ws;
    if (g_ws) {
        cudaFree(g_ws);   /* synchronises: no queued kernel still reads the old one */
        g_ws = NULL;
        g_ws_bytes = 0;
    }
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    g_ws = skv_cuda_malloc(want, "CUDA workspace");
    if (!g_ws) return NULL;
    g_ws_bytes = want;
    return g_ws;
}

cublasHandle_t skv_cuda_cublas(void) {
    if (!g_cublas) {
        cublasStatus_t s = cublasCreate(&g_cublas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            skv_cublas_fail("cublasCreate", (int)s, __FILE__, __LINE__);
            g_cublas = NULL;
        }
    }
    return g_cublas;
}

extern "C" void skv_cuda_shutdown(void) {
    if (g_cublas) cublasDestroy(g_cublas);
    g_cublas = NULL;
    if (g_ws) cudaFree(g_ws);
    g_ws = NULL;
    g_ws_bytes = 0;
}
