/* ops.c: the small elementwise kernels of the decoder: RMSNorm, RoPE (both pairings, from
 * theta or from a frequency table), SwiGLU, GeGLU, softcapping and softmax. They are cheap next to the matmuls, so they stay close to the
 * plain formulas (double sum in RMSNorm, expf in softmax); RMSNorm's scaling loop and
 * SwiGLU are vectorised (SwiGLU's scalar expf was 3 % of a 4K-token prefill of
 * Qwen2.5-1.5B once the matrices ran int8). */
#include "ops.h"
#include "simd_math.h"
#include <immintrin.h>
#include <math.h>

/* out (T, n) = x (T, n) / sqrt(mean(x^2) + eps) * w (n) */
void skv_rmsnorm(float *out, const float *x, const float *w, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *o = out + (size_t)t * n;
        double ss = 0.0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / n + (double)eps));
        __m256 vs = _mm256_set1_ps(s);
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vs), _mm256_loadu_ps(w + i)));
        for (; i < n; i++) o[i] = xr[i] * s * w[i];
    }
}

/* x (T, n_heads, d): pair i (0 <= i < d/2) is rotated by angle pos[t] * theta^(-2i/d)
 * (angle and cos/sin in double, so large positions stay exact to float rounding).
 * ADJACENT pairs (x[2i], x[2i+1]); HALVES pairs (x[i], x[i + d/2]). */
void skv_rope_table(float *cs, float *sn, int pos, int head_dim, float theta) {
    for (int i = 0; i < head_dim / 2; i++) {
        double ang = (double)pos * pow((double)theta, -(double)(2 * i) / head_dim);
        cs[i] = (float)cos(ang);
        sn[i] = (float)sin(ang);
    }
}

void skv_rope_apply(float *x, int n_heads, int head_dim, const float *cs, const float *sn, skv_rope_mode mode) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        if (mode == SKV_ROPE_ADJACENT) {
            for (int i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * cs[i] - b * sn[i];
                v[2 * i + 1] = a * sn[i] + b * cs[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cs[i] - b * sn[i];
                v[i + half] = a * sn[i] + b * cs[i];
            }
        }
    }
}

void skv_rope(float *x, const int *pos, int T, int n_heads, int head_dim, float theta,
              skv_rope_mode mode) {
    float cs[512], sn[512];           /* head_dim <= 1024 */
    if (head_dim / 2 > 512) return;
    for (int t = 0; t < T; t++) {
        skv_rope_table(cs, sn, pos[t], head_dim, theta);
        skv_rope_apply(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, cs, sn, mode);
    }
}

void skv_rope_table_freq(float *cs, float *sn, int pos, int head_dim, const float *inv) {
    for (int i = 0; i < head_dim / 2; i++) {
        double ang = (double)pos * (double)inv[i];
        cs[i] = (float)cos(ang);
        sn[i] = (float)sin(ang);
    }
}

void skv_rope_freq(float *x, const int *pos, int T, int n_heads, int head_dim, const float *inv, skv_rope_mode mode) {
    float cs[512], sn[512];           /* head_dim <= 1024 (skv_config_check) */
    if (head_dim / 2 > 512) return;
    for (int t = 0; t < T; t++) {
        skv_rope_table_freq(cs, sn, pos[t], head_dim, inv);
        skv_rope_apply(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, cs, sn, mode);
    }
}

/* 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up */
void skv_geglu(float *out, const float *gate, const float *up, int n) {
    const float k = 0.7978845608028654f;
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void skv_softcap(float *x, int n, float cap) {
    for (int i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

/* out (n) = gate / (1 + exp(-gate)) * up, 8 at a time with the polynomial exp (skv_exp8,
 * relative error ~2e-7); the last n % 8 go through the same lanes from a padded copy, so an
 * element's value does not depend on where a call's range starts (the decode forward splits
 * a row among threads at any offset). */
static inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 e = skv_exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void skv_swiglu(float *out, const float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0}, o[8];
        for (int j = 0; j < n - i; j++) { g[j] = gate[i + j]; u[j] = up[i + j]; }
        _mm256_storeu_ps(o, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        for (int j = 0; j < n - i; j++) out[i + j] = o[j];
    }
}

void skv_softmax(float *x, int n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

int skv_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}
