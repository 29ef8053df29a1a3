/* test_align.c: the byte-span alignment of two tokenizations (calibrate/align.h) on hand-made
 * token streams (identity, splits, merges, insertions, specials, split UTF-8, empty input),
 * and the cross-tokenizer attention hook (calibrate/xtok.h): with every position matched it
 * gives the kernel's own column sums and last rows; with a subset, every matched row is a
 * distribution over matched keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "calibrate/align.h"
#include "calibrate/xtok.h"
#include "runtime/engine/forward.h"
#include "common/util.h"
#include "tests/support/tiny_model.h"

#define T(s) {(s), sizeof(s) - 1, false}
#define SPECIAL(s) {(s), sizeof(s) - 1, true}

static int run(const skv_align_tok *a, int na, const skv_align_tok *b, int nb, int *pa, int *pb) {
    int n = skv_align(a, na, b, nb, pa, pb);
    assert_true(n >= 0);
    for (int k = 1; k < n; k++) { assert_true(pa[k] > pa[k - 1]); assert_true(pb[k] > pb[k - 1]); }
    return n;
}

static void test_identity(void **state) {
    (void)state;
    skv_align_tok a[] = {SPECIAL("<s>"), T("The"), T(" river"), T(" town"), T("\xc3"), T("\xa9"), T(".")};
    int pa[8], pb[8];
    int n = run(a, 7, a, 7, pa, pb);
    assert_int_equal(n, 7);   /* the same tokens, specials and partial UTF-8 included */
    for (int k = 0; k < n; k++) { assert_int_equal(pa[k], k); assert_int_equal(pb[k], k); }
}

static void test_split_merge_insert(void **state) {
    (void)state;
    /* text " unbelievable river, town" */
    skv_align_tok a[] = {T(" un"), T("believ"), T("able"), T(" river"), T(","), T(" town")};
    skv_align_tok b[] = {SPECIAL("<|bos|>"), T(" unbelievable"), T(" ri"), T("ver,"), T(" town")};
    int pa[8], pb[8];
    int n = run(a, 6, b, 5, pa, pb);
    assert_int_equal(n, 1);   /* only " town" is split alike */
    assert_int_equal(pa[0], 5);
    assert_int_equal(pb[0], 4);
    /* merges on one side, splits on the other, with matches in between */
    skv_align_tok c[] = {T("a"), T("b"), T("cd"), T("e"), T("fgh"), T("i")};
    skv_align_tok d[] = {T("ab"), T("cd"), T("e"), T("f"), T("gh"), T("i")};
    n = run(c, 6, d, 6, pa, pb);
    assert_int_equal(n, 3);
    int wa[] = {2, 3, 5}, wb[] = {1, 2, 5};
    for (int k = 0; k < 3; k++) { assert_int_equal(pa[k], wa[k]); assert_int_equal(pb[k], wb[k]); }
}

static void test_specials_and_utf8(void **state) {
    (void)state;
    /* both start with a BOS of the same text: matched; a BOS of another text: not */
    skv_align_tok a[] = {SPECIAL("<|endoftext|>"), T("caf"), T("\xc3"), T("\xa9"), T(" ok")};
    skv_align_tok b[] = {SPECIAL("<|endoftext|>"), T("caf"), T("\xc3\xa9"), T(" ok")};
    skv_align_tok c[] = {SPECIAL("<s>"), T("caf\xc3\xa9"), T(" ok")};
    int pa[8], pb[8];
    int n = run(a, 5, b, 4, pa, pb);
    assert_int_equal(n, 3);   /* BOS, "caf", " ok"; the character split in two is not */
    assert_int_equal(pa[2], 4);
    assert_int_equal(pb[2], 3);
    n = run(a, 5, c, 3, pa, pb);
    assert_int_equal(n, 1);   /* only " ok" */
    assert_int_equal(pa[0], 4);
    assert_int_equal(pb[0], 2);
    /* a special inside the text is zero-width: the tokens around it still match */
    skv_align_tok d[] = {T("x"), SPECIAL("<sep>"), T("y")};
    skv_align_tok e[] = {T("x"), T("y")};
    n = run(d, 3, e, 2, pa, pb);
    assert_int_equal(n, 2);
    assert_int_equal(pa[1], 2);
    assert_int_equal(pb[1], 1);
    /* equal spans with different bytes (texts that differ) do not match */
    skv_align_tok f[] = {T("ab"), T("cd")}, g[] = {T("ab"), T("ce")};
    assert_int_equal(run(f, 2, g, 2, pa, pb), 1);
}

