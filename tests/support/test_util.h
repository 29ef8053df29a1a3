/* test_util.h: small helpers shared by the session tests (test_session, test_batch,
 * test_kvlog, test_session_cuda_host, test_cuda_session). */
#ifndef SKV_TEST_UTIL_H
#define SKV_TEST_UTIL_H
#include <stdint.h>
#include "runtime/model/model.h"
#include "runtime/session/session.h"

/* index of the largest of x[0..n-1] (the first on ties) */
int test_argmax(const float *x, int n);
/* n pseudo-random token ids below vocab from seed (an LCG: the same ids every run) */
void test_prompt(int *toks, int n, int vocab, uint32_t seed);
/* LLM head -> SLM head identity map [n_layer * n_head] for a self pair; malloc'd, NULL when
 * out of memory */
int *test_identity_map(const skv_model *m);
/* Session options of a self pair (m is LLM and SLM, map its identity map): policy at
 * budget, max_ctx 512, prefill blocks of 64, the default fp16 cache. */
skv_session_opts test_self_pair_opts(const skv_model *m, const char *policy, double budget, const int *map);

#endif
