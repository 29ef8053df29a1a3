/* backend.h: the CUDA backend's C API: device discovery, device buffers, weights uploaded
 * once, and one launcher per CPU kernel with the same argument conventions.
 *
 * Every pointer passed to a launcher is a device pointer (skv_cuda_malloc), including
 * the optional outputs inside skv_attn_args / skv_comp_args (colsum, lastrow, slot_acc,
 * head_p); scratch fields meant for the CPU are ignored. Launchers enqueue work on the
 * default stream and return 0, or -1 with skv_last_error() naming the device, the
 * failing call and file:line. Errors inside a kernel surface at the next synchronising
 * call (skv_cuda_sync, a copy to the host). Out of memory is reported with the size that
 * did not fit and the device's free/total memory; nothing aborts.
 *
 * The implementation is compiled only with `make CUDA=1` (SKV_CUDA defined for C files).
 * Mirrors: kernels/cpu/matmul.h -> matmul.cu, attention.h -> attention.cu,
 * ops.h -> ops.cu, compensate.h -> compensate.cu, topk.h -> topk.cu.
 * copyq.cu (no CPU mirror): pinned host memory and the copy stream of the CUDA session's
 * hot-tier uploads (runtime/backend/session_cuda.c). */
#ifndef SKV_CUDA_BACKEND_H
#define SKV_CUDA_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/tensor.h"
#include "kernels/args.h"

/* ---------------------------------------------------------------- device */

/* 1 if a CUDA device is usable (cudaGetDeviceCount succeeds with >= 1 device), else 0
 * with the reason in skv_last_error(). Cheap after the first call. */
int skv_cuda_available(void);
/* "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" into buf; -1 + error without a device. */
int skv_cuda_device_info(char *buf, size_t n);

/* ---------------------------------------------------------------- buffers */

/* cudaMalloc with a report on failure: "CUDA device 0 (...): out of memory allocating
 * N bytes (what); free F of T bytes". NULL + error; bytes == 0 returns NULL, no error. */
void *skv_cuda_malloc(size_t bytes, const char *what);
void skv_cuda_free(void *p);
int skv_cuda_upload(void *dst, const void *src, size_t bytes);     /* host -> device */
int skv_cuda_download(void *dst, const void *src, size_t bytes);   /* device -> host */
int skv_cuda_memset(void *dst, int byte, size_t bytes);
/* Wait for all queued work; reports faults from inside kernels. */
int skv_cuda_sync(void);
/* Release the shared workspace and the cuBLAS handle (optional, at exit). */
void skv_cuda_shutdown(void);

/* ---------------------------------------------------------------- matmul (matmul.cu) */

/* A weight on the device. q: the stored blocks, byte for byte (rows * row_bytes), used by
 * the decode GEMV; f16: (rows, cols) dequantised to fp16, used by the cuBLAS GEMM for
 * prefill. Either may be absent (NULL), not both. */
typedef struct {
    int type;               /* skv_type */
    int64_t rows, cols;
    size_t row_bytes;       /* skv_row_bytes(type, cols) */
    void *q;                /* device, rows * row_bytes, or NULL */
    void *f16;              /* device __half (rows, cols), or NULL */
} skv_cuda_weight;

enum {
    SKV_CUDA_W_QUANT = 1,   /* keep the stored blocks (decode GEMV) */
    SKV_CUDA_W_F16 = 2,     /* keep a dequantised fp16 copy (prefill GEMM) */
};

/* Upload W once. flags: SKV_CUDA_W_QUANT | SKV_CUDA_W_F16 (0 means both). The fp16 copy
 * is made on the device from the uploaded blocks (same arithmetic as quant.c, then
 * rounded to fp16). -1 + error (unsupported type, size overflow, out of memory). */
int skv_cuda_weight_upload(skv_cuda_weight *dw, const skv_weight *W, int flags);
void skv_cuda_weight_free(skv_cuda_weight *dw);
/* Types with a quantised GEMV kernel (decode without the fp16 copy). */
int skv_cuda_gemv_supported(int type);

/* y (T, rows) = x (T, cols) @ W^T, device pointers. T < skv_cuda_gemm_min_t() (or no
 * fp16 copy): the quantised GEMV, fp32 activations; otherwise cuBLAS GemmEx with fp16
 * inputs and fp32 accumulation (activations scaled per row by a power of two so they
 * fit fp16). */
int skv_cuda_matmul(float *y, const float *x, const skv_cuda_weight *W, int T);
int skv_cuda_gemm_min_t(void);
/* Force a path for tests: 0 auto, 1 GEMV always, 2 GEMM always (needs the fp16 copy). */
void skv_cuda_matmul_force(int path);
/* The GEMV/dequant kernels' block decoders run on the host (no GPU needed): one row of
 * cols (multiple of 32) weights -> dst. For tests against skv_dequant_row. -1 + error. */
