/* calib_fixtures.c: see calib_fixtures.h. */
#include "calib_fixtures.h"
#include <stdio.h>
#include <string.h>

uint64_t g_rng;

float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f;
}

skv_model_fp mkfp(const char *arch, int L, int H, const char *wh) {
    skv_model_fp fp;
    memset(&fp, 0, sizeof fp);
    snprintf(fp.arch, sizeof fp.arch, "%s", arch);
    snprintf(fp.name, sizeof fp.name, "%s-%dx%d", arch, L, H);
    fp.n_layer = L; fp.n_head = H; fp.n_kv_head = 1; fp.head_dim = 16; fp.dim = 16 * H; fp.vocab = 1000;
    snprintf(fp.tokenizer_hash, sizeof fp.tokenizer_hash, "0123456789abcdef");
    snprintf(fp.weight_hash, sizeof fp.weight_hash, "%s", wh);
    return fp;
}
