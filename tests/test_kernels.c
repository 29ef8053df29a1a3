/* test_kernels.c: the elementwise ops (kernels/cpu/ops.c) against plain double-precision
 * formulas. Tolerances: rmsnorm/swiglu/softmax 1e-6 relative (float rounding only);
 * rope 2e-6 absolute at positions up to 4000 (angles are computed in double). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>
#include "kernels/cpu/ops.h"

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) * 2.0f - 1.0f;
}

static void test_rmsnorm(void **state) {
    (void)state;
    enum { T = 3, N = 37 };
    float x[T * N], w[N], out[T * N];
    for (int i = 0; i < T * N; i++) x[i] = 3.0f * frand();
    for (int i = 0; i < N; i++) w[i] = 1.0f + frand();
    skv_rmsnorm(out, x, w, T, N, 1e-5f);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < N; i++) ss += (double)x[t * N + i] * x[t * N + i];
        double s = 1.0 / sqrt(ss / N + 1e-5);
        for (int i = 0; i < N; i++) {
            double e = x[t * N + i] * s * w[i];
            assert_true(fabs(out[t * N + i] - e) <= 1e-6 * (fabs(e) + 1e-3));
        }
    }
    skv_rmsnorm(x, x, w, T, N, 1e-5f);   /* in place is allowed */
    assert_memory_equal(x, out, sizeof out);
}

/* plain formula: pair (a, b) rotated by pos * theta^(-2i/d) */
static void rope_plain(double *v, int pos, int d, double theta, int halves) {
    for (int i = 0; i < d / 2; i++) {
        double ang = pos * pow(theta, -2.0 * i / d);
        int ia = halves ? i : 2 * i, ib = halves ? i + d / 2 : 2 * i + 1;
        double a = v[ia], b = v[ib];
        v[ia] = a * cos(ang) - b * sin(ang);
        v[ib] = a * sin(ang) + b * cos(ang);
    }
}

static void test_rope_modes(void **state) {
    (void)state;
    enum { T = 3, H = 2, D = 64 };
    const int pos[T] = { 0, 7, 4000 };
    float x0[T * H * D];
    for (int i = 0; i < T * H * D; i++) x0[i] = frand();
    float xa[T * H * D], xh[T * H * D];
    memcpy(xa, x0, sizeof x0);
    memcpy(xh, x0, sizeof x0);
    skv_rope(xa, pos, T, H, D, 10000.0f, SKV_ROPE_ADJACENT);
    skv_rope(xh, pos, T, H, D, 10000.0f, SKV_ROPE_HALVES);
    for (int mode = 0; mode < 2; mode++) {
        const float *got = mode ? xh : xa;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                double v[D];
                for (int i = 0; i < D; i++) v[i] = x0[(t * H + h) * D + i];
                rope_plain(v, pos[t], D, 10000.0, mode);
                for (int i = 0; i < D; i++)
                    if (fabs(got[(t * H + h) * D + i] - v[i]) > 2e-6)
                        fail_msg("rope mode %d t=%d h=%d i=%d: %g vs %g", mode, t, h, i, got[(t * H + h) * D + i], v[i]);
            }
    }
    /* position 0 is the identity in both modes */
    assert_memory_equal(xa, x0, sizeof(float) * H * D);
    /* the two pairings differ at position > 0 */
    double diff = 0;
    for (int i = H * D; i < T * H * D; i++) diff += fabs(xa[i] - xh[i]);
    assert_true(diff > 1.0);
}

static void test_swiglu(void **state) {
    (void)state;
    enum { N = 101 };
    float g[N], u[N], o[N];
    for (int i = 0; i < N; i++) { g[i] = 8.0f * frand(); u[i] = frand(); }
    g[3] = 100.0f; g[4] = -100.0f; g[5] = 0.0f;   /* the ends of exp's range */
    skv_swiglu(o, g, u, N);
    for (int i = 0; i < N; i++) {
        double e = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(o[i] - e) <= 1e-6 * (fabs(e) + 1e-6));
    }
    /* an element's bits do not depend on where the call's range starts (threads split rows
     * at any offset) */
    for (int off = 1; off < 9; off++) {
        float o2[N];
        skv_swiglu(o2 + off, g + off, u + off, N - off);
        assert_memory_equal(o2 + off, o + off, sizeof(float) * (N - off));
    }
}

static void test_softmax(void **state) {
    (void)state;
    enum { N = 53 };
    float x[N];
    double e[N], s = 0, mx = -1e30;
    for (int i = 0; i < N; i++) { x[i] = 20.0f * frand(); mx = fmax(mx, x[i]); }
    for (int i = 0; i < N; i++) { e[i] = exp(x[i] - mx); s += e[i]; }
    skv_softmax(x, N);
    double tot = 0;
    for (int i = 0; i < N; i++) { assert_true(fabs(x[i] - e[i] / s) <= 1e-6 * (e[i] / s) + 1e-9); tot += x[i]; }
    assert_true(fabs(tot - 1.0) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope_modes),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
