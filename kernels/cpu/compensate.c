/* compensate.c: attention over the hot tier + marginal compensation (see compensate.h).
 * skv_compensate_ref is the plain scalar definition; skv_compensate does the dots (8 slots
 * per step, transpose-added), the softmax (polynomial exp, simd_math.h) and the V sums with
 * AVX2 (fp16 rows converted with F16C) and is tested against it. */
#include "compensate.h"
#include "simd_math.h"
#include "common/util.h"
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float elem(const void *p, bool f16, size_t i) {
    return f16 ? skv_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* out (d) = combine(O_c, O_m) for one head; oc holds O_c, om O_m. */
static void combine_head(float *out, const float *oc, const float *om, int d, float w, float mm,
                         skv_combine mode, bool have_m) {
    if (!have_m) { memcpy(out, oc, (size_t)d * sizeof(float)); return; }
    float a = 1.0f, b = 1.0f;
    if (mode == SKV_COMBINE_MASS) a = w;
    else if (mode == SKV_COMBINE_RENORM) {
        float den = w + mm;
        if (den > 0) { a = w / den; b = 1.0f / den; }
        else { a = 1.0f; b = 0.0f; }
    }
    for (int i = 0; i < d; i++) out[i] = a * oc[i] + b * om[i];
}

void skv_compensate_ref(float *out, const float *q, const skv_comp_args *a) {
    const int g = a->g, d = a->d, n = a->n_hot, nm = a->n_marg;
    const float scale = 1.0f / sqrtf((float)d);
    float *p = a->scratch;
    const bool have_m = a->pm && nm > 0;
    for (int h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * d;
        float oc[d > 0 ? d : 1], om[d > 0 ? d : 1];
        memset(oc, 0, sizeof oc);
        memset(om, 0, sizeof om);
        if (n > 0) {
            float mx = -INFINITY;
            for (int s = 0; s < n; s++) {
                float dot = 0;
                for (int i = 0; i < d; i++) dot += qh[i] * elem(a->k, a->f16, (size_t)s * d + i);
                p[s] = dot * scale + (a->mult && a->mult[s] != 1 ? logf((float)a->mult[s]) : 0.0f);
                if (a->head_mask && !a->head_mask[(size_t)h * n + s]) p[s] = -INFINITY;   /* not this head's */
                if (p[s] > mx) mx = p[s];
            }
            float sum = 0;
            for (int s = 0; s < n; s++) { p[s] = expf(p[s] - mx); sum += p[s]; }
            for (int s = 0; s < n; s++) p[s] /= sum;
            for (int s = 0; s < n; s++)
                for (int i = 0; i < d; i++) oc[i] += p[s] * elem(a->v, a->f16, (size_t)s * d + i);
            if (a->slot_acc) for (int s = 0; s < n; s++) a->slot_acc[s] += p[s];
            if (a->head_p) memcpy(a->head_p + (size_t)h * n, p, (size_t)n * sizeof(float));
        }
        float mm = 0;
        if (have_m) {
            const float *pm = a->pm + (size_t)h * nm;
            for (int k = 0; k < nm; k++) {
                mm += pm[k];
                for (int i = 0; i < d; i++) om[i] += pm[k] * elem(a->vm, a->f16, (size_t)k * d + i);
            }
        }
        combine_head(out + (size_t)h * d, oc, om, d, a->w ? a->w[h] : 1.0f, mm, a->combine, have_m);
    }
}

/* p[s] = q . K[s] * scale for the slots s < n rounded down to 8, 8 at a time (d % 8 == 0).
 * Returns the number of slots done. */
static int scores8(float *p, const float *q, const void *K, bool f16, int d, int n, float scale) {
    const __m256 vsc = _mm256_set1_ps(scale);
    int s = 0;
    for (; s + 8 <= n; s += 8) _mm256_storeu_ps(p + s, _mm256_mul_ps(skv_dot8_keys(q, K, f16, (size_t)s, d), vsc));
    return s;
}

/* p (n) <- softmax(p) */
static void softmax_row(float *p, int n) {
    const float inv = 1.0f / skv_exp_sum(p, n, skv_max_row(p, n));
    const __m256 vinv = _mm256_set1_ps(inv);
    int s = 0;
    for (; s + 8 <= n; s += 8) _mm256_storeu_ps(p + s, _mm256_mul_ps(_mm256_loadu_ps(p + s), vinv));
    for (; s < n; s++) p[s] *= inv;
}

/* o (d) = sum_s w[s] * X[s] over n rows of X (n, d) */
static void wsum_rows(float *o, const float *w, const void *X, bool f16, int n, int d) {
    const int d8 = d & ~7;
    int i0 = 0;
    for (; i0 + 32 <= d8; i0 += 32) {
        __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        for (int s = 0; s < n; s++) {
            __m256 ws = _mm256_broadcast_ss(w + s);
            size_t r = (size_t)s * d + i0;
            c0 = _mm256_fmadd_ps(ws, skv_load8(X, f16, r), c0);
            c1 = _mm256_fmadd_ps(ws, skv_load8(X, f16, r + 8), c1);
            c2 = _mm256_fmadd_ps(ws, skv_load8(X, f16, r + 16), c2);
            c3 = _mm256_fmadd_ps(ws, skv_load8(X, f16, r + 24), c3);
        }
        _mm256_storeu_ps(o + i0, c0); _mm256_storeu_ps(o + i0 + 8, c1);
        _mm256_storeu_ps(o + i0 + 16, c2); _mm256_storeu_ps(o + i0 + 24, c3);
    }
    for (; i0 < d8; i0 += 8) {
        __m256 c = _mm256_setzero_ps();
        for (int s = 0; s < n; s++) c = _mm256_fmadd_ps(_mm256_broadcast_ss(w + s), skv_load8(X, f16, (size_t)s * d + i0), c);
        _mm256_storeu_ps(o + i0, c);
    }
    for (int i = d8; i < d; i++) {
        float c = 0;
        for (int s = 0; s < n; s++) c += w[s] * elem(X, f16, (size_t)s * d + i);
        o[i] = c;
    }
}

void skv_compensate(float *out, const float *q, const skv_comp_args *a) {
    const int g = a->g, d = a->d, n = a->n_hot, nm = a->n_marg, d8 = d & ~7;
    const float scale = 1.0f / sqrtf((float)d);
    float *p = a->scratch;
    const bool have_m = a->pm && nm > 0;
    for (int h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * d;
        float oc[d > 0 ? d : 1], om[d > 0 ? d : 1];
        if (n > 0) {
            int s = 0;
            if (d8 == d) s = scores8(p, qh, a->k, a->f16, d, n, scale);   /* 8 slots at a time */
            for (; s < n; s++) {
                const size_t r = (size_t)s * d;
                __m256 acc = _mm256_setzero_ps();
                for (int i = 0; i < d8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), skv_load8(a->k, a->f16, r + i), acc);
                float dot = skv_hsum8(acc);
                for (int i = d8; i < d; i++) dot += qh[i] * elem(a->k, a->f16, r + i);
                p[s] = dot * scale;
            }
            if (a->mult)
                for (s = 0; s < n; s++)
                    if (a->mult[s] != 1) p[s] += logf((float)a->mult[s]);
            if (a->head_mask) {   /* per-attention-head selection: the slots of other heads' sets */
                const unsigned char *m = a->head_mask + (size_t)h * n;
                for (s = 0; s < n; s++)
                    if (!m[s]) p[s] = -INFINITY;
            }
            softmax_row(p, n);
            if (a->head_mask) {   /* exactly 0 (the vector exp stops at e^-87.3, not 0) */
                const unsigned char *m = a->head_mask + (size_t)h * n;
                for (s = 0; s < n; s++)
                    if (!m[s]) p[s] = 0;
            }
            wsum_rows(oc, p, a->v, a->f16, n, d);
            if (a->slot_acc) for (int s = 0; s < n; s++) a->slot_acc[s] += p[s];
            if (a->head_p) memcpy(a->head_p + (size_t)h * n, p, (size_t)n * sizeof(float));
        } else {
            memset(oc, 0, sizeof oc);
        }
        float mm = 0;
        if (have_m) {
            const float *pm = a->pm + (size_t)h * nm;
            for (int k = 0; k < nm; k++) mm += pm[k];
            wsum_rows(om, pm, a->vm, a->f16, nm, d);
        }
        combine_head(out + (size_t)h * d, oc, om, d, a->w ? a->w[h] : 1.0f, mm, a->combine, have_m);
    }
}
