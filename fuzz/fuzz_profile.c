/* fuzz_profile.c: libFuzzer target for profile files (runtime/format/profile.c over
 * runtime/format/secfile.c): skv_profile_load, then the read-side uses of a profile that loads:
 * printing, matched means, similarity lookup and the model check against its own
 * fingerprints. Input encoding: see fuzz_secfile.h. */
#include "fuzz_secfile.h"
#include "runtime/format/profile.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_null && !(g_null = fopen("/dev/null", "w"))) abort();
    const char *path = fz_make_file("fuzz.skvprof", "SKVPROF\0", SKV_PROFILE_VERSION, data, size);
    skv_clear_error();
    skv_profile *p = skv_profile_load(path);
    if (!p) {
        fuzz_expect_error("skv_profile_load");
        return 0;
    }
    skv_profile_print_loaded(p, g_null);
    for (int m = 0; m < SKV_METRIC_COUNT; m++) {
        (void)skv_profile_mean_matched(p, m);
        if ((skv_profile_sim(p, m) != NULL) != (skv_profile_metric_index(p, m) >= 0)) abort();
    }
    for (int i = 0; i < p->n_llm; i++)
        if (p->map[i] < 0 || p->map[i] >= p->n_slm || p->map_full[i] < 0 || p->map_full[i] >= p->n_slm) abort();
    if (p->depth < 1 || p->depth > p->slm.n_layer) abort();
    if (skv_profile_check_models(p, &p->slm, &p->llm) != 0) abort();
    skv_profile_free(p);
    return 0;
}
