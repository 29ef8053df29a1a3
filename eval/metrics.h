/* metrics.h: the fidelity metrics of the evaluation harness (evaluation.md section 1):
 * per decode step, compare the policy's next-token distribution with the full cache's
 * (both given as logits over the vocabulary) and accumulate
 *   KL(full || policy) in nats (mean and p95 over steps), top-1 agreement,
 *   NLL of the true next token under each (perplexity = exp(mean NLL)).
 * Also the answer extraction and normalisation of the task metrics (exact match). */
#ifndef SKV_EVAL_METRICS_H
#define SKV_EVAL_METRICS_H
#include <stdbool.h>
#include <stddef.h>

/* One step's comparison of reference logits r (V) and policy logits q (V); target = the
 * true next token (or -1: no NLL). */
typedef struct {
    double kl;            /* KL(softmax(r) || softmax(q)) >= 0, nats */
    bool top1;            /* argmax r == argmax q (first maximum) */
    double nll_ref, nll_pol;   /* -log p(target) under r and q */
} skv_step_cmp;

/* log(sum exp(x)) in double, stable. */
double skv_logsumexp(const float *x, int V);
void skv_compare_logits(const float *r, const float *q, int V, int target, skv_step_cmp *out);

/* Accumulator over steps. */
typedef struct {
    int n, cap;
    double *kl;           /* (cap) per-step KL, for the quantile */
    double sum_kl, sum_nll_ref, sum_nll_pol;
    int top1;
} skv_fid_acc;

int skv_fid_add(skv_fid_acc *a, const skv_step_cmp *c);   /* -1 + error on allocation */
void skv_fid_free(skv_fid_acc *a);

typedef struct {
    int steps;
    double kl_mean, kl_p95, kl_max;
    double top1;          /* fraction of steps in [0, 1] */
    double ppl_ref, ppl_pol, ppl_ratio;
} skv_fid_summary;

/* Nearest-rank quantile q in (0, 1] of v (n values; v is sorted in place). 0 when n = 0. */
double skv_quantile(double *v, int n, double q);
void skv_fid_summarize(skv_fid_acc *a, skv_fid_summary *s);

/* ---- answers ---- */
/* Normalise a number's text: drop ',', '$', a trailing '.', trailing zeros after a decimal
 * point ("72.00" -> "72"); returns false if s holds no digits. out: capacity n. */
bool skv_norm_number(const char *s, size_t len, char *out, size_t n);
/* GSM8K: the number after the last "The answer is" (or "answer is"), else the last
 * number of the text. false if none. */
bool skv_extract_gsm8k(const char *text, char *out, size_t n);
/* The gold answer of a GSM8K solution: the text after "####". */
bool skv_gsm8k_gold(const char *answer, char *out, size_t n);
/* BBH: the text after the first "So the answer is " up to the final '.' / newline,
 * trimmed; else the text before the first newline, trimmed. */
bool skv_extract_bbh(const char *text, char *out, size_t n);
/* BBH exact match: equal after trimming; "(B)" also matches "B" and "(B) text". */
bool skv_bbh_match(const char *pred, const char *target);
/* Passkey: the first run of digits in text (up to n-1 characters). */
bool skv_first_digits(const char *text, char *out, size_t n);

/* Needle retrieval (RULER's string_match_all): the fraction of values[0..n) found in text,
 * case-insensitive substrings. 0 when n <= 0. */
double skv_recall_values(const char *text, const char *const *values, int n);

/* ROUGE-L as LongBench scores summaries (metrics.py rouge_score: Rouge().get_scores of the
 * `rouge` package, 1.0.1, its "rouge-l" "f"): both texts split into sentences at every '.'
 * (empty pieces dropped), each sentence's whitespace (Python's str.split) collapsed to single
 * spaces, words split at ' '; summary-level LCS: the union over every (reference sentence,
 * candidate sentence) pair of the words on the LCS the package reconstructs, counted as a
 * set; m, n the distinct words of the reference and the candidate; R = |union| / m,
 * P = |union| / n, F = 2PR / (P + R + 1e-8). A text with no sentence scores 0 (the package
 * raises, LongBench returns 0). f/p/r may be NULL. 0, or -1 + error (out of memory, a
 * sentence pair too long for the LCS table). */
int skv_rouge_l(const char *hyp, const char *ref, double *f, double *p, double *r);

#endif