int skv_cuda_dequant_row_host(int type, const void *row, float *dst, int64_t cols);

/* ---------------------------------------------------------------- attention (attention.cu) */

/* Same contract as skv_attention (attention.h): q (T, H, d), kc/vc (Hkv, S_cap, d) fp32 or
 * fp16, out (T, H, d); optional colsum/lastrow (H, S_cap) on the device. d <= 256.
 * T == 1 uses the split-key decode kernel, T > 1 the tiled prefill kernel; scores are
 * written by a second pass that re-derives A from the saved row max and sum. */
int skv_cuda_attention(float *out, const float *q, const void *kc, const void *vc,
                       const skv_attn_args *a);

/* ---------------------------------------------------------------- ops (ops.cu) */

int skv_cuda_rmsnorm(float *out, const float *x, const float *w, int T, int n, float eps);
/* pos: device (T) ints. head_dim <= 1024. */
int skv_cuda_rope(float *x, const int *pos, int T, int n_heads, int head_dim, float theta,
                  skv_rope_mode mode);
int skv_cuda_swiglu(float *out, const float *gate, const float *up, int n);
/* In-place softmax of `rows` rows of n values (skv_softmax is rows = 1). */
int skv_cuda_softmax(float *x, int rows, int n);

/* ---------------------------------------------------------------- compensate (compensate.cu) */

/* Same contract as skv_compensate (compensate.h), all pointers on the device (k, v, vm,
 * pm, w, slot_acc, head_p); a->scratch is ignored. d <= 256. */
int skv_cuda_compensate(float *out, const float *q, const skv_comp_args *a);

/* ---------------------------------------------------------------- top-k (topk.cu) */

/* For each of H rows of score (row h at score + h * stride, n values): the k positions
 * with the highest scores (ties: the later position wins, as skv_topk), written to
 * idx + h * k in ascending position order. k > n selects all n and fills the rest with
 * -1. NaN scores rank below every number. n <= 2^31 - 1. */
int skv_cuda_topk(int *idx, const float *score, int H, int n, size_t stride, int k);

/* ---------------------------------------------------------------- forward glue (forward_ops.cu) */

/* y (T, n) += b (n) */
int skv_cuda_add_bias(float *y, const float *b, int T, int n);
/* x (n) += y (n) */
int skv_cuda_add(float *x, const float *y, size_t n);
/* src (T, Hkv, d) fp32 -> one layer's cache (Hkv, S_cap, d) at rows pos0 .. pos0+T-1, stored as
 * fp16 (f16 != 0, round to nearest even) or fp32: runtime/engine/forward.c's cache_write. */
int skv_cuda_kv_write(void *cache, const float *src, int T, int Hkv, int d, int S_cap, int pos0, int f16);
/* Free and total device memory in bytes (cudaMemGetInfo). -1 + error without a device. */
int skv_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---------------------------------------------------------------- copy queue (copyq.cu) */

/* Page-locked (pinned) host memory, for asynchronous copies. NULL + error (size in the
 * message); bytes == 0 returns NULL, no error. */
void *skv_cuda_host_alloc(size_t bytes, const char *what);
void skv_cuda_host_free(void *p);

/* One row copy of a scatter: `bytes` bytes from offset src_off of the uploaded data to the
 * device address dst. */
typedef struct {
    uint64_t dst;           /* device pointer, (uint64_t)(uintptr_t) */
    uint32_t src_off, bytes;
} skv_cuda_row_copy;

/* A second stream (non-blocking) for host -> device row uploads, an event marking the end
 * of the last batch, and the device staging it owns:
 *   scatter     uploads rows (n entries) and data (data_bytes), both in pinned host memory,
 *               into the staging on the copy stream, copies every row to its destination
 *               there (one small kernel), records the event and makes the default stream
 *               wait for it: work queued on the default stream afterwards (the attention)
 *               sees the rows; work queued before is not delayed.
 *   wait_host   blocks the host until the last batch is done: only then may the caller
 *               rewrite the pinned buffers it passed (or free destinations).
 * The staging grows on demand (after waiting for the queue). -1 + error. */
typedef struct skv_cuda_copyq skv_cuda_copyq;
skv_cuda_copyq *skv_cuda_copyq_new(void);
void skv_cuda_copyq_free(skv_cuda_copyq *q);   /* waits for the queue first */
int skv_cuda_copyq_wait_host(skv_cuda_copyq *q);
int skv_cuda_copyq_scatter(skv_cuda_copyq *q, const skv_cuda_row_copy *rows, int n, const void *data,
                           size_t data_bytes);

#endif
