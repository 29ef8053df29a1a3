/* calib_fixtures.h: small fixtures shared by the calibration and profile tests: a
 * deterministic LCG (g_rng / frand) and a synthetic model fingerprint. */
#ifndef SKV_TEST_CALIB_FIXTURES_H
#define SKV_TEST_CALIB_FIXTURES_H
#include <stdint.h>
#include "calibrate/calib.h"

extern uint64_t g_rng;     /* LCG state: tests seed it before drawing */
float frand(void);         /* next value in [0, 1) */
/* Fingerprint of an imaginary model: L layers of H heads (1 KV head, head_dim 16),
 * weight hash wh. */
skv_model_fp mkfp(const char *arch, int L, int H, const char *wh);

#endif
