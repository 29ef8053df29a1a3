/* test_sampling.c: the next-token rule (runtime/session/sampling.c) that the CPU session API and
 * the CUDA generate path share:
 *   - argmax takes the first maximum;
 *   - temperature <= 0 or no rng state is greedy and leaves the state alone;
 *   - T = 1 draws follow softmax(x) (20000 draws, each frequency within 0.015), the same
 *     seed gives the same draws, logits shifted by a constant give the same draws;
 *   - T = 2 flattens the distribution as softmax(x / 2) says; a tiny T is greedy;
 *   - speculative sampling's accept / resample rule gives p's distribution for a flat q, a q
 *     missing part of p's support, and q = p (never rejects). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include "runtime/session/sampling.h"

static void test_argmax_first(void **st) {
    (void)st;
    const float x[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    assert_int_equal(skv_argmax(x, 5), 1);
    assert_int_equal(skv_argmax(x, 1), 0);
}

static void test_greedy(void **st) {
    (void)st;
    const float x[4] = {0.1f, 0.3f, 0.2f, 0.3f};
    unsigned long long rng = 12345;
    assert_int_equal(skv_sample_logits(x, 4, 0.0f, &rng), 1);
    assert_int_equal(skv_sample_logits(x, 4, -1.0f, &rng), 1);
    assert_int_equal(skv_sample_logits(x, 4, 1.0f, NULL), 1);
    assert_true(rng == 12345);   /* greedy draws nothing */
}

/* frequencies of n draws at temperature T against softmax(x / T) */
static void check_freq(const float *x, int V, float T, int n, unsigned long long seed) {
    int count[8] = {0};
    unsigned long long rng = seed;
    for (int i = 0; i < n; i++) {
        int t = skv_sample_logits(x, V, T, &rng);
        assert_true(t >= 0 && t < V);
        count[t]++;
    }
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(x[i] / T);
    for (int i = 0; i < V; i++) assert_true(fabs(count[i] / (double)n - exp(x[i] / T) / z) < 0.015);
}

static void test_distribution(void **st) {
    (void)st;
    const float x[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    check_freq(x, 4, 1.0f, 20000, 7);
    check_freq(x, 4, 2.0f, 20000, 0);   /* seed 0: the fixed constant */
    /* the same seed gives the same draws; a constant shift of the logits changes nothing */
    const float y[4] = {x[0] + 30, x[1] + 30, x[2] + 30, x[3] + 30};
    unsigned long long a = 99, b = 99;
    int differ = 0, spread = 0;
    for (int i = 0; i < 200; i++) {
        int ta = skv_sample_logits(x, 4, 1.0f, &a), tb = skv_sample_logits(y, 4, 1.0f, &b);
        differ += ta != tb;
        spread += ta != 0;
    }
    assert_int_equal(differ, 0);
    assert_true(spread > 50);   /* not greedy */
    assert_true(a == b && a != 99);
}

static void test_tiny_temperature(void **st) {
    (void)st;
    const float x[3] = {1.0f, 1.5f, 1.4f};
    unsigned long long rng = 3;
    for (int i = 0; i < 100; i++) assert_int_equal(skv_sample_logits(x, 3, 1e-4f, &rng), 1);
}

/* Speculative sampling: draft x ~ q, keep it or take the residual draw; the result must be
 * distributed as p for any q, including a q that misses part of p's support and one equal
 * to p (nothing is ever rejected then). */
static void check_spec(const float *p, const float *q, int V, int n, unsigned long long seed, int *rejected) {
    int count[8] = {0};
    unsigned long long rng = seed;
    *rejected = 0;
    for (int i = 0; i < n; i++) {
        float pp[8];
        for (int v = 0; v < V; v++) pp[v] = p[v];
        int x = skv_sample_probs(q, V, &rng), acc;
        assert_true(q[x] > 0);
        int t = skv_spec_accept(pp, q, V, x, &rng, &acc);
        assert_true(t >= 0 && t < V);
        if (acc) assert_int_equal(t, x);
        *rejected += !acc;
        count[t]++;
    }
    for (int v = 0; v < V; v++) assert_true(fabs(count[v] / (double)n - p[v]) < 0.01);
}

static void test_spec_accept(void **st) {
    (void)st;
    const float p[5] = {0.4f, 0.3f, 0.15f, 0.1f, 0.05f};
    const float flat[5] = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
    const float skew[5] = {0.05f, 0.05f, 0.1f, 0.0f, 0.8f};   /* no mass on token 3 */
    int rej;
    check_spec(p, flat, 5, 40000, 11, &rej);
    assert_true(rej > 40000 / 10);   /* the rule was exercised: 1 - sum(min(p, q)) = 0.25 */
    check_spec(p, skew, 5, 40000, 12, &rej);
    assert_true(rej > 40000 / 2);
    check_spec(p, p, 5, 20000, 13, &rej);
    assert_int_equal(rej, 0);
    /* softmax at a temperature, then the inverse-CDF draw: the frequencies of softmax(x / T) */
    const float x[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    float sm[4];
    skv_softmax_temp(x, 4, 1.0f, sm);
    for (int v = 0; v < 4; v++) assert_true(fabs(sm[v] - expf(x[v])) < 1e-6);
    skv_softmax_temp(x, 4, 2.0f, sm);
    double z = 0;
    for (int v = 0; v < 4; v++) z += exp(x[v] / 2);
    for (int v = 0; v < 4; v++) assert_true(fabs(sm[v] - exp(x[v] / 2) / z) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_first),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_tiny_temperature),
        cmocka_unit_test(test_spec_accept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
