/* compensate.cu: decode-step attention of one KV group over the hot tier with SmallKV's
 * marginal compensation, on the device (mirror of kernels/cpu/compensate.c; contract in
 * compensate.h).
 *
 *   q (g, d); K_hot, V_hot (n_hot, d); Vm (n_marg, d), fp32 or fp16; pm (g, n_marg)
 *   out_i = combine(O_c, O_m) with O_c = softmax(q_i K_hot^T / sqrt d) V_hot,
 *   O_m = sum_k pm[i][k] Vm[k]; SUM / MASS / RENORM as in compensate.h.
 *
 * comp_main: block = head i, 4 warps run the online softmax over interleaved 32-slot
 *   tiles (as attn_decode), merge in shared memory, then every thread forms its columns
 *   of O_m (fixed order over k) and the combination; (m, l) of each head is saved.
 * comp_slots (only when slot_acc or head_p is requested): one thread per hot slot
 *   recomputes the g scores, p = exp(s - m) / l, writes head_p and adds to slot_acc in
 *   head order (the CPU's order).
 * Reference: skv_compensate_ref (CPU); tests/test_cuda.c compares against it. */
#include "common.cuh"

#define CMP_WARPS 4
#define CMP_DMAX 256

/* ---------------------------------------------------------------- kernels */

/* grid g, block CMP_WARPS * 32, shared q (d) + CMP_WARPS * (d + 2) + 1 floats.
 * w (g) or NULL; pm (g, nm) or NULL; ml (g, 2). */
template <int NA>
__global__ void __launch_bounds__(CMP_WARPS * 32)
comp_main(float *out, float *ml, const float *q, const void *K, const void *V, const void *Vm,
          const float *pm, const float *w, int d, int n, int nm, bool f16, int combine, float scale) {
    extern __shared__ float sm[];
    float *qs = sm, *wpart = sm + d, *mms = wpart + CMP_WARPS * (d + 2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = q[(size_t)h * d + i];
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] = 0.0f;
    for (int k0 = warp * 32; k0 < n; k0 += CMP_WARPS * 32) {
        const int nvalid = min(32, n - k0);
        float s = -INFINITY;
        if (lane < nvalid) {
            const size_t r = (size_t)(k0 + lane) * d;
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot += qs[i] * kv_load(K, f16, r + i);
            s = dot * scale;
        }
        const float mt = warp_max(s), mn = fmaxf(m, mt);
        const float p = lane < nvalid ? expf(s - mn) : 0.0f, corr = expf(m - mn);
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int a = 0; a < NA; a++) acc[a] *= corr;
        for (int j = 0; j < nvalid; j++) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int a = 0; a < NA; a++) {
                const int i = lane + 32 * a;
                if (i < d) acc[a] += pj * kv_load(V, f16, (size_t)(k0 + j) * d + i);
            }
        }
        m = mn;
    }
    float *wp = wpart + warp * (d + 2);
    if (lane == 0) { wp[0] = m; wp[1] = l; }
#pragma unroll
    for (int a = 0; a < NA; a++) {
        const int i = lane + 32 * a;
        if (i < d) wp[2 + i] = acc[a];
    }
    /* marginal mass (warp 0, fixed order) */
    const bool have_m = pm && nm > 0;
    if (warp == 0) {
        float mm = 0.0f;
        if (have_m) for (int k = lane; k < nm; k += 32) mm += pm[(size_t)h * nm + k];
        mm = warp_sum(mm);
        if (lane == 0) mms[0] = mm;
    }
    __syncthreads();
    float M = -INFINITY, L = 0.0f;
    for (int ww = 0; ww < CMP_WARPS; ww++) M = fmaxf(M, wpart[ww * (d + 2)]);
    for (int ww = 0; ww < CMP_WARPS; ww++) {
        const float mw = wpart[ww * (d + 2)];
        if (mw != -INFINITY) L += wpart[ww * (d + 2) + 1] * expf(mw - M);
    }
    const float mm = mms[0];
    float ca = 1.0f, cb = 1.0f;
    const float wh = w ? w[h] : 1.0f;
    if (combine == SKV_COMBINE_MASS) ca = wh;
    else if (combine == SKV_COMBINE_RENORM) {
        const float den = wh + mm;
        if (den > 0) { ca = wh / den; cb = 1.0f / den; }
        else { ca = 1.0f; cb = 0.0f; }
    }
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float oc = 0.0f;
        if (n > 0) {
            for (int ww = 0; ww < CMP_WARPS; ww++) {
                const float mw = wpart[ww * (d + 2)];
                if (mw != -INFINITY) oc += wpart[ww * (d + 2) + 2 + i] * expf(mw - M);
            }
            oc /= L;
        }
        float r = oc;
        if (have_m) {
            float om = 0.0f;
            for (int k = 0; k < nm; k++) om += pm[(size_t)h * nm + k] * kv_load(Vm, f16, (size_t)k * d + i);
            r = ca * oc + cb * om;
        }
        out[(size_t)h * d + i] = r;
    }
    if (threadIdx.x == 0) { ml[2 * h] = M; ml[2 * h + 1] = L; }
}

