/* fuzz_calib.c: libFuzzer target for calibration files (calibrate/calib.c over
 * runtime/format/secfile.c): skv_calib_read, then what mapgen does with a file that loads:
 * summary, means per metric, building a profile from the sums.
 * Input encoding: see fuzz_secfile.h (byte 0 selects raw-with-repaired-checksums or built). */
#include "fuzz_secfile.h"
#include "calibrate/calib.h"
#include "runtime/format/profile.h"
#include "calibrate/mapping.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_null && !(g_null = fopen("/dev/null", "w"))) abort();
    const char *path = fz_make_file("fuzz.skvcalib", "SKVCALIB", SKV_CALIB_VERSION, data, size);
    skv_clear_error();
    skv_calib *c = skv_calib_read(path);
    if (!c) {
        fuzz_expect_error("skv_calib_read");
        return 0;
    }
    skv_calib_print_summary(c, path, g_null);
    size_t nn = (size_t)c->n_llm * (size_t)c->n_slm;
    float *mean = malloc((nn ? nn : 1) * sizeof(float)), *sd = malloc((nn ? nn : 1) * sizeof(float));
    if (!mean || !sd) abort();
    for (int m = 0; m < SKV_METRIC_COUNT; m++) {
        int have = skv_calib_metric_index(c, m) >= 0;
        if ((skv_calib_mean(c, m, mean, sd) == 0) != have) abort();
    }
    free(mean);
    free(sd);
    for (int i = 0; i < c->n_metrics; i++) {
        skv_clear_error();
        skv_profile *p = skv_profile_build(c, c->metric_ids[i], 0.05, i, "fuzz");
        if (!p) { fuzz_expect_error("skv_profile_build"); continue; }
        skv_profile_print_loaded(p, g_null);
        skv_profile_free(p);
    }
    skv_calib_free(c);
    return 0;
}
