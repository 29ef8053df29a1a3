/* bootstrap.h: confidence intervals for the evaluation's reports (evaluation issue: "95 %
 * bootstrap intervals over documents / problems"). A percentile bootstrap of a weighted mean
 * sum(w x) / sum(w) over n items: each replicate draws n items with replacement. For an
 * accuracy x is 0/1 and w 1; for a paired difference x is the per-item difference; for a
 * fidelity cell x is a document's mean KL and w its steps. Deterministic for a seed. Also the
 * Wilson interval of a single accuracy. */
#ifndef SKV_EVAL_BOOTSTRAP_H
#define SKV_EVAL_BOOTSTRAP_H
#include <stdint.h>

/* The (1 - alpha) interval [*lo, *hi] from reps replicates (w NULL: every weight 1).
 * n < 2 gives the point estimate for both ends. -1 + error when out of memory or on bad
 * arguments (reps < 10, alpha outside (0, 1)). */
int skv_bootstrap_ci(const double *x, const double *w, int n, int reps, double alpha, uint64_t seed,
                     double *lo, double *hi);

/* The 95 % Wilson score interval of k successes in n trials (an accuracy's own interval: unlike a
 * bootstrap it has a width at 0 / n and n / n). n < 1: [0, 1]. */
void skv_wilson_ci(int k, int n, double *lo, double *hi);

#endif