static void test_empty_and_bad(void **state) {
    (void)state;
    skv_align_tok a[] = {T("x")};
    int pa[2], pb[2];
    assert_int_equal(skv_align(NULL, 0, NULL, 0, NULL, NULL), 0);
    assert_int_equal(skv_align(a, 1, NULL, 0, pa, pb), 0);
    assert_int_equal(skv_align(NULL, 0, a, 1, pa, pb), 0);
    assert_int_equal(skv_align(a, -1, a, 1, pa, pb), -1);
    assert_non_null(strstr(skv_last_error(), "align"));
    assert_int_equal(skv_align(a, 1, a, 1, NULL, pb), -1);
    skv_align_tok z[] = {{"", 0, false}};   /* a zero-length text token matches nothing */
    assert_int_equal(skv_align(z, 1, z, 1, pa, pb), 0);
}

/* the hook with every position matched equals the kernel's column sums and last rows */
static void test_xtok_identity(void **state) {
    (void)state;
    skv_model *m = tiny_model_load(SKV_ARCH_QWEN2, 11, "align");
    if (!m) fail_msg("%s", skv_last_error());
    const int Tn = 24, L = m->cfg.n_layer, H = m->cfg.n_head;
    int tok[24], pos[24];
    for (int t = 0; t < Tn; t++) { tok[t] = (t * 37 + 5) % m->cfg.vocab; pos[t] = t; }
    skv_state *s = skv_state_new(m, Tn, Tn, false);
    float *cs = calloc((size_t)L * H * Tn, sizeof(float)), *lr = calloc((size_t)L * H * Tn, sizeof(float));
    float *csv[8], *lrv[8];
    assert_non_null(s); assert_non_null(cs); assert_non_null(lr);
    for (int l = 0; l < L; l++) { csv[l] = cs + (size_t)l * H * Tn; lrv[l] = lr + (size_t)l * H * Tn; }
    skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .colsum = csv, .lastrow = lrv};
    assert_int_equal(skv_forward(s, tok, Tn, &fo), 0);
    skv_xtok_side x;
    if (skv_xtok_init(&x, m, Tn, true)) fail_msg("%s", skv_last_error());
    assert_int_equal(skv_xtok_forward(&x, tok, Tn, pos, Tn), 0);
    assert_int_equal(skv_xtok_pack(&x, 0, false), 0);
    double worst = 0;
    for (int lh = 0; lh < L * H; lh++)
        for (int k = 0; k < Tn; k++) {
            double e1 = fabs(x.F[(size_t)lh * Tn + k] - cs[(size_t)lh * Tn + k]);
            double e2 = fabs(x.R[(size_t)lh * Tn + k] - lr[(size_t)lh * Tn + k]);
            if (e1 > worst) worst = e1;
            if (e2 > worst) worst = e2;
        }
    assert_true(worst < 1e-4);
    /* packing drops sinks and normalises by the matched queries that saw each key */
    assert_int_equal(skv_xtok_pack(&x, 4, true), 0);
    assert_float_equal(x.F[3], cs[7] / (float)(Tn - 7), 1e-4);
    assert_int_equal(skv_xtok_pack(&x, Tn, false), -1);   /* nothing left */
    skv_xtok_free(&x);
    free(cs); free(lr);
    skv_state_free(s);
    skv_model_free(m);
}

/* with a subset matched, each matched row is renormalised over the matched keys it sees */
static void test_xtok_subset(void **state) {
    (void)state;
    skv_model *m = tiny_model_load(SKV_ARCH_QWEN2, 12, "align2");
    if (!m) fail_msg("%s", skv_last_error());
    const int Tn = 30, L = m->cfg.n_layer, H = m->cfg.n_head;
    int tok[30], pos[30], M = 0;
    for (int t = 0; t < Tn; t++) tok[t] = (t * 53 + 1) % m->cfg.vocab;
    for (int t = 1; t < Tn; t += 3) pos[M++] = t;
    skv_xtok_side x;
    if (skv_xtok_init(&x, m, Tn, true)) fail_msg("%s", skv_last_error());
    assert_int_equal(skv_xtok_forward(&x, tok, Tn, pos, M), 0);
    assert_int_equal(skv_xtok_pack(&x, 0, false), 0);
    for (int lh = 0; lh < L * H; lh++) {
        double sum = 0, rsum = 0;
        for (int b = 0; b < M; b++) { sum += x.F[(size_t)lh * M + b]; rsum += x.R[(size_t)lh * M + b]; }
        assert_float_equal(sum, M, 1e-3);    /* M rows, each summing to 1 */
        assert_float_equal(rsum, 1, 1e-5);
        assert_float_equal(x.F[(size_t)lh * M + M - 1], x.R[(size_t)lh * M + M - 1], 1e-6);   /* last key: last row only */
    }
    int bad[] = {3, 2};   /* not ascending */
    assert_int_equal(skv_xtok_forward(&x, tok, Tn, bad, 2), -1);
    assert_int_equal(skv_xtok_forward(&x, tok, Tn + 1, pos, M), -1);   /* over capacity */
    skv_xtok_free(&x);
    skv_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_split_merge_insert),
        cmocka_unit_test(test_specials_and_utf8),
        cmocka_unit_test(test_empty_and_bad),
        cmocka_unit_test(test_xtok_identity),
        cmocka_unit_test(test_xtok_subset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
