/* copyq.cu: pinned host memory and the copy queue (backend.h): a second, non-blocking
 * stream on which the CUDA session uploads hot-tier rows (new tokens, evictions' moves,
 * restores from the cold tier) and scatters them into the hot arenas, with an event that
 * the default stream waits on before the attention reads the slots.
 *
 * Ordering, all on the device side, no host waits in the normal path:
 *   copy stream:    H2D rows table, H2D data, scatter_rows, record ev
 *   default stream: cudaStreamWaitEvent(ev) -> later kernels see the rows
 * Batches on the copy stream run in order, so a batch's H2D into the staging cannot
 * overtake the previous batch's scatter reading it. The host rewrites its pinned buffers
 * only after skv_cuda_copyq_wait_host (event synchronize). */
#include "common.cuh"

struct skv_cuda_copyq {
    cudaStream_t st;
    cudaEvent_t ev;
    bool ev_recorded;          /* a batch was issued (the event means something) */
    void *stage;               /* device: rows table, then data (16-byte aligned) */
    size_t stage_bytes;
};

/* grid = n entries, one block per row copy; 4-byte words when everything is aligned. */
__global__ void scatter_rows(const skv_cuda_row_copy *rows, const unsigned char *data) {
    const skv_cuda_row_copy r = rows[blockIdx.x];
    unsigned char *dst = (unsigned char *)(uintptr_t)r.dst;
    const unsigned char *src = data + r.src_off;
    if (((r.dst | r.src_off | r.bytes) & 3u) == 0) {
        const unsigned n = r.bytes >> 2;
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
    } else {
        for (unsigned i = threadIdx.x; i < r.bytes; i += blockDim.x) dst[i] = src[i];
    }
}

extern "C" void *skv_cuda_host_alloc(size_t bytes, const char *what) {
    if (bytes == 0) return NULL;
    if (!skv_cuda_available()) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        skv_error("CUDA: cannot allocate %zu bytes of pinned host memory (%s): %s (code %d)", bytes,
                  what ? what : "buffer", cudaGetErrorString(e), (int)e);
        return NULL;
    }
    return p;
}

extern "C" void skv_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" skv_cuda_copyq *skv_cuda_copyq_new(void) {
    if (!skv_cuda_available()) return NULL;
    skv_cuda_copyq *q = (skv_cuda_copyq *)skv_calloc(1, sizeof *q, "CUDA copy queue");
    if (!q) return NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&q->st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        skv_cuda_fail("cudaStreamCreateWithFlags", (int)e, cudaGetErrorString(e), __FILE__, __LINE__);
        free(q);
        return NULL;
    }
    e = cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        skv_cuda_fail("cudaEventCreateWithFlags", (int)e, cudaGetErrorString(e), __FILE__, __LINE__);
        cudaStreamDestroy(q->st);
        free(q);
        return NULL;
    }
    return q;
}

extern "C" int skv_cuda_copyq_wait_host(skv_cuda_copyq *q) {
    if (!q || !q->ev_recorded) return 0;
    CUDA_CHECK(cudaEventSynchronize(q->ev));
    return 0;
}

extern "C" void skv_cuda_copyq_free(skv_cuda_copyq *q) {
    if (!q) return;
    if (q->ev_recorded) cudaEventSynchronize(q->ev);
    cudaStreamSynchronize(q->st);
    skv_cuda_free(q->stage);
    cudaEventDestroy(q->ev);
    cudaStreamDestroy(q->st);
    free(q);
}

extern "C" int skv_cuda_copyq_scatter(skv_cuda_copyq *q, const skv_cuda_row_copy *rows, int n, const void *data,
                                      size_t data_bytes) {
    if (!q || n < 0 || (n > 0 && (!rows || !data))) return skv_error("CUDA copy queue: bad arguments");
    if (n == 0) return 0;
    const size_t tbytes = (size_t)n * sizeof(skv_cuda_row_copy), toff = (tbytes + 15) & ~(size_t)15;
    if (data_bytes > SIZE_MAX - toff) return skv_error("CUDA copy queue: %d rows, %zu bytes overflow", n, data_bytes);
    const size_t need = toff + data_bytes;
    if (need > q->stage_bytes) {
        /* the previous batch may still read the old staging */
        if (skv_cuda_copyq_wait_host(q) != 0) return -1;
        skv_cuda_free(q->stage);
        q->stage = NULL;
        q->stage_bytes = 0;
        size_t want = need < ((size_t)1 << 20) ? ((size_t)1 << 20) : need + need / 2;
        if (!(q->stage = skv_cuda_malloc(want, "hot tier upload staging"))) return -1;
        q->stage_bytes = want;
    }
    unsigned char *st = (unsigned char *)q->stage;
    CUDA_CHECK(cudaMemcpyAsync(st, rows, tbytes, cudaMemcpyHostToDevice, q->st));
    if (data_bytes) CUDA_CHECK(cudaMemcpyAsync(st + toff, data, data_bytes, cudaMemcpyHostToDevice, q->st));
    scatter_rows<<<(unsigned)n, 128, 0, q->st>>>((const skv_cuda_row_copy *)st, st + toff);
    CUDA_CHECK_LAUNCH("scatter_rows");
    CUDA_CHECK(cudaEventRecord(q->ev, q->st));
    q->ev_recorded = true;
    /* the legacy default stream (every launcher's) waits for the rows */
    CUDA_CHECK(cudaStreamWaitEvent(0, q->ev, 0));
    return 0;
}