/* One thread per hot slot s: head_p (g, n) and slot_acc (n). */
__global__ void comp_slots(float *slot_acc, float *head_p, const float *q, const void *K, const float *ml,
                           int g, int d, int n, bool f16, float scale) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    float acc = slot_acc ? slot_acc[s] : 0.0f;
    for (int h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * d;
        float dot = 0.0f;
        for (int i = 0; i < d; i++) dot += qh[i] * kv_load(K, f16, (size_t)s * d + i);
        const float p = expf(dot * scale - ml[2 * h]) / ml[2 * h + 1];
        if (head_p) head_p[(size_t)h * n + s] = p;
        acc += p;
    }
    if (slot_acc) slot_acc[s] = acc;
}

/* ---------------------------------------------------------------- launchers */

template <int NA>
static int launch_main(float *out, float *ml, const float *q, const skv_comp_args *a, float scale) {
    const size_t shm = (size_t)(a->d + CMP_WARPS * (a->d + 2) + 1) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(comp_main<NA>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
    comp_main<NA><<<a->g, CMP_WARPS * 32, shm>>>(out, ml, q, a->k, a->v, a->vm, a->pm, a->w, a->d, a->n_hot,
                                                 a->n_marg, a->f16, (int)a->combine, scale);
    CUDA_CHECK_LAUNCH("comp_main");
    return 0;
}

extern "C" int skv_cuda_compensate(float *out, const float *q, const skv_comp_args *a) {
    if (a->g <= 0) return 0;
    if (a->d <= 0 || a->d > CMP_DMAX) return skv_error("CUDA compensate: head_dim %d not in 1..%d", a->d, CMP_DMAX);
    if (a->n_hot < 0 || a->n_marg < 0) return skv_error("CUDA compensate: negative slot count");
    /* the kernel has no log(mult) term: refuse rather than weight merged slots as one token */
    if (a->mult) return skv_error("CUDA compensate: slot multiplicities (EMS merging) are not supported on the GPU");
    if (a->head_mask) return skv_error("CUDA compensate: per-attention-head selection is not supported on the GPU");
    const float scale = 1.0f / sqrtf((float)a->d);
    float *ml = (float *)skv_cuda_workspace((size_t)a->g * 2 * sizeof(float));
    if (!ml) return skv_error_prefix("CUDA compensate (g=%d)", a->g);
    const int na = (a->d + 31) / 32;
    int rc = na <= 2 ? launch_main<2>(out, ml, q, a, scale)
           : na <= 4 ? launch_main<4>(out, ml, q, a, scale)
                     : launch_main<8>(out, ml, q, a, scale);
    if (rc != 0) return rc;
    if ((a->slot_acc || a->head_p) && a->n_hot > 0) {
        comp_slots<<<skv_blocks(a->n_hot, 128), 128>>>(a->slot_acc, a->head_p, q, a->k, ml, a->g, a->d,
                                                       a->n_hot, a->f16, scale);
        CUDA_CHECK_LAUNCH("comp_slots");
    }
    return 0;
}
